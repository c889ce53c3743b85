/* videostream: the video stream processing application of section 3.2 of
 * the SAT report (Figure 16). An input role produces frames, processing
 * roles detect edges (a 3x3 Sobel stencil) and then lines (a Hough
 * transform), an output role collects the results and writes them out.
 *
 *   satrun -n 7 --topology videostream/topology.xml -- ./videostream --frames 20 --output out/frame%03d.bmp
 *   ./videostream --reference --frames 20 --output ref/frame%03d.bmp
 *
 * Options (every process gets the same command line):
 *   --frames N        the number of frames (default 20)
 *   --width W, --height H   the size of synthetic frames (default 320x240)
 *   --input PATTERN   read frames from files instead, PATTERN holding one %d
 *                     (or %03d, ...) for the frame number from 0: BMP or
 *                     binary PGM, all of one size; the stream ends at the
 *                     first missing file or after N frames
 *   --output PATTERN  write each result frame (edges in gray, detected lines
 *                     in red) to a file: PGM if PATTERN ends in .pgm, else BMP
 *   --no-check        the output role does not recompute the synthetic
 *                     frames to check them (for benchmarks: the check costs
 *                     it as much as a processing task); it still checks that
 *                     each frame comes out exactly once
 *   --reference       no S-DSM and no satrun: one plain process makes the
 *                     same frames and processes them one after the other
 *                     with the same code, writing the same files (the
 *                     sequential reference the pipeline's output must equal),
 *                     and prints its rate ("reference: N frames in S s: F
 *                     frames/s"): with C cores the pipeline's compute bound
 *                     is about C times that rate
 *   --protocol NAME   the consistency protocol of every channel object:
 *                     home-only (the default, see below), mesi, mesi-e,
 *                     update, hlrc, learned or adaptive (docs/PROTOCOLS.md;
 *                     `make bench-protocols` runs the pipeline under each)
 *
 * The output role prints a line for each frame it receives ("output: got
 * frame N from task P"), a summary, and last the rate of the pipeline,
 * "output: N frames in S.SSS s: F.F frames/s": from the input starting to
 * produce frame 0 (its CLOCK_MONOTONIC stamp travels in the frame headers)
 * to the output holding the last result.
 *
 * The frames, the processing, the checks and the printed lines are those of
 * common/video.c, which the MPI and ZeroMQ versions of the same pipeline
 * (bench/pipeline) share.
 *
 * The topology has one input (role 1), one output (role 3) and any number
 * of processing tasks (role 2), as in Figure 16 (topology.xml: 3 of them,
 * 2workers.xml: 2, each with 2 servers). As in the report, the
 * channels are shared buffers and there is no explicit synchronization in
 * the user code: exclusive write scopes and publish-subscribe carry it.
 * For each processing task p, an input channel IN(p) and an output channel
 * OUT(p). The input task writes a frame into IN(p); that notifies task p,
 * which takes the frame, computes, and writes OUT(p); that notifies the
 * output task, which records the result and marks it consumed; that
 * notifies the input task, for which task p is free for the next frame: an
 * eager dynamic scheduler. Each side subscribes and then looks once, so no
 * notification sent before its subscription is missed. The frame format is
 * a symbol the input writes, which the others wait for.
 *
 * A channel is two objects: a small control chunk (the state and the
 * frame's header), which the handlers watch and flip, and the pixels, a
 * chain written once per frame and read once. Flipping a state therefore
 * moves a few bytes, not the frame: the pixels cross the S-DSM once on
 * their way in and once on their way out of a processing task. The pixels
 * are released before the control chunk that announces them, so whoever
 * sees the announcement and then acquires the pixels gets this frame's.
 *
 * Every channel object uses the home-only protocol: each one is written by
 * one process and read by one or two others in turn, so a cached copy is
 * never read twice, and MESI would make each write first invalidate the
 * readers' copies, a round trip to processes that are busy computing.
 * Home-only asks only the home (measured with bench/pipeline.py: about 20%
 * more frames per second than MESI here). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sat_compat.h>

#include "../common/check.h"
#include "../common/video.h"

#define FORMAT_SYMBOL "videostream/format"
#define TICKET_ID 10
/* Channel p's control chunk is IN_BASE + p * STRIDE (OUT_BASE ...); its
 * pixels are the next chunk id. */
