/* SPDX-License-Identifier: Apache-2.0 */
/* Lifecycle routes: start, status, stop/delete/restart/archive/commit, list, batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/app.h"
#include "domain/archive.h"
#include "config/config.h"
#include "domain/dispatch.h"
#include "domain/endpoint_cache.h"
#include "engine/envelope.h"
#include "engine/reply.h"
#include "host/host.h"
#include "engine/http_server.h"
#include "domain/lifecycle.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "domain/record.h"
#include "domain/reconciler.h"
#include "api/routes.h"
#include "store/store.h"
#include "base/util.h"
#include "api/validate.h"

#define MAX_BATCH 2000

/* ---- start ------------------------------------------------------------------ */

/* Header value or a default; an empty header stays empty (§3.2). */
static const char *header_or(struct rk_req *r, const char *name, const char *def)
{
    const char *v = rk_req_header(r, name);
    return v ? v : def;
}

/* The start object returned by start/start_async/restart (§5.1). */
static json_object *start_result(const char *id, const char *disk)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "code", NULL);
    json_object_object_add(o, "exit_code", NULL);
    json_object_object_add(o, "failure_reason", NULL);
    json_object_object_add(o, "sandbox_id", json_object_new_string(id));
    json_object_object_add(o, "host_name", NULL);
    json_object_object_add(o, "host_ip", NULL);
    json_object_object_add(o, "cpus", NULL);
    json_object_object_add(o, "memory", NULL);
    json_object_object_add(o, "disk", disk ? json_object_new_string(disk) : NULL);
    json_object_object_add(o, "disk_limit_rootfs", disk ? json_object_new_string(disk) : NULL);
    return o;
}

/* Format a number like Python prints a float or int the user gave. */
static void num_text(double v, char out[64])
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(out, 64, "%.0f", v);
    else
        rk_py_float(v, out);
}

/* Validate the start request and create the pending record; on success
 * *id_out is the sandbox id (arena) and *disk_out the disk value. Replies on
 * failure and returns -1. */
