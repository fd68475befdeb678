/* SPDX-License-Identifier: Apache-2.0 */
/* Streamed responses fed from other threads (stream_reply.h). */
#include "engine/stream_reply.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP */
#endif
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/app.h"
#include "base/budget.h"
#include "base/util.h"
#include "engine/http_server.h"
#include "engine/request.h"
#include "obs/log.h"

/* The ring's first size; it doubles up to the capacity as the client falls behind. */
#define FIRST_ALLOC (64u * 1024)

struct rk_outstream {
    pthread_mutex_t mu;
    pthread_cond_t room; /* the reader took bytes, or the response ended (push_wait) */
    int refs;
    char *buf; /* ring of alloc bytes (<= cap), charged to rk_mem_budget */
    size_t cap, alloc, head, len;
    int closed;   /* no more pushes: end once drained */
    int aborted;  /* end with an error at once (rk_stream_abort) */
    int finished; /* the response ended */
    int64_t idle_ms;
    rk_stream_idle_fn idle;
    void *idle_ctx;
    /* the response's side */
    struct rk_app *app;
    struct rk_req *req;  /* valid while the connection is suspended for the stream */
    int client_fd;       /* probed for a hang-up while the reader waits */
    int waiting;         /* the reader suspended the connection: the next push resumes it */
    int64_t quiet_since; /* last data or keep-alive handed to the client */
    rk_stream_gone_fn gone;
    void *gone_ctx;
    struct rk_outstream *next_waiting; /* in the waiting list (waiting_mu) */
    int listed;                        /* in the waiting list (waiting_mu) */
    /* in one tick's list of streams taken off the waiting list (that tick's alone: the stream
     * may be listed again, which rewrites next_waiting, before the tick drops its reference) */
    struct rk_outstream *next_dropped;
};

/* Streams whose connection is suspended waiting for data: the watchdog's tick
 * (rk_stream_tick) resumes those whose client left, whose idle keep-alive is
 * due or whose daemon stops, so the reader sees it. Each listed stream holds
 * a reference. Lock order: waiting_mu, then a stream's mu. */
static pthread_mutex_t waiting_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rk_outstream *waiting_head;

struct rk_outstream *rk_stream_new(size_t cap, int64_t idle_ms, rk_stream_idle_fn idle,
                                   void *idle_ctx)
{
    struct rk_outstream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->room, &ca);
    pthread_condattr_destroy(&ca);
    s->refs = 1;
    s->client_fd = -1;
    s->cap = cap;
    s->idle_ms = idle_ms;
    s->idle = idle;
    s->idle_ctx = idle_ctx;
    return s;
}

void rk_stream_ref(struct rk_outstream *s)
{
    pthread_mutex_lock(&s->mu);
    s->refs++;
    pthread_mutex_unlock(&s->mu);
}

void rk_stream_unref(struct rk_outstream *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    int last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last)
        return;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->room);
    rk_budget_give(&rk_mem_budget, (int64_t)s->alloc);
    free(s->buf);
    free(s);
}

/* Make room for need queued bytes (mutex held): grow the ring by doubling, up to the
 * capacity, charging the growth to the memory budget. 0, or -1 when it cannot. */
static int grow(struct rk_outstream *s, size_t need)
{
    if (need <= s->alloc)
        return 0;
    size_t n = s->alloc ? s->alloc : FIRST_ALLOC;
    while (n < need)
        n *= 2;
    if (n > s->cap)
        n = s->cap;
    if (n < need || rk_budget_take(&rk_mem_budget, (int64_t)(n - s->alloc)) != 0)
        return -1;
    char *nb = malloc(n);
    if (!nb) {
        rk_budget_give(&rk_mem_budget, (int64_t)(n - s->alloc));
        return -1;
    }
    /* the queued bytes, unwrapped */
    if (s->len)
        rk_ring_copy(nb, s->buf, s->alloc, s->head, s->len);
    free(s->buf);
    s->buf = nb;
    s->alloc = n;
    s->head = 0;
    return 0;
}

/* Wake the reader (mutex held; released here): a suspended connection is
 * resumed so libmicrohttpd calls the reader again. */
static void wake_reader_unlock(struct rk_outstream *s)
{
    struct rk_req *r = s->waiting ? s->req : NULL;
    s->waiting = 0;
    pthread_mutex_unlock(&s->mu);
    if (r)
        rk_req_resume(r); /* nothing of r is touched after this */
}

