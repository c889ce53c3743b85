/* Data integrity through the C ABI: what one process does with its own
 * scopes and chains must never corrupt what the S-DSM publishes, nor what
 * it reads back itself. Three cases, each seen by every process:
 *
 * 1. A second chain over a chunk in use. A process holds a READ scope on
 *    chunk 10 (chain [10]) and looks up the chain [10, 11] meanwhile: the
 *    new chain has memory of its own, which must get chunk 10's data, not
 *    pass zeros off as a valid copy, when it is read after the first scope
 *    ends; and a READWRITE +1 through it must publish the value + 1. Done by
 *    another process than the writer (chunk 10) and by the writer itself
 *    (chunk 13).
 * 2. A WRITE that fails half way. A process holding a READ scope on chunk 5
 *    WRITEs the chain [3, 5]: chunk 3 is granted, chunk 5 refused (it is in
 *    this process's own read scope), and the WRITE fails. Undoing chunk 3's
 *    grant must not publish the bytes the new chain held for it: chunk 3
 *    still reads 7 everywhere, no version is published (a subscriber is
 *    notified of the next real write only), and a READWRITE +1 gives 8.
 * 3. Writes inside a READ scope are lost (Figure 5): a process that wrote
 *    into chunk->data inside READ must read the home's version again, and
 *    its READWRITE +1 must be computed from it.
 *
 *   satrun -n 5 --topology bindings-tests/integrity_topology.xml -- ./integrity
 *
 * Roles (integrity_topology.xml: 2 servers; chunks with an even id are
 * homed on server 0, odd ones on server 1; each role misuses chunks homed
 * on the server it is not a client of):
 *   1 (rank 2, server 0): allocates and publishes every chunk; case 1 on
 *     chunk 13 by itself; the READWRITE +1 of case 2
 *   2 (rank 3, server 1): case 1 on chunk 10; subscribes to chunk 3;
 *     case 3 on chunk 20
 *   3 (rank 4, server 0): case 2's failing WRITE
 *
 * Every process reaches every barrier whatever fails, counts its failed
 * checks, prints "PASS integrity: N checks" or the failures, and exits
 * non-zero on failure once every process has printed its verdict. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat_compat.h>

#include "testing.h"

enum {
    BAR_PUBLISHED = 1,
    BAR_SECOND_CHAIN,
    BAR_SUBSCRIBED,
    BAR_FAILED_WRITE,
    BAR_CHECKED_FAILED_WRITE,
    BAR_INCREMENTED,
    BAR_READ_SCOPE,
    BAR_END,
    BAR_VERDICT,
};

#define RDV_NOTIFIED 1

/* Case 1: chunk 10 (another process) and 13 (the writer), each with the
   chunk after it in the second chain. */
#define IN_USE_OTHER 10
#define IN_USE_OTHER_NEXT 11
#define IN_USE_OTHER_VALUE 1111
#define IN_USE_SAME 13
#define IN_USE_SAME_NEXT 14
#define IN_USE_SAME_VALUE 1313
/* Case 2. */
#define GRANTED 3
#define GRANTED_VALUE 7
#define REFUSED 5
#define REFUSED_VALUE 55
#define REFUSED_NAME "chunk 5" /* what WRITE's error must name */
/* Case 3. */
#define READ_SCOPE 20
#define READ_SCOPE_VALUE 500
#define READ_SCOPE_SCRIBBLE 999

/* Every chunk holds one uint64_t; a chain's value is its first chunk's. */
#define CHUNK_SIZE sizeof(uint64_t)

/* What a failed scope leaves as "the value read": matches no check. */
#define NO_VALUE UINT64_MAX

static uint32_t nclients;

static unsigned long long id_of(const Chunk_t *c) { return c ? (unsigned long long)c->id : 0; }

static uint64_t value_of(const Chunk_t *c) {
    uint64_t v;
    memcpy(&v, c->data, sizeof v);
    return v;
}

static void set_value(Chunk_t *c, uint64_t v) { memcpy(c->data, &v, sizeof v); }

/* READ, the chain's value, RELEASE; NO_VALUE when a scope call fails
   (counted, with its message). */
static uint64_t read_value(Chunk_t *c) {
    uint64_t v = NO_VALUE;
    int s = READ(c);
    CHECK_TRUE(s == SAT_OK, "READ of the chain at chunk %llu gave %d", id_of(c), s);
    if (s == SAT_OK) {
        v = value_of(c);
        CHECK_OK(RELEASE(c));
    }
    return v;
}