static int do_start(struct rk_req *r, int read_headers, const char **id_out, const char **disk_out)
{
    struct rk_app *app = r->app;
    const struct rk_config *cfg = app->cfg;
    struct rk_v v;
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *image = rk_v_str(&v, body, "image", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    const char *image_os = rk_v_str(&v, body, "image_os", 0, "linux");
    const char *memory = rk_v_str(&v, body, "memory", 0, "8g");
    double cpus = rk_v_num(&v, body, "cpus", 0, 2.0, NULL);
    double limit_cpus = rk_v_num(&v, body, "limit_cpus", 0, 0.0, NULL);
    const char *req_id = rk_v_str(&v, body, "sandbox_id", 0, NULL);
    int has_acm = 0;
    int64_t acm =
        rk_v_int_in(&v, body, "auto_clear_time_minutes", 0, cfg->runtime.default_auto_clear_minutes,
                    INT64_MIN, RK_MAX_MINUTES, &has_acm);
    int has_st = 0;
    double startup_timeout = rk_v_num_in(&v, body, "startup_timeout", 0, 600.0, -RK_MAX_SECONDS,
                                         RK_MAX_SECONDS, &has_st);
    const char *disk = rk_v_str(&v, body, "disk", 0, "50G");
    int has_gpus = 0;
    double num_gpus = rk_v_num(&v, body, "num_gpus", 0, 0, &has_gpus);
    const char *accel = rk_v_str(&v, body, "accelerator_type", 0, NULL);
    int has_aas = 0, has_ads = 0;
    int64_t aas =
        rk_v_int_in(&v, body, "auto_archive_seconds", 0, 0, INT64_MIN, RK_MAX_SECONDS, &has_aas);
    int64_t ads =
        rk_v_int_in(&v, body, "auto_delete_seconds", 0, 0, INT64_MIN, RK_MAX_SECONDS, &has_ads);
    const char *pull = rk_v_str(&v, body, "pull", 0, "missing");
    rk_v_bool(&v, body, "use_kata_runtime", 0, 0);
    rk_v_str(&v, body, "registry_username", 0, NULL);
    rk_v_str(&v, body, "registry_password", 0, NULL);
    if (has_aas && aas < 0)
        rk_v_problem(&v, "auto_archive_seconds", "Input should be greater than or equal to 0");
    if (has_ads && ads < 0)
        rk_v_problem(&v, "auto_delete_seconds", "Input should be greater than or equal to 0");
    if (pull && strcmp(pull, "never") && strcmp(pull, "always") && strcmp(pull, "missing"))
        rk_v_problem(&v, "pull", "Input should be 'never', 'always' or 'missing'");
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        rk_v_free(&v);
        json_object_put(body);
        return -1;
    }
    rk_v_free(&v);

    /* Business validation: 4000 with the start object shape. */
    char mem_norm[32], max_norm[32];
    double mem_bytes = 0, max_bytes = 0;
    char a[64], b[64];
    if (rk_memory_normalize(memory, mem_norm, &mem_bytes) != 0) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call, "Invalid memory size: %s", memory));
        goto fail;
    }
    if (rk_memory_normalize(cfg->runtime.max_memory, max_norm, &max_bytes) == 0 &&
        mem_bytes > max_bytes) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call, "Requested memory %s exceed the maximum allowed %s",
                                       memory, cfg->runtime.max_memory));
        goto fail;
    }
    if (cpus <= 0 || limit_cpus < 0) {
        num_text(cpus, a);
        rk_reply_error(r, RK_E_INVALID, rk_arena_printf(r->call, "Invalid cpus: %s", a));
        goto fail;
    }
    if (cpus > cfg->runtime.max_cpus || limit_cpus > cfg->runtime.max_cpus) {
        num_text(cpus > cfg->runtime.max_cpus ? cpus : limit_cpus, a);
        num_text(cfg->runtime.max_cpus, b);
        rk_reply_error(
            r, RK_E_INVALID,
            rk_arena_printf(r->call, "Requested CPUs %s exceed the maximum allowed %s", a, b));
        goto fail;
    }
    if (disk) {
        char dn[32];
        double disk_bytes = 0, disk_max = 0;
        if (rk_memory_normalize(disk, dn, &disk_bytes) != 0) {
            rk_reply_error(r, RK_E_INVALID,
                           rk_arena_printf(r->call, "Invalid disk size: %s", disk));
            goto fail;
        }
        if (rk_memory_normalize(cfg->runtime.max_disk, dn, &disk_max) == 0 &&
            disk_bytes > disk_max) {
            rk_reply_error(r, RK_E_INVALID,
                           rk_arena_printf(r->call,
                                           "Requested disk %s exceed the maximum allowed %s", disk,
                                           cfg->runtime.max_disk));
            goto fail;
        }
    }
    if (acm <= 0)
        acm = cfg->runtime.default_auto_clear_minutes;
    (void)has_acm;
    (void)image_os;

    char idbuf[40];
    const char *id = req_id;
    if (!id || !*id) {
        rk_random_hex(idbuf, 32);
        id = rk_arena_strdup(r->call, idbuf);
    }
    if (req_id && *req_id) {
        /* RK_CAP_RESTORE: starting an archived id restores it. */
        int restored = 0;
        if (rk_lifecycle_restore(app, r->call, id, &restored) != RK_OK) {
            rk_reply_call_error(r);
            goto fail;
        }
        if (restored) {
            *id_out = id;
            *disk_out = disk ? rk_arena_strdup(r->call, disk) : NULL;
            json_object_put(body);
            return 0;
        }
    }
    const char *user = read_headers ? header_or(r, "X-User-Id", "default") : "default";
    const char *exp = read_headers ? header_or(r, "X-Experiment-Id", "default") : "default";
    const char *ns = read_headers ? header_or(r, "X-Namespace", "default") : "default";
    const char *cluster = read_headers ? header_or(r, "X-Cluster", "default") : "default";

    /* The pending record exists before the answer (Pitfall 8). Another
     * process may poll it; until create_deadline a missing backend sandbox
     * means "create still running", not "failed". */
    int64_t now = rk_epoch_s();
    struct rk_rec_start rs = {
        .sandbox_id = id,
        .image = image,
        .image_os = image_os,
        .memory = mem_norm,
        .memory_requested = memory,
        .disk = disk,
        .accelerator_type = accel,
        .user_id = user,
        .experiment_id = exp,
        .namespace_name = ns,
        .cluster_name = cluster,
        .backend_tag = app->plugin->desc->backend_tag,
        .cpus = cpus,
        .limit_cpus = limit_cpus,
        .has_gpus = has_gpus,
        .num_gpus = num_gpus,
        .now_s = now,
        .auto_clear_minutes = acm,
        .create_deadline_s = now + (int64_t)(has_st ? startup_timeout : 600.0) + 120,
    };
    json_object *rec = rk_rec_new_pending(&rs);

    char err[RK_STORE_ERRLEN];
    rk_store_rc rc = rk_store_create(app->store, id, rec, now + acm * 60, err, sizeof err);
    json_object_put(rec);
    if (rc == RK_STORE_EXISTS) {
        rk_reply_error(r, RK_E_INVALID, rk_arena_printf(r->call, "Sandbox %s already exists", id));
        goto fail;
    }
    if (rc != RK_STORE_OK) {
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
        goto fail;
    }

    struct rk_create_spec spec = {
        .sandbox_id = id,
        .image = image,
        .cpus = cpus,
        .limit_cpus = limit_cpus,
        .memory = memory,
        .env = NULL,
        .env_len = 0,
        .user_id = user,
        .experiment_id = exp,
        .namespace_name = ns,
        .idle_timeout_s = acm * 60,
        .startup_timeout_s = (int64_t)startup_timeout,
    };
    if (rk_lifecycle_create_async(app, r->call, &spec) != RK_OK) {
        const char *why = rk_call_error_text(r->call);
        json_object *gone = NULL;
        /* Nothing was sent upstream: drop the record again. */
        rk_store_get(app->store, id, &gone, err, sizeof err);
        if (gone) {
            rk_lifecycle_delete(app, r->call, gone, "submit_failed");
            json_object_put(gone);
        }
        rk_reply_error(r, RK_E_INTERNAL,
                       rk_arena_printf(r->call,
                                       "Sandbox %s submission failed and has been marked for "
                                       "immediate deletion: %s",
                                       id, why));
        goto fail;
    }
    *id_out = id;
    *disk_out = disk ? rk_arena_strdup(r->call, disk) : NULL;
    json_object_put(body);
    return 0;
