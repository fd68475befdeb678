/* SPDX-License-Identifier: Apache-2.0 */
#include "dispatch.h"

#include <stdio.h>
#include <string.h>

#include "app.h"
#include "host.h"
#include "log.h"
#include "plugin_loader.h"
#include "record.h"
#include "store.h"
#include "util.h"

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
    [RK_OP_ARCHIVE] = {"archive", RK_CAP_ARCHIVE, 0, 0},
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
    int64_t expire = rk_epoch_s() + minutes * 60;
    char err[RK_STORE_ERRLEN];
    if (rk_store_touch(app->store, id, expire, err, sizeof err) != RK_STORE_OK)
        rk_warn("cannot refresh idle deadline of %s: %s", id, err);
    json_object_object_add(rec, "expire_time", json_object_new_int64(expire));
}

rk_status rk_dispatch(struct rk_app *app, struct rk_call *call, enum rk_op op,
                      const char *sandbox_id, struct rk_target *t)
{
    memset(t, 0, sizeof *t);
    const struct rk_op_info *info = rk_op_info(op);
    const struct rk_plugin *pl = app->plugin;
    const struct rk_operator *desc = pl->desc;
    char err[RK_STORE_ERRLEN];

    /* 1. The record must exist. */
    json_object *rec = NULL;
    /* Runtime entry points refresh the idle timer before the metadata checks, as the original
     * does (U35): read and touch in one store round trip (issue 15). */
    rk_store_rc rc = info->touches_idle
                         ? rk_store_get_touch(app->store, sandbox_id, rk_epoch_s(), &rec, NULL, 0,
                                              err, sizeof err)
                         : rk_store_get(app->store, sandbox_id, &rec, err, sizeof err);
    if (rc == RK_STORE_NOT_FOUND)
        return rk_call_set_error(call, RK_E_NOT_FOUND, "Sandbox %s not found", sandbox_id);
    if (rc != RK_STORE_OK)
        return rk_call_set_error(call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);

    /* 2. + 3. Fail closed on a missing or foreign backend tag (B113-B115). */
    const char *tag = rk_rec_backend(rec);
    if (!tag) {
        json_object_put(rec);
        return rk_call_set_error(call, RK_E_INVALID,
                                 "%s sandbox metadata is missing required backend",
                                 desc->display_name);
    }
    if (strcmp(tag, desc->backend_tag) != 0) {
        rk_call_set_error(call, RK_E_INVALID,
                          "Sandbox backend %s conflicts with configured operator %s", tag,
                          desc->name);
        json_object_put(rec);
        return RK_E_INVALID;
    }

    /* 4. Capability (B25/B26: refused without calling the backend). */
    if (info->cap && (desc->caps & info->cap) != info->cap) {
        uint64_t missing = info->cap & ~desc->caps;
        uint64_t first = missing & (~missing + 1);
        char buf[256];
        const char *msg = rk_plugin_unsupported(pl, first, info->name, buf, sizeof buf);
        json_object_put(rec);
        return rk_call_set_error(call, RK_E_UNSUPPORTED, "%s", msg);
    }

    /* 5. State precondition (B116). */
    enum rk_state st = rk_rec_state(rec);
    if (info->needs_running && st != RK_STATE_RUNNING) {
        const char *name = rk_state_name(st);
        rk_call_set_error(call, RK_E_NOT_RUNNING, "Sandbox %s is not running (state=%s)",
                          sandbox_id, name ? name : "unknown");
        json_object_put(rec);
        return RK_E_NOT_RUNNING;
    }

    const char *upstream = rk_rec_upstream_id(rec, desc->backend_tag);
    if (info->needs_running && !upstream) {
        /* B52: a running record without its backend id cannot be served. */
        rk_call_set_error(call, RK_E_INVALID, "%s sandbox metadata is missing %s_id",
                          desc->display_name, desc->backend_tag);
        json_object_put(rec);
        return RK_E_INVALID;
    }

    t->rec = rec;
    t->ref.sandbox_id = rk_rec_str(rec, "sandbox_id");
    if (!t->ref.sandbox_id)
        t->ref.sandbox_id = sandbox_id;
    t->ref.upstream_id = upstream;
    t->ref.backend_tag = desc->backend_tag;
    t->ref.state = st;
    return RK_OK;
}
