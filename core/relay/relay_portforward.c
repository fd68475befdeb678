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
 * The handshake, the 101 and the upgrade callback are the upgrade path of
 * upgrade.h, shared with the WebSocket proxy; the tunnel then runs on a relay
 * loop (relay_session.h) as a non-blocking frame parser and framer. The server-side frame
 * codec stays hand-written: libcurl's WebSocket API is client-side only and
 * libmicrohttpd 0.9 has none. The tcp:// address is split by libcurl's URL API.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <curl/curl.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#include "relay/relay_common.h"
#include "relay/relay_session.h"
#include "relay/upgrade.h"

/** Largest payload of a control frame (RFC 6455 §5.5). */
#define PF_MAX_CONTROL 125
/** Room for a server frame header in front of the TCP bytes. */
#define PF_HEADROOM 10

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

/* State of one portforward request: the request's until a relay loop takes it. */
struct pf_state {
    struct rk_upgrade up; /* first: the upgrade path's part */
    int tcp_fd;           /* connected upstream, -1 until then */
    struct pf_parser ps;
};

/* rk_upgrade release: free the whole state. */
static void pf_release(struct rk_upgrade *up)
{
    struct pf_state *pf = (struct pf_state *)up;
    if (pf->tcp_fd >= 0)
        close(pf->tcp_fd);
    free(pf);
}

/* The header of an unmasked server frame (FIN set); returns its length (at most 10). */
static size_t pf_frame_header(unsigned opcode, size_t len, unsigned char *hdr)
{
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
    return h;
}

/* What the client's bytes asked for. */
enum pf_event { PF_CONTINUE = 0, PF_STOP };

/* Handle a complete control frame. */
static enum pf_event pf_control(struct rk_session *s, struct pf_parser *ps)
{
    if (ps->opcode == 0x9) { /* ping -> pong with the same payload */
        unsigned char frame[2 + PF_MAX_CONTROL];
        size_t h = pf_frame_header(0xA, ps->ctrl_len, frame);
        memcpy(frame + h, ps->ctrl, ps->ctrl_len);
        rk_session_to_client(s, frame, h + ps->ctrl_len);
        return PF_CONTINUE;
    }
    if (ps->opcode == 0x8) {
        /* Echo the client's code (1000 if it sent none), then end. */
        uint16_t code = ps->ctrl_len >= 2 ? (uint16_t)(ps->ctrl[0] << 8 | ps->ctrl[1]) : 1000;
        rk_session_close(s, code, "", 0);
        return PF_STOP;
    }
    return PF_CONTINUE; /* pong */
}

/* A frame that breaks RFC 6455: close 1002. */
static enum pf_event pf_protocol_error(struct rk_session *s)
{
    rk_session_close(s, 1002, "protocol error", 1);
    return PF_STOP;
}

