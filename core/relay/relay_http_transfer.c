/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The HTTP relay's upstream transfer (see relay_http.c for the design): the
 * shared state's references, the libcurl callbacks (run on the relay transfer
 * loop, relay_http_loop.c; they pause the transfer instead of waiting), and the MHD
 * content reader that hands the answer to the client without ever waiting on
 * the event loop.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP, getrandom */
#endif
#include <curl/curl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/validate.h"
#include "base/app.h"
#include "base/bytepipe.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/activity.h"
#include "domain/dispatch.h"
#include "domain/endpoint_cache.h"
#include "engine/envelope.h"
#include "engine/http_server.h"
#include "engine/request.h"
#include "engine/reply.h"
#include "obs/log.h"
#include "relay/proxy_guard.h"
#include "relay/relay.h"
#include "relay/relay_common.h"
#include "relay/relay_http_loop.h"
#include "relay/relay_pool.h"

#include "relay/relay_http_internal.h"

/* Drop one reference; the last one frees everything. */
void rk_px_unref(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    int left = --px->refs;
    pthread_mutex_unlock(&px->mu);
    if (left > 0)
        return;
    if (px->curl)
        curl_easy_cleanup(px->curl); /* the transfer never ran or did not complete */
    free(px->hx.req);                /* an HTTP/1.1 request never submitted */
    curl_slist_free_all(px->hdrs);
    free(px->url);
    if (px->req)
        rk_bytepipe_free(px->req);
    if (px->resp)
        rk_bytepipe_free(px->resp);
    if (px->h != px->h_small)
        free(px->h);
    if (px->hb != px->hb_small)
        free(px->hb);
    free(px->whole_buf);
    free(px->prefix);
    free(px->base_path);
    pthread_mutex_destroy(&px->mu);
    pthread_cond_destroy(&px->cv);
    free(px);
}

/* Stop the transfer from the request side and wake every waiter. */
void rk_px_cancel(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    px->cancel = 1;
    pthread_cond_broadcast(&px->cv);
    pthread_mutex_unlock(&px->mu);
    if (px->req)
        rk_bytepipe_abort(px->req);
    if (px->resp)
        rk_bytepipe_abort(px->resp);
}

/* 1 when the worker should stop (request side gone or daemon stopping). */
static int px_should_stop(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    int c = px->cancel;
    pthread_mutex_unlock(&px->mu);
    return c || px->app->stopping;
}

/* Note upstream activity. */
void rk_px_touch(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    px->last_io_ms = rk_turn_ms();
    pthread_mutex_unlock(&px->mu);
}

/* Makes room for need more bytes of px->hb (its first KiB inline); -1 on OOM. */
static int px_hb_reserve(struct px_http *px, size_t need)
{
    if (!px->hb) {
        px->hb = px->hb_small;
        px->hb_cap = sizeof px->hb_small;
    }
    if (px->hb_cap - px->hb_len >= need)
        return 0;
    size_t cap = px->hb_cap * 2;
    while (cap - px->hb_len < need)
        cap *= 2;
    char *nb = px->hb == px->hb_small ? malloc(cap) : realloc(px->hb, cap);
    if (!nb)
        return -1;
    if (px->hb == px->hb_small)
        memcpy(nb, px->hb_small, px->hb_len);
    px->hb = nb;
    px->hb_cap = cap;
    for (size_t i = 0; i < px->nh; i++) { /* the text moved */
        px->h[i].name = nb + px->h[i].off;
        px->h[i].value = nb + px->h[i].voff;
    }
    return 0;
}

int rk_px_head_add(struct px_http *px, const char *name, size_t nl, const char *value, size_t vl)
{
    if (!px->h) {
        px->h = px->h_small;
        px->h_cap = PX_HEAD_INLINE;
    }
    if (px->nh == px->h_cap) {
        size_t cap = px->h_cap * 2;
        struct px_header *h =
            px->h == px->h_small ? malloc(cap * sizeof *h) : realloc(px->h, cap * sizeof *h);
        if (!h)
            return -1;
        if (px->h == px->h_small)
            memcpy(h, px->h_small, sizeof px->h_small);
        px->h = h;
        px->h_cap = cap;
    }
    if (px_hb_reserve(px, nl + vl + 2) != 0)
        return -1;
    char *block = px->hb + px->hb_len;
    memcpy(block, name, nl);
    block[nl] = '\0';
    memcpy(block + nl + 1, value, vl);
    block[nl + 1 + vl] = '\0';
    px->h[px->nh].name = block;
    px->h[px->nh].value = block + nl + 1;
    px->h[px->nh].off = px->hb_len;
    px->h[px->nh].voff = px->hb_len + nl + 1;
    px->hb_len += nl + vl + 2;
    px->nh++;
    return 0;
}

