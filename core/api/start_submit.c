/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The start path shared by ROCK's /start, /start_async and E2B's POST
 * /sandboxes (start_submit.h): business checks, restore of an archived id,
 * the pending record (it exists before the answer) and the background
 * create (lifecycle.c).
 */
#include "api/start_submit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/route_path.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/create_queue.h"
#include "domain/lifecycle.h"
#include "domain/record.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "store/store.h"

/* Format a number like Python prints a float or int the user gave. */
static void num_text(double v, char out[64])
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(out, 64, "%.0f", v);
    else
        rk_py_float(v, out);
}

/* A size ("8g") normalized into norm and checked against the configured
 * maximum max (a maximum that does not parse is no limit); RK_E_INVALID
 * naming what is recorded on call when it is invalid or too large. */
static rk_status check_size(struct rk_call *call, const char *what, const char *value,
                            const char *max, char norm[32])
{
    char max_norm[32];
    double bytes = 0, max_bytes = 0;
    if (rk_memory_normalize(value, norm, &bytes) != 0)
        return rk_call_set_error(call, RK_E_INVALID, "Invalid %s size: %s", what, value);
    if (rk_memory_normalize(max, max_norm, &max_bytes) == 0 && bytes > max_bytes)
        return rk_call_set_error(call, RK_E_INVALID,
                                 "Requested %s %s exceed the maximum allowed %s", what, value, max);
    return RK_OK;
}

/* The business checks of a start request: memory, cpus, disk. */
static rk_status check_limits(struct rk_req *r, const struct rk_start_req *s, char mem_norm[32])
{
    const struct rk_config *cfg = r->app->cfg;
    char disk_norm[32], a[64], b[64];
    rk_status st = check_size(r->call, "memory", s->memory, cfg->runtime.max_memory, mem_norm);
    if (st != RK_OK)
        return st;
    if (s->cpus <= 0 || s->limit_cpus < 0) {
        num_text(s->cpus, a);
        return rk_call_set_error(r->call, RK_E_INVALID, "Invalid cpus: %s", a);
    }
    if (s->cpus > cfg->runtime.max_cpus || s->limit_cpus > cfg->runtime.max_cpus) {
        num_text(s->cpus > cfg->runtime.max_cpus ? s->cpus : s->limit_cpus, a);
        num_text(cfg->runtime.max_cpus, b);
        return rk_call_set_error(r->call, RK_E_INVALID,
                                 "Requested CPUs %s exceed the maximum allowed %s", a, b);
    }
    if (s->disk)
        return check_size(r->call, "disk", s->disk, cfg->runtime.max_disk, disk_norm);
    return RK_OK;
}

rk_status rk_start_submit(struct rk_req *r, const struct rk_start_req *s, const char **id_out)
{
    struct rk_app *app = r->app;
    char mem_norm[32];
    rk_status st = check_limits(r, s, mem_norm);
    if (st != RK_OK)
        return st;

    char idbuf[40];
    const char *id = s->sandbox_id;
    if (!id || !*id) {
        rk_random_hex(idbuf, 32);
        id = rk_arena_strdup(r->call, idbuf);
    } else {
        /* RK_CAP_RESTORE: starting an archived id restores it. */
        int restored = 0;
        st = rk_lifecycle_restore(app, r->call, id, &restored);
        if (st != RK_OK)
            return st;
        if (restored) {
            *id_out = id;
            return RK_OK;
        }
    }

    /* The pending record exists before the answer (Pitfall 8). Another
     * process may poll it; until create_deadline a missing backend sandbox
     * means "create still running", not "failed". */
    int64_t now = rk_epoch_s();
    int64_t acm = s->auto_clear_minutes;
    struct rk_rec_start rs = {
        .sandbox_id = id,
        .image = s->image,
        .image_os = s->image_os,
        .memory = mem_norm,
        .memory_requested = s->memory,
        .disk = s->disk,
        .accelerator_type = s->accelerator_type,
        .user_id = s->user_id,
        .experiment_id = s->experiment_id,
        .namespace_name = s->namespace_name,
        .cluster_name = s->cluster_name,
        .backend_tag = app->plugin->desc->backend_tag,
        .cpus = s->cpus,
        .limit_cpus = s->limit_cpus,
        .has_gpus = s->has_gpus,
        .num_gpus = s->num_gpus,
        .now_s = now,
        .accepted_ms = rk_epoch_ms(),
        .auto_clear_minutes = acm,
        .create_deadline_s =
            now + (int64_t)(s->has_startup_timeout ? s->startup_timeout_s : 600.0) + 120,
        .startup_timeout_s = (int64_t)s->startup_timeout_s,
        .request_id = rk_call_request_id(r->call),
        .env = s->env,
        .metadata = s->metadata,
        .envd_token_digest = s->envd_token_digest,
    };
    json_object *rec = rk_rec_new_pending(&rs);

    /* The record and its queued backend create are stored in one step (domain/create_queue.c),
     * so no admin can die between them; a create worker reads what it needs from the record.
     * Only an exhausted capacity refuses the create. */
    char err[RK_STORE_ERRLEN];
    rk_store_rc rc =
        rk_create_queue_submit_new(app, r->call, id, rec, now + acm * 60, err, sizeof err);
    json_object_put(rec);
    if (rc == RK_STORE_EXISTS)
        return rk_call_set_error(r->call, RK_E_INVALID, "Sandbox %s already exists", id);
    if (rc == RK_STORE_FULL) {
        const char *why = rk_arena_strdup(r->call, rk_call_error_text(r->call));
        /* Nothing was sent upstream: the record goes straight to deleted. */
        rk_lifecycle_transition(app, id, RK_STATE_PENDING, RK_STATE_PENDING, RK_STATE_DELETED,
                                "submit_failed");
        return rk_call_set_error(r->call, RK_E_INTERNAL,
                                 "Sandbox %s submission failed and has been marked for "
                                 "immediate deletion: %s",
                                 id, why);
    }
    if (rc != RK_STORE_OK)
        return rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
    *id_out = id;
    return RK_OK;
}
