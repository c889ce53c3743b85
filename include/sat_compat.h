/*
 * sat_compat.h: the names of the SAT report (Share Among Things, CEA),
 * mapped onto the sat_* calls of sat.h, so that the report's listings
 * (Figures 4 to 10) compile with no more change than their pseudo-code
 * forces: declarations, semicolons, and list literals written with
 * SAT_LIST. bindings-tests/figures.c is those listings, compiled and run.
 *
 * Written by hand (sat.h is generated). C99 or later; the list literals
 * (SAT_LIST) are C compound literals, not C++.
 *
 * Every name is a macro or a typedef over sat.h, so calls return what the
 * sat_* call returns: a status (SAT_OK = 0, negative on error) or a chunk
 * (NULL on error); sat_last_error() says what went wrong.
 *
 * What differs from the report, and why:
 * - MALLOC and LOOKUP take the forms of Figure 4 and of Figure 9:
 *   MALLOC(consistency, id, size) or MALLOC(id, size) (home-based MESI);
 *   LOOKUP(consistency, id, nbchunks) or LOOKUP(id) (one chunk).
 * - MAP(chunk, consistency, baseid, size, data) assigns `chunk` (Figure 6).
 * - Chunk_t's `data` is `char *` (sat.h says why): Figure 5's
 *   `chunk->data[i]` compiles as it is; other types need a cast.
 * - The report's `sdsm` argument of the symbol calls names the process's
 *   S-DSM; a process has exactly one, so the argument is ignored (it is
 *   not even evaluated: it needs no declaration).
 * - The report's list literal `{16, 81, 56878}` is not C for a pointer:
 *   write SAT_LIST(16, 81, 56878). It lives until the end of the
 *   enclosing block, like any compound literal.
 * - _SAT_BOOTSTRAP counts the roles with sizeof: `roles` must be the array
 *   itself (GCC and Clang reject a pointer at compile time).
 * - The report's `sleep(id)` is rendezvous(id) only: `sleep` is POSIX's.
 * - LOOKUP (and readSymbol) waits for chunks (symbols) nobody has
 *   allocated (written) yet for at most SAT_LOOKUP_TIMEOUT seconds (60 by
 *   default), then returns NULL (SAT_ERR_TIMEOUT); SAT_LOOKUP_TIMEOUT=inf
 *   waits as long as it takes, as the report's calls do.
 * - LOOKUP returns once the chunks are allocated, written or not (section
 *   2.2 says "allocated and written"): the report's own Figure 9 looks up a
 *   chunk its publisher writes only after the subscriber's wakeup, which
 *   waiting for a write would deadlock. A chunk nobody has written reads as
 *   zeros; a reader that must see a producer's first write waits for it
 *   (a rendezvous, a barrier, or a subscription, as in Figure 9).
 * - A wakeup sent before the matching rendezvous is remembered (the report
 *   does not say): the rendezvous then returns at once, whatever the
 *   timing. Wakeups not consumed in between count as one.
 * - FREE(chunk) gives a chain back in this process; the report's API has
 *   no such call (its statistics stream has the event). C roles return
 *   void: sat_role_failed(reason) is how one fails.
 * - The report has no encryption layer: MALLOC_PROTECTED and
 *   writeSymbolProtected are SAT's, in the report's style, declared only
 *   with SAT_ABE defined (a libsat built with feature `abe`, as in sat.h).
 */

#ifndef SAT_COMPAT_H
#define SAT_COMPAT_H

#include "sat.h"

/* ------------------------------------------------------------------ types */

/** A chunk chain (section 2.2): read `chunk->data` inside a scope. */
typedef sat_chunk_t Chunk_t;
/** A consistency protocol: newHomeBaseMESI() (the default). */
typedef const sat_consistency_t Consistency_t;
/** A list of chunk ids or sizes: SAT_LIST(16, 81, 56878). */
typedef sat_ulong_list_t UnsignedLongList_t;
/** A role function: `static void prod(_SAT_Bootstrap_t *bootstrap)`. */
typedef sat_role_fn _SAT_Roles_t;
/** What a role function receives: its rank, role and the run's size. */
typedef sat_bootstrap_t _SAT_Bootstrap_t;

