/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Asynchronous store reads for an event loop (docs/architecture.md "Concurrency model"):
 * one reader per event loop, used only on that loop's thread. The hot read of the status
 * routes (a record with its idle touch and the reconciler's mark, rk_store_get_touch) is
 * sent on the reader's own Redis connection and answered through a callback on the loop,
 * so a status read never leaves its loop and never parks a thread; reads issued in one turn
 * of the loop share one write and one read on the socket.
 *
 * The reader is an optimisation, never a second source of truth: whenever it cannot take a
 * read (no connection yet, a failure being backed off, its bound of pending reads reached,
 * a master address that is a host name, whose lookup would block) the caller does the
 * synchronous read on a worker instead, and a read that fails here (connection lost, error
 * reply, deadline) is reported as RK_STORE_ERROR so that the caller can do the same. The
 * synchronous pool keeps Sentinel discovery; the reader follows the master the pool found.
 */
#ifndef RK_STORE_STORE_READER_H
#define RK_STORE_STORE_READER_H

#include <json-c/json.h>
#include <stdint.h>

#include "store/store.h"

struct rk_store_reader;

/** Called exactly once per accepted read, on the loop's thread from rk_store_reader_run (or
 *  rk_store_reader_free). rc as rk_store_get_touch; found (RK_STORE_OK) is the record, to read
 *  and never to change; mark is the reconciler's mark ("" when none); err describes an
 *  RK_STORE_ERROR. */
typedef void rk_store_read_cb(void *arg, rk_store_rc rc, const struct rk_store_found *found,
                              const char *mark, const char *err);

/** 1 when the store's reads may wait on the network (Redis), 0 when they answer from memory
 *  (the in-process store: a read may run on an event loop as it is). */
int rk_store_reads_block(const struct rk_store *st);

/** A reader for one event loop, or NULL when the store has none (the in-process store, whose
 *  reads do not block) or memory ran out. Any thread; use it on one loop's thread only. */
struct rk_store_reader *rk_store_reader_new(struct rk_store *st);

/** The descriptor the loop watches for readability (an epoll set holding the connection). */
int rk_store_reader_fd(const struct rk_store_reader *rd);

/** Do what is due: socket I/O, replies (their callbacks run here), deadlines. Returns the
 *  milliseconds until it must run again without activity (a pending read's deadline), or -1. */
int rk_store_reader_run(struct rk_store_reader *rd);

/** Read a record as rk_store_get_touch(st, id, now_s, ...). 0 when accepted (cb follows from
 *  rk_store_reader_run), -1 when the reader cannot take it now: read synchronously instead. */
int rk_store_reader_get_touch(struct rk_store_reader *rd, const char *id, int64_t now_s,
                              rk_store_read_cb *cb, void *arg);

/** Close the connection; reads still pending are called back with RK_STORE_ERROR. */
void rk_store_reader_free(struct rk_store_reader *rd);

#endif /* RK_STORE_STORE_READER_H */
