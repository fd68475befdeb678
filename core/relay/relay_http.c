/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTTP service proxy (§5.20, §5.23): requests to an application inside a
 * sandbox are relayed to the endpoint the plugin resolves (proxy_target).
 *
 * Routes (every method):
 *   /apis/envs/sandbox/v1/sandboxes/{id}/proxy[/{path}]
 *       the proxy-role route; the port comes from a "port/N/" prefix of
 *       {path}, the X-ROCK-Target-Port header or the rock_target_port query
 *       (exactly one, default 8080)
 *   /apis/envs/sandbox/v1/proxy/{id}/port/{port}[/{path}]
 *       the form the user documentation shows (port always from the path)
 *   /apis/envs/sandbox/v1/sandboxes/{id}/vnc[/{path}]
 *       the same relay to port 8006 without port selection
 *
 * Streaming design: begin() resolves the target and starts a worker thread
 * running one libcurl transfer. The client body goes connection thread ->
 * bounded rk_bytepipe -> curl read callback (body() blocks while the pipe is
 * full: backpressure). The upstream answer goes curl write callback ->
 * bounded rk_bytepipe -> the MHD content reader of a MHD_SIZE_UNKNOWN (or
 * Content-Length sized) response; each chunk is handed to MHD as soon as it
 * arrives, so server-sent events are not delayed. Memory per request is two
 * 256 KiB rings whatever the body size. The shared state is reference counted
 * (request, worker, response).
 *
 * Deadlines: proxy.connect_timeout_s for the connection, then
 * proxy.timeout_s of upstream inactivity (nothing sent or received) ends the
 * transfer: 504 before the response head, a cut body after it. Time spent
 * waiting for a slow client is not upstream inactivity.
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
#include "engine/reply.h"
#include "obs/log.h"
#include "relay/proxy_guard.h"
#include "relay/relay.h"
#include "relay/relay_common.h"
#include "relay/relay_pool.h"

/** Ring sizes of the two body pipes. */
#define PX_PIPE_BYTES (256 * 1024)
/** Upper bound of the upstream response head we keep. */
#define PX_MAX_HEAD_BYTES (64 * 1024)
/** Stack of the worker thread (libcurl + TLS handshake). */
#define PX_WORKER_STACK (512 * 1024)

/* One response header line from upstream. */
struct px_header {
    char *name;
    char *value;
};

/* State shared by the connection thread, the worker and the MHD response. */
struct px_http {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    struct rk_app *app;
    CURL *curl;
    struct curl_slist *hdrs;
    char *url;
    char errbuf[CURL_ERROR_SIZE];
    struct rk_bytepipe *req;  /* client body -> curl; NULL without a streamed body */
    struct rk_bytepipe *resp; /* curl -> client */
    int client_fd;
    int timeout_ms;  /* upstream inactivity limit (proxy.timeout) */
    char *prefix;    /* proxy prefix for Location rewriting */
    char *base_path; /* the endpoint's own path */
    char sandbox_id[128];
    int port;
    /* response head (written by the worker until head_done) */
    long status;
    struct px_header *h;
    size_t nh, head_bytes;
    int head_too_big;
    int head_done;
    /* progress */
    int finished;
    CURLcode result;
    int timed_out;
    int cancel;       /* the request side gave up */
    int discard_body; /* the upstream answered early: the rest of the client body is dropped */
    /* Synchronous mode (requests without a body): the connection thread drives the
     * transfer itself through its own curl multi handle; no worker thread, no pipe. The
     * answer is staged in sbuf and the transfer is paused while sbuf is full. */
    int sync;
    CURLM *multi;
    char *sbuf;
    size_t slen, soff;
    int paused;
    int reader_attached; /* the client response is being produced */
    int64_t last_io_ms;
    int64_t wait_start_ms;
    curl_off_t last_dl, last_ul;
};

/* Drop one reference; the last one frees everything. */
static void px_unref(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    int left = --px->refs;
    pthread_mutex_unlock(&px->mu);
    if (left > 0)
        return;
    if (px->curl && px->sync && px->multi)
        curl_multi_remove_handle(px->multi, px->curl);
    if (px->curl)
        curl_easy_cleanup(px->curl); /* the transfer never ran or did not complete */
    free(px->sbuf);
    curl_slist_free_all(px->hdrs);
    free(px->url);
    if (px->req)
        rk_bytepipe_free(px->req);
    if (px->resp)
        rk_bytepipe_free(px->resp);
    for (size_t i = 0; i < px->nh; i++) {
        free(px->h[i].name);
        free(px->h[i].value);
    }
    free(px->h);
    free(px->prefix);
    free(px->base_path);
    pthread_mutex_destroy(&px->mu);
    pthread_cond_destroy(&px->cv);
    free(px);
}

/* Stop the transfer from the request side and wake every waiter. */
static void px_cancel(struct px_http *px)
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
static void px_touch(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    px->last_io_ms = rk_now_ms();
    pthread_mutex_unlock(&px->mu);
}

