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
 * Streaming design: begin() (on the event loop when the endpoint cache has
 * the target, else on a worker: the gate and the endpoint resolution may
 * block) resolves the target and starts one upstream exchange on the event
 * loop that serves the connection: a request without a body to a plain-HTTP
 * IP literal on the loop's own HTTP/1.1 client (relay_http_h1.c), any other
 * as a libcurl transfer on the loop's curl multi (relay_http_loop.c). The
 * client body goes event loop -> bounded rk_bytepipe -> curl read callback;
 * when the pipe is full, body() keeps the rest and suspends the connection
 * until the transfer drained it, and when it is empty the transfer pauses
 * until body() wrote (backpressure both ways, nothing waits). The handler
 * answers as soon as the response head is there, or defers the request and
 * the transfer answers it when the head arrives. The upstream answer goes
 * curl write callback (or the HTTP/1.1 client's body callback, whose reads
 * the pipe's room bounds) -> bounded rk_bytepipe -> the MHD content reader of
 * a MHD_SIZE_UNKNOWN (or Content-Length sized) response, which never waits:
 * with nothing to send it suspends the connection until the transfer writes;
 * with no room the transfer pauses until the reader drained the pipe. Each
 * chunk is handed to MHD as soon as it arrives, so server-sent events are not
 * delayed. Memory per request is two 256 KiB rings whatever the body size.
 * The shared state is reference counted (request, transfer, response).
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
#include "relay/relay_http_loop.h"
#include "relay/relay_pool.h"

#include "relay/relay_http_internal.h"

/* The request ended (answered, failed or the client left). */
static void px_route_free(struct rk_req *r)
{
    struct px_http *px = r->route_ctx;
    r->route_ctx = NULL;
    if (!px)
        return;
    rk_px_cancel(px);
    rk_px_unref(px);
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
    struct rk_buf *lines; /* "Name: value\r\n" each ("Name:\r\n" for an empty value) */
    const char *connection;
    const struct rk_proxy_target *pt;
    int has_accept;
    int failed;
    const struct rk_req *r; /* for proxy_guard.c */
};

/* Append the header line "Name: value\r\n" ("Name:\r\n" for an empty value). */
static int px_add_header(struct rk_buf *lines, const char *name, const char *value)
{
    size_t vl = strlen(value);
    return rk_buf_append(lines, name, strlen(name)) |
           rk_buf_append(lines, vl ? ": " : ":", vl ? 2 : 1) | rk_buf_append(lines, value, vl) |
           rk_buf_append(lines, "\r\n", 2);
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
    if (px_add_header(c->lines, name, value) != 0)
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
    if (px->nobody) { /* HEAD */
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
        curl_easy_setopt(c, CURLOPT_READFUNCTION, rk_px_read_cb);
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
    if (r->route->flags & RK_ROUTE_E2B_PORT) { /* the sandbox and port come from headers */
        char err[256];
        long long p = 0;
        if (rk_relay_e2b_target(r, &p, err, sizeof err) != 0 ||
            rk_relay_check_port_http(p, err, sizeof err) != 0) {
            rk_reply_detail(r, 400, err);
            return -1;
        }
        *fwd = raw_path[0] == '/' ? raw_path + 1 : raw_path;
        *port = (int)p;
        return 0;
    }
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
 * through the gate and the plugin. Returns 0, -1 after replying, or 1 when it runs on the event
 * loop and would block (rk_req_needs_worker). *cached holds the cache's copy the target points
 * into. */
static int px_resolve(struct rk_req *r, int port, enum rk_proxy_kind kind, enum rk_op op,
                      struct rk_proxy_target *pt, struct rk_ep *cached)
{
    struct rk_app *app = r->app;
    int64_t ttl = app->cfg->proxy.endpoint_cache_ttl_ms;
    memset(cached, 0, sizeof *cached);
    if (rk_ep_cache_get(r->params[0], port, (int)kind, ttl, cached) == 0) {
        /* On the event loop only when the hit is all it takes: a due idle
         * touch writes to the store, which may block. */
        if (cached->idle_minutes > 0 && rk_activity_pending(r->params[0], rk_epoch_s()) &&
            rk_req_needs_worker(r)) {
            rk_ep_free(cached);
            return 1;
        }
        memset(pt, 0, sizeof *pt);
        pt->base_url = cached->base_url;
        pt->headers = cached->headers;
        pt->headers_len = cached->headers_len;
        pt->header_flags = cached->header_flags; /* credentials stay credentials */
        rk_activity_touch(app, r->params[0], cached->idle_minutes);
        return 0;
    }
    if (rk_req_needs_worker(r))
        return 1; /* the gate and the plugin's resolution may block */
    int64_t minutes = 0;
    if (rk_relay_target(r, op, port, kind, pt, &minutes) != RK_OK) {
        rk_reply_call_error(r);
        return -1;
    }
    if (ttl > 0)
        rk_ep_cache_put(r->params[0], port, (int)kind, pt, minutes);
    return 0;
}

static int px_setup_curl(struct px_http *px, struct rk_req *r, const struct rk_buf *lines,
                         int has_accept);

/* Headers complete: choose the port, resolve the endpoint, start the transfer. */
int rk_relay_http_begin(struct rk_req *r)
{
    struct rk_app *app = r->app;
    struct rk_ep cached; /* the endpoint cache's copy the target points into */
    memset(&cached, 0, sizeof cached);
    struct px_route_kind k = px_kind(r);
    const char *raw_full = rk_req_raw_path(r);
    char *raw_path = rk_xstrndup(raw_full, strcspn(raw_full, "?"));
    const char *fwd = "";
    int port = 0;
    if (px_route_port(r, k, &fwd, &port, raw_path) != 0)
        goto replied;
    if (rk_relay_has_dot_segment(fwd)) {
        rk_reply_error(r, RK_E_INVALID, RK_RELAY_TRAVERSAL_MSG);
        goto replied;
    }
    struct rk_proxy_target pt;
    int resolved = px_resolve(r, port, RK_PROXY_HTTP, RK_OP_PROXY_HTTP, &pt, &cached);
    if (resolved < 0)
        goto replied;
    if (resolved > 0) { /* on the loop, and it would block: again on a worker */
        free(raw_path);
        return 0;
    }

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
    px->peer_checked_ms = rk_turn_ms(); /* the client just sent this request: first check in 1 s */
    px->owner = r;
    px->timeout_ms = app->cfg->proxy.timeout_s * 1000;
    snprintf(px->sandbox_id, sizeof px->sandbox_id, "%s", r->params[0]);
    size_t plen = (size_t)(fwd - raw_path);
    while (plen > 0 && raw_path[plen - 1] == '/')
        plen--;
    px->prefix = rk_xstrndup(raw_path, plen);
    r->route_ctx = px;
    r->route_ctx_free = px_route_free;

    struct rk_url_parts u;
    if (rk_relay_split_url(pt.base_url, &u) != 0) {
        rk_reply_error(r, RK_E_UPSTREAM, "the operator returned an unusable endpoint address");
        goto replied;
    }
    px->url = rk_relay_build_url(&u, fwd, rk_req_raw_query(r));
    px->base_path = rk_xstrdup(u.path);
    rk_relay_url_parts_free(&u);
    if (!px->url) {
        rk_reply_error(r, RK_E_NOMEM, "out of memory");
        goto replied;
    }

    /* Headers: the client's (filtered), then the endpoint's, which win. */
    struct rk_buf lines = {0};
    rk_buf_reserve(&lines, 1024); /* most requests' headers: one allocation (OOM: later) */
    struct px_hdr_ctx hc = {&lines, rk_req_header(r, "Connection"), &pt, 0, 0, r};
    rk_req_header_each(r, px_client_header, &hc);
    for (size_t i = 0; i < pt.headers_len; i++) {
        const char *name = pt.headers[i].key;
        const char *value = pt.headers[i].value ? pt.headers[i].value : "";
        if (!name || rk_proxy_guard_endpoint_header(&pt, i) || rk_relay_is_hop_header(name, NULL) ||
            rk_strcaseeq(name, "host") || rk_strcaseeq(name, "content-length") ||
            strpbrk(value, "\r\n"))
            continue;
        if (px_add_header(&lines, name, value) != 0)
            hc.failed = 1;
    }
    if (px_add_header(&lines, "X-Request-ID", r->request_id) != 0)
        hc.failed = 1;
    px->connect_ms = app->cfg->proxy.connect_timeout_s * 1000;
    px->resp = rk_bytepipe_new(PX_PIPE_BYTES);
    long long body_len;
    int has_body = px_client_body(r, &body_len);
    px->nobody = strcmp(r->method, "HEAD") == 0;
    /* Without a streamed body, to a plain-HTTP IP literal: the loop's own HTTP/1.1 client. */
    int on_h1 = hc.failed || !px->resp || (has_body && body_len != 0)
                    ? 0
                    : rk_http_h1_prepare(px, r, &lines, has_body && !px->nobody);
    if (hc.failed || !px->resp || on_h1 < 0 ||
        (!on_h1 && px_setup_curl(px, r, &lines, hc.has_accept) != 0)) {
        rk_buf_free(&lines);
        rk_reply_error(r, RK_E_NOMEM, "out of memory");
        goto replied;
    }
    rk_buf_free(&lines);

    px->refs++;
    rk_relay_enter();
    rk_px_touch(px);
    if ((on_h1 ? rk_http_h1_submit(px) : rk_http_loop_submit(px)) != 0) {
        px->refs--;
        rk_relay_leave();
        rk_reply_error(r, RK_E_INTERNAL, "the relay transfer loop is not available");
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

/* The header lines as libcurl's list: "Name: value", "Name;" for an empty value, then "Name:"
 * for the headers libcurl would add on its own and must not (Expect, and Accept unless the
 * client sent one). 0, or -1 out of memory. */
static int px_curl_headers(struct px_http *px, const struct rk_buf *lines, int has_accept)
{
    const char *p = lines->data, *end = lines->data + lines->len;
    while (p && p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (!eol)
            break;
        char *line = rk_xstrndup(p, (size_t)(eol - p));
        char *colon = strchr(line, ':'); /* names hold no colon: the first ends the name */
        if (colon && colon[1] == '\0')
            *colon = ';'; /* "Name;": an empty value ("Name:" would remove the header) */
        struct curl_slist *l = curl_slist_append(px->hdrs, line);
        free(line);
        if (!l)
            return -1;
        px->hdrs = l;
        p = eol + 2;
    }
    const char *removed[] = {"Expect:", has_accept ? NULL : "Accept:"};
    for (size_t i = 0; i < 2; i++) {
        struct curl_slist *l = removed[i] ? curl_slist_append(px->hdrs, removed[i]) : px->hdrs;
        if (!l)
            return -1;
        px->hdrs = l;
    }
    return 0;
}

/* The libcurl transfer of px (its handle from the pool, the options, the headers, the method
 * and the body). 0, or -1 out of memory. */
static int px_setup_curl(struct px_http *px, struct rk_req *r, const struct rk_buf *lines,
                         int has_accept)
{
    if (px_curl_headers(px, lines, has_accept) != 0)
        return -1;
    px->curl = rk_relay_curl_get(px->url);
    if (!px->curl)
        return -1;
    CURL *c = px->curl;
    curl_easy_setopt(c, CURLOPT_URL, px->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_HTTP_CONTENT_DECODING, 0L);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)px->connect_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, px->hdrs);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, rk_px_header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, px);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, rk_px_write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, px);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, rk_px_progress_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, px);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, px->errbuf);
    int stream_body = 0;
    px_setup_method(px, r, &stream_body);
    if (stream_body && !(px->req = rk_bytepipe_new(PX_PIPE_BYTES)))
        return -1;
    return 0;
}

