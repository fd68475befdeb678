/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the HTTP relay (relay_http.c), the WebSocket relay
 * (relay_ws.c) and the port-forward relay (relay_portforward.c):
 *   relay_policy.c   target-port selection (§5.20), the path traversal check,
 *                    header filtering, and the endpoint (gate, then plugin);
 *   relay_url.c      upstream URL splitting (libcurl URL API) and building,
 *                    Location rewriting;
 *   relay_wsproto.c  the WebSocket accept key (GnuTLS SHA-1 + base64), close
 *                    frames and the frame-boundary tracker;
 *   relay_live.c     the registry of live relays used at shutdown and the peer
 *                    hang-up probe.
 */
#ifndef RK_RELAY_COMMON_H
#define RK_RELAY_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "domain/dispatch.h"

struct rk_req;

/** Default container port when no source names one. */
#define RK_RELAY_DEFAULT_PORT 8080
/** The VNC port inside a sandbox. */
#define RK_RELAY_VNC_PORT 8006

/* ---- port selection (relay_policy.c) ------------------------------------- */

/** Outcome of rk_relay_select_port(). */
enum rk_portsel {
    RK_PORTSEL_OK = 0,
    RK_PORTSEL_MULTIPLE,   /* err: "Cannot specify target port via multiple sources: ..." */
    RK_PORTSEL_BAD_HEADER, /* err: Python's int() text for the header value */
    RK_PORTSEL_BAD_QUERY,  /* err: validation text for rock_target_port */
};

/** The chosen port and the forwarded path. */
struct rk_port_choice {
    long long port;
    int from_path;   /* the port came from a "port/N/" prefix */
    const char *fwd; /* forwarded raw path (points into the rest given) */
};

/** Parse an integer the way Python's int() does (whitespace, sign, digit
 *  underscores). Returns 0, or -1 when s is not an integer. Values beyond
 *  +-1e15 are clamped (they are out of any port range anyway). */
int rk_relay_parse_int(const char *s, long long *out);

/** Choose the target port from the raw sub-path `rest` (after ".../proxy/"),
 *  the X-ROCK-Target-Port header (NULL or "" = absent) and the
 *  rock_target_port query value (NULL = absent). */
enum rk_portsel rk_relay_select_port(const char *rest, const char *header, const char *query,
                                     int def_port, struct rk_port_choice *out, char *err,
                                     size_t errlen);

/** HTTP range check (1-65535). Returns 0, or -1 with a message in err. */
int rk_relay_check_port_http(long long port, char *err, size_t errlen);
/** WebSocket/portforward range check (1024-65535, not 22) with the original
 *  messages. Returns 0, or -1 with the close reason in err. */
int rk_relay_check_port_ws(long long port, char *err, size_t errlen);

/**
 * The sandbox and port of an E2B sandbox-port request (RK_ROUTE_E2B_PORT):
 * the sandbox from E2b-Sandbox-Id (identifier rule; becomes r->params[0] and
 * is noted on the request), the port from E2b-Sandbox-Port (a decimal
 * integer; the caller applies its range check). The forwarded sub-path is the
 * whole request path. Returns 0, or -1 with a message in err.
 */
int rk_relay_e2b_target(struct rk_req *r, long long *port, char *err, size_t errlen);

/* ---- paths (relay_policy.c) ----------------------------------------------- */

/** Number of '/'-separated segments of a route pattern, not counting a
 *  trailing "{*}" segment. */
int rk_relay_pattern_segments(const char *pattern);

/** The raw sub-path after the first nseg segments of raw_path: "" when the
 *  path has exactly nseg segments (or a trailing '/'), NULL when it has fewer. */
const char *rk_relay_raw_rest(const char *raw_path, int nseg);

/** 1 if the raw proxied path must be refused: after exactly one URL decode it
 *  holds a NUL byte, or a segment (separated by '/', '\' or a still-encoded
 *  "%2f"/"%5c") that spells "." or ".." in any form (plain, %2e at any %25
 *  depth, overlong UTF-8, %u002e, "..;param"). */
int rk_relay_has_dot_segment(const char *raw);

/** The text of the traversal refusal. */
#define RK_RELAY_TRAVERSAL_MSG "invalid proxy path: relative path segments are not allowed"

/* ---- headers (relay_policy.c) --------------------------------------------- */

/** 1 if name is hop-by-hop (RFC 7230 §6.1 plus Proxy-*) or listed in the
 *  Connection header value `connection` (may be NULL). */
int rk_relay_is_hop_header(const char *name, const char *connection);

/** 1 if a client request header must not reach the app over HTTP: hop-by-hop,
 *  Host, Content-Length, Expect, X-Request-ID (re-added by the core) and the
 *  client's credentials for rock-admin (X-Key, X-API-Key, XRL-Authorization). */
int rk_relay_skip_request_header(const char *name, const char *connection);

/** 1 if a response header must not reach the client (hop-by-hop, Content-Length). */
int rk_relay_skip_response_header(const char *name, const char *connection);

/** 1 if a header is in the WebSocket handshake's reserved set (§5.21) or is
 *  a rock-admin credential; such headers are never sent upstream. */
int rk_relay_ws_blocked_header(const char *name);

/* ---- the endpoint (relay_policy.c) ----------------------------------------- */

