/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one upgrade path of the WebSocket relays (proxy/vnc in relay_ws.c,
 * portforward in relay_portforward.c): the client handshake check, the 101
 * answer, libmicrohttpd's upgrade callback, the close frame of a relay that
 * failed before it started, and who owns the relay's state when.
 *
 * The route handler resolves the endpoint and opens the upstream, then
 * answers 101 (rk_upgrade_accept). libmicrohttpd's upgrade callback does not
 * block: it hands the upgraded client socket (over TLS, libmicrohttpd's end of
 * a socket pair; it encrypts on its own side), the bytes already read and the
 * open upstream to a relay loop (relay_session.h) and returns. From then on
 * the session owns the relay's state; until then the request does.
 */
#ifndef RK_UPGRADE_H
#define RK_UPGRADE_H

#include <stddef.h>
#include <stdint.h>

#include "relay/relay_session.h" /* struct rk_upgrade */

struct rk_req;

/** Check the client's handshake (Sec-WebSocket-Key, version 13); replies 400
 *  and returns -1 when it is unusable, else 0. */
int rk_upgrade_check_handshake(struct rk_req *r);

/** Attach up (zeroed by the caller, kind and release set) to the request as
 *  its route state; the request releases it unless a relay loop took it. */
void rk_upgrade_attach(struct rk_req *r, struct rk_upgrade *up, const char *what);

/** Record the close to send once the client is accepted (fmt has one %s). */
void rk_upgrade_fail(struct rk_upgrade *up, uint16_t code, const char *fmt, const char *text);

/** Answer the handshake (101, Sec-WebSocket-Accept, the subprotocol when not
 *  NULL or "") and, once libmicrohttpd upgraded the connection, hand the relay
 *  to a relay loop; a recorded close is sent there instead of relaying. */
void rk_upgrade_accept(struct rk_req *r, struct rk_upgrade *up, const char *protocol);

#endif /* RK_UPGRADE_H */
