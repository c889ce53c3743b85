/* symbols: Figure 7 of the SAT report. Shared data named by a string.
 *
 *   satrun -n 3 --topology symbols/topology.xml -- ./symbols
 *
 * Role 1 runs Figure 7: it writes "symbol_name", reads it back, then reads
 * the UUID-named symbol, waiting until role 2 has written it. Role 2 writes
 * the UUID-named symbol and reads "symbol_name", waiting for role 1. Neither
 * waits on anything else: a read of a name not written yet waits for its
 * writer (up to SAT_LOOKUP_TIMEOUT seconds, 60 by default). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sat_compat.h>

#include "../common/check.h"

#define N 1000
#define UUID "uuid-921b4274-84ad-4b04-ac75-f9738da84039"
#define UUID_VALUE "written by role 2 for role 1"

static void check_ints(const void *data, size_t size, const char *who) {
    EXPECT(size == N * sizeof(int), "%s: \"symbol_name\" has %zu bytes, not %zu", who, size,
           N * sizeof(int));
    const int *v = data;
    for (int i = 0; i < N; i++) {
        EXPECT(v[i] == 3 * i + 1, "%s: \"symbol_name\"[%d] is %d, not %d", who, i, v[i], 3 * i + 1);
    }
}

static void figure7(_SAT_Bootstrap_t *bootstrap) {
    int *datawrite = calloc(N, sizeof(int));
    void *dataread = NULL;
    size_t size = 0;
    EXPECT(datawrite != NULL, "out of memory");
    for (int i = 0; i < N; i++) {
        datawrite[i] = 3 * i + 1;
    }

    CHECK(initSymbolicTable(sdsm));

    CHECK(writeSymbol(sdsm, "symbol_name", datawrite, N * sizeof(int)));

    CHECK(readSymbol(sdsm, "symbol_name", &dataread, &size));
    check_ints(dataread, size, "role 1");
    free(dataread);
    dataread = NULL;
    printf("role 1 (rank %u): wrote and read back \"symbol_name\" (%d ints)\n", bootstrap->rank,
           N);

    CHECK(readSymbol(sdsm, UUID, &dataread, &size));
    EXPECT(size == sizeof UUID_VALUE && memcmp(dataread, UUID_VALUE, size) == 0,
           "role 1: %s has the wrong value (%zu bytes)", UUID, size);
    printf("role 1 (rank %u): read %s: \"%s\"\n", bootstrap->rank, UUID, (const char *)dataread);
    free(dataread);
    free(datawrite);
}

static void other(_SAT_Bootstrap_t *bootstrap) {
    void *dataread = NULL;
    size_t size = 0;

    CHECK(writeSymbol(sdsm, UUID, UUID_VALUE, sizeof UUID_VALUE));
    printf("role 2 (rank %u): wrote %s\n", bootstrap->rank, UUID);

    CHECK(readSymbol(sdsm, "symbol_name", &dataread, &size));
    check_ints(dataread, size, "role 2");
    printf("role 2 (rank %u): read \"symbol_name\" (%d ints, as role 1 wrote them)\n",
           bootstrap->rank, N);
    sat_free(dataread);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach satrun as they are printed */
    _SAT_Roles_t roles[3] = {NULL, figure7, other};
    int status = _SAT_BOOTSTRAP(roles, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "symbols: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    return 0;
}
