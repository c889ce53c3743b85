/* Minimal image files for the examples, no library: 24-bit uncompressed
 * BMP (read and write) and binary 8-bit PGM (P5, read and write). */
#ifndef EXAMPLES_IMAGE_H
#define EXAMPLES_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* An image in memory: `channels` bytes per pixel (3: B, G, R as in BMP
 * files; 1: gray), rows top first, no padding. */
struct image {
    uint32_t width;
    uint32_t height;
    uint32_t channels;
    uint8_t *pixels;
};

/* Each returns 0 on success, -1 with a message in `err` (of `errlen`
 * bytes) otherwise. A read allocates `img->pixels` (free with image_free). */
int bmp_read(const char *path, struct image *img, char *err, size_t errlen);
/* Writes a 24-bit BMP; a gray image is written as gray BGR. */
int bmp_write(const char *path, const struct image *img, char *err, size_t errlen);
int pgm_read(const char *path, struct image *img, char *err, size_t errlen);
/* Writes a P5 PGM; a BGR image is written as its luma. */
int pgm_write(const char *path, const struct image *img, char *err, size_t errlen);
/* Reads a BMP or a PGM, whichever the file's first bytes say. */
int image_read(const char *path, struct image *img, char *err, size_t errlen);
/* Writes a PGM when `path` ends in .pgm, else a BMP. */
int image_write(const char *path, const struct image *img, char *err, size_t errlen);
/* The luma of a BGR image (a gray image is copied); 0 or -1 (no memory). */
int image_to_gray(const struct image *src, struct image *gray);
size_t image_bytes(const struct image *img);
void image_free(struct image *img);
/* A checksum of the pixels (FNV-1a, 32 bits), to compare images in logs. */
uint32_t image_checksum(const uint8_t *bytes, size_t len);

#endif
