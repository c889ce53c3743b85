/* The C ABI doing its work across processes: allocation (MALLOC, chains,
 * MALLOC_LST, LOOKUP, LOOKUP_LST, MAP), scopes from several threads, both
 * protocols, symbols, rendezvous, barriers, signals and publish-subscribe.
 *
 *   satrun -n 5 --topology bindings-tests/topology.xml -- ./api
 *
 * Every client plays role 1; client i (0 to 2) is rank i + 2. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sat.h>

#include "testing.h"

enum { BAR_COUNTED = 1, BAR_CHAIN, BAR_SLICES, BAR_LIST, BAR_MAPPED, BAR_SUBSCRIBED };

#define COUNTER_MESI 11
#define COUNTER_HOME_ONLY 12
#define THREADS 2
#define ROUNDS 20
#define CHAIN_ID 1000
#define CHAIN_SIZE 150000
#define MAP_BASE 7000
#define MAP_INTS 1000
#define PUBLISHED 8000
#define SIGNAL_ID 20
#define RDV_RING 100

static uint32_t me, nclients;

/* ------------------------------------------------------- topology queries */

static void topology(sat_bootstrap_t *b) {
    CHECK_TRUE(b->size == 5 && b->role == 1, "bootstrap: size %u role %u", b->size, b->role);
    CHECK_TRUE(sat_rank() == (int)b->rank && sat_role() == 1, "rank %d role %d", sat_rank(),
               sat_role());
    CHECK_TRUE(sat_client_count() == 3 && sat_server_count() == 2, "%d clients, %d servers",
               sat_client_count(), sat_server_count());
}

/* ------------------------------------------------ counters, from threads */

static uint64_t read_u64(sat_chunk_t *c) {
    uint64_t v = 0;
    CHECK_OK(sat_read(c));
    memcpy(&v, c->data, sizeof v);
    CHECK_OK(sat_release(c));
    return v;
}

static void counters(void) {
    sat_chunk_t *chunks[2] = {
        CHECK_CHUNK(sat_malloc(NULL, COUNTER_MESI, sizeof(uint64_t))),
        CHECK_CHUNK(sat_malloc(sat_home_only(), COUNTER_HOME_ONLY, sizeof(uint64_t))),
    };
    if (chunks[0] == NULL || chunks[1] == NULL) {
        return;
    }
    pthread_t threads[2 * THREADS];
    struct testing_counting counting[2 * THREADS];
    for (int i = 0; i < 2 * THREADS; i++) {
        counting[i].chunk = chunks[i % 2];
        counting[i].offset = 0;
        counting[i].rounds = ROUNDS;
        counting[i].failures = 0;
        CHECK_TRUE(pthread_create(&threads[i], NULL, testing_count, &counting[i]) == 0,
                   "pthread_create");
    }
    for (int i = 0; i < 2 * THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK_TRUE(counting[i].failures == 0, "thread %d failed", i);
    }
    CHECK_OK(sat_barrier(BAR_COUNTED, nclients));
    uint64_t want = (uint64_t)nclients * THREADS * ROUNDS;
    uint64_t mesi = read_u64(chunks[0]), home_only = read_u64(chunks[1]);
    CHECK_TRUE(mesi == want && home_only == want, "counters %llu and %llu, expected %llu",
               (unsigned long long)mesi, (unsigned long long)home_only,
               (unsigned long long)want);
}

/* ------------------------------------------------ a chain of three chunks */

static uint8_t pattern(size_t i) { return (uint8_t)(i * 31 + 7); }

static void chain(void) {
    sat_chunk_t *c;
    if (me == 0) {
        c = CHECK_CHUNK(sat_malloc(NULL, CHAIN_ID, CHAIN_SIZE));
        if (c == NULL) {
            return;
        }
        CHECK_TRUE(sat_malloc(NULL, CHAIN_ID, CHAIN_SIZE) == c, "MALLOC again: another handle");
        CHECK_OK(sat_write(c));
        for (size_t i = 0; i < CHAIN_SIZE; i++) {
            c->data[i] = (char)pattern(i);
        }
        CHECK_OK(sat_release(c));
    }
    CHECK_OK(sat_barrier(BAR_CHAIN, nclients));
    c = CHECK_CHUNK(sat_lookup(NULL, CHAIN_ID, 3));
    if (c == NULL) {
        return;
    }
    CHECK_TRUE(c->id == CHAIN_ID && c->size == CHAIN_SIZE && c->nchunks == 3,
               "LOOKUP: id %llu size %zu nchunks %zu", (unsigned long long)c->id, c->size,
               c->nchunks);
    /* Each client adds one to its own byte, in exclusive scopes on the whole chain. */
    CHECK_OK(sat_readwrite(c));
    size_t bad = 0;
    for (size_t i = nclients; i < CHAIN_SIZE; i++) {
        bad += (uint8_t)c->data[i] != pattern(i);
    }
    c->data[me] = (char)(pattern(me) + 1 + me);
    CHECK_OK(sat_release(c));
    CHECK_TRUE(bad == 0, "%zu bytes of the chain differ from what client 0 wrote", bad);
    CHECK_OK(sat_barrier(BAR_SLICES, nclients));
    CHECK_OK(sat_read(c));
    for (uint32_t k = 0; k < nclients; k++) {
        CHECK_TRUE((uint8_t)c->data[k] == (uint8_t)(pattern(k) + 1 + k), "byte %u", k);
    }
    CHECK_OK(sat_release(c));
    /* ABORT ends a write scope publishing nothing: the next scope reads the
     * homes' version again. Without a scope it is refused. */
    CHECK_STATUS(sat_abort(c), SAT_ERR_USAGE, "ABORT without a matching");
    CHECK_OK(sat_readwrite(c));
    c->data[me] = 0;
    CHECK_OK(sat_abort(c));
    CHECK_OK(sat_read(c));
    CHECK_TRUE((uint8_t)c->data[me] == (uint8_t)(pattern(me) + 1 + me),
               "byte %u after ABORT: %u", me, (uint8_t)c->data[me]);
    CHECK_OK(sat_release(c));
}

