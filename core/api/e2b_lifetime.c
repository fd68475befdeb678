/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's lifetime routes beyond ROCK's four (docs/e2b.md), as the SDK 2.51
 * sends them:
 *
 *   POST /sandboxes/{id}/timeout       setTimeout: {"timeout": seconds} becomes the
 *                                      idle lifetime (rounded up to whole minutes, as
 *                                      at create); the idle deadline restarts from
 *                                      now and the plugin renews the backend's own
 *                                      expiry. 204.
 *   POST /v2/sandboxes/{id}/connect    Sandbox.connect: a pending or running sandbox
 *                                      answers 200 with E2B's Sandbox object (a given
 *                                      timeout applied as above); a paused one (stopped
 *                                      or archived) is resumed as ROCK's /restart does
 *                                      when the plugin can, and answered 201 once it
 *                                      runs (runtime.start_wait_s). With
 *                                      authentication on the answer carries a new
 *                                      envdAccessToken, valid next to the ones issued
 *                                      before (the record keeps only digests, so the
 *                                      first one cannot be shown again).
 *   POST /sandboxes/{id}/pause         pause / betaPause: ROCK's /stop (204) when the
 *                                      plugin can stop (opensandbox.stop_mode: pause);
 *                                      already paused is 409 (the SDK's false);
 *                                      otherwise 501 with the reason.
 */
#include <stdio.h>
#include <string.h>

#include "access/auth.h"
#include "access/secret.h"
#include "api/e2b.h"
#include "api/e2b_map.h"
#include "api/route_path.h"
#include "api/sandbox_ops.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/dispatch.h"
#include "domain/endpoint_cache.h"
#include "domain/lifecycle.h"
#include "domain/record.h"
#include "engine/http_server.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"
#include "store/store.h"

/* Most envd token digests one sandbox keeps from connects (the oldest goes first). */
#define CONNECT_TOKENS_MAX 8

/* What one lifetime update writes into the record. */
struct lifetime_update {
    int64_t minutes;    /* new idle lifetime, 0 = keep */
    const char *digest; /* an envd token digest to add, NULL = none */
};

/* rk_store_update callback: the new idle lifetime and token digest. */
static int apply_update(json_object *rec, void *ctx)
{
    const struct lifetime_update *u = ctx;
    if (!rk_state_is_active(rk_rec_state(rec)))
        return 1;
    if (u->minutes > 0)
        json_object_object_add(rec, "auto_clear_time", json_object_new_int64(u->minutes));
    if (u->digest) {
        json_object *old = NULL, *list = json_object_new_array();
        if (json_object_object_get_ex(rec, "envd_tokens_sha256", &old) &&
            json_object_is_type(old, json_type_array)) {
            size_t n = json_object_array_length(old);
            for (size_t i = n >= CONNECT_TOKENS_MAX ? n - CONNECT_TOKENS_MAX + 1 : 0; i < n; i++)
                json_object_array_add(list, json_object_get(json_object_array_get_idx(old, i)));
        }
        json_object_array_add(list, json_object_new_string(u->digest));
        json_object_object_add(rec, "envd_tokens_sha256", list);
    }
    return 0;
}

/* 1 when the plugin can resume a sandbox paused in state st (ROCK's /restart). */
static int can_resume(const struct rk_app *app, enum rk_state st)
{
    uint64_t caps = app->plugin->caps;
    return (st == RK_STATE_STOPPED && (caps & RK_CAP_STOP)) ||
           (st == RK_STATE_ARCHIVED && (caps & RK_CAP_SNAPSHOT));
}

/* The sandbox of the path, through the gate (the backend tag rule): 0 with t filled when it
 * is active, or paused and paused_ok; else -1 after the E2B error reply (404 for unknown and
 * deleted; 409 for a paused one). */
static int lifetime_target(struct rk_req *r, struct rk_target *t, int paused_ok)
{
    const char *id = r->params[0];
    if (!id || !rk_id_valid(id, strlen(id))) {
        rk_e2b_reply_error(r, 404, rk_arena_printf(r->call, "Sandbox %s not found", id ? id : ""));
        return -1;
    }
    if (rk_dispatch(r->app, r->call, RK_OP_STATUS, id, t) != RK_OK) {
        rk_e2b_reply_call_error(r);
        return -1;
    }
    enum rk_state st = t->ref.state;
    if (!rk_state_is_active(st) && !(paused_ok && can_resume(r->app, st))) {
        if (st == RK_STATE_DELETED)
            rk_e2b_reply_error(r, 404, rk_arena_printf(r->call, "Sandbox %s not found", id));
        else
            rk_e2b_reply_error(
                r, 409,
                rk_arena_printf(r->call, "Sandbox %s is paused (%s)%s", id, rk_state_name(st),
                                can_resume(r->app, st) ? ": connect resumes it"
                                                       : ": the operator cannot resume it"));
        rk_target_release(t);
        return -1;
    }
    return 0;
}

/* Write u into the record of id and restart its idle deadline; -1 after an error reply. */
static int lifetime_write(struct rk_req *r, const char *id, const struct lifetime_update *u)
{
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    rk_store_rc rc =
        rk_store_update(r->app->store, id, apply_update, (void *)u, &rec, err, sizeof err);
    if (rc == RK_STORE_ERROR) {
        rk_warn("[%s] E2B lifetime of %s: sandbox store unavailable: %s", r->request_id, id, err);
        rk_e2b_reply_error(r, 503, "sandbox store unavailable");
        return -1;
    }
    if (rc != RK_STORE_OK) {
        json_object_put(rec);
        rk_e2b_reply_error(r, 404, rk_arena_printf(r->call, "Sandbox %s not found", id));
        return -1;
    }
    if (u->minutes > 0) {
        rk_ep_cache_forget_sandbox(id); /* relays serving from the cache read the new lifetime */
        rk_dispatch_touch(r->app, rec); /* deadline now + lifetime; the plugin renews */
    }
    json_object_put(rec);
    return 0;
}

/* The "timeout" member (seconds) of the body: 1 with *minutes set, 0 when absent, -1 after a
 * 400 reply. */
static int timeout_of(struct rk_req *r, int required, int64_t *minutes)
{
    struct rk_route_path p;
    rk_path_body(&p, r);
    int present = 0;
    int64_t secs = rk_v_int_in(&p.v, p.body, "timeout", required ? RK_V_REQUIRED : 0, 0, 0,
                               RK_MAX_SECONDS, &present);
    if (!rk_v_ok(&p.v)) {
        rk_e2b_reply_error(r, 400, rk_v_text(&p.v));
        rk_path_end(&p);
        return -1;
    }
    rk_path_end(&p);
    *minutes = present ? rk_e2b_timeout_minutes(secs) : 0;
    return present;
}

/* POST /sandboxes/{sandboxID}/timeout */
void rk_e2b_set_timeout(struct rk_req *r)
{
    struct lifetime_update u = {0};
    if (timeout_of(r, 1, &u.minutes) < 0)
        return;
    struct rk_target t;
    if (lifetime_target(r, &t, 0) != 0)
        return;
    const char *id = rk_arena_strdup(r->call, t.ref.sandbox_id);
    rk_target_release(&t);
    if (lifetime_write(r, id, &u) != 0)
        return;
    r->outcome = "success";
    rk_req_reply_empty(r, 204);
}

/* POST /v2/sandboxes/{sandboxID}/connect */
void rk_e2b_connect(struct rk_req *r)
{
    struct lifetime_update u = {0};
    if (timeout_of(r, 0, &u.minutes) < 0)
        return;
    struct rk_target t;
    if (lifetime_target(r, &t, 1) != 0)
        return;
    const char *id = rk_arena_strdup(r->call, t.ref.sandbox_id);
    int paused = !rk_state_is_active(t.ref.state);
    const char *image =
        rk_arena_strdup(r->call, rk_rec_str(t.rec, "image") ? rk_rec_str(t.rec, "image") : "");
    rk_target_release(&t);
    char token[33], digest[RK_SECRET_DIGEST_HEX];
    int with_token = rk_auth_enabled();
    if (with_token) {
        if (rk_secret_issue(token, digest) != 0) {
            rk_call_set_error(r->call, RK_E_INTERNAL, "cannot hash the envd access token");
            rk_e2b_reply_call_error(r);
            return;
        }
        u.digest = digest;
    }
    if (paused) {
        /* resumed as ROCK's /restart does, answered once it runs (the SDK calls envd next) */
        if (rk_sandbox_restart(r, id) != RK_OK ||
            rk_lifecycle_wait_running(r->app, r->call, id, r->app->cfg->runtime.start_wait_s) !=
                RK_OK) {
            rk_e2b_reply_call_error(r);
            return;
        }
    }
    if ((u.minutes > 0 || u.digest) && lifetime_write(r, id, &u) != 0)
        return;
    r->outcome = "success";
    rk_req_reply_json(r, paused ? 201 : 200, rk_e2b_sandbox(id, image, with_token ? token : NULL));
}

/* POST /sandboxes/{sandboxID}/pause */
void rk_e2b_pause(struct rk_req *r)
{
    struct rk_target t;
    if (lifetime_target(r, &t, 0) != 0)
        return;
    const char *id = rk_arena_strdup(r->call, t.ref.sandbox_id);
    rk_target_release(&t);
    if (!(r->app->plugin->caps & RK_CAP_STOP)) {
        rk_e2b_reply_error(r, 501,
                           "pausing is not supported by this operator's configuration: it "
                           "cannot stop sandboxes (opensandbox.stop_mode: pause enables it)");
        return;
    }
    if (rk_sandbox_stop(r, id) != RK_OK) {
        rk_e2b_reply_call_error(r);
        return;
    }
    r->outcome = "success";
    rk_req_reply_empty(r, 204);
}
