/* Signals of an application that embeds SAT. Run by c_programs.rs as 3
 * processes (rank 0 the server, ranks 1 and 2 clients of role 1):
 * - a SIGTERM handler the program installs before its first SAT call is
 *   the one a SIGTERM reaches, in the role and after the run (the shm
 *   provider puts its own in front of it when its endpoint opens);
 * - an interval timer that fires every 2 ms from before the bootstrap to
 *   the end, in every process, the server's included: the bootstrap ends,
 *   and a barrier and a read of another process's write complete.
 * `signals exit`: rank 2 calls exit(0) in its role, and says so on its
 * stderr as it goes (SAT's atexit note), before the run fails.
 * And attached to a service (`signals attached|crash CONNECTION`):
 * - `attached`: the SIGTERM handler installed before `sat_connect` gets
 *   SIGTERM while attached;
 * - `crash`: a NULL write after `sat_connect` kills the process with
 *   SIGSEGV, the default action (no provider's backtrace and exit(1)). */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>

#include "testing.h"

static volatile sig_atomic_t terms, alarms;
/* `signals exit`: rank 2 calls exit(0) in its role. */
static int exit_in_role;

static void on_term(int sig) {
    (void)sig;
    terms++;
}

static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

static void role(sat_bootstrap_t *run) {
    if (exit_in_role && run->rank == 2) exit(0);
    int before = terms;
    raise(SIGTERM);
    CHECK_TRUE(terms == before + 1, "the program's SIGTERM handler ran %d times in the role, not once",
               (int)(terms - before));
    uint32_t clients = (uint32_t)sat_client_count();
    int writer = sat_rank() == 1;
    sat_chunk_t *chunk = sat_malloc(NULL, 1, 8);
    CHECK_TRUE(chunk != NULL, "MALLOC of chunk 1");
    if (chunk == NULL) return;
    if (writer) {
        CHECK_OK(sat_readwrite(chunk));
        chunk->data[0] = 42;
        CHECK_OK(sat_release(chunk));
    }
    CHECK_OK(sat_barrier(1, clients));
    CHECK_OK(sat_read(chunk));
    CHECK_TRUE(chunk->data[0] == 42, "rank %d read %d, not 42", sat_rank(), chunk->data[0]);
    CHECK_OK(sat_release(chunk));
    CHECK_OK(sat_barrier(2, clients));
    if (testing_done("signals role") != EXIT_SUCCESS) sat_role_failed("a check failed");
}

/* The modes attached to a service. */
static int attached(const char *mode, const char *connection) {
    CHECK_OK(sat_connect(connection));
    if (strcmp(mode, "crash") == 0) {
        /* No core file left behind. */
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        volatile char *nowhere = NULL;
        *nowhere = 1;
        return testing_done("signals crash: still alive");
    }
    int before = terms;
    raise(SIGTERM);
    CHECK_TRUE(terms == before + 1, "the program's SIGTERM handler ran %d times while attached, not once",
               (int)(terms - before));
    CHECK_OK(sat_detach());
    return testing_done("signals attached");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_term;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    if (argc == 3 && (strcmp(argv[1], "attached") == 0 || strcmp(argv[1], "crash") == 0))
        return attached(argv[1], argv[2]);
    action.sa_handler = on_alarm;
    action.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval every_2ms = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_REAL, &every_2ms, NULL);

    exit_in_role = argc == 2 && strcmp(argv[1], "exit") == 0;
    sat_role_fn roles[2] = {NULL, role};
    int status = sat_bootstrap(roles, 2, NULL, argc, argv);
    CHECK_TRUE(status == SAT_OK, "sat_bootstrap gave %d (%s)", status, sat_status_string(status));

    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    CHECK_TRUE(alarms > 0, "the timer never fired");
    int before = terms;
    raise(SIGTERM);
    CHECK_TRUE(terms == before + 1, "the program's SIGTERM handler ran %d times after the run, not once",
               (int)(terms - before));
    return testing_done("signals after the run");
}