#define IN_BASE 1000
#define OUT_BASE 1000000
#define STRIDE 1000

/* Input buffer states (0: never written). */
enum { FULL = 1, TAKEN = 2, END = 3 };
/* Output buffer states (0: never written). */
enum { READY = 1, CONSUMED = 2 };

/* The input publishes the format (struct video_format) as FORMAT_SYMBOL. */

/* The control chunk of IN(p); its pixels are width * height gray bytes. */
struct in_header {
    uint64_t state;
    struct video_frame f;
};

/* The control chunk of OUT(p); its pixels are the width * height edge image. */
struct out_header {
    uint64_t state;
    struct video_result r;
};

/* A channel: its control chunk and its pixels. */
struct channel {
    Chunk_t *ctl;
    Chunk_t *pixels;
};

static struct video_options opt;
static struct video_format fmt;
/* The protocol of the channel objects (--protocol). */
static const sat_consistency_t *channel_protocol;

/* The protocol a --protocol NAME names; NULL for an unknown name. */
static const sat_consistency_t *protocol_named(const char *name) {
    static const struct {
        const char *name;
        const sat_consistency_t *(*make)(void);
    } known[] = {
        {"home-only", sat_home_only},
        {"mesi", sat_home_based_mesi},
        {"mesi-e", sat_home_based_mesi_exclusive},
        {"update", sat_home_based_mesi_update},
        {"hlrc", sat_multiple_writers},
        {"learned", sat_home_based_mesi_learned},
        {"adaptive", sat_adaptive},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(name, known[i].name) == 0) {
            return known[i].make();
        }
    }
    return NULL;
}

/* Takes --protocol NAME out of the command line (the options the MPI and
 * ZeroMQ versions share do not know it); 0, or -1 after saying what is
 * wrong. */
static int take_protocol(int *argc, char **argv) {
    channel_protocol = sat_home_only();
    int kept = 0;
    for (int i = 0; i < *argc; i++) {
        if (strcmp(argv[i], "--protocol") == 0) {
            if (i + 1 >= *argc || (channel_protocol = protocol_named(argv[i + 1])) == NULL) {
                fprintf(stderr,
                        "videostream: --protocol takes home-only, mesi, mesi-e, update, hlrc, "
                        "learned or adaptive\n");
                return -1;
            }
            i++;
            continue;
        }
        argv[kept++] = argv[i];
    }
    *argc = kept;
    argv[kept] = NULL;
    return 0;
}

/* ---------------------------------------------------------------- buffers */

/* Channel p at `base` (IN_BASE or OUT_BASE), its control chunk of
 * `header` bytes (allocated by whichever process comes first). */
static struct channel channel(uint64_t base, uint32_t p, size_t header) {
    uint64_t id = base + (uint64_t)p * STRIDE;
    struct channel ch;
    ch.ctl = CHECK_PTR(MALLOC(channel_protocol, id, header));
    /* The pixels are one chunk of a frame's size (MALLOC_LST sets sizes),
     * not a chain of default-sized chunks: a chain's chunks are acquired
     * one after the other, one round trip to the home each. */
    unsigned long pixels_id = (unsigned long)(id + 1);
    unsigned long pixels_size = (unsigned long)video_frame_bytes(&fmt);
    ch.pixels =
        CHECK_PTR(MALLOC_LST(channel_protocol, SAT_LIST(pixels_id), SAT_LIST(pixels_size)));
    return ch;
}

