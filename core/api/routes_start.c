/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /start_async and /start (wire contract §5.1): validate the request,
 * check it against the runtime limits, restore an archived id or create the
 * pending record, and hand the backend create to a background thread
 * (lifecycle.c). /start then waits until the sandbox runs.
 */
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "api/start_submit.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
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

/* Validate the start request and start the sandbox (start_submit.h); on
 * success *id_out is the sandbox id (arena) and *disk_out the disk value.
 * Replies on failure and returns -1. */
static int do_start(struct rk_req *r, int read_headers, const char **id_out, const char **disk_out)
{
    const struct rk_config *cfg = r->app->cfg;
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
    int64_t acm =
        rk_v_int_in(v, body, "auto_clear_time_minutes", 0, cfg->runtime.default_auto_clear_minutes,
                    INT64_MIN, RK_MAX_MINUTES, NULL);
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
    if (rk_path_valid(&p) != 0) {
        rk_path_end(&p);
        return -1;
    }
    if (acm <= 0)
        acm = cfg->runtime.default_auto_clear_minutes;
    struct rk_start_req s = {
        .sandbox_id = req_id,
        .image = image,
        .image_os = image_os,
        .memory = memory,
        .disk = disk,
        .accelerator_type = accel,
        .cpus = cpus,
        .limit_cpus = limit_cpus,
        .has_gpus = has_gpus,
        .num_gpus = num_gpus,
        .auto_clear_minutes = acm,
        .has_startup_timeout = has_st,
        .startup_timeout_s = startup_timeout,
        .user_id = read_headers ? header_or(r, "X-User-Id", "default") : "default",
        .experiment_id = read_headers ? header_or(r, "X-Experiment-Id", "default") : "default",
        .namespace_name = read_headers ? header_or(r, "X-Namespace", "default") : "default",
        .cluster_name = read_headers ? header_or(r, "X-Cluster", "default") : "default",
    };
    int rc = -1;
    if (rk_start_submit(r, &s, id_out) != RK_OK) {
        rk_reply_call_error(r);
    } else {
        *disk_out = disk ? rk_arena_strdup(r->call, disk) : NULL;
        rc = 0;
    }
    rk_path_end(&p);
    return rc;
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
