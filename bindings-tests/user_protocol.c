/* A consistency protocol defined in C and registered at run time, used by
 * several processes (sat_protocol_register, docs/PROTOCOLS.md).
 *
 *   SAT_HOST_SEGMENTS=off satrun -n 5 --topology bindings-tests/topology.xml -- ./user_protocol
 *
 * The protocol, "c-serial", serializes every scope at the home: many readers
 * or one writer at a time, granted in arrival order; a process keeps no
 * valid copy between scopes (its next scope asks again, and gets the bytes
 * only if the version moved). Its routines are written here, against
 * sat.h's table of routines, and every process registers it before
 * sat_bootstrap (the servers build the homes from it).
 *
 * What runs on it, every result checked:
 * - a counter every client adds to, ROUNDS times from each of two threads,
 *   in READWRITE scopes: no addition is lost (writers are serialized);
 * - producer-consumer: client 0 WRITEs round r's values, the others READ
 *   them after a barrier;
 * - registration's refusals: a second registration of the name, a built-in
 *   protocol's name, a missing routine, NULL;
 * - a RELEASE without a scope is still misuse.
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
#define VALUES 16
#define COUNTER 7000
#define PRODUCED 7001
#define BAR 700
#define MAX_WAITING 64
#define MAX_RANKS 256

/* ------------------------------------------------------------- the home */

struct request {
    uint32_t from;
    uint32_t kind;
    uint32_t flags;
    uint32_t pad;
    uint64_t have;
};

struct home {
    uint32_t writer; /* rank + 1; 0: none */
    uint32_t readers;
    uint32_t waiting;
    uint32_t pad;
    struct request queue[MAX_WAITING];
    uint16_t reading[MAX_RANKS]; /* open read scopes per client */
};

static void home_init(void *state, size_t chunk_size) {
    (void)state;
    (void)chunk_size;
}

/* A grant, with the bytes when the scope reads them and the client's copy
 * is not the version. */
static void grant(struct sat_protocol_out *out, const struct request *r) {
    int reads = r->kind == SAT_PROTOCOL_READ_REQ || (r->flags & SAT_PROTOCOL_WITH_DATA);
    int current = (r->flags & SAT_PROTOCOL_HAS_VERSION) && r->have == sat_protocol_version(out);
    sat_protocol_msg m = {
        .kind = r->kind == SAT_PROTOCOL_READ_REQ ? SAT_PROTOCOL_READ_GRANT : SAT_PROTOCOL_WRITE_GRANT,
        .flags = reads && !current ? SAT_PROTOCOL_WITH_DATA : 0,
    };
    sat_protocol_send(out, r->from, &m);
}

/* Grants in arrival order while the head of the queue can go. */
static void serve(struct home *h, struct sat_protocol_out *out) {
    while (h->waiting > 0) {
        struct request *head = &h->queue[0];
        if (head->kind == SAT_PROTOCOL_WRITE_REQ) {
            if (h->writer != 0 || h->readers != 0) {
                return;
            }
            h->writer = head->from + 1;
        } else {
            if (h->writer != 0) {
                return;
            }
            h->readers++;
            h->reading[head->from]++;
        }
        grant(out, head);
        memmove(&h->queue[0], &h->queue[1], (h->waiting - 1) * sizeof h->queue[0]);
        h->waiting--;
    }
}

static int32_t home_on_message(void *state, uint32_t from, const sat_protocol_msg *msg,
                               struct sat_protocol_out *out) {
    struct home *h = state;
    if (from >= MAX_RANKS) {
        return -1;
    }
    switch (msg->kind) {
    case SAT_PROTOCOL_READ_REQ:
    case SAT_PROTOCOL_WRITE_REQ:
        if (h->waiting == MAX_WAITING) {
            return -1;
        }
        h->queue[h->waiting++] = (struct request){
            .from = from, .kind = msg->kind, .flags = msg->flags, .have = msg->version};
        break;
    case SAT_PROTOCOL_RELEASE:
    case SAT_PROTOCOL_ABORT:
        if (h->writer != from + 1) {
            return -1; /* not the writer: refused, nothing kept */
        }
        h->writer = 0;
        break;
    case SAT_PROTOCOL_READ_RELEASE:
        if (h->reading[from] == 0) {
            return -1;
        }
        h->reading[from]--;
        h->readers--;
        break;
    default:
        return -1;
    }
    serve(h, out);
    return 0;
}

