/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_snapshot.c
 * @brief archive/restore by OpenSandbox snapshots (opensandbox.archive_enabled).
 *
 * OpenSandbox (specs/sandbox-lifecycle.yml and server/opensandbox_server/
 * services/snapshot_service.py): POST /sandboxes/{id}/snapshots answers 202
 * with a Snapshot in state Creating, a worker moves it to Ready or Failed;
 * GET /snapshots/{id} reads it; DELETE /snapshots/{id} answers 204, 404 when
 * unknown and 409 while it is still Creating; POST /sandboxes with
 * `snapshotId` instead of `image` restores (entrypoint optional). The spec
 * requires a Running source. The Docker runtime only checks that the sandbox
 * exists (docker commit works on a paused container) but other runtimes do
 * not promise that, so a Paused source is resumed first; the core releases
 * (kills) the source once the snapshot is Ready, or pauses it again when the
 * snapshot failed.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "os_internal.h"

/** Parse a Snapshot object into out (arena strings). */
static rk_status snapshot_from_json(struct os_inst *inst, struct rk_call *call, json_object *o,
                                    const char *op, struct rk_snapshot *out)
{
    const struct rk_host *h = inst->host;
    json_object *st = NULL;
    const char *id = os_lc_jstr(o, "id");
    if (!id || !json_object_object_get_ex(o, "status", &st))
        return h->set_error(call, RK_E_UPSTREAM, "opensandbox %s failed: malformed snapshot", op);
    const char *state = os_lc_jstr(st, "state");
    const char *reason = os_lc_jstr(st, "reason"), *msg = os_lc_jstr(st, "message");
    out->snapshot_id = h->arena_strdup(call, id);
    if (state && !strcmp(state, "Ready"))
        out->state = RK_SNAPSHOT_READY;
    else if (state && (!strcmp(state, "Failed") || !strcmp(state, "Deleting")))
        out->state = RK_SNAPSHOT_FAILED;
    else
        out->state = RK_SNAPSHOT_CREATING; /* Creating, or a state added later */
    out->reason = NULL;
    if (out->state == RK_SNAPSHOT_FAILED) {
        struct os_sb sb = {0};
        os_sb_printf(&sb, "snapshot %s is %s%s%s%s%s", id, state, reason ? ": " : "",
                     reason ? reason : "", msg ? ": " : "", msg ? msg : "");
        char *t = os_sb_take(&sb);
        out->reason = t ? h->arena_strdup(call, t) : NULL;
        free(t);
    }
    return out->snapshot_id ? RK_OK : RK_E_NOMEM;
}

