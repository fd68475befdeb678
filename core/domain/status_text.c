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
static int member(struct rk_buf *b, json_object *rec, const char *k)
{
    json_object *v = NULL;
    json_object_object_get_ex(rec, k, &v);
    return key(b, k) || rk_json_value(b, v);
}

/* "key": the record's string member, def when it is absent or not a string (TS rejects null). */
static int str_nonnull(struct rk_buf *b, json_object *rec, const char *k, const char *def)
{
    const char *s = rk_rec_str(rec, k);
    return key(b, k) || rk_json_str(b, s ? s : def);
}

/* "status": the phases: {} normally; a failed phase when the backend reported a failure, so
 * the Python SDK stops waiting at once (Pitfall 7). */
static int phases(struct rk_buf *b, json_object *rec)
{
    json_object *failure;
    if (key(b, "status") || rk_buf_append(b, "{", 1))
        return -1;
    if (json_object_object_get_ex(rec, "failure", &failure) && failure &&
        json_object_is_type(failure, json_type_object)) {
        const char *phase = rk_rec_str(failure, "phase");
        const char *msg = rk_rec_str(failure, "message");
        if (key(b, phase ? phase : "backend") || rk_buf_append(b, "{", 1) || key(b, "status") ||
            rk_json_str(b, "failed") || key(b, "message") || rk_json_str(b, msg ? msg : "failed") ||
            rk_buf_append(b, "}", 1))
            return -1;
    }
    return rk_buf_append(b, "}", 1);
}

const char *rk_rec_status_host(json_object *rec)
{
    const char *host = rk_rec_str(rec, "host_name");
    if (!host || !*host)
        host = rk_rec_str(rec, "sandbox_id");
    return host && *host ? host : "-";
}

int rk_rec_status_text(json_object *rec, enum rk_state state, int is_alive, struct rk_buf *out)
{
    struct rk_buf *b = out;
    if (rk_buf_append(b, "{", 1) || str_nonnull(b, rec, "sandbox_id", "") || phases(b, rec) ||
        key(b, "state") || rk_json_str(b, rk_state_name(state)) || key(b, "port_mapping") ||
        rk_buf_append(b, "{}", 2) || key(b, "host_name") ||
        rk_json_str(b, rk_rec_status_host(rec)) || key(b, "host_ip") || rk_json_str(b, "") ||
        key(b, "is_alive") || rk_buf_append(b, is_alive ? "true" : "false", is_alive ? 4 : 5) ||
        str_nonnull(b, rec, "image", ""))
        return -1;
    json_object *md;
    if (json_object_object_get_ex(rec, "metadata", &md) && md) {
        if (member(b, rec, "metadata"))
            return -1;
    } else if (key(b, "metadata") || rk_buf_append(b, "{}", 2)) {
        return -1;
    }
    json_object *cpus;
    double c = 2.0;
    if (json_object_object_get_ex(rec, "cpus", &cpus) && cpus)
        c = json_object_get_double(cpus);
    if (key(b, "gateway_version") || rk_json_str(b, RK_GATEWAY_VERSION) ||
        key(b, "swe_rex_version") || rk_json_str(b, RK_SWE_REX_VERSION) ||
        str_nonnull(b, rec, "user_id", "default") ||
        str_nonnull(b, rec, "experiment_id", "default") ||
        str_nonnull(b, rec, "namespace", "default") || key(b, "cpus") || rk_json_double(b, c) ||
        str_nonnull(b, rec, "memory", "8.00g") || member(b, rec, "num_gpus") ||
        member(b, rec, "accelerator_type") || member(b, rec, "disk"))
        return -1;
    json_object *disk = NULL;
    json_object_object_get_ex(rec, "disk", &disk);
    if (key(b, "disk_limit_rootfs") || rk_json_value(b, disk) || member(b, rec, "start_time") ||
        member(b, rec, "stop_time") || member(b, rec, "create_time") ||
        member(b, rec, "archive_time") || member(b, rec, "delete_time") || key(b, "auto_stop_time"))
        return -1;
    json_object *exp;
    if (rk_state_is_active(rk_rec_state(rec)) &&
        json_object_object_get_ex(rec, "expire_time", &exp) && exp &&
        json_object_get_int64(exp) > 0) {
        char iso[32];
        rk_iso_time(json_object_get_int64(exp), iso);
        if (rk_json_str(b, iso))
            return -1;
    } else if (rk_buf_append(b, "null", 4)) {
        return -1;
    }
    if (key(b, "auto_archive_time") || rk_buf_append(b, "null", 4) || key(b, "auto_delete_time") ||
        rk_buf_append(b, "null", 4) || key(b, "state_history"))
        return -1;
    json_object *hist;
    if (json_object_object_get_ex(rec, "state_history", &hist) && hist &&
        json_object_is_type(hist, json_type_array)) {
        if (rk_json_value(b, hist))
            return -1;
    } else if (rk_buf_append(b, "[]", 2)) {
        return -1;
    }
    return rk_buf_append(b, "}", 1);
}

json_object *rk_rec_status(json_object *rec, enum rk_state state, int is_alive)
{
    struct rk_buf b = {0};
    json_object *o = NULL;
    if (rk_rec_status_text(rec, state, is_alive, &b) == 0)
        o = json_tokener_parse(rk_buf_cstr(&b));
    rk_buf_free(&b);
    return o;
}