/* Feed bytes from the client; data payloads go to the TCP stream. */
static enum pf_event pf_feed(struct rk_session *s, struct pf_parser *ps, unsigned char *p, size_t n)
{
    while (n > 0) {
        if (ps->hdr_need == 0 || ps->hdr_len < ps->hdr_need) {
            if (ps->hdr_need == 0)
                ps->hdr_need = 2;
            ps->hdr[ps->hdr_len++] = *p++;
            n--;
            if (ps->hdr_len == 2) {
                if (!(ps->hdr[1] & 0x80u))
                    return pf_protocol_error(s); /* client frames must be masked */
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
                return pf_protocol_error(s);
            if (!control && ps->opcode > 0x2)
                return pf_protocol_error(s); /* reserved data opcode */
            if (len == 0) {
                ps->hdr_len = ps->hdr_need = 0;
                if (control && pf_control(s, ps) != PF_CONTINUE)
                    return PF_STOP;
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
        } else {
            rk_session_to_upstream(s, p, take);
        }
        p += take;
        n -= take;
        ps->remain -= take;
        if (ps->remain == 0) {
            ps->hdr_len = ps->hdr_need = 0;
            if ((ps->opcode & 0x8u) && pf_control(s, ps) != PF_CONTINUE)
                return PF_STOP;
        }
    }
    return PF_CONTINUE;
}

/* ---- the tunnel on a loop (relay_session.h) ------------------------------------------- */

static int pf_upstream_fd(struct rk_upgrade *up)
{
    return ((struct pf_state *)up)->tcp_fd;
}

static ssize_t pf_up_recv(struct rk_upgrade *up, void *buf, size_t len)
{
    return recv(((struct pf_state *)up)->tcp_fd, buf, len, 0);
}

static ssize_t pf_up_send(struct rk_upgrade *up, const void *buf, size_t len)
{
    return send(((struct pf_state *)up)->tcp_fd, buf, len, MSG_NOSIGNAL);
}

/* The client's frames: payloads to the TCP stream, pings answered, a close ends it. */
static void pf_from_client(struct rk_session *s, unsigned char *data, size_t len)
{
    struct pf_state *pf = (struct pf_state *)rk_session_up(s);
    pf_feed(s, &pf->ps, data, len);
}

/* TCP bytes go to the client as one binary frame (the header in the headroom). */
static void pf_from_upstream(struct rk_session *s, unsigned char *data, size_t len)
{
    unsigned char hdr[PF_HEADROOM];
    size_t h = pf_frame_header(0x2, len, hdr);
    memcpy(data - h, hdr, h);
    rk_session_to_client(s, data - h, len + h);
}

/* The end of the TCP stream: close 1000 (after its last bytes); a failure: 1011. */
static void pf_upstream_end(struct rk_session *s, int failed)
{
    if (failed)
        rk_session_close(s, 1011, "Proxy error: the forwarded connection failed", 1);
    else
        rk_session_close(s, 1000, "", 1);
}

/* The client went away: what it sent still reaches the TCP stream. */
static void pf_client_end(struct rk_session *s)
{
    rk_session_finish(s);
}

/* The drain: our frames always end between frames, so 1001 at once. */
static void pf_drain(struct rk_session *s)
{
    rk_session_close(s, 1001, "server shutting down", 1);
}

static const struct rk_relay_kind pf_kind = {
    .up_headroom = PF_HEADROOM,
    .answers_client = 1,
    .upstream_fd = pf_upstream_fd,
    .up_recv = pf_up_recv,
    .up_send = pf_up_send,
    .start = NULL,
    .from_client = pf_from_client,
    .from_upstream = pf_from_upstream,
    .upstream_end = pf_upstream_end,
    .client_end = pf_client_end,
    .drain = pf_drain,
};

/* Split tcp://host:port[/] with libcurl's URL parser into getaddrinfo's host (IPv6 without
 * brackets, a zone as "%zone") and numeric port. 0, or -1 for anything else (no port, user
 * info, a path, a query or a fragment). */
static int pf_split_tcp(const char *url, char *host, size_t hostlen, char *port, size_t portlen)
{
    CURLU *u = curl_url();
    char *h = NULL, *p = NULL, *path = NULL, *zone = NULL, *extra = NULL;
    int rc = -1;
    if (!u || curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &p, 0) != CURLUE_OK)
        goto out;
    if (curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK && strcmp(path, "/") != 0)
        goto out;
    const CURLUPart refused[] = {CURLUPART_USER, CURLUPART_QUERY, CURLUPART_FRAGMENT};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (curl_url_get(u, refused[i], &extra, 0) == CURLUE_OK)
            goto out;
    }
    size_t hl = strlen(h);
    int v6 = hl >= 2 && h[0] == '[' && h[hl - 1] == ']';
    curl_url_get(u, CURLUPART_ZONEID, &zone, 0);
    int n = snprintf(host, hostlen, "%.*s%s%s", (int)(v6 ? hl - 2 : hl), h + (v6 ? 1 : 0),
                     zone ? "%" : "", zone ? zone : "");
    if (n > 0 && (size_t)n < hostlen && (size_t)snprintf(port, portlen, "%s", p) < portlen)
        rc = 0;
out:
    curl_free(h);
    curl_free(p);
    curl_free(path);
    curl_free(zone);
    curl_free(extra);
    curl_url_cleanup(u);
    return rc;
}

/* Connect to tcp://host:port within timeout_ms. Returns the non-blocking fd
 * or -1 with a reason in why. */
static int pf_connect(const char *url, int timeout_ms, char *why, size_t whylen)
{
    if (strncmp(url, "tcp://", 6) != 0) {
        snprintf(why, whylen, "the operator returned %s, expected tcp://host:port", url);
        return -1;
    }
    char host[256], port[16];
    if (pf_split_tcp(url, host, sizeof host, port, sizeof port) != 0) {
        snprintf(why, whylen, "the operator returned a malformed address %s", url);
        return -1;
    }
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
}

/* WS portforward: the port, the handshake, the policy, the endpoint, the TCP connect, then
 * the 101 (a failure before that is a close frame after it). */
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
    if (rk_upgrade_check_handshake(r) != 0)
        return;
    struct pf_state *pf = calloc(1, sizeof *pf);
    if (!pf) {
        rk_reply_detail(r, 500, "out of memory");
        return;
    }
    pf->up.kind = &pf_kind;
    pf->up.release = pf_release;
    pf->tcp_fd = -1;
    rk_upgrade_attach(r, &pf->up, "portforward");

    char err[256];
    struct rk_proxy_target pt;
    if (rk_relay_check_port_ws(port, err, sizeof err) != 0) {
        rk_upgrade_fail(&pf->up, 1008, "%s", err);
    } else if (rk_relay_target(r, RK_OP_PORT_FORWARD, (int)port, RK_PROXY_TCP, &pt,
                               &pf->up.idle_minutes) != RK_OK) {
        rk_upgrade_fail(&pf->up, 1011, "Proxy error: %s", rk_call_error_text(r->call));
    } else {
        char cwhy[400];
        pf->tcp_fd =
            pf_connect(pt.base_url, r->app->cfg->proxy.connect_timeout_s * 1000, cwhy, sizeof cwhy);
        if (pf->tcp_fd < 0) {
            rk_info("portforward to sandbox %s port %lld failed: %s", r->params[0], port, cwhy);
            rk_upgrade_fail(&pf->up, 1011, "Proxy error: %s", cwhy);
        }
    }
    rk_upgrade_accept(r, &pf->up, NULL);
}
