/* SPDX-License-Identifier: Apache-2.0 */
/*
 * WebSocket port forwarding (§5.23):
 *   WS /apis/envs/sandbox/v1/sandboxes/{id}/portforward?port=N
 *
 * Order: the port query (HTTP 400 when missing or not an integer), the
 * handshake, the port policy (close 1008), the gate (RK_CAP_PORT_FORWARD;
 * close 1011 "Proxy error: <refusal>"), the plugin's proxy_target(kind
 * RK_PROXY_TCP) which answers tcp://host:port, a TCP connect bounded by
 * proxy.connect_timeout; only then is the client accepted (101). The tunnel
 * carries the payload of the client's data frames (binary or text) to the
 * TCP stream and the stream's bytes back as binary frames, as ROCK's
 * portforward does. Pings are answered; a close from either side, the end of
 * the TCP stream (close 1000) or the daemon's drain (close 1001) ends it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/app.h"
#include "config/config.h"
#include "domain/dispatch.h"
#include "engine/envelope.h"
#include "engine/reply.h"
#include "host/host.h"
#include "engine/http_server.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "relay/relay_common.h"
#include "relay/upgrade_thread.h"
#include "base/util.h"

/** Bytes read from either side per step (a server frame carries at most this). */
#define PF_CHUNK 32768
/** How long one frame or chunk may take to be written to a slow peer. */
#define PF_SEND_TIMEOUT_MS 30000
/** How long our close frame waits for the client's answer. */
#define PF_CLOSE_WAIT_MS 2000
/** Largest payload of a control frame (RFC 6455 §5.5). */
#define PF_MAX_CONTROL 125

/* State of one portforward request, owned by the request (route_ctx). */
struct pf_state {
    struct rk_app *app;
    int tcp_fd;             /* connected upstream, -1 until then */
    uint16_t close_code;    /* non-zero: accept, send this close, end */
    char close_reason[600]; /* cut to 123 bytes when framed */
};

/* Free the state when the request ends. */
static void pf_free(struct rk_req *r)
{
    struct pf_state *pf = r->route_ctx;
    r->route_ctx = NULL;
    if (!pf)
        return;
    if (pf->tcp_fd >= 0)
        close(pf->tcp_fd);
    free(pf);
}

/* Remember the close to send once the client is accepted. */
static void pf_fail(struct pf_state *pf, uint16_t code, const char *text)
{
    pf->close_code = code;
    snprintf(pf->close_reason, sizeof pf->close_reason, "%s", text);
}

/* Write all of buf to a non-blocking fd within timeout_ms. Returns 0 or -1. */
static int pf_send_all(int fd, const void *buf, size_t len, int timeout_ms)
{
    const char *p = buf;
    int64_t until = rk_now_ms() + timeout_ms;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        int64_t left = until - rk_now_ms();
        if (left <= 0)
            return -1;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        poll(&pfd, 1, (int)(left > 1000 ? 1000 : left));
    }
    return 0;
}

/* Send an unmasked server frame (FIN set) with opcode and payload. */
static int pf_send_frame(int sock, unsigned opcode, const void *data, size_t len)
{
    unsigned char hdr[10];
    size_t h = 0;
    hdr[h++] = (unsigned char)(0x80u | (opcode & 0x0fu));
    if (len < 126) {
        hdr[h++] = (unsigned char)len;
    } else if (len <= 0xffff) {
        hdr[h++] = 126;
        hdr[h++] = (unsigned char)(len >> 8);
        hdr[h++] = (unsigned char)len;
    } else {
        hdr[h++] = 127;
        for (int i = 7; i >= 0; i--)
            hdr[h++] = (unsigned char)((uint64_t)len >> (8 * i));
    }
    if (pf_send_all(sock, hdr, h, PF_SEND_TIMEOUT_MS) != 0)
        return -1;
    return len ? pf_send_all(sock, data, len, PF_SEND_TIMEOUT_MS) : 0;
}

/* Send our close frame and wait briefly for the client's answer. */
static void pf_close_client(int sock, uint16_t code, const char *reason)
{
    unsigned char frame[160];
    size_t n = rk_ws_close_frame(code, reason, frame, sizeof frame);
    if (pf_send_all(sock, frame, n, PF_CLOSE_WAIT_MS) != 0)
        return;
    int64_t until = rk_now_ms() + PF_CLOSE_WAIT_MS;
    char sink[512];
    for (;;) {
        ssize_t got = recv(sock, sink, sizeof sink, 0);
        if (got >= 0)
            return; /* the client's close frame (or EOF) */
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return;
        int64_t left = until - rk_now_ms();
        if (left <= 0)
            return;
        struct pollfd pfd = {.fd = sock, .events = POLLIN};
        poll(&pfd, 1, (int)left);
    }
}

