/* SUBSCRIBE on chains of several chunks: a release of any chunk of a chain
 * runs the chain's handler, and handles whose chains start at the same
 * chunk are subscriptions of their own; sat_subscribe_data gives the
 * handler the released chunk's bytes.
 *
 *   satrun -n 5 --topology bindings-tests/topology.xml -- ./chain_subscribe
 *
 * Client 0 (rank 2) publishes; clients 1 and 2 subscribe to
 *   A = [2000, 2001, 2002], B = [2000, 2003] and C = [2000]
 * (C only to unsubscribe it at once), then wait in a barrier and return:
 * their handlers run in the client loop, and the run ends by itself, since
 * they never unsubscribe A and B. The publisher releases chunks 2001, 2003
 * and 2002, each through a chain of its own, and never chunk 2000: only a
 * subscription to every chunk of A and B runs their handlers.
 *
 * Clients 1 and 2 also subscribe with data to D = [2010, 2011]; the
 * publisher releases chunk 2011 DATA_RELEASES times, version v holding
 * DATA_BASE + v. Each run of D's handler must be given chunk 2011 at
 * offset 8, its 8 bytes, a version above the last one given, and the bytes
 * of that very version; the last run must tell of the last release. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>

#include "testing.h"

enum { BAR_SUBSCRIBED = 1 };
enum { DATA_RELEASES = 20, DATA_BASE = 100 };

/* What a chain's handler saw, for main to check once the bootstrap returns. */
struct watch {
    sat_chunk_t *chain; /* the handle subscribed */
    int runs;
    int wrong_handle; /* runs given another handle than `chain` */
    int failures;     /* READ or RELEASE failed inside the handler */
    uint64_t last[3]; /* the chain's values at the last run */
};

static struct watch watch_a, watch_b, watch_c;

/* What D's data handler saw. */
struct data_watch {
    sat_chunk_t *chain;
    int runs;
    int wrong; /* runs given another handle, chunk, offset or size */
    int stale; /* runs whose version did not move forward */
    int torn;  /* runs whose bytes were not those of their version */
    uint64_t version, value; /* the last run's */
};

static struct data_watch watch_d;

static void on_data(sat_chunk_t *c, const sat_release_t *r, void *params) {
    struct data_watch *w = params;
    w->runs++;
    w->wrong += c != w->chain || r->chunk_id != 2011 || r->offset != 8 || r->size != 8 ||
                r->data == NULL;
    if (r->data == NULL || r->size != 8) {
        return;
    }
    uint64_t value;
    memcpy(&value, r->data, sizeof value);
    w->stale += r->version <= w->version;
    w->torn += value != DATA_BASE + r->version;
    if (value != DATA_BASE + r->version) {
        fprintf(stderr, "FAIL: chunk 2011 version %llu given as %llu\n",
                (unsigned long long)r->version, (unsigned long long)value);
    }
    w->version = r->version;
    w->value = value;
}
static int is_client, me;

static void on_chain(sat_chunk_t *c, void *params) {
    struct watch *w = params;
    w->runs++;
    w->wrong_handle += c != w->chain;
    if (sat_read(c) != SAT_OK) {
        fprintf(stderr, "FAIL: READ in a handler: %s\n", sat_last_error());
        w->failures++;
        return;
    }
    for (size_t i = 0; i < c->nchunks && i < 3; i++) {
        memcpy(&w->last[i], c->data + 8 * i, sizeof w->last[i]);
    }
    if (sat_release(c) != SAT_OK) {
        fprintf(stderr, "FAIL: RELEASE in a handler: %s\n", sat_last_error());
        w->failures++;
    }
}

static sat_chunk_t *chain(size_t n, unsigned long *ids) {
    unsigned long size = 8;
    sat_ulong_list_t idl = {n, ids}, sizel = {1, &size};
    return CHECK_CHUNK(sat_malloc_lst(NULL, &idl, &sizel));
}

/* A WRITE ... RELEASE of chunk `id` alone, through a chain of its own. */
static void publish(unsigned long id, uint64_t value) {
    sat_chunk_t *c = chain(1, &id);
    if (c != NULL) {
        CHECK_OK(sat_write(c));
        memcpy(c->data, &value, sizeof value);
        CHECK_OK(sat_release(c));
    }
}

