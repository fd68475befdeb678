/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's event loops: a thread each, driving one libmicrohttpd daemon
 * one curl multi and one HTTP/1.1 client on one epoll set (event_loops.c).
 * Private to the engine except rk_evloop_current / rk_evloop_curl /
 * rk_evloop_h1, which request.c uses to give a request the upstream clients of
 * its connection's thread (rk_req_curl_loop, rk_req_h1).
 */
#ifndef RK_ENGINE_EVENT_LOOPS_H
#define RK_ENGINE_EVENT_LOOPS_H

#include <microhttpd.h>

struct rk_evloop;
struct rku_curl_loop;
struct rk_store;
struct rk_store_reader;

/** A loop for daemon (started in epoll mode without a thread of its own), not
 *  yet running, with a store reader on store when the store has one (Redis;
 *  store may be NULL). NULL on failure (logged). */
struct rk_evloop *rk_evloop_new(struct MHD_Daemon *daemon, struct rk_store *store);

/** Start the loop's thread. 0, or -1 (logged). */
int rk_evloop_start(struct rk_evloop *el);

/** Stop taking upstream transfers; the running loop ends the open ones (their
 *  deadlines, their abort checks). */
void rk_evloop_stop_transfers(struct rk_evloop *el);

/** 1 once no upstream transfer is open on the loop (after rk_evloop_stop_transfers). */
int rk_evloop_transfers_done(struct rk_evloop *el);

/** Make the loop run libmicrohttpd soon (any thread): after MHD_resume_connection of one of
 *  its connections. */
void rk_evloop_wake(struct rk_evloop *el);

/** Stop the loop's thread and wait for it (idempotent). The daemon is left as
 *  it is: the caller stops it. */
void rk_evloop_join(struct rk_evloop *el);

/** Join (if running) and free the loop: transfers still open end aborted on
 *  the calling thread (NULL-safe). */
void rk_evloop_free(struct rk_evloop *el);

/** The loop whose thread calls this, or NULL off the event loops. */
struct rk_evloop *rk_evloop_current(void);

/** The loop's curl multi loop (lib/rkcurlloop.h). */
struct rku_curl_loop *rk_evloop_curl(const struct rk_evloop *el);

struct rku_h1;
/** The loop's HTTP/1.1 client (lib/rkh1.h). */
struct rku_h1 *rk_evloop_h1(const struct rk_evloop *el);

/** The loop's store reader (store/store_reader.h), or NULL: use it only on the loop's own
 *  thread. */
struct rk_store_reader *rk_evloop_store_reader(const struct rk_evloop *el);

#endif /* RK_ENGINE_EVENT_LOOPS_H */
