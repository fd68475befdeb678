/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one upgrade path of the WebSocket relays (proxy/vnc in relay_ws.c,
 * portforward in relay_portforward.c): the client handshake check, the 101
 * answer, libmicrohttpd's upgrade callback, the close frame of a relay that
 * failed before it started, and who owns the relay's state when.
 *
 * Over plain HTTP the relay runs in libmicrohttpd's upgrade callback: the
 * socket is the client's. Over TLS, libmicrohttpd hands the callback one end
 * of a socket pair and encrypts and decrypts on the connection's own thread
 * only once the callback returns, and it reports the request complete right
 * then. So with TLS the relay runs on a thread of its own and takes its state
 * over from the request.
 */
#ifndef RK_UPGRADE_THREAD_H
#define RK_UPGRADE_THREAD_H

#include <stddef.h>
#include <stdint.h>

struct rk_app;
struct rk_req;

/** The part of a WebSocket relay's state the upgrade path works with; the
 *  first member of the relay's own state struct. */
struct rk_upgrade {
    struct rk_app *app;
    const char *what;       /* "websocket proxy", "portforward": for logs */
    char sandbox_id[128];   /* for logs */
    uint16_t close_code;    /* non-zero: accept, send this close, end */
    char close_reason[600]; /* cut to 123 bytes when framed */
    /** Relays the upgraded, non-blocking socket until either side ends
     *  (only called when close_code is 0). */
    void (*serve)(struct rk_upgrade *up, int sock, const char *extra, size_t extra_len);
    /** Frees the relay's whole state (up included). */
    void (*release)(struct rk_upgrade *up);
};

/** Check the client's handshake (Sec-WebSocket-Key, version 13); replies 400
 *  and returns -1 when it is unusable, else 0. */
int rk_upgrade_check_handshake(struct rk_req *r);

/** Attach up (zeroed by the caller, serve and release set) to the request as
 *  its route state; the request releases it unless a relay thread took it. */
void rk_upgrade_attach(struct rk_req *r, struct rk_upgrade *up, const char *what);

/** Record the close to send once the client is accepted (fmt has one %s). */
void rk_upgrade_fail(struct rk_upgrade *up, uint16_t code, const char *fmt, const char *text);

/** Answer the handshake (101, Sec-WebSocket-Accept, the subprotocol when not
 *  NULL or "") and relay through up->serve once libmicrohttpd upgraded the
 *  connection; a recorded close is sent instead of relaying. */
void rk_upgrade_accept(struct rk_req *r, struct rk_upgrade *up, const char *protocol);

/** Send all of buf on a non-blocking socket within timeout_ms. Returns 0 or -1. */
int rk_upgrade_send_all(int fd, const void *buf, size_t len, int timeout_ms);

/** Send a close frame of ours to the client and wait briefly for its answer. */
void rk_upgrade_close_client(int sock, uint16_t code, const char *reason);

#endif /* RK_UPGRADE_THREAD_H */
