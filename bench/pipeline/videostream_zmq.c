/* videostream_zmq: the video pipeline of examples-c/videostream (section
 * 3.2 of the SAT report, Figure 16) written with ZeroMQ (libzmq), to
 * measure SAT against it. The same roles, the same eager dynamic
 * scheduling, the same frames, the same processing code and the same
 * printed lines (examples-c/common/video.c); only the channels differ.
 *
 *   ./videostream_zmq --workers 2 --frames 100 --width 640 --height 480 --no-check
 *
 * One command starts the whole pipeline: the program makes a private
 * folder (mkdtemp, under $TMPDIR or /tmp) for its ipc:// endpoints, the
 * best local transport of libzmq (Unix domain sockets), forks the input,
 * the --workers W processing tasks (default 2) and the output, waits for
 * them, and removes the folder. It fails if any role fails, after stopping
 * the others. The options are videostream's (video.h), without
 * --reference; the format (frame size, number of frames) is found before
 * the fork, so every role knows it.
 *
 * The sockets, each bound by the role that receives on it:
 *   frames    the input's ROUTER; each task's DEALER, with the routing id
 *             "task<p>", connects to it: the input sends task p a frame (a
 *             struct video_frame, then the pixels), or an empty message,
 *             the end of the stream
 *   results   the output's PULL; each task's PUSH connects to it: a result
 *             is two parts, p (uint32_t), then a struct video_result and
 *             the edge image
 *   consumed  the input's PULL; the output's PUSH connects to it: once the
 *             output holds task p's result, it sends p (uint32_t), and the
 *             input then sends p the next frame
 * ZeroMQ connects in the background, and a ROUTER drops messages for a
 * peer not connected yet, so the roles first prove every connection: each
 * task says hello to the output (its number alone, one part) and then
 * "ready" to the input (its number, on its DEALER); the output, after a
 * hello from every task, sends the input READY_OUTPUT; the input starts
 * producing frames, and the clock, only after all of them. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "../../examples-c/common/expect.h"
#include "../../examples-c/common/video.h"

/* What the output sends the input once every task said hello. */
#define READY_OUTPUT UINT32_MAX
/* How long a closing socket may still try to deliver its messages. */
#define LINGER_MS 2000

static struct video_options opt;
static struct video_format fmt;
static char endpoint_frames[256], endpoint_results[256], endpoint_consumed[256];

#define ZMQ_CHECK(call) zmq_check_((call), #call, __FILE__, __LINE__)

static int zmq_check_(int rc, const char *what, const char *file, int line) {
    if (rc == -1) {
        fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, zmq_strerror(zmq_errno()));
        exit(EXIT_FAILURE);
    }
    return rc;
}

static size_t frame_message(void) { return sizeof(struct video_frame) + video_frame_bytes(&fmt); }
static size_t result_message(void) {
    return sizeof(struct video_result) + video_frame_bytes(&fmt);
}

static void *socket_of(void *ctx, int type) {
    void *s = zmq_socket(ctx, type);
    EXPECT(s != NULL, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    int linger = LINGER_MS;
    ZMQ_CHECK(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger));
    return s;
}

/* A one-part message of a uint32_t. */
static void send_u32(void *s, uint32_t v, int flags) {
    ZMQ_CHECK(zmq_send(s, &v, sizeof v, flags));
}

static uint32_t recv_u32(void *s, const char *who) {
    uint32_t v;
    int n = ZMQ_CHECK(zmq_recv(s, &v, sizeof v, 0));
    EXPECT(n == (int)sizeof v, "%s: a message of %d bytes, not a number", who, n);
    return v;
}

static void routing_id(uint32_t p, char *id, size_t len) { snprintf(id, len, "task%u", p); }

/* ------------------------------------------------------------------ input */

static struct {
    void *frames;
    uint32_t next;  /* the next frame to give */
    int64_t *given; /* the frame each task has, -1: none */
    uint32_t busy;  /* tasks holding a frame */
    uint64_t start_ns;
} in;

/* Gives task p the next frame, or the end of the stream. */
static void give(uint32_t p) {
    char id[32];
    routing_id(p, id, sizeof id);
    ZMQ_CHECK(zmq_send(in.frames, id, strlen(id), ZMQ_SNDMORE));
    zmq_msg_t msg;
    if (in.next < fmt.frames) {
        ZMQ_CHECK(zmq_msg_init_size(&msg, frame_message()));
        struct video_frame *hd = zmq_msg_data(&msg);
        if (in.next == 0) {
            in.start_ns = video_now_ns();
        }
        hd->frame = in.next;
        hd->start_ns = in.start_ns;
        video_produce(&opt, &fmt, in.next, (uint8_t *)zmq_msg_data(&msg) + sizeof *hd);
        in.given[p] = in.next++;
        in.busy++;
    } else {
        ZMQ_CHECK(zmq_msg_init(&msg));
        in.given[p] = -1;
    }
    ZMQ_CHECK(zmq_msg_send(&msg, in.frames, 0));
}

