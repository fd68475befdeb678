/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small HTTP/1.1 client for event loops (rkh1.c): plain HTTP to origins given as IP
 * literals, one exchange per connection at a time, kept connections per client. Its users:
 * the OpenSandbox plugin's command streams to execd (thousands open at once, each a few
 * hundred bytes here instead of a libcurl transfer) and the core's HTTP relay (small
 * proxied answers without libcurl's per-transfer work). Everything it does not speak
 * (https, names to resolve, proxies, streamed request bodies) stays with libcurl: each user
 * decides per exchange (rku_h1_target).
 *
 * Threads: a client belongs to one owner thread, which watches rku_h1_fd and calls
 * rku_h1_run; every callback runs there and must not block. Any thread may submit an
 * exchange or resume a paused one: the client then calls its wake function (the owner's
 * way to be woken, e.g. rku_curl_loop_wake_source).
 *
 * Results are libcurl's codes (CURLE_*), so a user that also runs libcurl transfers maps
 * both in one place.
 */
#ifndef RK_UTIL_H1_H
#define RK_UTIL_H1_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

struct rku_h1;

/** An exchange's callbacks, all on the owner's thread. */
struct rku_h1_ops {
    /** Optional: one header of the final answer's head (not of interim 1xx heads), before
     *  on_status; name and value are not NUL-terminated, the value is trimmed of blanks. */
    void (*on_header)(void *ctx, const char *name, size_t name_len, const char *value,
                      size_t value_len);
    /** The final answer's status, before any body byte. */
    void (*on_status)(void *ctx, long status);
    /** Body bytes (chunked coding removed); non-zero ends the exchange (CURLE_WRITE_ERROR). */
    int (*on_body)(void *ctx, const char *p, size_t n);
    /** Optional: how many answer bytes the exchange takes now (each read is at most this
     *  much, so on_body never gets more). 0 pauses reading until rku_h1_resume. */
    size_t (*room)(void *ctx);
    /** Polled every sweep and when the deadline passed: non-zero ends the exchange
     *  (CURLE_ABORTED_BY_CALLBACK). */
    int (*should_abort)(void *ctx);
    /** The exchange's deadline now (CLOCK_MONOTONIC ms, 0: none); may move between calls. */
    int64_t (*deadline)(void *ctx);
    /** The end: a CURLcode and, for failures, a description (or NULL). The exchange is the
     *  caller's again (it may free it). */
    void (*on_done)(void *ctx, int curl_code, const char *err);
};

/** A growable byte buffer; oom latches an allocation failure. */
struct rku_h1_buf {
    char *p;
    size_t len, cap;
    int oom;
};

/** Response parser state (rku_h1_resp_feed). */
struct rku_h1_resp {
    int state;
    struct rku_h1_buf head; /**< the head being read (freed once parsed) */
    size_t head_max;        /**< longest head accepted (0: RKU_H1_HEAD_MAX) */
    int head_only;          /**< the answer to a HEAD request: no body follows its head */
    long status;
    int keep_alive; /**< the connection may carry another exchange after this answer */
    int got_head;   /**< a final answer's head was parsed */
    int too_big;    /**< the head was longer than head_max */
    int64_t left;   /**< body or chunk bytes still to come */
    int digits;     /**< chunk-size digits read */
    size_t line_len, trailer_len;
};

/** Default bound of a response head (status line and headers) and of a trailer section. */
#define RKU_H1_HEAD_MAX (16 * 1024)

/** rku_h1_resp_feed's results. */
enum { RKU_H1_MORE = 0, RKU_H1_DONE = 1, RKU_H1_BAD = -1, RKU_H1_STOP = -2 };

/** Parse answer bytes: ops->on_header and ops->on_status once the final head is read,
 *  ops->on_body for the body. *used: bytes taken. RKU_H1_DONE when the answer ended (bytes
 *  after it are not taken), RKU_H1_MORE when all were taken, RKU_H1_BAD for a malformed
 *  answer (too_big says when the head was too long), RKU_H1_STOP when on_body asked to stop. */