/** A list literal, `UnsignedLongList_t *` (C99 compound literals). */
#define SAT_LIST(...)                                                                  \
    (&(UnsignedLongList_t){sizeof((const unsigned long[]){__VA_ARGS__}) /             \
                               sizeof(unsigned long),                                  \
                           (const unsigned long[]){__VA_ARGS__}})

/* Picks a macro by its number of arguments (1 to 5). */
#define SAT_COMPAT_NARGS_(_1, _2, _3, _4, _5, n, ...) n
#define SAT_COMPAT_NARGS(...) SAT_COMPAT_NARGS_(__VA_ARGS__, 5, 4, 3, 2, 1, 0)
#define SAT_COMPAT_CAT_(a, b) a##b
#define SAT_COMPAT_CAT(a, b) SAT_COMPAT_CAT_(a, b)
#define SAT_COMPAT_PICK(name, ...) SAT_COMPAT_CAT(name, SAT_COMPAT_NARGS(__VA_ARGS__))

/* ------------------------------------------------ allocation (Figure 4) */

/** The home-based MESI protocol. */
#define newHomeBaseMESI() sat_home_based_mesi()
/** The other built-in protocols, in the same style (docs/PROTOCOLS.md). */
#define newHomeOnly() sat_home_only()
#define newHomeBaseMESIExclusive() sat_home_based_mesi_exclusive()
#define newHomeBaseMESIUpdate() sat_home_based_mesi_update()
#define newHomeBaseMultipleWriters() sat_multiple_writers()
#define newHomeBaseMESILearned() sat_home_based_mesi_learned()
#define newAdaptive() sat_adaptive()

/** MALLOC(consistency, baseid, size) or MALLOC(baseid, size). */
#define MALLOC(...) SAT_COMPAT_PICK(SAT_COMPAT_MALLOC_, __VA_ARGS__)(__VA_ARGS__)
#define SAT_COMPAT_MALLOC_3(consistency, baseid, size) sat_malloc((consistency), (baseid), (size))
#define SAT_COMPAT_MALLOC_2(baseid, size) sat_malloc(NULL, (baseid), (size))

/** MALLOC_LST(consistency, idlst, sizelst): sizes taken round-robin. */
#define MALLOC_LST(consistency, idlst, sizelst) \
    sat_malloc_lst((consistency), (idlst), (sizelst))

/** LOOKUP(consistency, chunkid, nbchunks) or LOOKUP(chunkid). */
#define LOOKUP(...) SAT_COMPAT_PICK(SAT_COMPAT_LOOKUP_, __VA_ARGS__)(__VA_ARGS__)
#define SAT_COMPAT_LOOKUP_3(consistency, chunkid, nbchunks) \
    sat_lookup((consistency), (chunkid), (nbchunks))
#define SAT_COMPAT_LOOKUP_1(chunkid) sat_lookup(NULL, (chunkid), 1)

/** LOOKUP_LST(consistency, idlst) or LOOKUP_LST(idlst). */
#define LOOKUP_LST(...) SAT_COMPAT_PICK(SAT_COMPAT_LOOKUP_LST_, __VA_ARGS__)(__VA_ARGS__)
#define SAT_COMPAT_LOOKUP_LST_2(consistency, idlst) sat_lookup_lst((consistency), (idlst))
#define SAT_COMPAT_LOOKUP_LST_1(idlst) sat_lookup_lst(NULL, (idlst))

/* ------------------------------------------ scopes and MAP (Figures 5, 6) */

#define READ(chunk) sat_read(chunk)
#define WRITE(chunk) sat_write(chunk)
#define READWRITE(chunk) sat_readwrite(chunk)
#define RELEASE(chunk) sat_release(chunk)
/** WRITE then RELEASE. */
#define PUT(chunk) sat_put(chunk)
/** READ then RELEASE. */
#define GET(chunk) sat_get(chunk)
/** FREE(chunk): not in the report's API (its statistics stream has the
 *  event): gives the chain back in this process; the handle is then
 *  invalid. See sat_chunk_free. */