/* Incremental parser of the client's (masked) frames. */
struct pf_parser {
    unsigned char hdr[14];
    size_t hdr_len, hdr_need; /* header bytes collected / needed */
    unsigned opcode;
    uint64_t remain;       /* payload bytes still to come */
    unsigned char mask[4]; /* the frame's masking key */
    uint64_t mask_pos;     /* payload offset, for the mask */
    unsigned char ctrl[PF_MAX_CONTROL];
    size_t ctrl_len;
};

/* What the client's bytes asked for. */
enum pf_event { PF_CONTINUE = 0, PF_CLIENT_CLOSE, PF_PROTOCOL_ERROR, PF_TCP_ERROR, PF_SEND_ERROR };

/* Handle a complete control frame. */
static enum pf_event pf_control(struct pf_parser *ps, int sock)
{
    if (ps->opcode == 0x9) /* ping -> pong with the same payload */
        return pf_send_frame(sock, 0xA, ps->ctrl, ps->ctrl_len) == 0 ? PF_CONTINUE : PF_SEND_ERROR;
    if (ps->opcode == 0x8) {
        /* Echo the client's code (1000 if it sent none), then end. */
        uint16_t code = ps->ctrl_len >= 2 ? (uint16_t)(ps->ctrl[0] << 8 | ps->ctrl[1]) : 1000;
        unsigned char frame[160];
        size_t n = rk_ws_close_frame(code, "", frame, sizeof frame);
        pf_send_all(sock, frame, n, PF_CLOSE_WAIT_MS);
        return PF_CLIENT_CLOSE;
    }
    return PF_CONTINUE; /* pong */
}

/* Feed bytes from the client; data payloads go to tcp_fd. */
static enum pf_event pf_feed(struct pf_parser *ps, int sock, int tcp_fd, unsigned char *p, size_t n)
{
    while (n > 0) {
        if (ps->hdr_need == 0 || ps->hdr_len < ps->hdr_need) {
            if (ps->hdr_need == 0)
                ps->hdr_need = 2;
            ps->hdr[ps->hdr_len++] = *p++;
            n--;
            if (ps->hdr_len == 2) {
                if (!(ps->hdr[1] & 0x80u))
                    return PF_PROTOCOL_ERROR; /* client frames must be masked */
                unsigned len7 = ps->hdr[1] & 0x7fu;
                ps->hdr_need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + 4;
            }
            if (ps->hdr_len < ps->hdr_need)
                continue;
            /* Header complete. */
            ps->opcode = ps->hdr[0] & 0x0fu;
            unsigned len7 = ps->hdr[1] & 0x7fu;
            size_t at = 2;
            uint64_t len = len7;
            if (len7 == 126) {
                len = (uint64_t)ps->hdr[2] << 8 | ps->hdr[3];
                at = 4;
            } else if (len7 == 127) {
                len = 0;
                for (int i = 0; i < 8; i++)
                    len = len << 8 | ps->hdr[2 + i];
                at = 10;
            }
            memcpy(ps->mask, ps->hdr + at, 4);
            ps->remain = len;
            ps->mask_pos = 0;
            ps->ctrl_len = 0;
            int control = (ps->opcode & 0x8u) != 0;
            if (control && (len > PF_MAX_CONTROL || !(ps->hdr[0] & 0x80u)))
                return PF_PROTOCOL_ERROR;
            if (!control && ps->opcode > 0x2)
                return PF_PROTOCOL_ERROR; /* reserved data opcode */
            if (len == 0) {
                ps->hdr_len = ps->hdr_need = 0;
                if (control) {
                    enum pf_event ev = pf_control(ps, sock);
                    if (ev != PF_CONTINUE)
                        return ev;
                }
            }
            continue;
        }
        /* Payload. */
        size_t take = ps->remain < n ? (size_t)ps->remain : n;
        for (size_t i = 0; i < take; i++)
            p[i] ^= ps->mask[(ps->mask_pos + i) & 3u];
        ps->mask_pos += take;
        if (ps->opcode & 0x8u) {
            memcpy(ps->ctrl + ps->ctrl_len, p, take);
            ps->ctrl_len += take;
        } else if (pf_send_all(tcp_fd, p, take, PF_SEND_TIMEOUT_MS) != 0) {
            return PF_TCP_ERROR;
        }
        p += take;
        n -= take;
        ps->remain -= take;
        if (ps->remain == 0) {
            ps->hdr_len = ps->hdr_need = 0;
            if (ps->opcode & 0x8u) {
                enum pf_event ev = pf_control(ps, sock);
                if (ev != PF_CONTINUE)
                    return ev;
            }
        }
    }
    return PF_CONTINUE;
}

