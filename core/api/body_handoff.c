/* SPDX-License-Identifier: Apache-2.0 */
/* The hand-off between a streaming route and its consumer job (body_handoff.h). */
#include "api/body_handoff.h"

#include <microhttpd.h>

#include "base/bytepipe.h"
#include "engine/http_server.h"

void rk_handoff_init(struct rk_handoff *h, struct rk_req *r)
{
    pthread_mutex_init(&h->mu, NULL);
    h->r = r;
    h->refs = 1;
    h->consumer_done = 0;
    h->reply_waiting = 0;
}

void rk_handoff_ref(struct rk_handoff *h)
{
    pthread_mutex_lock(&h->mu);
    h->refs++;
    pthread_mutex_unlock(&h->mu);
}

int rk_handoff_unref(struct rk_handoff *h)
{
    pthread_mutex_lock(&h->mu);
    int last = --h->refs == 0;
    pthread_mutex_unlock(&h->mu);
    if (last)
        pthread_mutex_destroy(&h->mu);
    return last;
}

void rk_handoff_request_ended(struct rk_handoff *h, int *closing, struct MHD_PostProcessor **pp,
                              struct rk_bytepipe *pipe)
{
    *closing = 1;
    if (*pp)
        MHD_destroy_post_processor(*pp);
    *pp = NULL;
    pthread_mutex_lock(&h->mu);
    h->r = NULL;
    pthread_mutex_unlock(&h->mu);
    if (pipe)
        rk_bytepipe_abort(pipe);
}

struct rk_req *rk_handoff_consumer_done(struct rk_handoff *h)
{
    pthread_mutex_lock(&h->mu);
    h->consumer_done = 1;
    struct rk_req *answer = h->reply_waiting ? h->r : NULL;
    pthread_mutex_unlock(&h->mu);
    return answer;
}

int rk_handoff_handler_waits(struct rk_handoff *h, struct rk_req *r)
{
    pthread_mutex_lock(&h->mu);
    int waits = !h->consumer_done;
    if (waits) {
        /* the deferral is taken before the consumer can see the flag */
        rk_req_defer(r);
        h->reply_waiting = 1;
    }
    pthread_mutex_unlock(&h->mu);
    return waits;
}

size_t rk_handoff_feed_limit(struct rk_bytepipe *p, size_t len, size_t slack)
{
    size_t room = rk_bytepipe_room(p);
    size_t take = room > slack ? room - slack : 0;
    return take < len ? take : len;
}

/* The pipe has room again (the consumer's thread): hand the kept bytes again. */
static void resume_body(void *ctx)
{
    rk_req_resume(ctx);
}

void rk_handoff_hold_body(struct rk_req *r, struct rk_bytepipe *p, size_t len, size_t taken,
                          size_t want)
{
    r->body_kept = len - taken;
    rk_req_suspend(r);
    if (rk_bytepipe_notify_room(p, want, resume_body, r))
        rk_req_resume(r);
}
