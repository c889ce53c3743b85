/* Calls outside a run: no satrun, no role. Each call fails with a status
 * (or NULL) and a message that says what to do; none crashes or hangs. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>

#include "testing.h"

#define NO_RUN "no SAT run is going on"

static void role(sat_bootstrap_t *b) { (void)b; }

static void chunk_handler(sat_chunk_t *c, void *p) {
    (void)c;
    (void)p;
}

static void signal_handler(uint32_t id, void *p) {
    (void)id;
    (void)p;
}

int main(int argc, char **argv) {
    char buf[64] = {0};
    void *data = buf;
    size_t size = 42;

    /* Status strings: static, distinct, never NULL, for every status up to
     * the last (SAT_ERR_PROCESS_LOST), and none past it. */
    for (int s = 0; s >= SAT_ERR_PROCESS_LOST; s--) {
        const char *text = sat_status_string(s);
        CHECK_TRUE(text != NULL && text[0] != '\0' && strcmp(text, "unknown status") != 0,
                   "status %d has no description", s);
        for (int t = 0; t > s; t--) {
            CHECK_TRUE(strcmp(text, sat_status_string(t)) != 0, "statuses %d and %d read the same",
                       s, t);
        }
    }
    CHECK_TRUE(strcmp(sat_status_string(-1000), "unknown status") == 0, "-1000");
    CHECK_TRUE(strcmp(sat_status_string(SAT_ERR_PROCESS_LOST - 1), "unknown status") == 0,
               "a status past SAT_ERR_PROCESS_LOST has a description: add it to this test");
    CHECK_TRUE(strcmp(sat_status_string(SAT_ERR_ARGUMENT), sat_status_string(-1)) == 0, "enum");

    /* The version macros and sat_version() agree with each other. */
    char version[64];
    snprintf(version, sizeof version, "%d.%d.%d", SAT_VERSION_MAJOR, SAT_VERSION_MINOR,
             SAT_VERSION_PATCH);
    CHECK_TRUE(strcmp(sat_version(), version) == 0, "sat_version() is %s, the header says %s",
               sat_version(), version);

    /* No error yet: the last error is empty, not NULL. */
    CHECK_TRUE(sat_last_error() != NULL && sat_last_error()[0] == '\0', "a fresh last error");

    /* Every call needing the run says there is none. */
    CHECK_NULL(sat_malloc(NULL, 1, 8), NO_RUN);
    CHECK_NULL(sat_malloc(sat_home_only(), 1, 8), NO_RUN);
    CHECK_NULL(sat_lookup(NULL, 1, 1), NO_RUN);
    CHECK_NULL(sat_map(NULL, 1, sizeof buf, buf), NO_RUN);
    unsigned long ids[] = {1, 2}, sizes[] = {8};
    sat_ulong_list_t idl = {2, ids}, sizel = {1, sizes};
    CHECK_NULL(sat_malloc_lst(NULL, &idl, &sizel), NO_RUN);
    CHECK_NULL(sat_lookup_lst(NULL, &idl), NO_RUN);
    CHECK_STATUS(sat_rendezvous(1), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_wakeup(1), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_barrier(1, 1), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_signal_raise(1), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_run_handlers(NULL), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_signal_subscribe(1, signal_handler, NULL), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_signal_unsubscribe(1), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_init_symbol_table(), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_write_symbol("name", "v", 1), SAT_ERR_USAGE, NO_RUN);
    CHECK_STATUS(sat_read_symbol("name", &data, &size), SAT_ERR_USAGE, NO_RUN);
    CHECK_TRUE(data == buf && size == 42, "out-parameters written on error");
    CHECK_TRUE(sat_rank() == SAT_ERR_USAGE && sat_role() == SAT_ERR_USAGE &&
                   sat_client_count() == SAT_ERR_USAGE && sat_server_count() == SAT_ERR_USAGE,
               "topology queries outside a run");

    /* NULL arguments: an argument error first. */
    CHECK_STATUS(sat_read(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_write(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_readwrite(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_release(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_abort(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_put(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_get(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_subscribe(NULL, chunk_handler, NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_unsubscribe(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_write_symbol(NULL, "v", 1), SAT_ERR_ARGUMENT, "name is NULL");
    CHECK_STATUS(sat_read_symbol("name", NULL, &size), SAT_ERR_ARGUMENT, "NULL");
    CHECK_STATUS(sat_signal_subscribe(1, NULL, NULL), SAT_ERR_ARGUMENT, "handler is NULL");
    CHECK_NULL(sat_map(NULL, 1, 8, NULL), "data is NULL");
    CHECK_NULL(sat_malloc_lst(NULL, NULL, &sizel), "idlst is NULL");
    sat_free(NULL);

    /* The bootstrap: bad arguments, then no rank outside a launcher. */
    sat_role_fn roles[2] = {NULL, role};
    CHECK_STATUS(sat_bootstrap(NULL, 2, NULL, argc, argv), SAT_ERR_ARGUMENT, "roles is NULL");
    CHECK_STATUS(sat_bootstrap(roles, 2, buf, argc, argv), SAT_ERR_ARGUMENT, "reserved");
    CHECK_STATUS(sat_bootstrap(roles, 2, NULL, argc, argv), SAT_ERR_BOOTSTRAP,
                 "does not know its rank");
    /* After a failed bootstrap the process is still outside a run. */
    CHECK_NULL(sat_malloc(NULL, 1, 8), NO_RUN);

    return testing_done("outside");
}
