/* SPDX-License-Identifier: Apache-2.0 */
/* The upgrade path of the WebSocket relays (see upgrade.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "relay/upgrade.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "engine/http_server.h"
#include "engine/reply.h"
#include "obs/log.h"
#include "relay/relay_common.h"
#include "relay/relay_session.h"

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

/* route_ctx_free: the request still owns the state (no relay loop took it). */
static void upgrade_route_free(struct rk_req *r)
{
    struct rk_upgrade *up = r->route_ctx;
    r->route_ctx = NULL;
    if (up)
        up->release(up);
}

/* The request owns up until a relay loop takes it. */
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

/* MHD upgrade callback (on the connection's thread; under an event engine on an event
 * thread): hand the relay to a loop and return at once. When no loop takes it, the client
 * gets one non-blocking try at a 1011 close and the socket goes back. */
static void upgraded(void *cls, struct MHD_Connection *connection, void *req_cls,
                     const char *extra_in, size_t extra_in_size, MHD_socket sock,
                     struct MHD_UpgradeResponseHandle *urh)
{
    (void)connection;
    struct rk_upgrade *up = cls;
    struct rk_req *r = req_cls;
    if (r && r->route_ctx == up)
        r->route_ctx = NULL; /* the relay owns its state from here, whatever happens */
    rk_relay_enter();
    if (rk_session_start(up, sock, extra_in, extra_in_size, urh) == 0)
        return;
    rk_warn("%s to sandbox %s: no relay loop takes the connection", up->what, up->sandbox_id);
    unsigned char frame[160];
    size_t n = rk_ws_close_frame(1011, "Proxy error: out of resources", frame, sizeof frame);
    if (send(sock, frame, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the client learns it from the closed connection */
    }
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    rk_req_loop_wake(up->loop);
    up->release(up);
    rk_relay_leave();
}

/* The 101 answer; upgraded() hands the relay to a loop. */
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
    up->loop = r->loop;
    r->outcome = up->close_code ? "failed" : "success";
    rk_req_reply_mhd(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}
