/* The headers included twice (and in both orders) compile cleanly, in C99
 * and later, with every warning an error. */
#include <sat.h>
#include <sat.h>
#include <sat_compat.h>
#include <sat_compat.h>
#include <sat.h>

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