/* The chain's value reads `want` (in a READ scope of its own). */
#define CHECK_READS(c, want, what)                                                     \
    do {                                                                               \
        uint64_t got_ = read_value(c);                                                 \
        CHECK_TRUE(got_ == (uint64_t)(want), "chunk %llu, %s: read %llu, expected %llu", \
                   id_of(c), (what), (unsigned long long)got_, (unsigned long long)(want)); \
    } while (0)

/* READWRITE, +1 on the chain's value, RELEASE: what READWRITE showed
   (NO_VALUE when a scope call fails). */
static uint64_t increment(Chunk_t *c) {
    uint64_t v = NO_VALUE;
    int s = READWRITE(c);
    CHECK_TRUE(s == SAT_OK, "READWRITE of the chain at chunk %llu gave %d", id_of(c), s);
    if (s == SAT_OK) {
        v = value_of(c);
        set_value(c, v + 1);
        CHECK_OK(RELEASE(c));
    }
    return v;
}

/* WRITE `v` into a one-chunk chain, RELEASE. */
static void publish(Chunk_t *c, uint64_t v) {
    int s = WRITE(c);
    CHECK_TRUE(s == SAT_OK, "WRITE of chunk %llu gave %d", id_of(c), s);
    if (s == SAT_OK) {
        set_value(c, v);
        CHECK_OK(RELEASE(c));
    }
}

static void barrier_all(uint32_t id) { CHECK_OK(barrier(id, nclients)); }

/* ------------------------------------- case 1: a second chain over a chunk */

/* LOOKUP(first) and READ it; LOOKUP_LST([first, next]) while that scope is
   open; RELEASE the first chain; the new chain must read `value`, and its
   READWRITE must show `value` and publish value + 1. */
static void second_chain_over_chunk_in_use(unsigned long first, unsigned long next,
                                           uint64_t value) {
    Chunk_t *one = CHECK_CHUNK(LOOKUP(first));
    int s = READ(one);
    CHECK_TRUE(s == SAT_OK, "READ of chunk %lu gave %d", first, s);
    if (s == SAT_OK) {
        CHECK_TRUE(value_of(one) == value, "chunk %lu: read %llu in the first chain", first,
                   (unsigned long long)value_of(one));
    }
    /* A new chain, with its own memory, while the READ scope is open. */
    Chunk_t *two = CHECK_CHUNK(LOOKUP_LST(SAT_LIST(first, next)));
    CHECK_TRUE(two == NULL || (two != one && two->nchunks == 2 && two->id == first),
               "LOOKUP_LST([%lu, %lu]): another chain of 2 chunks", first, next);
    if (s == SAT_OK) {
        CHECK_OK(RELEASE(one));
    }
    CHECK_READS(two, value, "the second chain after the first chain's READ scope ended");
    uint64_t seen = increment(two);
    CHECK_TRUE(seen == value, "chunk %lu: READWRITE through the second chain showed %llu, "
               "expected %llu", first, (unsigned long long)seen, (unsigned long long)value);
    /* Both chains of this process show the new version. */
    CHECK_READS(two, value + 1, "the second chain after its READWRITE");
    CHECK_READS(one, value + 1, "the first chain after the second chain's READWRITE");
}

/* -------------------------------- case 2: a WRITE that fails half way */

/* What the subscriber to chunk GRANTED saw: its handler's calls and the
   value it read at the first one (then it unsubscribes). */
static int granted_notifications;
static uint64_t granted_notified_value = NO_VALUE;

static void on_granted(Chunk_t *c, void *params) {
    (void)params;
    granted_notifications++;
    /* The handler runs on the role's thread, so its checks are counted there. */
    granted_notified_value = read_value(c);
    CHECK_OK(UNSUBSCRIBE(c));
    CHECK_OK(wakeup(RDV_NOTIFIED));
}

