/* Misuse inside a run: every call given NULL, a bad size, or used out of
 * order fails with a status (or NULL) and a message, never a crash or a
 * hang, and the API works normally afterwards.
 *
 *   SAT_LOOKUP_TIMEOUT=1 satrun -n 3 -- ./errors
 *
 * (no topology: rank 0 is the server, ranks 1 and 2 clients of role 1).
 * SAT_LOOKUP_TIMEOUT bounds the LOOKUP and readSymbol of what nobody
 * writes. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>

#include "testing.h"

#define RDV_ALLOCATED 1
#define BAR_END 2

static void chunk_handler(sat_chunk_t *c, void *p) {
    (void)c;
    (void)p;
}

static void *fresh_thread(void *arg) {
    (void)arg;
    /* The last error is per thread: this one has none yet. */
    return (void *)(uintptr_t)(sat_last_error() != NULL && sat_last_error()[0] == '\0');
}

static void null_arguments(void) {
    size_t size = 42;
    char sentinel[1];
    void *data = sentinel;
    CHECK_STATUS(sat_read(NULL), SAT_ERR_ARGUMENT, "READ: chunk is NULL");
    CHECK_STATUS(sat_write(NULL), SAT_ERR_ARGUMENT, "WRITE: chunk is NULL");
    CHECK_STATUS(sat_readwrite(NULL), SAT_ERR_ARGUMENT, "READWRITE: chunk is NULL");
    CHECK_STATUS(sat_release(NULL), SAT_ERR_ARGUMENT, "RELEASE: chunk is NULL");
    CHECK_STATUS(sat_put(NULL), SAT_ERR_ARGUMENT, "PUT: chunk is NULL");
    CHECK_STATUS(sat_get(NULL), SAT_ERR_ARGUMENT, "GET: chunk is NULL");
    CHECK_STATUS(sat_subscribe(NULL, chunk_handler, NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_unsubscribe(NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    CHECK_STATUS(sat_signal_subscribe(3, NULL, NULL), SAT_ERR_ARGUMENT, "handler is NULL");
    CHECK_STATUS(sat_write_symbol(NULL, "v", 1), SAT_ERR_ARGUMENT, "name is NULL");
    CHECK_STATUS(sat_write_symbol("errors/x", NULL, 4), SAT_ERR_ARGUMENT, "data is NULL");
    /* An empty value may come with NULL data (sat.h), and reads back empty. */
    CHECK_OK(sat_write_symbol("errors/empty", NULL, 0));
    void *empty_value = sentinel;
    size_t empty_size = 42;
    CHECK_OK(sat_read_symbol("errors/empty", &empty_value, &empty_size));
    CHECK_TRUE(empty_size == 0, "an empty value reads back with size 0");
    sat_free(empty_value);
    CHECK_STATUS(sat_read_symbol(NULL, &data, &size), SAT_ERR_ARGUMENT, "name is NULL");
    CHECK_STATUS(sat_read_symbol("errors/x", NULL, &size), SAT_ERR_ARGUMENT, "NULL");
    CHECK_STATUS(sat_read_symbol("errors/x", &data, NULL), SAT_ERR_ARGUMENT, "NULL");
    CHECK_TRUE(data == sentinel && size == 42, "out-parameters written on error");

    unsigned long ids[] = {300, 301}, sizes[] = {8};
    sat_ulong_list_t idl = {2, ids}, sizel = {1, sizes};
    sat_ulong_list_t empty = {0, ids}, no_items = {2, NULL};
    CHECK_NULL(sat_malloc_lst(NULL, NULL, &sizel), "idlst is NULL or empty");
    CHECK_NULL(sat_malloc_lst(NULL, &idl, NULL), "sizelst is NULL or empty");
    CHECK_NULL(sat_malloc_lst(NULL, &empty, &sizel), "idlst is NULL or empty");
    CHECK_NULL(sat_malloc_lst(NULL, &no_items, &sizel), "idlst is NULL or empty");
    CHECK_NULL(sat_lookup_lst(NULL, NULL), "idlst is NULL or empty");
    CHECK_NULL(sat_lookup(NULL, 300, 0), "nbchunks is 0");
    CHECK_NULL(sat_map(NULL, 310, 8, NULL), "data is NULL");
    CHECK_NULL(sat_map(NULL, 310, 0, sentinel), "size is 0");
    sat_free(NULL);
}

static void misuse(int idx) {
    char name[300];
    size_t size = 42;
    void *data = name;
    sat_chunk_t *c = CHECK_CHUNK(sat_malloc(NULL, 400 + (uint64_t)idx, 64));
    if (c == NULL) {
        return;
    }
    CHECK_TRUE(c->id == 400 + (uint64_t)idx && c->size == 64 && c->nchunks == 1 && c->data != NULL,
               "the chunk's fields");
    CHECK_NULL(sat_malloc(NULL, 410, 0), "");
    /* The same chain again is the same handle; another size or protocol in
       the same process is an error, with its status. */
    CHECK_TRUE(sat_malloc(NULL, 400 + (uint64_t)idx, 64) == c, "MALLOC again returns the chain");
    CHECK_NULL(sat_malloc(NULL, 400 + (uint64_t)idx, 128), "already allocated that chain");
    CHECK_TRUE(sat_last_status() == SAT_ERR_USAGE, "the status of a NULL return");
    CHECK_NULL(sat_malloc(sat_home_only(), 400 + (uint64_t)idx, 64), "already allocated that chain");

    /* Scopes out of order. */
    CHECK_STATUS(sat_release(c), SAT_ERR_USAGE, "RELEASE");
    CHECK_OK(sat_write(c));
    CHECK_STATUS(sat_write(c), SAT_ERR_USAGE, "");
    CHECK_STATUS(sat_read(c), SAT_ERR_USAGE, "");
    CHECK_OK(sat_release(c));
    CHECK_STATUS(sat_release(c), SAT_ERR_USAGE, "RELEASE");
    /* A READ inside this thread's READ (or a GET) is acquiring twice too:
       refused, and one RELEASE still ends the scope. */
    CHECK_OK(sat_read(c));
    CHECK_STATUS(sat_read(c), SAT_ERR_USAGE, "RELEASE it first");
    CHECK_STATUS(sat_get(c), SAT_ERR_USAGE, "RELEASE it first");
    CHECK_STATUS(sat_write(c), SAT_ERR_USAGE, "");
    CHECK_OK(sat_release(c));
    CHECK_STATUS(sat_release(c), SAT_ERR_USAGE, "RELEASE");

    /* A chain inside another chain's scope cannot end part of it: RELEASE
       and ABORT of the inner one are refused, end nothing, and the outer
       chain's RELEASE publishes it whole. */
    uint64_t outer_id = 1000 + 10 * (uint64_t)idx;
    sat_chunk_t *outer = CHECK_CHUNK(sat_malloc(NULL, outer_id, 4 * 65536));
    sat_chunk_t *inner = CHECK_CHUNK(sat_lookup(NULL, outer_id + 1, 2));
    if (outer != NULL && inner != NULL) {
        CHECK_OK(sat_write(outer));
        memset(outer->data, 3, outer->size);
        CHECK_STATUS(sat_release(inner), SAT_ERR_USAGE, "in a scope that another chain over it opened");
        CHECK_STATUS(sat_abort(inner), SAT_ERR_USAGE, "in a scope that another chain over it opened");
        memset(outer->data, 2, outer->size);
        CHECK_OK(sat_release(outer));
        CHECK_OK(sat_read(inner));
        CHECK_TRUE(inner->data[0] == 2 && inner->data[inner->size - 1] == 2, "the outer chain's release");
        CHECK_OK(sat_release(inner));
    }

    /* Synchronization and subscriptions out of order. */
    CHECK_STATUS(sat_barrier(9, 0), SAT_ERR_USAGE, "count of 0");
    CHECK_STATUS(sat_unsubscribe(c), SAT_ERR_USAGE, "not subscribed");
    CHECK_OK(sat_subscribe(c, chunk_handler, NULL));
    CHECK_STATUS(sat_subscribe(c, chunk_handler, NULL), SAT_ERR_USAGE, "already subscribed");
    CHECK_OK(sat_unsubscribe(c));
    CHECK_STATUS(sat_signal_unsubscribe(5), SAT_ERR_USAGE, "not subscribed");

    /* LOOKUP checks its consistency argument as MALLOC does (it does not
       use it): a pointer SAT never handed out is an argument error. */
    const sat_consistency_t *bogus = (const sat_consistency_t *)name;
    unsigned long mine = 400 + (unsigned long)idx;
    sat_ulong_list_t one = {1, &mine};
    CHECK_NULL(sat_lookup(bogus, mine, 1), "not one this library hands out");
    CHECK_TRUE(sat_last_status() == SAT_ERR_ARGUMENT, "the status of a bogus consistency");
    CHECK_NULL(sat_lookup_lst(bogus, &one), "not one this library hands out");
    CHECK_TRUE(sat_lookup(sat_home_only(), mine, 1) != NULL, "LOOKUP with a handle SAT gave");

    /* The symbol table's chunks are reached only through the symbol calls:
       a chain over one would let this process overwrite others' symbols. */
    CHECK_NULL(sat_lookup(NULL, 0xFFFFFF0000000000ULL + 5, 1), "reserved for the symbol table");
    CHECK_TRUE(sat_last_status() == SAT_ERR_USAGE, "the status of a reserved LOOKUP");

    /* What nobody allocates or writes: a bounded wait, then an error. */
    CHECK_NULL(sat_lookup(NULL, 123456789, 1), "no process allocated it");
    CHECK_STATUS(sat_read_symbol("errors/nobody writes this", &data, &size), SAT_ERR_TIMEOUT, "");
    CHECK_TRUE(data == name && size == 42, "out-parameters written on error");

    /* Symbol names: 1 to 255 bytes of UTF-8. */
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    CHECK_TRUE(sat_write_symbol(name, "v", 1) < 0, "a 299-byte name");
    CHECK_TRUE(sat_write_symbol("", "v", 1) < 0, "an empty name");
    CHECK_STATUS(sat_write_symbol("bad \xff name", "v", 1), SAT_ERR_ARGUMENT, "not UTF-8");

    /* The last error is per thread. */
    pthread_t t;
    void *fresh = NULL;
    CHECK_TRUE(pthread_create(&t, NULL, fresh_thread, NULL) == 0 && pthread_join(t, &fresh) == 0 &&
                   fresh != NULL,
               "another thread sees an error it did not make");
}

/* The same chunk with another size or protocol than the first MALLOC's. */
static void mismatches(int idx) {
    if (idx == 0) {
        CHECK_CHUNK(sat_malloc(NULL, 600, 64));
        CHECK_OK(sat_wakeup(RDV_ALLOCATED));
    } else {
        CHECK_OK(sat_rendezvous(RDV_ALLOCATED));
        CHECK_NULL(sat_malloc(NULL, 600, 128), "already exists with 64 bytes");
        CHECK_NULL(sat_malloc(sat_home_only(), 600, 64), "already exists");
        /* LOOKUP takes the size from the home. */
        sat_chunk_t *c = CHECK_CHUNK(sat_lookup(NULL, 600, 1));
        CHECK_TRUE(c != NULL && c->size == 64, "LOOKUP's size");
        /* A MALLOC of the looked-up chain is checked as any other: the
           protocol too, which the LOOKUP learned from the home. */
        CHECK_NULL(sat_malloc(sat_home_only(), 600, 64), "already exists with 64 bytes [Home-Based MESI]");
        CHECK_TRUE(sat_malloc(NULL, 600, 64) == c, "a MALLOC as the home has it gives the LOOKUP's handle");
    }
}

/* After all that, the API works. */
static void still_works(int idx) {
    sat_chunk_t *c = CHECK_CHUNK(sat_malloc(NULL, 700 + (uint64_t)idx, 4096));
    if (c == NULL) {
        return;
    }
    CHECK_OK(sat_write(c));
    for (int i = 0; i < 4096; i++) {
        c->data[i] = (char)(i * 7 + idx);
    }
    CHECK_OK(sat_release(c));
    CHECK_OK(sat_read(c));
    int same = 1;
    for (int i = 0; i < 4096; i++) {
        same &= c->data[i] == (char)(i * 7 + idx);
    }
    CHECK_OK(sat_release(c));
    CHECK_TRUE(same, "the data written");
}

static void role(sat_bootstrap_t *b) {
    int idx = (int)b->rank - 1;
    null_arguments();
    misuse(idx);
    mismatches(idx);
    still_works(idx);
    CHECK_OK(sat_barrier(BAR_END, (uint32_t)sat_client_count()));
    char name[64];
    snprintf(name, sizeof name, "errors (rank %u)", b->rank);
    if (testing_done(name) != EXIT_SUCCESS) {
        exit(EXIT_FAILURE); /* a role returns void: exiting is its way to fail */
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "errors: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    /* A process bootstraps once: a second call, the run over, is refused at
       once (it used to try the spent launcher environment, or wait for a
       seed that is gone). */
    status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_ERR_USAGE || strstr(sat_last_error(), "bootstraps once") == NULL) {
        fprintf(stderr, "errors: a second sat_bootstrap gave %s: %s\n", sat_status_string(status),
                sat_last_error());
        return 1;
    }
    return 0;
}
