/*
 * The listings of the SAT report, Figures 4 to 10, as one C program over
 * sat_compat.h: each listing as printed, with only what its pseudo-code
 * forces (declarations, semicolons, SAT_LIST for list literals, a cast where
 * Figure 6 indexes a `void *`, prototypes for Figure 8's and 9's functions).
 * Lines marked "check" are not the report's: they verify what the listings
 * did and print the lines sat-capi/tests/install.rs asserts.
 *
 * Roles (sat-core/topologies/three-tasks.xml: 2 servers,
 * 3 clients):
 *   1: Figures 4, 5, 6, 7, then task A of Figure 8, then Figure 9's publisher
 *   2: task B of Figure 8, checks of Figures 4 to 7 from another process,
 *      then Figure 9's subscriber (its handler runs after the role returns)
 *   3: writes the symbol Figure 7 reads, then task C of Figure 8
 *
 *   cc figures.c $(pkg-config --cflags --libs sat)
 *   satrun -n 5 --topology sat-core/topologies/three-tasks.xml -- ./a.out
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sat_compat.h>

/* check: stop the process (satrun then stops the run) when a check fails. */
#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "figures.c:%d: check failed: %s (last SAT error: %s)\n",    \
                    __LINE__, #cond, sat_last_error());                                 \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define N 100
#define SIZE N
#define UUID "uuid-921b4274-84ad-4b04-ac75-f9738da84039"
#define UUID_VALUE "written by role 3"

/* ------------------------------------------------------------- Figure 4 */

static void figure4(void) {
    Consistency_t * consistency = newHomeBaseMESI ();
    Chunk_t * chunk = NULL;

    unsigned long chunkid = 42;
    size_t size = sizeof(char) * SIZE;
    chunk = MALLOC(consistency , chunkid , size);

    UnsignedLongList_t * idlst = SAT_LIST(16, 81, 56878);
    UnsignedLongList_t * sizelst = SAT_LIST(24, 91, 54);
    chunk = MALLOC_LST(consistency , idlst , sizelst);

    unsigned int nbchunks = 1;
    chunk = LOOKUP(consistency , chunkid , nbchunks);

    chunk = LOOKUP_LST(consistency , idlst);

    /* check: the same chains come back, with the sizes asked for */
    CHECK(chunk != NULL && chunk->id == 16 && chunk->nchunks == 3 && chunk->size == 24 + 91 + 54);
    CHECK(chunk == MALLOC_LST(consistency, idlst, sizelst));
    CHECK(LOOKUP(consistency, chunkid, nbchunks) == MALLOC(consistency, chunkid, size));
    CHECK(MALLOC(consistency, chunkid, size)->size == SIZE);
    printf("figure 4: MALLOC, MALLOC_LST, LOOKUP, LOOKUP_LST ok\n");
}

/* ------------------------------------------------------------- Figure 5 */

static void figure5(void) {
    Consistency_t *consistency = newHomeBaseMESI();
    Chunk_t *chunk;
    unsigned long chunkid = 42;
    size_t size = sizeof(char) * SIZE;
    int i;

    chunk = MALLOC(consistency , chunkid , size);

    WRITE(chunk);

    /** chunk ->data exists
     * but values may not be initialized
     **/

    for (i = 0; i < N; i++) {
        chunk ->data[i] = i;
    }
    RELEASE(chunk);

    /** do not use chunk ->data here as
     * - consistency is not guaranteed
     * - pointer can be NULL (freed)
     **/

    READWRITE(chunk);

    /* chunk ->data exists and data are updated */

    for (i = 0; i < N; i++) {
        chunk ->data[i] = N - chunk ->data[i];
    }
    RELEASE(chunk);

    READ(chunk);

    for (i = 0; i < N; i++) {
        chunk ->data[i] = N - chunk ->data[i];
    }

    RELEASE(chunk);

    /** last modification of chunk ->data is lost
     * as it was a read -only scope
     **/

    /* check (role 2 checks that the last modification was lost) */
    printf("figure 5: WRITE, READWRITE, READ scopes done\n");
}

