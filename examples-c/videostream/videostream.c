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
 *   --reference       no S-DSM and no satrun: one plain process makes the
 *                     same frames and processes them one after the other
 *                     with the same code, writing the same files (the
 *                     sequential reference the pipeline's output must equal)
 *
 * The output role prints a line for each frame it receives ("output: got
 * frame N from task P") and a summary at the end.
 *
 * The topology has one input (role 1), one output (role 3) and any number
 * of processing tasks (role 2), as in Figure 16 (topology.xml: 3 of them,
 * 2workers.xml: 2, each with 2 servers). As in the report, the
 * channels are shared buffers and there is no explicit synchronization in
 * the user code: exclusive write scopes and publish-subscribe carry it.
 * For each processing task p, an input buffer IN(p) and an output buffer
 * OUT(p). The input task writes a frame into IN(p); that notifies task p,
 * which takes the frame, computes, and writes OUT(p); that notifies the
 * output task, which records the result and marks it consumed; that
 * notifies the input task, for which task p is free for the next frame: an
 * eager dynamic scheduler. Each side subscribes and then looks once, so no
 * notification sent before its subscription is missed. The frame format is
 * a symbol the input writes, which the others wait for. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sat_compat.h>

#include "../common/check.h"
#include "../common/image.h"

#define FORMAT_SYMBOL "videostream/format"
#define TICKET_ID 10
/* Buffer p takes chunk ids from IN_BASE + p * STRIDE (and OUT_BASE ...). */
#define IN_BASE 1000
#define OUT_BASE 1000000
#define STRIDE 1000
#define MAX_LINES 8

/* Input buffer states (0: never written). */
enum { FULL = 1, TAKEN = 2, END = 3 };
/* Output buffer states (0: never written). */
enum { READY = 1, CONSUMED = 2 };

/* What the input publishes as FORMAT_SYMBOL. */
struct format {
    uint32_t width;
    uint32_t height;
    uint32_t frames;
    uint32_t workers;
};

/* An input buffer: this header, then width * height gray pixels. */
struct in_header {
    uint64_t state;
    uint64_t frame;
};

/* A line found by the Hough transform: x cos(theta) + y sin(theta) = rho. */
struct line {
    int32_t theta; /* degrees, 0 to 179 */
    int32_t rho;   /* pixels */
    int32_t votes;
    int32_t reserved;
};

/* An output buffer: this header, then the width * height edge image. */
struct out_header {
    uint64_t state;
    uint64_t frame;
    uint32_t nlines;
    uint32_t reserved;
    struct line lines[MAX_LINES];
};

static struct {
    uint32_t frames, width, height;
    const char *input;
    const char *output;
    int reference;
} opt = {20, 320, 240, NULL, NULL, 0};

static struct format fmt;

/* ------------------------------------------------------------- the frames */

#define PI 3.14159265358979323846
static double cos_table[180], sin_table[180];

static void init_tables(void) {
    for (int t = 0; t < 180; t++) {
        cos_table[t] = cos(t * PI / 180.0);
        sin_table[t] = sin(t * PI / 180.0);
    }
}

/* PATTERN with its %d (or %0Nd) replaced by n. */
static void frame_path(char *out, size_t len, const char *pattern, uint32_t n) {
    const char *p = strchr(pattern, '%');
    size_t i = 0;
    if (p == NULL) {
        snprintf(out, len, "%s", pattern);
        return;
    }
    const char *q = p + 1;
    int zero = *q == '0';
    int width = (int)strtol(q, (char **)&q, 10);
    if (*q != 'd') {
        snprintf(out, len, "%s", pattern);
        return;
    }
    i = (size_t)(p - pattern) < len ? (size_t)(p - pattern) : len - 1;
    memcpy(out, pattern, i);
    snprintf(out + i, len - i, zero ? "%0*u%s" : "%*u%s", width, n, q + 1);
}

/* The line drawn in synthetic frame `id`. */
static void drawn_line(uint32_t id, int *theta, int *rho) {
    *theta = 10 + (int)((37u * id) % 160u);
    double cx = fmt.width / 2.0, cy = fmt.height / 2.0;
    *rho = (int)lround(cx * cos_table[*theta] + cy * sin_table[*theta]) + ((int)(id % 11) - 5) * 4;
}

/* Synthetic frame `id`: a smooth, slightly noisy background and one bright
 * straight line, a different one in each frame. */
static void synthetic(uint32_t id, uint8_t *pixels) {
    int theta, rho;
    drawn_line(id, &theta, &rho);
    for (uint32_t y = 0; y < fmt.height; y++) {
        for (uint32_t x = 0; x < fmt.width; x++) {
            uint32_t noise = (x * 7919u + y * 104729u + id * 31u) % 9u;
            double d = x * cos_table[theta] + y * sin_table[theta] - rho;
            pixels[(size_t)y * fmt.width + x] =
                fabs(d) < 1.0 ? 230 : (uint8_t)(40 + x * 48 / fmt.width + y * 48 / fmt.height + noise);
        }
    }
}

/* Frame `id` from the --input files, as gray; 0, or -1 if it is missing. */
static int from_file(uint32_t id, uint8_t *pixels) {
    char path[4096], err[512];
    struct image img, gray;
    frame_path(path, sizeof path, opt.input, id);
    if (image_read(path, &img, err, sizeof err) != 0) {
        return -1;
    }
    EXPECT(img.width == fmt.width && img.height == fmt.height,
           "input: %s is %ux%u, the stream is %ux%u", path, img.width, img.height, fmt.width,
           fmt.height);
    EXPECT(image_to_gray(&img, &gray) == 0, "out of memory");
    memcpy(pixels, gray.pixels, image_bytes(&gray));
    image_free(&gray);
    image_free(&img);
    return 0;
}

static void produce(uint32_t id, uint8_t *pixels) {
    if (opt.input == NULL) {
        synthetic(id, pixels);
    } else {
        EXPECT(from_file(id, pixels) == 0, "input: frame %u disappeared", id);
    }
}

/* --------------------------------------------------------- the processing */

/* 3x3 Sobel gradient magnitude, (|gx| + |gy|) / 4 clamped to 255; the
 * border is 0. */
static void edges(const uint8_t *src, uint8_t *out) {
    uint32_t w = fmt.width, h = fmt.height;
    memset(out, 0, (size_t)w * h);
    for (uint32_t y = 1; y + 1 < h; y++) {
        for (uint32_t x = 1; x + 1 < w; x++) {
            const uint8_t *p = src + (size_t)y * w + x;
            int gx = (p[-(long)w + 1] + 2 * p[1] + p[w + 1]) - (p[-(long)w - 1] + 2 * p[-1] + p[w - 1]);
            int gy = (p[w - 1] + 2 * p[w] + p[w + 1]) - (p[-(long)w - 1] + 2 * p[-(long)w] + p[-(long)w + 1]);
            int m = (abs(gx) + abs(gy)) / 4;
            out[(size_t)y * w + x] = (uint8_t)(m > 255 ? 255 : m);
        }
    }
}

#define EDGE_THRESHOLD 100
#define PEAK_WINDOW 3

/* The Hough transform of the edge image: every pixel above EDGE_THRESHOLD
 * votes for the lines through it; the local maxima above a second
 * threshold, strongest first, are the lines found. */
static uint32_t hough(const uint8_t *edge, struct line *lines) {
    int w = (int)fmt.width, h = (int)fmt.height;
    int maxrho = (int)ceil(sqrt((double)w * w + (double)h * h));
    int nrho = 2 * maxrho + 1;
    int32_t *acc = calloc((size_t)180 * nrho, sizeof *acc);
    EXPECT(acc != NULL, "out of memory");
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            if (edge[(size_t)y * w + x] < EDGE_THRESHOLD) {
                continue;
            }
            for (int t = 0; t < 180; t++) {
                int r = (int)lround(x * cos_table[t] + y * sin_table[t]);
                acc[t * nrho + r + maxrho]++;
            }
        }
    }
    int32_t threshold = (w < h ? w : h) / 4;
    uint32_t n = 0;
    for (int t = 0; t < 180; t++) {
        for (int r = 0; r < nrho; r++) {
            int32_t v = acc[t * nrho + r];
            if (v < threshold) {
                continue;
            }
            int peak = 1;
            for (int dt = -PEAK_WINDOW; peak && dt <= PEAK_WINDOW; dt++) {
                for (int dr = -PEAK_WINDOW; peak && dr <= PEAK_WINDOW; dr++) {
                    int t2 = t + dt, r2 = r + dr;
                    if ((dt == 0 && dr == 0) || t2 < 0 || t2 >= 180 || r2 < 0 || r2 >= nrho) {
                        continue;
                    }
                    int32_t u = acc[t2 * nrho + r2];
                    /* ties go to the first cell in scan order */
                    if (u > v || (u == v && (dt < 0 || (dt == 0 && dr < 0)))) {
                        peak = 0;
                    }
                }
            }
            if (!peak) {
                continue;
            }
            struct line l = {t, r - maxrho, v, 0};
            uint32_t i = n < MAX_LINES ? n++ : MAX_LINES;
            if (i == MAX_LINES) {
                if (lines[MAX_LINES - 1].votes >= v) {
                    continue;
                }
                i = MAX_LINES - 1;
            }
            while (i > 0 && lines[i - 1].votes < v) {
                lines[i] = lines[i - 1];
                i--;
            }
            lines[i] = l;
        }
    }
    free(acc);
    return n;
}

