/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relay's transfers on the event loop's own HTTP/1.1 client (lib/rkh1.h):
 * a relayed request without a body to an endpoint given as a plain-HTTP IP
 * literal (what the operators resolve sandboxes to) is carried by the client
 * of the event loop that serves its connection, not by libcurl. Per request
 * that is one send and one or two reads on a kept connection, where libcurl
 * adds its transfer set-up, a poll of the kept connection before reuse and
 * its own readiness polls. Requests with a body (streamed through the request
 * pipe), https and host names stay with libcurl (relay_http_loop.c).
 *
 * The request sent is the one libcurl would send: the request line with the
 * method and the path as given, Host from the URL, the header lines relay_http.c
 * built (client headers filtered, the endpoint's, X-Request-ID; no Accept or
 * Expect of its own), and Content-Length: 0 for an empty body. The answer takes the same way as one
 * from libcurl: its head into px->h (rk_px_head_complete), its body into the
 * response pipe, whose room bounds every read (no room: the socket's reading
 * pauses until the content reader drained the pipe), the end through
 * rk_px_finish. Every callback runs on the loop's thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/bytepipe.h"
#include "base/util.h"
#include "engine/request.h"
#include "relay/relay_common.h"
#include "rkh1.h"

#include "relay/relay_http_internal.h"

/** Pause reading when the response pipe has less room than this (one read's worth), and read
 *  again once the client took half the pipe (not at every block it takes: a pause and a
 *  resume cost two epoll_ctl and a pass of the client). */
#define H1_MIN_ROOM (16 * 1024)
#define H1_RESUME_ROOM (PX_PIPE_BYTES / 2)

static struct px_http *px_of(void *ctx)
{
    return ctx;
}

/* One header of the final answer: kept for rk_px_answer (bounded by the head's size limit;
 * one that cannot be kept makes the answer a 500, never a head with a header missing). */
static void h1_header(void *ctx, const char *name, size_t nl, const char *value, size_t vl)
{
    struct px_http *px = px_of(ctx);
    if (rk_px_head_add(px, name, nl, value, vl) != 0)
        px->head_oom = 1;
}

static void h1_status(void *ctx, long status)
{
    struct px_http *px = px_of(ctx);
    rk_px_touch(px);
    pthread_mutex_lock(&px->mu);
    px->status = status;
    pthread_mutex_unlock(&px->mu);
    rk_px_head_complete(px);
}

static int h1_body(void *ctx, const char *p, size_t n)
{
    struct px_http *px = px_of(ctx);
    rk_px_touch(px);
    pthread_mutex_lock(&px->mu);
    int stop = px->cancel;
    pthread_mutex_unlock(&px->mu);
    if (stop)
        return 1;
    /* A small answer of known length (rk_px_head_complete decided it on this thread, before
     * the first byte of the body) goes into its own buffer, handed whole to the reply. */
    if (px->whole && !px->whole_buf && px->whole_got == 0 &&
        !(px->whole_buf = malloc(px->whole_len + 1)))
        return 1;
    if (px->whole_buf) {
        if (n > px->whole_len - px->whole_got)
            return 1; /* more than its Content-Length */
        memcpy(px->whole_buf + px->whole_got, p, n);
        px->whole_got += n;
        return 0;
    }
    /* Never more than room said (rkh1.h), so this never waits. */
    return rk_bytepipe_write(px->resp, p, n) != 0;
}

/* The content reader made room (any thread): read the socket again. */
static void h1_unpause_cb(void *ctx)
{
    struct px_http *px = ctx;
    rku_h1_resume(px->h1, &px->hx);
}

static size_t h1_room(void *ctx)
{
    struct px_http *px = px_of(ctx);
    if (px->paused_recv) { /* resumed: waiting for the client is not upstream inactivity */
        px->paused_recv = 0;
        rk_px_touch(px);
    }
    if (rk_bytepipe_aborted(px->resp))
        return H1_MIN_ROOM; /* the next write fails and ends the exchange */
    size_t room = rk_bytepipe_room(px->resp);
    if (room >= H1_MIN_ROOM)
        return room;
    rk_px_release_whole(px);
    /* The client is slower: pause until the content reader made room. */
    px->paused_recv = 1;
    if (rk_bytepipe_notify_room(px->resp, H1_RESUME_ROOM, h1_unpause_cb, px)) {
        px->paused_recv = 0;
        return rk_bytepipe_room(px->resp);
    }
    return 0;
}

static int h1_should_abort(void *ctx)
{
    return rk_px_should_abort(px_of(ctx), rk_now_ms());
}

/* No deadline of its own: the sweep's abort check (twice a second) applies
 * proxy.timeout_s, which waiting for the client does not count against. */
static int64_t h1_deadline(void *ctx)
{
    (void)ctx;
    return 0;
}

/* The end (loop thread): the result published, the pipe closed, the loop's reference dropped. */
static void h1_done(void *ctx, int code, const char *err)
{
    struct px_http *px = px_of(ctx);
    if (err)
        snprintf(px->errbuf, sizeof px->errbuf, "%s", err);
    rk_px_finish(px, (CURLcode)code, 0);
    rk_bytepipe_close(px->resp);
    rk_px_unref(px);
    rk_relay_leave();
}

static const struct rku_h1_ops h1_ops = {
    .on_header = h1_header,
    .on_status = h1_status,
    .on_body = h1_body,
    .room = h1_room,
    .should_abort = h1_should_abort,
    .deadline = h1_deadline,
    .on_done = h1_done,
};

int rk_http_h1_prepare(struct px_http *px, struct rk_req *r, const struct rk_buf *lines,
                       int empty_body)
{
    struct rku_h1 *h1 = rk_req_h1(r);
    const char *host, *path;
    size_t host_len;
    memset(&px->hx, 0, sizeof px->hx);
    if (!h1 || !rku_h1_target(&px->hx, px->url, &host, &host_len, &path))
        return 0;
    struct rk_buf req = {0};
    size_t path_len = strlen(path), method_len = strlen(r->method);
    int bad = rk_buf_reserve(&req, method_len + 1 + path_len + 17 + host_len + 2 + lines->len +
                                       (empty_body ? 19 : 0) + 2) |
              rk_buf_append(&req, r->method, method_len) | rk_buf_append(&req, " ", 1) |
              rk_buf_append(&req, path, path_len) | rk_buf_append(&req, " HTTP/1.1\r\nHost: ", 17) |
              rk_buf_append(&req, host, host_len) | rk_buf_append(&req, "\r\n", 2) |
              rk_buf_append(&req, lines->data, lines->len);
    if (empty_body)
        bad |= rk_buf_append(&req, "Content-Length: 0\r\n", 19);
    bad |= rk_buf_append(&req, "\r\n", 2);
    if (bad) {
        rk_buf_free(&req);
        return -1;
    }
    px->h1 = h1;
    px->hx.req = req.data; /* the client frees it */
    px->hx.req_len = req.len;
    px->hx.head_only = px->nobody;
    px->hx.head_max = PX_MAX_HEAD_BYTES;
    px->hx.connect_ms = px->connect_ms;
    px->hx.ops = &h1_ops;
    px->hx.ctx = px;
    return 1;
}

int rk_http_h1_submit(struct px_http *px)
{
    if (rku_h1_submit(px->h1, &px->hx) != 0) {
        free(px->hx.req); /* still ours when the submission failed */
        px->hx.req = NULL;
        return -1;
    }
    return 0;
}
