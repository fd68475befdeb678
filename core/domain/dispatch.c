/* SPDX-License-Identifier: Apache-2.0 */
#include "domain/dispatch.h"

#include <stdio.h>
#include <string.h>

#include "base/app.h"
#include "host/host.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "domain/record.h"
#include "store/store.h"
#include "base/util.h"
#include "base/ident.h"
#include "domain/activity.h"

/* One row per operation: the gate's whole policy lives in this table. */
static const struct rk_op_info op_table[RK_OP_COUNT] = {
    [RK_OP_STATUS] = {"get_status", 0, 0, 0},
    [RK_OP_EXEC] = {"execute", RK_CAP_EXEC, 1, 1},
    [RK_OP_FILE_READ] = {"read_file", RK_CAP_FILE_READ, 1, 1},
    [RK_OP_FILE_WRITE] = {"write_file", RK_CAP_FILE_WRITE | RK_CAP_FILE_STAT, 1, 1},
    [RK_OP_UPLOAD] = {"upload", RK_CAP_FILE_WRITE | RK_CAP_FILE_STAT, 1, 1},
    [RK_OP_SESSION_CREATE] = {"create_session", RK_CAP_SESSION, 1, 1},
    [RK_OP_SESSION_RUN] = {"run_in_session", RK_CAP_SESSION, 1, 1},
    [RK_OP_SESSION_CLOSE] = {"close_session", RK_CAP_SESSION, 1, 1},
    [RK_OP_STOP] = {"stop", RK_CAP_STOP, 0, 0},
    [RK_OP_RESTART] = {"restart", RK_CAP_RESTART, 0, 0},
    [RK_OP_ARCHIVE] = {"archive", RK_CAP_ARCHIVE, 0, 0}, /* or RK_CAP_SNAPSHOT, see below */
    [RK_OP_COMMIT] = {"commit", RK_CAP_COMMIT, 0, 0},
    [RK_OP_STATISTICS] = {"get_sandbox_statistics", RK_CAP_STATISTICS, 0, 0},
    [RK_OP_DELETE] = {"delete", 0, 0, 0},
    [RK_OP_PROXY_HTTP] = {"http proxy", RK_CAP_PROXY_HTTP, 1, 1},
    [RK_OP_PROXY_WS] = {"websocket proxy", RK_CAP_PROXY_WS, 1, 1},
    [RK_OP_PORT_FORWARD] = {"portforward", RK_CAP_PORT_FORWARD, 1, 1},
    [RK_OP_RESTORE] = {"restore", RK_CAP_RESTORE, 0, 0},
};

const struct rk_op_info *rk_op_info(enum rk_op op)
{
    return (op >= 0 && op < RK_OP_COUNT) ? &op_table[op] : NULL;
}

void rk_target_release(struct rk_target *t)
{
    if (t->rec)
        json_object_put(t->rec);
    memset(t, 0, sizeof *t);
}

void rk_target_detach(struct rk_target *t, struct rk_call *call)
{
    if (!t->rec)
        return;
    t->ref.sandbox_id = t->ref.sandbox_id ? rk_arena_strdup(call, t->ref.sandbox_id) : NULL;
    t->ref.upstream_id = t->ref.upstream_id ? rk_arena_strdup(call, t->ref.upstream_id) : NULL;
    t->ref.backend_tag = t->ref.backend_tag ? rk_arena_strdup(call, t->ref.backend_tag) : NULL;
    json_object_put(t->rec);
    t->rec = NULL;
}

void rk_dispatch_touch(struct rk_app *app, json_object *rec)
{
    if (!rk_state_is_active(rk_rec_state(rec)))
        return;
    json_object *m;
    int64_t minutes = 0;
    if (json_object_object_get_ex(rec, "auto_clear_time", &m) && m)
        minutes = json_object_get_int64(m);
    if (minutes <= 0)
        return;
    const char *id = rk_rec_str(rec, "sandbox_id");
    if (!id)
        return;
    int64_t expire = rk_activity_deadline(rk_epoch_s(), minutes);
    char err[RK_STORE_ERRLEN];
    if (rk_store_touch(app->store, id, expire, err, sizeof err) != RK_STORE_OK)
        rk_warn("cannot refresh idle deadline of %s: %s", id, err);
    json_object_object_add(rec, "expire_time", json_object_new_int64(expire));
    rk_activity_renew(app, rec, expire);
}

/*
 * Decide: run the gate's checks 2-5 on a stored record, with no side effect.
 * Returns RK_OK or the refusal recorded on call; *owned says whether the
 * record belongs to the loaded operator (checks 2-3 passed), *upstream is its
 * backend id.
 */
