/* Minimal BMP (24-bit, uncompressed) and PGM (P5, 8-bit) files. See image.h. */
#include "image.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Images larger than this are refused: the examples move whole frames. */
#define MAX_SIDE 16384u
#define MAX_BYTES (256u << 20)

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err != NULL && errlen > 0) {
        vsnprintf(err, errlen, fmt, ap);
    }
    va_end(ap);
    return -1;
}

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The whole file in a malloc'd buffer. */
static uint8_t *slurp(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fail(err, errlen, "%s: cannot open it", path);
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            size_t ncap = cap == 0 ? 65536 : cap * 2;
            if (ncap > MAX_BYTES + 65536u) {
                fail(err, errlen, "%s: larger than %u bytes", path, MAX_BYTES);
                break;
            }
            uint8_t *nbuf = realloc(buf, ncap);
            if (nbuf == NULL) {
                fail(err, errlen, "%s: out of memory", path);
                break;
            }
            buf = nbuf;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                fail(err, errlen, "%s: read error", path);
                break;
            }
            fclose(f);
            *len = n;
            return buf;
        }
    }
    fclose(f);
    free(buf);
    return NULL;
}

size_t image_bytes(const struct image *img) {
    return (size_t)img->width * img->height * img->channels;
}

void image_free(struct image *img) {
    free(img->pixels);
    img->pixels = NULL;
}

uint32_t image_checksum(const uint8_t *bytes, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h = (h ^ bytes[i]) * 16777619u;
    }
    return h;
}

int bmp_read(const char *path, struct image *img, char *err, size_t errlen) {
    size_t len = 0;
    uint8_t *f = slurp(path, &len, err, errlen);
    if (f == NULL) {
        return -1;
    }
    int rc = -1;
    if (len < 54 || f[0] != 'B' || f[1] != 'M') {
        fail(err, errlen, "%s: not a BMP file", path);
        goto out;
    }
    uint32_t offset = le32(f + 10), header = le32(f + 14);
    if (header < 40) {
        fail(err, errlen, "%s: an OS/2 BMP header (%u bytes); only Windows BMP is read", path,
             header);
        goto out;
    }
    int32_t w = (int32_t)le32(f + 18), h = (int32_t)le32(f + 22);
    uint32_t planes = le16(f + 26), bpp = le16(f + 28), compression = le32(f + 30);
    if (planes != 1 || bpp != 24 || compression != 0) {
        fail(err, errlen, "%s: %u bits per pixel, compression %u; only 24-bit uncompressed BMP is read",
             path, bpp, compression);
        goto out;
    }
    int top_down = h < 0;
    uint32_t width = w > 0 ? (uint32_t)w : 0;
    uint32_t height = h < 0 ? (uint32_t)(-(int64_t)h) : (uint32_t)h;
    if (width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE ||
        (uint64_t)width * height * 3 > MAX_BYTES) {
        fail(err, errlen, "%s: unsupported size %dx%d", path, w, h);
        goto out;
    }
    size_t stride = ((size_t)width * 3 + 3) & ~(size_t)3;
    if (offset < 54 || offset > len || (len - offset) / stride < height) {
        fail(err, errlen, "%s: truncated pixel data", path);
        goto out;
    }
    img->width = width;
    img->height = height;
    img->channels = 3;
    img->pixels = malloc(image_bytes(img));
    if (img->pixels == NULL) {
        fail(err, errlen, "%s: out of memory", path);
        goto out;
    }
    for (uint32_t y = 0; y < height; y++) {
        uint32_t row = top_down ? y : height - 1 - y;
        memcpy(img->pixels + (size_t)y * width * 3, f + offset + row * stride, (size_t)width * 3);
    }
    rc = 0;
out:
    free(f);
    return rc;
}

int bmp_write(const char *path, const struct image *img, char *err, size_t errlen) {
    if (img->channels != 1 && img->channels != 3) {
        return fail(err, errlen, "%s: %u channels; BMP takes 1 (gray) or 3", path, img->channels);
    }
    size_t stride = ((size_t)img->width * 3 + 3) & ~(size_t)3;
    size_t data = stride * img->height;
    uint8_t header[54] = {0};
    header[0] = 'B';
    header[1] = 'M';
    put32(header + 2, (uint32_t)(54 + data));
    put32(header + 10, 54);
    put32(header + 14, 40);
    put32(header + 18, img->width);
    put32(header + 22, img->height); /* positive: rows bottom first */
    put16(header + 26, 1);
    put16(header + 28, 24);
    put32(header + 34, (uint32_t)data);
    put32(header + 38, 2835); /* 72 dpi */
    put32(header + 42, 2835);
    uint8_t *row = calloc(1, stride);
    if (row == NULL) {
        return fail(err, errlen, "%s: out of memory", path);
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        free(row);
        return fail(err, errlen, "%s: cannot create it", path);
    }
    int ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    for (uint32_t y = 0; ok && y < img->height; y++) {
        const uint8_t *src = img->pixels + (size_t)(img->height - 1 - y) * img->width * img->channels;
        if (img->channels == 3) {
            memcpy(row, src, (size_t)img->width * 3);
        } else {
            for (uint32_t x = 0; x < img->width; x++) {
                row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = src[x];
            }
        }
        ok = fwrite(row, 1, stride, f) == stride;
    }
    free(row);
    if (fclose(f) != 0 || !ok) {
        return fail(err, errlen, "%s: write error", path);
    }
    return 0;
}