/** ops.snapshot_create: bring the source to Running, then POST a snapshot. */
rk_status os_snapshot_create(struct os_inst *inst, struct rk_call *call,
                             const struct rk_sandbox_ref *ref, struct rk_snapshot *out)
{
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    /* The spec requires a Running source: resume (no-op when running). */
    s = os_lc_resume(inst, call, ref);
    if (s == RK_OK)
        s = os_lc_wait_state(inst, call, osid, "Running", "snapshot");
    if (s != RK_OK)
        return s;
    char *path = os_sbx_path(osid, "/snapshots");
    json_object *b = json_object_new_object();
    struct os_sb sb = {0};
    os_sb_printf(&sb, "rock-%s", ref->sandbox_id ? ref->sandbox_id : osid);
    char *name = os_sb_take(&sb);
    json_object_object_add(b, "name", json_object_new_string(name ? name : "rock"));
    free(name);
    const char *body = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    struct os_xfer x;
    s = path ? os_lc_request(inst, call, "POST", path, body, &x) : RK_E_NOMEM;
    free(path);
    json_object_put(b);
    if (s == RK_E_NOMEM && !path)
        return inst->host->set_error(call, RK_E_NOMEM,
                                     "opensandbox snapshot failed: out of memory");
    if (s != RK_OK || x.status < 200 || x.status >= 300) {
        rk_status code = RK_E_UPSTREAM;
        if (s == RK_OK && (x.status == 501 || x.status == 409 || x.status == 400))
            code = RK_E_UNSUPPORTED;
        else if (s == RK_OK && x.status == 404)
            code = RK_E_NOT_FOUND;
        s = os_lc_fail(inst, call, s, code, "snapshot", osid, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    json_object *o = os_lc_body_json(&x);
    os_xfer_cleanup(&x);
    s = snapshot_from_json(inst, call, o, "snapshot", out);
    json_object_put(o);
    return s;
}

/** ops.snapshot_get: GET /snapshots/{id}. */
rk_status os_snapshot_get(struct os_inst *inst, struct rk_call *call, const char *snapshot_id,
                          struct rk_snapshot *out)
{
    char *enc = os_escape(snapshot_id);
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/snapshots/%s", enc ? enc : "");
    free(enc);
    char *path = os_sb_take(&sb);
    struct os_xfer x;
    rk_status s = path ? os_lc_request(inst, call, "GET", path, NULL, &x) : RK_E_NOMEM;
    free(path);
    if (s != RK_OK || x.status != 200) {
        s = os_lc_fail(inst, call, s,
                       x.status == 404   ? RK_E_NOT_FOUND
                       : x.status >= 500 ? RK_E_UNAVAILABLE
                                         : RK_E_UPSTREAM,
                       "get_snapshot", snapshot_id, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    json_object *o = os_lc_body_json(&x);
    os_xfer_cleanup(&x);
    s = snapshot_from_json(inst, call, o, "get_snapshot", out);
    json_object_put(o);
    return s;
}

/** ops.snapshot_delete: DELETE /snapshots/{id}; 404 is success, 409 (still Creating) a conflict. */
rk_status os_snapshot_delete(struct os_inst *inst, struct rk_call *call, const char *snapshot_id)
{
    char *enc = os_escape(snapshot_id);
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/snapshots/%s", enc ? enc : "");
    free(enc);
    char *path = os_sb_take(&sb);
    struct os_xfer x;
    rk_status s = path ? os_lc_request(inst, call, "DELETE", path, NULL, &x) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK && ((x.status >= 200 && x.status < 300) || x.status == 404)) {
        os_xfer_cleanup(&x);
        return RK_OK;
    }
    s = os_lc_fail(inst, call, s, x.status == 409 ? RK_E_CONFLICT : RK_E_UPSTREAM,
                   "delete_snapshot", snapshot_id, &x);
    os_xfer_cleanup(&x);
    return s;
}

/** ops.restore_snapshot: create a sandbox from snapshotId (same resources and metadata). */
rk_status os_restore_snapshot(struct os_inst *inst, struct rk_call *call,
                              const struct rk_create_spec *spec, const char *snapshot_id,
                              struct rk_created *out)
{
    const struct rk_host *h = inst->host;
    json_object *root = json_object_new_object();
    json_object_object_add(root, "snapshotId", json_object_new_string(snapshot_id));
    int64_t timeout = os_lc_add_sandbox_fields(inst, spec, root);
    const char *body = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    struct os_xfer x;
    int64_t asked = (int64_t)time(NULL); /* the lifetime counts from OpenSandbox's handling */
    rk_status s = os_lc_request(inst, call, "POST", "/sandboxes", body, &x);
    json_object_put(root);
    if (s != RK_OK || x.status < 200 || x.status >= 300) {
        s = os_lc_fail(inst, call, s, x.status >= 500 ? RK_E_UNAVAILABLE : RK_E_UPSTREAM, "restore",
                       snapshot_id, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    json_object *o = os_lc_body_json(&x);
    os_xfer_cleanup(&x);
    const char *id = os_lc_jstr(o, "id");
    out->upstream_id = id ? h->arena_strdup(call, id) : NULL;
    out->image = NULL;
    out->host_name = NULL;
    json_object_put(o);
    if (!out->upstream_id)
        return h->set_error(call, RK_E_UPSTREAM,
                            "opensandbox restore failed for %s: reply "
                            "without an id",
                            snapshot_id);
    if (timeout > 0 && inst->renew_margin_s > 0)
        os_renew_note(inst, out->upstream_id, asked + timeout);
    return RK_OK;
}
