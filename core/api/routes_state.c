/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /stop, /delete, /restart and /sandboxes/{id}/restart (§5.12-5.14):
 * the state machine's synchronous moves. Each passes the gate, checks the
 * state it starts from, calls the plugin and persists the transition with a
 * guard (lifecycle.c), so a concurrent delete or restart is never undone.
 */
#include <stdio.h>
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "api/sandbox_ops.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/archive.h"
#include "domain/create_queue.h"
#include "domain/record.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "store/store.h"

rk_status rk_sandbox_delete(struct rk_req *r, const char *id)
{
    struct rk_app *app = r->app;
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    rk_store_rc rc = rk_store_get(app->store, id, &rec, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        return rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
    /* Unknown or already deleted: nothing to do (§5.13). */
    if (rc == RK_STORE_NOT_FOUND || rk_rec_state(rec) == RK_STATE_DELETED) {
        json_object_put(rec);
        return RK_OK;
    }
    struct rk_target t;
    rk_status st = rk_dispatch_record(app, r->call, RK_OP_DELETE, id, rec, &t);
    if (st != RK_OK)
        return st;
    enum rk_state from = t.ref.state;
    const char *event = from == RK_STATE_RUNNING ? "delete_running" : "delete";
    if (from == RK_STATE_ARCHIVING) {
        st = rk_call_set_error(r->call, RK_E_INVALID,
                               "Sandbox %s cannot be deleted: current state is "
                               "'archiving', must be stopped or archived first",
                               id);
    } else if (from == RK_STATE_ARCHIVED &&
               rk_archive_delete_snapshot(app, r->call, t.rec) != RK_OK) {
        st = rk_call_error_code(r->call); /* the record keeps its snapshot id for a retry */
    } else if (from == RK_STATE_PENDING && !(app->plugin->caps & RK_CAP_DELETE_PENDING)) {
        /* Pending is deleted like running (a deliberate deviation, §5.13) unless
         * the plugin says it cannot. */
        st = rk_call_set_error(r->call, RK_E_INVALID,
                               "Sandbox %s cannot be deleted: current state is 'pending', "
                               "must be stopped or archived first",
                               id);
    } else {
        st = rk_lifecycle_delete(app, r->call, t.rec, event);
    }
    rk_target_release(&t);
    return st == RK_OK || rk_call_error_code(r->call) != RK_OK
               ? st
               : rk_call_set_error(r->call, st, "delete failed");
}

/* Delete through the gate, replying on failure; shared by /delete and /stop in
 * stop_as_delete mode. */
static int delete_sandbox(struct rk_req *r, const char *id)
{
    if (rk_sandbox_delete(r, id) == RK_OK)
        return 0;
    rk_reply_call_error(r);
    return -1;
}

/* POST /delete (§5.13). */
void rk_route_delete(struct rk_req *r)
{
    /* A plain string: blank values are not rejected by validation. */
    const char *id = rk_body_sandbox_id(r, 0);
    if (id && delete_sandbox(r, id) == 0)
        rk_reply_id_text(r, id, "deleted");
}

/* The plugin's stop or restart on a target that passed the gate (released
 * here), then from -> to persisted with a guard; a sandbox the backend no
 * longer has is marked vanished and the record otherwise stays as it was.
 * Returns -1 with the error on r->call. */
static int backend_move(struct rk_req *r, struct rk_target *t, enum rk_op op, enum rk_state to)
{
    const struct rk_plugin *pl = r->app->plugin;
    const char *id = rk_arena_strdup(r->call, t->ref.sandbox_id);
    enum rk_state from = t->ref.state;
    int had_upstream = t->ref.upstream_id != NULL;
    rk_status st = RK_OK;
    /* A create still queued is taken out: the backend never saw the sandbox. */
    int dequeued = op == RK_OP_STOP && from == RK_STATE_PENDING && !had_upstream &&
                   rk_create_queue_cancel(r->app, id) == 1;
    if (dequeued)
        st = RK_OK;
    else if (op == RK_OP_STOP)
        RK_UPSTREAM(st, pl, stop, r->call, &t->ref);
    else
        RK_UPSTREAM(st, pl, restart, r->call, &t->ref);
    rk_target_release(t);
    if (st == RK_E_NOT_FOUND && had_upstream) /* e.g. its parked lifetime ran out */
        rk_lifecycle_vanished(r->app, id, from);
    if (st != RK_OK)
        return -1;
    /* a stop also applies when the record meanwhile moved pending -> running */
    enum rk_state also = op == RK_OP_STOP ? RK_STATE_PENDING : from;
    rk_lifecycle_transition(r->app, id, op == RK_OP_STOP ? RK_STATE_RUNNING : from, also, to,
                            rk_op_info(op)->name);
    return 0;
}

/* The status of a failed move: the error recorded on r->call (internal when none was). */
static rk_status failed(struct rk_req *r)
{
    rk_status st = rk_call_error_code(r->call);
    return st != RK_OK ? st : RK_E_INTERNAL;
}

/* The refusal of a move from a state the state machine does not allow (on
 * r->call); releases t and returns -1. */
static int refuse_state(struct rk_req *r, struct rk_target *t, const char *verb)
{
    rk_call_set_error(r->call, RK_E_INVALID, "Sandbox %s cannot be %s: current state is '%s'",
                      t->ref.sandbox_id, verb, rk_state_name(t->ref.state));
    rk_target_release(t);
    return -1;
}

rk_status rk_sandbox_stop(struct rk_req *r, const char *id)
{
    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_STOP, id, &t) != RK_OK)
        return failed(r);
    enum rk_state from = t.ref.state;
    if (from == RK_STATE_STOPPED) {
        rk_target_release(&t);
        return RK_OK;
    }
    int rc = from != RK_STATE_RUNNING && from != RK_STATE_PENDING
                 ? refuse_state(r, &t, "stopped")
                 : backend_move(r, &t, RK_OP_STOP, RK_STATE_STOPPED);
    return rc == 0 ? RK_OK : failed(r);
}