/* ------------------------------------------------ MALLOC_LST, LOOKUP_LST */

static void lists(void) {
    unsigned long ids[] = {5000, 5007, 5003}, sizes[] = {100, 200};
    sat_ulong_list_t idl = {3, ids}, sizel = {2, sizes};
    if (me == 1 % nclients) {
        sat_chunk_t *c = CHECK_CHUNK(sat_malloc_lst(NULL, &idl, &sizel));
        if (c != NULL) {
            CHECK_TRUE(c->size == 400 && c->nchunks == 3 && c->id == 5000, "MALLOC_LST: %zu %zu",
                       c->size, c->nchunks);
            CHECK_OK(sat_write(c));
            memset(c->data, 'A', 100);
            memset(c->data + 100, 'B', 200);
            memset(c->data + 300, 'C', 100);
            CHECK_OK(sat_release(c));
        }
    }
    CHECK_OK(sat_barrier(BAR_LIST, nclients));
    /* Another chain of two of the same chunks, in another order. */
    unsigned long some[] = {5003, 5000};
    sat_ulong_list_t somel = {2, some};
    sat_chunk_t *c = CHECK_CHUNK(sat_lookup_lst(NULL, &somel));
    if (c != NULL) {
        CHECK_TRUE(c->size == 200 && c->nchunks == 2 && c->id == 5003, "LOOKUP_LST: %zu %zu",
                   c->size, c->nchunks);
        CHECK_OK(sat_get(c)); /* GET: the memory now holds the current data */
        CHECK_TRUE(c->data[0] == 'C' && c->data[99] == 'C' && c->data[100] == 'A' &&
                       c->data[199] == 'A',
                   "LOOKUP_LST data");
    }
}

/* ------------------------------------------------------- MAP (Figure 6) */

static int mine[MAP_INTS], theirs[MAP_INTS];

static void mapped(void) {
    sat_chunk_t *c = CHECK_CHUNK(sat_map(NULL, MAP_BASE + me, sizeof mine, mine));
    if (c == NULL) {
        return;
    }
    CHECK_TRUE(c->data == (char *)mine && c->size == sizeof mine, "MAP: data is the memory");
    for (int i = 0; i < MAP_INTS; i++) {
        mine[i] = (int)(1000 * me) + i;
    }
    CHECK_OK(sat_put(c)); /* WRITE then RELEASE */
    CHECK_OK(sat_barrier(BAR_MAPPED, nclients));
    uint32_t next = (me + 1) % nclients;
    sat_chunk_t *n = CHECK_CHUNK(sat_map(NULL, MAP_BASE + next, sizeof theirs, theirs));
    if (n == NULL) {
        return;
    }
    CHECK_OK(sat_get(n)); /* READ then RELEASE: the memory holds the data */
    int bad = 0;
    for (int i = 0; i < MAP_INTS; i++) {
        bad += theirs[i] != (int)(1000 * next) + i;
    }
    CHECK_TRUE(bad == 0, "%d ints of client %u's mapped chunk differ", bad, next);
}

/* ---------------------------------------------------------------- symbols */

static void symbols(void) {
    char name[64], value[64];
    snprintf(name, sizeof name, "api/client-%u", me);
    memset(value, 'a' + (int)me, sizeof value);
    CHECK_OK(sat_init_symbol_table());
    CHECK_OK(sat_write_symbol(name, value, 10 * (me + 1)));
    snprintf(name, sizeof name, "api/empty-%u", me);
    CHECK_OK(sat_write_symbol(name, NULL, 0));
    for (uint32_t k = 0; k < nclients; k++) {
        void *data = NULL;
        size_t size = 0;
        snprintf(name, sizeof name, "api/client-%u", k);
        CHECK_OK(sat_read_symbol(name, &data, &size));
        CHECK_TRUE(data != NULL && size == 10 * (k + 1) && ((char *)data)[0] == 'a' + (int)k &&
                       ((char *)data)[size - 1] == 'a' + (int)k,
                   "%s: %zu bytes", name, size);
        sat_free(data);
        snprintf(name, sizeof name, "api/empty-%u", k);
        data = NULL;
        CHECK_OK(sat_read_symbol(name, &data, &size));
        CHECK_TRUE(data != NULL && size == 0, "%s: %zu bytes", name, size);
        free(data);
    }
}

