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
 * libmicrohttpd's upgrade support (the upgrade path of upgrade_thread.h,
 * shared with the portforward relay). Bytes are relayed both ways with
 * poll() until one side ends: no frame is parsed or rebuilt, so text,
 * binary, fragments, ping/pong, close codes and multi-MiB frames pass
 * unchanged. Only the frame boundaries of the upstream->client direction are
 * tracked, so that when the daemon starts draining a close 1001 can be
 * inserted between frames.
 *
 * Errors are reported as WebSocket close frames after accepting the client
 * (ROCK closes before accepting, which loses the code): 1008 for port policy,
 * 1011 "Proxy error: <text>" for everything else. A malformed handshake is
 * answered with HTTP 400 instead.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP, getrandom */
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
#include "relay/upgrade_thread.h"

/** Relay buffer per direction. */
#define WS_BUF_BYTES (64 * 1024)
/** Largest upstream handshake answer accepted. */
#define WS_MAX_HEAD_BYTES (16 * 1024)
/** Budget for the client's headers copied into the upstream handshake (noVNC-like
 *  servers have small header buffers). */
#define WS_MAX_CLIENT_HEADER_BYTES (6 * 1024)
/** How long the drain waits for a frame boundary before it cuts the session. */
#define WS_CLOSE_WAIT_MS 2000

/* State of one WebSocket request: the request's until a relay thread takes it. */
struct ws_relay {
    struct rk_upgrade up; /* first: the upgrade path's part */
    CURL *curl;
    curl_socket_t up_fd;
    char *leftover; /* upstream bytes read past its 101 head */
    size_t leftover_len;
    int port;
};

/* rk_upgrade release: free the whole state. */
static void ws_release(struct rk_upgrade *up)
{
    struct ws_relay *ws = (struct ws_relay *)up;
    if (ws->curl)
        curl_easy_cleanup(ws->curl);
    free(ws->leftover);
    free(ws);
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

/* One direction's buffer. */
struct ws_buf {
    char *data;
    size_t cap, len, off;
};

/* The byte relay between the upgraded client socket and the upstream. */
static void ws_relay_loop(struct ws_relay *ws, int sock, const char *extra, size_t extra_len)
{
    struct ws_buf c2u = {0}, u2c = {0};
    c2u.cap = extra_len > WS_BUF_BYTES ? extra_len : WS_BUF_BYTES;
    u2c.cap = ws->leftover_len > WS_BUF_BYTES ? ws->leftover_len : WS_BUF_BYTES;
    c2u.data = malloc(c2u.cap);
    u2c.data = malloc(u2c.cap);
    if (!c2u.data || !u2c.data)
        goto done;
    if (extra_len)
        memcpy(c2u.data, extra, extra_len);
    c2u.len = extra_len;
    if (ws->leftover_len)
        memcpy(u2c.data, ws->leftover, ws->leftover_len);
    u2c.len = ws->leftover_len;

    struct rk_ws_tracker track;
    memset(&track, 0, sizeof track);
    int c_eof = 0, u_eof = 0, c_dead = 0;
    int64_t stop_since = 0;
    for (;;) {
        int progress = 0;
        if (!c_eof && c2u.len == 0) {
            ssize_t n = recv(sock, c2u.data, c2u.cap, 0);
            if (n > 0) {
                c2u.len = (size_t)n;
                c2u.off = 0;
                progress = 1;
            } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                c_eof = 1;
            }
        }
        if (c2u.off < c2u.len) {
            size_t sent = 0;
            CURLcode cc = curl_easy_send(ws->curl, c2u.data + c2u.off, c2u.len - c2u.off, &sent);
            if (cc == CURLE_OK && sent > 0) {
                c2u.off += sent;
                progress = 1;
                if (c2u.off == c2u.len)
                    c2u.len = c2u.off = 0;
            } else if (cc != CURLE_AGAIN && cc != CURLE_OK) {
                u_eof = 1;
                c2u.len = c2u.off = 0;
            }
        }
        if (!u_eof && u2c.len == 0) {
            size_t n = 0;
            CURLcode cc = curl_easy_recv(ws->curl, u2c.data, u2c.cap, &n);
            if (cc == CURLE_OK && n > 0) {
                u2c.len = n;
                u2c.off = 0;
                progress = 1;
            } else if (cc != CURLE_AGAIN) {
                u_eof = 1;
            }
        }
        if (u2c.off < u2c.len && !c_dead) {
            ssize_t n = send(sock, u2c.data + u2c.off, u2c.len - u2c.off, MSG_NOSIGNAL);
            if (n > 0) {
                rk_ws_track(&track, (unsigned char *)u2c.data + u2c.off, (size_t)n);
                u2c.off += (size_t)n;
                progress = 1;
                if (u2c.off == u2c.len)
                    u2c.len = u2c.off = 0;
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                c_dead = 1;
            }
        }
        if (c_dead || (c_eof && c2u.len == 0) || (u_eof && u2c.len == 0))
            break;
        /* WebSocket sessions never finish by themselves: end them as soon
         * as the drain starts, between two frames, with 1001. */
        if (ws->up.app->draining || ws->up.app->stopping) {
            if (!stop_since)
                stop_since = rk_now_ms();
            if (u2c.len == 0 && rk_ws_at_boundary(&track)) {
                rk_upgrade_close_client(sock, 1001, "server shutting down");
                break;
            }
            if (rk_now_ms() - stop_since > WS_CLOSE_WAIT_MS)
                break;
        }
        if (progress)
            continue;
        struct pollfd pfd[2] = {{.fd = sock, .events = 0}, {.fd = ws->up_fd, .events = 0}};
        if (!c_eof && c2u.len == 0)
            pfd[0].events |= POLLIN;
        if (u2c.len > 0)
            pfd[0].events |= POLLOUT;
        if (!u_eof && u2c.len == 0)
            pfd[1].events |= POLLIN;
        if (c2u.len > 0)
            pfd[1].events |= POLLOUT;
        poll(pfd, 2, 250);
    }
    if (!c_dead)
        shutdown(sock, SHUT_RDWR);
done:
    free(c2u.data);
    free(u2c.data);
}

/* rk_upgrade serve: relay the upgraded connection until either side ends. */
static void ws_serve(struct rk_upgrade *up, int sock, const char *extra, size_t extra_len)
{
    struct ws_relay *ws = (struct ws_relay *)up;
    if (!ws->curl)
        rk_upgrade_close_client(sock, 1011, "Proxy error: no upstream");
    else
        ws_relay_loop(ws, sock, extra, extra_len);
    if (ws->curl) {
        curl_easy_cleanup(ws->curl);
        ws->curl = NULL;
    }
}

/* Allocate the state and attach it to the request. */
static struct ws_relay *ws_new(struct rk_req *r)
{
    struct ws_relay *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->up.serve = ws_serve;
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
    if (rk_relay_target(r, RK_OP_PROXY_WS, ws->port, RK_PROXY_WS, &pt, NULL) != RK_OK) {
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
