/* videostream_mpi: the video pipeline of examples-c/videostream (section
 * 3.2 of the SAT report, Figure 16) written with MPI point-to-point
 * messages, to measure SAT against it. The same roles, the same eager
 * dynamic scheduling, the same frames, the same processing code and the
 * same printed lines (examples-c/common/video.c); only the channels differ.
 *
 *   mpirun -n 4 ./videostream_mpi --frames 100 --width 640 --height 480 --no-check
 *
 * Rank 0 is the input, ranks 1 to W the processing tasks (task p is rank
 * p + 1), rank W + 1 the output: W is the number of ranks minus 2. The
 * options are videostream's (video.h), without --reference.
 *
 * The input sends task p a frame (TAG_FRAME: a struct video_frame, then the
 * pixels); p computes and sends its result to the output (TAG_RESULT: a
 * struct video_result, then the edge image); the output, once it holds the
 * result, tells the input that p's result is consumed (TAG_CONSUMED: p),
 * and the input then sends p the next frame, or the end of the stream
 * (TAG_END) when there is none left. Blocking MPI_Send and MPI_Recv: each
 * role has nothing else to do while it waits.
 *
 * Transport. On one node Open MPI's ob1 PML picks the shared-memory BTL
 * `vader` (single-copy through CMA for large messages) by itself; checked
 * with `--mca pml ob1 --mca btl self,vader`, which is also what
 * bench/pipeline.py passes, so that no other transport is tried (the tcp
 * BTL is no faster; vader without single copy measures the same). Open MPI
 * polls while it waits, unless it yields when idle: on a machine with
 * fewer cores than ranks (4 ranks on 2 cores) polling input and output
 * take CPU time from the processing tasks, and the pipeline runs at a
 * little over half the rate it reaches with `--mca mpi_yield_when_idle 1`
 * (115 against 210 frames/s for 400 frames of 640x480). mpirun
 * sets that by itself when it sees more ranks than cores (with
 * --oversubscribe); bench/pipeline.py says it explicitly for its `mpi`
 * system, and `mpi-poll` forces polling (`mpi_yield_when_idle 0`). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples-c/common/expect.h"
#include "../../examples-c/common/video.h"

enum { TAG_FRAME = 1, TAG_END = 2, TAG_RESULT = 3, TAG_CONSUMED = 4 };

static struct video_options opt;
static struct video_format fmt;

#define MPI_CHECK(call)                                                          \
    do {                                                                         \
        int mpi_check_ = (call);                                                 \
        EXPECT(mpi_check_ == MPI_SUCCESS, "%s failed (%d)", #call, mpi_check_);  \
    } while (0)

static int rank_of_task(uint32_t p) { return (int)p + 1; }
static int output_rank(void) { return (int)fmt.workers + 1; }

static size_t frame_message(void) { return sizeof(struct video_frame) + video_frame_bytes(&fmt); }
static size_t result_message(void) {
    return sizeof(struct video_result) + video_frame_bytes(&fmt);
}

/* ------------------------------------------------------------------ input */

static struct {
    uint8_t *message; /* a struct video_frame, then the pixels */
    uint32_t next;    /* the next frame to give */
    int64_t *given;   /* the frame each task has, -1: none */
    uint32_t busy;    /* tasks holding a frame */
    uint64_t start_ns;
} in;

/* Gives task p the next frame, or the end of the stream. */
static void give(uint32_t p) {
    if (in.next < fmt.frames) {
        struct video_frame *hd = (struct video_frame *)in.message;
        if (in.next == 0) {
            in.start_ns = video_now_ns();
        }
        hd->frame = in.next;
        hd->start_ns = in.start_ns;
        video_produce(&opt, &fmt, in.next, in.message + sizeof *hd);
        MPI_CHECK(MPI_Send(in.message, (int)frame_message(), MPI_BYTE, rank_of_task(p), TAG_FRAME,
                           MPI_COMM_WORLD));
        in.given[p] = in.next++;
        in.busy++;
    } else {
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, rank_of_task(p), TAG_END, MPI_COMM_WORLD));
        in.given[p] = -1;
    }
}