fail:
    json_object_put(body);
    return -1;
}

void rk_route_start_async(struct rk_req *r)
{
    const char *id, *disk;
    if (do_start(r, 1, &id, &disk) == 0)
        rk_reply_ok(r, start_result(id, disk));
}

void rk_route_start(struct rk_req *r)
{
    /* Same as start_async (headers are not read, as in ROCK), then wait for alive. */
    const char *id, *disk;
    if (do_start(r, 0, &id, &disk) != 0)
        return;
    if (rk_lifecycle_wait_running(r->app, r->call, id, r->app->cfg->runtime.start_wait_s) != RK_OK)
        rk_reply_error(r, rk_call_error_code(r->call), rk_call_error_text(r->call));
    else
        rk_reply_ok(r, start_result(id, disk));
}

/* ---- status ------------------------------------------------------------------- */

/* Look up the record for a status-style query and compute what to show.
 * On success *out is a new status object; on failure the error is on r->call. */
/* Status when the reconciler keeps the store current (issue 15): one store round trip (the
 * record, with the idle touch done by the store at most once per second), the backend-tag
 * checks of the dispatch gate on that record, and no backend call. */
static rk_status status_from_store(struct rk_req *r, const char *id, int include_all,
                                   json_object **out, int *fallback)
{
    struct rk_app *app = r->app;
    const struct rk_operator *desc = app->plugin->desc;
    char err[RK_STORE_ERRLEN], mark[RK_STORE_MARK_MAX];
    json_object *rec = NULL;
    *fallback = 0;
    rk_store_rc rc =
        rk_store_get_touch(app->store, id, rk_epoch_s(), &rec, mark, sizeof mark, err, sizeof err);
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
    if (stored == RK_STATE_ARCHIVING)
        rk_archive_recover(app, rec); /* an archive whose admin died resumes here */
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

static rk_status status_of(struct rk_req *r, const char *id, int include_all, json_object **out)
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
        rk_archive_recover(app, rec); /* an archive whose admin died resumes here */
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

void rk_route_get_status(struct rk_req *r)
{
    struct rk_v v;
    rk_v_init(&v, r->call, "query");
    const char *id = rk_v_qstr(&v, r, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK);
    int include_all = rk_v_qbool(&v, r, "include_all_states", 0);
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        rk_v_free(&v);
        return;
    }
    rk_v_free(&v);
    json_object *st;
    if (status_of(r, id, include_all, &st) != RK_OK)
        rk_reply_call_error(r);
    else
        rk_reply_ok(r, st);
}