/* A header value as libcurl stored it, trimmed of line ends and blanks: curl 7.88 keeps the
 * CR of an empty value ("X-A:\r\n" gives "\r"; fixed in later versions). */
static char *px_value_dup(const char *v)
{
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    return rk_strdup_printf("%.*s", (int)n, v);
}

/* The final response head is complete: copy its headers as libcurl parsed them (folded lines
 * joined, values trimmed; interim 1xx heads and trailers have other origins). Caller holds
 * px->mu. Returns 0, or -1 on OOM. */
static int px_collect_head(struct px_http *px)
{
    size_t n = 0;
    struct curl_header *h = NULL;
    while ((h = curl_easy_nextheader(px->curl, CURLH_HEADER, -1, h)))
        n++;
    px->h = n ? calloc(n, sizeof *px->h) : NULL;
    if (n && !px->h)
        return -1;
    h = NULL;
    while ((h = curl_easy_nextheader(px->curl, CURLH_HEADER, -1, h)) && px->nh < n) {
        if (!h->name[0])
            continue; /* ": value" names nothing */
        px->h[px->nh].name = rk_xstrdup(h->name);
        px->h[px->nh].value = px_value_dup(h->value);
        px->nh++;
    }
    return 0;
}

/* libcurl header callback: note activity, bound the head's size, and at the end of the final
 * head take its status and headers. Lines are not parsed here (curl_easy_nextheader). */
static size_t px_header_cb(char *line, size_t size, size_t n, void *ud)
{
    struct px_http *px = ud;
    size_t len = size * n;
    px_touch(px);
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
    if (px_collect_head(px) != 0) {
        pthread_mutex_unlock(&px->mu);
        return 0;
    }
    px->head_done = 1;
    pthread_cond_broadcast(&px->cv);
    if (px->status >= 300 && px->req) {
        /* An early error answer: libcurl stops sending the body ("HTTP error before end of
         * send"); stop feeding it so the request side drains the client body and relays this
         * answer, as nginx does. */
        px->discard_body = 1;
        pthread_mutex_unlock(&px->mu);
        rk_bytepipe_abort(px->req);
        return len;
    }
    pthread_mutex_unlock(&px->mu);
    return len;
}

/* libcurl write callback: push the body into the response pipe. Blocks while
 * the client is slow; before the client response exists it waits at most the
 * inactivity limit (an upstream answering before it read the whole request
 * would otherwise deadlock with the request pipe). */
/** Staging buffer of a synchronous transfer (libcurl hands at most 16 KiB at a time). */
#define PX_SYNC_BUF_BYTES (64 * 1024)

/* Synchronous mode: stage the chunk, or pause the transfer until the client took what is
 * staged (libcurl then hands the same chunk again). */
static size_t px_sync_write(struct px_http *px, const char *data, size_t len)
{
    if (!px->head_done) {
        pthread_mutex_lock(&px->mu);
        px->head_done = 1;
        pthread_mutex_unlock(&px->mu);
    }
    if (px->soff > 0 && px->soff == px->slen)
        px->soff = px->slen = 0;
    if (PX_SYNC_BUF_BYTES - px->slen < len && px->soff > 0) {
        memmove(px->sbuf, px->sbuf + px->soff, px->slen - px->soff);
        px->slen -= px->soff;
        px->soff = 0;
    }
    if (PX_SYNC_BUF_BYTES - px->slen < len) {
        px->paused = 1;
        return CURL_WRITEFUNC_PAUSE;
    }
    memcpy(px->sbuf + px->slen, data, len);
    px->slen += len;
    px->last_io_ms = rk_now_ms();
    return len;
}

static size_t px_write_cb(char *data, size_t size, size_t n, void *ud)
{
    struct px_http *px = ud;
    size_t len = size * n;
    size_t off = 0;
    if (px->sync)
        return px_sync_write(px, data, len);
    px_touch(px);
    pthread_mutex_lock(&px->mu);
    if (!px->head_done) {
        px->head_done = 1;
        pthread_cond_broadcast(&px->cv);
    }
    pthread_mutex_unlock(&px->mu);
    int64_t start = rk_now_ms();
    while (off < len) {
        size_t w = 0;
        int rc = rk_bytepipe_write_timed(px->resp, data + off, len - off, 1000, &w);
        off += w;
        if (rc == 0)
            break;
        if (rc < 0 || px_should_stop(px))
            return 0;
        pthread_mutex_lock(&px->mu);
        int attached = px->reader_attached;
        pthread_mutex_unlock(&px->mu);
        if (w > 0)
            start = rk_now_ms();
        if (!attached && rk_now_ms() - start > px->timeout_ms) {
            pthread_mutex_lock(&px->mu);
            px->timed_out = 1;
            pthread_mutex_unlock(&px->mu);
            return 0;
        }
    }
    px_touch(px);
    return len;
}

