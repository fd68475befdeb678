/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One upgraded relay on a relay loop (relay_loop.h): the client socket
 * libmicrohttpd handed over (or its end of the TLS socket pair), the upstream
 * the route handler opened, and a non-blocking state machine between them.
 *
 * Bytes move through the loop's scratch buffer: what the destination does not
 * take at once waits in a per-direction pending buffer, allocated only while
 * it holds bytes (an idle relay owns no buffer). A side is read only while
 * the other side's pending bytes are below one read (backpressure: the peer's
 * TCP window closes; EPOLLOUT resumes). The kind of relay (relay_ws.c: bytes
 * as they are; relay_portforward.c: WebSocket frames <-> TCP) transforms what
 * was read through the hooks of struct rk_relay_kind.
 *
 * Timeouts (one timer per relay, no polling): bytes that wait proxy.timeout
 * seconds without the destination taking any end the relay (a stalled peer);
 * our close frame waits up to 2 s for the client's answer; a drain that waits
 * for a WebSocket frame boundary cuts after 2 s. An idle relay has no timer.
 */
#ifndef RK_RELAY_SESSION_H
#define RK_RELAY_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct rk_app;
struct rk_session;
struct rk_relay_kind;
struct MHD_UpgradeResponseHandle;
struct rk_evloop;

/** The part of a WebSocket relay's state the upgrade path (upgrade.h) and the
 *  session work with; the first member of the relay's own state struct. */
struct rk_upgrade {
    struct rk_app *app;
    const char *what;       /* "websocket proxy", "portforward": for logs */
    char sandbox_id[128];   /* for logs */
    uint16_t close_code;    /* non-zero: accept, send this close, end */
    char close_reason[600]; /* cut to 123 bytes when framed */
    int64_t idle_minutes;   /* the sandbox's idle timeout: traffic touches it (relay_touch.h) */
    struct rk_evloop *loop; /* the event loop of the client connection (rk_req_loop_wake) */
    /** How the relay moves bytes on a loop (below); only used when
     *  close_code is 0. */
    const struct rk_relay_kind *kind;
    /** Frees the relay's whole state (up included). */
    void (*release)(struct rk_upgrade *up);
};

/** How one kind of relay talks to its upstream and transforms bytes. Hooks run
 *  on the loop thread; they queue output with rk_session_to_client/_upstream
 *  and never block. */
struct rk_relay_kind {
    /** Bytes free in front of the data handed to from_upstream (frame header). */
    size_t up_headroom;
    /** 1 when from_client may queue bytes for the client (pongs): the client is
     *  then read only while its own backlog is below one read. */
    int answers_client;
    /** The upstream socket to watch, or -1 when there is none. */
    int (*upstream_fd)(struct rk_upgrade *up);
    /** recv(2)-like: > 0 bytes, 0 at the end, -1 with errno (EAGAIN: nothing now). */
    ssize_t (*up_recv)(struct rk_upgrade *up, void *buf, size_t len);
    /** send(2)-like: > 0 bytes taken, -1 with errno (EAGAIN: full). */
    ssize_t (*up_send)(struct rk_upgrade *up, const void *buf, size_t len);
    /** Optional: the relay starts (e.g. queue upstream bytes read with the handshake). */
    void (*start)(struct rk_session *s);
    /** Bytes from the client (data may be modified in place). */
    void (*from_client)(struct rk_session *s, unsigned char *data, size_t len);
    /** Bytes from the upstream; up_headroom bytes before data are free. */
    void (*from_upstream)(struct rk_session *s, unsigned char *data, size_t len);
    /** The upstream ended (failed: an error rather than its end of stream). */
    void (*upstream_end)(struct rk_session *s, int failed);
    /** The client ended its side (end of stream or error). */
    void (*client_end)(struct rk_session *s);
    /** The daemon drains: close with 1001 when the stream allows it. */
    void (*drain)(struct rk_session *s);
};

/** Hand an accepted upgrade to a relay loop (from libmicrohttpd's upgrade
 *  callback; does not block). The session owns up from then on: it relays
 *  through up->kind, or sends up's recorded close, then gives the socket back
 *  (MHD_upgrade_action) and releases up. extra (the client's bytes read with
 *  the handshake) is copied. Returns 0, or -1 when nothing was taken. */
int rk_session_start(struct rk_upgrade *up, int sock, const char *extra, size_t extra_len,
                     struct MHD_UpgradeResponseHandle *urh);

/** The relay's state. */
struct rk_upgrade *rk_session_up(struct rk_session *s);

/** Queue bytes for the client / the upstream (sent at once when possible). */
void rk_session_to_client(struct rk_session *s, const void *data, size_t len);
void rk_session_to_upstream(struct rk_session *s, const void *data, size_t len);

/** Send our close frame (code, reason) after what is queued, stop relaying and
 *  end once it is written, after the client's answer (any bytes or its end,
 *  at most 2 s) when wait_answer. Only the first close counts. */
void rk_session_close(struct rk_session *s, uint16_t code, const char *reason, int wait_answer);

/** Stop reading and end once everything queued is written. */
void rk_session_finish(struct rk_session *s);

/** End at deadline_ms (monotonic) unless it ended before (the drain's cut). */
void rk_session_cut_at(struct rk_session *s, int64_t deadline_ms);

/** 1 once the daemon drains (the drain hook ran). */
int rk_session_draining(const struct rk_session *s);

/** 1 once our close frame is queued or the relay is finishing. */
int rk_session_closing(const struct rk_session *s);

#endif /* RK_RELAY_SESSION_H */