/* The whole processing of one frame. */
static uint32_t process_frame(const uint8_t *frame, uint8_t *edge, struct line *lines) {
    edges(frame, edge);
    return hough(edge, lines);
}

/* Whether the strongest of the lines found in synthetic frame `id` is the
 * line drawn there; if not, says so (`who` is the role). */
static int drawn_line_found(const char *who, uint32_t id, const struct line *lines, uint32_t n) {
    int theta, rho;
    drawn_line(id, &theta, &rho);
    if (n > 0 && abs(lines[0].theta - theta) <= 2 && abs(lines[0].rho - rho) <= 4) {
        return 1;
    }
    printf("%s: frame %u: drew theta %d rho %d, found theta %d rho %d\n", who, id, theta, rho,
           n > 0 ? lines[0].theta : -1, n > 0 ? lines[0].rho : -1);
    return 0;
}

/* The size of the stream and its number of frames, from the options or
 * the --input files: fmt.width, fmt.height, fmt.frames. */
static void stream_format(void) {
    fmt.width = opt.width;
    fmt.height = opt.height;
    fmt.frames = opt.frames;
    if (opt.input == NULL) {
        return;
    }
    char path[4096], err[512];
    struct image img;
    frame_path(path, sizeof path, opt.input, 0);
    EXPECT(image_read(path, &img, err, sizeof err) == 0, "input: %s", err);
    fmt.width = img.width;
    fmt.height = img.height;
    image_free(&img);
    uint32_t n = 0;
    for (; n < opt.frames; n++) {
        frame_path(path, sizeof path, opt.input, n);
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            break;
        }
        fclose(f);
    }
    fmt.frames = n;
}

