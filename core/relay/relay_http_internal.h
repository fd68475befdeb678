/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to the HTTP relay's files: relay_http.c (routes, request set-up,
 * answers), relay_http_transfer.c (the upstream transfer: libcurl
 * callbacks, the MHD content reader), relay_http_loop.c (libcurl transfers on
 * the event loop) and relay_http_h1.c (transfers on the loop's HTTP/1.1 client).
 */
#ifndef RK_RELAY_HTTP_INTERNAL_H
#define RK_RELAY_HTTP_INTERNAL_H

#include <curl/curl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/bytepipe.h"
#include "rkcurlloop.h"
#include "rkh1.h"

struct rk_app;
struct rk_buf;
struct rk_req;

/** Bounds of the two body pipes (their rings start small and grow to it). */
#define PX_PIPE_BYTES (256 * 1024)
/** The block MHD reads a relayed answer in (bodies of known smaller length get their size). */
#define PX_REPLY_BLOCK (32 * 1024)
/** An answer of known length up to this size is relayed whole, once complete (one write to the
 *  client instead of a head and then the body). */
#define PX_WHOLE_BYTES (32 * 1024)
/** Upper bound of the upstream response head we keep. */
#define PX_MAX_HEAD_BYTES (64 * 1024)

/* One response header line from upstream: name and value point into px_http.hb. */
struct px_header {
    char *name;
    char *value;
    size_t off, voff; /* of the name and the value in px_http.hb */
};

/* Headers and header bytes an ordinary answer head fits in without an allocation. */
#define PX_HEAD_INLINE 16
#define PX_HEAD_INLINE_BYTES 1024

/* State shared by the request (on the event loop and the workers), the transfer
 * thread and the MHD response. */
struct px_http {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    struct rk_app *app;
    CURL *curl;
    struct curl_slist *hdrs;
    char *url;
    char errbuf[CURL_ERROR_SIZE];
    struct rk_bytepipe *req;  /* client body -> curl; NULL without a streamed body */
    struct rk_bytepipe *resp; /* curl -> client */
    int client_fd;
    int timeout_ms;  /* upstream inactivity limit (proxy.timeout) */
    int connect_ms;  /* connection limit (proxy.connect_timeout_s) */
    char *prefix;    /* proxy prefix for Location rewriting */
    char *base_path; /* the endpoint's own path */
    char sandbox_id[128];
    int port;
    /* response head (written by the worker until head_done) */
    long status;
    struct px_header *h; /* h_small, or allocated when more headers came */
    size_t nh, h_cap, head_bytes;
    char *hb; /* the headers' text, "name\0value\0" each: hb_small or allocated */
    size_t hb_len, hb_cap;
    struct px_header h_small[PX_HEAD_INLINE];
    char hb_small[PX_HEAD_INLINE_BYTES];
    int head_too_big;
    int head_oom; /* a header of the final head could not be kept: answered 500 */
    int head_done;
    int whole;        /* a small answer of known length: answered once complete, in one buffer */
    size_t whole_len; /* ... and that length */
    char *whole_buf;  /* the HTTP/1.1 client writes such an answer here, not into the pipe */
    size_t whole_got; /* ... this much of it so far (more than whole_len: a defect, refused) */
    int nobody;       /* a HEAD request: the answer has no body */
    /* progress */
    int finished;
    CURLcode result;
    int timed_out;
    int cancel;          /* the request side gave up */
    int discard_body;    /* the upstream answered early: the rest of the client body is dropped */
    int reader_attached; /* the client response is being produced */
    /* the event engine: the request (its connection is suspended while the
     * content reader or the body wait for the pipes), and the deferred request
     * waiting for the response head (answered by the transfer thread) */
    struct rk_req *owner;
    struct rk_req *waiter;
    int64_t peer_checked_ms; /* last client-gone check */
    /* the relay transfer loop (relay_http_loop.c; loop thread only unless noted) */
    struct rku_curl_job job;    /* the transfer on its loop (relay_http_loop.c) */
    struct rku_curl_loop *loop; /* the request's event loop's curl loop (rk_req_curl_loop) */
    int paused_recv;            /* the response pipe was full */
    int paused_send;            /* the request pipe was empty */
    int64_t last_io_ms;
    int64_t wait_start_ms;
    curl_off_t last_dl, last_ul;
    /* the loop's HTTP/1.1 client instead of libcurl (relay_http_h1.c; curl is then NULL) */
    struct rku_h1 *h1;     /* the client carrying the transfer, or NULL */
    struct rku_h1_xchg hx; /* the exchange on it */
};

/** Stop the transfer from the request side and wake every waiter. */
void rk_px_cancel(struct px_http *px);
/** libcurl header callback: note activity, bound the head's size, and at the end of the final
 * head take its status and headers. Lines are not parsed here (curl_easy_nextheader). */
size_t rk_px_header_cb(char *line, size_t size, size_t n, void *ud);
/** libcurl progress callback: cancellation and the inactivity limit. */
int rk_px_progress_cb(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                      curl_off_t ulnow);
/** libcurl read callback: the client body from the request pipe (pauses while
 *  it is empty). */
size_t rk_px_read_cb(char *buf, size_t size, size_t n, void *ud);
/** The transfer ended: the handle back to the pool (kept with its connection
 *  when reusable), the result published, the waiter answered. */
void rk_px_finish(struct px_http *px, CURLcode res, int reusable);
/** 1 when the transfer must stop now: cancelled, the daemon stops, the client
 *  left, or upstream inactivity over proxy.timeout_s (then timed_out is set). */
int rk_px_should_abort(struct px_http *px, int64_t now);
/** The MHD content reader: the upstream body as it arrives; never waits (with
 *  nothing to send it suspends the connection until the transfer writes). */
ssize_t rk_px_reader(void *cls, uint64_t pos, char *buf, size_t max);
/** The MHD response is gone: stop the worker and drop its reference. */
void rk_px_response_free(void *cls);
/** Answer the request from the response head, or with the transfer's error
 *  (relay_http.c; a worker or the transfer thread). */
void rk_px_answer(struct rk_req *r, struct px_http *px);
/** The head arrived or the transfer ended: answer the deferred request
 *  waiting for it, if any. Not under px->mu. */
void rk_px_wake_waiter(struct px_http *px);
/** The final response head is in (px->status, px->h; not under px->mu): publish it and wake
 *  the request waiting for it, unless the answer is small enough to be held whole. */
void rk_px_head_complete(struct px_http *px);
/** Make px's request for the HTTP/1.1 client of r's event loop when it can carry it (no
 *  streamed body: empty_body says whether an empty one is sent; a plain-HTTP IP literal),
 *  with the header lines ("Name: value\r\n" each). 1 when prepared (relay_http_h1.c; px->url
 *  and px->nobody set), 0 when libcurl must carry it, -1 out of memory. */
int rk_http_h1_prepare(struct px_http *px, struct rk_req *r, const struct rk_buf *lines,
                       int empty_body);
/** Submit the prepared exchange (takes over the references as rk_http_loop_submit does).
 *  0, or -1 when the loop stops. */
int rk_http_h1_submit(struct px_http *px);
/** Keep one header of the final response head (name and value in one block; the transfer
 *  alone writes them until head_done). 0, or -1 out of memory. */
int rk_px_head_add(struct px_http *px, const char *name, size_t nl, const char *value, size_t vl);
/** The response pipe is full: an answer held to be sent whole is streamed after all (it cannot
 *  happen within its announced length, which the pipe holds), so its waiter is answered. */
void rk_px_release_whole(struct px_http *px);
/** Note upstream activity. */
void rk_px_touch(struct px_http *px);
/** Drop one reference; the last one frees everything. */
void rk_px_unref(struct px_http *px);
/** libcurl write callback: the upstream body into the response pipe (pauses
 *  while it has no room). */
size_t rk_px_write_cb(char *data, size_t size, size_t n, void *ud);

#endif /* RK_RELAY_HTTP_INTERNAL_H */