int rku_h1_resp_feed(struct rku_h1_resp *r, const char *p, size_t n, size_t *used,
                     const struct rku_h1_ops *ops, void *ctx);
/** 1 when the connection's end completes the answer (a body framed by the end). */
int rku_h1_resp_eof(const struct rku_h1_resp *r);
/** Free the parser's buffer and zero its state (head_max and head_only stay). */
void rku_h1_resp_reset(struct rku_h1_resp *r);

/** One exchange: the submitter fills the part above the line (rku_h1_target, then req). */
struct rku_h1_xchg {
    struct sockaddr_in6 addr; /**< the origin (an IPv4 one is a struct sockaddr_in in here) */
    unsigned addr_len;
    char *req; /**< the whole request (head and body), malloc'd; the client frees it */
    size_t req_len;
    int once;           /**< sent at most once (not idempotent: a create): never sent again when its
                             connection ends unanswered (the failure is reported), and it takes a kept
                             connection only one idle very briefly and checked open (H1_ONCE_IDLE_MS) */
    int head_only;      /**< a HEAD request: the answer has no body */
    size_t head_max;    /**< longest answer head accepted (0: RKU_H1_HEAD_MAX) */
    int64_t connect_ms; /**< connect bound (0: only the deadline) */
    const struct rku_h1_ops *ops;
    void *ctx;
    /* client-private */
    int fd;
    int connecting, reused, resent, got_bytes;
    int open;          /**< submitted and not ended (under the client's lock) */
    int paused;        /**< reading stopped: room said 0 (owner thread) */
    int resume_queued; /**< on the resume list (under the client's lock) */
    int64_t connect_at;
    size_t sent;
    struct rku_h1_resp resp;
    struct rku_h1_xchg *next, *prev;
    struct rku_h1_xchg *rnext; /**< resume list */
};

/** Fill hx's origin from url when this client can carry it: "http://" with an IPv4 or
 *  bracketed IPv6 literal, an optional port, and a path of visible ASCII. Then *host (host
 *  and port as written, *host_len bytes) and *path (never empty) point into url. 0 when
 *  libcurl must carry it. */
int rku_h1_target(struct rku_h1_xchg *hx, const char *url, const char **host, size_t *host_len,
                  const char **path);

/** A client. idle_max: kept connections (all origins together, 0: 64). wake(wake_ctx) asks
 *  the owner to call rku_h1_run soon, from any thread; it returns -1 when the owner stops
 *  (a submission then fails). NULL on OOM. */
struct rku_h1 *rku_h1_new(int idle_max, int (*wake)(void *wake_ctx), void *wake_ctx);
struct rku_curl_loop;
/** A client run by a threaded curl loop as its event source (rku_curl_loop_set_source; before
 *  the loop's first use), woken through it. Stop the loop before freeing the client. */
struct rku_h1 *rku_h1_new_on(struct rku_curl_loop *cl, int idle_max);
/** The client's descriptor (an epoll set): readable when its sockets have events. */
int rku_h1_fd(const struct rku_h1 *c);
/** One pass on the owner's thread, without waiting: start what was submitted, act on
 *  socket events, resume, check deadlines. Returns the ms until it must run again. */
int rku_h1_run(struct rku_h1 *c, int64_t now_ms);
/** 1 while exchanges are queued or open (any thread). */
int rku_h1_busy(struct rku_h1 *c);
/** Queue x (any thread); its on_done reports the end. -1 when the owner stops or cannot
 *  start (on_done is then not called and x->req is still the caller's). */
int rku_h1_submit(struct rku_h1 *c, struct rku_h1_xchg *x);
/** Read x's answer again after room said 0 (any thread; nothing once x ended). */
void rku_h1_resume(struct rku_h1 *c, struct rku_h1_xchg *x);
/** End every queued and open exchange with CURLE_ABORTED_BY_CALLBACK (the owner's thread,
 *  or once the owner no longer runs the client). */
void rku_h1_abort_all(struct rku_h1 *c);
/** Free the client (its exchanges ended; closes the kept connections). NULL-safe. */
void rku_h1_free(struct rku_h1 *c);

#endif /* RK_UTIL_H1_H */