/* The tunnel between the upgraded client socket and the TCP stream. */
static void pf_tunnel(struct pf_state *pf, int sock, const char *extra, size_t extra_len)
{
    unsigned char *buf = malloc(PF_CHUNK);
    if (!buf) {
        pf_close_client(sock, 1011, "Proxy error: out of memory");
        return;
    }
    struct pf_parser ps;
    memset(&ps, 0, sizeof ps);
    enum pf_event ev = PF_CONTINUE;
    /* Bytes the client sent right after its handshake. */
    while (extra_len > 0 && ev == PF_CONTINUE) {
        size_t k = extra_len < PF_CHUNK ? extra_len : PF_CHUNK;
        memcpy(buf, extra, k);
        ev = pf_feed(&ps, sock, pf->tcp_fd, buf, k);
        extra += k;
        extra_len -= k;
    }
    while (ev == PF_CONTINUE) {
        if (pf->app->draining || pf->app->stopping) {
            pf_close_client(sock, 1001, "server shutting down");
            break;
        }
        struct pollfd pfd[2] = {{.fd = sock, .events = POLLIN},
                                {.fd = pf->tcp_fd, .events = POLLIN}};
        if (poll(pfd, 2, 250) < 0 && errno != EINTR)
            break;
        if (pfd[1].revents) {
            ssize_t n = recv(pf->tcp_fd, buf, PF_CHUNK, 0);
            if (n > 0) {
                if (pf_send_frame(sock, 0x2, buf, (size_t)n) != 0)
                    break;
            } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                pf_close_client(sock, 1000, "");
                break;
            }
        }
        if (pfd[0].revents) {
            ssize_t n = recv(sock, buf, PF_CHUNK, 0);
            if (n > 0)
                ev = pf_feed(&ps, sock, pf->tcp_fd, buf, (size_t)n);
            else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                break; /* the client went away */
        }
    }
    if (ev == PF_PROTOCOL_ERROR)
        pf_close_client(sock, 1002, "protocol error");
    else if (ev == PF_TCP_ERROR)
        pf_close_client(sock, 1011, "Proxy error: the forwarded connection failed");
    shutdown(pf->tcp_fd, SHUT_RDWR);
    free(buf);
}