/* libcurl read callback: the client body from the request pipe. */
static size_t px_read_cb(char *buf, size_t size, size_t n, void *ud)
{
    struct px_http *px = ud;
    for (;;) {
        ssize_t got = rk_bytepipe_read(px->req, buf, size * n, 1000);
        if (got >= 0) {
            px_touch(px);
            return (size_t)got;
        }
        if (rk_bytepipe_aborted(px->req) || px_should_stop(px))
            return CURL_READFUNC_ABORT;
    }
}

/* libcurl progress callback: cancellation and the inactivity limit. */
static int px_progress_cb(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                          curl_off_t ulnow)
{
    (void)dltotal;
    (void)ultotal;
    struct px_http *px = ud;
    if (px_should_stop(px))
        return 1;
    int64_t now = rk_now_ms();
    pthread_mutex_lock(&px->mu);
    if (dlnow != px->last_dl || ulnow != px->last_ul) {
        px->last_dl = dlnow;
        px->last_ul = ulnow;
        px->last_io_ms = now;
    }
    int idle = now - px->last_io_ms > px->timeout_ms;
    if (idle)
        px->timed_out = 1;
    pthread_mutex_unlock(&px->mu);
    return idle;
}

/* The transfer ended: the handle goes back to the pool (kept when reusable), then the result is
 * published to the waiters. */
static void px_finish(struct px_http *px, CURLcode res, int reusable)
{
    rk_relay_curl_put(px->url, px->curl, reusable);
    px->curl = NULL;
    pthread_mutex_lock(&px->mu);
    px->finished = 1;
    px->result = res;
    pthread_cond_broadcast(&px->cv);
    pthread_mutex_unlock(&px->mu);
}

/* Worker (a cached relay thread): run the transfer, then publish the result. The handle goes
 * back to the per-origin pool with its keep-alive connection after a complete exchange. */
static void px_worker(void *arg)
{
    struct px_http *px = arg;
    px_touch(px);
    CURLcode res = curl_easy_perform(px->curl);
    pthread_mutex_lock(&px->mu);
    int complete = res == CURLE_OK && !px->cancel && !px->discard_body;
    pthread_mutex_unlock(&px->mu);
    px_finish(px, res, complete);
    if (px->req)
        rk_bytepipe_abort(px->req); /* body() stops feeding a finished transfer */
    rk_bytepipe_close(px->resp);
    px_unref(px);
    rk_relay_leave();
}

/* Per-thread multi handle of the synchronous mode (freed when the connection thread ends). */
static pthread_key_t px_multi_key;
static pthread_once_t px_multi_once = PTHREAD_ONCE_INIT;

static void px_multi_free(void *m)
{
    curl_multi_cleanup(m);
}

static void px_multi_key_init(void)
{
    pthread_key_create(&px_multi_key, px_multi_free);
}

/* This thread's multi handle (created on first use), or NULL. */
static CURLM *px_thread_multi(void)
{
    pthread_once(&px_multi_once, px_multi_key_init);
    CURLM *m = pthread_getspecific(px_multi_key);
    if (!m) {
        m = curl_multi_init();
        if (m && pthread_setspecific(px_multi_key, m) != 0) {
            curl_multi_cleanup(m);
            m = NULL;
        }
    }
    return m;
}

/* Synchronous mode: note a finished transfer; the handle goes back to the pool. */
static void px_sync_collect(struct px_http *px)
{
    int left = 0;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(px->multi, &left))) {
        if (msg->msg != CURLMSG_DONE || msg->easy_handle != px->curl)
            continue;
        CURLcode res = msg->data.result;
        curl_multi_remove_handle(px->multi, px->curl);
        px_finish(px, res, res == CURLE_OK && !px->cancel);
        return;
    }
}

/* Synchronous mode: drive the transfer for at most wait_ms (progress, completion, the
 * inactivity limit via the progress callback). Returns -1 when the client left or the
 * daemon stops (the transfer is then cancelled), else 0. */
static int px_sync_step(struct px_http *px, int wait_ms)
{
    int running = 0;
    if (!px->curl)
        return 0;
    size_t staged = px->slen;
    int head = px->head_done;
    curl_multi_perform(px->multi, &running);
    px_sync_collect(px);
    /* Something for the caller already (answer head, staged bytes, a full buffer): do not
     * wait; a paused transfer would never wake the poll below. */
    if (!px->curl || px->slen != staged || px->head_done != head || px->paused)
        return 0;
    int fds = 0;
    curl_multi_poll(px->multi, NULL, 0, wait_ms, &fds);
    curl_multi_perform(px->multi, &running);
    px_sync_collect(px);
    if (px->curl && fds == 0 && (px->app->stopping || rk_relay_peer_gone(px->client_fd))) {
        pthread_mutex_lock(&px->mu);
        px->cancel = 1;
        pthread_mutex_unlock(&px->mu);
        return -1;
    }
    return 0;
}

