/* C chains count against the process's <memory capacity>, and a chain out
 * of every scope is evicted in place: chunk->data keeps its address, its
 * memory goes back to the system, and the next scope fetches the data from
 * its home again.
 *
 *   satrun -n 3 --topology capacity_topology.xml -- ./capacity
 *
 * Rank 1 (capacity 16 MiB) writes 8 chains of 8 MiB, then reads each back;
 * rank 2 (no limit) reads them too. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>

#include "testing.h"

#define CHAINS 8
#define CHAIN_BYTES (8u << 20)
#define BASE 5000000u
#define WRITTEN 1

static uint64_t chain_id(int i) { return BASE + (uint64_t)i * 1000u; }

/* Every byte of chain i holds its pattern. */
static int holds(const sat_chunk_t *c, int i) {
    const unsigned char *d = (const unsigned char *)c->data;
    for (size_t k = 0; k < CHAIN_BYTES; k += 4093)
        if (d[k] != (unsigned char)(0x40 + i + k % 7)) return 0;
    return d[CHAIN_BYTES - 1] == (unsigned char)(0x40 + i + (CHAIN_BYTES - 1) % 7);
}

static void writer(void) {
    sat_chunk_t *chains[CHAINS];
    char *where[CHAINS];
    long before = testing_rss_anon_kib();
    for (int i = 0; i < CHAINS; i++) {
        chains[i] = CHECK_CHUNK(sat_malloc(NULL, chain_id(i), CHAIN_BYTES));
        if (chains[i] == NULL) return;
        where[i] = chains[i]->data;
        CHECK_OK(sat_write(chains[i]));
        unsigned char *d = (unsigned char *)chains[i]->data;
        for (size_t k = 0; k < CHAIN_BYTES; k++) d[k] = (unsigned char)(0x40 + i + k % 7);
        CHECK_OK(sat_release(chains[i]));
    }
    long grown = testing_rss_anon_kib() - before;
    printf("RssAnon grew by %ld KiB for %d chains of %u KiB (capacity 16 MiB)\n", grown,
           CHAINS, CHAIN_BYTES / 1024);
    /* Without the capacity the chains would hold 64 MiB. */
    if (testing_rss_shows_frees())
        CHECK_TRUE(grown < 40 * 1024, "8 chains of 8 MiB grew the process by %ld KiB", grown);
    CHECK_OK(sat_barrier(WRITTEN, 2));
    /* Each comes back from its home, where it was. */
    for (int i = 0; i < CHAINS; i++) {
        CHECK_OK(sat_read(chains[i]));
        CHECK_TRUE(chains[i]->data == where[i], "chain %d moved from %p to %p", i,
                   (void *)where[i], (void *)chains[i]->data);
        CHECK_TRUE(holds(chains[i], i), "chain %d lost its data", i);
        CHECK_OK(sat_release(chains[i]));
    }
    /* A chain in a scope is never evicted: two open at once, over capacity
     * with the rest, keep their bytes. */
    CHECK_OK(sat_read(chains[0]));
    CHECK_OK(sat_read(chains[1]));
    for (int i = 2; i < CHAINS; i++) {
        CHECK_OK(sat_read(chains[i]));
        CHECK_OK(sat_release(chains[i]));
    }
    CHECK_TRUE(holds(chains[0], 0) && holds(chains[1], 1), "a chain in a scope was evicted");
    CHECK_OK(sat_release(chains[0]));
    CHECK_OK(sat_release(chains[1]));
}

static void reader(void) {
    CHECK_OK(sat_barrier(WRITTEN, 2));
    for (int i = 0; i < CHAINS; i++) {
        sat_chunk_t *c = CHECK_CHUNK(sat_lookup(NULL, chain_id(i), CHAIN_BYTES / 65536u));
        if (c == NULL) return;
        CHECK_OK(sat_read(c));
        CHECK_TRUE(holds(c, i), "rank 2 read chain %d wrong", i);
        CHECK_OK(sat_release(c));
    }
}

static void role(sat_bootstrap_t *b) {
    if (b->rank == 1)
        writer();
    else
        reader();
    char name[64];
    snprintf(name, sizeof name, "capacity (rank %u)", b->rank);
    if (testing_done(name) != EXIT_SUCCESS) sat_role_failed("a check failed");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        printf("capacity: sat_bootstrap gave %d (%s): %s\n", status, sat_status_string(status),
               sat_last_error());
        return 1;
    }
    return EXIT_SUCCESS;
}