static void read_format(void) {
    void *data = NULL;
    size_t size = 0;
    CHECK(readSymbol(sdsm, FORMAT_SYMBOL, &data, &size));
    EXPECT(size == sizeof fmt, "the format symbol has %zu bytes", size);
    memcpy(&fmt, data, sizeof fmt);
    free(data);
}

/* ------------------------------------------------------------------ input */

static struct {
    struct channel *in;
    Chunk_t **out_ctl;
    uint32_t next;
    int64_t *given; /* the frame each task was last given, -1: none */
    uint32_t consumed;
    uint32_t *index; /* index[p] == p: the handlers' parameters */
    uint64_t start_ns; /* the clock before producing frame 0 */
} input_state;

/* Gives task p the next frame, or the end of the stream. */
static void give(uint32_t p) {
    struct channel in = input_state.in[p];
    struct in_header hd = {END, {0, input_state.start_ns}};
    if (input_state.next < fmt.frames) {
        if (input_state.next == 0) {
            input_state.start_ns = video_now_ns();
        }
        /* The pixels first: the control chunk announces them. */
        CHECK(WRITE(in.pixels));
        video_produce(&opt, &fmt, input_state.next, (uint8_t *)in.pixels->data);
        CHECK(RELEASE(in.pixels));
        hd.state = FULL;
        hd.f.frame = input_state.next;
        hd.f.start_ns = input_state.start_ns;
        input_state.given[p] = input_state.next++;
    } else {
        hd.f.start_ns = input_state.start_ns;
        input_state.given[p] = -1;
    }
    CHECK(WRITE(in.ctl));
    memcpy(in.ctl->data, &hd, sizeof hd);
    CHECK(RELEASE(in.ctl));
}

/* OUT(p) changed: once the output consumed the frame p was given, p is
 * free for the next one. */
static void input_handler(Chunk_t *out, void *params) {
    uint32_t p = *(uint32_t *)params;
    if (input_state.given[p] < 0) {
        return;
    }
    CHECK(READ(out));
    struct out_header hd;
    memcpy(&hd, out->data, sizeof hd);
    CHECK(RELEASE(out));
    if (hd.state != CONSUMED || (int64_t)hd.r.frame != input_state.given[p]) {
        return;
    }
    input_state.consumed++;
    give(p);
    for (uint32_t q = 0; q < fmt.workers; q++) {
        if (input_state.given[q] >= 0) {
            return;
        }
    }
    for (uint32_t q = 0; q < fmt.workers; q++) {
        CHECK(UNSUBSCRIBE(input_state.out_ctl[q]));
    }
    printf("input: %u frames given and consumed\n", input_state.consumed);
}

static void input(_SAT_Bootstrap_t *b) {
    (void)b;
    video_stream_format(&opt, &fmt);
    int clients = clientGetClientNr();
    EXPECT(clients >= 3, "the run needs an input, an output and a processing task");
    fmt.workers = (uint32_t)clients - 2;
    EXPECT(fmt.frames > 0, "input: no frames");

    uint32_t n = fmt.workers;
    input_state.in = calloc(n, sizeof *input_state.in);
    input_state.out_ctl = calloc(n, sizeof *input_state.out_ctl);
    input_state.given = calloc(n, sizeof *input_state.given);
    input_state.index = calloc(n, sizeof *input_state.index);
    EXPECT(input_state.in && input_state.out_ctl && input_state.given && input_state.index,
           "out of memory");
    for (uint32_t p = 0; p < n; p++) {
        input_state.in[p] = channel(IN_BASE, p, sizeof(struct in_header));
        input_state.given[p] = -1;
        input_state.index[p] = p;
        input_state.out_ctl[p] = channel(OUT_BASE, p, sizeof(struct out_header)).ctl;
        CHECK(SUBSCRIBE(input_state.out_ctl[p], input_handler, &input_state.index[p]));
    }
    /* The others allocate the same buffers once they know the format. */
    CHECK(writeSymbol(sdsm, FORMAT_SYMBOL, &fmt, sizeof fmt));
    printf("input: %u frames of %ux%u for %u processing tasks\n", fmt.frames, fmt.width,
           fmt.height, n);
    for (uint32_t p = 0; p < n; p++) {
        give(p);
    }
    /* Returning hands over to the handlers. */
}

