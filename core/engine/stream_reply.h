/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A streamed response fed by producers on other threads: a bounded byte
 * queue whose pushes never block (a producer may be a plugin's event loop,
 * whose sinks must not wait) and whose reader is the response's content
 * reader. The engine owns how the reader waits for data (today: the
 * connection's own thread waits on a condition variable with a timeout; an
 * event-driven engine would suspend the connection and resume it on a push),
 * so handlers only push, close and react to the client leaving.
 *
 * Bounded: a push that would take the queue over its capacity is refused
 * (the producer decides: fail the work, or drop). The queue starts small and
 * doubles while the client falls behind, up to the capacity, charged to the
 * memory budget (server.max_buffered_bytes); a push the budget refuses fails
 * like a full queue.
 */
#ifndef RK_STREAM_REPLY_H
#define RK_STREAM_REPLY_H

#include <stddef.h>
#include <stdint.h>

struct rk_req;
struct rk_outstream;

/** Called once when the response ends (sent whole, failed, or the client
 *  left), on the connection's thread; the stream may still be pushed to. */
typedef void (*rk_stream_gone_fn)(void *ctx);
/** Called on the reader's side when nothing was pushed for idle_ms: it may
 *  push a keep-alive (e.g. a protocol ping). */
typedef void (*rk_stream_idle_fn)(struct rk_outstream *s, void *ctx);

/** A stream holding at most cap bytes; idle (may be NULL) runs after every
 *  idle_ms without data. The caller holds one reference. */
struct rk_outstream *rk_stream_new(size_t cap, int64_t idle_ms, rk_stream_idle_fn idle,
                                   void *idle_ctx);
/** Take another reference (a producer thread). */
void rk_stream_ref(struct rk_outstream *s);
/** Drop a reference; the last one frees the stream. */
void rk_stream_unref(struct rk_outstream *s);

/** Queue len bytes (copied) without waiting, leaving at least keep_free bytes
 *  of the capacity free (room a producer keeps for its last message): 0, or
 *  -1 when they do not fit or the stream is closed or finished. */
int rk_stream_push(struct rk_outstream *s, const void *data, size_t len, size_t keep_free);
/**
 * Queue len bytes, waiting while the queue is full: for a producer on a
 * worker that may block (a plugin's blocking transfer feeding a download).
 * Returns 0; -1 once the response ended (the client left) or the stream was
 * closed; -2 when deadline_ms (monotonic ms, 0 = none) passed while waiting;
 * -3 when the memory budget (server.max_buffered_bytes) refuses even the
 * first bytes of the queue.
 */
int rk_stream_push_wait(struct rk_outstream *s, const void *data, size_t len, int64_t deadline_ms);
/** End of data: the reader finishes the response once the queue is drained. */
void rk_stream_close(struct rk_outstream *s);
/** End the response with an error: the client sees the transfer cut short
 *  (no final chunk), never a complete-looking body. */
void rk_stream_abort(struct rk_outstream *s);
/** 1 once the response has ended (the client left or got everything). */
int rk_stream_finished(struct rk_outstream *s);

/**
 * Answer r with the stream's bytes as they come (chunked, length unknown),
 * with the given status and Content-Type. The response takes a reference;
 * gone(ctx) runs once when it ends. On failure to build the response, gone
 * runs at once and r is answered 500.
 */
void rk_req_reply_stream(struct rk_req *r, unsigned status, const char *content_type,
                         struct rk_outstream *s, rk_stream_gone_fn gone, void *ctx);

/** The watchdog's tick (every pass, any thread but a loop's): resume the
 *  streams waiting for data whose client hung up, whose idle keep-alive is due
 *  (idle_ms) or whose daemon stops, so their reader ends or pings. */
void rk_stream_tick(int64_t now);

#endif /* RK_STREAM_REPLY_H */
