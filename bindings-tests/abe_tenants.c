/* The encryption layer through the C ABI (a libsat built with feature abe,
 * this file compiled with -DSAT_ABE): two tenants and a process with no
 * key, on 2 servers and 4 clients. The protected data is read with the
 * plain calls (LOOKUP, READ, GET, readSymbol), as a program written before
 * the layer reads it.
 *
 *   SAT_ABE_KEY=KEYS/tenant-{rank}.key SAT_CHUNK_SIZE=400 satrun \
 *       --topology bindings-tests/abe_topology.xml \
 *       -n 5 ./abe_tenants KEYS : -n 1 env -u SAT_ABE_KEY ./abe_tenants KEYS
 *
 * KEYS holds tenant-2.key (tenant_a writer), tenant-3.key (tenant_a),
 * tenant-4.key (tenant_b writer), authority.key and corrupt.key; rank 5
 * runs without SAT_ABE_KEY. Steps, between barriers of the 4 clients:
 * 1. rank 2 allocates chain A (protected, 3 chunks) and writes it, writes a
 *    protected symbol, a plain chain and a plain symbol.
 * 2. rank 3 (tenant_a) LOOKUPs A and reads the bytes, and the symbol;
 *    rank 4 (tenant_b) is denied both and may not write A; rank 5 is denied
 *    for want of a key, then loads one with sat_abe_load_key and reads.
 * 3. rank 2 starts a new epoch whose read policy needs `writer`, and writes.
 * 4. rank 3 and rank 5 (tenant_a without writer) are denied the new
 *    version, rank 4 too; rank 2 reads it. Rank 3 finds the plain bytes
 *    rank 4 wrote over a protected symbol refused as an integrity error. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>
#include <sat_compat.h>

#include "testing.h"

#if !defined(SAT_ABE)
#error "compile with -DSAT_ABE, against a libsat built with feature abe"
#endif

enum { BAR_WRITTEN = 1, BAR_READ, BAR_NEW_EPOCH, BAR_DONE };
enum { WRITER = 2, READER = 3, OTHER = 4, KEYLESS = 5, CLIENTS = 4 };

#define A_ID 100
#define A_SIZE 1000 /* 3 chunks of SAT_CHUNK_SIZE=400 */
#define A_CHUNKS 3
#define PLAIN_ID 300
#define READ_A "tenant_a or contractor"
#define WRITE_A "tenant_a and writer"
#define SECRET "abe.a.secret"
#define SECRET_TEXT "for tenant_a only"
#define PLAIN_SYMBOL "abe.plain"
/* Written protected by rank 2, then over with plain bytes by rank 4. */
#define FORGED "abe.forged"
#define PLAIN_TEXT "for everyone"

static const char *keys; /* the key directory, argv[1] */

static unsigned char pattern(int round, size_t i) {
    return (unsigned char)((i * 7u) ^ (unsigned)(0xA0 + round));
}

/* `chunk->data` holds pattern `round`. */
static int holds(const sat_chunk_t *chunk, int round) {
    for (size_t i = 0; i < chunk->size; i++) {
        if ((unsigned char)chunk->data[i] != pattern(round, i)) {
            return 0;
        }
    }
    return 1;
}

static int all_zero(const sat_chunk_t *chunk) {
    for (size_t i = 0; i < chunk->size; i++) {
        if (chunk->data[i] != 0) {
            return 0;
        }
    }
    return 1;
}

/* No byte of pattern `round` is in `chunk->data` at its place (zeros aside). */
static int shows_none_of(const sat_chunk_t *chunk, int round) {
    for (size_t i = 0; i < chunk->size; i++) {
        unsigned char p = pattern(round, i);
        if (p != 0 && (unsigned char)chunk->data[i] == p) {
            return 0;
        }
    }
    return 1;
}

static void key_path(char *out, size_t n, const char *file) {
    snprintf(out, n, "%s/%s", keys, file);
}

