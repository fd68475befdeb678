/* SPDX-License-Identifier: Apache-2.0 */
/* The client-facing status of a record, written as JSON text (status_text.h). */
#include "domain/status_text.h"

#include <string.h>

#include "base/json_text.h"
#include "host/host.h"

/* Versions the SDKs expect to see (§4.3). */
#define RK_GATEWAY_VERSION "0.0.45"
#define RK_SWE_REX_VERSION "1.2.17"

/* Append "key": (comma first unless it is the object's first member). */
static int key(struct rk_buf *b, const char *k)
{
    if (b->len && b->data[b->len - 1] != '{' && rk_buf_append(b, ",", 1) != 0)
        return -1;
    if (rk_json_str(b, k) != 0)
        return -1;
    return rk_buf_append(b, ":", 1);
}

/* "key": the record's member (null when absent). */
static int member(struct rk_buf *b, struct rk_rec_src *rec, const char *k)
{
    return key(b, k) || rk_src_value(b, rec, k);
}

/* "key": the record's string member, def when it is absent or not a string (TS rejects null). */
static int str_nonnull(struct rk_buf *b, struct rk_rec_src *rec, const char *k, const char *def)
{
    const char *s = rk_src_str(rec, k);
    return key(b, k) || rk_json_str(b, s ? s : def);
}

/* "status": the phases: {} normally; a failed phase when the backend reported a failure, so
 * the Python SDK stops waiting at once (Pitfall 7). */
static int phases(struct rk_buf *b, struct rk_rec_src *rec)
{
    if (key(b, "status") || rk_buf_append(b, "{", 1))
        return -1;
    if (rk_src_is(rec, "failure", RKU_JSON_OBJECT)) {
        const char *phase = rk_src_sub_str(rec, "failure", "phase");
        const char *msg = rk_src_sub_str(rec, "failure", "message");
        if (key(b, phase ? phase : "backend") || rk_buf_append(b, "{", 1) || key(b, "status") ||
            rk_json_str(b, "failed") || key(b, "message") || rk_json_str(b, msg ? msg : "failed") ||
            rk_buf_append(b, "}", 1))
            return -1;
    }
    return rk_buf_append(b, "}", 1);
}

const char *rk_rec_status_host(struct rk_rec_src *rec)
{
    const char *host = rk_src_str(rec, "host_name");
    if (!host || !*host)
        host = rk_src_str(rec, "sandbox_id");
    return host && *host ? host : "-";
}

int rk_rec_status_text(struct rk_rec_src *rec, enum rk_state state, int is_alive,
                       struct rk_buf *out)
{
    struct rk_buf *b = out;
    if (rk_buf_append(b, "{", 1) || str_nonnull(b, rec, "sandbox_id", "") || phases(b, rec) ||
        key(b, "state") || rk_json_str(b, rk_state_name(state)) || key(b, "port_mapping") ||
        rk_buf_append(b, "{}", 2) || key(b, "host_name") ||
        rk_json_str(b, rk_rec_status_host(rec)) || key(b, "host_ip") || rk_json_str(b, "") ||
        key(b, "is_alive") || rk_buf_append(b, is_alive ? "true" : "false", is_alive ? 4 : 5) ||
        str_nonnull(b, rec, "image", ""))
        return -1;
    if (rk_src_has(rec, "metadata")) {
        if (member(b, rec, "metadata"))
            return -1;
    } else if (key(b, "metadata") || rk_buf_append(b, "{}", 2)) {
        return -1;
    }
    double c = rk_src_has(rec, "cpus") ? rk_src_double(rec, "cpus") : 2.0;
    if (key(b, "gateway_version") || rk_json_str(b, RK_GATEWAY_VERSION) ||
        key(b, "swe_rex_version") || rk_json_str(b, RK_SWE_REX_VERSION) ||
        str_nonnull(b, rec, "user_id", "default") ||
        str_nonnull(b, rec, "experiment_id", "default") ||
        str_nonnull(b, rec, "namespace", "default") || key(b, "cpus") || rk_json_double(b, c) ||
        str_nonnull(b, rec, "memory", "8.00g") || member(b, rec, "num_gpus") ||
        member(b, rec, "accelerator_type") || member(b, rec, "disk"))
        return -1;
    int64_t exp = 0;
    if (key(b, "disk_limit_rootfs") || rk_src_value(b, rec, "disk") ||
        member(b, rec, "start_time") || member(b, rec, "stop_time") ||
        member(b, rec, "create_time") || member(b, rec, "archive_time") ||
        member(b, rec, "delete_time") || key(b, "auto_stop_time"))
        return -1;
    if (rk_state_is_active(rk_src_state(rec)) && rk_src_expire(rec, &exp) && exp > 0) {
        char iso[32];
        rk_iso_time(exp, iso);
        if (rk_json_str(b, iso))
            return -1;
    } else if (rk_buf_append(b, "null", 4)) {
        return -1;
    }
    if (key(b, "auto_archive_time") || rk_buf_append(b, "null", 4) || key(b, "auto_delete_time") ||
        rk_buf_append(b, "null", 4) || key(b, "state_history"))
        return -1;
    if (rk_src_is(rec, "state_history", RKU_JSON_ARRAY)) {
        if (rk_src_value(b, rec, "state_history"))
            return -1;
    } else if (rk_buf_append(b, "[]", 2)) {
        return -1;
    }
    if (rec->oom)
        return -1;
    return rk_buf_append(b, "}", 1);
}

json_object *rk_rec_status(json_object *rec, enum rk_state state, int is_alive)
{
    struct rk_buf b = {0};
    json_object *o = NULL;
    struct rk_rec_src src = rk_src_tree(rec);
    if (rk_rec_status_text(&src, state, is_alive, &b) == 0)
        o = json_tokener_parse(rk_buf_cstr(&b));
    rk_buf_free(&b);
    return o;
}
