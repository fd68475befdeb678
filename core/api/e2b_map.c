/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's wire shapes from rock-admin's records (e2b_map.h). */
#include "api/e2b_map.h"

#include <math.h>
#include <string.h>

#include "domain/record.h"
#include "engine/http_server.h"
#include "host/host.h"
#include "obs/log.h"

int64_t rk_e2b_timeout_minutes(int64_t seconds)
{
    if (seconds <= 60)
        return 1;
    return (seconds + 59) / 60;
}

const char *rk_e2b_state(const char *rock_state)
{
    enum rk_state st = rk_state_parse(rock_state ? rock_state : "");
    switch (st) {
    case RK_STATE_PENDING:
    case RK_STATE_RUNNING:
        return "running";
    case RK_STATE_STOPPED:
    case RK_STATE_ARCHIVING:
    case RK_STATE_ARCHIVED:
        return "paused";
    default:
        return NULL;
    }
}

json_object *rk_e2b_sandbox(const char *id, const char *template_id, const char *envd_token)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "sandboxID", json_object_new_string(id));
    json_object_object_add(o, "templateID", json_object_new_string(template_id));
    json_object_object_add(o, "clientID", json_object_new_string(RK_E2B_CLIENT_ID));
    json_object_object_add(o, "envdVersion", json_object_new_string(RK_E2B_ENVD_VERSION));
    if (envd_token)
        json_object_object_add(o, "envdAccessToken", json_object_new_string(envd_token));
    json_object_object_add(o, "domain", NULL);
    return o;
}

/* A string member of a status object, or NULL. */
static const char *member_str(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v) || !v || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

/* Megabytes of a size text ("8.00g", "50G"); 0 when it does not parse. */
static int64_t size_mb(const char *text)
{
    char norm[32];
    double bytes = 0;
    if (!text || rk_memory_normalize(text, norm, &bytes) != 0)
        return 0;
    return (int64_t)llround(bytes / (1024.0 * 1024.0));
}

json_object *rk_e2b_detail(json_object *status)
{
    const char *state = rk_e2b_state(member_str(status, "state"));
    if (!state)
        return NULL;
    json_object *o = json_object_new_object();
    const char *id = member_str(status, "sandbox_id");
    const char *image = member_str(status, "image");
    json_object_object_add(o, "sandboxID", json_object_new_string(id ? id : ""));
    json_object_object_add(o, "templateID", json_object_new_string(image ? image : ""));
    json_object_object_add(o, "clientID", json_object_new_string(RK_E2B_CLIENT_ID));
    json_object_object_add(o, "state", json_object_new_string(state));
    const char *started = member_str(status, "start_time");
    if (!started)
        started = member_str(status, "create_time");
    const char *end = member_str(status, "auto_stop_time");
    json_object_object_add(o, "startedAt", json_object_new_string(started ? started : ""));
    json_object_object_add(o, "endAt", json_object_new_string(end ? end : started ? started : ""));
    json_object *cpus = NULL;
    double c = 0;
    if (json_object_object_get_ex(status, "cpus", &cpus) && cpus)
        c = json_object_get_double(cpus);
    json_object_object_add(o, "cpuCount", json_object_new_int64(c > 0 ? (int64_t)ceil(c) : 1));
    json_object_object_add(o, "memoryMB",
                           json_object_new_int64(size_mb(member_str(status, "memory"))));
    json_object_object_add(o, "diskSizeMB",
                           json_object_new_int64(size_mb(member_str(status, "disk"))));
    json_object *md = NULL;
    json_object_object_get_ex(status, "metadata", &md);
    json_object_object_add(o, "metadata", md ? json_object_get(md) : json_object_new_object());
    json_object_object_add(o, "envdVersion", json_object_new_string(RK_E2B_ENVD_VERSION));
    return o;
}

unsigned rk_e2b_http_status(rk_status st)
{
    switch (st) {
    case RK_E_INVALID:
    case RK_E_UNSUPPORTED:
        return 400;
    case RK_E_NOT_FOUND:
        return 404;
    case RK_E_CONFLICT:
    case RK_E_NOT_RUNNING:
        return 409;
    case RK_E_UNAVAILABLE:
        return 503;
    case RK_E_TIMEOUT:
        return 504;
    default:
        return 500;
    }
}

void rk_e2b_reply_error(struct rk_req *r, unsigned http_status, const char *message)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "code", json_object_new_int((int)http_status));
    json_object_object_add(o, "message", json_object_new_string(message ? message : ""));
    r->outcome = http_status >= 500 ? "server_error" : "client_error";
    rk_req_reply_json(r, http_status, o);
}

void rk_e2b_reply_call_error(struct rk_req *r)
{
    rk_status st = rk_call_error_code(r->call);
    unsigned http = rk_e2b_http_status(st == RK_OK ? RK_E_INTERNAL : st);
    const char *text = rk_call_error_text(r->call);
    if (http == 500) {
        rk_warn("[%s] E2B request failed: %s", r->request_id, text);
        text = "internal error (see the rock-admin log for the request id)";
    } else if (http == 503) {
        rk_warn("[%s] E2B request failed: %s", r->request_id, text);
        text = "sandbox store or backend unavailable";
    }
    rk_e2b_reply_error(r, http, text);
}
