/* SPDX-License-Identifier: Apache-2.0 */
/*
 * WebSocket service proxy (§5.21-5.23):
 *   WS /apis/envs/sandbox/v1/sandboxes/{id}/proxy/{path}   port as in §5.20,
 *                                                          range 1024-65535, not 22
 *   WS /apis/envs/sandbox/v1/sandboxes/{id}/vnc[/{path}]   port 8006, no client headers
 * (WS .../sandboxes/{id}/portforward?port=N is a TCP tunnel: relay_portforward.c.)
 *
 * The upstream connection is a libcurl CONNECT_ONLY handle (DNS, connect
 * timeout and TLS for https endpoints), over which the upstream handshake is
 * written and read by hand; only then is the client answered (101) through
 * libmicrohttpd's upgrade support (the upgrade path of upgrade.h, shared
 * with the portforward relay). Bytes are then relayed both ways on a relay
 * loop (relay_session.h) until one side ends: no frame is parsed or rebuilt,
 * so text, binary, fragments, ping/pong, close codes and multi-MiB frames
 * pass unchanged. Only the frame boundaries of the upstream->client direction
 * are tracked, so that when the daemon starts draining a close 1001 can be
 * inserted between frames. A plain (ws://) upstream socket is taken over from
 * libcurl once the handshake is done (the handle is freed: an open relay costs
 * its socket, not a libcurl handle); a TLS (wss://) one stays with libcurl,
 * which encrypts (curl_easy_send/recv, non-blocking).
 *
 * Errors are reported as WebSocket close frames after accepting the client
 * (ROCK closes before accepting, which loses the code): 1008 for port policy,
 * 1011 "Proxy error: <text>" for everything else. A malformed handshake is
 * answered with HTTP 400 instead.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getrandom */
#endif
#include <curl/curl.h>
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/dispatch.h"
#include "engine/http_server.h"
#include "engine/reply.h"
#include "host/host.h"
#include "obs/log.h"
#include "relay/proxy_guard.h"
#include "relay/relay_common.h"
#include "relay/relay_session.h"
#include "relay/upgrade.h"

/** Largest upstream handshake answer accepted. */
#define WS_MAX_HEAD_BYTES (16 * 1024)
/** Budget for the client's headers copied into the upstream handshake (noVNC-like
 *  servers have small header buffers). */
#define WS_MAX_CLIENT_HEADER_BYTES (6 * 1024)
/** How long the drain waits for a frame boundary before it cuts the session. */
#define WS_CLOSE_WAIT_MS 2000

/* State of one WebSocket request: the request's until a relay loop takes it. */
struct ws_relay {
    struct rk_upgrade up; /* first: the upgrade path's part */
    CURL *curl;           /* wss:// upstream (or until the handshake is done) */
    curl_socket_t up_fd;
    int own_fd;     /* the socket was taken over from libcurl: ours to close */
    char *leftover; /* upstream bytes read past its 101 head */
    size_t leftover_len;
    int port;
    struct rk_ws_tracker track; /* frames of the upstream->client direction */
};

/* rk_upgrade release: free the whole state. */
static void ws_release(struct rk_upgrade *up)
{
    struct ws_relay *ws = (struct ws_relay *)up;
    if (ws->curl)
        curl_easy_cleanup(ws->curl);
    if (ws->own_fd && ws->up_fd != CURL_SOCKET_BAD)
        close(ws->up_fd);
    free(ws->leftover);
    free(ws);
}

/* libcurl's close of the upstream socket: not when it was taken over. */
static int ws_close_socket(void *clientp, curl_socket_t fd)
{
    struct ws_relay *ws = clientp;
    return ws->own_fd ? 0 : close(fd);
}