/* The request pipe has room again (the transfer thread): resume the client. */
static void px_room_cb(void *ctx)
{
    rk_req_resume(ctx);
}

/* One chunk of client body (on the event loop): into the request pipe as far
 * as it has room; the rest is kept and the connection suspended until the
 * transfer drained the pipe. Once the upstream answered early, the rest of the
 * body is read and dropped so the answer can be relayed on this connection.
 * (NULL, 0): the end of the body. */
int rk_relay_http_body(struct rk_req *r, const char *data, size_t len)
{
    struct px_http *px = r->route_ctx;
    if (!px || !px->req)
        return 0;
    if (!data) {
        rk_bytepipe_close(px->req);
        return 0;
    }
    pthread_mutex_lock(&px->mu);
    int discard = px->discard_body;
    pthread_mutex_unlock(&px->mu);
    if (discard)
        return 0;
    /* One writer: the room only grows until we write, so this never waits. */
    size_t take = rk_bytepipe_room(px->req);
    if (take > len)
        take = len;
    if (take == 0 && rk_bytepipe_aborted(px->req)) {
        pthread_mutex_lock(&px->mu);
        discard = px->discard_body;
        pthread_mutex_unlock(&px->mu);
        return discard ? 0 : 1;
    }
    if (take > 0 && rk_bytepipe_write(px->req, data, take) != 0) {
        pthread_mutex_lock(&px->mu);
        discard = px->discard_body;
        pthread_mutex_unlock(&px->mu);
        return discard ? 0 : 1;
    }
    if (take < len) {
        r->body_kept = len - take;
        rk_req_suspend(r);
        if (rk_bytepipe_notify_room(px->req, PX_PIPE_BYTES / 4, px_room_cb, r))
            rk_req_resume(r);
    }
    return 0;
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

/* Body complete (on a worker): answer as soon as the upstream head is there;
 * until then the request is deferred and the transfer thread answers it. */
void rk_relay_http_handler(struct rk_req *r)
{
    struct px_http *px = r->route_ctx;
    if (r->responded || !px)
        return;
    if (px->req)
        rk_bytepipe_close(px->req);
    pthread_mutex_lock(&px->mu);
    int ready = (px->head_done && !px->whole) || px->finished || px->cancel;
    if (!ready) {
        rk_req_defer(r); /* before the transfer thread can see the waiter */
        px->waiter = r;
    }
    pthread_mutex_unlock(&px->mu);
    if (ready)
        rk_px_answer(r, px);
}

/* The whole body of a complete small answer (px->whole), read from the response pipe into one
 * buffer of its announced length. Returns 0, -1 out of memory, -2 when the pipe does not hold
 * exactly that length (libcurl checks it, so this is a defect, answered as an upstream error). */
static int px_take_whole(struct px_http *px, char **out, size_t *len)
{
    size_t want = px->whole_len;
    if (px->whole_buf) { /* written in place by the HTTP/1.1 client */
        if (px->whole_got != want)
            return -2;
        *out = px->whole_buf;
        *len = want;
        px->whole_buf = NULL;
        return 0;
    }
    char *buf = malloc(want + 1); /* +1: never malloc(0) */
    if (!buf)
        return -1;
    size_t got = 0;
    ssize_t n;
    while (got < want && (n = rk_bytepipe_try_read(px->resp, buf + got, want - got)) > 0)
        got += (size_t)n;
    char extra;
    if (got != want || rk_bytepipe_try_read(px->resp, &extra, 1) > 0) {
        free(buf);
        return -2;
    }
    *out = buf;
    *len = got;
    return 0;
}

void rk_px_answer(struct rk_req *r, struct px_http *px)
{
    pthread_mutex_lock(&px->mu);
    int head = px->head_done && !px->head_too_big;
    int cancelled = px->cancel;
    /* A small answer that arrived complete goes out in one buffer. */
    int whole = head && px->whole && px->finished && px->result == CURLE_OK;
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

    if (px->head_oom) {
        r->outcome = "upstream_error";
        rk_reply_detail(r, 500, "out of memory");
        return;
    }
    /* The transfer no longer touches the head once head_done is set. */
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
    /* MHD allocates the block with the response: a small answer of known length gets a block
     * its size (one reader call), not 32 KiB per request. */
    size_t block = PX_REPLY_BLOCK;
    if (size != MHD_SIZE_UNKNOWN && size < block)
        block = size < 1024 ? 1024 : (size_t)size;
    struct MHD_Response *resp;
    if (whole) {
        size_t len = 0;
        char *body = NULL;
        int rc = px_take_whole(px, &body, &len);
        if (rc != 0) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s: %s", r->route->fail_message,
                     rc == -1 ? "out of memory"
                              : "the application's answer does not match its Content-Length");
            r->outcome = "upstream_error";
            rk_reply_detail(r, rc == -1 ? 500 : 502, msg);
            return;
        }
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (!resp)
            free(body);
    } else {
        resp =
            MHD_create_response_from_callback(size, block, rk_px_reader, px, rk_px_response_free);
        if (resp) {
            pthread_mutex_lock(&px->mu);
            px->refs++; /* the response's: rk_px_response_free drops it */
            pthread_mutex_unlock(&px->mu);
        }
    }
    if (!resp) {
        rk_reply_detail(r, 500, "out of memory");
        return;
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
        .flags = (fl) | RK_ROUTE_SANDBOX_PARAM | RK_ROUTE_LOOP_FIRST                               \
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
    /* E2B: a sandbox port other than envd's named by E2b-Sandbox-Id/-Port, on any path
     * (docs/e2b.md); chosen by the header before every path route. */
    {.method = "*",
     .pattern = "/{*}",
     .name = "e2b_port_http",
     .body_mode = RK_BODY_STREAM,
     .begin = rk_relay_http_begin,
     .body = rk_relay_http_body,
     .handler = rk_relay_http_handler,
     .fail_message = "http proxy failed",
     .shape = RK_SHAPE_SANDBOX_RESPONSE,
     .flags = RK_ROUTE_E2B_PORT,
     .select_header = "E2b-Sandbox-Port",
     .select_not = "49983"},
    {.method = "GET",
     .pattern = "/{*}",
     .name = "e2b_port_ws",
     .handler = rk_relay_ws_handler,
     .websocket = 1,
     .fail_message = "websocket proxy failed",
     .shape = RK_SHAPE_SANDBOX_RESPONSE,
     .flags = RK_ROUTE_E2B_PORT,
     .select_header = "E2b-Sandbox-Port",
     .select_not = "49983"},
    {.pattern = NULL},
};