/* ------------------------------------------------------------- processing */

static struct {
    uint32_t p;
    uint32_t done;
    struct channel in, out;
} worker_state;

/* IN(p) changed: take a new frame, compute, publish the result. */
static void worker_handler(Chunk_t *in, void *params) {
    (void)params;
    const struct in_header *hd = (const struct in_header *)in->data;
    CHECK(READ(in));
    uint64_t state = hd->state;
    CHECK(RELEASE(in));
    if (state != FULL && state != END) {
        return;
    }
    CHECK(READWRITE(in));
    struct in_header taken = *(struct in_header *)in->data;
    Chunk_t *pixels = worker_state.in.pixels;
    if (taken.state == FULL) {
        /* The pixels were released before this announcement. The task
         * computes straight from them: the input writes IN(p) again only
         * once this frame's result was consumed. */
        CHECK(READ(pixels));
        ((struct in_header *)in->data)->state = TAKEN;
    }
    CHECK(RELEASE(in));
    if (taken.state == END) {
        CHECK(UNSUBSCRIBE(in));
        printf("worker %u: processed %u frames\n", worker_state.p, worker_state.done);
        return;
    }
    if (taken.state != FULL) {
        return;
    }
    struct out_header out;
    memset(&out, 0, sizeof out);
    out.state = READY;
    out.r.frame = taken.f.frame;
    out.r.start_ns = taken.f.start_ns;
    /* The result is computed into the output buffer itself (section 3.2:
     * the task "calculates the resulting image into its output buffer").
     * The input gives this task a frame only once its last result was
     * consumed, so OUT(p) is free. */
    CHECK(WRITE(worker_state.out.pixels));
    out.r.nlines = video_process_frame(&fmt, (const uint8_t *)pixels->data,
                                       (uint8_t *)worker_state.out.pixels->data, out.r.lines);
    CHECK(RELEASE(worker_state.out.pixels));
    CHECK(RELEASE(pixels));
    CHECK(WRITE(worker_state.out.ctl));
    memcpy(worker_state.out.ctl->data, &out, sizeof out);
    CHECK(RELEASE(worker_state.out.ctl));
    worker_state.done++;
}

static void worker(_SAT_Bootstrap_t *b) {
    read_format();
    /* Task numbers from a shared ticket, whatever the ranks. */
    Chunk_t *ticket = CHECK_PTR(MALLOC(NULL, TICKET_ID, sizeof(uint64_t)));
    CHECK(READWRITE(ticket));
    uint64_t p = (*(uint64_t *)ticket->data)++;
    CHECK(RELEASE(ticket));
    EXPECT(p < fmt.workers, "worker: ticket %llu, but there are %u processing tasks",
           (unsigned long long)p, fmt.workers);
    worker_state.p = (uint32_t)p;
    worker_state.in = channel(IN_BASE, worker_state.p, sizeof(struct in_header));
    worker_state.out = channel(OUT_BASE, worker_state.p, sizeof(struct out_header));
    printf("worker %u: rank %u\n", worker_state.p, b->rank);
    CHECK(SUBSCRIBE(worker_state.in.ctl, worker_handler, NULL));
    /* Look once: a frame given before the subscription is not missed. */
    worker_handler(worker_state.in.ctl, NULL);
}

/* ----------------------------------------------------------------- output */

static struct {
    struct channel *out;
    uint32_t *index;
    struct video_collector results;
} output_state;