/* ---------------------------------------------------------------- buffers */

static size_t in_size(void) { return sizeof(struct in_header) + (size_t)fmt.width * fmt.height; }
static size_t out_size(void) { return sizeof(struct out_header) + (size_t)fmt.width * fmt.height; }

static Chunk_t *buffer(uint64_t base, uint32_t p, size_t size) {
    Chunk_t *c = CHECK_PTR(MALLOC(NULL, base + (uint64_t)p * STRIDE, size));
    EXPECT(c->nchunks <= STRIDE, "a frame buffer takes %zu chunks; at most %d fit", c->nchunks,
           STRIDE);
    return c;
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
    Chunk_t **in;
    uint32_t next;
    int64_t *given; /* the frame each task was last given, -1: none */
    uint32_t consumed;
    uint32_t *index; /* index[p] == p: the handlers' parameters */
} input_state;

/* Gives task p the next frame, or the end of the stream. */
static void give(uint32_t p) {
    Chunk_t *in = input_state.in[p];
    struct in_header *hd = (struct in_header *)in->data;
    CHECK(WRITE(in));
    if (input_state.next < fmt.frames) {
        hd->state = FULL;
        hd->frame = input_state.next;
        produce(input_state.next, (uint8_t *)in->data + sizeof *hd);
        input_state.given[p] = input_state.next++;
    } else {
        hd->state = END;
        hd->frame = 0;
        input_state.given[p] = -1;
    }
    CHECK(RELEASE(in));
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
    if (hd.state != CONSUMED || (int64_t)hd.frame != input_state.given[p]) {
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
        CHECK(UNSUBSCRIBE(buffer(OUT_BASE, q, out_size())));
    }
    printf("input: %u frames given and consumed\n", input_state.consumed);
}