void rk_route_is_alive(struct rk_req *r)
{
    /* Never fails: the admin semantics with the host_name bug fixed (§5.4). */
    const char *id = rk_req_query(r, "sandbox_id");
    json_object *st = NULL;
    json_object *o = json_object_new_object();
    if (id && *id && rk_id_valid(id, strlen(id)) && status_of(r, id, 0, &st) == RK_OK) {
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

/* A transition that only applies while the record is in one of two states
 * (a concurrent delete or restart must not be undone). */
struct guarded_ctx {
    enum rk_state from_a, from_b, to;
    const char *event;
};

static int apply_guarded(json_object *rec, void *ctx)
{
    struct guarded_ctx *g = ctx;
    enum rk_state st = rk_rec_state(rec);
    if (st != g->from_a && st != g->from_b)
        return 1;
    rk_rec_transition(rec, g->to, g->event);
    return 0;
}

/* Persist from_a|from_b -> to; returns the store rc (ABORTED: state changed). */
static rk_store_rc guarded_transition(struct rk_app *app, const char *id, enum rk_state from_a,
                                      enum rk_state from_b, enum rk_state to, const char *event)
{
    struct guarded_ctx g = {from_a, from_b, to, event};
    char err[RK_STORE_ERRLEN];
    rk_ep_cache_forget_sandbox(id); /* cached proxy endpoints die with the state change */
    rk_store_rc rc = rk_store_update(app->store, id, apply_guarded, &g, NULL, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        rk_warn("sandbox %s: cannot record state %s: %s", id, rk_state_name(to), err);
    return rc;
}

/* The backend no longer has the sandbox: from -> deleted ("vanished"). */
static void mark_vanished(struct rk_app *app, const char *id, enum rk_state from)
{
    if (guarded_transition(app, id, from, from, RK_STATE_DELETED, "vanished") != RK_STORE_OK)
        return;
    char err[RK_STORE_ERRLEN];
    if (rk_session_clear(app->store, id, err, sizeof err) != RK_STORE_OK)
        rk_warn("sandbox %s: cannot clear its session mappings: %s", id, err);
}

/* ---- stop / delete / restart / archive / commit ------------------------------- */

/* The body's sandbox_id (NonBlank) or a validation reply. */
static const char *body_sandbox_id(struct rk_req *r, unsigned flags, json_object **body_out)
{
    struct rk_v v;
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *id = rk_v_str(&v, body, "sandbox_id", RK_V_REQUIRED | flags, NULL);
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        rk_v_free(&v);
        json_object_put(body);
        return NULL;
    }
    rk_v_free(&v);
    if (body_out)
        *body_out = body;
    else
        json_object_put(body);
    return id;
}

/* Delete through the gate; shared by /delete and /stop in stop_as_delete mode. */
static int delete_sandbox(struct rk_req *r, const char *id)
{
    struct rk_app *app = r->app;
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    rk_store_rc rc = rk_store_get(app->store, id, &rec, err, sizeof err);
    if (rc == RK_STORE_ERROR) {
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
        return -1;
    }
    /* Unknown or already deleted: nothing to do (§5.13). */
    if (rc == RK_STORE_NOT_FOUND || rk_rec_state(rec) == RK_STATE_DELETED) {
        json_object_put(rec);
        return 0;
    }
    struct rk_target t;
    if (rk_dispatch_record(app, r->call, RK_OP_DELETE, id, rec, &t) != RK_OK) {
        rk_reply_call_error(r);
        return -1;
    }
    enum rk_state st = t.ref.state;
    const char *event = st == RK_STATE_RUNNING ? "delete_running" : "delete";
    if (st == RK_STATE_ARCHIVING) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call,
                                       "Sandbox %s cannot be deleted: current state is "
                                       "'archiving', must be stopped or archived first",
                                       id));
        rk_target_release(&t);
        return -1;
    }
    if (st == RK_STATE_ARCHIVED && rk_archive_delete_snapshot(app, r->call, t.rec) != RK_OK) {
        rk_reply_call_error(r); /* the record keeps its snapshot id for a retry */
        rk_target_release(&t);
        return -1;
    }
    /* Pending is deleted like running (a deliberate deviation, §5.13) unless
     * the plugin says it cannot. */
    if (st == RK_STATE_PENDING && !(app->plugin->caps & RK_CAP_DELETE_PENDING)) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call,
                                       "Sandbox %s cannot be deleted: current state is 'pending', "
                                       "must be stopped or archived first",
                                       id));
        rk_target_release(&t);
        return -1;
    }
    if (rk_lifecycle_delete(app, r->call, t.rec, event) != RK_OK) {
        rk_reply_call_error(r);
        rk_target_release(&t);
        return -1;
    }
    rk_target_release(&t);
    return 0;
}

void rk_route_delete(struct rk_req *r)
{
    /* A plain string: blank values are not rejected by validation. */
    const char *id = body_sandbox_id(r, 0, NULL);
    if (!id)
        return;
    if (delete_sandbox(r, id) == 0)
        rk_reply_ok(r, json_object_new_string(rk_arena_printf(r->call, "%s deleted", id)));
}

/*
 * Run a state-changing plugin operation (stop, restart, archive) through the
 * gate: the sandbox must be in `from` (0 = any), the plugin is called, and the
 * record moves to `to`. Replies on failure and returns -1.
 */
static int state_op(struct rk_req *r, const char *id, enum rk_op op, enum rk_state to,
                    enum rk_state from)
{
    struct rk_app *app = r->app;
    struct rk_target t;
    if (rk_dispatch(app, r->call, op, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        return -1;
    }
    if (from && t.ref.state != from) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call, "Sandbox %s cannot be %s: current state is '%s'",
                                       id, op == RK_OP_RESTART ? "restarted" : "archived",
                                       rk_state_name(t.ref.state)));
        rk_target_release(&t);
        return -1;
    }
    rk_status st = rk_lifecycle_state_op(app, r->call, op, &t.ref, to);
    rk_target_release(&t);
    if (st != RK_OK) {
        rk_reply_call_error(r);
        return -1;
    }
    return 0;
}

