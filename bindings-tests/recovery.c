/* A run with recovery, from C: a client killed inside its write scope is
 * lost, the others go on, and the chunk holds its last released version.
 *
 *   satrun --enable-recovery -n 5 --topology bindings-tests/topology.xml -- ./recovery
 *
 * (ranks 0 and 1 servers; 2, 3 and 4 clients). Every client adds 1 to a
 * counter K times, each in a READWRITE scope. Rank 3 stops after AFTER
 * increments: inside its next write scope it writes a value nobody may see
 * and kills itself. The survivors then learn of the loss from a barrier of
 * every client, which fails with SAT_ERR_PROCESS_LOST instead of waiting
 * forever, pass a barrier of the two left, and check the counter. A thread
 * each survivor starts after the loss fails its first barrier call for the
 * loss too, as every thread does once, then passes with the count left. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>

#include "testing.h"

#define COUNTER 9u
#define K 120u
#define AFTER 4u
#define VICTIM 3
#define NEVER 0xdeadbeefdeadbeefull

static uint64_t load(sat_chunk_t *c) {
    uint64_t v;
    memcpy(&v, c->data, sizeof v);
    return v;
}

static void store(sat_chunk_t *c, uint64_t v) { memcpy(c->data, &v, sizeof v); }

static int increment(sat_chunk_t *c) {
    if (sat_readwrite(c) != SAT_OK) return -1;
    uint64_t v = load(c);
    CHECK_TRUE(v != NEVER, "the counter shows the victim's unreleased write");
    store(c, v + 1);
    return sat_release(c) == SAT_OK ? 0 : -1;
}

/* A thread started after the loss: its two calls of barrier 2. */
struct late_thread {
    uint32_t count;
    enum sat_status first, second;
};

static void *late_barrier(void *arg) {
    struct late_thread *t = (struct late_thread *)arg;
    t->first = sat_barrier(2, t->count);
    t->second = sat_barrier(2, t->count);
    return NULL;
}

/* Barrier `id` of `count` calls, called again while it reports a loss. */
static enum sat_status barrier_of(uint32_t id, uint32_t count) {
    enum sat_status s;
    while ((s = sat_barrier(id, count)) == SAT_ERR_PROCESS_LOST) {
    }
    return s;
}

static void role(sat_bootstrap_t *b) {
    sat_chunk_t *c = CHECK_CHUNK(sat_malloc(NULL, COUNTER, 8));
    if (c == NULL) return;
    if ((int)b->rank == VICTIM) {
        for (unsigned i = 0; i < AFTER; i++) CHECK_TRUE(increment(c) == 0, "increment");
        CHECK_OK(sat_readwrite(c));
        store(c, NEVER);
        printf("rank %u dies inside its write scope\n", b->rank);
        fflush(stdout);
        raise(SIGKILL);
    }
    for (unsigned i = 0; i < K; i++) CHECK_TRUE(increment(c) == 0, "increment: %s", sat_last_error());
    uint32_t clients = (uint32_t)sat_client_count();
    /* The victim never comes: the barrier of every client fails once the
     * run has lost it, and this call does not count. */
    CHECK_STATUS(sat_barrier(1, clients), SAT_ERR_PROCESS_LOST, "lost");
    /* Every thread learns of the loss from a call of its own, also one
     * started after it: this thread's next call goes ahead, the new one's
     * first fails; both call with the count left (two threads of each of
     * the clients left). */
    uint32_t left = 2 * (clients - 1);
    struct late_thread late = {left, SAT_OK, SAT_OK};
    pthread_t t;
    CHECK_TRUE(pthread_create(&t, NULL, late_barrier, &late) == 0, "pthread_create");
    CHECK_OK(sat_barrier(2, left));
    CHECK_TRUE(pthread_join(t, NULL) == 0, "pthread_join");
    CHECK_TRUE(late.first == SAT_ERR_PROCESS_LOST && late.second == SAT_OK,
               "a thread started after the loss: first call %d, second %d", late.first,
               late.second);
    CHECK_OK(sat_read(c));
    uint64_t v = load(c);
    CHECK_OK(sat_release(c));
    uint64_t expected = (uint64_t)(clients - 1) * K + AFTER;
    printf("rank %u: counter %llu, expected %llu\n", b->rank, (unsigned long long)v,
           (unsigned long long)expected);
    CHECK_TRUE(v == expected, "counter %llu, expected %llu", (unsigned long long)v,
               (unsigned long long)expected);
    CHECK_OK(barrier_of(3, clients - 1));
    char name[64];
    snprintf(name, sizeof name, "recovery (rank %u)", b->rank);
    if (testing_done(name) != EXIT_SUCCESS) sat_role_failed("a check failed");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        printf("recovery: sat_bootstrap gave %d (%s): %s\n", status, sat_status_string(status),
               sat_last_error());
        return 1;
    }
    return EXIT_SUCCESS;
}