/* The final response head is complete: copy its headers as libcurl parsed them (folded lines
 * joined; interim 1xx heads and trailers have other origins), values trimmed of line ends and
 * blanks (curl 7.88 keeps the CR of an empty value: "X-A:\r\n" gives "\r"; fixed in later
 * versions). Caller holds px->mu. Returns 0, or -1 on OOM. */
static int px_collect_head(struct px_http *px)
{
    struct curl_header *h = NULL;
    while ((h = curl_easy_nextheader(px->curl, CURLH_HEADER, -1, h))) {
        if (!h->name[0])
            continue; /* ": value" names nothing */
        const char *v = h->value;
        size_t n = strlen(v);
        while (n > 0 &&
               (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
            n--;
        if (rk_px_head_add(px, h->name, strlen(h->name), v, n) != 0)
            return -1;
    }
    return 0;
}

/* 1 when the final head announces a small body of known length (caller holds px->mu), kept in
 * px->whole_len: that answer is relayed whole once the transfer completes (rk_px_answer), in
 * one write. */
static int px_small_answer(struct px_http *px)
{
    if (px->nobody || px->status == 204 || px->status == 304)
        return 0;
    long long clen = -1;
    for (size_t i = 0; i < px->nh; i++) {
        if (rk_strcaseeq(px->h[i].name, "transfer-encoding"))
            return 0;
        if (rk_strcaseeq(px->h[i].name, "content-length") &&
            rk_relay_parse_int(px->h[i].value, &clen) != 0)
            return 0;
    }
    if (clen < 0 || clen > PX_WHOLE_BYTES)
        return 0;
    px->whole_len = (size_t)clen;
    return 1;
}

/* libcurl header callback: note activity, bound the head's size, and at the end of the final
 * head take its status and headers. Lines are not parsed here (curl_easy_nextheader). */
size_t rk_px_header_cb(char *line, size_t size, size_t n, void *ud)
{
    struct px_http *px = ud;
    size_t len = size * n;
    rk_px_touch(px);
    pthread_mutex_lock(&px->mu);
    if (px->head_done) { /* trailers: not relayed */
        pthread_mutex_unlock(&px->mu);
        return len;
    }
    size_t l = len;
    while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r'))
        l--;
    if (l > 0) {
        px->head_bytes += l;
        int too_big = px->head_bytes > PX_MAX_HEAD_BYTES;
        px->head_too_big = too_big;
        pthread_mutex_unlock(&px->mu);
        return too_big ? 0 : len;
    }
    long status = 0;
    curl_easy_getinfo(px->curl, CURLINFO_RESPONSE_CODE, &status);
    px->head_bytes = 0; /* each head (interim or final) has its own bound */
    if (status < 200) { /* an interim head: its headers are not relayed */
        pthread_mutex_unlock(&px->mu);
        return len;
    }
    px->status = status;
    int collected = px_collect_head(px) == 0;
    pthread_mutex_unlock(&px->mu);
    if (!collected)
        return 0;
    rk_px_head_complete(px);
    return len;
}

void rk_px_head_complete(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    px->head_done = 1;
    pthread_cond_broadcast(&px->cv);
    if (px->status >= 300 && px->req) {
        /* An early error answer: libcurl stops sending the body ("HTTP error before end of
         * send"); stop feeding it so the request side drains the client body and relays this
         * answer, as nginx does. */
        px->discard_body = 1;
        pthread_mutex_unlock(&px->mu);
        rk_bytepipe_abort(px->req);
        rk_px_wake_waiter(px);
        return;
    }
    px->whole = px_small_answer(px);
    int wake = !px->whole; /* a whole answer is answered when the transfer ends */
    pthread_mutex_unlock(&px->mu);
    if (wake)
        rk_px_wake_waiter(px);
}

void rk_px_release_whole(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    int release = px->whole;
    px->whole = 0;
    pthread_mutex_unlock(&px->mu);
    if (release)
        rk_px_wake_waiter(px);
}

void rk_px_wake_waiter(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    struct rk_req *w = px->waiter;
    px->waiter = NULL;
    pthread_mutex_unlock(&px->mu);
    if (w) {
        rk_px_answer(w, px);
        rk_req_finish(w);
    }
}

/* A pipe the transfer waits for has room or data again (another thread). */
static void px_unpause_cb(void *ctx)
{
    rk_http_loop_unpause(ctx);
}

size_t rk_px_write_cb(char *data, size_t size, size_t n, void *ud)
{
    struct px_http *px = ud;
    size_t len = size * n;
    rk_px_touch(px);
    pthread_mutex_lock(&px->mu);
    int first = !px->head_done;
    if (first) {
        px->head_done = 1;
        pthread_cond_broadcast(&px->cv);
    }
    int stop = px->cancel;
    pthread_mutex_unlock(&px->mu);
    if (first)
        rk_px_wake_waiter(px);
    if (stop)
        return 0;
    /* One writer: the room only grows until we write, so this never waits. */
    if (rk_bytepipe_room(px->resp) >= len || rk_bytepipe_aborted(px->resp))
        return rk_bytepipe_write(px->resp, data, len) == 0 ? len : 0;
    rk_px_release_whole(px);
    /* The client is slower: pause until the content reader made room. */
    px->paused_recv = 1;
    if (rk_bytepipe_notify_room(px->resp, len, px_unpause_cb, px))
        rk_http_loop_unpause(px);
    return CURL_WRITEFUNC_PAUSE;
}

size_t rk_px_read_cb(char *buf, size_t size, size_t n, void *ud)
{
    struct px_http *px = ud;
    ssize_t got = rk_bytepipe_try_read(px->req, buf, size * n);
    if (got >= 0) {
        rk_px_touch(px);
        return (size_t)got;
    }
    if (got == -1)
        return CURL_READFUNC_ABORT;
    /* Nothing from the client yet: pause until the body callback wrote. */
    px->paused_send = 1;
    if (rk_bytepipe_notify_data(px->req, px_unpause_cb, px))
        rk_http_loop_unpause(px);
    return CURL_READFUNC_PAUSE;
}

int rk_px_should_abort(struct px_http *px, int64_t now)
{
    if (px_should_stop(px))
        return 1;
    /* The client left (its connection is suspended, so libmicrohttpd does not
     * see it): checked once a second. */
    if (now - px->peer_checked_ms >= 1000) {
        px->peer_checked_ms = now;
        if (rk_relay_peer_gone(px->client_fd)) {
            rk_px_cancel(px);
            return 1;
        }
    }
    pthread_mutex_lock(&px->mu);
    /* Waiting for the client (its body, or room for the answer it reads) is
     * not upstream inactivity; an answer nobody reads yet is. */
    int waiting_client = px->paused_send || (px->paused_recv && px->reader_attached);
    int idle = !waiting_client && now - px->last_io_ms > px->timeout_ms;
    if (idle)
        px->timed_out = 1;
    pthread_mutex_unlock(&px->mu);
    return idle;
}

/* libcurl progress callback: cancellation and the inactivity limit. */
int rk_px_progress_cb(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                      curl_off_t ulnow)
{
    (void)dltotal;
    (void)ultotal;
    struct px_http *px = ud;
    int64_t now = rk_now_ms();
    pthread_mutex_lock(&px->mu);
    if (dlnow != px->last_dl || ulnow != px->last_ul) {
        px->last_dl = dlnow;
        px->last_ul = ulnow;
        px->last_io_ms = now;
    }
    pthread_mutex_unlock(&px->mu);
    return rk_px_should_abort(px, now);
}

void rk_px_finish(struct px_http *px, CURLcode res, int reusable)
{
    if (px->curl) /* NULL: carried by the loop's HTTP/1.1 client, which keeps its connections */
        rk_relay_curl_put(px->url, px->curl, reusable);
    px->curl = NULL;
    pthread_mutex_lock(&px->mu);
    px->finished = 1;
    px->result = res;
    pthread_cond_broadcast(&px->cv);
    pthread_mutex_unlock(&px->mu);
    rk_px_wake_waiter(px);
}

/* New bytes (or the end) in the response pipe: resume the client connection. */
static void px_data_cb(void *ctx)
{
    struct px_http *px = ctx;
    rk_req_resume(px->owner);
}

/* The MHD content reader: the upstream body as it arrives. With nothing to
 * send it suspends the connection (the transfer resumes it when it writes)
 * and returns 0: the event loop never waits here. */
ssize_t rk_px_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct px_http *px = cls;
    ssize_t n = rk_bytepipe_try_read(px->resp, buf, max);
    if (n > 0)
        return n;
    if (n == 0) {
        pthread_mutex_lock(&px->mu);
        int ok = px->finished && px->result == CURLE_OK;
        pthread_mutex_unlock(&px->mu);
        if (!ok)
            rk_info("http proxy to sandbox %s port %d: upstream body cut", px->sandbox_id,
                    px->port);
        return ok ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (n == -1 || px->app->stopping) {
        rk_px_cancel(px);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    /* Suspended first, so the transfer's resume never comes before it. */
    rk_req_suspend(px->owner);
    if (rk_bytepipe_notify_data(px->resp, px_data_cb, px))
        rk_req_resume(px->owner);
    return 0;
}

/* The MHD response is gone: stop the transfer and drop its reference. */
void rk_px_response_free(void *cls)
{
    struct px_http *px = cls;
    rk_bytepipe_notify_cancel(px->resp);
    rk_px_cancel(px);
    rk_px_unref(px);
}
