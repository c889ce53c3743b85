/* sync: Figure 8 of the SAT report. Three tasks synchronized by a
 * rendezvous and a barrier.
 *
 *   satrun -n 5 --topology sync/topology.xml -- ./sync
 *
 * A writes the chunk and wakes rendezvous RDV_ID; B waits on it, so it
 * reads what A wrote, and writes its own values; C waits at the barrier,
 * which B enters only after its write, so C reads what B wrote. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <sat_compat.h>

#include "../common/check.h"

#define CHUNK_ID 42
#define RDV_ID 2
#define BAR_ID 3
#define N 4096

static Chunk_t *chunk;

static void modify(int *data, int value) {
    for (int i = 0; i < N; i++) {
        data[i] = value + i % 7;
    }
}

/* The common value of the chunk, or -1 when its values disagree. */
static int display(const int *data) {
    int value = data[0];
    for (int i = 0; i < N; i++) {
        if (data[i] != value + i % 7) {
            return -1;
        }
    }
    return value;
}

static void A(_SAT_Bootstrap_t *b) {
    (void)b;
    CHECK(WRITE(chunk));
    modify((int *)chunk->data, 100);
    CHECK(RELEASE(chunk));
    printf("A: wrote 100\n");
    CHECK(wakeup(RDV_ID));
    printf("A: woke rendezvous %d\n", RDV_ID);
    CHECK(barrier(BAR_ID, clientGetClientNr()));
    printf("A: through the barrier\n");
}

static void B(_SAT_Bootstrap_t *b) {
    (void)b;
    CHECK(rendezvous(RDV_ID));
    CHECK(READWRITE(chunk));
    int seen = display((const int *)chunk->data);
    printf("B: read %d\n", seen);
    EXPECT(seen == 100, "B: read %d, A wrote 100", seen);
    modify((int *)chunk->data, 200);
    CHECK(RELEASE(chunk));
    printf("B: wrote 200\n");
    CHECK(barrier(BAR_ID, clientGetClientNr()));
    printf("B: through the barrier\n");
}

static void C(_SAT_Bootstrap_t *b) {
    (void)b;
    CHECK(barrier(BAR_ID, clientGetClientNr()));
    CHECK(READ(chunk));
    int seen = display((const int *)chunk->data);
    CHECK(RELEASE(chunk));
    printf("C: read %d\n", seen);
    EXPECT(seen == 200, "C: read %d, B wrote 200", seen);
}

/* Every task allocates the chunk (the same chain for all), then plays. */
static void (*const task[4])(_SAT_Bootstrap_t *) = {NULL, A, B, C};

static void start(_SAT_Bootstrap_t *b) {
    chunk = CHECK_PTR(MALLOC(NULL, CHUNK_ID, N * sizeof(int)));
    task[b->role](b);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach satrun as they are printed */
    _SAT_Roles_t roles[4] = {NULL, start, start, start};
    int status = _SAT_BOOTSTRAP(roles, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "sync: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    return 0;
}
