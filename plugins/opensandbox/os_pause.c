/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_pause.c
 * @brief stop/restart by OpenSandbox pause/resume (opensandbox.stop_mode: pause).
 *
 * OpenSandbox lifecycle (specs/sandbox-lifecycle.yml): POST /sandboxes/{id}/pause
 * answers 202 and the sandbox goes Pausing -> Paused; POST .../resume answers
 * 202 and it goes Resuming -> Running. A deployment that cannot pause (e.g. a
 * Kubernetes provider without pause support) answers 501 or 409; that reaches
 * the client as 4000 with OpenSandbox's own reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "os_internal.h"

/** Poll interval while waiting for a lifecycle state. */
#define OS_STATE_POLL_MS 250

/** Raw OpenSandbox state ("Paused", ...) of a sandbox into buf. RK_E_NOT_FOUND if gone. */
static rk_status raw_state(struct os_inst *inst, struct rk_call *call, const char *osid,
                           const char *op, char *buf, size_t len)
{
    char *path = os_sbx_path(osid, "");
    if (!path)
        return inst->host->set_error(call, RK_E_NOMEM, "opensandbox %s failed: out of memory", op);
    struct os_xfer x;
    rk_status s = os_lc_request(inst, call, "GET", path, NULL, &x);
    free(path);
    if (s != RK_OK || x.status != 200) {
        s = os_lc_fail(inst, call, s,
                       x.status == 404   ? RK_E_NOT_FOUND
                       : x.status >= 500 ? RK_E_UNAVAILABLE
                                         : RK_E_UPSTREAM,
                       op, osid, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    json_object *o = os_lc_body_json(&x), *st = NULL;
    os_xfer_cleanup(&x);
    const char *state = NULL;
    if (o && json_object_object_get_ex(o, "status", &st))
        state = os_lc_jstr(st, "state");
    snprintf(buf, len, "%s", state ? state : "Unknown");
    json_object_put(o);
    return RK_OK;
}

/** Sleep ms milliseconds unless the call is cancelled (returns non-zero then). */
static int nap(struct os_inst *inst, struct rk_call *call, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return inst->host->cancelled(call);
}

/** Wait (bounded by opensandbox.state_wait and the call deadline) until the
 *  sandbox reports `want`. Failed/Terminated end the wait with an error. */
rk_status os_lc_wait_state(struct os_inst *inst, struct rk_call *call, const char *osid,
                           const char *want, const char *op)
{
    const struct rk_host *h = inst->host;
    int64_t until = h->now_ms() + inst->state_wait_s * 1000;
    int64_t dl = h->deadline_ms(call);
    if (dl > 0 && dl < until)
        until = dl;
    char state[64] = "";
    for (;;) {
        rk_status s = raw_state(inst, call, osid, op, state, sizeof state);
        if (s != RK_OK)
            return s;
        if (!strcmp(state, want))
            return RK_OK;
        if (!strcmp(state, "Failed") || !strcmp(state, "Terminated"))
            return h->set_error(call, RK_E_UPSTREAM, "opensandbox %s failed for %s: sandbox is %s",
                                op, osid, state);
        if (h->now_ms() >= until)
            return h->set_error(call, RK_E_UPSTREAM,
                                "opensandbox %s failed for %s: not %s after %llds (state %s)", op,
                                osid, want, (long long)inst->state_wait_s, state);
        if (nap(inst, call, OS_STATE_POLL_MS))
            return h->set_error(call, RK_E_CANCELLED, "opensandbox %s cancelled", op);
    }
}

/** POST /sandboxes/{id}/{verb}; a deployment that cannot do it gives 4000 with its reason. */
static rk_status post_verb(struct os_inst *inst, struct rk_call *call, const char *osid,
                           const char *verb)
{
    char suffix[32];
    snprintf(suffix, sizeof suffix, "/%s", verb);
    char *path = os_sbx_path(osid, suffix);
    if (!path)
        return inst->host->set_error(call, RK_E_NOMEM, "opensandbox %s failed: out of memory",
                                     verb);
    struct os_xfer x;
    rk_status s = os_lc_request(inst, call, "POST", path, NULL, &x);
    free(path);
    if (s == RK_OK && x.status >= 200 && x.status < 300) {
        os_xfer_cleanup(&x);
        return RK_OK;
    }
    rk_status code = RK_E_UPSTREAM;
    if (s == RK_OK) {
        int unsupported = x.status == 501 || x.status == 409 || x.status == 400 ||
                          x.status == 405 ||
                          (x.body && (os_contains_ci(x.body, "not supported") ||
                                      os_contains_ci(x.body, "not implemented")));
        code = x.status == 404 ? RK_E_NOT_FOUND : unsupported ? RK_E_UNSUPPORTED : RK_E_UPSTREAM;
    }
    s = os_lc_fail(inst, call, s, code, verb, osid, &x);
    os_xfer_cleanup(&x);
    return s;
}

/** ops.stop in pause mode: pause and wait (bounded) for Paused. Already
 *  Paused is success; the core keeps the record unchanged on any error. */
rk_status os_lc_pause(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    char state[64];
    s = raw_state(inst, call, osid, "pause", state, sizeof state);
    if (s != RK_OK)
        return s;
    if (!strcmp(state, "Paused"))
        return RK_OK;
    if (strcmp(state, "Pausing") != 0) {
        s = post_verb(inst, call, osid, "pause");
        if (s != RK_OK)
            return s;
    }
    os_ep_invalidate(inst, osid, -1);
    s = os_lc_wait_state(inst, call, osid, "Paused", "pause");
    if (s == RK_OK && os_renew_parked(inst, call, osid) != RK_OK)
        inst->host->log(RK_LOG_WARNING, "sandbox %s paused but its expiry was not extended",
                        osid); /* it still expires at the last renewal */
    return s;
}

/** ops.restart in pause mode: ask OpenSandbox to resume and return at once;
 *  the core shows pending until OpenSandbox reports Running. */
rk_status os_lc_resume(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    char state[64];
    s = raw_state(inst, call, osid, "resume", state, sizeof state);
    if (s != RK_OK)
        return s;
    if (!strcmp(state, "Running") || !strcmp(state, "Resuming"))
        return RK_OK;
    if (!strcmp(state, "Pausing")) {
        /* A resume while Pausing is refused upstream: let the pause finish. */
        s = os_lc_wait_state(inst, call, osid, "Paused", "resume");
        if (s != RK_OK)
            return s;
    }
    return post_verb(inst, call, osid, "resume");
}
