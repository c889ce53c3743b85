/* Checks for the C tests: each check is counted; a failed one prints where
 * and why, with SAT's last error, and the test goes on. A test ends with
 * testing_done(), which prints "PASS <name>: N checks" or "FAIL ..." and
 * gives the exit status. Counters are per thread: a helper thread reports
 * its failures to the thread that joins it. */
#ifndef BINDINGS_TESTS_TESTING_H
#define BINDINGS_TESTS_TESTING_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sat.h>

static _Thread_local int testing_checks, testing_failures;

#define CHECK_TRUE(cond, ...)                                                          \
    do {                                                                               \
        testing_checks++;                                                              \
        if (!(cond)) {                                                                 \
            testing_failures++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, " (last error: \"%s\")\n", sat_last_error());              \
        }                                                                              \
    } while (0)

/* The last error holds `part` (and so is not empty). */
static inline int testing_error_says(const char *part) {
    const char *e = sat_last_error();
    return e != NULL && e[0] != '\0' && strstr(e, part) != NULL;
}

/* `call` returns status `want` and the last error says `part`. */
#define CHECK_STATUS(call, want, part)                                                 \
    do {                                                                               \
        int testing_s_ = (call);                                                       \
        CHECK_TRUE(testing_s_ == (want) && testing_error_says(part),                   \
                   "%s gave %d (%s), expected %d (%s) with a message saying \"%s\"",   \
                   #call, testing_s_, sat_status_string(testing_s_), (int)(want),      \
                   sat_status_string(want), part);                                     \
    } while (0)

/* `call` succeeds. */
#define CHECK_OK(call)                                                                 \
    do {                                                                               \
        int testing_s_ = (call);                                                       \
        CHECK_TRUE(testing_s_ == SAT_OK, "%s gave %d (%s)", #call, testing_s_,         \
                   sat_status_string(testing_s_));                                     \
    } while (0)

/* `call` returns NULL and the last error says `part`. */
#define CHECK_NULL(call, part)                                                         \
    do {                                                                               \
        const void *testing_p_ = (call);                                               \
        CHECK_TRUE(testing_p_ == NULL && testing_error_says(part),                     \
                   "%s gave %p, expected NULL with a message saying \"%s\"", #call,     \
                   testing_p_, part);                                                  \
    } while (0)

/* `call` returns a chunk: evaluates to it (NULL counts as a failure). */
#define CHECK_CHUNK(call) testing_chunk((call), #call, __FILE__, __LINE__)

static inline sat_chunk_t *testing_chunk(sat_chunk_t *c, const char *what, const char *file,
                                         int line) {
    testing_checks++;
    if (c == NULL) {
        testing_failures++;
        fprintf(stderr, "FAIL %s:%d: %s gave NULL: %s\n", file, line, what, sat_last_error());
    }
    return c;
}

/* Whether RSS shows memory given back: not under AddressSanitizer, which
 * keeps freed memory in quarantine, nor under valgrind's memcheck, whose
 * allocator keeps it too (the tests set SAT_TEST_UNDER_MEMCHECK there). */
#if defined(__SANITIZE_ADDRESS__)
#define TESTING_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESTING_SANITIZED 1
#endif
#endif
#ifndef TESTING_SANITIZED
#define TESTING_SANITIZED 0
#endif
static inline int testing_rss_shows_frees(void) {
    return !TESTING_SANITIZED && getenv("SAT_TEST_UNDER_MEMCHECK") == NULL;
}

/* This process's anonymous resident memory, in KiB (RssAnon of
 * /proc/self/status): where a chain's local memory lives. */
static inline long testing_rss_anon_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "RssAnon: %ld kB", &kib) == 1) break;
    }
    fclose(f);
    return kib;
}

/* The `i`-th 8-byte word of a chunk's data (memcpy: no alignment assumed). */
static inline uint64_t testing_load(const sat_chunk_t *c, size_t i) {
    uint64_t v;
    memcpy(&v, c->data + 8 * i, sizeof v);
    return v;
}

static inline void testing_store(sat_chunk_t *c, size_t i, uint64_t v) {
    memcpy(c->data + 8 * i, &v, sizeof v);
}

/* The value a producer writes in word `i` of round `round`. */
static inline uint64_t testing_value(uint64_t round, size_t i) { return round * 1000003u + i * 7u + 1; }

/* A thread's work for the counter tests: `rounds` READWRITE scopes on
 * `chunk`, each adding one to the uint64_t at byte `offset`. A failed call
 * is printed and counted in `failures`, and ends the thread's rounds. */
struct testing_counting {
    sat_chunk_t *chunk;
    size_t offset;
    int rounds;
    int failures;
};

static inline void *testing_count(void *arg) {
    struct testing_counting *c = (struct testing_counting *)arg;
    for (int i = 0; i < c->rounds; i++) {
        uint64_t v;
        if (sat_readwrite(c->chunk) != SAT_OK) {
            fprintf(stderr, "FAIL: READWRITE from a thread: %s\n", sat_last_error());
            c->failures++;
            return NULL;
        }
        memcpy(&v, c->chunk->data + c->offset, sizeof v);
        v++;
        memcpy(c->chunk->data + c->offset, &v, sizeof v);
        if (sat_release(c->chunk) != SAT_OK) {
            fprintf(stderr, "FAIL: RELEASE from a thread: %s\n", sat_last_error());
            c->failures++;
            return NULL;
        }
    }
    return NULL;
}

/* Prints the verdict; the exit status of the test. */
static inline int testing_done(const char *name) {
    if (testing_failures > 0) {
        printf("FAIL %s: %d of %d checks failed\n", name, testing_failures, testing_checks);
        return EXIT_FAILURE;
    }
    printf("PASS %s: %d checks\n", name, testing_checks);
    return EXIT_SUCCESS;
}

#endif