#define FREE(chunk) sat_chunk_free(chunk)
/** Maps `data` (size bytes) onto the chain from baseid, and sets `chunk`. */
#define MAP(chunk, consistency, baseid, size, data) \
    ((chunk) = sat_map((consistency), (baseid), (size), (data)))

/* --------------------------------------------------- symbols (Figure 7) */

#define initSymbolicTable(sdsm) sat_init_symbol_table()
#define writeSymbol(sdsm, name, data, size) sat_write_symbol((name), (data), (size))
/** `*data` becomes a malloc'd copy of `*size` bytes: free() it. */
#define readSymbol(sdsm, name, data, size) sat_read_symbol((name), (data), (size))

/* ------------------------- synchronization and topology (Figure 8) */

/* Functions, not macros: a macro named `barrier` would rewrite every
 * `barrier(` after it, in C++'s <barrier> (std::barrier) and libfabric's
 * <rdma/fi_collective.h> (its `->barrier(` member calls). Define
 * SAT_COMPAT_NO_LOWERCASE before including this header to leave out these
 * three lowercase names where the program has its own. */
#ifndef SAT_COMPAT_NO_LOWERCASE
static inline enum sat_status rendezvous(uint32_t id) { return sat_rendezvous(id); }
static inline enum sat_status wakeup(uint32_t id) { return sat_wakeup(id); }
static inline enum sat_status barrier(uint32_t id, uint32_t count) {
    return sat_barrier(id, count);
}
#endif
#define clientGetClientNr() sat_client_count()

/* ------------------------------------------- publish-subscribe (Figure 9) */

/** handler is `void handler(Chunk_t *chunk, void *params)`. */
#define SUBSCRIBE(chunk, handler, params) sat_subscribe((chunk), (handler), (params))
#define UNSUBSCRIBE(chunk) sat_unsubscribe(chunk)

/* ------------------------ protected data (libsat with feature abe) */

#if defined(SAT_ABE)
/** MALLOC_PROTECTED(consistency, baseid, size, read_policy, write_policy) or
 *  MALLOC_PROTECTED(baseid, size, read_policy, write_policy) (home-based
 *  MESI): MALLOC of a chain readable and writable by the tenants whose
 *  attributes satisfy the policies. LOOKUP, READ, WRITE, ... work on it as
 *  on any chain; the S-DSM holds it sealed. */
#define MALLOC_PROTECTED(...) \
    SAT_COMPAT_PICK(SAT_COMPAT_MALLOC_PROTECTED_, __VA_ARGS__)(__VA_ARGS__)
#define SAT_COMPAT_MALLOC_PROTECTED_5(consistency, baseid, size, read_policy, write_policy) \
    sat_malloc_protected((consistency), (baseid), (size), (read_policy), (write_policy))
#define SAT_COMPAT_MALLOC_PROTECTED_4(baseid, size, read_policy, write_policy) \
    sat_malloc_protected(NULL, (baseid), (size), (read_policy), (write_policy))
/** writeSymbol of a sealed value: readSymbol opens it for the tenants whose
 *  attributes satisfy read_policy. */
#define writeSymbolProtected(sdsm, name, data, size, read_policy, write_policy) \
    sat_write_symbol_protected((name), (data), (size), (read_policy), (write_policy))
#endif

/* --------------------------------------------------- bootstrap (Figure 10) */

#if defined(__GNUC__) && !defined(__cplusplus)
/* 0, or a compile error when `roles` is a pointer rather than an array. */
#define SAT_COMPAT_MUST_BE_ARRAY(a) \
    (0 * sizeof(char[1 - 2 * __builtin_types_compatible_p(__typeof__(a), __typeof__(&(a)[0]))]))
#else
#define SAT_COMPAT_MUST_BE_ARRAY(a) 0
#endif

/** _SAT_BOOTSTRAP(roles, NULL, argc, argv): `roles` is the array of role
 *  functions, entry 0 (the S-DSM server) NULL. Returns a status. */
#define _SAT_BOOTSTRAP(roles, reserved, argc, argv)                                           \
    sat_bootstrap((roles), sizeof(roles) / sizeof((roles)[0]) + SAT_COMPAT_MUST_BE_ARRAY(roles), \
                  (reserved), (argc), (argv))

#endif /* SAT_COMPAT_H */