/* Synchronous mode content reader: staged bytes, else drive the transfer. */
static ssize_t px_sync_reader(struct px_http *px, char *buf, size_t max)
{
    for (;;) {
        if (px->slen > px->soff) {
            size_t n = px->slen - px->soff;
            if (n > max)
                n = max;
            memcpy(buf, px->sbuf + px->soff, n);
            px->soff += n;
            if (px->soff == px->slen)
                px->soff = px->slen = 0;
            if (px->paused && px->curl) {
                px->paused = 0;
                px_touch(px); /* time spent waiting for the client is not upstream inactivity */
                curl_easy_pause(px->curl, CURLPAUSE_CONT);
            }
            return (ssize_t)n;
        }
        if (px->finished) {
            int ok = px->result == CURLE_OK;
            if (!ok)
                rk_info("http proxy to sandbox %s port %d: upstream body cut", px->sandbox_id,
                        px->port);
            return ok ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (px->paused && px->curl) {
            px->paused = 0;
            px_touch(px);
            curl_easy_pause(px->curl, CURLPAUSE_CONT);
        }
        if (px_sync_step(px, 200) != 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* The MHD content reader: the upstream body as it arrives. */
static ssize_t px_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct px_http *px = cls;
    if (px->sync)
        return px_sync_reader(px, buf, max);
    for (;;) {
        ssize_t n = rk_bytepipe_read(px->resp, buf, max, 1000);
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
        if (n == -1 || px->app->stopping || rk_relay_peer_gone(px->client_fd)) {
            px_cancel(px);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* The MHD response is gone: stop the worker and drop its reference. */
static void px_response_free(void *cls)
{
    struct px_http *px = cls;
    /* Synchronous mode: the client got the whole answer; let libcurl see the end of the
     * exchange too, so the handle and its keep-alive connection go back to the pool. */
    for (int i = 0; px->sync && px->curl && !px->finished && !px->cancel && i < 4; i++) {
        int running = 0;
        curl_multi_perform(px->multi, &running);
        px_sync_collect(px);
    }
    px_cancel(px);
    px_unref(px);
}

/* The request ended (answered, failed or the client left). */
static void px_route_free(struct rk_req *r)
{
    struct px_http *px = r->route_ctx;
    r->route_ctx = NULL;
    if (!px)
        return;
    px_cancel(px);
    px_unref(px);
}

/* Per-route facts. */
struct px_route_kind {
    int vnc;      /* fixed port 8006, no port selection */
    int doc_form; /* /proxy/{id}/port/{port}/... : the sub-path starts at "port/" */
};

/* Which relay route r matched. */
static struct px_route_kind px_kind(const struct rk_req *r)
{
    struct px_route_kind k = {0, 0};
    k.vnc = (r->route->flags & RK_ROUTE_VNC) != 0;
    k.doc_form = (r->route->flags & RK_ROUTE_PORT_PATH) != 0;
    return k;
}

/* Reply Failed with result null and the route's message. */
static void px_reply_failed_null(struct rk_req *r, const char *error)
{
    r->outcome = "failed";
    rk_req_reply_json(r, 200, rk_envelope_failure(r->route->fail_message, error, 0, RK_SHAPE_NULL));
}

/* Header collection context for the upstream request. */
struct px_hdr_ctx {
    struct curl_slist *list;
    const char *connection;
    const struct rk_proxy_target *pt;
    int has_accept;
    int failed;
    const struct rk_req *r; /* for proxy_guard.c */
};

/* Append "Name: value" (or "Name;" for an empty value) to a curl list. */
static int px_add_header(struct curl_slist **list, const char *name, const char *value)
{
    char *line = value[0] ? rk_strdup_printf("%s: %s", name, value) : rk_strdup_printf("%s;", name);
    struct curl_slist *n = curl_slist_append(*list, line);
    free(line);
    if (!n)
        return -1;
    *list = n;
    return 0;
}

/* Forward one client header unless filtered or overridden by the endpoint. */
static void px_client_header(void *ud, const char *name, const char *value)
{
    struct px_hdr_ctx *c = ud;
    if (!name || rk_relay_skip_request_header(name, c->connection) ||
        rk_proxy_guard_client_header(c->r, c->pt, name))
        return;
    for (size_t i = 0; i < c->pt->headers_len; i++)
        if (c->pt->headers[i].key && rk_strcaseeq(c->pt->headers[i].key, name))
            return;
    if (rk_strcaseeq(name, "accept"))
        c->has_accept = 1;
    if (strpbrk(value, "\r\n"))
        return;
    if (px_add_header(&c->list, name, value) != 0)
        c->failed = 1;
}

/* 1 if the client sends a body (Content-Length or Transfer-Encoding). */
static int px_client_body(struct rk_req *r, long long *len)
{
    const char *cl = rk_req_header(r, "Content-Length");
    const char *te = rk_req_header(r, "Transfer-Encoding");
    *len = -1;
    if (cl && rk_relay_parse_int(cl, len) == 0 && *len >= 0)
        return 1;
    *len = -1;
    return te != NULL;
}

/* Configure the method and body of the transfer. */
static void px_setup_method(struct px_http *px, struct rk_req *r, int *stream_body)
{
    CURL *c = px->curl;
    long long len;
    int body = px_client_body(r, &len);
    *stream_body = 0;
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        return;
    }
    if (body && len == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
        return;
    }
    if (body) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, px_read_cb);
        curl_easy_setopt(c, CURLOPT_READDATA, px);
        if (len > 0)
            curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
        *stream_body = 1;
        return;
    }
    if (strcmp(r->method, "GET") == 0)
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    else
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
}

/* Choose the port and the forwarded sub-path; replies and returns -1 on a
 * client error. */
static int px_route_port(struct rk_req *r, struct px_route_kind k, const char **fwd, int *port,
                         const char *raw_path)
{
    /* The doc form's sub-path starts at its "port/N" segments. */
    int nseg = rk_relay_pattern_segments(r->route->pattern) - (k.doc_form ? 2 : 0);
    const char *rest = rk_relay_raw_rest(raw_path, nseg);
    if (!rest)
        rest = "";
    if (k.vnc) {
        *fwd = rest;
        *port = RK_RELAY_VNC_PORT;
        return 0;
    }
    const char *q = rk_req_query(r, "rock_target_port");
    if (q) {
        struct rk_v v;
        rk_v_init(&v, r->call, "query");
        rk_v_qint(&v, r, "rock_target_port", 0);
        if (!rk_v_ok(&v)) {
            rk_reply_invalid(r, rk_v_text(&v));
            rk_v_free(&v);
            return -1;
        }
        rk_v_free(&v);
    }
    struct rk_port_choice pc;
    char err[256];
    switch (rk_relay_select_port(rest, rk_req_header(r, "X-ROCK-Target-Port"), q,
                                 RK_RELAY_DEFAULT_PORT, &pc, err, sizeof err)) {
    case RK_PORTSEL_OK:
        break;
    case RK_PORTSEL_MULTIPLE:
        rk_reply_detail(r, 400, err);
        return -1;
    case RK_PORTSEL_BAD_HEADER:
        px_reply_failed_null(r, err);
        return -1;
    case RK_PORTSEL_BAD_QUERY:
        rk_reply_invalid(r, err);
        return -1;
    }
    if (k.doc_form && !pc.from_path) {
        rk_reply_detail(r, 400, "Invalid target port in the path: expected an integer in 1-65535");
        return -1;
    }
    if (rk_relay_check_port_http(pc.port, err, sizeof err) != 0) {
        rk_reply_detail(r, 400, err);
        return -1;
    }
    *fwd = pc.fwd;
    *port = (int)pc.port;
    return 0;
}

/* Resolve the endpoint: from the in-process endpoint cache (no store read, no plugin call; the
 * hit is activity on the sandbox, so domain/activity.c may refresh its idle deadline), else
 * through the gate and the plugin; replies on failure. *cached holds the cache's copy the
 * target points into. */
static int px_resolve(struct rk_req *r, int port, enum rk_proxy_kind kind, enum rk_op op,
                      struct rk_proxy_target *pt, struct rk_ep *cached)
{
    struct rk_app *app = r->app;
    int64_t ttl = app->cfg->proxy.endpoint_cache_ttl_ms;
    memset(cached, 0, sizeof *cached);
    if (rk_ep_cache_get(r->params[0], port, (int)kind, ttl, cached) == 0) {
        memset(pt, 0, sizeof *pt);
        pt->base_url = cached->base_url;
        pt->headers = cached->headers;
        pt->headers_len = cached->headers_len;
        pt->header_flags = cached->header_flags; /* credentials stay credentials */
        rk_activity_touch(app, r->params[0], cached->idle_minutes);
        return 0;
    }
    int64_t minutes = 0;
    if (rk_relay_target(r, op, port, kind, pt, &minutes) != RK_OK) {
        rk_reply_call_error(r);
        return -1;
    }
    if (ttl > 0)
        rk_ep_cache_put(r->params[0], port, (int)kind, pt, minutes);
    return 0;
}

/* Headers complete: choose the port, resolve the endpoint, start the worker. */
int rk_relay_http_begin(struct rk_req *r)
{
    struct rk_app *app = r->app;
    struct rk_ep cached; /* the endpoint cache's copy the target points into */
    memset(&cached, 0, sizeof cached);
    struct px_route_kind k = px_kind(r);
    const char *raw_full = rk_req_raw_path(r);
    char *raw_path = rk_strdup_printf("%.*s", (int)strcspn(raw_full, "?"), raw_full);
    const char *fwd = "";
    int port = 0;
    if (px_route_port(r, k, &fwd, &port, raw_path) != 0)
        goto replied;
    if (rk_relay_has_dot_segment(fwd)) {
        rk_reply_error(r, RK_E_INVALID, RK_RELAY_TRAVERSAL_MSG);
        goto replied;
    }
    struct rk_proxy_target pt;
    if (px_resolve(r, port, RK_PROXY_HTTP, RK_OP_PROXY_HTTP, &pt, &cached) != 0)
        goto replied;

    struct px_http *px = calloc(1, sizeof *px);
    if (!px) {
        rk_reply_error(r, RK_E_NOMEM, "out of memory");
        goto replied;
    }
    pthread_mutex_init(&px->mu, NULL);
    pthread_cond_init(&px->cv, NULL);
    px->refs = 1;
    px->app = app;
    px->port = port;
    px->client_fd = rk_req_client_fd(r);
    px->timeout_ms = app->cfg->proxy.timeout_s * 1000;
    snprintf(px->sandbox_id, sizeof px->sandbox_id, "%s", r->params[0]);
    size_t plen = (size_t)(fwd - raw_path);
    while (plen > 0 && raw_path[plen - 1] == '/')
        plen--;
    px->prefix = rk_strdup_printf("%.*s", (int)plen, raw_path);
    r->route_ctx = px;
    r->route_ctx_free = px_route_free;

    struct rk_url_parts u;
    px->url = rk_relay_build_url(pt.base_url, fwd, rk_req_raw_query(r));
    if (!px->url || rk_relay_split_url(pt.base_url, &u) != 0) {
        rk_reply_error(r, RK_E_UPSTREAM, "the operator returned an unusable endpoint address");
        goto replied;
    }
    px->base_path = rk_xstrdup(u.path);
    rk_relay_url_parts_free(&u);

    /* Headers: the client's (filtered), then the endpoint's, which win. */
    struct px_hdr_ctx hc = {NULL, rk_req_header(r, "Connection"), &pt, 0, 0, r};
    rk_req_header_each(r, px_client_header, &hc);
    for (size_t i = 0; i < pt.headers_len; i++) {
        const char *name = pt.headers[i].key;
        const char *value = pt.headers[i].value ? pt.headers[i].value : "";
        if (!name || rk_proxy_guard_endpoint_header(&pt, i) || rk_relay_is_hop_header(name, NULL) ||
            rk_strcaseeq(name, "host") || rk_strcaseeq(name, "content-length") ||
            strpbrk(value, "\r\n"))
            continue;
        if (px_add_header(&hc.list, name, value) != 0)
            hc.failed = 1;
    }
    if (px_add_header(&hc.list, "X-Request-ID", r->request_id) != 0)
        hc.failed = 1;
    /* "Name:" removes a header libcurl would add on its own. */
    const char *removed[] = {"Expect:", hc.has_accept ? NULL : "Accept:"};
    for (size_t i = 0; i < 2; i++) {
        struct curl_slist *n = removed[i] ? curl_slist_append(hc.list, removed[i]) : hc.list;
        if (!n)
            hc.failed = 1;
        else
            hc.list = n;
    }
    px->hdrs = hc.list;
    px->curl = rk_relay_curl_get(px->url);
    px->resp = rk_bytepipe_new(PX_PIPE_BYTES);
    if (hc.failed || !px->curl || !px->resp) {
        rk_reply_error(r, RK_E_NOMEM, "out of memory");
        goto replied;
    }

    CURL *c = px->curl;
    curl_easy_setopt(c, CURLOPT_URL, px->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_HTTP_CONTENT_DECODING, 0L);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)app->cfg->proxy.connect_timeout_s * 1000);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, px->hdrs);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, px_header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, px);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, px_write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, px);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, px_progress_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, px);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, px->errbuf);
    int stream_body = 0;
    px_setup_method(px, r, &stream_body);
    if (stream_body) {
        px->req = rk_bytepipe_new(PX_PIPE_BYTES);
        if (!px->req) {
            rk_reply_error(r, RK_E_NOMEM, "out of memory");
            goto replied;
        }
    } else {
        /* No request body: this connection thread drives the transfer itself (no worker
         * thread, no cross-thread hand-offs); see px_sync_step. */
        px->multi = px_thread_multi();
        px->sbuf = px->multi ? malloc(PX_SYNC_BUF_BYTES) : NULL;
        if (px->sbuf && curl_multi_add_handle(px->multi, px->curl) == CURLM_OK) {
            px->sync = 1;
            px_touch(px);
            rk_ep_free(&cached);
            free(raw_path);
            return 0;
        }
        free(px->sbuf);
        px->sbuf = NULL;
    }

    px->refs++;
    rk_relay_enter();
    if (rk_relay_run(px_worker, px, PX_WORKER_STACK) != 0) {
        px->refs--;
        rk_relay_leave();
        rk_reply_error(r, RK_E_INTERNAL, "cannot start the proxy worker thread");
        goto replied;
    }
    rk_ep_free(&cached);
    free(raw_path);
    return 0;

