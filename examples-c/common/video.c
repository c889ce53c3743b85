/* The video pipeline's computation, shared by its SAT, MPI and ZeroMQ
 * versions. See video.h. */
#define _POSIX_C_SOURCE 200809L

#include "video.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expect.h"
#include "image.h"

#define PI 3.14159265358979323846
static double cos_table[180], sin_table[180];

static void init_tables(void) {
    for (int t = 0; t < 180; t++) {
        cos_table[t] = cos(t * PI / 180.0);
        sin_table[t] = sin(t * PI / 180.0);
    }
}

/* ---------------------------------------------------------------- options */

int video_options(int argc, char **argv, const char *program, struct video_options *opt) {
    *opt = (struct video_options){20, 320, 240, NULL, NULL, 1, 0, 0};
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc;
        if (strcmp(argv[i], "--reference") == 0) {
            opt->reference = 1;
        } else if (strcmp(argv[i], "--no-check") == 0) {
            opt->check = 0;
        } else if (more && strcmp(argv[i], "--frames") == 0) {
            opt->frames = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (more && strcmp(argv[i], "--width") == 0) {
            opt->width = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (more && strcmp(argv[i], "--height") == 0) {
            opt->height = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (more && strcmp(argv[i], "--input") == 0) {
            opt->input = argv[++i];
        } else if (more && strcmp(argv[i], "--output") == 0) {
            opt->output = argv[++i];
        } else if (more && strcmp(argv[i], "--workers") == 0) {
            opt->workers = (uint32_t)strtoul(argv[++i], NULL, 10);
        }
    }
    if (opt->width < 8 || opt->height < 8 || opt->width > 4096 || opt->height > 4096) {
        fprintf(stderr, "%s: frames must be 8x8 to 4096x4096\n", program);
        return -1;
    }
    init_tables();
    return 0;
}

/* ------------------------------------------------------------- the frames */

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

void video_stream_format(const struct video_options *opt, struct video_format *fmt) {
    fmt->width = opt->width;
    fmt->height = opt->height;
    fmt->frames = opt->frames;
    fmt->workers = 0;
    if (opt->input == NULL) {
        return;
    }
    char path[4096], err[512];
    struct image img;
    frame_path(path, sizeof path, opt->input, 0);
    EXPECT(image_read(path, &img, err, sizeof err) == 0, "input: %s", err);
    fmt->width = img.width;
    fmt->height = img.height;
    image_free(&img);
    uint32_t n = 0;
    for (; n < opt->frames; n++) {
        frame_path(path, sizeof path, opt->input, n);
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            break;
        }
        fclose(f);
    }
    fmt->frames = n;
}

/* The line drawn in synthetic frame `id`. */
static void drawn_line(const struct video_format *fmt, uint32_t id, int *theta, int *rho) {
    *theta = 10 + (int)((37u * id) % 160u);
    double cx = fmt->width / 2.0, cy = fmt->height / 2.0;
    *rho = (int)lround(cx * cos_table[*theta] + cy * sin_table[*theta]) + ((int)(id % 11) - 5) * 4;
}

/* Synthetic frame `id`: a smooth, slightly noisy background and one bright
 * straight line, a different one in each frame. */
static void synthetic(const struct video_format *fmt, uint32_t id, uint8_t *pixels) {
    int theta, rho;
    drawn_line(fmt, id, &theta, &rho);
    for (uint32_t y = 0; y < fmt->height; y++) {
        for (uint32_t x = 0; x < fmt->width; x++) {
            uint32_t noise = (x * 7919u + y * 104729u + id * 31u) % 9u;
            double d = x * cos_table[theta] + y * sin_table[theta] - rho;
            pixels[(size_t)y * fmt->width + x] =
                fabs(d) < 1.0 ? 230
                              : (uint8_t)(40 + x * 48 / fmt->width + y * 48 / fmt->height + noise);
        }
    }
}

/* Frame `id` from the --input files, as gray; 0, or -1 if it is missing. */
static int from_file(const struct video_options *opt, const struct video_format *fmt, uint32_t id,
                     uint8_t *pixels) {
    char path[4096], err[512];
    struct image img, gray;
    frame_path(path, sizeof path, opt->input, id);
    if (image_read(path, &img, err, sizeof err) != 0) {
        return -1;
    }
    EXPECT(img.width == fmt->width && img.height == fmt->height,
           "input: %s is %ux%u, the stream is %ux%u", path, img.width, img.height, fmt->width,
           fmt->height);
    EXPECT(image_to_gray(&img, &gray) == 0, "out of memory");
    memcpy(pixels, gray.pixels, image_bytes(&gray));
    image_free(&gray);
    image_free(&img);
    return 0;
}

void video_produce(const struct video_options *opt, const struct video_format *fmt, uint32_t id,
                   uint8_t *pixels) {
    if (opt->input == NULL) {
        synthetic(fmt, id, pixels);
    } else {
        EXPECT(from_file(opt, fmt, id, pixels) == 0, "input: frame %u disappeared", id);
    }
}

/* --------------------------------------------------------- the processing */

/* 3x3 Sobel gradient magnitude, (|gx| + |gy|) / 4 clamped to 255; the
 * border is 0. */
static void edges(const struct video_format *fmt, const uint8_t *src, uint8_t *out) {
    uint32_t w = fmt->width, h = fmt->height;
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
static uint32_t hough(const struct video_format *fmt, const uint8_t *edge,
                      struct video_line *lines) {
    int w = (int)fmt->width, h = (int)fmt->height;
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
            struct video_line l = {t, r - maxrho, v, 0};
            uint32_t i = n < VIDEO_MAX_LINES ? n++ : VIDEO_MAX_LINES;
            if (i == VIDEO_MAX_LINES) {
                if (lines[VIDEO_MAX_LINES - 1].votes >= v) {
                    continue;
                }
                i = VIDEO_MAX_LINES - 1;
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

uint32_t video_process_frame(const struct video_format *fmt, const uint8_t *frame, uint8_t *edge,
                             struct video_line lines[VIDEO_MAX_LINES]) {
    edges(fmt, frame, edge);
    return hough(fmt, edge, lines);
}

int video_drawn_line_found(const struct video_format *fmt, const char *who, uint32_t id,
                           const struct video_line *lines, uint32_t n) {
    int theta, rho;
    drawn_line(fmt, id, &theta, &rho);
    if (n > 0 && abs(lines[0].theta - theta) <= 2 && abs(lines[0].rho - rho) <= 4) {
        return 1;
    }
    printf("%s: frame %u: drew theta %d rho %d, found theta %d rho %d\n", who, id, theta, rho,
           n > 0 ? lines[0].theta : -1, n > 0 ? lines[0].rho : -1);
    return 0;
}

void video_write_result(const struct video_options *opt, const struct video_format *fmt,
                        uint32_t id, const uint8_t *edge, const struct video_line *lines,
                        uint32_t nlines) {
    char path[4096], err[512];
    struct image img = {fmt->width, fmt->height, 3, malloc(video_frame_bytes(fmt) * 3)};
    EXPECT(img.pixels != NULL, "out of memory");
    for (uint32_t y = 0; y < fmt->height; y++) {
        for (uint32_t x = 0; x < fmt->width; x++) {
            size_t i = (size_t)y * fmt->width + x;
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
    frame_path(path, sizeof path, opt->output, id);
    EXPECT(image_write(path, &img, err, sizeof err) == 0, "output: %s", err);
    image_free(&img);
}

uint64_t video_now_ns(void) {
    struct timespec ts;
    EXPECT(clock_gettime(CLOCK_MONOTONIC, &ts) == 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------- the output */

void video_collector_init(struct video_collector *c, const struct video_options *opt,
                          const struct video_format *fmt) {
    memset(c, 0, sizeof *c);
    c->opt = opt;
    c->fmt = fmt;
    c->seen = calloc(fmt->frames > 0 ? fmt->frames : 1, 1);
    c->frame = malloc(video_frame_bytes(fmt));
    c->edge = malloc(video_frame_bytes(fmt));
    EXPECT(c->seen && c->frame && c->edge, "out of memory");
}

int video_collect(struct video_collector *c, uint32_t task, const struct video_result *res,
                  const uint8_t *edge) {
    uint64_t now = video_now_ns();
    const struct video_format *fmt = c->fmt;
    uint32_t id = (uint32_t)res->frame;
    EXPECT(res->frame < fmt->frames, "output: frame %llu from task %u: there are %u frames",
           (unsigned long long)res->frame, task, fmt->frames);
    EXPECT(!c->seen[id], "output: frame %u came out twice", id);
    EXPECT(res->nlines <= VIDEO_MAX_LINES, "output: frame %u has %u lines", id, res->nlines);
    EXPECT(c->nseen == 0 || res->start_ns == c->start_ns,
           "output: frame %u carries another start stamp than the frames before it", id);
    c->start_ns = res->start_ns;
    c->seen[id] = 1;
    c->nseen++;
    if (c->nseen == fmt->frames) {
        c->end_ns = now;
    }
    printf("output: got frame %u from task %u\n", id, task);
    if (c->opt->input == NULL && c->opt->check) {
        /* Synthetic frames can be checked: the same computation here, and
         * the line drawn must be the strongest one found. */
        struct video_line lines[VIDEO_MAX_LINES];
        synthetic(fmt, id, c->frame);
        uint32_t n = video_process_frame(fmt, c->frame, c->edge, lines);
        EXPECT(n == res->nlines && memcmp(lines, res->lines, n * sizeof *lines) == 0 &&
                   memcmp(edge, c->edge, video_frame_bytes(fmt)) == 0,
               "output: frame %u came out wrong", id);
        c->right++;
        c->found += (uint32_t)video_drawn_line_found(fmt, "output", id, res->lines, res->nlines);
    }
    if (c->opt->output != NULL) {
        video_write_result(c->opt, fmt, id, edge, res->lines, res->nlines);
    }
    return c->nseen == fmt->frames;
}

void video_collector_finish(struct video_collector *c) {
    const struct video_format *fmt = c->fmt;
    EXPECT(c->nseen == fmt->frames, "output: %u of %u frames came out", c->nseen, fmt->frames);
    if (c->opt->input == NULL && c->opt->check) {
        printf("output: %u frames, each exactly once, %u right; the drawn line found in %u of %u\n",
               c->nseen, c->right, c->found, fmt->frames);
    } else {
        printf("output: %u frames, each exactly once\n", c->nseen);
    }
    double seconds = (double)(c->end_ns - c->start_ns) / 1e9;
    printf("output: %u frames in %.3f s: %.1f frames/s\n", c->nseen, seconds,
           seconds > 0 ? c->nseen / seconds : 0.0);
    free(c->seen);
    free(c->frame);
    free(c->edge);
    c->seen = c->frame = c->edge = NULL;
}
