/* Lifetimes in a run: handles checked before use, a chain given back, a
 * fork() child, two threads allocating one chain, a request too large to
 * make, a role that returns while three threads contend for one chunk, and
 * a role that fails.
 *
 *   satrun -n 3 -- ./lifetimes          every check passes: exit 0
 *   satrun -n 3 -- ./lifetimes --fail   rank 2's role calls sat_role_failed:
 *                                       its sat_bootstrap returns
 *                                       SAT_ERR_ROLE, it exits 3, and satrun
 *                                       exits non-zero
 *
 * (no topology: rank 0 is the server, ranks 1 and 2 clients of role 1). */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sat.h>

#include "testing.h"

#define BAR_END 2
#define BIG_ID 1000000u
#define BIG_BYTES (64u << 20)
#define RACE_BASE 2000000u
#define RACES 16
#define SHARED_ID 3000000u

/* A handle of the run, used again after sat_bootstrap returned. */
static sat_chunk_t *kept;
static int fail_mode;

/* Threads that take turns on one chunk until SAT refuses them: the role
 * returns while they contend. Its end waits for their calls in progress,
 * which wait for each other's scopes, so their RELEASEs must still go
 * through then, or the run never ends. They leave the chunk's bytes alone:
 * its memory goes with the run. */
#define CONTENDERS 3
static pthread_t contenders[CONTENDERS];
static int contending;
static atomic_long turns;

static void *contend(void *arg) {
    sat_chunk_t *c = arg;
    while (sat_readwrite(c) == SAT_OK) {
        atomic_fetch_add(&turns, 1);
        if (sat_release(c) != SAT_OK) break;
    }
    return NULL;
}

static void start_contenders(sat_chunk_t *c) {
    for (int i = 0; i < CONTENDERS; i++)
        if (pthread_create(&contenders[i], NULL, contend, c) == 0) contending++;
    while (atomic_load(&turns) < 300) usleep(1000);
}

static void on_release(sat_chunk_t *c, void *params) {
    (void)c;
    (void)params;
}

/* A chain given back: its memory goes back to the system, the handle is
 * refused from then on, and the chunks keep their data in the S-DSM. */
static void given_back(int idx) {
    uint64_t id = BIG_ID + (uint64_t)idx * 10000u;
    long before = testing_rss_anon_kib();
    sat_chunk_t *c = CHECK_CHUNK(sat_malloc(NULL, id, BIG_BYTES));
    if (c == NULL) return;
    CHECK_OK(sat_subscribe(c, on_release, NULL));
    CHECK_OK(sat_write(c));
    memset(c->data, 0x5a, BIG_BYTES);
    c->data[BIG_BYTES - 1] = (char)idx;
    /* Inside a scope it cannot be given back, and the refusal changes
       nothing: the subscription through the handle goes on. */
    CHECK_STATUS(sat_chunk_free(c), SAT_ERR_USAGE, "FREE of the chain");
    CHECK_OK(sat_release(c));
    CHECK_OK(sat_unsubscribe(c));
    long held = testing_rss_anon_kib();
    CHECK_OK(sat_chunk_free(c));
    long after = testing_rss_anon_kib();
    printf("[%d] RssAnon: %ld KiB before MALLOC, %ld holding the chain, %ld after FREE\n", idx,
           before, held, after);
    CHECK_TRUE(held - before >= (long)(BIG_BYTES / 1024) * 3 / 4,
               "a written 64 MiB chain added only %ld KiB", held - before);
    if (testing_rss_shows_frees())
        CHECK_TRUE(held - after >= (long)(BIG_BYTES / 1024) * 3 / 4,
                   "FREE gave back only %ld KiB of a 64 MiB chain", held - after);
    /* The handle is refused, whatever the call. */
    CHECK_STATUS(sat_read(c), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_write(c), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_release(c), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_get(c), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_chunk_free(c), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_unsubscribe(c), SAT_ERR_USAGE, "not valid");
    /* The data stayed in the S-DSM: LOOKUP finds it again. */
    uint32_t n = (uint32_t)((BIG_BYTES + 65535u) / 65536u);
    sat_chunk_t *again = CHECK_CHUNK(sat_lookup(NULL, id, n));
    if (again == NULL) return;
    CHECK_TRUE(again->size == BIG_BYTES, "the chain looked up again has %zu bytes", again->size);
    CHECK_OK(sat_read(again));
    CHECK_TRUE(again->data[0] == 0x5a && again->data[BIG_BYTES - 1] == (char)idx,
               "the data after FREE and LOOKUP: %d ... %d", again->data[0],
               again->data[BIG_BYTES - 1]);
    CHECK_OK(sat_release(again));
    CHECK_OK(sat_chunk_free(again));
    /* A MAP'd chain given back leaves the caller's memory alone. */
    char mine[64];
    memset(mine, 7, sizeof mine);
    sat_chunk_t *m = CHECK_CHUNK(sat_map(NULL, id + 5000u, sizeof mine, mine));
    if (m == NULL) return;
    CHECK_OK(sat_chunk_free(m));
    CHECK_TRUE(mine[0] == 7 && mine[63] == 7, "the MAP'd memory after FREE");
}

/* Handles and consistencies that never came from SAT, and a request too
 * large to make, are refused before anything is allocated. */
