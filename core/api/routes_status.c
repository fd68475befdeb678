/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The status reads: GET /get_status, /is_alive (§5.2-5.4) and
 * /get_sandbox_statistics. They only read: with the reconciler the record
 * in the store is the answer (one round trip, idle touch included);
 * otherwise the plugin is asked and what it says is persisted in the record
 * (lifecycle.c). Taking over dead archive/restore jobs and clearing the
 * session mappings of vanished sandboxes are background work (reconciler.c,
 * sweeper.c), never a read's.
 */
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "api/sandbox_ops.h"
#include "base/app.h"
#include "base/util.h"
#include "domain/activity.h"
#include "domain/reconciler.h"
#include "domain/record.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "store/store.h"

/* Status when the reconciler keeps the store current: one store round trip (the record, with
 * the idle touch done by the store at most once per second), the backend-tag checks of the
 * dispatch gate on that record, and no backend call. *fallback is set when no recent pass
 * vouches for the store (ask the backend instead). */
static rk_status status_from_store(struct rk_req *r, const char *id, int include_all,
                                   json_object **out, int *fallback)
{
    struct rk_app *app = r->app;
    const struct rk_operator *desc = app->plugin->desc;
    char err[RK_STORE_ERRLEN], mark[RK_STORE_MARK_MAX];
    json_object *rec = NULL;
    *fallback = 0;
    rk_store_rc rc = rk_store_get_touch(app->store, id, rk_activity_touch_second(id), &rec, mark,
                                        sizeof mark, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        return rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
    enum rk_state stored = rc == RK_STORE_OK ? rk_rec_state(rec) : 0;
    if (rk_state_is_active(stored) && !rk_reconciler_mark_fresh(app, mark)) {
        /* No recent successful pass (backend down, no elected admin yet): ask the backend. */
        json_object_put(rec);
        *fallback = 1;
        return RK_OK;
    }
    if (rc == RK_STORE_NOT_FOUND || (!include_all && !rk_state_is_active(stored))) {
        json_object_put(rec);
        return rk_call_set_error(r->call, RK_E_NOT_FOUND, "Sandbox %s not found", id);
    }
    if (rk_state_is_active(stored)) {
        const char *tag = rk_rec_backend(rec);
        rk_status st = RK_OK;
        if (!tag)
            st = rk_call_set_error(r->call, RK_E_INVALID,
                                   "%s sandbox metadata is missing required backend",
                                   desc->display_name);
        else if (strcmp(tag, desc->backend_tag) != 0)
            st = rk_call_set_error(r->call, RK_E_INVALID,
                                   "Sandbox backend %s conflicts with configured operator %s", tag,
                                   desc->name);
        if (st != RK_OK) {
            json_object_put(rec);
            return st;
        }
    }
    json_object *acm;
    if (rk_state_is_active(stored) && json_object_object_get_ex(rec, "auto_clear_time", &acm) &&
        acm && json_object_get_int64(acm) > 0) /* a status poll is use too (renewal) */
        rk_dispatch_renew(app, rec, rk_epoch_s() + json_object_get_int64(acm) * 60);
    json_object *cf;
    int create_failed =
        json_object_object_get_ex(rec, "create_failed", &cf) && json_object_get_boolean(cf);
    /* A backend state the record cannot hold (e.g. failed -> stopped), as the reconciler saw it. */
    enum rk_state shown = stored;
    const char *observed = rk_state_is_active(stored) ? rk_rec_str(rec, "backend_state") : NULL;
    if (observed && rk_state_parse(observed))
        shown = rk_state_parse(observed);
    *out = rk_rec_status(rec, shown, shown == RK_STATE_RUNNING && !create_failed);
    json_object_put(rec);
    return RK_OK;
}

rk_status rk_sandbox_status(struct rk_req *r, const char *id, int include_all, json_object **out)
{
    struct rk_app *app = r->app;
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    *out = NULL;
    if (rk_reconciler_active(app)) {
        int fallback = 0;
        rk_status fs = status_from_store(r, id, include_all, out, &fallback);
        if (!fallback)
            return fs;
    }
    rk_store_rc rc = rk_store_get(app->store, id, &rec, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        return rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
    enum rk_state stored = rc == RK_STORE_OK ? rk_rec_state(rec) : 0;
    if (rc == RK_STORE_NOT_FOUND || (!include_all && !rk_state_is_active(stored))) {
        json_object_put(rec);
        return rk_call_set_error(r->call, RK_E_NOT_FOUND, "Sandbox %s not found", id);
    }
    if (!rk_state_is_active(stored)) {
        /* Final states come from the record; no backend call (B112). */
        *out = rk_rec_status(rec, stored, 0);
        json_object_put(rec);
        return RK_OK;
    }
    struct rk_target t;
    rk_status st = rk_dispatch_record(app, r->call, RK_OP_STATUS, id, rec, &t);
    if (st != RK_OK)
        return st;
    enum rk_state shown;
    int alive;
    st = rk_lifecycle_refresh(app, r->call, &t.rec, &shown, &alive);
    if (st == RK_OK)
        *out = rk_rec_status(t.rec, shown, alive);
    rk_target_release(&t);
    return st;
}

/* GET /get_status (§5.2). */
void rk_route_get_status(struct rk_req *r)
{
    struct rk_route_path p;
    rk_path_query(&p, r);
    const char *id =
        rk_v_qstr(&p.v, r, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK | RK_V_SANDBOX_ID);
    int include_all = rk_v_qbool(&p.v, r, "include_all_states", 0);
    json_object *st = NULL;
    if (rk_path_valid(&p) == 0 && rk_sandbox_status(r, id, include_all, &st) != RK_OK)
        rk_reply_call_error(r);
    else if (st)
        rk_reply_ok(r, st);
    rk_path_end(&p);
}

/* GET /is_alive (§5.4). */
void rk_route_is_alive(struct rk_req *r)
{
    /* Never fails: the admin semantics with the host_name bug fixed (§5.4). */
    const char *id = rk_req_query(r, "sandbox_id");
    rk_req_set_sandbox(r, id); /* kept only when it follows the identifier rule */
    json_object *st = NULL;
    json_object *o = json_object_new_object();
    if (id && *id && rk_id_valid(id, strlen(id)) && rk_sandbox_status(r, id, 0, &st) == RK_OK) {
        json_object *alive = NULL, *host = NULL;
        json_object_object_get_ex(st, "is_alive", &alive);
        json_object_object_get_ex(st, "host_name", &host);
        json_object_object_add(o, "is_alive", json_object_get(alive));
        json_object_object_add(o, "message", json_object_get(host));
        json_object_put(st);
    } else {
        json_object_object_add(o, "is_alive", json_object_new_boolean(0));
        json_object_object_add(o, "message",
                               json_object_new_string(rk_arena_printf(
                                   r->call, "sandbox %s is alive failed", id ? id : "")));
    }
    rk_reply_ok(r, o);
}

/* Sink collecting bytes into an rk_buf (bounded by its cap). */
static rk_status buf_sink_write(void *ctx, enum rk_stream stream, const char *data, size_t len)
{
    (void)stream;
    return rk_buf_append(ctx, data, len) == 0 ? RK_OK : RK_E_TOO_LARGE;
}

/* GET /get_sandbox_statistics: the plugin's statistics JSON as the result. */
void rk_route_statistics(struct rk_req *r)
{
    struct rk_route_path p;
    rk_path_query(&p, r);
    const char *id =
        rk_v_qstr(&p.v, r, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK | RK_V_SANDBOX_ID);
    if (rk_path_gate(&p, RK_OP_STATISTICS, id) != 0) {
        rk_path_end(&p);
        return;
    }
    struct rk_buf out = {.cap = 1 << 20};
    const struct rk_plugin *pl = r->app->plugin;
    struct rk_sink sink = {buf_sink_write, &out};
    rk_status st;
    RK_UPSTREAM(st, pl, statistics, r->call, &p.t.ref, &sink);
    rk_path_end(&p);
    json_object *res = st == RK_OK ? json_tokener_parse(rk_buf_cstr(&out)) : NULL;
    rk_buf_free(&out);
    if (st != RK_OK)
        rk_reply_call_error(r);
    else if (!res)
        rk_reply_error(r, RK_E_UPSTREAM, "backend statistics are not valid JSON");
    else
        rk_reply_ok(r, res);
}