static void role(sat_bootstrap_t *b) {
    is_client = 1;
    me = (int)b->rank - sat_server_count();
    unsigned long a_ids[] = {2000, 2001, 2002}, b_ids[] = {2000, 2003}, c_ids[] = {2000};
    watch_a.chain = chain(3, a_ids);
    watch_b.chain = chain(2, b_ids);
    watch_c.chain = chain(1, c_ids);
    unsigned long d_ids[] = {2010, 2011};
    watch_d.chain = chain(2, d_ids);
    if (me != 0 && watch_d.chain) {
        CHECK_STATUS(sat_subscribe_data(NULL, on_data, &watch_d), SAT_ERR_ARGUMENT,
                     "chunk is NULL");
        CHECK_STATUS(sat_subscribe_data(watch_d.chain, NULL, &watch_d), SAT_ERR_ARGUMENT,
                     "handler is NULL");
        CHECK_OK(sat_subscribe_data(watch_d.chain, on_data, &watch_d));
        CHECK_STATUS(sat_subscribe(watch_d.chain, on_chain, &watch_d), SAT_ERR_USAGE,
                     "already subscribed");
    }
    if (me != 0 && watch_a.chain && watch_b.chain && watch_c.chain) {
        CHECK_OK(sat_subscribe(watch_a.chain, on_chain, &watch_a));
        CHECK_STATUS(sat_subscribe(watch_a.chain, on_chain, &watch_a), SAT_ERR_USAGE,
                     "already subscribed");
        /* Chains that start at A's first chunk: subscriptions of their own. */
        CHECK_OK(sat_subscribe(watch_b.chain, on_chain, &watch_b));
        CHECK_OK(sat_subscribe(watch_c.chain, on_chain, &watch_c));
        CHECK_OK(sat_unsubscribe(watch_c.chain));
        CHECK_STATUS(sat_unsubscribe(watch_c.chain), SAT_ERR_USAGE, "not subscribed");
    }
    CHECK_OK(sat_barrier(BAR_SUBSCRIBED, (uint32_t)sat_client_count()));
    if (me == 0) {
        publish(2001, 21); /* A's second chunk */
        publish(2003, 23); /* B's second chunk */
        publish(2002, 22); /* A's third chunk */
        for (uint64_t v = 1; v <= DATA_RELEASES; v++) {
            publish(2011, DATA_BASE + v); /* D's second chunk, version v */
        }
    }
    /* The verdict so far; main's verdict counts these checks again, so a
     * failure here fails the process without hiding what the handlers saw. */
    char name[64];
    snprintf(name, sizeof name, "chain_subscribe role (client %d)", me);
    testing_done(name);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "chain_subscribe: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    if (!is_client) {
        return 0; /* a server */
    }
    if (me == 0) {
        return testing_failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE; /* nothing was handled */
    }
    /* The bootstrap returns once the run has nothing left to notify. Two
     * releases of A's chunks run A's handler once or twice (merged when
     * the second comes before the first is handled), its last run after
     * both; the one release of B's runs B's once; C's never runs. */
    struct watch *w[] = {&watch_a, &watch_b, &watch_c};
    for (int i = 0; i < 3; i++) {
        CHECK_TRUE(w[i]->wrong_handle == 0 && w[i]->failures == 0,
                   "handler of chain %c: %d runs with another handle, %d failures", 'A' + i,
                   w[i]->wrong_handle, w[i]->failures);
    }
    CHECK_TRUE(watch_a.runs >= 1 && watch_a.runs <= 2,
               "the handler of A = [2000, 2001, 2002] ran %d times after releases of 2001 and 2002",
               watch_a.runs);
    CHECK_TRUE(watch_a.last[0] == 0 && watch_a.last[1] == 21 && watch_a.last[2] == 22,
               "the handler of A last saw [%llu, %llu, %llu], not [0, 21, 22]",
               (unsigned long long)watch_a.last[0], (unsigned long long)watch_a.last[1],
               (unsigned long long)watch_a.last[2]);
    CHECK_TRUE(watch_b.runs == 1, "the handler of B = [2000, 2003] ran %d times after 1 release",
               watch_b.runs);
    CHECK_TRUE(watch_b.last[0] == 0 && watch_b.last[1] == 23,
               "the handler of B last saw [%llu, %llu], not [0, 23]",
               (unsigned long long)watch_b.last[0], (unsigned long long)watch_b.last[1]);
    CHECK_TRUE(watch_c.runs == 0, "the handler of C, unsubscribed, ran %d times", watch_c.runs);
    CHECK_TRUE(watch_d.runs >= 1 && watch_d.runs <= DATA_RELEASES,
               "the data handler of D ran %d times after %d releases", watch_d.runs,
               DATA_RELEASES);
    CHECK_TRUE(watch_d.wrong == 0 && watch_d.stale == 0 && watch_d.torn == 0,
               "the data handler of D: %d runs with the wrong handle, chunk, offset or size, %d "
               "not past the last version, %d with bytes of another version",
               watch_d.wrong, watch_d.stale, watch_d.torn);
    CHECK_TRUE(watch_d.version == DATA_RELEASES && watch_d.value == DATA_BASE + DATA_RELEASES,
               "the data handler of D last saw version %llu holding %llu, not version %d "
               "holding %d",
               (unsigned long long)watch_d.version, (unsigned long long)watch_d.value,
               DATA_RELEASES, DATA_BASE + DATA_RELEASES);
    char name[64];
    snprintf(name, sizeof name, "chain_subscribe handlers (client %d)", me);
    return testing_done(name);
}