/* Role 3: READ chunk REFUSED, then WRITE the chain [GRANTED, REFUSED]. */
static void failing_write(void) {
    Chunk_t *refused = CHECK_CHUNK(LOOKUP(REFUSED));
    int s = READ(refused);
    CHECK_TRUE(s == SAT_OK, "READ of chunk %d gave %d", REFUSED, s);
    if (s == SAT_OK) {
        CHECK_TRUE(value_of(refused) == REFUSED_VALUE, "chunk %d: read %llu", REFUSED,
                   (unsigned long long)value_of(refused));
    }
    Chunk_t *both = CHECK_CHUNK(LOOKUP_LST(SAT_LIST(GRANTED, REFUSED)));
    int w = WRITE(both);
    CHECK_TRUE(w != SAT_OK, "WRITE of [%d, %d] inside a READ scope on chunk %d succeeded",
               GRANTED, REFUSED, REFUSED);
    CHECK_TRUE(w == SAT_OK || testing_error_says(REFUSED_NAME),
               "WRITE of [%d, %d]: the error names chunk %d", GRANTED, REFUSED, REFUSED);
    if (w == SAT_OK) {
        /* Not what is expected; close the scope so that the run goes on. */
        CHECK_OK(RELEASE(both));
    }
    if (s == SAT_OK) {
        CHECK_OK(RELEASE(refused));
    }
}

/* ------------------------------- case 3: writes inside a READ scope */

/* Role 2: READ chunk READ_SCOPE, write into it, RELEASE (Figure 5). */
static void write_in_read_scope(void) {
    Chunk_t *c = CHECK_CHUNK(LOOKUP(READ_SCOPE));
    int s = READ(c);
    CHECK_TRUE(s == SAT_OK, "READ of chunk %d gave %d", READ_SCOPE, s);
    if (s == SAT_OK) {
        CHECK_TRUE(value_of(c) == READ_SCOPE_VALUE, "chunk %d: read %llu", READ_SCOPE,
                   (unsigned long long)value_of(c));
        set_value(c, READ_SCOPE_SCRIBBLE); /* lost: a read-only scope */
        CHECK_OK(RELEASE(c));
    }
    CHECK_READS(c, READ_SCOPE_VALUE, "READ after writing inside a READ scope");
    uint64_t seen = increment(c);
    CHECK_TRUE(seen == READ_SCOPE_VALUE,
               "READWRITE after writing inside a READ scope showed %llu, expected %d",
               (unsigned long long)seen, READ_SCOPE_VALUE);
}

/* ------------------------------------------------------------- the roles */

/* What every role does after each case: the published values. */
static void check_second_chain(Chunk_t *other, Chunk_t *same) {
    CHECK_READS(other, IN_USE_OTHER_VALUE + 1, "after the +1 through a second chain");
    CHECK_READS(same, IN_USE_SAME_VALUE + 1, "after the +1 through a second chain");
}

static void check_failed_write(Chunk_t *granted) {
    CHECK_READS(granted, GRANTED_VALUE, "after a WRITE of [3, 5] failed");
}

static void check_incremented(Chunk_t *granted) {
    CHECK_READS(granted, GRANTED_VALUE + 1, "after the failed WRITE and a +1");
}

static void check_read_scope(Chunk_t *c) {
    CHECK_READS(c, READ_SCOPE_VALUE + 1, "after a write inside a READ scope and a +1");
}

static void finish(void) {
    barrier_all(BAR_END);
    int verdict = testing_done("integrity");
    /* Every process prints its verdict before any exits (satrun stops the
       others when one fails); past the verdict, nothing is counted. */
    (void)barrier(BAR_VERDICT, nclients);
    if (verdict != EXIT_SUCCESS) {
        exit(EXIT_FAILURE); /* a role returns void: exiting is its way to fail */
    }
}

/* Role 1: the writer of every chunk. */
static void writer(_SAT_Bootstrap_t *bootstrap) {
    (void)bootstrap;
    nclients = (uint32_t)clientGetClientNr();
    Consistency_t *mesi = newHomeBaseMESI();
    Chunk_t *other = CHECK_CHUNK(MALLOC(mesi, IN_USE_OTHER, CHUNK_SIZE));
    CHECK_CHUNK(MALLOC(mesi, IN_USE_OTHER_NEXT, CHUNK_SIZE));
    Chunk_t *same = CHECK_CHUNK(MALLOC(mesi, IN_USE_SAME, CHUNK_SIZE));
    CHECK_CHUNK(MALLOC(mesi, IN_USE_SAME_NEXT, CHUNK_SIZE));
    Chunk_t *granted = CHECK_CHUNK(MALLOC(mesi, GRANTED, CHUNK_SIZE));
    Chunk_t *refused = CHECK_CHUNK(MALLOC(mesi, REFUSED, CHUNK_SIZE));
    Chunk_t *read_scope = CHECK_CHUNK(MALLOC(mesi, READ_SCOPE, CHUNK_SIZE));
    publish(other, IN_USE_OTHER_VALUE);
    publish(same, IN_USE_SAME_VALUE);
    publish(granted, GRANTED_VALUE);
    publish(refused, REFUSED_VALUE);
    publish(read_scope, READ_SCOPE_VALUE);
    barrier_all(BAR_PUBLISHED);

    /* Case 1 by the writer itself: LOOKUP gives back its MALLOC's chain. */
    CHECK_TRUE(LOOKUP(IN_USE_SAME) == same, "LOOKUP(%d): the MALLOC's chain", IN_USE_SAME);
    second_chain_over_chunk_in_use(IN_USE_SAME, IN_USE_SAME_NEXT, IN_USE_SAME_VALUE);
    barrier_all(BAR_SECOND_CHAIN);
    check_second_chain(other, same);

    barrier_all(BAR_SUBSCRIBED);
    barrier_all(BAR_FAILED_WRITE);
    check_failed_write(granted);
    barrier_all(BAR_CHECKED_FAILED_WRITE);
    uint64_t seen = increment(granted);
    CHECK_TRUE(seen == GRANTED_VALUE, "READWRITE of chunk 3 after the failed WRITE showed %llu",
               (unsigned long long)seen);
    barrier_all(BAR_INCREMENTED);
    check_incremented(granted);

    barrier_all(BAR_READ_SCOPE);
    check_read_scope(read_scope);
    finish();
}

