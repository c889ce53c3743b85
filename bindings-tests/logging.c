/* What the library is and where its log lines go.
 *
 *   satrun -n 3 -- ./logging handler   every process hands its log lines to
 *                                      a handler, which prints them on
 *                                      stdout as "handler <level>: <line>"
 *   satrun -n 3 -- ./logging stderr    no handler: the lines go to stderr
 *
 * Run with SAT_LOG=sat_core::bootstrap=debug: each process then logs its
 * "Bootstrap SAT ... with pid N" line at level SAT_LOG_DEBUG. With
 * SAT_EXPECT_ENCRYPTION=0 or 1, sat_has_encryption() must say that. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sat.h>

#include "testing.h"

/* The handler may run on any thread, several at once. */
static atomic_int handled_bootstrap;
static atomic_int wrong_user;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static int marker;

static void handler(sat_log_level level, const char *line, void *user) {
    if (user != &marker) atomic_fetch_add(&wrong_user, 1);
    if (level == SAT_LOG_DEBUG && strstr(line, "Bootstrap SAT") != NULL)
        atomic_fetch_add(&handled_bootstrap, 1);
    pthread_mutex_lock(&print_lock);
    printf("handler %d: %s\n", (int)level, line);
    pthread_mutex_unlock(&print_lock);
}

static int with_handler;

static void role(sat_bootstrap_t *b) {
    /* The bootstrap's line was logged before the role started. */
    if (with_handler) {
        CHECK_TRUE(atomic_load(&handled_bootstrap) == 1, "%d bootstrap lines reached the handler",
                   atomic_load(&handled_bootstrap));
        CHECK_TRUE(atomic_load(&wrong_user) == 0, "the handler got another user pointer");
    } else {
        CHECK_TRUE(atomic_load(&handled_bootstrap) == 0, "a handler ran without being set");
    }
    char name[64];
    snprintf(name, sizeof name, "logging role (rank %u)", b->rank);
    if (testing_done(name) != EXIT_SUCCESS) sat_role_failed("a check failed");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    with_handler = argc > 1 && strcmp(argv[argc - 1], "handler") == 0;

    /* The library loaded is the one this header describes. */
    CHECK_TRUE(sat_abi_version() == SAT_ABI_VERSION, "libsat's ABI is %u, the header's %u",
               sat_abi_version(), (unsigned)SAT_ABI_VERSION);
    char major[16];
    snprintf(major, sizeof major, "%d.", SAT_VERSION_MAJOR);
    CHECK_TRUE(strncmp(sat_version(), major, strlen(major)) == 0, "libsat %s, header %d.%d.%d",
               sat_version(), SAT_VERSION_MAJOR, SAT_VERSION_MINOR, SAT_VERSION_PATCH);
    const char *expect = getenv("SAT_EXPECT_ENCRYPTION");
    CHECK_TRUE(expect != NULL && sat_has_encryption() == atoi(expect),
               "sat_has_encryption() is %d, expected %s", sat_has_encryption(),
               expect != NULL ? expect : "(SAT_EXPECT_ENCRYPTION unset)");

    /* Setting and clearing a handler works outside a run. */
    CHECK_OK(sat_set_log_handler(handler, &marker));
    CHECK_OK(sat_set_log_handler(NULL, NULL));
    if (with_handler) CHECK_OK(sat_set_log_handler(handler, &marker));

    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    /* Back to stderr: the handler's data may go away after this. */
    CHECK_OK(sat_set_log_handler(NULL, NULL));
    if (status != SAT_OK) {
        printf("logging: sat_bootstrap gave %d (%s): %s\n", status, sat_status_string(status),
               sat_last_error());
        return 1;
    }
    return testing_done("logging main");
}