/* Tunnel one upgraded connection until either side ends, then release it. */
static void pf_serve(void *state, int sock, const char *extra_in, size_t extra_in_size,
                     struct MHD_UpgradeResponseHandle *urh)
{
    struct pf_state *pf = state;
    int fl = fcntl(sock, F_GETFL);
    if (fl >= 0)
        fcntl(sock, F_SETFL, fl | O_NONBLOCK);
    if (pf->close_code || pf->tcp_fd < 0)
        pf_close_client(sock, pf->close_code ? pf->close_code : 1011,
                        pf->close_code ? pf->close_reason : "Proxy error: no upstream");
    else
        pf_tunnel(pf, sock, extra_in, extra_in_size);
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

/* rk_upgrade_release_fn: the tunnel thread owns pf once detached (TLS). */
static void pf_release(void *state)
{
    struct pf_state *pf = state;
    if (pf->tcp_fd >= 0)
        close(pf->tcp_fd);
    free(pf);
}

/* MHD upgrade callback, on the connection's own thread: tunnels here over
 * plain HTTP, on a thread of its own over TLS (upgrade_thread.h). */
static void pf_upgraded(void *cls, struct MHD_Connection *connection, void *req_cls,
                        const char *extra_in, size_t extra_in_size, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
    (void)connection;
    struct pf_state *pf = cls;
    rk_relay_enter();
    int d = rk_upgrade_detach(pf_serve, pf_release, pf, sock, extra_in, extra_in_size, urh,
                              (size_t)pf->app->cfg->server.thread_stack_kib * 1024);
    if (d > 0) {
        struct rk_req *r = req_cls;
        if (r && r->route_ctx == pf)
            r->route_ctx = NULL; /* the tunnel thread owns pf now */
        return;
    }
    if (d < 0) {
        pf_close_client(sock, 1011, "Proxy error: out of resources");
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    } else {
        pf_serve(pf, sock, extra_in, extra_in_size, urh);
    }
    rk_relay_leave();
}

/* Connect to tcp://host:port within timeout_ms. Returns the non-blocking fd
 * or -1 with a reason in why. */
static int pf_connect(const char *url, int timeout_ms, char *why, size_t whylen)
{
    if (strncmp(url, "tcp://", 6) != 0) {
        snprintf(why, whylen, "the operator returned %s, expected tcp://host:port", url);
        return -1;
    }
    const char *h = url + 6;
    char host[256], port[16];
    const char *colon;
    if (*h == '[') {
        const char *close_br = strchr(h, ']');
        if (!close_br || close_br[1] != ':' || (size_t)(close_br - h - 1) >= sizeof host)
            goto bad;
        snprintf(host, sizeof host, "%.*s", (int)(close_br - h - 1), h + 1);
        colon = close_br + 1;
    } else {
        colon = strrchr(h, ':');
        if (!colon || (size_t)(colon - h) >= sizeof host || colon == h)
            goto bad;
        snprintf(host, sizeof host, "%.*s", (int)(colon - h), h);
    }
    snprintf(port, sizeof port, "%s", colon + 1);
    size_t pl = strlen(port);
    if (pl > 0 && port[pl - 1] == '/')
        port[pl - 1] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        snprintf(why, whylen, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    int64_t until = rk_now_ms() + timeout_ms;
    snprintf(why, whylen, "cannot connect to %s:%s", host, port);
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        int err = errno;
        if (err == EINPROGRESS) {
            int64_t left = until - rk_now_ms();
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            socklen_t sl = sizeof err;
            if (left > 0 && poll(&pfd, 1, (int)left) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) == 0 && err == 0)
                break;
            if (left <= 0 || err == EINPROGRESS)
                err = ETIMEDOUT;
        }
        snprintf(why, whylen, "cannot connect to %s:%s: %s", host, port, strerror(err));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
bad:
    snprintf(why, whylen, "the operator returned a malformed address %s", url);
    return -1;
}

/* Answer the client's handshake (101) and hand the socket to pf_upgraded. */
static void pf_accept(struct rk_req *r, struct pf_state *pf)
{
    char acc[29];
    rk_ws_accept_key(rk_req_header(r, "Sec-WebSocket-Key"), acc);
    struct MHD_Response *resp = MHD_create_response_for_upgrade(pf_upgraded, pf);
    if (!resp) {
        rk_reply_detail(r, 500, "out of memory");
        return;
    }
    MHD_add_response_header(resp, "Upgrade", "websocket");
    MHD_add_response_header(resp, "Sec-WebSocket-Accept", acc);
    r->outcome = pf->close_code ? "failed" : "success";
    rk_req_reply_mhd(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

void rk_relay_portforward_handler(struct rk_req *r)
{
    long long port = 0;
    const char *q = rk_req_query(r, "port");
    if (!q || rk_relay_parse_int(q, &port) != 0) {
        rk_reply_detail(r, 400,
                        q ? "Query parameter port must be an integer"
                          : "Query parameter port is required");
        return;
    }
    const char *ver = rk_req_header(r, "Sec-WebSocket-Version");
    if (!rk_ws_key_valid(rk_req_header(r, "Sec-WebSocket-Key"))) {
        rk_reply_detail(r, 400, "Missing or invalid Sec-WebSocket-Key");
        return;
    }
    if (!ver || strcmp(ver, "13") != 0) {
        rk_reply_detail(r, 400, "Unsupported Sec-WebSocket-Version (13 is required)");
        return;
    }
    struct pf_state *pf = calloc(1, sizeof *pf);
    if (!pf) {
        rk_reply_detail(r, 500, "out of memory");
        return;
    }
    pf->app = r->app;
    pf->tcp_fd = -1;
    r->route_ctx = pf;
    r->route_ctx_free = pf_free;

    char err[256];
    struct rk_target t;
    if (rk_relay_check_port_ws(port, err, sizeof err) != 0) {
        pf_fail(pf, 1008, err);
    } else if (rk_dispatch(r->app, r->call, RK_OP_PORT_FORWARD, r->params[0], &t) != RK_OK) {
        snprintf(err, sizeof err, "Proxy error: %s", rk_call_error_text(r->call));
        pf_fail(pf, 1011, err);
    } else {
        const struct rk_plugin *pl = r->app->plugin;
        struct rk_proxy_target pt;
        memset(&pt, 0, sizeof pt);
        rk_metrics_upstream_begin();
        rk_status st =
            pl->ops.proxy_target(pl->inst, r->call, &t.ref, (int)port, RK_PROXY_TCP, &pt);
        rk_metrics_upstream("proxy_target", st);
        rk_target_release(&t);
        char why[512];
        if (st != RK_OK || !pt.base_url) {
            snprintf(why, sizeof why, "Proxy error: %s",
                     st != RK_OK ? rk_call_error_text(r->call)
                                 : "the operator returned no endpoint");
            pf_fail(pf, 1011, why);
        } else {
            char cwhy[400];
            pf->tcp_fd = pf_connect(pt.base_url, r->app->cfg->proxy.connect_timeout_s * 1000, cwhy,
                                    sizeof cwhy);
            if (pf->tcp_fd < 0) {
                rk_info("portforward to sandbox %s port %lld failed: %s", r->params[0], port, cwhy);
                snprintf(why, sizeof why, "Proxy error: %s", cwhy);
                pf_fail(pf, 1011, why);
            }
        }
    }
    pf_accept(r, pf);
}