/* symbol `name` holds `text` (with its NUL). */
static void check_symbol(const char *name, const char *text) {
    void *data = NULL;
    size_t size = 0;
    CHECK_OK(readSymbol(sdsm, name, &data, &size));
    CHECK_TRUE(data != NULL && size == strlen(text) + 1 && memcmp(data, text, size) == 0,
               "%s: %zu bytes", name, size);
    free(data);
}

/* readSymbol of `name` is denied; the out-parameters stay as they were. */
static void check_symbol_denied(const char *name, const char *part) {
    void *data = (void *)&data;
    size_t size = 12345;
    CHECK_STATUS(readSymbol(sdsm, name, &data, &size), SAT_ERR_ACCESS_DENIED, part);
    CHECK_TRUE(data == (void *)&data && size == 12345, "out-parameters written on error");
}

static sat_chunk_t *lookup_a(void) {
    sat_chunk_t *a = CHECK_CHUNK(LOOKUP(newHomeBaseMESI(), A_ID, A_CHUNKS));
    if (a == NULL) {
        return NULL;
    }
    CHECK_TRUE(a->id == A_ID && a->size == A_SIZE && a->nchunks == A_CHUNKS && a->data != NULL,
               "LOOKUP of A: id %llu, %zu bytes, %zu chunks", (unsigned long long)a->id,
               a->size, a->nchunks);
    CHECK_TRUE(LOOKUP(newHomeBaseMESI(), A_ID, A_CHUNKS) == a, "a second LOOKUP, another handle");
    return a;
}

/* A reads as pattern `round`, with READ and with GET. */
static void check_reads(sat_chunk_t *a, int round) {
    CHECK_OK(READ(a));
    CHECK_TRUE(holds(a, round), "A does not hold pattern %d", round);
    CHECK_OK(RELEASE(a));
    CHECK_OK(GET(a));
    CHECK_TRUE(holds(a, round), "after GET, A does not hold pattern %d", round);
}

/* READ and GET of A are denied, no scope stays open, and no byte of the
 * version denied (pattern `round`) shows in A's data. */
static void check_denied(sat_chunk_t *a, int round) {
    CHECK_STATUS(READ(a), SAT_ERR_ACCESS_DENIED, "access denied");
    CHECK_TRUE(shows_none_of(a, round), "A's data shows pattern %d after a denied READ", round);
    CHECK_STATUS(RELEASE(a), SAT_ERR_USAGE, "without an acquire");
    CHECK_STATUS(GET(a), SAT_ERR_ACCESS_DENIED, "access denied");
    CHECK_TRUE(shows_none_of(a, round), "A's data shows pattern %d after a denied GET", round);
}

/* --------------------------------------------------------------- rank 2 */

static sat_chunk_t *a_writer, *plain;

