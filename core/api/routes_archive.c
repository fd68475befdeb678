/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /sandboxes/{id}/archive, /commit and GET /commit/{id} (§5.15-5.16).
 * With RK_CAP_SNAPSHOT an archive moves stopped -> archiving here and runs
 * as a background job (domain/archive.c); a retry on an archiving sandbox
 * takes a dead job over. Without it the plugin's archive entry is called.
 */
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/archive.h"
#include "domain/record.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "store/store.h"

/* rk_store_update: stopped -> archiving with the job's first lease. */
static int expect_stopped(json_object *rec, void *ctx)
{
    (void)ctx;
    if (rk_rec_state(rec) != RK_STATE_STOPPED)
        return 1;
    json_object_object_del(rec, "archive_error");
    /* The job's lease starts with the transition, so no background pass
     * takes over a job that has not started yet. */
    json_object_object_add(rec, "job_lease", json_object_new_int64(rk_epoch_s() + 900));
    rk_rec_transition(rec, RK_STATE_ARCHIVING, "archive");
    return 0;
}

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

/* Archive by snapshot (RK_CAP_SNAPSHOT): stopped -> archiving now, the rest
 * in the background (archive.c). A retry on an archiving record whose job
 * lost its admin takes the job over. Replies. */
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
        rk_reply_id_text(r, id, "archiving");
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
        rk_reply_store_error(r, err);
        return;
    }
    if (rk_archive_start(app, r->call, id) != RK_OK) {
        /* No job will run (too many in progress): back to stopped at once. */
        rk_lifecycle_transition(app, id, RK_STATE_ARCHIVING, RK_STATE_ARCHIVING, RK_STATE_STOPPED,
                                "archive_failed");
        rk_reply_call_error(r);
        return;
    }
    rk_reply_id_text(r, id, "archiving");
}

/* POST /sandboxes/{id}/archive (§5.15). */
void rk_route_archive(struct rk_req *r)
{
    const char *id = r->params[0];
    if (r->app->plugin->caps & RK_CAP_SNAPSHOT) {
        archive_by_snapshot(r, id);
        return;
    }
    if (rk_route_state_op(r, id, RK_OP_ARCHIVE, RK_STATE_ARCHIVING, RK_STATE_STOPPED) == 0)
        rk_reply_id_text(r, id, "archiving");
}

/* Commit status object (§5.16). */
static json_object *commit_status(const char *id, const char *tag, const char *phase)
{
    /* The fields a synchronous commit leaves unset, in wire order. */
    static const char *const unset[] = {"started_at", "completed_at",  "exit_code", "failed_stage",
                                        "error_code", "error_message", NULL};
    json_object *o = json_object_new_object();
    json_object_object_add(o, "sandbox_id", json_object_new_string(id));
    json_object_object_add(o, "image_tag", tag ? json_object_new_string(tag) : NULL);
    json_object_object_add(o, "phase", json_object_new_string(phase));
    for (size_t i = 0; unset[i]; i++)
        json_object_object_add(o, unset[i], NULL);
    return o;
}

/* POST /commit (§5.16): the plugin commits synchronously. */
void rk_route_commit(struct rk_req *r)
{
    struct rk_route_path p;
    const char *id = rk_path_sandbox(&p, r);
    const char *tag = rk_v_str(&p.v, p.body, "image_tag", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    if (tag && strpbrk(tag, "\r\n"))
        rk_v_problem(&p.v, "image_tag", "image_tag must not contain line separators");
    if (rk_path_gate(&p, RK_OP_COMMIT, id) == 0) {
        const struct rk_plugin *pl = r->app->plugin;
        rk_status st;
        RK_UPSTREAM(st, pl, commit, r->call, &p.t.ref, tag);
        if (st != RK_OK)
            rk_reply_call_error(r);
        else
            rk_reply_ok(r, commit_status(id, tag, "SUCCEEDED"));
    }
    rk_path_end(&p);
}

/* GET /commit/{id}: a commit is synchronous, so it has succeeded. */
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
