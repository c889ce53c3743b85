/* pubsub: Figure 9 of the SAT report. A publisher writes a chunk; a
 * subscriber's handler runs on each write release of it.
 *
 *   satrun -n 3 --topology pubsub/topology.xml -- ./pubsub
 *
 * The subscriber looks the chunk up, subscribes, and wakes the publisher,
 * then returns: the bootstrap runs its handler from then on. The handler
 * reads the publication, writes its answer, unsubscribes (so the
 * notification of its own release is discarded) and wakes the publisher
 * again, which reads the answer. Then no subscription is left and the
 * run ends by itself. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sat_compat.h>

#include "../common/check.h"

#define CHUNK_ID 40
#define RDV_ID 2
#define RDV_ANSWERED 3
#define SIZE 1024

/* The chunk's content: a counter and the text of who wrote it last. */
struct message {
    uint64_t counter;
    char text[SIZE - sizeof(uint64_t)];
};

static void foo(Chunk_t *chunk, const char *who) {
    struct message *m = (struct message *)chunk->data;
    m->counter++;
    snprintf(m->text, sizeof m->text, "%s wrote %llu", who, (unsigned long long)m->counter);
}

static void main_publisher(_SAT_Bootstrap_t *bootstrap) {
    (void)bootstrap;
    Chunk_t *mychunk = CHECK_PTR(MALLOC(NULL, CHUNK_ID, SIZE));
    /* wait for the subscriber to subscribe to the chunk */
    CHECK(rendezvous(RDV_ID));
    CHECK(WRITE(mychunk));
    memset(mychunk->data, 0, SIZE); /* WRITE gives no data: set all of it */
    foo(mychunk, "publisher");
    CHECK(RELEASE(mychunk));
    printf("publisher: published 1\n");

    /* not in Figure 9: see that the handler ran */
    CHECK(rendezvous(RDV_ANSWERED));
    CHECK(READ(mychunk));
    struct message m;
    memcpy(&m, mychunk->data, sizeof m);
    CHECK(RELEASE(mychunk));
    printf("publisher: read %llu: \"%s\"\n", (unsigned long long)m.counter, m.text);
    EXPECT(m.counter == 2, "publisher: the handler's answer is missing");
}

/* What the handler is given: its own count of calls. */
struct params {
    int calls;
};

static struct params params;

static void subscriber_handler(Chunk_t *chunk, void *p) {
    struct params *params = p;
    params->calls++;
    /* READWRITE rather than Figure 9's WRITE: the handler reads the
     * publication, and WRITE does not fetch the data. */
    CHECK(READWRITE(chunk));
    struct message *m = (struct message *)chunk->data;
    printf("handler: call %d, read %llu: \"%s\"\n", params->calls,
           (unsigned long long)m->counter, m->text);
    EXPECT(m->counter == 1, "handler: read counter %llu, the publisher wrote 1",
           (unsigned long long)m->counter);
    foo(chunk, "subscriber");
    CHECK(RELEASE(chunk));
    /* unsubscribe to the chunk, this handler won't be called again */
    CHECK(UNSUBSCRIBE(chunk));
    /* afterwards, all publish notifications are discarded, including the
     * RELEASE in this function */
    CHECK(wakeup(RDV_ANSWERED));
}

static void main_subscriber(_SAT_Bootstrap_t *bootstrap) {
    (void)bootstrap;
    Chunk_t *mychunk = CHECK_PTR(LOOKUP(NULL, CHUNK_ID, 1));
    /* subscribe to the chunk with given user handler */
    CHECK(SUBSCRIBE(mychunk, subscriber_handler, &params));
    /* we are ready for publish notifications */
    CHECK(wakeup(RDV_ID));
    printf("subscriber: subscribed\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach satrun as they are printed */
    _SAT_Roles_t roles[3] = {NULL, main_publisher, main_subscriber};
    int status = _SAT_BOOTSTRAP(roles, NULL, argc, argv);
    if (status != SAT_OK) {
        fprintf(stderr, "pubsub: %s: %s\n", sat_status_string(status), sat_last_error());
        return 1;
    }
    /* The bootstrap returned: the role, then its handlers, have ended. */
    if (params.calls > 0) {
        printf("subscriber: the handler ran %d time(s)\n", params.calls);
    }
    return 0;
}
