/* SPDX-License-Identifier: Apache-2.0 */
/* A bounded, blocking byte pipe between two threads (one writer, one reader).
 * Used to stream request bodies into upstream calls without buffering them
 * whole: the writer blocks while the pipe is full (backpressure). */
#ifndef RK_BYTEPIPE_H
#define RK_BYTEPIPE_H

#include <stddef.h>
#include <sys/types.h>

struct rk_bytepipe;

/** Create a pipe holding at most capacity bytes (its ring is allocated small and grows
 *  to capacity only as writes need it). */
struct rk_bytepipe *rk_bytepipe_new(size_t capacity);
/** Free a pipe (both sides must be done with it). */
void rk_bytepipe_free(struct rk_bytepipe *p);
/** Write all len bytes, blocking while full. Returns 0, or -1 if the reader
 *  aborted (the data is then discarded). */
int rk_bytepipe_write(struct rk_bytepipe *p, const void *data, size_t len);
/** Like rk_bytepipe_write, but wait for room at most timeout_ms (0 = no
 *  limit) at a time: returns 0 when all went in, -1 if aborted, 1 on timeout;
 *  *written (may be NULL) says how many bytes went in. */
int rk_bytepipe_write_timed(struct rk_bytepipe *p, const void *data, size_t len, int timeout_ms,
                            size_t *written);
/** Mark the end of data (reader sees 0 after draining). */
void rk_bytepipe_close(struct rk_bytepipe *p);
/** Read up to len bytes, blocking while empty. Returns the count, 0 at end of
 *  data, -1 if aborted, -2 if timeout_ms (0 = none) passed with nothing to read. */
ssize_t rk_bytepipe_read(struct rk_bytepipe *p, void *buf, size_t len, int timeout_ms);
/** Abort from either side: wakes both; later writes fail and reads return -1. */
void rk_bytepipe_abort(struct rk_bytepipe *p);
/** 1 if aborted. */
int rk_bytepipe_aborted(struct rk_bytepipe *p);

/* ---- for a side that must not block (an event loop) ---- */

/** Free space now (0 once aborted). */
size_t rk_bytepipe_room(struct rk_bytepipe *p);
/** Read what is there without waiting: the count, 0 at end of data, -1 if
 *  aborted, -2 if empty (the pipe is still open). One reader only. */
ssize_t rk_bytepipe_try_read(struct rk_bytepipe *p, void *buf, size_t len);
/** Returns 1 if at least want bytes are free (or the pipe was aborted) now;
 *  otherwise registers fn(ctx) to run once, on the reader's thread, when a
 *  read leaves that much room or the pipe is aborted, and returns 0. */
int rk_bytepipe_notify_room(struct rk_bytepipe *p, size_t want, void (*fn)(void *ctx), void *ctx);
/** Returns 1 if bytes, the end or an abort can be read now; otherwise
 *  registers fn(ctx) to run once, on the writer's thread, when one of them
 *  arrives, and returns 0. */
int rk_bytepipe_notify_data(struct rk_bytepipe *p, void (*fn)(void *ctx), void *ctx);
/** Forget the registered notifications (before the side that registered goes away). */
void rk_bytepipe_notify_cancel(struct rk_bytepipe *p);

#endif /* RK_BYTEPIPE_H */