static void input(void *ctx) {
    uint32_t n = fmt.workers, consumed = 0;
    in.given = malloc(n * sizeof *in.given);
    uint8_t *ready = calloc(n, 1);
    EXPECT(in.given && ready, "out of memory");
    in.frames = socket_of(ctx, ZMQ_ROUTER);
    int mandatory = 1; /* a frame for a task not connected fails, not vanishes */
    ZMQ_CHECK(zmq_setsockopt(in.frames, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory));
    ZMQ_CHECK(zmq_bind(in.frames, endpoint_frames));
    void *done = socket_of(ctx, ZMQ_PULL);
    ZMQ_CHECK(zmq_bind(done, endpoint_consumed));

    /* Every task and the output connected. */
    for (uint32_t k = 0; k < n; k++) {
        char id[32], want[32];
        int len = ZMQ_CHECK(zmq_recv(in.frames, id, sizeof id - 1, 0));
        id[len < (int)sizeof id - 1 ? len : (int)sizeof id - 1] = '\0';
        uint32_t p = recv_u32(in.frames, "input");
        routing_id(p, want, sizeof want);
        EXPECT(p < n && !ready[p] && strcmp(id, want) == 0, "input: a ready from %s as task %u",
               id, p);
        ready[p] = 1;
    }
    EXPECT(recv_u32(done, "input") == READY_OUTPUT, "input: the output was not ready first");

    printf("input: %u frames of %ux%u for %u processing tasks\n", fmt.frames, fmt.width,
           fmt.height, n);
    for (uint32_t p = 0; p < n; p++) {
        give(p);
    }
    /* Once the output consumed task p's result, p is free for the next frame. */
    while (in.busy > 0) {
        uint32_t p = recv_u32(done, "input");
        EXPECT(p < n && in.given[p] >= 0, "input: task %u's result consumed, but it had no frame",
               p);
        in.busy--;
        consumed++;
        give(p);
    }
    printf("input: %u frames given and consumed\n", consumed);
    zmq_close(done);
    zmq_close(in.frames);
    free(in.given);
    free(ready);
}

/* ------------------------------------------------------------- processing */

static void worker(void *ctx, uint32_t p) {
    char id[32];
    routing_id(p, id, sizeof id);
    void *frames = socket_of(ctx, ZMQ_DEALER);
    ZMQ_CHECK(zmq_setsockopt(frames, ZMQ_ROUTING_ID, id, strlen(id)));
    ZMQ_CHECK(zmq_connect(frames, endpoint_frames));
    void *results = socket_of(ctx, ZMQ_PUSH);
    ZMQ_CHECK(zmq_connect(results, endpoint_results));
    send_u32(results, p, 0); /* hello to the output */
    send_u32(frames, p, 0);  /* ready for the input */
    printf("worker %u: pid %ld\n", p, (long)getpid());

    uint32_t done = 0;
    for (;;) {
        zmq_msg_t frame, result;
        ZMQ_CHECK(zmq_msg_init(&frame));
        ZMQ_CHECK(zmq_msg_recv(&frame, frames, 0));
        size_t size = zmq_msg_size(&frame);
        if (size == 0) {
            zmq_msg_close(&frame);
            break;
        }
        EXPECT(size == frame_message(), "worker %u: a frame of %zu bytes", p, size);
        const struct video_frame *hd = zmq_msg_data(&frame);
        ZMQ_CHECK(zmq_msg_init_size(&result, result_message()));
        struct video_result *out = zmq_msg_data(&result);
        memset(out, 0, sizeof *out);
        out->frame = hd->frame;
        out->start_ns = hd->start_ns;
        out->nlines = video_process_frame(&fmt, (const uint8_t *)hd + sizeof *hd,
                                          (uint8_t *)out + sizeof *out, out->lines);
        zmq_msg_close(&frame);
        send_u32(results, p, ZMQ_SNDMORE);
        ZMQ_CHECK(zmq_msg_send(&result, results, 0));
        done++;
    }
    printf("worker %u: processed %u frames\n", p, done);
    zmq_close(results);
    zmq_close(frames);
}

/* ----------------------------------------------------------------- output */

static void output(void *ctx) {
    uint32_t n = fmt.workers;
    void *results = socket_of(ctx, ZMQ_PULL);
    ZMQ_CHECK(zmq_bind(results, endpoint_results));
    void *done = socket_of(ctx, ZMQ_PUSH);
    ZMQ_CHECK(zmq_connect(done, endpoint_consumed));
    uint8_t *hello = calloc(n, 1);
    EXPECT(hello != NULL, "out of memory");
    struct video_collector got;
    video_collector_init(&got, &opt, &fmt);

    /* Every task connected: then the input may start. */
    for (uint32_t k = 0; k < n; k++) {
        uint32_t p = recv_u32(results, "output");
        int more = 0;
        size_t len = sizeof more;
        ZMQ_CHECK(zmq_getsockopt(results, ZMQ_RCVMORE, &more, &len));
        EXPECT(p < n && !hello[p] && !more, "output: a hello from task %u", p);
        hello[p] = 1;
    }
    send_u32(done, READY_OUTPUT, 0);

    for (int all = 0; !all;) {
        uint32_t p = recv_u32(results, "output");
        EXPECT(p < n, "output: a result from task %u", p);
        zmq_msg_t result;
        ZMQ_CHECK(zmq_msg_init(&result));
        ZMQ_CHECK(zmq_msg_recv(&result, results, 0));
        EXPECT(zmq_msg_size(&result) == result_message(), "output: a result of %zu bytes",
               zmq_msg_size(&result));
        /* Held: task p is free for the next frame. */
        send_u32(done, p, 0);
        const struct video_result *res = zmq_msg_data(&result);
        all = video_collect(&got, p, res, (const uint8_t *)res + sizeof *res);
        zmq_msg_close(&result);
    }
    video_collector_finish(&got);
    zmq_close(done);
    zmq_close(results);
    free(hello);
}