static void input(void) {
    uint32_t n = fmt.workers, consumed = 0;
    in.given = malloc(n * sizeof *in.given);
    in.message = malloc(frame_message());
    EXPECT(in.given && in.message, "out of memory");
    printf("input: %u frames of %ux%u for %u processing tasks\n", fmt.frames, fmt.width,
           fmt.height, n);
    for (uint32_t p = 0; p < n; p++) {
        give(p);
    }
    /* Once the output consumed task p's result, p is free for the next frame. */
    while (in.busy > 0) {
        uint32_t p;
        MPI_CHECK(MPI_Recv(&p, 1, MPI_UINT32_T, output_rank(), TAG_CONSUMED, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        EXPECT(p < n && in.given[p] >= 0, "input: task %u's result consumed, but it had no frame",
               p);
        in.busy--;
        consumed++;
        give(p);
    }
    printf("input: %u frames given and consumed\n", consumed);
    free(in.given);
    free(in.message);
}

/* ------------------------------------------------------------- processing */

static void worker(uint32_t p, int rank) {
    uint8_t *frame = malloc(frame_message()), *result = malloc(result_message());
    EXPECT(frame && result, "out of memory");
    const struct video_frame *hd = (const struct video_frame *)frame;
    struct video_result *out = (struct video_result *)result;
    uint32_t done = 0;
    printf("worker %u: rank %d\n", p, rank);
    for (;;) {
        MPI_Status st;
        MPI_CHECK(MPI_Recv(frame, (int)frame_message(), MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD,
                           &st));
        if (st.MPI_TAG == TAG_END) {
            break;
        }
        EXPECT(st.MPI_TAG == TAG_FRAME, "worker %u: a message tagged %d", p, st.MPI_TAG);
        memset(out, 0, sizeof *out);
        out->frame = hd->frame;
        out->start_ns = hd->start_ns;
        out->nlines = video_process_frame(&fmt, frame + sizeof *hd, result + sizeof *out, out->lines);
        MPI_CHECK(MPI_Send(result, (int)result_message(), MPI_BYTE, output_rank(), TAG_RESULT,
                           MPI_COMM_WORLD));
        done++;
    }
    printf("worker %u: processed %u frames\n", p, done);
    free(frame);
    free(result);
}

/* ----------------------------------------------------------------- output */

static void output(void) {
    uint8_t *result = malloc(result_message());
    EXPECT(result != NULL, "out of memory");
    const struct video_result *got = (const struct video_result *)result;
    struct video_collector results;
    video_collector_init(&results, &opt, &fmt);
    for (int all = 0; !all;) {
        MPI_Status st;
        MPI_CHECK(MPI_Recv(result, (int)result_message(), MPI_BYTE, MPI_ANY_SOURCE, TAG_RESULT,
                           MPI_COMM_WORLD, &st));
        uint32_t p = (uint32_t)(st.MPI_SOURCE - 1);
        /* Held: task p is free for the next frame. */
        MPI_CHECK(MPI_Send(&p, 1, MPI_UINT32_T, 0, TAG_CONSUMED, MPI_COMM_WORLD));
        all = video_collect(&results, p, got, result + sizeof *got);
    }
    video_collector_finish(&results);
    free(result);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_CHECK(MPI_Init(&argc, &argv));
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (video_options(argc, argv, "videostream_mpi", &opt) != 0) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    EXPECT(size >= 3, "videostream_mpi: the run needs an input, an output and a processing task "
                      "(mpirun -n 3 or more)");
    /* The input finds the format (from --input files, maybe) and tells the others. */
    if (rank == 0) {
        video_stream_format(&opt, &fmt);
        fmt.workers = (uint32_t)size - 2;
        EXPECT(fmt.frames > 0, "input: no frames");
    }
    MPI_CHECK(MPI_Bcast(&fmt, sizeof fmt, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (rank == 0) {
        input();
    } else if (rank == output_rank()) {
        output();
    } else {
        worker((uint32_t)rank - 1, rank);
    }
    MPI_CHECK(MPI_Finalize());
    return 0;
}
