/* Every built-in consistency protocol through the C ABI, across processes:
 * the same three workloads on chunks of each protocol, every result checked.
 *
 *   satrun -n 5 --topology bindings-tests/topology.xml -- ./protocols
 *
 * Run with SAT_HOST_SEGMENTS=off too: on one host the homes keep versions in
 * host slots, which every protocol reaches the same way; the protocols'
 * own messages are what runs spread over hosts take.
 *
 * - a migratory counter: every client adds one, ROUNDS times, in READWRITE
 *   scopes (from two threads each): no update is lost (with multiple
 *   writers, each client counts in its own 8 bytes of the chunk: writers of
 *   the same bytes would overwrite each other's, by that protocol's rule);
 * - producer-consumer: client 0 writes round r's values in a WRITE scope,
 *   the others read them after a barrier (an update protocol's readers then
 *   hit; with learned communication sets, the chunk is fetched as that
 *   barrier ends from the second round on), and answer in their own chunk,
 *   which client 0 reads;
 * - a private counter per client, written again and again by its owner
 *   (MESI with E: no message to open those scopes), then read by all;
 * - with MESI's E state, bursts: every client writes 20 chunks of its own
 *   round and round, a thousand write scopes that open with no message and
 *   whose write-backs need no answer (such bursts from several processes
 *   once stalled a run over shm; SAT now asks the home after 16).
 *
 * Adaptive chunks (sat_adaptive) run the same workloads: each starts on MESI
 * and its home moves it to another protocol part way through (the counter to
 * home-only or MESI with E, the produced values to learned sets or update,
 * the private counters to MESI with E), with scopes of other threads and
 * processes open or on their way; every result is checked the same.
 *
 * Every client plays role 1; client i (0 to 2) is rank i + 2. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>

#include "testing.h"

#define ROUNDS 30
#define THREADS 2
#define PROTOCOLS 7
#define MULTIPLE_WRITERS 4
/* Chunk ids per protocol p: base + 100 * p. */
#define COUNTER 2000
#define PRODUCED 2001
#define ANSWERS 2010 /* + client */
#define PRIVATE 2020 /* + client */
#define BAR_BASE 50  /* + 10 * p + step */

static uint32_t me, nclients;

static const sat_consistency_t *protocol(int p) {
    switch (p) {
    case 0:
        return sat_home_based_mesi();
    case 1:
        return sat_home_only();
    case 2:
        return sat_home_based_mesi_exclusive();
    case 3:
        return sat_home_based_mesi_update();
    case MULTIPLE_WRITERS:
        return sat_multiple_writers();
    case 5:
        return sat_home_based_mesi_learned();
    default:
        return sat_adaptive();
    }
}

static const char *const NAMES[PROTOCOLS] = {"mesi",  "home-only", "mesi-e",  "update",
                                                "hlrc", "learned",   "adaptive"};

/* The 8-byte word a client writes in a chunk every client writes: its own
 * under multiple writers, else the first. */
static size_t word_of(int p, uint32_t client) { return p == MULTIPLE_WRITERS ? client : 0; }

/* ----------------------------------------------------- migratory counter */

static void counter(int p, uint64_t base) {
    sat_chunk_t *c = CHECK_CHUNK(sat_malloc(protocol(p), base + COUNTER, 8 * 3));
    if (c == NULL) {
        return;
    }
    pthread_t threads[THREADS];
    struct testing_counting counting[THREADS];
    for (int i = 0; i < THREADS; i++) {
        counting[i].chunk = c;
        counting[i].offset = 8 * word_of(p, me);
        counting[i].rounds = ROUNDS;
        counting[i].failures = 0;
        CHECK_TRUE(pthread_create(&threads[i], NULL, testing_count, &counting[i]) == 0,
                   "pthread_create");
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK_TRUE(counting[i].failures == 0, "%s: thread %d failed", NAMES[p], i);
    }
    CHECK_OK(sat_barrier(BAR_BASE + 10 * p, nclients));
    CHECK_OK(sat_read(c));
    uint64_t got = 0, want = (uint64_t)nclients * THREADS * ROUNDS;
    for (uint32_t k = 0; k < nclients; k++) {
        got += p == MULTIPLE_WRITERS || k == 0 ? testing_load(c, k) : 0;
    }
    CHECK_OK(sat_release(c));
    CHECK_TRUE(got == want, "%s: the counter holds %llu, expected %llu", NAMES[p],
               (unsigned long long)got, (unsigned long long)want);
}