static void home_client_left(void *state, uint32_t client, struct sat_protocol_out *out) {
    struct home *h = state;
    if (client >= MAX_RANKS) {
        return;
    }
    if (h->writer == client + 1) {
        h->writer = 0; /* the chunk keeps its last release */
    }
    h->readers -= h->reading[client];
    h->reading[client] = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < h->waiting; i++) {
        if (h->queue[i].from != client) {
            h->queue[kept++] = h->queue[i];
        }
    }
    h->waiting = kept;
    serve(h, out);
}

/* ----------------------------------------------------------- the client */

enum { NONE, READING, WRITING };

struct client {
    uint32_t scope;   /* NONE, READING, WRITING */
    uint32_t waiting; /* the access asked for + 1; 0: none */
    uint32_t versioned;
    uint32_t pad;
    uint64_t version; /* of the bytes held, when versioned */
};

static void client_init(void *state, size_t chunk_size) {
    (void)state;
    (void)chunk_size;
}

static int32_t client_acquire(void *state, uint32_t access, sat_protocol_msg *request) {
    struct client *c = state;
    if (c->scope != NONE || c->waiting) {
        return -1; /* one scope at a time per process (threads wait) */
    }
    c->waiting = access + 1;
    request->kind = access == SAT_ACCESS_READ ? SAT_PROTOCOL_READ_REQ : SAT_PROTOCOL_WRITE_REQ;
    request->flags = (c->versioned ? SAT_PROTOCOL_HAS_VERSION : 0) |
                     (access == SAT_ACCESS_READWRITE ? SAT_PROTOCOL_WITH_DATA : 0);
    request->version = c->version;
    return SAT_PROTOCOL_ASK;
}

static int32_t client_on_message(void *state, const sat_protocol_msg *msg,
                                 sat_protocol_msg *reply) {
    struct client *c = state;
    (void)reply;
    int read = msg->kind == SAT_PROTOCOL_READ_GRANT;
    if (!(read || msg->kind == SAT_PROTOCOL_WRITE_GRANT) || !c->waiting ||
        read != (c->waiting == SAT_ACCESS_READ + 1)) {
        return -1;
    }
    int take = (msg->flags & SAT_PROTOCOL_WITH_DATA) != 0;
    if (take || (c->versioned && c->version == msg->version)) {
        c->versioned = 1;
        c->version = msg->version;
    }
    c->waiting = 0;
    c->scope = read ? READING : WRITING;
    return take ? SAT_PROTOCOL_TAKE_DATA : 0;
}

static int32_t client_release(void *state, int32_t abort, sat_protocol_msg *msg) {
    struct client *c = state;
    memset(msg, 0, sizeof *msg);
    switch (c->scope) {
    case READING:
        msg->kind = SAT_PROTOCOL_READ_RELEASE;
        break;
    case WRITING:
        if (abort) {
            msg->kind = SAT_PROTOCOL_ABORT;
            c->versioned = 0; /* the bytes are no version */
        } else {
            msg->kind = SAT_PROTOCOL_RELEASE;
            /* A WRITE may have opened on stale bytes: its release is the
             * version after the one the home granted at. */
            msg->version = c->version + 1;
            c->version = msg->version;
            c->versioned = 1;
        }
        break;
    default:
        return -1;
    }
    c->scope = NONE;
    return SAT_PROTOCOL_REPLY;
}

static void client_status(const void *state, sat_protocol_status *status) {
    const struct client *c = state;
    status->state = SAT_PROTOCOL_INVALID; /* no copy is valid between scopes */
    status->flags = (c->scope != NONE ? SAT_PROTOCOL_IN_SCOPE : 0) |
                    (c->scope == WRITING ? SAT_PROTOCOL_WRITING : 0) |
                    (c->waiting ? SAT_PROTOCOL_WAITING : 0) |
                    (c->versioned ? SAT_PROTOCOL_VERSIONED : 0);
    status->version = c->version;
}

static int32_t client_evict(void *state) {
    struct client *c = state;
    if (c->scope != NONE || c->waiting) {
        return 0;
    }
    c->versioned = 0;
    return 1;
}

