/* EXPECT, the examples' check of a condition of the program itself: if it
 * does not hold, prints where and why and ends the process. No SAT in it,
 * so that code shared with programs not using SAT (video.c, the benchmark's
 * MPI and ZeroMQ versions of the video pipeline) can use it too. */
#ifndef EXAMPLES_EXPECT_H
#define EXAMPLES_EXPECT_H

#include <stdio.h>
#include <stdlib.h>

#define EXPECT(cond, ...)                                                        \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                      \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            exit(EXIT_FAILURE);                                                  \
        }                                                                        \
    } while (0)

#endif