/* Stop through the gate (ROCK: pending or running -> stopped). Already
 * stopped is Success (SDK close() may call it twice); archiving, archived and
 * deleted are refused by the state machine. Replies on failure. */
static int stop_sandbox(struct rk_req *r, const char *id)
{
    struct rk_app *app = r->app;
    const struct rk_plugin *pl = app->plugin;
    struct rk_target t;
    if (rk_dispatch(app, r->call, RK_OP_STOP, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        return -1;
    }
    enum rk_state from = t.ref.state;
    if (from == RK_STATE_STOPPED) {
        rk_target_release(&t);
        return 0;
    }
    if (from != RK_STATE_RUNNING && from != RK_STATE_PENDING) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call,
                                       "Sandbox %s cannot be stopped: current state is '%s'", id,
                                       rk_state_name(from)));
        rk_target_release(&t);
        return -1;
    }
    int t_up = t.ref.upstream_id != NULL;
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.stop(pl->inst, r->call, &t.ref);
    rk_metrics_upstream("stop", st);
    rk_target_release(&t);
    if (st == RK_E_NOT_FOUND && t_up) /* the backend no longer has it */
        mark_vanished(app, id, from);
    if (st != RK_OK) {
        rk_reply_call_error(r); /* otherwise the record stays as it was */
        return -1;
    }
    guarded_transition(app, id, RK_STATE_RUNNING, RK_STATE_PENDING, RK_STATE_STOPPED, "stop");
    return 0;
}

void rk_route_stop(struct rk_req *r)
{
    const char *id = body_sandbox_id(r, RK_V_NONBLANK, NULL);
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
            rk_reply_ok(r, json_object_new_string(rk_arena_printf(r->call, "%s stopped", id)));
        return;
    }
    if (stop_sandbox(r, id) == 0)
        rk_reply_ok(r, json_object_new_string(rk_arena_printf(r->call, "%s stopped", id)));
}

/* Shared restart logic for both route forms: stopped -> pending (resume),
 * archived -> pending (restore from the snapshot, RK_CAP_SNAPSHOT). The SDKs
 * then poll get_status until is_alive, which the refresh reports once the
 * backend says running (pending -> running, "alive"). */
static void restart(struct rk_req *r, const char *id)
{
    struct rk_app *app = r->app;
    struct rk_target t;
    if (rk_dispatch(app, r->call, RK_OP_RESTART, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        return;
    }
    enum rk_state from = t.ref.state;
    if (from == RK_STATE_ARCHIVED && (app->plugin->caps & RK_CAP_SNAPSHOT)) {
        rk_status st = rk_restore_start(app, r->call, t.rec);
        rk_target_release(&t);
        if (st != RK_OK)
            rk_reply_call_error(r);
        else
            rk_reply_ok(r, start_result(id, NULL));
        return;
    }
    if (from != RK_STATE_STOPPED) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call,
                                       "Sandbox %s cannot be restarted: current state is '%s'", id,
                                       rk_state_name(from)));
        rk_target_release(&t);
        return;
    }
    const struct rk_plugin *pl = app->plugin;
    int t_up = t.ref.upstream_id != NULL;
    rk_metrics_upstream_begin();
    rk_status rs = pl->ops.restart(pl->inst, r->call, &t.ref);
    rk_metrics_upstream("restart", rs);
    rk_target_release(&t);
    if (rs == RK_E_NOT_FOUND && t_up) /* e.g. its parked lifetime ran out */
        mark_vanished(app, id, RK_STATE_STOPPED);
    if (rs != RK_OK) {
        rk_reply_call_error(r); /* otherwise the record stays stopped */
        return;
    }
    guarded_transition(app, id, RK_STATE_STOPPED, RK_STATE_STOPPED, RK_STATE_PENDING, "restart");
    /* Active again: the idle timer runs from now. */
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    if (rk_store_get(app->store, id, &rec, err, sizeof err) == RK_STORE_OK)
        rk_dispatch_touch(app, rec);
    json_object_put(rec);
    rk_reply_ok(r, start_result(id, NULL));
}

void rk_route_restart(struct rk_req *r)
{
    const char *id = body_sandbox_id(r, RK_V_NONBLANK, NULL);
    if (id)
        restart(r, id);
}

void rk_route_restart_path(struct rk_req *r)
{
    restart(r, r->params[0]);
}

static int expect_stopped(json_object *rec, void *ctx)
{
    (void)ctx;
    if (rk_rec_state(rec) != RK_STATE_STOPPED)
        return 1;
    json_object_object_del(rec, "archive_error");
    /* The job's lease starts with the transition, so no reader takes over a
     * job that has not started yet. */
    json_object_object_add(rec, "job_lease", json_object_new_int64(rk_epoch_s() + 900));
    rk_rec_transition(rec, RK_STATE_ARCHIVING, "archive");
    return 0;
}