replied:
    rk_ep_free(&cached);
    free(raw_path);
    return 1;
}

/* One chunk of client body: into the request pipe (blocks while it is full). Once the
 * upstream answered early, the rest of the body is read and dropped so the answer can be
 * relayed on this connection. */
int rk_relay_http_body(struct rk_req *r, const char *data, size_t len)
{
    struct px_http *px = r->route_ctx;
    if (!px || !px->req)
        return 0;
    pthread_mutex_lock(&px->mu);
    int discard = px->discard_body;
    pthread_mutex_unlock(&px->mu);
    if (discard)
        return 0;
    if (rk_bytepipe_write(px->req, data, len) == 0)
        return 0;
    pthread_mutex_lock(&px->mu);
    discard = px->discard_body;
    pthread_mutex_unlock(&px->mu);
    return discard ? 0 : 1;
}

/* Wait for the response head, the end of the transfer, or a reason to stop. */
static void px_wait_head(struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    while (!px->head_done && !px->finished) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&px->cv, &px->mu, &ts);
        if (px->head_done || px->finished)
            break;
        pthread_mutex_unlock(&px->mu);
        int stop = px->app->stopping || rk_relay_peer_gone(px->client_fd);
        pthread_mutex_lock(&px->mu);
        if (stop) {
            px->cancel = 1;
            break;
        }
    }
    pthread_mutex_unlock(&px->mu);
}

