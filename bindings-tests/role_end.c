/* The end of a role and the scopes other threads hold (sat.h, Threads: "A
 * thread that exits or is cancelled inside a scope leaves it open: the
 * chunk's other acquirers, and the end of the role, wait until another
 * thread ends it"; Lifetimes: RELEASE and ABORT still go through).
 *
 * Rank 1: a thread opens READWRITE scopes on two chunks, writes 1 into
 * both and exits inside them. Another thread waits until the role has
 * returned and SAT refuses new calls (the end of the role has begun), then
 * ABORTs the first chunk's scope and RELEASEs the second's: both must
 * succeed, the abort publishing nothing and the release publishing 1.
 * Rank 2 reads the released chunk until it holds 1, then the aborted one,
 * which must still hold 0.
 *
 *   satrun -n 3 -- ./role_end        every check passes: exit 0
 *
 * (no topology: rank 0 is the server, ranks 1 and 2 clients of role 1). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>

#include "testing.h"

#define ABORTED_ID 5000000u
#define RELEASED_ID 5000001u
#define PROBE_ID 5000002u

static sat_chunk_t *aborted, *released, *probe;
static atomic_int role_returned;
static pthread_t ender;
static int ending;
static int abort_status = -1, release_status = -1;
static char abort_error[512], release_error[512];

static uint64_t first_word(sat_chunk_t *c) {
    uint64_t v;
    memcpy(&v, c->data, sizeof v);
    return v;
}

static void *open_and_exit(void *arg) {
    (void)arg;
    if (sat_readwrite(aborted) != SAT_OK || sat_readwrite(released) != SAT_OK) {
        fprintf(stderr, "open_and_exit: %s\n", sat_last_error());
        return NULL;
    }
    uint64_t one = 1;
    memcpy(aborted->data, &one, sizeof one);
    memcpy(released->data, &one, sizeof one);
    return NULL; /* inside both scopes */
}

static void *end_after_the_role(void *arg) {
    (void)arg;
    while (!atomic_load(&role_returned)) sched_yield();
    /* Until SAT refuses a new call: the end of the role has begun. */
    while (sat_read(probe) == SAT_OK) sat_release(probe);
    abort_status = sat_abort(aborted);
    snprintf(abort_error, sizeof abort_error, "%s", sat_last_error());
    release_status = sat_release(released);
    snprintf(release_error, sizeof release_error, "%s", sat_last_error());
    return NULL;
}

static void role(sat_bootstrap_t *b) {
    aborted = CHECK_CHUNK(sat_malloc(NULL, ABORTED_ID, 8));
    released = CHECK_CHUNK(sat_malloc(NULL, RELEASED_ID, 8));
    CHECK_OK(sat_barrier(1, 2));
    if (b->rank == 1) {
        probe = CHECK_CHUNK(sat_malloc(NULL, PROBE_ID, 8));
        pthread_t opener;
        if (pthread_create(&opener, NULL, open_and_exit, NULL) == 0) pthread_join(opener, NULL);
        ending = pthread_create(&ender, NULL, end_after_the_role, NULL) == 0;
        CHECK_TRUE(ending, "could not start the thread that ends the scopes");
        if (testing_done("role_end role (rank 1)") != EXIT_SUCCESS) sat_role_failed("a check failed");
        atomic_store(&role_returned, 1);
        return;
    }
    uint64_t seen = 0;
    while (seen != 1) {
        CHECK_OK(sat_read(released));
        seen = first_word(released);
        CHECK_OK(sat_release(released));
    }
    CHECK_OK(sat_read(aborted));
    CHECK_TRUE(first_word(aborted) == 0, "the aborted scope's write was published: %llu",
               (unsigned long long)first_word(aborted));
    CHECK_OK(sat_release(aborted));
    if (testing_done("role_end role (rank 2)") != EXIT_SUCCESS) sat_role_failed("a check failed");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        printf("role_end: sat_bootstrap gave %d (%s): %s\n", status, sat_status_string(status),
               sat_last_error());
        return 1;
    }
    if (!ending) return EXIT_SUCCESS;
    pthread_join(ender, NULL);
    CHECK_TRUE(abort_status == SAT_OK, "ABORT after the role returned gave %d: %s", abort_status,
               abort_error);
    CHECK_TRUE(release_status == SAT_OK, "RELEASE after the role returned gave %d: %s",
               release_status, release_error);
    return testing_done("role_end after the role");
}