/* OUT(p) changed: record a result not consumed yet, once. */
static void output_handler(Chunk_t *out, void *params) {
    uint32_t p = *(uint32_t *)params;
    const struct out_header *hd = (const struct out_header *)out->data;
    CHECK(READ(out));
    uint64_t state = hd->state;
    CHECK(RELEASE(out));
    if (state != READY || output_state.results.nseen == fmt.frames) {
        return;
    }
    CHECK(READWRITE(out));
    struct out_header got = *hd;
    Chunk_t *pixels = output_state.out[p].pixels;
    if (got.state == READY) {
        /* Read before the result is marked consumed: task p writes its
         * next result into OUT(p) only once this scope is released. */
        CHECK(READ(pixels));
        ((struct out_header *)out->data)->state = CONSUMED;
    }
    CHECK(RELEASE(out));
    if (got.state != READY) {
        return;
    }
    int all = video_collect(&output_state.results, p, &got.r, (const uint8_t *)pixels->data);
    CHECK(RELEASE(pixels));
    if (!all) {
        return;
    }
    for (uint32_t q = 0; q < fmt.workers; q++) {
        CHECK(UNSUBSCRIBE(output_state.out[q].ctl));
    }
    video_collector_finish(&output_state.results);
}

static void output(_SAT_Bootstrap_t *b) {
    (void)b;
    read_format();
    uint32_t n = fmt.workers;
    output_state.out = calloc(n, sizeof *output_state.out);
    output_state.index = calloc(n, sizeof *output_state.index);
    EXPECT(output_state.out && output_state.index, "out of memory");
    video_collector_init(&output_state.results, &opt, &fmt);
    for (uint32_t p = 0; p < n; p++) {
        output_state.index[p] = p;
        output_state.out[p] = channel(OUT_BASE, p, sizeof(struct out_header));
        CHECK(SUBSCRIBE(output_state.out[p].ctl, output_handler, &output_state.index[p]));
    }
    for (uint32_t p = 0; p < n && output_state.results.nseen < fmt.frames; p++) {
        output_handler(output_state.out[p].ctl, &output_state.index[p]);
    }
}

/* ------------------------------------------------- the sequential reference */

/* --reference: the same frames through the same processing, one after the
 * other in one plain process, no S-DSM; the same result files as the
 * output role writes. */
static int reference(void) {
    video_stream_format(&opt, &fmt);
    EXPECT(fmt.frames > 0, "reference: no frames");
    size_t size = video_frame_bytes(&fmt);
    uint8_t *frame = malloc(size), *edge = malloc(size);
    EXPECT(frame && edge, "out of memory");
    uint32_t found = 0;
    uint64_t started = video_now_ns();
    for (uint32_t id = 0; id < fmt.frames; id++) {
        struct video_line lines[VIDEO_MAX_LINES];
        video_produce(&opt, &fmt, id, frame);
        uint32_t n = video_process_frame(&fmt, frame, edge, lines);
        if (opt.input == NULL) {
            found += (uint32_t)video_drawn_line_found(&fmt, "reference", id, lines, n);
        }
        if (opt.output != NULL) {
            video_write_result(&opt, &fmt, id, edge, lines, n);
        }
    }
    double seconds = (double)(video_now_ns() - started) / 1e9;
    free(frame);
    free(edge);
    printf("reference: %u frames of %ux%u, processed sequentially", fmt.frames, fmt.width,
           fmt.height);
    if (opt.input == NULL) {
        printf("; the drawn line found in %u of %u", found, fmt.frames);
    }
    printf("\n");
    /* The sequential rate: the pipeline's bound is about this times the
     * number of cores (bench/pipeline.py measures it beside the runs). */
    printf("reference: %u frames in %.3f s: %.1f frames/s\n", fmt.frames, seconds,
           seconds > 0 ? fmt.frames / seconds : 0.0);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (take_protocol(&argc, argv) != 0) {
        return 1;
    }
    if (video_options(argc, argv, "videostream", &opt) != 0) {
        return 1;
    }
    if (opt.reference) {
        return reference();
    }

    _SAT_Roles_t roles[4] = {NULL, input, worker, output};
    int status = _SAT_BOOTSTRAP(roles, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "videostream: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    return 0;
}