/* Answer 502/504 for a transfer that produced no response head. */
static void px_reply_upstream_error(struct rk_req *r, struct px_http *px)
{
    char msg[CURL_ERROR_SIZE + 512];
    const char *what = r->route->fail_message;
    if (px->timed_out) {
        snprintf(msg, sizeof msg,
                 "%s: the application in sandbox %s (port %d) did not answer "
                 "within %d s (proxy.timeout_s)",
                 what, px->sandbox_id, px->port, px->timeout_ms / 1000);
        r->outcome = "timeout";
        rk_reply_detail(r, 504, msg);
        return;
    }
    const char *cause = px->head_too_big ? "response headers too large"
                        : px->errbuf[0]  ? px->errbuf
                                         : curl_easy_strerror(px->result);
    snprintf(msg, sizeof msg, "%s: cannot reach the application in sandbox %s (port %d): %s", what,
             px->sandbox_id, px->port, cause);
    rk_info("%s", msg);
    r->outcome = "upstream_error";
    rk_reply_detail(r, 502, msg);
}

/* 1 for statuses that never carry a body. */
static int px_bodyless(long status)
{
    return status < 200 || status == 204 || status == 304;
}

/* Body complete: wait for the upstream head and stream the answer back. */
void rk_relay_http_handler(struct rk_req *r)
{
    struct px_http *px = r->route_ctx;
    if (r->responded || !px)
        return;
    if (px->req)
        rk_bytepipe_close(px->req);
    if (px->sync) {
        while (!px->head_done && !px->finished)
            if (px_sync_step(px, 200) != 0)
                break;
    } else {
        px_wait_head(px);
    }

    pthread_mutex_lock(&px->mu);
    int head = px->head_done && !px->head_too_big;
    int cancelled = px->cancel;
    if (head)
        px->reader_attached = 1;
    pthread_mutex_unlock(&px->mu);
    if (!head) {
        if (cancelled) {
            r->outcome = "client_closed";
            rk_reply_detail(r, 502, "request cancelled");
            return;
        }
        /* The endpoint may have moved: resolve it again next time. */
        rk_ep_cache_forget(px->sandbox_id, px->port, (int)RK_PROXY_HTTP);
        px_reply_upstream_error(r, px);
        return;
    }

    /* The worker no longer touches the head once head_done is set. */
    const char *conn_hdr = NULL;
    long long clen = -1;
    for (size_t i = 0; i < px->nh; i++) {
        if (rk_strcaseeq(px->h[i].name, "connection"))
            conn_hdr = px->h[i].value;
        else if (rk_strcaseeq(px->h[i].name, "content-length"))
            rk_relay_parse_int(px->h[i].value, &clen);
    }
    int has_te = 0;
    for (size_t i = 0; i < px->nh; i++)
        if (rk_strcaseeq(px->h[i].name, "transfer-encoding"))
            has_te = 1;
    uint64_t size = MHD_SIZE_UNKNOWN;
    if (px_bodyless(px->status))
        size = 0;
    else if (clen >= 0 && !has_te)
        size = (uint64_t)clen;
    /* Synchronous mode, a small body of known length: finish the exchange first and answer
     * from one buffer, so the head and the body leave in one send (libmicrohttpd writes a
     * callback response's head and body separately: one more syscall and TCP segment, and
     * often one more wake-up of the client, per request). Anything else streams. */
    struct MHD_Response *resp = NULL;
    if (px->sync && size != MHD_SIZE_UNKNOWN && size <= PX_SYNC_BUF_BYTES) {
        while (!px->finished && px->slen - px->soff < size)
            if (px_sync_step(px, 200) != 0)
                break;
        if (px->finished && px->result == CURLE_OK && px->slen - px->soff == size) {
            resp = MHD_create_response_from_buffer((size_t)size, px->sbuf + px->soff,
                                                   MHD_RESPMEM_MUST_COPY);
            if (!resp) {
                rk_reply_detail(r, 500, "out of memory");
                return;
            }
            px->soff = px->slen = 0;
        }
    }
    if (!resp) {
        resp = MHD_create_response_from_callback(size, 32 * 1024, px_reader, px, px_response_free);
        if (!resp) {
            rk_reply_detail(r, 500, "out of memory");
            return;
        }
        pthread_mutex_lock(&px->mu);
        px->refs++;
        pthread_mutex_unlock(&px->mu);
    }
    int redirect = px->status == 301 || px->status == 302 || px->status == 303 ||
                   px->status == 307 || px->status == 308;
    for (size_t i = 0; i < px->nh; i++) {
        const char *name = px->h[i].name;
        /* The server adds its own X-Request-ID to every response. */
        if (rk_relay_skip_response_header(name, conn_hdr) || rk_strcaseeq(name, "x-request-id"))
            continue;
        if (redirect && rk_strcaseeq(name, "location")) {
            char *loc = rk_relay_rewrite_location(px->h[i].value, px->prefix, px->base_path);
            MHD_add_response_header(resp, name, loc);
            free(loc);
            continue;
        }
        MHD_add_response_header(resp, name, px->h[i].value);
    }
    r->outcome = "success";
    rk_req_reply_mhd(r, (unsigned)px->status, resp);
}