/* ------------------------------------------------------ Figures 6 and 7 */

static void figures6and7(void) {
    Consistency_t *consistency = newHomeBaseMESI();
    Chunk_t *chunk;
    unsigned long baseid = 1000;
    int i;

    void * data = calloc(N, sizeof(int));

    MAP(chunk , consistency , baseid ,
        N * sizeof(int), data);

    assert(data == chunk ->data);

    for (i = 0; i < N; i++) {
        ((int *)data)[i] = i;
    }

    PUT(chunk); /* equivalent to WRITE then RELEASE */

    /** data and chunk ->data can be used here
     * however , consistency is not guaranteed
     **/

    GET(chunk); /* equivalent to READ then RELEASE */

    /** data might now contain updated values
     * if other S-DSM processes have modified chunk
     * consistency is not guaranteed
     **/

    /* check */
    CHECK(chunk != NULL && chunk->id == 1000 && chunk->size == N * sizeof(int));
    for (i = 0; i < N; i++) {
        CHECK(((int *)data)[i] == i);
    }
    printf("figure 6: MAP, PUT, GET ok\n");

    /* Figure 7 (its `data` is Figure 6's, in scope here) */

    void * datawrite = calloc(N, sizeof(int));
    void * dataread = NULL;
    size_t size = 0;

    initSymbolicTable(sdsm);

    writeSymbol(sdsm , "symbol_name",
                data , N * sizeof(int));

    readSymbol(sdsm , "symbol_name",
               &dataread , &size);
    free(dataread);
    dataread = NULL;

    readSymbol(sdsm ,
               "uuid-921b4274-84ad-4b04-ac75-f9738da84039",
               &dataread , &size);

    /* check: the value role 3 wrote under the UUID */
    CHECK(dataread != NULL && size == sizeof UUID_VALUE);
    CHECK(memcmp(dataread, UUID_VALUE, size) == 0);
    printf("figure 7: readSymbol(\"%s\") = \"%s\"\n", UUID, (char *)dataread);
    free(dataread);
    free(datawrite);
    /* `data` stays mapped onto chunk 1000 until the run ends: not freed */
}

/* ------------------------------------------------------------- Figure 8 */

#define RDV_ID 8
#define BAR_ID 8
#define FIGURE8_CHUNK 80

static Chunk_t *chunk;

/* Appends this role's letter ('A' for role 1, 'B' for role 2). */
static void modify(char *data) {
    size_t n = strlen(data);
    data[n] = (char)('A' + sat_role() - 1);
    data[n + 1] = '\0';
}

static void display(const char *data) {
    printf("figure 8: role %d displays \"%s\"\n", sat_role(), data);
}

void A(void);
void B(void);
void C(void);

void A () {
    WRITE(chunk);
    modify(chunk ->data);
    RELEASE(chunk);
    wakeup(RDV_ID);
    barrier(BAR_ID , clientGetClientNr ());
}

void B () {
    rendezvous(RDV_ID);
    READWRITE(chunk);
    display(chunk ->data);
    modify(chunk ->data);
    RELEASE(chunk);
    barrier(BAR_ID , clientGetClientNr ());
}

void C () {
    barrier(BAR_ID , clientGetClientNr ());
    READ(chunk);
    display(chunk ->data);
    RELEASE(chunk);
}

/* ------------------------------------------------------------- Figure 9 */

#undef RDV_ID
#define RDV_ID 9
#define FIGURE9_CHUNK 90

static Chunk_t *mychunk;
static char params[] = "figure 9 params";

static void foo(Chunk_t *c) {
    snprintf(c->data, c->size, "%s by role %d", sat_role() == 1 ? "published" : "handled",
             sat_role());
    printf("figure 9: role %d foo on chunk %lu\n", sat_role(), (unsigned long)c->id);
}

void main_publisher(void);
void main_subscriber(void);
void subscriber_handler(Chunk_t *chunk, void *params);

void main_publisher () {
    unsigned long chunkid = FIGURE9_CHUNK;
    size_t size = 64;

    mychunk = MALLOC(chunkid , size);
    /* wait for subscriber to subscribe to the chunk */
    rendezvous(RDV_ID);
    WRITE(mychunk);
    foo(mychunk);
    RELEASE(mychunk);
}