static const sat_protocol_ops SERIAL = {
    .name = "c-serial",
    .home_state_size = sizeof(struct home),
    .client_state_size = sizeof(struct client),
    .home_init = home_init,
    .home_on_message = home_on_message,
    .home_client_left = home_client_left,
    .client_init = client_init,
    .client_acquire = client_acquire,
    .client_on_message = client_on_message,
    .client_release = client_release,
    .client_status = client_status,
    .client_evict = client_evict,
};

static const sat_consistency_t *serial;
static uint32_t me, nclients;

/* ------------------------------------------------------------ workloads */

static void counter(void) {
    sat_chunk_t *c = CHECK_CHUNK(sat_malloc(serial, COUNTER, 8));
    if (c == NULL) {
        return;
    }
    pthread_t threads[THREADS];
    struct testing_counting counting[THREADS];
    for (int i = 0; i < THREADS; i++) {
        counting[i] = (struct testing_counting){.chunk = c, .offset = 0, .rounds = ROUNDS};
        CHECK_TRUE(pthread_create(&threads[i], NULL, testing_count, &counting[i]) == 0,
                   "pthread_create");
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK_TRUE(counting[i].failures == 0, "counter thread %d failed", i);
    }
    CHECK_OK(sat_barrier(BAR, nclients));
    CHECK_OK(sat_read(c));
    uint64_t want = (uint64_t)nclients * THREADS * ROUNDS;
    CHECK_TRUE(testing_load(c, 0) == want, "the counter holds %llu, expected %llu",
               (unsigned long long)testing_load(c, 0), (unsigned long long)want);
    CHECK_OK(sat_release(c));
}

static void producer_consumer(void) {
    sat_chunk_t *produced = CHECK_CHUNK(sat_malloc(serial, PRODUCED, 8 * VALUES));
    if (produced == NULL) {
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
        CHECK_OK(sat_barrier(BAR + 1, nclients));
        for (int twice = 0; twice < 2; twice++) {
            CHECK_OK(sat_read(produced));
            for (size_t i = 0; i < VALUES; i++) {
                wrong += testing_load(produced, i) != testing_value(r, i);
            }
            CHECK_OK(sat_release(produced));
        }
        CHECK_OK(sat_barrier(BAR + 2, nclients));
    }
    CHECK_TRUE(wrong == 0, "%zu values read were not the round's", wrong);
}

static void role(sat_bootstrap_t *b) {
    me = b->rank - 2;
    nclients = (uint32_t)sat_client_count();
    counter();
    producer_consumer();
    /* A chunk of the protocol is still refused nothing a MESI chunk would
     * be: a READ without a RELEASE stays misuse. */
    sat_chunk_t *c = sat_lookup(serial, COUNTER, 1);
    CHECK_TRUE(c != NULL, "LOOKUP of the counter: %s", sat_last_error());
    if (c != NULL) {
        CHECK_STATUS(sat_release(c), SAT_ERR_USAGE, "RELEASE");
    }
    char name[64];
    snprintf(name, sizeof name, "user_protocol (rank %u)", b->rank);
    if (testing_done(name) != 0) {
        exit(EXIT_FAILURE);
    }
}

/* Registration's refusals, then the protocol itself. */
static int register_protocol(void) {
    const sat_consistency_t *got = NULL;
    sat_protocol_ops bad = SERIAL;
    bad.name = "mesi";
    CHECK_STATUS(sat_protocol_register(&bad, &got), SAT_ERR_USAGE, "built-in");
    bad = SERIAL;
    bad.client_evict = NULL;
    CHECK_STATUS(sat_protocol_register(&bad, &got), SAT_ERR_ARGUMENT, "client_evict is NULL");
    CHECK_STATUS(sat_protocol_register(NULL, &got), SAT_ERR_ARGUMENT, "NULL");
    CHECK_OK(sat_protocol_register(&SERIAL, &serial));
    CHECK_STATUS(sat_protocol_register(&SERIAL, &got), SAT_ERR_USAGE, "registered already");
    CHECK_TRUE(got == NULL, "a refused registration writes nothing");
    return serial != NULL;
}

int main(int argc, char **argv) {
    if (!register_protocol()) {
        fprintf(stderr, "FAIL user_protocol: registration: %s\n", sat_last_error());
        return 1;
    }
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "FAIL user_protocol: %s\n", sat_last_error());
        return 1;
    }
    return 0;
}
