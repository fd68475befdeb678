/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /start_async and /start (wire contract §5.1): validate the request,
 * check it against the runtime limits, restore an archived id or create the
 * pending record, and queue its backend create (domain/create_queue.c).
 * /start then waits until the sandbox runs.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/create_queue.h"
#include "domain/lifecycle.h"
#include "domain/record.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"
#include "store/store.h"

/* Header value or a default; an empty header stays empty (§3.2). */
static const char *header_or(struct rk_req *r, const char *name, const char *def)
{
    const char *v = rk_req_header(r, name);
    return v ? v : def;
}

/* Format a number like Python prints a float or int the user gave. */
static void num_text(double v, char out[64])
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(out, 64, "%.0f", v);
    else
        rk_py_float(v, out);
}

/* A size ("8g") normalized into norm and checked against the configured
 * maximum max (a maximum that does not parse is no limit); a 4000 naming
 * what is replied and -1 returned when it is invalid or too large. */
static int check_size(struct rk_req *r, const char *what, const char *value, const char *max,
                      char norm[32])
{
    char max_norm[32];
    double bytes = 0, max_bytes = 0;
    if (rk_memory_normalize(value, norm, &bytes) != 0) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call, "Invalid %s size: %s", what, value));
        return -1;
    }
    if (rk_memory_normalize(max, max_norm, &max_bytes) == 0 && bytes > max_bytes) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call, "Requested %s %s exceed the maximum allowed %s",
                                       what, value, max));
        return -1;
    }
    return 0;
}

/* Validate the start request and create the pending record; on success
 * *id_out is the sandbox id (arena) and *disk_out the disk value. Replies on
 * failure and returns -1. */
static int do_start(struct rk_req *r, int read_headers, const char **id_out, const char **disk_out)
{
    struct rk_app *app = r->app;
    const struct rk_config *cfg = app->cfg;
    struct rk_route_path p;
    rk_path_body(&p, r);
    struct rk_v *v = &p.v;
    json_object *body = p.body;
    const char *image = rk_v_str(v, body, "image", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    const char *image_os = rk_v_str(v, body, "image_os", 0, "linux");
    const char *memory = rk_v_str(v, body, "memory", 0, "8g");
    double cpus = rk_v_num(v, body, "cpus", 0, 2.0, NULL);
    double limit_cpus = rk_v_num(v, body, "limit_cpus", 0, 0.0, NULL);
    const char *req_id = rk_v_str(v, body, "sandbox_id", RK_V_SANDBOX_ID, NULL);
    int has_acm = 0;
    int64_t acm =
        rk_v_int_in(v, body, "auto_clear_time_minutes", 0, cfg->runtime.default_auto_clear_minutes,
                    INT64_MIN, RK_MAX_MINUTES, &has_acm);
    int has_st = 0;
    double startup_timeout =
        rk_v_num_in(v, body, "startup_timeout", 0, 600.0, -RK_MAX_SECONDS, RK_MAX_SECONDS, &has_st);
    const char *disk = rk_v_str(v, body, "disk", 0, "50G");
    int has_gpus = 0;
    double num_gpus = rk_v_num(v, body, "num_gpus", 0, 0, &has_gpus);
    const char *accel = rk_v_str(v, body, "accelerator_type", 0, NULL);
    int has_aas = 0, has_ads = 0;
    int64_t aas =
        rk_v_int_in(v, body, "auto_archive_seconds", 0, 0, INT64_MIN, RK_MAX_SECONDS, &has_aas);
    int64_t ads =
        rk_v_int_in(v, body, "auto_delete_seconds", 0, 0, INT64_MIN, RK_MAX_SECONDS, &has_ads);
    const char *pull = rk_v_str(v, body, "pull", 0, "missing");
    rk_v_bool(v, body, "use_kata_runtime", 0, 0);
    rk_v_str(v, body, "registry_username", 0, NULL);
    rk_v_str(v, body, "registry_password", 0, NULL);
    if (has_aas && aas < 0)
        rk_v_problem(v, "auto_archive_seconds", "Input should be greater than or equal to 0");
    if (has_ads && ads < 0)
        rk_v_problem(v, "auto_delete_seconds", "Input should be greater than or equal to 0");
    if (pull && strcmp(pull, "never") && strcmp(pull, "always") && strcmp(pull, "missing"))
        rk_v_problem(v, "pull", "Input should be 'never', 'always' or 'missing'");
    if (rk_path_valid(&p) != 0)
        goto fail;

    /* Business validation: 4000 with the start object shape. */
    char mem_norm[32], disk_norm[32];
    char a[64], b[64];
    if (check_size(r, "memory", memory, cfg->runtime.max_memory, mem_norm) != 0)
        goto fail;
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
    if (disk && check_size(r, "disk", disk, cfg->runtime.max_disk, disk_norm) != 0)
        goto fail;
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
            rk_path_end(&p);
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
        .startup_timeout_s = (int64_t)startup_timeout,
        .request_id = rk_call_request_id(r->call),
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
        rk_reply_store_error(r, err);
        goto fail;
    }

    /* The backend create is queued (domain/create_queue.c): a create worker reads what it
     * needs from the record. Only an exhausted capacity refuses it. */
    if (rk_create_queue_submit(app, r->call, id) != RK_OK) {
        const char *why = rk_call_error_text(r->call);
        /* Nothing was sent upstream: the record goes straight to deleted. */
        rk_lifecycle_transition(app, id, RK_STATE_PENDING, RK_STATE_PENDING, RK_STATE_DELETED,
                                "submit_failed");
        rk_reply_error(r, RK_E_INTERNAL,
                       rk_arena_printf(r->call,
                                       "Sandbox %s submission failed and has been marked for "
                                       "immediate deletion: %s",
                                       id, why));
        goto fail;
    }
    *id_out = id;
    *disk_out = disk ? rk_arena_strdup(r->call, disk) : NULL;
    rk_path_end(&p);
    return 0;
fail:
    rk_path_end(&p);
    return -1;
}

/* POST /start_async: the start object as soon as the create is submitted. */
void rk_route_start_async(struct rk_req *r)
{
    const char *id, *disk;
    if (do_start(r, 1, &id, &disk) == 0)
        rk_reply_ok(r, rk_start_result(id, disk));
}

/* POST /start: as /start_async, then wait until the sandbox runs. */
void rk_route_start(struct rk_req *r)
{
    /* Same as start_async (headers are not read, as in ROCK), then wait for alive. */
    const char *id, *disk;
    if (do_start(r, 0, &id, &disk) != 0)
        return;
    if (rk_lifecycle_wait_running(r->app, r->call, id, r->app->cfg->runtime.start_wait_s) != RK_OK)
        rk_reply_error(r, rk_call_error_code(r->call), rk_call_error_text(r->call));
    else
        rk_reply_ok(r, rk_start_result(id, disk));
}