void main_subscriber () {
    unsigned long chunkid = FIGURE9_CHUNK;

    mychunk = LOOKUP(chunkid);
    /* subscribe to the chunk with given user handler */
    SUBSCRIBE(mychunk , subscriber_handler , params);
    /* we are ready for publish notifications */
    wakeup(RDV_ID);
}

void subscriber_handler(Chunk_t *chunk , void *params) {
    WRITE(chunk);
    foo(chunk);
    RELEASE(chunk);
    /** unsubscribe to the chunk ,
     * this handler wont be call again */
    UNSUBSCRIBE(chunk);
    /** afterwards , all publish notifications are discarded ,
     * including the RELEASE in this function **/

    /* check */
    printf("figure 9: handler ran with params \"%s\"\n", (char *)params);
}

/* ------------------------------------------------- the roles (Figure 10) */

/* check: what role 1 did, seen from role 2 */
static void check_figures4to7(void) {
    int i;
    Chunk_t *c = LOOKUP_LST(SAT_LIST(16, 81, 56878));
    CHECK(c != NULL && c->size == 24 + 91 + 54 && c->nchunks == 3);

    c = LOOKUP(42);
    CHECK(c != NULL && c->size == SIZE);
    CHECK(READ(c) == SAT_OK);
    for (i = 0; i < N; i++) {
        CHECK(c->data[i] == N - i);
    }
    CHECK(RELEASE(c) == SAT_OK);
    printf("figure 5: another process reads N - i: the READ scope's change was lost\n");

    c = LOOKUP(1000);
    CHECK(c != NULL && c->size == N * sizeof(int));
    CHECK(READ(c) == SAT_OK);
    for (i = 0; i < N; i++) {
        CHECK(((int *)c->data)[i] == i);
    }
    CHECK(RELEASE(c) == SAT_OK);
    printf("figure 6: another process reads what PUT published\n");

    void *value = NULL;
    size_t size = 0;
    CHECK(readSymbol(sdsm, "symbol_name", &value, &size) == SAT_OK);
    CHECK(size == N * sizeof(int));
    for (i = 0; i < N; i++) {
        CHECK(((int *)value)[i] == i);
    }
    free(value);
    printf("figure 7: another process reads symbol_name\n");
}

static void first(_SAT_Bootstrap_t * bootstrap) {
    printf("role %u on rank %u of %u\n", bootstrap->role, bootstrap->rank, bootstrap->size);
    figure4();
    figure5();
    figures6and7();
    chunk = MALLOC(FIGURE8_CHUNK, 64); /* check: every task's `chunk` */
    CHECK(chunk != NULL);
    A();
    main_publisher();
    printf("role 1 done\n");
}

static void second(_SAT_Bootstrap_t * bootstrap) {
    printf("role %u on rank %u of %u\n", bootstrap->role, bootstrap->rank, bootstrap->size);
    chunk = LOOKUP(FIGURE8_CHUNK);
    CHECK(chunk != NULL);
    B();
    check_figures4to7();
    main_subscriber();
    printf("role 2 done\n");
}

static void third(_SAT_Bootstrap_t * bootstrap) {
    printf("role %u on rank %u of %u\n", bootstrap->role, bootstrap->rank, bootstrap->size);
    CHECK(writeSymbol(sdsm, UUID, UUID_VALUE, sizeof UUID_VALUE) == SAT_OK);
    chunk = LOOKUP(FIGURE8_CHUNK);
    CHECK(chunk != NULL);
    C();
    printf("role 3 done\n");
}

int
main(int argc , char ** argv) {

    setvbuf(stdout, NULL, _IOLBF, 0); /* check: lines in order under satrun */

    _SAT_Roles_t roles [4] = {NULL , first , second , third};

    if (_SAT_BOOTSTRAP(roles , NULL , argc , argv) != SAT_OK) { /* check */
        fprintf(stderr, "figures: %s\n", sat_last_error());
        return 1;
    }

    return 0;
}
