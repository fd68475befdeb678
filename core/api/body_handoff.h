/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hand-off between a streaming route and the consumer job that writes its
 * body upstream through a bounded byte pipe (POST /upload, the E2B envd POST
 * /files): the request and the consumer both hold the route's state and the
 * last to leave frees it; whichever of the route's handler and the consumer
 * comes second answers the request; the event loop feeds the pipe only while
 * it has room and suspends the connection until the consumer drained it.
 */
#ifndef RK_BODY_HANDOFF_H
#define RK_BODY_HANDOFF_H

#include <pthread.h>
#include <stddef.h>

struct rk_req;
struct rk_bytepipe;
struct MHD_PostProcessor;

/** Embedded in a route's state. */
struct rk_handoff {
    pthread_mutex_t mu; /* guards all of it */
    struct rk_req *r;   /* NULL once the request ended */
    int refs;           /* the request, the consumer job */
    int consumer_done;
    int reply_waiting; /* the handler deferred the answer to the consumer */
};

/** Held by the request (one reference). */
void rk_handoff_init(struct rk_handoff *h, struct rk_req *r);
/** One more reference (the consumer, before it is queued). */
void rk_handoff_ref(struct rk_handoff *h);
/** Drop a reference: 1 when it was the last (the mutex is destroyed; the
 *  caller frees the state), else 0. */
int rk_handoff_unref(struct rk_handoff *h);
/** The request ended (its route_ctx_free; answered, or the client left):
 *  nobody answers it any more. Sets *closing (the parser's callbacks ignore
 *  what the flush still reports), destroys the multipart parser *pp (may be
 *  NULL) and aborts the pipe (may be NULL) so the consumer stops reading. */
void rk_handoff_request_ended(struct rk_handoff *h, int *closing, struct MHD_PostProcessor **pp,
                              struct rk_bytepipe *pipe);
/** The consumer is done: the request it must answer now and then
 *  rk_req_finish (the handler already waits), or NULL. */
struct rk_req *rk_handoff_consumer_done(struct rk_handoff *h);
/** From the route's handler: 1 when the consumer still runs (the request is
 *  deferred; the consumer answers), 0 when it is done (answer now). */
int rk_handoff_handler_waits(struct rk_handoff *h, struct rk_req *r);

/** In a body callback: how many of len body bytes may be fed now, leaving
 *  slack bytes of the pipe free (what feeding them may add around them). */
size_t rk_handoff_feed_limit(struct rk_bytepipe *p, size_t len, size_t slack);
/** In a body callback that fed only taken of len bytes: keep the rest
 *  (r->body_kept), suspend the connection and resume it once want bytes of
 *  the pipe are free (or it was aborted). */
void rk_handoff_hold_body(struct rk_req *r, struct rk_bytepipe *p, size_t len, size_t taken,
                          size_t want);

#endif /* RK_BODY_HANDOFF_H */