/* ------------------------------------------- rendezvous, signals, pub-sub */

/* What the handlers saw, for main to check once the bootstrap returns. */
static int signal_calls;
static uint64_t published_seen;
static sat_chunk_t *published;

static void on_signal(uint32_t id, void *params) {
    signal_calls += id == SIGNAL_ID && params == &signal_calls;
    /* Handlers run one at a time: a handler may not run the others. */
    if (sat_run_handlers(NULL) != SAT_ERR_USAGE) {
        fprintf(stderr, "FAIL: sat_run_handlers in a handler was not refused\n");
        exit(EXIT_FAILURE);
    }
    if (sat_signal_unsubscribe(id) != SAT_OK) {
        fprintf(stderr, "FAIL: signal unsubscribe in a handler: %s\n", sat_last_error());
        exit(EXIT_FAILURE);
    }
}

static void on_publish(sat_chunk_t *c, void *params) {
    uint64_t v = read_u64(c);
    if (v != 0) {
        *(uint64_t *)params = v;
        if (sat_unsubscribe(c) != SAT_OK) {
            fprintf(stderr, "FAIL: UNSUBSCRIBE in a handler: %s\n", sat_last_error());
            exit(EXIT_FAILURE);
        }
    }
}

static void *run_handlers_elsewhere(void *status) {
    *(int *)status = sat_run_handlers(NULL);
    return NULL;
}

static void events(void) {
    /* A ring of rendezvous: each wakes the next, whichever comes first. */
    CHECK_OK(sat_wakeup(RDV_RING + (me + 1) % nclients));
    CHECK_OK(sat_rendezvous(RDV_RING + me));

    published = CHECK_CHUNK(sat_malloc(NULL, PUBLISHED, sizeof(uint64_t)));
    CHECK_OK(sat_signal_subscribe(SIGNAL_ID, on_signal, &signal_calls));
    if (me != 0 && published != NULL) {
        CHECK_OK(sat_subscribe(published, on_publish, &published_seen));
    }
    CHECK_OK(sat_barrier(BAR_SUBSCRIBED, nclients));
    if (me == 0 && published != NULL) {
        CHECK_OK(sat_signal_raise(SIGNAL_ID));
        uint64_t v = 77;
        CHECK_OK(sat_write(published));
        memcpy(published->data, &v, sizeof v);
        CHECK_OK(sat_release(published));
    } else if (published != NULL) {
        /* Serve the subscriptions without waiting, as a role that computes
         * would: whatever the barrier's wait did not run, sat_run_handlers
         * does (it never waits, so this loops until the events arrive). */
        pthread_t other;
        int elsewhere = 0;
        CHECK_TRUE(pthread_create(&other, NULL, run_handlers_elsewhere, &elsewhere) == 0,
                   "pthread_create");
        pthread_join(other, NULL);
        CHECK_TRUE(elsewhere == SAT_ERR_USAGE,
                   "sat_run_handlers from another thread gave %d, not SAT_ERR_USAGE", elsewhere);
        time_t give_up = time(NULL) + 60;
        uint32_t ran = 0, total = 0;
        while ((published_seen == 0 || signal_calls == 0) && time(NULL) < give_up) {
            CHECK_OK(sat_run_handlers(&ran));
            total += ran;
        }
        CHECK_TRUE(published_seen == 77 && signal_calls == 1,
                   "after %u handler runs in sat_run_handlers: published %llu, signal %d", total,
                   (unsigned long long)published_seen, signal_calls);
        CHECK_OK(sat_run_handlers(NULL));
    }
}

static void role(sat_bootstrap_t *b) {
    me = b->rank - (uint32_t)sat_server_count();
    nclients = (uint32_t)sat_client_count();
    topology(b);
    counters();
    chain();
    lists();
    mapped();
    symbols();
    events();
    char name[64];
    snprintf(name, sizeof name, "api role (rank %u)", b->rank);
    if (testing_done(name) != EXIT_SUCCESS) {
        exit(EXIT_FAILURE); /* a role returns void: exiting is its way to fail */
    }
    /* Returning hands over to the handlers. */
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "api: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    if (published == NULL) {
        return 0; /* a server: no role */
    }
    /* The bootstrap returns once the handlers are done. */
    CHECK_TRUE(signal_calls == 1, "the signal handler ran %d times", signal_calls);
    if (me != 0) {
        CHECK_TRUE(published_seen == 77, "the subscriber saw %llu",
                   (unsigned long long)published_seen);
    }
    char name[64];
    snprintf(name, sizeof name, "api handlers (client %u)", me);
    return testing_done(name);
}
