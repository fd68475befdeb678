/* SPDX-License-Identifier: Apache-2.0 */
/* The upgrade path of the WebSocket relays (see upgrade_thread.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "relay/upgrade_thread.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "engine/http_server.h"
#include "engine/reply.h"
#include "engine/tls.h"
#include "obs/log.h"
#include "relay/relay_common.h"

/** How long a close frame of ours waits for the peer's answer. */
#define UP_CLOSE_WAIT_MS 2000

/* Send all of buf within timeout_ms (poll in steps of at most 1 s). */
int rk_upgrade_send_all(int fd, const void *buf, size_t len, int timeout_ms)
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

/* Our close frame, then up to UP_CLOSE_WAIT_MS for the client's. */
void rk_upgrade_close_client(int sock, uint16_t code, const char *reason)
{
    unsigned char frame[160];
    size_t n = rk_ws_close_frame(code, reason, frame, sizeof frame);
    if (rk_upgrade_send_all(sock, frame, n, UP_CLOSE_WAIT_MS) != 0)
        return;
    int64_t until = rk_now_ms() + UP_CLOSE_WAIT_MS;
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

/* Sec-WebSocket-Key and version 13, in that order. */
int rk_upgrade_check_handshake(struct rk_req *r)
{
    const char *ver = rk_req_header(r, "Sec-WebSocket-Version");
    if (!rk_ws_key_valid(rk_req_header(r, "Sec-WebSocket-Key"))) {
        rk_reply_detail(r, 400, "Missing or invalid Sec-WebSocket-Key");
        return -1;
    }
    if (!ver || strcmp(ver, "13") != 0) {
        rk_reply_detail(r, 400, "Unsupported Sec-WebSocket-Version (13 is required)");
        return -1;
    }
    return 0;
}

/* route_ctx_free: the request still owns the state (no relay thread took it). */
static void upgrade_route_free(struct rk_req *r)
{
    struct rk_upgrade *up = r->route_ctx;
    r->route_ctx = NULL;
    if (up)
        up->release(up);
}

/* The request owns up until a relay thread takes it. */
void rk_upgrade_attach(struct rk_req *r, struct rk_upgrade *up, const char *what)
{
    up->app = r->app;
    up->what = what;
    snprintf(up->sandbox_id, sizeof up->sandbox_id, "%s", r->params[0] ? r->params[0] : "");
    r->route_ctx = up;
    r->route_ctx_free = upgrade_route_free;
}

/* The close a failed relay sends once accepted. */
void rk_upgrade_fail(struct rk_upgrade *up, uint16_t code, const char *fmt, const char *text)
{
    up->close_code = code;
    if (snprintf(up->close_reason, sizeof up->close_reason, fmt, text) < 0)
        up->close_reason[0] = '\0';
}

/* Relay one upgraded connection (or send the recorded close), then release the socket. */
static void upgrade_serve(struct rk_upgrade *up, int sock, const char *extra, size_t extra_len,
                          struct MHD_UpgradeResponseHandle *urh)
{
    int fl = fcntl(sock, F_GETFL);
    if (fl >= 0)
        fcntl(sock, F_SETFL, fl | O_NONBLOCK);
    if (up->close_code)
        rk_upgrade_close_client(sock, up->close_code, up->close_reason);
    else
        up->serve(up, sock, extra, extra_len);
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

/* One relay on a thread of its own (TLS). */
struct upgrade_job {
    struct rk_upgrade *up;
    int sock;
    char *extra;
    size_t extra_len;
    struct MHD_UpgradeResponseHandle *urh;
};

/* Thread body: relay, free, and leave the live-relay count. */
static void *upgrade_thread(void *arg)
{
    struct upgrade_job *job = arg;
    upgrade_serve(job->up, job->sock, job->extra, job->extra_len, job->urh);
    job->up->release(job->up);
    free(job->extra);
    free(job);
    rk_relay_leave();
    return NULL;
}

/* Start the relay thread of a TLS connection: 0, or -1 (nothing was taken). */
static int upgrade_detach(struct rk_upgrade *up, int sock, const char *extra, size_t extra_len,
                          struct MHD_UpgradeResponseHandle *urh)
{
    struct upgrade_job *job = calloc(1, sizeof *job);
    char *copy = job && extra_len ? malloc(extra_len) : NULL;
    if (!job || (extra_len && !copy)) {
        free(job);
        return -1;
    }
    if (extra_len)
        memcpy(copy, extra, extra_len);
    *job = (struct upgrade_job){up, sock, copy, extra_len, urh};
    pthread_attr_t attr;
    pthread_t tid;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, (size_t)up->app->cfg->server.thread_stack_kib * 1024);
    int rc = pthread_create(&tid, &attr, upgrade_thread, job);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(copy);
        free(job);
        return -1;
    }
    return 0;
}

/* MHD upgrade callback, on the connection's own thread: relays here over
 * plain HTTP, on a thread of its own over TLS. */
static void upgraded(void *cls, struct MHD_Connection *connection, void *req_cls,
                     const char *extra_in, size_t extra_in_size, MHD_socket sock,
                     struct MHD_UpgradeResponseHandle *urh)
{
    (void)connection;
    struct rk_upgrade *up = cls;
    rk_relay_enter();
    if (!rk_tls_enabled()) {
        upgrade_serve(up, sock, extra_in, extra_in_size, urh);
    } else if (upgrade_detach(up, sock, extra_in, extra_in_size, urh) == 0) {
        struct rk_req *r = req_cls;
        if (r && r->route_ctx == up)
            r->route_ctx = NULL; /* the relay thread owns the state now */
        return;
    } else {
        rk_warn("%s to sandbox %s: cannot start the relay thread", up->what, up->sandbox_id);
        rk_upgrade_close_client(sock, 1011, "Proxy error: out of resources");
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    }
    rk_relay_leave();
}

/* The 101 answer; upgraded() runs the relay. */
void rk_upgrade_accept(struct rk_req *r, struct rk_upgrade *up, const char *protocol)
{
    char acc[29];
    if (rk_ws_accept_key(rk_req_header(r, "Sec-WebSocket-Key"), acc) != 0) {
        rk_reply_detail(r, 500, "cannot compute Sec-WebSocket-Accept");
        return;
    }
    struct MHD_Response *resp = MHD_create_response_for_upgrade(upgraded, up);
    if (!resp) {
        rk_reply_detail(r, 500, "out of memory");
        return;
    }
    MHD_add_response_header(resp, "Upgrade", "websocket");
    MHD_add_response_header(resp, "Sec-WebSocket-Accept", acc);
    if (protocol && *protocol)
        MHD_add_response_header(resp, "Sec-WebSocket-Protocol", protocol);
    r->outcome = up->close_code ? "failed" : "success";
    rk_req_reply_mhd(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}