static rk_status gate_decide(const struct rk_app *app, struct rk_call *call,
                             const struct rk_op_info *info, const char *sandbox_id,
                             json_object *rec, int *owned, const char **upstream)
{
    const struct rk_plugin *pl = app->plugin;
    const struct rk_operator *desc = pl->desc;
    *owned = 0;
    *upstream = NULL;

    /* 2. + 3. Fail closed on a missing or foreign backend tag (B113-B115). */
    const char *tag = rk_rec_backend(rec);
    if (!tag)
        return rk_call_set_error(call, RK_E_INVALID,
                                 "%s sandbox metadata is missing required backend",
                                 desc->display_name);
    if (strcmp(tag, desc->backend_tag) != 0)
        return rk_call_set_error(call, RK_E_INVALID,
                                 "Sandbox backend %s conflicts with configured operator %s", tag,
                                 desc->name);
    *owned = 1;

    /* 4. Capability (B25/B26: refused without calling the backend). */
    uint64_t need = info->cap;
    if (info == rk_op_info(RK_OP_ARCHIVE) && (pl->caps & RK_CAP_SNAPSHOT))
        need = RK_CAP_SNAPSHOT; /* ABI 1.1: archive by snapshots */
    if (need && (pl->caps & need) != need) {
        uint64_t missing = need & ~pl->caps;
        uint64_t first = missing & (~missing + 1);
        char buf[256];
        const char *msg = rk_plugin_unsupported(pl, first, info->name, buf, sizeof buf);
        return rk_call_set_error(call, RK_E_UNSUPPORTED, "%s", msg);
    }

    /* 5. State precondition (B116). */
    enum rk_state st = rk_rec_state(rec);
    if (info->needs_running && st != RK_STATE_RUNNING) {
        const char *name = rk_state_name(st);
        return rk_call_set_error(call, RK_E_NOT_RUNNING, "Sandbox %s is not running (state=%s)",
                                 sandbox_id, name ? name : "unknown");
    }

    *upstream = rk_rec_upstream_id(rec, desc->backend_tag);
    if (info->needs_running && !*upstream)
        /* B52: a running record without its backend id cannot be served. */
        return rk_call_set_error(call, RK_E_INVALID, "%s sandbox metadata is missing %s_id",
                                 desc->display_name, desc->backend_tag);
    return RK_OK;
}

rk_status rk_gate_decide(const struct rk_app *app, struct rk_call *call, enum rk_op op,
                         const char *sandbox_id, json_object *rec, int *owned,
                         const char **upstream)
{
    return gate_decide(app, call, rk_op_info(op), sandbox_id, rec, owned, upstream);
}

/* The gate on a stored record; touched says the idle deadline was already
 * refreshed in the same round trip that read the record. */
static rk_status dispatch_stored(struct rk_app *app, struct rk_call *call, enum rk_op op,
                                 const char *sandbox_id, json_object *rec, int touched,
                                 struct rk_target *t)
{
    memset(t, 0, sizeof *t);
    const struct rk_op_info *info = rk_op_info(op);
    int owned;
    const char *upstream;
    rk_status st = gate_decide(app, call, info, sandbox_id, rec, &owned, &upstream);

    /* Then act. Runtime entry points refresh the idle timer even when they
     * are then refused for a capability or state reason, as the original does
     * (U35); a record that is not this operator's is never written here. */
    if (info->touches_idle && owned) {
        if (!touched)
            rk_dispatch_touch(app, rec);
        else /* the read moved the idle deadline; the backend's expiry follows it */
            rk_activity_renew_used(app, rec);
    }
    if (st != RK_OK) {
        json_object_put(rec);
        return st;
    }
    t->rec = rec;
    t->ref.sandbox_id = rk_rec_str(rec, "sandbox_id");
    if (!t->ref.sandbox_id)
        t->ref.sandbox_id = sandbox_id;
    t->ref.upstream_id = upstream;
    t->ref.backend_tag = app->plugin->desc->backend_tag;
    t->ref.state = rk_rec_state(rec);
    return RK_OK;
}

rk_status rk_dispatch_record(struct rk_app *app, struct rk_call *call, enum rk_op op,
                             const char *sandbox_id, json_object *rec, struct rk_target *t)
{
    return dispatch_stored(app, call, op, sandbox_id, rec, 0, t);
}

rk_status rk_dispatch(struct rk_app *app, struct rk_call *call, enum rk_op op,
                      const char *sandbox_id, struct rk_target *t)
{
    memset(t, 0, sizeof *t);
    char err[RK_STORE_ERRLEN];
    /* 0. Defence in depth for routes that read the id without rk_v_* (path
     *    parameters): the identifier rule of base/ident.h, before any store call. */
    if (sandbox_id && *sandbox_id && !rk_id_valid(sandbox_id, strlen(sandbox_id)))
        return rk_call_set_error(call, RK_E_INVALID, "sandbox_id: " RK_ID_RULE_MSG);
    /* 1. The record must exist. Runtime entry points read it and refresh the
     *    idle timer in one store call (get-and-touch); the store's touch only
     *    moves the deadline of an active record with an idle timeout, so the
     *    touch of a record the gate then refuses is the original's order (U35). */
    const struct rk_op_info *info = rk_op_info(op);
    json_object *rec = NULL;
    rk_store_rc rc =
        info->touches_idle
            ? rk_store_get_touch(app->store, sandbox_id, rk_activity_touch_second(sandbox_id), &rec,
                                 NULL, 0, err, sizeof err)
            : rk_store_get(app->store, sandbox_id, &rec, err, sizeof err);
    if (rc == RK_STORE_NOT_FOUND)
        return rk_call_set_error(call, RK_E_NOT_FOUND, "Sandbox %s not found", sandbox_id);
    if (rc != RK_STORE_OK)
        return rk_call_set_error(call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
    return dispatch_stored(app, call, op, sandbox_id, rec, info->touches_idle, t);
}