/* Route table: main.c hands it to the router before the API table. */
#define P RK_API_PREFIX
/* A streamed HTTP relay route for any method. */
#define HTTP_RELAY_ROUTE(pat, nm, msg, fl)                                                         \
    {                                                                                              \
        .method = "*", .pattern = pat, .name = nm, .body_mode = RK_BODY_STREAM,                    \
        .begin = rk_relay_http_begin, .body = rk_relay_http_body,                                  \
        .handler = rk_relay_http_handler, .fail_message = msg, .shape = RK_SHAPE_SANDBOX_RESPONSE, \
        .flags = (fl) | RK_ROUTE_SANDBOX_PARAM                                                     \
    }

/* A WebSocket relay route (matched only for Upgrade: websocket requests). */
#define WS_RELAY_ROUTE(pat, nm, fn, msg, fl)                                                       \
    {                                                                                              \
        .method = "GET", .pattern = pat, .name = nm, .handler = fn, .websocket = 1,                \
        .fail_message = msg, .shape = RK_SHAPE_SANDBOX_RESPONSE,                                   \
        .flags = (fl) | RK_ROUTE_SANDBOX_PARAM                                                     \
    }

const struct rk_route rk_relay_routes[] = {
    /* The user-doc form; matched before the admin stub /proxy/{id}/{*} of api/route_table.c. */
    HTTP_RELAY_ROUTE(P "/proxy/{id}/port/{port}", "proxy_port_path", "http proxy failed",
                     RK_ROUTE_PORT_PATH),
    HTTP_RELAY_ROUTE(P "/proxy/{id}/port/{port}/{*}", "proxy_port_path", "http proxy failed",
                     RK_ROUTE_PORT_PATH),
    HTTP_RELAY_ROUTE(P "/sandboxes/{id}/proxy", "proxy_http", "http proxy failed", 0),
    HTTP_RELAY_ROUTE(P "/sandboxes/{id}/proxy/{*}", "proxy_http", "http proxy failed", 0),
    HTTP_RELAY_ROUTE(P "/sandboxes/{id}/vnc", "vnc_http", "vnc http proxy failed", RK_ROUTE_VNC),
    HTTP_RELAY_ROUTE(P "/sandboxes/{id}/vnc/{*}", "vnc_http", "vnc http proxy failed",
                     RK_ROUTE_VNC),
    /* WebSocket (Upgrade: websocket only). */
    WS_RELAY_ROUTE(P "/sandboxes/{id}/proxy/{*}", "proxy_ws", rk_relay_ws_handler,
                   "websocket proxy failed", 0),
    WS_RELAY_ROUTE(P "/sandboxes/{id}/vnc", "vnc_ws", rk_relay_ws_handler,
                   "vnc websocket proxy failed", RK_ROUTE_VNC),
    WS_RELAY_ROUTE(P "/sandboxes/{id}/vnc/{*}", "vnc_ws", rk_relay_ws_handler,
                   "vnc websocket proxy failed", RK_ROUTE_VNC),
    WS_RELAY_ROUTE(P "/sandboxes/{id}/portforward", "portforward", rk_relay_portforward_handler,
                   "portforward failed", 0),
    {.pattern = NULL},
};
