/* The headers included twice (and in both orders) compile cleanly, in C99
 * and later, with every warning an error. */
#include <sat.h>
#include <sat.h>
#include <sat_compat.h>
#include <sat_compat.h>
#include <sat.h>

/* The paper's lowercase names are functions, not macros: headers included
 * after sat_compat.h that call something `barrier(` still compile. */
#if defined(__cplusplus) && __cplusplus >= 202002L && __has_include(<barrier>)
#include <barrier>
#endif
#if defined(__has_include)
#if __has_include(<rdma/fi_collective.h>)
#include <rdma/fi_collective.h>
#endif
#endif

#include <stdio.h>
#include <string.h>

/* Both names of each type are usable. */
static void role(_SAT_Bootstrap_t *b) { (void)b; }
static void handler(Chunk_t *c, void *p) {
    (void)c;
    (void)p;
}

int main(void) {
    _SAT_Roles_t roles[2] = {NULL, role};
    sat_role_fn same = roles[1];
    sat_chunk_handler h = handler;
    sat_status s = SAT_OK;
    (void)same;
    (void)h;
    printf("PASS header_twice: SAT %s, status %d is \"%s\"\n", sat_version(), (int)s,
           sat_status_string(s));
    return strcmp(sat_status_string(SAT_ERR_INTERNAL), "success") == 0;
}
