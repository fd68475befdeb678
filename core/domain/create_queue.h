/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The create queue: start_async stores the pending record and queues its
 * backend create in the store (store.h, "the create queue"); a feeder thread
 * claims queued creates in FIFO order under a lease and hands them to create
 * workers — at most runtime.create_concurrency backend creates at once across
 * every admin on the store, at most runtime.create_rate started per second.
 * Workers start on demand and end when idle. A create another admin queued is
 * taken once it has waited a little (its admin is busy or dead); a claim whose
 * admin died is queued again when its lease runs out.
 */
#ifndef RK_CREATE_QUEUE_H
#define RK_CREATE_QUEUE_H

#include <stdint.h>

#include <json-c/json.h>

#include "rock-admin/operator.h"
#include "store/store.h"

struct rk_app;
struct rk_call;

/** Runs the backend create of one claimed create: sandbox id, its record as the claim read it
 *  (borrowed; NULL when it is gone) and whether an earlier claim of it lapsed (that create may
 *  have reached the backend): rk_lifecycle_create_queued. */
typedef void (*rk_create_run_fn)(struct rk_app *app, const char *id, json_object *rec, int retaken);

/** Start the feeder and register the queue's /metrics families; workers run
 *  each claimed create with run. 0, or -1 when the thread cannot start. */
int rk_create_queue_start(struct rk_app *app, rk_create_run_fn run);

/** Stop claiming, give claimed creates that have not started back to the
 *  queue (another admin takes them) and wait for the running ones until
 *  deadline_ms (monotonic). */
void rk_create_queue_stop(struct rk_app *app, int64_t deadline_ms);

/** Queue the backend create of the stored pending record id. RK_OK, or an
 *  error on call that names the exhausted capacity (runtime.create_queue_max)
 *  or the store. */
rk_status rk_create_queue_submit(struct rk_app *app, struct rk_call *call, const char *id);

/** Store the new pending record rec of id (idle deadline expire_time) and queue its backend
 *  create in one atomic store step (rk_createq_create). RK_STORE_OK; RK_STORE_EXISTS: nothing
 *  stored, the id is active; RK_STORE_FULL: the record is stored but its create is not queued,
 *  and call carries the error naming the exhausted capacity (the caller fails the record);
 *  RK_STORE_ERROR: err says why. */
rk_store_rc rk_create_queue_submit_new(struct rk_app *app, struct rk_call *call, const char *id,
                                       json_object *rec, int64_t expire_time, char *err,
                                       size_t errlen);

/** Take id's create out of the queue if no admin has claimed it yet: 1 when
 *  removed (the backend create will never run), 0 when it is not queued
 *  (running, done or never queued), -1 on a store error (logged). */
int rk_create_queue_cancel(struct rk_app *app, const char *id);

/** 1 while id's create is queued or claimed by some admin (so a missing
 *  backend sandbox means "not created yet"), 0 otherwise or on a store error. */
int rk_create_queue_pending(struct rk_app *app, const char *id);

#endif /* RK_CREATE_QUEUE_H */
