/* Error checks for the examples: a SAT call that fails prints what failed
 * and SAT's message, then ends the process. A role function returns void
 * (Figure 10), so exiting is how a role reports failure; satrun then stops
 * the other processes and exits non-zero. */
#ifndef EXAMPLES_CHECK_H
#define EXAMPLES_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <sat.h>

/* EXPECT(cond, ...): a condition of the program itself. */
#include "expect.h"

/* A call returning a status. */
#define CHECK(call)                                                              \
    do {                                                                         \
        int check_status_ = (call);                                              \
        if (check_status_ != SAT_OK) {                                           \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__,    \
                    #call, sat_status_string(check_status_), sat_last_error());  \
            exit(EXIT_FAILURE);                                                  \
        }                                                                        \
    } while (0)

/* A call returning a pointer, NULL on error: evaluates to the pointer. */
#define CHECK_PTR(call) ((sat_chunk_t *)check_ptr_((call), #call, __FILE__, __LINE__))

static inline void *check_ptr_(void *p, const char *what, const char *file, int line) {
    if (p == NULL) {
        fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, sat_last_error());
        exit(EXIT_FAILURE);
    }
    return p;
}

#endif