/* ----------------------------------------------------- producer-consumer */

#define VALUES 16

static void producer_consumer(int p, uint64_t base) {
    sat_chunk_t *produced = CHECK_CHUNK(sat_malloc(protocol(p), base + PRODUCED, 8 * VALUES));
    sat_chunk_t *answer = CHECK_CHUNK(sat_malloc(protocol(p), base + ANSWERS + me, 8));
    sat_chunk_t *answers[3] = {NULL, NULL, NULL};
    for (uint32_t c = 0; c < nclients && c < 3; c++) {
        answers[c] = CHECK_CHUNK(sat_lookup(protocol(p), base + ANSWERS + c, 1));
    }
    if (produced == NULL || answer == NULL) {
        return;
    }
    size_t wrong = 0;
    for (uint64_t r = 1; r <= ROUNDS; r++) {
        if (me == 0) {
            CHECK_OK(sat_write(produced));
            for (size_t i = 0; i < VALUES; i++) {
                testing_store(produced, i, testing_value(r, i));
            }
            CHECK_OK(sat_release(produced));
        }
        CHECK_OK(sat_barrier(BAR_BASE + 10 * p + 1, nclients));
        /* Every client reads the round's values, twice (the second a hit
         * where the protocol caches), and answers with their sum. */
        uint64_t sum = 0;
        for (int twice = 0; twice < 2; twice++) {
            CHECK_OK(sat_read(produced));
            sum = 0;
            for (size_t i = 0; i < VALUES; i++) {
                wrong += testing_load(produced, i) != testing_value(r, i);
                sum += testing_load(produced, i);
            }
            CHECK_OK(sat_release(produced));
        }
        CHECK_OK(sat_write(answer));
        testing_store(answer, 0, sum);
        CHECK_OK(sat_release(answer));
        CHECK_OK(sat_barrier(BAR_BASE + 10 * p + 2, nclients));
        if (me == 0) {
            uint64_t want = 0;
            for (size_t i = 0; i < VALUES; i++) {
                want += testing_value(r, i);
            }
            for (uint32_t c = 0; c < nclients && c < 3; c++) {
                if (answers[c] == NULL) {
                    continue;
                }
                CHECK_OK(sat_read(answers[c]));
                wrong += testing_load(answers[c], 0) != want;
                CHECK_OK(sat_release(answers[c]));
            }
        }
    }
    CHECK_TRUE(wrong == 0, "%s: %zu values read were not the round's", NAMES[p], wrong);
}

/* ----------------------------------------- a counter written by its owner */

