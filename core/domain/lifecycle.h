/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lifecycle logic shared by routes and the background passes: the backend
 * create of a queued record, status refresh (persisting pending->running, vanished->deleted,
 * failures), guarded state transitions, and delete (kill upstream, mark
 * deleted, clear session mappings). The session mappings of a sandbox that a
 * status read found gone are cleared by the next background pass (the
 * sweeper or the reconciler), never by the read.
 */
#ifndef RK_LIFECYCLE_H
#define RK_LIFECYCLE_H

#include <json-c/json.h>

#include "domain/dispatch.h"
#include "domain/record_src.h"
#include "obs/metrics.h"
#include "rock-admin/operator.h"
#include "store/store.h"

/** Call plugin entry `entry` of pl (a const struct rk_plugin *) with the
 *  upstream metrics around it, the metric named after the entry: the one way
 *  the core times a backend call. st receives the entry's status. */
#define RK_UPSTREAM(st, pl, entry, ...)                                                            \
    do {                                                                                           \
        rk_metrics_upstream_begin();                                                               \
        (st) = (pl)->ops.entry((pl)->inst, __VA_ARGS__);                                           \
        rk_metrics_upstream(#entry, (st));                                                         \
    } while (0)

struct rk_app;
struct rk_call;

/** Run the backend create of the pending record id (a create worker claimed it
 *  from the create queue, create_queue.h, which read rec, borrowed, NULL when
 *  gone, in the claim's round trip). Nothing happens when it left pending, has
 *  a backend sandbox or a failure. Otherwise the plugin's create() runs (after
 *  a status() by sandbox id when retaken: an earlier claim lapsed, so that
 *  attempt may have reached the backend), and the outcome is recorded: the
 *  backend id, or the failure that marks the record for immediate deletion.
 *  The record is written only then: the claim itself is the queue's. */
void rk_lifecycle_create_queued(struct rk_app *app, const char *id, json_object *rec, int retaken);

/**
 * Ask the backend for the state of an active record and persist what it
 * learned. *rec_io is replaced by the updated record. On success *shown is the
 * state to report and *alive whether it is running. Backend unreachable gives
 * an error on call.
 */
rk_status rk_lifecycle_refresh(struct rk_app *app, struct rk_call *call, json_object **rec_io,
                               enum rk_state *shown, int *alive);

/** Kill the sandbox upstream (gone = success) and mark the record deleted,
 *  clearing its session mappings. event names the transition. */
rk_status rk_lifecycle_delete(struct rk_app *app, struct rk_call *call, json_object *rec,
                              const char *event);

/** What a reconciler pass keeps of a record between its snapshot and its apply step, enough to
 *  tell whether rk_lifecycle_reconcile would change anything (rk_lifecycle_glance_needs). */
struct rk_rec_glance {
    int present;         /**< an active record of the loaded backend */
    enum rk_state state; /**< stored state */
    char *upstream;      /**< the backend id (malloc'd), NULL while the create runs */
    int observed;        /**< it holds a backend_state or a failure */
    int64_t create_deadline;
};

/** Fill g from rec (read only; NULL: no record) for backend tag; 0, or -1 out of memory. */
int rk_lifecycle_glance(json_object *rec, const char *tag, struct rk_rec_glance *g);
/** rk_lifecycle_glance of a record read as a tree or as its scanned text. */
int rk_lifecycle_glance_src(struct rk_rec_src *rec, const char *tag, struct rk_rec_glance *g);
/** Release what rk_lifecycle_glance kept. */
void rk_lifecycle_glance_free(struct rk_rec_glance *g);
/** 0 when rk_lifecycle_reconcile would change nothing for a record glanced as g given what the
 *  backend listed (info NULL: not listed) — the common case of a pass, which then needs no copy
 *  of the record; 1 when it may. */
int rk_lifecycle_glance_needs(const struct rk_rec_glance *g, const struct rk_status_info *info);
/** 1 if two glances agree on what the apply step decides by (state, backend id, observations). */
int rk_lifecycle_glance_same(const struct rk_rec_glance *a, const struct rk_rec_glance *b);

/** Apply one entry of the reconciler's list pass to a stored record (info NULL: the backend
 *  does not list the sandbox any more). Same transitions as rk_lifecycle_refresh, without the
 *  idle touch. *rec_io may be replaced. */
rk_status rk_lifecycle_reconcile(struct rk_app *app, struct rk_call *call, json_object **rec_io,
                                 const struct rk_status_info *info);

/** What rk_lifecycle_running_many did with one sandbox. */
enum rk_running_outcome {
    RK_RUNNING_NOW = 1, /* recorded running now */
    RK_RUNNING_CHANGED, /* not pending under that backend id (any more): nothing to do */
    RK_RUNNING_OTHER,   /* a failed create or a restore: left to rk_lifecycle_reconcile */
    RK_RUNNING_FAILED   /* the store failed (logged) */
};

/** The backend reports the sandboxes ids[0..n) running under the backend ids upstreams[i]. The
 *  records pending under that id are recorded running as rk_lifecycle_reconcile records them,
 *  all in one store update (rk_store_update_many: two round trips with Redis), each decided on
 *  the stored record; out[i] says what became of each. */
void rk_lifecycle_running_many(struct rk_app *app, const char *const *ids,
                               const char *const *upstreams, size_t n,
                               enum rk_running_outcome *out);

/**
 * Restore an archived sandbox (RK_CAP_RESTORE): if the plugin has the
 * capability and id's record is archived, pass the gate, call restore() and
 * move the record archived -> pending ("restore"); *restored is then 1.
 * Otherwise *restored is 0 and nothing happens. Errors are on call.
 */
rk_status rk_lifecycle_restore(struct rk_app *app, struct rk_call *call, const char *id,
                               int *restored);

/**
 * Wait until the sandbox id is running (POST /start): refresh its state about
 * once a second for at most wait_s seconds or until the call is cancelled.
 * RK_OK when running; RK_E_INTERNAL with the stored failure, or RK_E_TIMEOUT,
 * on call otherwise.
 */
rk_status rk_lifecycle_wait_running(struct rk_app *app, struct rk_call *call, const char *id,
                                    int wait_s);

/**
 * Run a state-changing plugin operation (RK_OP_STOP, RK_OP_RESTART or
 * RK_OP_ARCHIVE) on a sandbox that passed the gate, then move its record to
 * `to` with the operation's name as the event. Errors are on call; the record
 * is unchanged when the plugin fails.
 */
rk_status rk_lifecycle_state_op(struct rk_app *app, struct rk_call *call, enum rk_op op,
                                const struct rk_sandbox_ref *ref, enum rk_state to);

/** Persist from_a|from_b -> to (event) unless the record left those states
 *  meanwhile (RK_STORE_ABORTED: a concurrent delete or restart is never
 *  undone); cached proxy endpoints are forgotten, a store error is logged. */
rk_store_rc rk_lifecycle_transition(struct rk_app *app, const char *id, enum rk_state from_a,
                                    enum rk_state from_b, enum rk_state to, const char *event);

/** A restart gives a fresh process tree (as in ROCK): every session of the sandbox
 *  (record rec) is closed upstream and its name freed, so clients can create their
 *  sessions again. A close that fails upstream is only logged; the names are free
 *  either way. Files and processes started outside sessions are left alone. */
void rk_lifecycle_reset_sessions(struct rk_app *app, struct rk_call *call, json_object *rec);

/** The backend no longer has the sandbox: from -> deleted ("vanished"),
 *  and its session mappings are cleared. */
void rk_lifecycle_vanished(struct rk_app *app, const char *id, enum rk_state from);

/** Background work (sweeper and reconciler passes): clear the session
 *  mappings of the sandboxes that status reads found gone. */
void rk_lifecycle_run_deferred(struct rk_app *app);

/** /metrics collector: rock_admin_sandbox_start_seconds (start_async accepted -> recorded
 *  running for the first time, by this admin). */
void rk_lifecycle_metrics_collect(void *arg, struct rk_buf *out);

#endif /* RK_LIFECYCLE_H */
