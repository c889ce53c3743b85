/* prodcons: Figures 10 to 12 of the SAT report. The producer (role 1) puts
 * an image into the S-DSM; the consumer (role 2) reads it back and writes
 * it out.
 *
 *   satrun -n 3 -- ./prodcons --input in.bmp --output out.bmp --topology prodcons/1server.xml
 *
 * Without --input the producer draws a --width x --height test card
 * (default 256x256). The image is a chain of chunks from IMAGE_ID on; a
 * one-chunk header (HEADER_ID) tells the consumer its size, its chunk count
 * and a checksum. The consumer waits on a rendezvous the producer wakes
 * once both are written. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sat_compat.h>

#include "../common/check.h"
#include "../common/image.h"

#define HEADER_ID 1
#define IMAGE_ID 16
#define RDV_WRITTEN 1

struct header {
    uint32_t width;
    uint32_t height;
    uint64_t nchunks;
    uint32_t checksum;
    uint32_t reserved;
};

static const char *input_path;
static const char *output_path;
static uint32_t card_width = 256, card_height = 256;

/* A test card: colour ramps and a diagonal, so a flipped or shifted row
 * changes the checksum. */
static void test_card(struct image *img) {
    img->width = card_width;
    img->height = card_height;
    img->channels = 3;
    img->pixels = malloc(image_bytes(img));
    EXPECT(img->pixels != NULL, "out of memory");
    for (uint32_t y = 0; y < img->height; y++) {
        for (uint32_t x = 0; x < img->width; x++) {
            uint8_t *p = img->pixels + ((size_t)y * img->width + x) * 3;
            p[0] = (uint8_t)(x * 255 / img->width);
            p[1] = (uint8_t)(y * 255 / img->height);
            p[2] = (uint8_t)(x == y ? 255 : (x ^ y) & 0x3f);
        }
    }
}

static void prod(_SAT_Bootstrap_t *bootstrap) {
    struct image img;
    char err[256];
    if (input_path != NULL) {
        EXPECT(image_read(input_path, &img, err, sizeof err) == 0, "producer: %s", err);
        if (img.channels != 3) { /* a PGM: the consumer gets BGR either way */
            struct image bgr = {img.width, img.height, 3, malloc(image_bytes(&img) * 3)};
            EXPECT(bgr.pixels != NULL, "out of memory");
            for (size_t i = 0; i < image_bytes(&img); i++) {
                memset(bgr.pixels + 3 * i, img.pixels[i], 3);
            }
            image_free(&img);
            img = bgr;
        }
    } else {
        test_card(&img);
    }
    size_t size = image_bytes(&img);

    Chunk_t *header = CHECK_PTR(MALLOC(NULL, HEADER_ID, sizeof(struct header)));
    Chunk_t *chunk = CHECK_PTR(MALLOC(NULL, IMAGE_ID, size));

    CHECK(WRITE(chunk));
    memcpy(chunk->data, img.pixels, size);
    CHECK(RELEASE(chunk));

    struct header h = {img.width, img.height, chunk->nchunks, image_checksum(img.pixels, size), 0};
    CHECK(WRITE(header));
    memcpy(header->data, &h, sizeof h);
    CHECK(RELEASE(header));

    CHECK(wakeup(RDV_WRITTEN));
    printf("producer (rank %u): wrote a %ux%u image, %zu bytes in %zu chunks from chunk %d, "
           "checksum %08x\n",
           bootstrap->rank, h.width, h.height, size, chunk->nchunks, IMAGE_ID, h.checksum);
    image_free(&img);
}

static void cons(_SAT_Bootstrap_t *bootstrap) {
    CHECK(rendezvous(RDV_WRITTEN));

    Chunk_t *header = CHECK_PTR(LOOKUP(NULL, HEADER_ID, 1));
    struct header h;
    CHECK(READ(header));
    memcpy(&h, header->data, sizeof h);
    CHECK(RELEASE(header));
    EXPECT(h.width > 0 && h.height > 0 && h.nchunks > 0, "consumer: empty header");

    Chunk_t *chunk = CHECK_PTR(LOOKUP(NULL, IMAGE_ID, (uint32_t)h.nchunks));
    size_t size = (size_t)h.width * h.height * 3;
    EXPECT(chunk->size == size, "consumer: the chain holds %zu bytes, the header says %zu",
           chunk->size, size);
    CHECK(READ(chunk));
    struct image img = {h.width, h.height, 3, malloc(size)};
    EXPECT(img.pixels != NULL, "out of memory");
    memcpy(img.pixels, chunk->data, size);
    CHECK(RELEASE(chunk));

    uint32_t sum = image_checksum(img.pixels, size);
    EXPECT(sum == h.checksum, "consumer: checksum %08x, the producer's was %08x", sum,
           h.checksum);
    if (output_path != NULL) {
        char err[256];
        EXPECT(image_write(output_path, &img, err, sizeof err) == 0, "consumer: %s", err);
    }
    printf("consumer (rank %u): read a %ux%u image, %zu bytes in %zu chunks, checksum %08x "
           "(matches)%s%s\n",
           bootstrap->rank, h.width, h.height, size, chunk->nchunks, sum,
           output_path != NULL ? ", wrote " : "", output_path != NULL ? output_path : "");
    image_free(&img);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach satrun as they are printed */
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--input") == 0) {
            input_path = argv[++i];
        } else if (strcmp(argv[i], "--output") == 0) {
            output_path = argv[++i];
        } else if (strcmp(argv[i], "--width") == 0) {
            card_width = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--height") == 0) {
            card_height = (uint32_t)strtoul(argv[++i], NULL, 10);
        }
    }
    if (card_width == 0 || card_height == 0) {
        fprintf(stderr, "prodcons: --width and --height must be positive\n");
        return 1;
    }

    _SAT_Roles_t roles[3] = {NULL, prod, cons};

    int status = _SAT_BOOTSTRAP(roles, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "prodcons: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    return 0;
}