/* ------------------------------------------------------ starting the roles */

/* Runs one role in a child process: a context of its own (one must not
 * cross a fork), the role, then exit. */
static void role(int which, uint32_t p) {
    void *ctx = zmq_ctx_new();
    EXPECT(ctx != NULL, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    if (which == 0) {
        input(ctx);
    } else if (which == 1) {
        worker(ctx, p);
    } else {
        output(ctx);
    }
    ZMQ_CHECK(zmq_ctx_term(ctx));
    exit(EXIT_SUCCESS);
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

/* Stops the children still running. */
static void stop(const pid_t *pids, size_t n, const int *running) {
    for (size_t i = 0; i < n; i++) {
        if (running[i]) {
            kill(pids[i], SIGTERM);
        }
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (video_options(argc, argv, "videostream_zmq", &opt) != 0) {
        return 1;
    }
    if (opt.reference) {
        fprintf(stderr, "videostream_zmq: no --reference here (videostream --reference)\n");
        return 1;
    }
    video_stream_format(&opt, &fmt);
    fmt.workers = opt.workers > 0 ? opt.workers : 2;
    EXPECT(fmt.frames > 0, "input: no frames");
    EXPECT(fmt.workers <= 1000, "videostream_zmq: at most 1000 processing tasks");

    const char *tmp = getenv("TMPDIR");
    char dir[200];
    snprintf(dir, sizeof dir, "%s/videostream-zmq.XXXXXX", tmp != NULL && *tmp ? tmp : "/tmp");
    EXPECT(mkdtemp(dir) != NULL, "videostream_zmq: mkdtemp %s failed", dir);
    snprintf(endpoint_frames, sizeof endpoint_frames, "ipc://%s/frames", dir);
    snprintf(endpoint_results, sizeof endpoint_results, "ipc://%s/results", dir);
    snprintf(endpoint_consumed, sizeof endpoint_consumed, "ipc://%s/consumed", dir);

    /* SIGINT or SIGTERM stops the children too, and still removes the folder. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    size_t n = (size_t)fmt.workers + 2;
    pid_t *pids = calloc(n, sizeof *pids);
    int *running = calloc(n, sizeof *running);
    EXPECT(pids && running, "out of memory");
    int failed = 0;
    fflush(NULL);
    for (size_t i = 0; i < n && !failed; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            role(i == 0 ? 0 : i + 1 == n ? 2 : 1, (uint32_t)(i - 1));
        }
        if (pid < 0) {
            fprintf(stderr, "videostream_zmq: fork: %s\n", strerror(errno));
            failed = 1;
            break;
        }
        pids[i] = pid;
        running[i] = 1;
    }
    if (failed) {
        stop(pids, n, running);
    }

    size_t left = 0;
    for (size_t i = 0; i < n; i++) {
        left += (size_t)running[i];
    }
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) {
                if (stop_signal && !failed) {
                    fprintf(stderr, "videostream_zmq: signal %d, stopping the roles\n",
                            (int)stop_signal);
                    failed = 1;
                    stop(pids, n, running);
                }
                continue;
            }
            fprintf(stderr, "videostream_zmq: waitpid: %s\n", strerror(errno));
            failed = 1;
            stop(pids, n, running);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (pids[i] != pid || !running[i]) {
                continue;
            }
            running[i] = 0;
            left--;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                break;
            }
            if (!failed) {
                const char *name = i == 0 ? "the input" : i + 1 == n ? "the output" : "a task";
                if (WIFEXITED(status)) {
                    fprintf(stderr, "videostream_zmq: %s (pid %ld) exited with status %d\n", name,
                            (long)pid, WEXITSTATUS(status));
                } else {
                    fprintf(stderr, "videostream_zmq: %s (pid %ld) ended by signal %d\n", name,
                            (long)pid, WTERMSIG(status));
                }
                failed = 1;
                stop(pids, n, running);
            }
            break;
        }
    }

    char path[300];
    const char *names[] = {"frames", "results", "consumed"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    if (rmdir(dir) != 0) {
        fprintf(stderr, "videostream_zmq: rmdir %s: %s\n", dir, strerror(errno));
        failed = 1;
    }
    free(pids);
    free(running);
    return failed ? 1 : 0;
}