static void writer_allocates(void) {
    CHECK_NULL(MALLOC_PROTECTED(A_ID, A_SIZE, NULL, WRITE_A), "read policy is NULL");
    CHECK_TRUE(sat_last_status() == SAT_ERR_ARGUMENT, "a NULL policy gave %d",
               sat_last_status());
    CHECK_NULL(MALLOC_PROTECTED(A_ID, A_SIZE, READ_A, "tenant_a and"), "at character");
    CHECK_TRUE(sat_last_status() == SAT_ERR_USAGE, "a malformed policy gave %d",
               sat_last_status());
    /* tenant_a writer may not create data only tenant_b may write. */
    CHECK_NULL(MALLOC_PROTECTED(A_ID + 50, 10, "tenant_b", "tenant_b and writer"),
               "may not write");
    CHECK_TRUE(sat_last_status() == SAT_ERR_ACCESS_DENIED, "a foreign write policy gave %d",
               sat_last_status());

    sat_chunk_t *a =
        CHECK_CHUNK(MALLOC_PROTECTED(newHomeBaseMESI(), A_ID, A_SIZE, READ_A, WRITE_A));
    if (a == NULL) {
        exit(EXIT_FAILURE);
    }
    a_writer = a;
    CHECK_TRUE(a->id == A_ID && a->size == A_SIZE && a->nchunks == A_CHUNKS && a->data != NULL,
               "A: id %llu, %zu bytes, %zu chunks", (unsigned long long)a->id, a->size,
               a->nchunks);
    CHECK_TRUE(((uintptr_t)a->data & 63) == 0, "A's data is not 64-byte aligned");
    CHECK_TRUE(MALLOC_PROTECTED(A_ID, A_SIZE, READ_A, WRITE_A) == a,
               "MALLOC_PROTECTED again, another handle");
    CHECK_NULL(MALLOC_PROTECTED(A_ID, A_SIZE, READ_A, "tenant_a"), "another write policy");
    CHECK_NULL(MALLOC(A_ID, A_SIZE), "protected");

    /* Never written: zeros. */
    CHECK_OK(READ(a));
    CHECK_TRUE(all_zero(a), "a new protected chain is not zeros");
    CHECK_OK(RELEASE(a));
    CHECK_OK(WRITE(a));
    for (size_t i = 0; i < a->size; i++) {
        a->data[i] = (char)pattern(0, i);
    }
    CHECK_OK(RELEASE(a));
    check_reads(a, 0);
    /* ABORT publishes nothing, and the next scope decrypts the version again rather than take
     * what was written meanwhile for it. */
    CHECK_OK(WRITE(a));
    memset(a->data, 0x5a, a->size);
    CHECK_OK(sat_abort(a));
    check_reads(a, 0);

    CHECK_OK(writeSymbolProtected(sdsm, SECRET, SECRET_TEXT, sizeof SECRET_TEXT, "tenant_a",
                                  WRITE_A));
    CHECK_STATUS(writeSymbolProtected(sdsm, SECRET, SECRET_TEXT, sizeof SECRET_TEXT, NULL,
                                      WRITE_A),
                 SAT_ERR_ARGUMENT, "read policy is NULL");
    check_symbol(SECRET, SECRET_TEXT);
    CHECK_OK(writeSymbol(sdsm, PLAIN_SYMBOL, PLAIN_TEXT, sizeof PLAIN_TEXT));
    CHECK_OK(writeSymbolProtected(sdsm, FORGED, SECRET_TEXT, sizeof SECRET_TEXT, "tenant_a",
                                  WRITE_A));

    plain = CHECK_CHUNK(MALLOC(PLAIN_ID, 64));
    if (plain != NULL) {
        CHECK_OK(WRITE(plain));
        memset(plain->data, 'p', plain->size);
        CHECK_OK(RELEASE(plain));
    }
}

/* Never run: the data subscription it is given to is refused. */
static void on_release(sat_chunk_t *c, const sat_release_t *r, void *params) {
    (void)c;
    (void)r;
    (void)params;
}

static void writer_new_epoch(void) {
    sat_chunk_t *a = a_writer;
    CHECK_STATUS(sat_abe_new_epoch(NULL, NULL), SAT_ERR_ARGUMENT, "chunk is NULL");
    if (plain != NULL) {
        CHECK_STATUS(sat_abe_new_epoch(plain, NULL), SAT_ERR_USAGE, "not protected");
    }
    CHECK_STATUS(sat_abe_new_epoch(a, "tenant_a and ("), SAT_ERR_USAGE, "at character");
    /* A protected chain's bytes are sealed: a notification cannot carry them. */
    CHECK_STATUS(sat_subscribe_data(a, on_release, NULL), SAT_ERR_USAGE, "sealed");
    CHECK_OK(READ(a));
    CHECK_STATUS(sat_abe_new_epoch(a, NULL), SAT_ERR_USAGE, "inside a scope");
    CHECK_OK(RELEASE(a));
    /* tenant_a's readers without `writer` lose access to what comes next. */
    CHECK_OK(sat_abe_new_epoch(a, "tenant_a and writer"));
    check_reads(a, 0);
    CHECK_OK(READWRITE(a));
    CHECK_TRUE(holds(a, 0), "READWRITE after the new epoch");
    for (size_t i = 0; i < a->size; i++) {
        a->data[i] = (char)pattern(1, i);
    }
    CHECK_OK(RELEASE(a));
    check_reads(a, 1);
}

