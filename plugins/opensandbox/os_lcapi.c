/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_lcapi.c
 * @brief The lifecycle server's client: request composition ({protocol}://{endpoint}/v1...,
 *        the API key), JSON replies, failure texts and the sandbox paths, shared by every
 *        file that talks to the lifecycle server (os_endpoint.c, os_lifecycle.c, os_renew.c,
 *        os_pause.c, os_snapshot.c).
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "os_internal.h"

/** Prepare a lifecycle request to {protocol}://{endpoint}/v1{path}. */
rk_status os_lc_xfer(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
                     const char *method, const char *path)
{
    memset(x, 0, sizeof(*x));
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/v1%s", path);
    char *p = os_sb_take(&sb);
    char *url = p ? os_join_url(inst->protocol, inst->endpoint, p) : NULL;
    free(p);
    if (!url)
        return RK_E_NOMEM;
    rk_status s = os_xfer_init(x, inst, call, method, url, inst->default_timeout_s * 1000);
    free(url);
    if (s == RK_OK)
        s = os_xfer_header(x, "Accept", "application/json");
    if (s == RK_OK && inst->api_key)
        s = os_xfer_header(x, "OPEN-SANDBOX-API-KEY", inst->api_key);
    return s;
}

/** Parse a buffered JSON body into an object (NULL if not an object). */
json_object *os_lc_body_json(const struct os_xfer *x)
{
    if (!x->body || !x->body_len)
        return NULL;
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    json_object *o = json_tokener_parse_ex(tok, x->body, (int)x->body_len);
    json_tokener_free(tok);
    if (o && !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

/** String member of an object or NULL. */
const char *os_lc_jstr(json_object *o, const char *key)
{
    json_object *v;
    if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
        return json_object_get_string(v);
    return NULL;
}

/** Record "opensandbox <op> failed for <osid>: <detail>" for a non-2xx answer. */
rk_status os_lc_http_fail(struct os_inst *inst, struct rk_call *call, rk_status code,
                          const char *op, const char *osid, const struct os_xfer *x)
{
    char *d = os_error_detail(x->status, x->body, x->body_len);
    rk_status r;
    if (osid)
        r = inst->host->set_error(call, code, "opensandbox %s failed for %s: %s", op, osid,
                                  d ? d : "error");
    else
        r = inst->host->set_error(call, code, "opensandbox %s failed: %s", op, d ? d : "error");
    free(d);
    return r;
}

/** Record the failure of a transfer that got no HTTP answer. */
rk_status os_lc_xfer_fail(struct os_inst *inst, struct rk_call *call, rk_status s, const char *op,
                          const char *osid, const struct os_xfer *x)
{
    const char *err = s == RK_E_CANCELLED   ? "cancelled"
                      : s == RK_E_TIMEOUT   ? "request deadline exceeded"
                      : s == RK_E_NOMEM     ? "out of memory"
                      : s == RK_E_TOO_LARGE ? "response too large"
                                            : os_xfer_err(x);
    if (osid)
        return inst->host->set_error(call, s, "opensandbox %s failed for %s: %s", op, osid, err);
    return inst->host->set_error(call, s, "opensandbox %s failed: %s", op, err);
}

/** Perform one lifecycle request (JSON body optional); x must be cleaned up. */
rk_status os_lc_request(struct os_inst *inst, struct rk_call *call, const char *method,
                        const char *path, const char *json_body, struct os_xfer *x)
{
    rk_status s = os_lc_xfer(x, inst, call, method, path);
    if (s == RK_OK && json_body)
        os_xfer_json(x, json_body);
    if (s == RK_OK && !strcmp(method, "POST"))
        os_xfer_send_once(x); /* not idempotent (snapshot, restore): sent once */
    if (s == RK_OK)
        s = os_xfer_perform(x);
    return s;
}

/** Record the failure of a lifecycle request: no answer (s != RK_OK) or a non-2xx one. */
rk_status os_lc_fail(struct os_inst *inst, struct rk_call *call, rk_status s, rk_status code,
                     const char *op, const char *osid, const struct os_xfer *x)
{
    if (s != RK_OK)
        return os_lc_xfer_fail(
            inst, call,
            (s == RK_E_CANCELLED || s == RK_E_TIMEOUT || s == RK_E_NOMEM) ? s : RK_E_UNAVAILABLE,
            op, osid, x);
    return os_lc_http_fail(inst, call, code, op, osid, x);
}

/** Path "/sandboxes/{osid}{suffix}" (malloc'd) or NULL. */
char *os_sbx_path(const char *osid, const char *suffix)
{
    char *enc = os_escape(osid);
    if (!enc)
        return NULL;
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/sandboxes/%s%s", enc, suffix);
    free(enc);
    return os_sb_take(&sb);
}

/** The sandbox's upstream id, or the B52 refusal when it is not recorded. */
rk_status os_need_upstream_id(struct os_inst *inst, struct rk_call *call,
                              const struct rk_sandbox_ref *ref, const char **osid)
{
    if (ref->upstream_id && *ref->upstream_id) {
        *osid = ref->upstream_id;
        return RK_OK;
    }
    return inst->host->set_error(call, RK_E_INVALID,
                                 "OpenSandbox sandbox metadata is missing opensandbox_id");
}