/* Wait for readiness of the upstream socket until the absolute deadline. */
static int wait_upstream(curl_socket_t fd, short events, int64_t until)
{
    int64_t left = until - rk_now_ms();
    if (left <= 0)
        return -1;
    struct pollfd pfd = {.fd = fd, .events = events};
    return poll(&pfd, 1, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR ? -1 : 0;
}

/* Context for building the upstream handshake from the client's headers. */
struct ws_hdr_ctx {
    struct rk_buf *req;
    const struct rk_proxy_target *pt;
    size_t budget;
    int dropped;
    struct rk_buf *protocols; /* the client's Sec-WebSocket-Protocol values */
    const struct rk_req *r;   /* for proxy_guard.c */
};

/* 1 if an endpoint header overrides name. */
static int endpoint_has(const struct rk_proxy_target *pt, const char *name)
{
    for (size_t i = 0; i < pt->headers_len; i++)
        if (pt->headers[i].key && rk_strcaseeq(pt->headers[i].key, name))
            return 1;
    return 0;
}

/* Collect subprotocols and the client's non-reserved headers. */
static void ws_client_header(void *ud, const char *name, const char *value)
{
    struct ws_hdr_ctx *c = ud;
    if (!name)
        return;
    if (rk_strcaseeq(name, "sec-websocket-protocol")) {
        if (c->protocols->len)
            rk_buf_append(c->protocols, ", ", 2);
        rk_buf_append(c->protocols, value, strlen(value));
        return;
    }
    if (!c->req || rk_relay_ws_blocked_header(name) || endpoint_has(c->pt, name) ||
        rk_proxy_guard_client_header(c->r, c->pt, name) || strpbrk(value, "\r\n"))
        return;
    size_t n = strlen(name) + strlen(value) + 4;
    if (n > c->budget) {
        c->dropped++;
        return;
    }
    c->budget -= n;
    rk_buf_printf(c->req, "%s: %s\r\n", name, value);
}

/* Find a header value in a raw HTTP head (case-insensitive name); malloc'd. Hand-written:
 * the 101 answer arrives on a CONNECT_ONLY connection, whose bytes libcurl does not parse. */
static char *head_value(const char *head, const char *name)
{
    size_t nlen = strlen(name);
    const char *p = strstr(head, "\r\n");
    while (p && p[2] != '\r') {
        p += 2;
        const char *e = strstr(p, "\r\n");
        if (!e)
            break;
        if ((size_t)(e - p) > nlen && strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
            const char *v = p + nlen + 1;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = e;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            return rk_strdup_printf("%.*s", (int)(ve - v), v);
        }
        p = e;
    }
    return NULL;
}

/* Open the upstream WebSocket: connect, send the handshake, read the 101.
 * On failure returns -1 with a reason in why. *chosen gets the upstream's
 * subprotocol (malloc'd) or NULL. */
static int ws_open_upstream(struct ws_relay *ws, struct rk_req *r, const struct rk_proxy_target *pt,
                            const char *fwd, int vnc, char **chosen, char *why, size_t whylen)
{
    *chosen = NULL;
    struct rk_url_parts u;
    if (rk_relay_split_url(pt->base_url, &u) != 0) {
        snprintf(why, whylen, "the operator returned an unusable endpoint address");
        return -1;
    }
    const struct rk_config *cfg = ws->up.app->cfg;
    int rc = -1;
    char errbuf[CURL_ERROR_SIZE] = "";
    struct rk_buf req = {0};
    struct rk_buf protocols = {0};
    struct rk_buf head = {0};
    char *target = NULL, *accept = NULL, *proto = NULL;
    req.cap = 64 * 1024;
    protocols.cap = 4096;

    char *url = rk_strdup_printf("%s://%s/", u.tls ? "https" : "http", u.hostport);
    ws->curl = curl_easy_init();
    if (!ws->curl) {
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    curl_easy_setopt(ws->curl, CURLOPT_URL, url);
    curl_easy_setopt(ws->curl, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(ws->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(ws->curl, CURLOPT_PROXY, "");
    curl_easy_setopt(ws->curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(ws->curl, CURLOPT_CLOSESOCKETFUNCTION, ws_close_socket);
    curl_easy_setopt(ws->curl, CURLOPT_CLOSESOCKETDATA, ws);
    curl_easy_setopt(ws->curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(ws->curl, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)cfg->proxy.connect_timeout_s * 1000);
    CURLcode cc = curl_easy_perform(ws->curl);
    curl_easy_setopt(ws->curl, CURLOPT_ERRORBUFFER, NULL);
    if (cc != CURLE_OK) {
        snprintf(why, whylen, "cannot connect to the application on port %d: %s", ws->port,
                 errbuf[0] ? errbuf : curl_easy_strerror(cc));
        goto out;
    }
    if (curl_easy_getinfo(ws->curl, CURLINFO_ACTIVESOCKET, &ws->up_fd) != CURLE_OK ||
        ws->up_fd == CURL_SOCKET_BAD) {
        snprintf(why, whylen, "no upstream socket");
        goto out;
    }

    /* The handshake request. */
    unsigned char nonce[16];
    if (getrandom(nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) {
        snprintf(why, whylen, "no randomness for the handshake key");
        goto out;
    }
    char key[25], expect[29];
    if (rk_base64(nonce, sizeof nonce, key) != 0 || rk_ws_accept_key(key, expect) != 0) {
        snprintf(why, whylen, "cannot compute the handshake key");
        goto out;
    }
    target = rk_relay_ws_request_target(&u, fwd);
    rk_buf_printf(&req,
                  "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n",
                  target, u.hostport, key);
    struct ws_hdr_ctx hc = {vnc ? NULL : &req, pt, WS_MAX_CLIENT_HEADER_BYTES, 0, &protocols, r};
    rk_req_header_each(r, ws_client_header, &hc);
    if (hc.dropped)
        rk_warn("websocket proxy to sandbox %s: %d client header(s) left out (size budget)",
                ws->up.sandbox_id, hc.dropped);
    int client_offered = protocols.len > 0;
    rk_buf_printf(&req, "Sec-WebSocket-Protocol: %s\r\n",
                  client_offered ? rk_buf_cstr(&protocols) : "binary, base64");
    for (size_t i = 0; i < pt->headers_len; i++) {
        const char *name = pt->headers[i].key;
        const char *value = pt->headers[i].value ? pt->headers[i].value : "";
        if (!name || rk_relay_ws_blocked_header(name) || rk_proxy_guard_endpoint_header(pt, i) ||
            strpbrk(value, "\r\n"))
            continue;
        rk_buf_printf(&req, "%s: %s\r\n", name, value);
    }
    if (rk_buf_append(&req, "\r\n", 2) != 0) {
        snprintf(why, whylen, "handshake request too large");
        goto out;
    }

    int64_t until = rk_now_ms() + cfg->proxy.timeout_s * 1000LL;
    size_t off = 0;
    while (off < req.len) {
        size_t n = 0;
        cc = curl_easy_send(ws->curl, req.data + off, req.len - off, &n);
        if (cc == CURLE_OK) {
            off += n;
        } else if (cc != CURLE_AGAIN || wait_upstream(ws->up_fd, POLLOUT, until) != 0) {
            snprintf(why, whylen, "cannot send the handshake: %s",
                     cc == CURLE_AGAIN ? "timeout" : curl_easy_strerror(cc));
            goto out;
        }
    }

    /* The answer head, bounded. */
    head.cap = WS_MAX_HEAD_BYTES;
    char chunk[4096];
    const char *end = NULL;
    while (!end) {
        size_t n = 0;
        cc = curl_easy_recv(ws->curl, chunk, sizeof chunk, &n);
        if (cc == CURLE_AGAIN) {
            if (wait_upstream(ws->up_fd, POLLIN, until) != 0) {
                snprintf(why, whylen, "the application did not answer the WebSocket handshake");
                goto out;
            }
            continue;
        }
        if (cc != CURLE_OK || n == 0) {
            snprintf(why, whylen, "the application closed the connection during the handshake");
            goto out;
        }
        if (rk_buf_append(&head, chunk, n) != 0) {
            snprintf(why, whylen, "the application's handshake answer is too large");
            goto out;
        }
        rk_buf_cstr(&head);
        end = strstr(head.data, "\r\n\r\n");
    }
    size_t head_len = (size_t)(end + 4 - head.data);
    int status = 0;
    if (strncmp(head.data, "HTTP/1.", 7) == 0 && strlen(head.data) > 12)
        status = atoi(head.data + 9);
    if (status != 101) {
        snprintf(why, whylen, "the application refused the WebSocket handshake (HTTP %d)", status);
        goto out;
    }
    accept = head_value(head.data, "Sec-WebSocket-Accept");
    if (!accept || strcmp(accept, expect) != 0) {
        snprintf(why, whylen, "the application sent a wrong Sec-WebSocket-Accept");
        goto out;
    }
    proto = head_value(head.data, "Sec-WebSocket-Protocol");
    if (proto && client_offered) {
        *chosen = proto;
        proto = NULL;
    }
    if (head.len > head_len) {
        ws->leftover_len = head.len - head_len;
        ws->leftover = malloc(ws->leftover_len);
        if (!ws->leftover) {
            snprintf(why, whylen, "out of memory");
            goto out;
        }
        memcpy(ws->leftover, head.data + head_len, ws->leftover_len);
    }
    if (!u.tls) { /* plain: the socket is all the relay needs */
        ws->own_fd = 1;
        curl_easy_cleanup(ws->curl);
        ws->curl = NULL;
    }
    rc = 0;
out:
    if (rc != 0 && ws->curl) {
        curl_easy_cleanup(ws->curl);
        ws->curl = NULL;
    }
    free(url);
    free(target);
    free(accept);
    free(proto);
    rk_buf_free(&req);
    rk_buf_free(&protocols);
    rk_buf_free(&head);
    rk_relay_url_parts_free(&u);
    return rc;
}

/* ---- the relay on a loop (relay_session.h) ------------------------------------------ */

/* The upstream socket. */
static int ws_upstream_fd(struct rk_upgrade *up)
{
    struct ws_relay *ws = (struct ws_relay *)up;
    return ws->up_fd == CURL_SOCKET_BAD ? -1 : (int)ws->up_fd;
}

/* recv(2)-like read of the upstream: the socket, or libcurl for wss://. */
static ssize_t ws_up_recv(struct rk_upgrade *up, void *buf, size_t len)
{
    struct ws_relay *ws = (struct ws_relay *)up;
    if (!ws->curl)
        return recv(ws->up_fd, buf, len, 0);
    size_t n = 0;
    CURLcode cc = curl_easy_recv(ws->curl, buf, len, &n);
    if (cc == CURLE_OK)
        return (ssize_t)n;
    errno = cc == CURLE_AGAIN ? EAGAIN : EIO;
    return -1;
}

/* send(2)-like write to the upstream. */
static ssize_t ws_up_send(struct rk_upgrade *up, const void *buf, size_t len)
{
    struct ws_relay *ws = (struct ws_relay *)up;
    if (!ws->curl)
        return send(ws->up_fd, buf, len, MSG_NOSIGNAL);
    size_t n = 0;
    CURLcode cc = curl_easy_send(ws->curl, buf, len, &n);
    if (cc == CURLE_OK && n > 0)
        return (ssize_t)n;
    errno = cc == CURLE_AGAIN || cc == CURLE_OK ? EAGAIN : EIO;
    return -1;
}

/* WebSocket sessions never finish by themselves: during the drain, close with
 * 1001 as soon as the upstream's stream is between two frames. */
static void ws_close_if_between_frames(struct rk_session *s)
{
    struct ws_relay *ws = (struct ws_relay *)rk_session_up(s);
    if (rk_session_draining(s) && rk_ws_at_boundary(&ws->track))
        rk_session_close(s, 1001, "server shutting down", 1);
}

/* Upstream bytes that came with its 101 go first. */
static void ws_start(struct rk_session *s)
{
    struct ws_relay *ws = (struct ws_relay *)rk_session_up(s);
    if (!ws->leftover_len)
        return;
    rk_ws_track(&ws->track, (unsigned char *)ws->leftover, ws->leftover_len);
    rk_session_to_client(s, ws->leftover, ws->leftover_len);
    free(ws->leftover);
    ws->leftover = NULL;
    ws->leftover_len = 0;
}

/* Client bytes go upstream as they are. */
static void ws_from_client(struct rk_session *s, unsigned char *data, size_t len)
{
    rk_session_to_upstream(s, data, len);
}

/* Upstream bytes go to the client as they are; their frame boundaries are noted. */
static void ws_from_upstream(struct rk_session *s, unsigned char *data, size_t len)
{
    struct ws_relay *ws = (struct ws_relay *)rk_session_up(s);
    rk_ws_track(&ws->track, data, len);
    rk_session_to_client(s, data, len);
    ws_close_if_between_frames(s);
}

/* Either side's end ends the session once what the other side is owed is written. */
static void ws_upstream_end(struct rk_session *s, int failed)
{
    (void)failed;
    rk_session_finish(s);
}

static void ws_client_end(struct rk_session *s)
{
    rk_session_finish(s);
}

/* The drain: 1001 between frames, or cut after WS_CLOSE_WAIT_MS. */
static void ws_drain(struct rk_session *s)
{
    ws_close_if_between_frames(s);
    if (!rk_session_closing(s))
        rk_session_cut_at(s, rk_now_ms() + WS_CLOSE_WAIT_MS);
}

static const struct rk_relay_kind ws_kind = {
    .up_headroom = 0,
    .answers_client = 0,
    .upstream_fd = ws_upstream_fd,
    .up_recv = ws_up_recv,
    .up_send = ws_up_send,
    .start = ws_start,
    .from_client = ws_from_client,
    .from_upstream = ws_from_upstream,
    .upstream_end = ws_upstream_end,
    .client_end = ws_client_end,
    .drain = ws_drain,
};

/* Allocate the state and attach it to the request. */
static struct ws_relay *ws_new(struct rk_req *r)
{
    struct ws_relay *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->up.kind = &ws_kind;
    ws->up.release = ws_release;
    ws->up_fd = CURL_SOCKET_BAD;
    rk_upgrade_attach(r, &ws->up, "websocket proxy");
    return ws;
}

/* Choose the port and sub-path of a proxy/vnc WebSocket; records a 1008
 * close on policy errors and returns -1. */
static int ws_port(struct rk_req *r, struct ws_relay *ws, int vnc, const char **fwd)
{
    const char *raw_full = rk_req_raw_path(r);
    size_t plen = strcspn(raw_full, "?");
    char *raw_path = rk_strdup_printf("%.*s", (int)plen, raw_full);
    const char *rest = rk_relay_raw_rest(raw_path, rk_relay_pattern_segments(r->route->pattern));
    if (r->route->flags & RK_ROUTE_E2B_PORT) /* the whole path; sandbox and port from headers */
        rest = raw_path[0] == '/' ? raw_path + 1 : raw_path;
    /* rest points into raw_path; keep the copy in the arena. */
    *fwd = rk_arena_strdup(r->call, rest ? rest : "");
    free(raw_path);
    if (r->route->flags & RK_ROUTE_E2B_PORT) {
        char err[256];
        long long p = 0;
        if (rk_relay_e2b_target(r, &p, err, sizeof err) != 0 ||
            rk_relay_check_port_ws(p, err, sizeof err) != 0) {
            rk_upgrade_fail(&ws->up, 1008, "%s", err);
            return -1;
        }
        snprintf(ws->up.sandbox_id, sizeof ws->up.sandbox_id, "%s", r->params[0]);
        ws->port = (int)p;
        return 0;
    }
    if (vnc) {
        ws->port = RK_RELAY_VNC_PORT;
        return 0;
    }
    struct rk_port_choice pc;
    char err[256];
    if (rk_relay_select_port(*fwd, rk_req_header(r, "X-ROCK-Target-Port"),
                             rk_req_query(r, "rock_target_port"), RK_RELAY_DEFAULT_PORT, &pc, err,
                             sizeof err) != RK_PORTSEL_OK ||
        rk_relay_check_port_ws(pc.port, err, sizeof err) != 0) {
        rk_upgrade_fail(&ws->up, 1008, "%s", err);
        return -1;
    }
    ws->port = (int)pc.port;
    *fwd = pc.fwd;
    return 0;
}

/* WS proxy/vnc: open the upstream WebSocket, then accept the client. */
void rk_relay_ws_handler(struct rk_req *r)
{
    if (rk_upgrade_check_handshake(r) != 0)
        return;
    struct ws_relay *ws = ws_new(r);
    if (!ws) {
        rk_reply_detail(r, 500, "out of memory");
        return;
    }
    int vnc = (r->route->flags & RK_ROUTE_VNC) != 0;
    const char *fwd = "";
    char *chosen = NULL;
    if (ws_port(r, ws, vnc, &fwd) != 0)
        goto accept;
    if (rk_relay_has_dot_segment(fwd)) {
        rk_upgrade_fail(&ws->up, 1011, "Proxy error: %s", RK_RELAY_TRAVERSAL_MSG);
        goto accept;
    }
    struct rk_proxy_target pt;
    if (rk_relay_target(r, RK_OP_PROXY_WS, ws->port, RK_PROXY_WS, &pt, &ws->up.idle_minutes) !=
        RK_OK) {
        rk_upgrade_fail(&ws->up, 1011, "Proxy error: %s", rk_call_error_text(r->call));
        goto accept;
    }
    char why[CURL_ERROR_SIZE + 128];
    if (ws_open_upstream(ws, r, &pt, fwd, vnc, &chosen, why, sizeof why) != 0) {
        rk_info("websocket proxy to sandbox %s port %d failed: %s", ws->up.sandbox_id, ws->port,
                why);
        rk_upgrade_fail(&ws->up, 1011, "Proxy error: %s", why);
        goto accept;
    }
accept:
    rk_upgrade_accept(r, &ws->up, ws->up.close_code ? NULL : chosen);
    free(chosen);
}