/* --------------------------------------------------------------- rank 3 */

static sat_chunk_t *a_reader;

static void reader_reads(void) {
    /* A legacy reader: plain LOOKUP, READ, GET and readSymbol. */
    a_reader = lookup_a();
    if (a_reader == NULL) {
        exit(EXIT_FAILURE);
    }
    check_reads(a_reader, 0);
    /* Joining the chain with its write policy gives the same handle. */
    CHECK_TRUE(MALLOC_PROTECTED(A_ID, A_SIZE, "ignored", WRITE_A) == a_reader,
               "MALLOC_PROTECTED after LOOKUP, another handle");
    check_symbol(SECRET, SECRET_TEXT);
    check_symbol(PLAIN_SYMBOL, PLAIN_TEXT);
    sat_chunk_t *p = CHECK_CHUNK(LOOKUP(PLAIN_ID));
    if (p != NULL) {
        CHECK_OK(GET(p));
        CHECK_TRUE(p->size == 64 && p->data[0] == 'p' && p->data[63] == 'p', "the plain chain");
    }
}

/* --------------------------------------------------------------- rank 4 */

static sat_chunk_t *a_other;

static void other_is_denied(void) {
    /* Looking up is allowed; the data is what is protected. */
    a_other = lookup_a();
    if (a_other == NULL) {
        exit(EXIT_FAILURE);
    }
    check_denied(a_other, 0);
    CHECK_TRUE(all_zero(a_other), "a tenant that was never let in sees bytes of A");
    check_symbol_denied(SECRET, "access denied");
    check_symbol(PLAIN_SYMBOL, PLAIN_TEXT);
    /* tenant_b may not write A: the release is refused and seals nothing. */
    CHECK_OK(WRITE(a_other));
    CHECK_STATUS(RELEASE(a_other), SAT_ERR_ACCESS_DENIED, "may not write");
    /* The plain API can write over a protected symbol; no reader takes the
     * plain bytes for its value (rank 3 reads it after BAR_READ). */
    CHECK_OK(writeSymbol(sdsm, FORGED, "forged", sizeof "forged"));
}

/* --------------------------------------------------------------- rank 5 */

static sat_chunk_t *a_keyless;

static void keyless_loads_a_key(void) {
    /* No SAT_ABE_KEY and no key loaded: protected data is denied, with what to do. */
    CHECK_NULL(LOOKUP(newHomeBaseMESI(), A_ID, A_CHUNKS), "SAT_ABE_KEY");
    CHECK_TRUE(sat_last_status() == SAT_ERR_ACCESS_DENIED && testing_error_says("sat-abe keygen"),
               "LOOKUP with no key gave %d", sat_last_status());
    check_symbol_denied(SECRET, "SAT_ABE_KEY");
    check_symbol(PLAIN_SYMBOL, PLAIN_TEXT);
    CHECK_NULL(MALLOC_PROTECTED(A_ID + 60, 10, "tenant_a", WRITE_A), "SAT_ABE_KEY");
    CHECK_STATUS(writeSymbolProtected(sdsm, "abe.keyless", "x", 1, "tenant_a", WRITE_A),
                 SAT_ERR_ACCESS_DENIED, "SAT_ABE_KEY");

    /* Key files that cannot serve. */
    char path[4096];
    CHECK_STATUS(sat_abe_load_key(NULL), SAT_ERR_ARGUMENT, "path is NULL");
    key_path(path, sizeof path, "missing.key");
    CHECK_STATUS(sat_abe_load_key(path), SAT_ERR_USAGE, "missing.key");
    key_path(path, sizeof path, "authority.key");
    CHECK_STATUS(sat_abe_load_key(path), SAT_ERR_USAGE, "the authority's secret keys");
    key_path(path, sizeof path, "corrupt.key");
    CHECK_STATUS(sat_abe_load_key(path), SAT_ERR_USAGE, "not a SAT key file");

    /* tenant_a's key, loaded explicitly: the same LOOKUP now succeeds. */
    key_path(path, sizeof path, "tenant-3.key");
    CHECK_OK(sat_abe_load_key(path));
    CHECK_STATUS(sat_abe_load_key(path), SAT_ERR_USAGE, "one tenant");
    a_keyless = lookup_a();
    if (a_keyless == NULL) {
        exit(EXIT_FAILURE);
    }
    check_reads(a_keyless, 0);
    check_symbol(SECRET, SECRET_TEXT);
}