static void input(_SAT_Bootstrap_t *b) {
    (void)b;
    stream_format();
    int clients = clientGetClientNr();
    EXPECT(clients >= 3, "the run needs an input, an output and a processing task");
    fmt.workers = (uint32_t)clients - 2;
    EXPECT(fmt.frames > 0, "input: no frames");

    uint32_t n = fmt.workers;
    input_state.in = calloc(n, sizeof *input_state.in);
    input_state.given = calloc(n, sizeof *input_state.given);
    input_state.index = calloc(n, sizeof *input_state.index);
    EXPECT(input_state.in && input_state.given && input_state.index, "out of memory");
    for (uint32_t p = 0; p < n; p++) {
        input_state.in[p] = buffer(IN_BASE, p, in_size());
        input_state.given[p] = -1;
        input_state.index[p] = p;
        Chunk_t *out = buffer(OUT_BASE, p, out_size());
        CHECK(SUBSCRIBE(out, input_handler, &input_state.index[p]));
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
    Chunk_t *in, *out;
    uint8_t *frame, *edge;
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
    if (taken.state == FULL) {
        memcpy(worker_state.frame, (uint8_t *)in->data + sizeof taken,
               (size_t)fmt.width * fmt.height);
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
    out.frame = taken.frame;
    out.nlines = process_frame(worker_state.frame, worker_state.edge, out.lines);
    /* The input gives this task a frame only once its last result was
     * consumed, so OUT(p) is free. */
    CHECK(WRITE(worker_state.out));
    memcpy(worker_state.out->data, &out, sizeof out);
    memcpy((uint8_t *)worker_state.out->data + sizeof out, worker_state.edge,
           (size_t)fmt.width * fmt.height);
    CHECK(RELEASE(worker_state.out));
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
    worker_state.in = buffer(IN_BASE, worker_state.p, in_size());
    worker_state.out = buffer(OUT_BASE, worker_state.p, out_size());
    worker_state.frame = malloc((size_t)fmt.width * fmt.height);
    worker_state.edge = malloc((size_t)fmt.width * fmt.height);
    EXPECT(worker_state.frame && worker_state.edge, "out of memory");
    printf("worker %u: rank %u\n", worker_state.p, b->rank);
    CHECK(SUBSCRIBE(worker_state.in, worker_handler, NULL));
    /* Look once: a frame given before the subscription is not missed. */
    worker_handler(worker_state.in, NULL);
}

/* ----------------------------------------------------------------- output */

static struct {
    Chunk_t **out;
    uint8_t *seen;
    uint32_t nseen, right, found;
    uint32_t *index;
    uint8_t *frame, *edge;
} output_state;

/* Writes a result frame: the edges in gray, the lines found in red. */
static void write_result(uint32_t id, const uint8_t *edge, const struct line *lines,
                         uint32_t nlines) {
    char path[4096], err[512];
    struct image img = {fmt.width, fmt.height, 3, malloc((size_t)fmt.width * fmt.height * 3)};
    EXPECT(img.pixels != NULL, "out of memory");
    for (uint32_t y = 0; y < fmt.height; y++) {
        for (uint32_t x = 0; x < fmt.width; x++) {
            size_t i = (size_t)y * fmt.width + x;
            uint8_t *px = img.pixels + 3 * i;
            px[0] = px[1] = px[2] = edge[i];
            for (uint32_t k = 0; k < nlines; k++) {
                double d = x * cos_table[lines[k].theta] + y * sin_table[lines[k].theta] - lines[k].rho;
                if (fabs(d) < 0.6) {
                    px[0] = 0;
                    px[1] = 0;
                    px[2] = 255;
                }
            }
        }
    }
    frame_path(path, sizeof path, opt.output, id);
    EXPECT(image_write(path, &img, err, sizeof err) == 0, "output: %s", err);
    image_free(&img);
}

/* OUT(p) changed: record a result not consumed yet, once. */
static void output_handler(Chunk_t *out, void *params) {
    uint32_t p = *(uint32_t *)params;
    const struct out_header *hd = (const struct out_header *)out->data;
    CHECK(READ(out));
    uint64_t state = hd->state;
    CHECK(RELEASE(out));
    if (state != READY || output_state.nseen == fmt.frames) {
        return;
    }
    CHECK(READWRITE(out));
    struct out_header got = *hd;
    if (got.state == READY) {
        memcpy(output_state.edge, (uint8_t *)out->data + sizeof got,
               (size_t)fmt.width * fmt.height);
        ((struct out_header *)out->data)->state = CONSUMED;
    }
    CHECK(RELEASE(out));
    if (got.state != READY) {
        return;
    }
    uint32_t id = (uint32_t)got.frame;
    EXPECT(id < fmt.frames, "output: frame %u from task %u: there are %u frames", id, p,
           fmt.frames);
    EXPECT(!output_state.seen[id], "output: frame %u came out twice", id);
    EXPECT(got.nlines <= MAX_LINES, "output: frame %u has %u lines", id, got.nlines);
    output_state.seen[id] = 1;
    output_state.nseen++;
    printf("output: got frame %u from task %u\n", id, p);
    if (opt.input == NULL) {
        /* Synthetic frames can be checked: the same computation here, and
         * the line drawn must be the strongest one found. */
        struct line lines[MAX_LINES];
        synthetic(id, output_state.frame);
        uint8_t *edge = malloc((size_t)fmt.width * fmt.height);
        EXPECT(edge != NULL, "out of memory");
        uint32_t n = process_frame(output_state.frame, edge, lines);
        EXPECT(n == got.nlines && memcmp(lines, got.lines, n * sizeof *lines) == 0 &&
                   memcmp(edge, output_state.edge, (size_t)fmt.width * fmt.height) == 0,
               "output: frame %u came out wrong", id);
        free(edge);
        output_state.right++;
        output_state.found += (uint32_t)drawn_line_found("output", id, got.lines, got.nlines);
    }
    if (opt.output != NULL) {
        write_result(id, output_state.edge, got.lines, got.nlines);
    }
    if (output_state.nseen < fmt.frames) {
        return;
    }
    for (uint32_t q = 0; q < fmt.workers; q++) {
        CHECK(UNSUBSCRIBE(output_state.out[q]));
    }
    if (opt.input == NULL) {
        printf("output: %u frames, each exactly once, %u right; the drawn line found in %u of %u\n",
               output_state.nseen, output_state.right, output_state.found, fmt.frames);
    } else {
        printf("output: %u frames, each exactly once\n", output_state.nseen);
    }
}

static void output(_SAT_Bootstrap_t *b) {
    (void)b;
    read_format();
    uint32_t n = fmt.workers;
    output_state.out = calloc(n, sizeof *output_state.out);
    output_state.index = calloc(n, sizeof *output_state.index);
    output_state.seen = calloc(fmt.frames, 1);
    output_state.frame = malloc((size_t)fmt.width * fmt.height);
    output_state.edge = malloc((size_t)fmt.width * fmt.height);
    EXPECT(output_state.out && output_state.index && output_state.seen && output_state.frame &&
               output_state.edge,
           "out of memory");
    for (uint32_t p = 0; p < n; p++) {
        output_state.index[p] = p;
        output_state.out[p] = buffer(OUT_BASE, p, out_size());
        CHECK(SUBSCRIBE(output_state.out[p], output_handler, &output_state.index[p]));
    }
    for (uint32_t p = 0; p < n && output_state.nseen < fmt.frames; p++) {
        output_handler(output_state.out[p], &output_state.index[p]);
    }
}

/* ------------------------------------------------- the sequential reference */

/* --reference: the same frames through the same processing, one after the
 * other in one plain process, no S-DSM; the same result files as the
 * output role writes. */
static int reference(void) {
    stream_format();
    EXPECT(fmt.frames > 0, "reference: no frames");
    size_t size = (size_t)fmt.width * fmt.height;
    uint8_t *frame = malloc(size), *edge = malloc(size);
    EXPECT(frame && edge, "out of memory");
    uint32_t found = 0;
    for (uint32_t id = 0; id < fmt.frames; id++) {
        struct line lines[MAX_LINES];
        produce(id, frame);
        uint32_t n = process_frame(frame, edge, lines);
        if (opt.input == NULL) {
            found += (uint32_t)drawn_line_found("reference", id, lines, n);
        }
        if (opt.output != NULL) {
            write_result(id, edge, lines, n);
        }
    }
    free(frame);
    free(edge);
    printf("reference: %u frames of %ux%u, processed sequentially", fmt.frames, fmt.width,
           fmt.height);
    if (opt.input == NULL) {
        printf("; the drawn line found in %u of %u", found, fmt.frames);
    }
    printf("\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc;
        if (strcmp(argv[i], "--reference") == 0) {
            opt.reference = 1;
        } else if (more && strcmp(argv[i], "--frames") == 0) {
            opt.frames = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (more && strcmp(argv[i], "--width") == 0) {
            opt.width = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (more && strcmp(argv[i], "--height") == 0) {
            opt.height = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (more && strcmp(argv[i], "--input") == 0) {
            opt.input = argv[++i];
        } else if (more && strcmp(argv[i], "--output") == 0) {
            opt.output = argv[++i];
        }
    }
    if (opt.width < 8 || opt.height < 8 || opt.width > 4096 || opt.height > 4096) {
        fprintf(stderr, "videostream: frames must be 8x8 to 4096x4096\n");
        return 1;
    }
    init_tables();
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
