/* A C process attached to a running SAT service (sat_connect, no satrun):
 *   service produce sat://SECRET@HOST:PORT   writes a chain of int32 values
 *                                            and a symbol, then detaches;
 *   service consume sat://SECRET@HOST:PORT   attaches later and checks both.
 * Both first try HOST:PORT alone (SAT_SECRET unset): the service refuses.
 * The Python tests consume what the C producer left, too. */
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#include <stdint.h>
#include <stdlib.h>

#include "testing.h"

#define CHAIN_ID 500u
#define COUNT 100000 /* int32 values: 400,000 bytes, several chunks */
#define SYMBOL "c-producer"
#define GREETING "written by a C process"

static int32_t value_at(int i) { return (int32_t)(i * 7 + 3); }

/* The chain's handle, used again after sat_detach. */
static sat_chunk_t *kept;

static void produce(void) {
    sat_chunk_t *c =
        CHECK_CHUNK(sat_malloc(sat_home_based_mesi(), CHAIN_ID, COUNT * sizeof(int32_t)));
    if (c == NULL) return;
    CHECK_OK(sat_write(c));
    int32_t *v = (int32_t *)c->data;
    for (int i = 0; i < COUNT; i++) v[i] = value_at(i);
    CHECK_OK(sat_release(c));
    CHECK_OK(sat_write_symbol(SYMBOL, GREETING, sizeof GREETING - 1));
    kept = c;
}

static void consume(void) {
    sat_chunk_t *c = CHECK_CHUNK(sat_lookup(sat_home_based_mesi(), CHAIN_ID, 1));
    if (c == NULL) return;
    /* LOOKUP of the first chunk tells the chain's first size only: look
     * the whole chain up from the size the producer gave it. */
    uint32_t n = (uint32_t)((COUNT * sizeof(int32_t) + c->size - 1) / c->size);
    c = CHECK_CHUNK(sat_lookup(sat_home_based_mesi(), CHAIN_ID, n));
    if (c == NULL) return;
    CHECK_TRUE(c->size == COUNT * sizeof(int32_t), "the chain has %zu bytes", (size_t)c->size);
    CHECK_OK(sat_read(c));
    const int32_t *v = (const int32_t *)c->data;
    int bad = -1;
    for (int i = 0; i < COUNT && bad < 0; i++)
        if (v[i] != value_at(i)) bad = i;
    CHECK_TRUE(bad < 0, "value %d is %d, not %d", bad, bad < 0 ? 0 : v[bad],
               bad < 0 ? 0 : value_at(bad));
    CHECK_OK(sat_release(c));
    kept = c;
    void *data = NULL;
    size_t size = 0;
    CHECK_OK(sat_read_symbol(SYMBOL, &data, &size));
    CHECK_TRUE(size == sizeof GREETING - 1 && memcmp(data, GREETING, size) == 0,
               "the symbol holds %zu other bytes", size);
    sat_free(data);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "produce") != 0 && strcmp(argv[1], "consume") != 0)) {
        fprintf(stderr, "usage: service produce|consume sat://SECRET@HOST:PORT\n");
        return 2;
    }
    CHECK_STATUS(sat_connect(NULL), SAT_ERR_ARGUMENT, "NULL");
    /* Without the secret, the service refuses before giving a slot. */
    const char *host_port = strchr(argv[2], '@');
    CHECK_TRUE(host_port != NULL, "%s is not a connection string", "argv[2]");
    if (host_port == NULL) return testing_done(argv[1]);
    unsetenv("SAT_SECRET");
    CHECK_STATUS(sat_connect(host_port + 1), SAT_ERR_BOOTSTRAP, "requires a secret");
    CHECK_STATUS(sat_detach(), SAT_ERR_USAGE, "not attached");
    CHECK_OK(sat_connect(argv[2]));
    CHECK_STATUS(sat_connect(argv[2]), SAT_ERR_USAGE, "already attached");
    CHECK_TRUE(sat_rank() > 0, "rank %d", sat_rank());
    if (strcmp(argv[1], "produce") == 0)
        produce();
    else
        consume();
    CHECK_OK(sat_detach());
    /* Detached: calls fail with a message, handles of the session are
     * refused (never followed), and attaching again works. */
    CHECK_TRUE(sat_rank() < 0, "sat_rank() after sat_detach gave %d", sat_rank());
    CHECK_STATUS(sat_read(kept), SAT_ERR_USAGE, "not valid");
    CHECK_OK(sat_connect(argv[2]));
    /* A new session does not revive the old session's handles. */
    CHECK_STATUS(sat_read(kept), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_chunk_free(kept), SAT_ERR_USAGE, "not valid");
    sat_chunk_t *again = CHECK_CHUNK(sat_lookup(NULL, CHAIN_ID, 1));
    CHECK_TRUE(again != kept || again == NULL, "the new session's handle is the old one");
    CHECK_OK(sat_detach());
    return testing_done(argv[1]);
}