/** The endpoint of a relay to sandbox r->params[0] on port: the gate for op
 *  (which also refreshes the idle deadline), then the plugin's proxy_target.
 *  RK_OK with *pt filled, or the error recorded on r->call and returned (an
 *  endpoint without base_url is RK_E_UPSTREAM). *idle_minutes (may be NULL)
 *  gets the sandbox's idle timeout (auto_clear_time) from the gate's record. */
rk_status rk_relay_target(struct rk_req *r, enum rk_op op, int port, enum rk_proxy_kind kind,
                          struct rk_proxy_target *pt, int64_t *idle_minutes);

/* ---- URLs (relay_url.c) --------------------------------------------------- */

/** A base URL split into parts (malloc'd strings). */
struct rk_url_parts {
    int tls;        /* https/wss */
    char *host;     /* without brackets for IPv6 */
    int port;       /* explicit or the scheme default */
    char *hostport; /* host[:port] as curl parsed it (for Host:) */
    char *path;     /* "" or "/..." without a trailing '/' */
    char *query;    /* "" or the query without '?' */
    char *block;    /* non-NULL: the four strings live in it (the plain fast path) */
};

/** Split base (scheme optional, "http" assumed). Returns 0 or -1. */
int rk_relay_split_url(const char *base, struct rk_url_parts *out);
/** Free the parts. */
void rk_relay_url_parts_free(struct rk_url_parts *u);

/** Build the upstream URL from a split base: scheme://hostport + path + "/" + fwd, then the
 *  base query and client_query (either may be empty or NULL) joined by '&'. malloc'd. */
char *rk_relay_build_url(const struct rk_url_parts *u, const char *fwd, const char *client_query);

/** The path+query sent in the upstream WebSocket request line (malloc'd). */
char *rk_relay_ws_request_target(const struct rk_url_parts *u, const char *fwd);

/** Rewrite a redirect Location: an absolute URL is cut to path and query,
 *  a leading base_path (the endpoint's own path) is removed, and prefix is
 *  put in front of a path-absolute result. Other values are returned as is.
 *  malloc'd. */
char *rk_relay_rewrite_location(const char *loc, const char *prefix, const char *base_path);

/* ---- WebSocket protocol (relay_wsproto.c) --------------------------------- */

/** SHA-1 of data (GnuTLS). Returns 0, or -1 if the digest is unavailable. */
int rk_sha1(const void *data, size_t len, unsigned char out[20]);
/** Standard base64 with padding, no line breaks (GnuTLS); out must hold
 *  4*ceil(len/3)+1 bytes. Returns 0, or -1 (out is then "") on OOM. */
int rk_base64(const unsigned char *in, size_t len, char *out);
/** Sec-WebSocket-Accept for a client key (out holds 29 bytes). Returns 0, or
 *  -1 (out is then "") when GnuTLS fails. */
int rk_ws_accept_key(const char *key, char out[29]);
/** 1 if key is a valid Sec-WebSocket-Key (base64 of 16 bytes). */
int rk_ws_key_valid(const char *key);
/** Encode an unmasked close frame with code and reason (reason cut to 123
 *  bytes at a UTF-8 boundary). Returns the frame length (out holds >= 127). */
size_t rk_ws_close_frame(uint16_t code, const char *reason, unsigned char *out, size_t outlen);

/** Tracks frame boundaries in one direction of a byte-transparent relay, so a
 *  close frame of our own can be inserted between frames. */
struct rk_ws_tracker {
    unsigned char hdr[14];
    size_t hdr_len;  /* header bytes collected for the current frame */
    uint64_t remain; /* payload bytes still to pass */
    int in_payload;
};
/** Feed relayed bytes. */
void rk_ws_track(struct rk_ws_tracker *t, const unsigned char *data, size_t len);
/** 1 when the stream is between frames. */
int rk_ws_at_boundary(const struct rk_ws_tracker *t);

/* ---- live relays (relay_live.c) -------------------------------------------- */

/** 1 if the peer of fd hung up (non-blocking probe). */
int rk_relay_peer_gone(int fd);

/** Count a live relay (worker thread or WebSocket session). */
void rk_relay_enter(void);
/** Uncount a live relay. */
void rk_relay_leave(void);
/** Number of live relays. */
int rk_relay_active(void);
/** Wait until no relay runs or deadline_ms (monotonic) passes; relays end by
 *  themselves once app->stopping is set. Returns the number still running. */
int rk_relay_wait(int64_t deadline_ms);

/* ---- route handlers (relay_http.c / relay_ws.c / relay_portforward.c) -------------- */

/** HTTP relay, headers complete: choose the port, resolve the endpoint, start
 *  the transfer. Returns 1 when it already replied, else 0. */
int rk_relay_http_begin(struct rk_req *r);
/** HTTP relay: one chunk of the client body (blocks while the pipe is full).
 *  Returns 1 to stop reading, else 0. */
int rk_relay_http_body(struct rk_req *r, const char *data, size_t len);
/** HTTP relay, body complete: wait for the upstream head and stream the answer. */
void rk_relay_http_handler(struct rk_req *r);
/** WebSocket proxy/vnc relay: open the upstream WebSocket, then accept the client. */
void rk_relay_ws_handler(struct rk_req *r);
/** WebSocket portforward: connect the TCP stream, then accept the client. */
void rk_relay_portforward_handler(struct rk_req *r);

#endif /* RK_RELAY_COMMON_H */