/* ----------------------------------------------------------------- roles */

static void role(sat_bootstrap_t *b) {
    CHECK_TRUE(b->size == 6 && sat_client_count() == CLIENTS, "size %u, %d clients", b->size,
               sat_client_count());
    uint32_t me = b->rank;
    if (me == WRITER) {
        writer_allocates();
    }
    CHECK_OK(barrier(BAR_WRITTEN, CLIENTS));
    if (me == READER) {
        reader_reads();
    } else if (me == OTHER) {
        other_is_denied();
    } else if (me == KEYLESS) {
        keyless_loads_a_key();
    }
    CHECK_OK(barrier(BAR_READ, CLIENTS));
    if (me == WRITER) {
        writer_new_epoch();
    }
    CHECK_OK(barrier(BAR_NEW_EPOCH, CLIENTS));
    if (me == READER) {
        check_denied(a_reader, 1);
        void *data = (void *)&data;
        size_t size = 12345;
        CHECK_STATUS(readSymbol(sdsm, FORGED, &data, &size), SAT_ERR_INTEGRITY,
                     "written over through the plain API");
        check_symbol(PLAIN_SYMBOL, PLAIN_TEXT);
        /* A revocation list taken while the process runs; an older one is
         * refused: revocations are never undone. */
        char path[4096];
        CHECK_STATUS(sat_abe_load_revocations(NULL), SAT_ERR_ARGUMENT, "path is NULL");
        key_path(path, sizeof path, "missing.crl");
        CHECK_STATUS(sat_abe_load_revocations(path), SAT_ERR_USAGE, "missing.crl");
        key_path(path, sizeof path, "revoked-2.crl");
        CHECK_OK(sat_abe_load_revocations(path));
        key_path(path, sizeof path, "revoked-1.crl");
        CHECK_STATUS(sat_abe_load_revocations(path), SAT_ERR_INTEGRITY, "older than list 2");
        check_denied(a_reader, 1);
    } else if (me == KEYLESS) {
        check_denied(a_keyless, 1);
    } else if (me == OTHER) {
        check_denied(a_other, 1);
        CHECK_TRUE(all_zero(a_other), "a tenant that was never let in sees bytes of A");
    } else if (me == WRITER) {
        check_reads(a_writer, 1);
    }
    CHECK_OK(barrier(BAR_DONE, CLIENTS));
    char name[64];
    snprintf(name, sizeof name, "abe_tenants (rank %u)", me);
    if (testing_done(name) != EXIT_SUCCESS) {
        exit(EXIT_FAILURE); /* a role returns void: exiting is its way to fail */
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: abe_tenants KEY_DIRECTORY (under satrun)\n");
        return 2;
    }
    keys = argv[1];
    _SAT_Roles_t roles[2] = {NULL, role};
    int status = _SAT_BOOTSTRAP(roles, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "abe_tenants: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    return 0;
}