/* Archive by snapshot (RK_CAP_SNAPSHOT): stopped -> archiving now, the rest
 * in the background (archive.c). A retry on an archiving record whose job
 * lost its admin takes the job over. Replies. */
/* 1 if key is in the comma-separated allow-list (spaces around items ignored). */
static int key_allowed(const char *list, const char *key)
{
    if (!key || !*key)
        return 0;
    size_t klen = strlen(key);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *end = e;
        while (end > p && end[-1] == ' ')
            end--;
        if ((size_t)(end - p) == klen && memcmp(p, key, klen) == 0)
            return 1;
        p = e;
    }
    return 0;
}

static void archive_by_snapshot(struct rk_req *r, const char *id)
{
    struct rk_app *app = r->app;
    /* ROCK's order: disabled (no RK_CAP_SNAPSHOT) -> key allow-list -> id -> state. */
    const char *keys = app->cfg->runtime.archive_keys;
    if (keys && *keys && !key_allowed(keys, rk_req_header(r, "X-Key"))) {
        rk_reply_error(r, RK_E_INVALID, "archive not allowed for this authorization key");
        return;
    }
    struct rk_target t;
    if (rk_dispatch(app, r->call, RK_OP_ARCHIVE, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        return;
    }
    enum rk_state from = t.ref.state;
    if (from == RK_STATE_ARCHIVING) {
        rk_archive_recover(app, t.rec);
        rk_target_release(&t);
        rk_reply_ok(r, json_object_new_string(rk_arena_printf(r->call, "%s archiving", id)));
        return;
    }
    rk_target_release(&t);
    if (from != RK_STATE_STOPPED) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call,
                                       "Sandbox %s cannot be archived: current state is '%s'", id,
                                       rk_state_name(from)));
        return;
    }
    char err[RK_STORE_ERRLEN];
    rk_store_rc rc = rk_store_update(app->store, id, expect_stopped, NULL, NULL, err, sizeof err);
    if (rc == RK_STORE_ABORTED || rc == RK_STORE_NOT_FOUND) {
        rk_reply_error(
            r, RK_E_INVALID,
            rk_arena_printf(r->call, "Sandbox %s cannot be archived: its state changed", id));
        return;
    }
    if (rc != RK_STORE_OK) {
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
        return;
    }
    if (rk_archive_start(app, r->call, id) != RK_OK) {
        /* No job will run (too many in progress): back to stopped at once. */
        guarded_transition(app, id, RK_STATE_ARCHIVING, RK_STATE_ARCHIVING, RK_STATE_STOPPED,
                           "archive_failed");
        rk_reply_call_error(r);
        return;
    }
    rk_reply_ok(r, json_object_new_string(rk_arena_printf(r->call, "%s archiving", id)));
}

void rk_route_archive(struct rk_req *r)
{
    const char *id = r->params[0];
    if (r->app->plugin->caps & RK_CAP_SNAPSHOT) {
        archive_by_snapshot(r, id);
        return;
    }
    if (state_op(r, id, RK_OP_ARCHIVE, RK_STATE_ARCHIVING, RK_STATE_STOPPED) == 0)
        rk_reply_ok(r, json_object_new_string(rk_arena_printf(r->call, "%s archiving", id)));
}

/* Commit status object (§5.16). */
static json_object *commit_status(const char *id, const char *tag, const char *phase)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "sandbox_id", json_object_new_string(id));
    json_object_object_add(o, "image_tag", tag ? json_object_new_string(tag) : NULL);
    json_object_object_add(o, "phase", json_object_new_string(phase));
    json_object_object_add(o, "started_at", NULL);
    json_object_object_add(o, "completed_at", NULL);
    json_object_object_add(o, "exit_code", NULL);
    json_object_object_add(o, "failed_stage", NULL);
    json_object_object_add(o, "error_code", NULL);
    json_object_object_add(o, "error_message", NULL);
    return o;
}

void rk_route_commit(struct rk_req *r)
{
    struct rk_v v;
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *id = rk_v_str(&v, body, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    const char *tag = rk_v_str(&v, body, "image_tag", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    if (tag && strpbrk(tag, "\r\n"))
        rk_v_problem(&v, "image_tag", "image_tag must not contain line separators");
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        goto out;
    }
    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_COMMIT, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        goto out;
    }
    const struct rk_plugin *pl = r->app->plugin;
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.commit(pl->inst, r->call, &t.ref, tag);
    rk_metrics_upstream("commit", st);
    rk_target_release(&t);
    if (st != RK_OK)
        rk_reply_call_error(r);
    else
        rk_reply_ok(r, commit_status(id, tag, "SUCCEEDED"));
out:
    rk_v_free(&v);
    json_object_put(body);
}