/* Role 2: case 1 from another process, the subscriber of case 2, case 3. */
static void other(_SAT_Bootstrap_t *bootstrap) {
    (void)bootstrap;
    nclients = (uint32_t)clientGetClientNr();
    barrier_all(BAR_PUBLISHED);

    second_chain_over_chunk_in_use(IN_USE_OTHER, IN_USE_OTHER_NEXT, IN_USE_OTHER_VALUE);
    barrier_all(BAR_SECOND_CHAIN);
    check_second_chain(CHECK_CHUNK(LOOKUP(IN_USE_OTHER)), CHECK_CHUNK(LOOKUP(IN_USE_SAME)));

    /* Subscribed before the failing WRITE: the next version published is
       the +1, the handler's first call must see 8. */
    Chunk_t *granted = CHECK_CHUNK(LOOKUP(GRANTED));
    CHECK_OK(SUBSCRIBE(granted, on_granted, NULL));
    barrier_all(BAR_SUBSCRIBED);
    barrier_all(BAR_FAILED_WRITE);
    check_failed_write(granted);
    barrier_all(BAR_CHECKED_FAILED_WRITE);
    barrier_all(BAR_INCREMENTED);
    check_incremented(granted);
    /* The +1 notifies this process: wait for the handler (it wakes us). */
    CHECK_OK(rendezvous(RDV_NOTIFIED));
    CHECK_TRUE(granted_notifications == 1 && granted_notified_value == GRANTED_VALUE + 1,
               "chunk 3's subscriber was first notified of %llu (call %d); only the +1's %d "
               "was published since it subscribed",
               (unsigned long long)granted_notified_value, granted_notifications,
               GRANTED_VALUE + 1);

    write_in_read_scope();
    barrier_all(BAR_READ_SCOPE);
    check_read_scope(CHECK_CHUNK(LOOKUP(READ_SCOPE)));
    finish();
}

/* Role 3: case 2's failing WRITE; checks the others' cases. */
static void third(_SAT_Bootstrap_t *bootstrap) {
    (void)bootstrap;
    nclients = (uint32_t)clientGetClientNr();
    barrier_all(BAR_PUBLISHED);
    barrier_all(BAR_SECOND_CHAIN);
    check_second_chain(CHECK_CHUNK(LOOKUP(IN_USE_OTHER)), CHECK_CHUNK(LOOKUP(IN_USE_SAME)));

    barrier_all(BAR_SUBSCRIBED);
    failing_write();
    barrier_all(BAR_FAILED_WRITE);
    /* A chain of chunk 3 alone, looked up after the WRITE failed. */
    Chunk_t *granted = CHECK_CHUNK(LOOKUP(GRANTED));
    check_failed_write(granted);
    barrier_all(BAR_CHECKED_FAILED_WRITE);
    barrier_all(BAR_INCREMENTED);
    check_incremented(granted);

    barrier_all(BAR_READ_SCOPE);
    check_read_scope(CHECK_CHUNK(LOOKUP(READ_SCOPE)));
    finish();
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    _SAT_Roles_t roles[4] = {NULL, writer, other, third};
    int status = _SAT_BOOTSTRAP(roles, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "integrity: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    return 0;
}