static void refused(void) {
    sat_chunk_t fake;
    memset(&fake, 0, sizeof fake);
    CHECK_STATUS(sat_read(&fake), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_chunk_free(NULL), SAT_ERR_ARGUMENT, "NULL");
    long before = testing_rss_anon_kib();
    CHECK_NULL(sat_lookup(NULL, 5, UINT32_MAX), "at most");
    CHECK_TRUE(sat_last_status() == SAT_ERR_ARGUMENT, "LOOKUP of UINT32_MAX chunks: %d",
               sat_last_status());
    long ids[2] = {1, 2};
    sat_ulong_list_t huge = {(size_t)1 << 40, (const unsigned long *)ids};
    CHECK_NULL(sat_lookup_lst(NULL, &huge), "at most");
    CHECK_TRUE(testing_rss_anon_kib() - before < 64 * 1024, "refusing grew the process by %ld KiB",
               testing_rss_anon_kib() - before);
    int not_a_protocol = 1;
    CHECK_NULL(sat_malloc((const sat_consistency_t *)&not_a_protocol, 77, 8), "consistency");
    CHECK_TRUE(sat_last_status() == SAT_ERR_ARGUMENT, "a bad consistency: %d",
               sat_last_status());
}

/* A fork() child has no client: each call is refused, the parent's run
 * goes on. It ends by exit(), whose handlers are the parent's copies: SAT's
 * must neither say nor tell satrun that the parent left its role. */
static void forked(sat_chunk_t *c) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int ok = sat_read(c) == SAT_ERR_USAGE && testing_error_says("fork") &&
                 sat_barrier(77, 2) == SAT_ERR_USAGE && sat_rank() < 0 &&
                 sat_malloc(NULL, 99, 8) == NULL && testing_error_says("fork") &&
                 sat_connect("sat://x@127.0.0.1:1") == SAT_ERR_USAGE;
        if (!ok) fprintf(stderr, "FAIL the fork child: last error \"%s\"\n", sat_last_error());
#if defined(__SANITIZE_ADDRESS__)
        /* LeakSanitizer would count the parent's heap, copied, as leaks. */
        _exit(ok ? 0 : 1);
#else
        exit(ok ? 0 : 1);
#endif
    }
    CHECK_TRUE(pid > 0, "fork failed");
    if (pid <= 0) return;
    int status = 0;
    CHECK_TRUE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the fork child's calls were not all refused (status %d)", status);
    /* The parent's client is untouched. */
    CHECK_OK(sat_read(c));
    CHECK_OK(sat_release(c));
}

/* Two threads that MALLOC (or LOOKUP) one chain at once get one handle. */
struct race {
    pthread_barrier_t *start;
    uint64_t id;
    int lookup;
    sat_chunk_t *got;
};

static void *racer(void *arg) {
    struct race *r = arg;
    pthread_barrier_wait(r->start);
    r->got = r->lookup ? sat_lookup(NULL, r->id, 4) : sat_malloc(NULL, r->id, 4 * 65536);
    if (r->got == NULL) fprintf(stderr, "racer: %s\n", sat_last_error());
    return NULL;
}

static void races(int idx) {
    for (int i = 0; i < RACES; i++) {
        /* Even rounds MALLOC chains of this rank; odd ones LOOKUP the
         * chains the other rank allocated (barrier below). */
        int lookup = i % 2;
        uint64_t id = lookup ? RACE_BASE + (uint64_t)(1 - idx) * 1000u + (uint64_t)(i - 1) * 10u
                             : RACE_BASE + (uint64_t)idx * 1000u + (uint64_t)i * 10u;
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, 2);
        struct race a = {&start, id, lookup, NULL}, b = {&start, id, lookup, NULL};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, racer, &a);
        pthread_create(&tb, NULL, racer, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&start);
        CHECK_TRUE(a.got != NULL && a.got == b.got, "round %d (%s): two handles %p and %p", i,
                   lookup ? "LOOKUP" : "MALLOC", (void *)a.got, (void *)b.got);
        /* Round i's chains exist before the other rank looks them up. */
        CHECK_OK(sat_barrier(10 + (uint32_t)i, 2));
    }
}

static void role(sat_bootstrap_t *b) {
    int idx = (int)b->rank - 1;
    refused();
    given_back(idx);
    races(idx);
    sat_chunk_t *shared = CHECK_CHUNK(sat_malloc(NULL, SHARED_ID, 256));
    if (shared != NULL) forked(shared);
    kept = shared;
    CHECK_OK(sat_barrier(BAR_END, 2));
    if (fail_mode && b->rank == 2) {
        /* The role fails: a scope left open publishes nothing. */
        CHECK_OK(sat_write(shared));
        memset(shared->data, 0xee, 256);
        CHECK_OK(sat_role_failed("the frame was damaged"));
    }
    char name[64];
    snprintf(name, sizeof name, "lifetimes role (rank %u)", b->rank);
    if (testing_done(name) != EXIT_SUCCESS) sat_role_failed("a check failed");
    if (!fail_mode && b->rank == 1 && shared != NULL) start_contenders(shared);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    fail_mode = argc > 1 && strcmp(argv[argc - 1], "--fail") == 0;
    CHECK_STATUS(sat_role_failed("outside"), SAT_ERR_USAGE, "no SAT run");
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    if (status != SAT_OK) {
        printf("lifetimes: sat_bootstrap gave %d (%s): %s\n", status, sat_status_string(status),
               sat_last_error());
        return status == SAT_ERR_ROLE ? 3 : 1;
    }
    /* After the run every handle is refused, never followed (the server,
     * rank 0, played no role: it has none). */
    for (int i = 0; i < contending; i++) pthread_join(contenders[i], NULL);
    if (kept == NULL) return EXIT_SUCCESS;
    CHECK_STATUS(sat_read(kept), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_chunk_free(kept), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_subscribe(kept, NULL, NULL), SAT_ERR_USAGE, "not valid");
    CHECK_STATUS(sat_barrier(1, 2), SAT_ERR_USAGE, "no SAT run");
    return testing_done("lifetimes after the run");
}