int rk_stream_push(struct rk_outstream *s, const void *data, size_t len, size_t keep_free)
{
    pthread_mutex_lock(&s->mu);
    int rc = -1;
    if (!s->closed && !s->finished && len <= s->cap && keep_free <= s->cap - len &&
        s->len <= s->cap - len - keep_free && grow(s, s->len + len) == 0) {
        if (len) {
            const char *p = data;
            size_t tail = (s->head + s->len) % s->alloc;
            size_t first = s->alloc - tail < len ? s->alloc - tail : len;
            memcpy(s->buf + tail, p, first);
            memcpy(s->buf, p + first, len - first);
            s->len += len;
        }
        rc = 0;
        if (len) {
            wake_reader_unlock(s);
            return rc;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int rk_stream_push_wait(struct rk_outstream *s, const void *data, size_t len, int64_t deadline_ms)
{
    const char *p = data;
    pthread_mutex_lock(&s->mu);
    while (len > 0) {
        if (s->closed || s->finished) {
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
        /* at most half the capacity at a time, so a piece always fits a drained queue */
        size_t piece = len < s->cap / 2 ? len : (s->cap / 2 ? s->cap / 2 : 1);
        if (s->len + piece > s->alloc && grow(s, s->len + piece) != 0) {
            if (s->alloc == 0) { /* the budget refuses even the first bytes */
                pthread_mutex_unlock(&s->mu);
                return -3;
            }
            piece = s->alloc - s->len < piece ? s->alloc - s->len : piece;
        } else if (s->len + piece > s->cap) {
            piece = 0;
        }
        if (piece == 0) {
            /* full: wait for the reader (a bounded slice, then look again) */
            int64_t now = rk_now_ms();
            if (deadline_ms > 0 && now >= deadline_ms) {
                pthread_mutex_unlock(&s->mu);
                return -2;
            }
            struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, 200);
            pthread_cond_timedwait(&s->room, &s->mu, &ts);
            continue;
        }
        size_t tail = (s->head + s->len) % s->alloc;
        size_t first = s->alloc - tail < piece ? s->alloc - tail : piece;
        memcpy(s->buf + tail, p, first);
        memcpy(s->buf, p + first, piece - first);
        s->len += piece;
        p += piece;
        len -= piece;
        wake_reader_unlock(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void rk_stream_close(struct rk_outstream *s)
{
    pthread_mutex_lock(&s->mu);
    s->closed = 1;
    wake_reader_unlock(s);
}

void rk_stream_abort(struct rk_outstream *s)
{
    pthread_mutex_lock(&s->mu);
    s->closed = 1;
    s->aborted = 1;
    wake_reader_unlock(s);
}

int rk_stream_finished(struct rk_outstream *s)
{
    pthread_mutex_lock(&s->mu);
    int f = s->finished;
    pthread_mutex_unlock(&s->mu);
    return f;
}

/* 1 when the client hung up (its socket reports RDHUP, HUP or an error). */
static int client_gone(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Put s on the waiting list (once; the list holds a reference). */
static void list_waiting(struct rk_outstream *s)
{
    pthread_mutex_lock(&waiting_mu);
    pthread_mutex_lock(&s->mu);
    if (!s->listed) {
        s->listed = 1;
        s->refs++;
        s->next_waiting = waiting_head;
        waiting_head = s;
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&waiting_mu);
}

/* The MHD content reader, on the event loop: the queued bytes; with none, it
 * suspends the connection and returns 0 (the next push, the close or the
 * watchdog's tick resumes it). It never waits. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct rk_outstream *s = cls;
    for (int round = 0; round < 2; round++) {
        pthread_mutex_lock(&s->mu);
        if (s->aborted) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (s->len > 0) {
            size_t n = s->len < max ? s->len : max;
            rk_ring_copy(out, s->buf, s->alloc, s->head, n);
            s->head = (s->head + n) % s->alloc;
            s->len -= n;
            s->quiet_since = rk_now_ms();
            pthread_cond_broadcast(&s->room);
            pthread_mutex_unlock(&s->mu);
            return (ssize_t)n;
        }
        if (s->closed) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if ((s->app && s->app->stopping) || client_gone(s->client_fd)) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        int64_t now = rk_now_ms();
        if (round == 0 && s->idle && s->idle_ms > 0 && now - s->quiet_since >= s->idle_ms) {
            s->quiet_since = now;
            pthread_mutex_unlock(&s->mu);
            s->idle(s, s->idle_ctx); /* pushes (takes the mutex; nobody waits yet) */
            continue;
        }
        /* Nothing to send: suspend until a push, the close or the tick. */
        s->waiting = 1;
        rk_req_suspend(s->req);
        pthread_mutex_unlock(&s->mu);
        list_waiting(s);
        return 0;
    }
    return 0; /* not reached: the second round sends, ends or suspends */
}

void rk_stream_tick(int64_t now)
{
    struct rk_outstream *drop = NULL;
    pthread_mutex_lock(&waiting_mu);
    struct rk_outstream **pp = &waiting_head;
    while (*pp) {
        struct rk_outstream *s = *pp;
        pthread_mutex_lock(&s->mu);
        int due = s->waiting && ((s->app && s->app->stopping) || client_gone(s->client_fd) ||
                                 (s->idle && s->idle_ms > 0 && now - s->quiet_since >= s->idle_ms));
        if (!s->waiting || due) { /* off the list: woken by a push, or now */
            *pp = s->next_waiting;
            s->listed = 0;
            s->next_waiting = NULL;
            s->next_dropped = drop;
            drop = s;
        } else {
            pp = &s->next_waiting;
        }
        if (due)
            wake_reader_unlock(s);
        else
            pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&waiting_mu);
    while (drop) {
        struct rk_outstream *s = drop;
        drop = s->next_dropped;
        rk_stream_unref(s);
    }
}

/* The response is gone: tell the handler, drop the response's reference. */
static void stream_free(void *cls)
{
    struct rk_outstream *s = cls;
    pthread_mutex_lock(&s->mu);
    s->finished = 1;
    pthread_cond_broadcast(&s->room);
    pthread_mutex_unlock(&s->mu);
    if (s->gone)
        s->gone(s->gone_ctx);
    rk_stream_unref(s);
}

void rk_req_reply_stream(struct rk_req *r, unsigned status, const char *content_type,
                         struct rk_outstream *s, rk_stream_gone_fn gone, void *ctx)
{
    s->app = r->app;
    s->req = r;
    s->quiet_since = rk_now_ms();
    s->client_fd = rk_req_client_fd(r);
    s->gone = gone;
    s->gone_ctx = ctx;
    rk_stream_ref(s);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024,
                                                                  stream_reader, s, stream_free);
    if (!resp) {
        stream_free(s);
        rk_err("request %s: out of memory building a streamed response", r->request_id);
        return;
    }
    MHD_add_response_header(resp, "Content-Type", content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    rk_req_reply_mhd(r, status, resp);
}
