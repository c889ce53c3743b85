/* The computation of the video pipeline of section 3.2 of the SAT report
 * (Figure 16), shared by its three versions: examples-c/videostream (SAT),
 * bench/pipeline/videostream_mpi.c (MPI) and videostream_zmq.c (ZeroMQ).
 * Whatever carries the frames, the same options, the same frames, the same
 * processing (a 3x3 Sobel stencil, then a Hough transform), the same checks
 * of the results and the same printed lines come from here.
 *
 * Timing. The input role stamps CLOCK_MONOTONIC (video_now_ns) just before
 * it starts producing frame 0 and sends that stamp with every frame
 * (video_frame.start_ns); a processing task copies it into its result
 * (video_result.start_ns); the output role stamps the clock again once it
 * holds the last result and prints, as its last line,
 *   output: N frames in S.SSS s: F.F frames/s
 * CLOCK_MONOTONIC is one clock for every process of a Linux host, so the
 * two stamps, taken by different processes, can be subtracted: the
 * pipeline runs on one host. */
#ifndef EXAMPLES_VIDEO_H
#define EXAMPLES_VIDEO_H

#include <stddef.h>
#include <stdint.h>

/* At most this many lines are reported per frame. */
#define VIDEO_MAX_LINES 8

/* The command line, the same for every process of a run:
 *   --frames N              the number of frames (default 20)
 *   --width W, --height H   the size of synthetic frames (default 320x240)
 *   --input PATTERN         frames from files (BMP or binary PGM), PATTERN
 *                           holding one %d (or %03d, ...) for the frame
 *                           number from 0; the stream ends at the first
 *                           missing file or after N frames
 *   --output PATTERN        write each result frame (edges in gray, the lines
 *                           found in red): PGM if PATTERN ends in .pgm, else BMP
 *   --no-check              the output role does not recompute synthetic
 *                           frames to check them (for benchmarks); it still
 *                           checks that each frame arrives exactly once
 *   --reference             the sequential reference (videostream only)
 *   --workers W             the number of processing tasks, where the
 *                           program starts the processes itself (ZeroMQ)
 * Other arguments are left alone (SAT's or MPI's own). */
struct video_options {
    uint32_t frames;
    uint32_t width;
    uint32_t height;
    const char *input;
    const char *output;
    int check;
    int reference;
    uint32_t workers; /* 0: not given */
};

/* The stream: the size of its frames, their number, the processing tasks. */
struct video_format {
    uint32_t width;
    uint32_t height;
    uint32_t frames;
    uint32_t workers;
};

/* What goes with a frame from the input to a task (then the width * height
 * gray pixels). */
struct video_frame {
    uint64_t frame;    /* its number, from 0 */
    uint64_t start_ns; /* the input's stamp before producing frame 0 */
};

/* A line found by the Hough transform: x cos(theta) + y sin(theta) = rho. */
struct video_line {
    int32_t theta; /* degrees, 0 to 179 */
    int32_t rho;   /* pixels */
    int32_t votes;
    int32_t reserved;
};

/* What goes with a result from a task to the output (then the width *
 * height edge image). */
struct video_result {
    uint64_t frame;
    uint64_t start_ns; /* video_frame.start_ns, passed along */
    uint32_t nlines;
    uint32_t reserved;
    struct video_line lines[VIDEO_MAX_LINES];
};

/* Parses the options into `opt` (defaults first); 0, or -1 after a message
 * naming `program` on stderr. Also fills the sine and cosine tables: call
 * it before anything else here. */
int video_options(int argc, char **argv, const char *program, struct video_options *opt);

/* The stream's format from the options, or from the --input files (their
 * size, and how many of them there are up to --frames); workers is 0. */
void video_stream_format(const struct video_options *opt, struct video_format *fmt);

/* The pixels of one frame, width * height bytes. */
static inline size_t video_frame_bytes(const struct video_format *fmt) {
    return (size_t)fmt->width * fmt->height;
}

/* Frame `id` into `pixels`: synthetic, or read from its --input file. */
void video_produce(const struct video_options *opt, const struct video_format *fmt, uint32_t id,
                   uint8_t *pixels);

/* The whole processing of one frame: its edges into `edge`, the lines found
 * (strongest first) into `lines`; returns their number. */
uint32_t video_process_frame(const struct video_format *fmt, const uint8_t *frame, uint8_t *edge,
                             struct video_line lines[VIDEO_MAX_LINES]);

/* Whether the strongest of the lines found in synthetic frame `id` is the
 * line drawn there; if not, says so (`who` is the role). */
int video_drawn_line_found(const struct video_format *fmt, const char *who, uint32_t id,
                           const struct video_line *lines, uint32_t n);

/* Writes result frame `id` to its --output file: the edges in gray, the
 * lines found in red. */
void video_write_result(const struct video_options *opt, const struct video_format *fmt,
                        uint32_t id, const uint8_t *edge, const struct video_line *lines,
                        uint32_t nlines);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t video_now_ns(void);

/* The output role's bookkeeping, whatever carries the results. */
struct video_collector {
    const struct video_options *opt;
    const struct video_format *fmt;
    uint8_t *seen; /* seen[id]: frame id came out */
    uint32_t nseen, right, found;
    uint8_t *frame, *edge; /* for the checks */
    uint64_t start_ns, end_ns;
};

void video_collector_init(struct video_collector *c, const struct video_options *opt,
                          const struct video_format *fmt);

/* One result from task `task`: `res` and its edge image. Stamps the clock
 * at once, checks the frame is one of the stream's and new (the process
 * ends otherwise), prints "output: got frame N from task P", checks
 * synthetic frames against the same computation done here (unless
 * --no-check), writes the --output file. Returns 1 once every frame is in. */
int video_collect(struct video_collector *c, uint32_t task, const struct video_result *res,
                  const uint8_t *edge);

/* Once every frame is in: prints the summary line, then the frames/s line
 * (the output role's last line), and frees what video_collector_init took. */
void video_collector_finish(struct video_collector *c);

#endif