static void owned(int p, uint64_t base) {
    sat_chunk_t *mine = CHECK_CHUNK(sat_malloc(protocol(p), base + PRIVATE + me, 64));
    if (mine == NULL) {
        return;
    }
    for (uint64_t r = 1; r <= ROUNDS; r++) {
        CHECK_OK(r % 2 ? sat_readwrite(mine) : sat_write(mine));
        testing_store(mine, 0, r);
        testing_store(mine, 1, me);
        CHECK_OK(sat_release(mine));
    }
    CHECK_OK(sat_barrier(BAR_BASE + 10 * p + 3, nclients));
    for (uint32_t c = 0; c < nclients; c++) {
        sat_chunk_t *theirs = CHECK_CHUNK(sat_lookup(protocol(p), base + PRIVATE + c, 1));
        if (theirs == NULL) {
            continue;
        }
        CHECK_OK(sat_read(theirs));
        CHECK_TRUE(testing_load(theirs, 0) == ROUNDS && testing_load(theirs, 1) == c,
                   "%s: client %u's counter reads %llu (owner %llu)", NAMES[p], c,
                   (unsigned long long)testing_load(theirs, 0), (unsigned long long)testing_load(theirs, 1));
        CHECK_OK(sat_release(theirs));
    }
    /* Then everybody writes everybody's: the owners' copies are taken back. */
    CHECK_OK(sat_barrier(BAR_BASE + 10 * p + 4, nclients));
    for (uint32_t c = 0; c < nclients; c++) {
        sat_chunk_t *theirs = sat_lookup(protocol(p), base + PRIVATE + c, 1);
        if (theirs == NULL) {
            continue;
        }
        CHECK_OK(sat_readwrite(theirs));
        size_t w = 2 + word_of(p, me);
        testing_store(theirs, w, testing_load(theirs, w) + 1);
        CHECK_OK(sat_release(theirs));
    }
    CHECK_OK(sat_barrier(BAR_BASE + 10 * p + 5, nclients));
    CHECK_OK(sat_read(mine));
    uint64_t writers = 0;
    for (uint32_t k = 0; k < nclients; k++) {
        writers += p == MULTIPLE_WRITERS || k == 0 ? testing_load(mine, 2 + k) : 0;
    }
    CHECK_TRUE(testing_load(mine, 0) == ROUNDS && writers == nclients,
               "%s: my counter reads %llu, %llu writers", NAMES[p],
               (unsigned long long)testing_load(mine, 0), (unsigned long long)writers);
    CHECK_OK(sat_release(mine));
}

#define BURST_CHUNKS 20
#define BURST_ROUNDS 50
#define BURST_BASE 5000 /* + 100 * client + k: above every protocol's ids */

static void bursts(void) {
    sat_chunk_t *mine[BURST_CHUNKS];
    for (int k = 0; k < BURST_CHUNKS; k++) {
        mine[k] = CHECK_CHUNK(
            sat_malloc(sat_home_based_mesi_exclusive(), BURST_BASE + 100u * me + (uint64_t)k, 64));
        if (mine[k] == NULL) {
            return;
        }
    }
    for (uint64_t r = 1; r <= BURST_ROUNDS; r++) {
        for (int k = 0; k < BURST_CHUNKS; k++) {
            CHECK_OK(sat_readwrite(mine[k]));
            testing_store(mine[k], 0, testing_load(mine[k], 0) + 1);
            CHECK_OK(sat_release(mine[k]));
        }
    }
    CHECK_OK(sat_barrier(BAR_BASE + 99, nclients));
    /* Another client's chunks hold every write. */
    uint32_t other = (me + 1) % nclients;
    for (int k = 0; k < BURST_CHUNKS; k++) {
        sat_chunk_t *c = CHECK_CHUNK(sat_lookup(sat_home_based_mesi_exclusive(),
                                                BURST_BASE + 100u * other + (uint64_t)k, 1));
        if (c == NULL) {
            continue;
        }
        CHECK_OK(sat_read(c));
        CHECK_TRUE(testing_load(c, 0) == BURST_ROUNDS, "client %u's chunk %d holds %llu", other, k,
                   (unsigned long long)testing_load(c, 0));
        CHECK_OK(sat_release(c));
    }
}

static void role(sat_bootstrap_t *b) {
    me = b->rank - 2;
    nclients = (uint32_t)sat_client_count();
    for (int p = 0; p < PROTOCOLS; p++) {
        uint64_t base = 100u * (uint64_t)p;
        counter(p, base);
        producer_consumer(p, base);
        owned(p, base);
    }
    bursts();
    char name[64];
    snprintf(name, sizeof name, "protocols (rank %u)", b->rank);
    if (testing_done(name) != 0) {
        exit(EXIT_FAILURE);
    }
}

int main(int argc, char **argv) {
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "FAIL protocols: %s\n", sat_last_error());
        return 1;
    }
    return 0;
}