void rk_route_commit_get(struct rk_req *r)
{
    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_COMMIT, r->params[0], &t) != RK_OK) {
        rk_reply_call_error(r);
        return;
    }
    rk_target_release(&t);
    rk_reply_ok(r, commit_status(r->params[0], NULL, "SUCCEEDED"));
}

void rk_route_statistics(struct rk_req *r)
{
    struct rk_v v;
    rk_v_init(&v, r->call, "query");
    const char *id = rk_v_qstr(&v, r, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK);
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        rk_v_free(&v);
        return;
    }
    rk_v_free(&v);
    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_STATISTICS, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        return;
    }
    struct rk_buf out = {.cap = 1 << 20};
    const struct rk_plugin *pl = r->app->plugin;
    struct rk_sink sink = {buf_sink_write, &out};
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.statistics(pl->inst, r->call, &t.ref, &sink);
    rk_metrics_upstream("statistics", st);
    rk_target_release(&t);
    if (st != RK_OK) {
        rk_buf_free(&out);
        rk_reply_call_error(r);
        return;
    }
    json_object *res = json_tokener_parse(rk_buf_cstr(&out));
    rk_buf_free(&out);
    if (!res) {
        rk_reply_error(r, RK_E_UPSTREAM, "backend statistics are not valid JSON");
        return;
    }
    rk_reply_ok(r, res);
}

/* ---- list and batch -------------------------------------------------------------- */

struct filter_ctx {
    struct rk_call *call;
    const char **keys;
    const char **vals;
    size_t n;
};

static void collect_filter(void *ctx, const char *k, const char *v)
{
    struct filter_ctx *f = ctx;
    if (!strcmp(k, "page") || !strcmp(k, "page_size") || f->n >= 32)
        return;
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->keys[i], k)) {
            f->vals[i] = rk_arena_strdup(f->call, v); /* last value wins */
            return;
        }
    f->keys[f->n] = rk_arena_strdup(f->call, k);
    f->vals[f->n] = rk_arena_strdup(f->call, v);
    f->n++;
}

/* Exact string equality on stored string fields; numbers never match. */
static int record_matches(json_object *rec, const struct filter_ctx *f)
{
    for (size_t i = 0; i < f->n; i++) {
        const char *s = rk_rec_str(rec, f->keys[i]);
        if (!s || strcmp(s, f->vals[i]) != 0)
            return 0;
    }
    return 1;
}

static int by_create_time(const void *a, const void *b)
{
    json_object *ra = *(json_object *const *)a, *rb = *(json_object *const *)b;
    const char *ta = rk_rec_str(ra, "create_time"), *tb = rk_rec_str(rb, "create_time");
    int c = strcmp(ta ? ta : "", tb ? tb : "");
    if (c)
        return c;
    return strcmp(rk_rec_str(ra, "sandbox_id") ? rk_rec_str(ra, "sandbox_id") : "",
                  rk_rec_str(rb, "sandbox_id") ? rk_rec_str(rb, "sandbox_id") : "");
}

/* Load every active record (stored metadata only; no backend call). */
static int load_active(struct rk_req *r, json_object ***recs_out, size_t *n_out)
{
    struct rk_app *app = r->app;
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    if (rk_store_list_active(app->store, &ids, &n, err, sizeof err) != RK_STORE_OK) {
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
        return -1;
    }
    json_object **recs = calloc(n ? n : 1, sizeof *recs);
    if (!recs)
        abort();
    if (n && rk_store_get_many(app->store, (const char *const *)ids, n, recs, err, sizeof err) !=
                 RK_STORE_OK) {
        rk_store_free_ids(ids, n);
        free(recs);
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
        return -1;
    }
    rk_store_free_ids(ids, n);
    *recs_out = recs;
    *n_out = n;
    return 0;
}

/* The list answer for items (taken) with total and has_more. */
static void reply_list(struct rk_req *r, json_object *items, size_t total, int64_t page,
                       int64_t page_size)
{
    json_object *res = json_object_new_object();
    json_object_object_add(res, "code", NULL);
    json_object_object_add(res, "exit_code", NULL);
    json_object_object_add(res, "failure_reason", NULL);
    json_object_object_add(res, "items", items);
    json_object_object_add(res, "total", json_object_new_int64((int64_t)total));
    json_object_object_add(res, "has_more",
                           json_object_new_boolean(page * page_size < (int64_t)total));
    rk_reply_ok(r, res);
}

/* Unfiltered list: one page of ids in list order from the store's index, then
 * only those records (cost O(page), not O(all sandboxes)). */