/* The next PGM header number, skipping white space and comments. */
static int pgm_number(const uint8_t *f, size_t len, size_t *at, uint32_t *value) {
    size_t i = *at;
    for (;;) {
        while (i < len && (f[i] == ' ' || f[i] == '\t' || f[i] == '\r' || f[i] == '\n')) {
            i++;
        }
        if (i < len && f[i] == '#') {
            while (i < len && f[i] != '\n') {
                i++;
            }
            continue;
        }
        break;
    }
    if (i >= len || f[i] < '0' || f[i] > '9') {
        return -1;
    }
    uint32_t v = 0;
    while (i < len && f[i] >= '0' && f[i] <= '9') {
        if (v > 100000000u) {
            return -1;
        }
        v = v * 10 + (uint32_t)(f[i] - '0');
        i++;
    }
    *at = i;
    *value = v;
    return 0;
}

int pgm_read(const char *path, struct image *img, char *err, size_t errlen) {
    size_t len = 0;
    uint8_t *f = slurp(path, &len, err, errlen);
    if (f == NULL) {
        return -1;
    }
    int rc = -1;
    size_t at = 2;
    uint32_t width = 0, height = 0, maxval = 0;
    if (len < 2 || f[0] != 'P' || f[1] != '5') {
        fail(err, errlen, "%s: not a binary PGM (P5) file", path);
        goto out;
    }
    if (pgm_number(f, len, &at, &width) != 0 || pgm_number(f, len, &at, &height) != 0 ||
        pgm_number(f, len, &at, &maxval) != 0 || at >= len) {
        fail(err, errlen, "%s: malformed PGM header", path);
        goto out;
    }
    at++; /* the single white space after maxval */
    if (maxval == 0 || maxval > 255) {
        fail(err, errlen, "%s: maxval %u; only 8-bit PGM is read", path, maxval);
        goto out;
    }
    if (width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE) {
        fail(err, errlen, "%s: unsupported size %ux%u", path, width, height);
        goto out;
    }
    if ((len - at) / width < height) {
        fail(err, errlen, "%s: truncated pixel data", path);
        goto out;
    }
    img->width = width;
    img->height = height;
    img->channels = 1;
    img->pixels = malloc(image_bytes(img));
    if (img->pixels == NULL) {
        fail(err, errlen, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < image_bytes(img); i++) {
        img->pixels[i] = (uint8_t)((uint32_t)f[at + i] * 255u / maxval);
    }
    rc = 0;
out:
    free(f);
    return rc;
}

int image_to_gray(const struct image *src, struct image *gray) {
    gray->width = src->width;
    gray->height = src->height;
    gray->channels = 1;
    gray->pixels = malloc((size_t)src->width * src->height);
    if (gray->pixels == NULL) {
        return -1;
    }
    size_t n = (size_t)src->width * src->height;
    for (size_t i = 0; i < n; i++) {
        if (src->channels == 1) {
            gray->pixels[i] = src->pixels[i];
        } else {
            const uint8_t *p = src->pixels + i * src->channels; /* B, G, R */
            gray->pixels[i] = (uint8_t)((29u * p[0] + 150u * p[1] + 77u * p[2] + 128u) >> 8);
        }
    }
    return 0;
}

int pgm_write(const char *path, const struct image *img, char *err, size_t errlen) {
    struct image gray;
    if (image_to_gray(img, &gray) != 0) {
        return fail(err, errlen, "%s: out of memory", path);
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        image_free(&gray);
        return fail(err, errlen, "%s: cannot create it", path);
    }
    int ok = fprintf(f, "P5\n%u %u\n255\n", gray.width, gray.height) > 0 &&
             fwrite(gray.pixels, 1, image_bytes(&gray), f) == image_bytes(&gray);
    image_free(&gray);
    if (fclose(f) != 0 || !ok) {
        return fail(err, errlen, "%s: write error", path);
    }
    return 0;
}

int image_read(const char *path, struct image *img, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return fail(err, errlen, "%s: cannot open it", path);
    }
    int c0 = fgetc(f), c1 = fgetc(f);
    fclose(f);
    if (c0 == 'B' && c1 == 'M') {
        return bmp_read(path, img, err, errlen);
    }
    if (c0 == 'P' && c1 == '5') {
        return pgm_read(path, img, err, errlen);
    }
    return fail(err, errlen, "%s: neither a BMP nor a binary PGM file", path);
}

int image_write(const char *path, const struct image *img, char *err, size_t errlen) {
    size_t n = strlen(path);
    if (n >= 4 && strcmp(path + n - 4, ".pgm") == 0) {
        return pgm_write(path, img, err, errlen);
    }
    return bmp_write(path, img, err, errlen);
}
