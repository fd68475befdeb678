/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker pool: a fixed set of threads that run everything that may block
 * (store and Redis calls, plugin calls, the gate, upstream transfers), fed
 * by one bounded FIFO queue. The event threads never block: they queue a job
 * and suspend the connection; a full queue is refused at once (the caller
 * answers "busy"), so the pool, not the connection count, bounds the
 * concurrency toward the backend (server.workers, server.worker_queue).
 */
#ifndef RK_WORKERS_H
#define RK_WORKERS_H

struct rk_workers;

/** Start nthreads worker threads with a queue of at most queue_max waiting
 *  jobs. NULL (logged) if a thread cannot be created. */
struct rk_workers *rk_workers_new(int nthreads, int queue_max);

/** Queue fn(arg) to run on a worker. 0, or -1 when the queue is full or the
 *  pool is stopping (fn is then not run). Any thread. */
int rk_workers_submit(struct rk_workers *w, void (*fn)(void *), void *arg);

/** Jobs waiting in the queue and jobs running (for metrics and tests). */
void rk_workers_load(struct rk_workers *w, int *queued, int *running);

/** Refuse new jobs (rk_workers_submit returns -1 from now on), run the ones
 *  queued, wait for all to finish and join the threads. Idempotent. */
void rk_workers_stop(struct rk_workers *w);

/** Stop the pool (rk_workers_stop) and free it. NULL is ignored. */
void rk_workers_free(struct rk_workers *w);

#endif /* RK_WORKERS_H */