static void list_page(struct rk_req *r, int64_t page, int64_t page_size)
{
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0, total = 0;
    size_t first = (size_t)((page - 1) * page_size);
    if (rk_store_list_page(r->app->store, first, (size_t)page_size, &ids, &n, &total, err,
                           sizeof err) != RK_STORE_OK) {
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
        return;
    }
    json_object **recs = calloc(n ? n : 1, sizeof *recs);
    if (!recs)
        abort();
    if (n && rk_store_get_many(r->app->store, (const char *const *)ids, n, recs, err, sizeof err) !=
                 RK_STORE_OK) {
        rk_store_free_ids(ids, n);
        free(recs);
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
        return;
    }
    rk_store_free_ids(ids, n);
    json_object *items = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        if (recs[i] && rk_state_is_active(rk_rec_state(recs[i]))) {
            json_object *st = rk_rec_status(recs[i], rk_rec_state(recs[i]), 1);
            json_object_object_add(st, "rock_authorization_encrypted", NULL);
            json_object_array_add(items, st);
        }
        json_object_put(recs[i]);
    }
    free(recs);
    reply_list(r, items, total, page, page_size);
}

void rk_route_list(struct rk_req *r)
{
    struct rk_v v;
    rk_v_init(&v, r->call, "query");
    int64_t page = rk_sat_i64(rk_v_qint(&v, r, "page", 1), INT64_MIN, INT32_MAX);
    int64_t page_size = rk_v_qint(&v, r, "page_size", 500);
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        rk_v_free(&v);
        return;
    }
    rk_v_free(&v);
    if (page < 1 || page_size < 1) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call,
                                       "page parameter invalid, page is %lld, page_size is %lld",
                                       (long long)page, (long long)page_size));
        return;
    }
    if (page_size > MAX_BATCH) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call, "page_size exceeds maximum %d", MAX_BATCH));
        return;
    }
    const char *keys[32], *vals[32];
    struct filter_ctx f = {r->call, keys, vals, 0};
    rk_req_query_each(r, collect_filter, &f);
    if (f.n == 0) { /* no filter: read one page through the store's list index */
        list_page(r, page, page_size);
        return;
    }

    json_object **recs;
    size_t n;
    if (load_active(r, &recs, &n) != 0)
        return;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (recs[i] && rk_state_is_active(rk_rec_state(recs[i])) && record_matches(recs[i], &f))
            recs[kept++] = recs[i];
        else
            json_object_put(recs[i]);
    }
    qsort(recs, kept, sizeof *recs, by_create_time);
    json_object *items = json_object_new_array();
    size_t first = (size_t)((page - 1) * page_size);
    for (size_t i = first; i < kept && i < first + (size_t)page_size; i++) {
        json_object *st = rk_rec_status(recs[i], rk_rec_state(recs[i]), 1);
        json_object_object_add(st, "rock_authorization_encrypted", NULL);
        json_object_array_add(items, st);
    }
    for (size_t i = 0; i < kept; i++)
        json_object_put(recs[i]);
    free(recs);
    json_object *res = json_object_new_object();
    json_object_object_add(res, "code", NULL);
    json_object_object_add(res, "exit_code", NULL);
    json_object_object_add(res, "failure_reason", NULL);
    json_object_object_add(res, "items", items);
    json_object_object_add(res, "total", json_object_new_int64((int64_t)kept));
    json_object_object_add(res, "has_more",
                           json_object_new_boolean(page * page_size < (int64_t)kept));
    rk_reply_ok(r, res);
}

void rk_route_batch(struct rk_req *r)
{
    struct rk_v v;
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    json_object *ids = rk_v_strlist(&v, body, "sandbox_ids", RK_V_REQUIRED);
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        goto out;
    }
    size_t n = json_object_array_length(ids);
    if (n > MAX_BATCH) {
        rk_reply_error(
            r, RK_E_INVALID,
            rk_arena_printf(r->call, "sandbox_ids count too large, max count is %d", MAX_BATCH));
        goto out;
    }
    const char **idv = rk_arena_alloc(r->call, (n ? n : 1) * sizeof *idv);
    for (size_t i = 0; i < n; i++)
        idv[i] = json_object_get_string(json_object_array_get_idx(ids, i));
    json_object **recs = calloc(n ? n : 1, sizeof *recs);
    if (!recs)
        abort();
    char err[RK_STORE_ERRLEN];
    if (n && rk_store_get_many(r->app->store, idv, n, recs, err, sizeof err) != RK_STORE_OK) {
        free(recs);
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
        goto out;
    }
    json_object *statuses = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        if (recs[i] && rk_state_is_active(rk_rec_state(recs[i])))
            json_object_array_add(statuses, rk_rec_status(recs[i], rk_rec_state(recs[i]), 1));
        json_object_put(recs[i]);
    }
    free(recs);
    json_object *res = json_object_new_object();
    json_object_object_add(res, "code", NULL);
    json_object_object_add(res, "exit_code", NULL);
    json_object_object_add(res, "failure_reason", NULL);
    json_object_object_add(res, "statuses", statuses);
    rk_reply_ok(r, res);
out:
    rk_v_free(&v);
    json_object_put(body);
}