/* POST /stop (§5.12). */
void rk_route_stop(struct rk_req *r)
{
    const char *id = rk_body_sandbox_id(r, RK_V_NONBLANK);
    if (!id)
        return;
    struct rk_app *app = r->app;
    uint64_t caps = app->plugin->caps;
    if (!(caps & RK_CAP_STOP) &&
        ((caps & RK_CAP_STOP_DELETES) || app->cfg->runtime.stop_as_delete)) {
        /* Opt-in: unmodified SDK close() callers free their sandboxes. The
         * dispatch order holds: an unknown id is "not found", not Success. */
        char err[RK_STORE_ERRLEN];
        json_object *rec = NULL;
        rk_store_rc rc = rk_store_get(app->store, id, &rec, err, sizeof err);
        json_object_put(rec);
        if (rc == RK_STORE_NOT_FOUND) {
            rk_reply_error(r, RK_E_NOT_FOUND, rk_arena_printf(r->call, "Sandbox %s not found", id));
            return;
        }
        if (delete_sandbox(r, id) == 0)
            rk_reply_id_text(r, id, "stopped");
        return;
    }
    if (rk_sandbox_stop(r, id) == RK_OK)
        rk_reply_id_text(r, id, "stopped");
    else
        rk_reply_call_error(r);
}

rk_status rk_sandbox_restart(struct rk_req *r, const char *id)
{
    struct rk_app *app = r->app;
    struct rk_target t;
    if (rk_dispatch(app, r->call, RK_OP_RESTART, id, &t) != RK_OK)
        return failed(r);
    enum rk_state from = t.ref.state;
    if (from == RK_STATE_ARCHIVED && (app->plugin->caps & RK_CAP_SNAPSHOT)) {
        rk_status st = rk_restore_start(app, r->call, t.rec);
        rk_target_release(&t);
        return st;
    }
    if (from != RK_STATE_STOPPED) {
        refuse_state(r, &t, "restarted");
        return RK_E_INVALID;
    }
    if (!t.ref.upstream_id) {
        /* Stopped while its create was still queued: the backend never had the sandbox, so
         * restarting it queues the create again. */
        rk_target_release(&t);
        char serr[RK_STORE_ERRLEN];
        rk_store_rc rc = rk_lifecycle_transition(app, id, RK_STATE_STOPPED, RK_STATE_STOPPED,
                                                 RK_STATE_PENDING, "restart");
        if (rc != RK_STORE_OK)
            return rk_call_set_error(
                r->call, rc == RK_STORE_ERROR ? RK_E_UNAVAILABLE : RK_E_INVALID,
                "Sandbox %s cannot be restarted: %s", id,
                rc == RK_STORE_ERROR ? "sandbox store unavailable" : "its state changed meanwhile");
        if (rk_create_queue_submit(app, r->call, id) != RK_OK) {
            snprintf(serr, sizeof serr, "%s", rk_call_error_text(r->call));
            rk_lifecycle_transition(app, id, RK_STATE_PENDING, RK_STATE_PENDING, RK_STATE_STOPPED,
                                    "submit_failed");
            return rk_call_set_error(r->call, RK_E_INTERNAL, "%s", serr);
        }
    } else if (backend_move(r, &t, RK_OP_RESTART, RK_STATE_PENDING) != 0) {
        return failed(r);
    }
    /* Active again: the idle timer runs from now; the old sessions end with the restart. */
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    if (rk_store_get(app->store, id, &rec, err, sizeof err) == RK_STORE_OK) {
        rk_dispatch_touch(app, rec);
        rk_lifecycle_reset_sessions(app, r->call, rec);
    }
    json_object_put(rec);
    return RK_OK;
}

/* Both route forms of restart: Success with the start result, or the error. */
static void restart(struct rk_req *r, const char *id)
{
    if (rk_sandbox_restart(r, id) == RK_OK)
        rk_reply_ok(r, rk_start_result(id, NULL));
    else
        rk_reply_call_error(r);
}

/* POST /restart (§5.14). */
void rk_route_restart(struct rk_req *r)
{
    const char *id = rk_body_sandbox_id(r, RK_V_NONBLANK);
    if (id)
        restart(r, id);
}

/* POST /sandboxes/{id}/restart: the path form of /restart. */
void rk_route_restart_path(struct rk_req *r)
{
    restart(r, r->params[0]);
}
