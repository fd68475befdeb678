/* Fault injection, switchable at run time through the control API under /_sim/. */
#include "sim.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t sim_faults_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sim_faults sim_faults_cur;

/* Reset every fault switch to "off". */
static void sim_faults_reset_locked(void)
{
    memset(&sim_faults_cur, 0, sizeof sim_faults_cur);
    sim_faults_cur.status_count = -1;
    sim_faults_cur.drop_count = -1;
    sim_faults_cur.cut_stream_after = -1;
    sim_faults_cur.stall_stream_after = -1;
}

/* Initialise the fault table. */
void sim_faults_init(void)
{
    pthread_mutex_lock(&sim_faults_mu);
    sim_faults_reset_locked();
    pthread_mutex_unlock(&sim_faults_mu);
}

/* Snapshot of the current fault configuration. */
void sim_faults_get(struct sim_faults *out)
{
    pthread_mutex_lock(&sim_faults_mu);
    *out = sim_faults_cur;
    pthread_mutex_unlock(&sim_faults_mu);
}

/* Consume one injected status for a lifecycle/execd request; true if it applies. */
bool sim_fault_take_status(bool execd, int *status)
{
    pthread_mutex_lock(&sim_faults_mu);
    int st = execd ? sim_faults_cur.execd_status : sim_faults_cur.lifecycle_status;
    bool hit = st != 0 && sim_faults_cur.status_count != 0;
    if (hit && sim_faults_cur.status_count > 0)
        sim_faults_cur.status_count--;
    pthread_mutex_unlock(&sim_faults_mu);
    *status = st;
    return hit;
}

/* Consume one injected connection drop; true if this request must be dropped. */
bool sim_fault_take_drop(bool execd)
{
    pthread_mutex_lock(&sim_faults_mu);
    bool on = execd ? sim_faults_cur.drop_execd : sim_faults_cur.drop_lifecycle;
    bool hit = on && sim_faults_cur.drop_count != 0;
    if (hit && sim_faults_cur.drop_count > 0)
        sim_faults_cur.drop_count--;
    pthread_mutex_unlock(&sim_faults_mu);
    return hit;
}

/* Consume one "create the sandbox but drop the reply" token (after the creates to answer
 * first, drop_create_reply_skip). */
bool sim_fault_take_drop_create(void)
{
    pthread_mutex_lock(&sim_faults_mu);
    bool hit = sim_faults_cur.drop_create_reply_count != 0;
    if (hit && sim_faults_cur.drop_create_reply_skip > 0) {
        sim_faults_cur.drop_create_reply_skip--;
        hit = false;
    } else if (sim_faults_cur.drop_create_reply_count > 0) {
        sim_faults_cur.drop_create_reply_count--;
    }
    pthread_mutex_unlock(&sim_faults_mu);
    return hit;
}

/* Read an integer member (default dflt); false if present with a wrong type. */
static bool sim_get_int(json_object *o, const char *key, int64_t dflt, int64_t *out)
{
    json_object *v;
    *out = dflt;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return true;
    if (!json_object_is_type(v, json_type_int))
        return false;
    *out = json_object_get_int64(v);
    return true;
}

/* Read a boolean member (default false); false if present with a wrong type. */
static bool sim_get_bool(json_object *o, const char *key, bool *out)
{
    json_object *v;
    *out = false;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return true;
    if (!json_object_is_type(v, json_type_boolean))
        return false;
    *out = json_object_get_boolean(v);
    return true;
}

/* Current faults as JSON. */
static json_object *sim_faults_json(void)
{
    struct sim_faults f;
    sim_faults_get(&f);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "lifecycle_latency_ms",
                           json_object_new_int64(f.lifecycle_latency_ms));
    json_object_object_add(o, "execd_latency_ms", json_object_new_int64(f.execd_latency_ms));
    json_object_object_add(o, "list_later_pages_latency_ms",
                           json_object_new_int64(f.list_later_pages_latency_ms));
    json_object_object_add(o, "lifecycle_status", json_object_new_int(f.lifecycle_status));
    json_object_object_add(o, "execd_status", json_object_new_int(f.execd_status));
    json_object_object_add(o, "status_count", json_object_new_int64(f.status_count));
    json_object_object_add(o, "drop_lifecycle", json_object_new_boolean(f.drop_lifecycle));
    json_object_object_add(o, "drop_execd", json_object_new_boolean(f.drop_execd));
    json_object_object_add(o, "drop_count", json_object_new_int64(f.drop_count));
    int64_t left = f.refuse_until_ms - sim_now_ms();
    json_object_object_add(o, "refuse_ms", json_object_new_int64(left > 0 ? left : 0));
    json_object_object_add(o, "cut_stream_after", json_object_new_int64(f.cut_stream_after));
    json_object_object_add(o, "stall_stream_after", json_object_new_int64(f.stall_stream_after));
    json_object_object_add(o, "drop_create_reply",
                           json_object_new_int64(f.drop_create_reply_count));
    json_object_object_add(o, "drop_create_reply_skip",
                           json_object_new_int64(f.drop_create_reply_skip));
    json_object_object_add(o, "pause_unsupported", json_object_new_boolean(f.pause_unsupported));
    json_object_object_add(o, "pause_fail", json_object_new_boolean(f.pause_fail));
    json_object_object_add(o, "resume_fail", json_object_new_boolean(f.resume_fail));
    json_object_object_add(o, "pause_delay_ms", json_object_new_int64(f.pause_delay_ms));
    json_object_object_add(o, "resume_delay_ms", json_object_new_int64(f.resume_delay_ms));
    json_object_object_add(o, "paused_execd_refuse",
                           json_object_new_boolean(f.paused_execd_refuse));
    json_object_object_add(o, "snapshot_unsupported",
                           json_object_new_boolean(f.snapshot_unsupported));
    json_object_object_add(o, "snapshot_fail", json_object_new_boolean(f.snapshot_fail));
    json_object_object_add(o, "snapshot_delay_ms", json_object_new_int64(f.snapshot_delay_ms));
    json_object_object_add(o, "restore_fail", json_object_new_boolean(f.restore_fail));
    json_object_object_add(o, "image_pull_fail", json_object_new_boolean(f.image_pull_fail));
    return o;
}

/* Replace the fault configuration from a JSON object; absent keys mean "off". */
static enum MHD_Result sim_faults_set(struct MHD_Connection *c, struct sim_req *r)
{
    json_object *o = json_tokener_parse(r->body);
    if (!o || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", "expected a JSON object");
    }
    struct sim_faults f;
    memset(&f, 0, sizeof f);
    int64_t lst, est, refuse, dcr;
    bool ok = sim_get_int(o, "lifecycle_latency_ms", 0, &f.lifecycle_latency_ms) &&
              sim_get_int(o, "execd_latency_ms", 0, &f.execd_latency_ms) &&
              sim_get_int(o, "list_later_pages_latency_ms", 0, &f.list_later_pages_latency_ms) &&
              sim_get_int(o, "lifecycle_status", 0, &lst) &&
              sim_get_int(o, "execd_status", 0, &est) &&
              sim_get_int(o, "status_count", -1, &f.status_count) &&
              sim_get_bool(o, "drop_lifecycle", &f.drop_lifecycle) &&
              sim_get_bool(o, "drop_execd", &f.drop_execd) &&
              sim_get_int(o, "drop_count", -1, &f.drop_count) &&
              sim_get_int(o, "refuse_ms", 0, &refuse) &&
              sim_get_int(o, "cut_stream_after", -1, &f.cut_stream_after) &&
              sim_get_int(o, "stall_stream_after", -1, &f.stall_stream_after) &&
              sim_get_int(o, "drop_create_reply", 0, &dcr) &&
              sim_get_int(o, "drop_create_reply_skip", 0, &f.drop_create_reply_skip) &&
              sim_get_bool(o, "pause_unsupported", &f.pause_unsupported) &&
              sim_get_bool(o, "pause_fail", &f.pause_fail) &&
              sim_get_bool(o, "resume_fail", &f.resume_fail) &&
              sim_get_int(o, "pause_delay_ms", 0, &f.pause_delay_ms) &&
              sim_get_int(o, "resume_delay_ms", 0, &f.resume_delay_ms) &&
              sim_get_bool(o, "paused_execd_refuse", &f.paused_execd_refuse) &&
              sim_get_bool(o, "snapshot_unsupported", &f.snapshot_unsupported) &&
              sim_get_bool(o, "snapshot_fail", &f.snapshot_fail) &&
              sim_get_int(o, "snapshot_delay_ms", 0, &f.snapshot_delay_ms) &&
              sim_get_bool(o, "restore_fail", &f.restore_fail) &&
              sim_get_bool(o, "image_pull_fail", &f.image_pull_fail);
    json_object_object_foreach(o, key, val)
    {
        (void)val;
        static const char *known[] = {"lifecycle_latency_ms",
                                      "execd_latency_ms",
                                      "lifecycle_status",
                                      "execd_status",
                                      "status_count",
                                      "drop_lifecycle",
                                      "drop_execd",
                                      "drop_count",
                                      "refuse_ms",
                                      "cut_stream_after",
                                      "stall_stream_after",
                                      "drop_create_reply",
                                      "pause_unsupported",
                                      "pause_fail",
                                      "resume_fail",
                                      "pause_delay_ms",
                                      "resume_delay_ms",
                                      "paused_execd_refuse",
                                      "snapshot_unsupported",
                                      "snapshot_fail",
                                      "snapshot_delay_ms",
                                      "restore_fail",
                                      "image_pull_fail",
                                      "list_later_pages_latency_ms",
                                      "drop_create_reply_skip"};
        bool found = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            found = found || strcmp(known[i], key) == 0;
        if (!found)
            ok = false;
    }
    json_object_put(o);
    if (!ok || (lst && (lst < 100 || lst > 599)) || (est && (est < 100 || est > 599)) ||
        f.pause_delay_ms < 0 || f.resume_delay_ms < 0 || f.snapshot_delay_ms < 0 ||
        f.list_later_pages_latency_ms < 0 || f.drop_create_reply_skip < 0)
        return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", "unknown key or wrong type");
    f.lifecycle_status = (int)lst;
    f.execd_status = (int)est;
    f.refuse_until_ms = refuse > 0 ? sim_now_ms() + refuse : 0;
    f.drop_create_reply_count = dcr;
    pthread_mutex_lock(&sim_faults_mu);
    sim_faults_cur = f;
    pthread_mutex_unlock(&sim_faults_mu);
    return sim_reply_json(c, 200, sim_faults_json());
}

/* Make a sandbox vanish (removed, 404 everywhere), fail (state Failed) or expire now. */
static enum MHD_Result sim_sandbox_fault(struct MHD_Connection *c, const char *id, int action)
{
    bool vanish = action == 0;
    pthread_mutex_lock(&g_sim.mu);
    struct sim_sandbox *sb = sim_find_locked(id);
    if (!sb) {
        pthread_mutex_unlock(&g_sim.mu);
        return sim_reply_error(c, 404, "DOCKER::SANDBOX_NOT_FOUND", "sandbox not found");
    }
    if (action == 2) {
        sb->expires_ms = sim_now_ms();
        sim_effective_state(sb, sb->expires_ms);
        pthread_mutex_unlock(&g_sim.mu);
        return sim_reply_empty(c, 204);
    }
    sim_sandbox_kill_all_locked(sb);
    if (vanish) {
        sim_unlink_locked(sb);
        pthread_mutex_unlock(&g_sim.mu);
        sim_sandbox_free(sb);
        return sim_reply_empty(c, 204);
    }
    sb->state = SIM_FAILED;
    sb->transition_ms = sim_now_ms();
    snprintf(sb->reason, sizeof sb->reason, "CONTAINER_EXITED_ERROR");
    snprintf(sb->message, sizeof sb->message, "injected failure (opensandbox-sim)");
    pthread_mutex_unlock(&g_sim.mu);
    return sim_reply_empty(c, 204);
}

/* Control API: GET/POST/DELETE /_sim/faults, POST /_sim/sandboxes/<id>/{vanish,fail,expire},
 * GET /_sim/stats. */
enum MHD_Result sim_faults_handle(struct MHD_Connection *c, struct sim_req *r, const char *path)
{
    if (strcmp(path, "/faults") == 0) {
        if (strcmp(r->method, "GET") == 0)
            return sim_reply_json(c, 200, sim_faults_json());
        if (strcmp(r->method, "POST") == 0 || strcmp(r->method, "PUT") == 0)
            return sim_faults_set(c, r);
        if (strcmp(r->method, "DELETE") == 0) {
            sim_faults_init();
            return sim_reply_json(c, 200, sim_faults_json());
        }
        return sim_reply_error(c, 405, "METHOD_NOT_ALLOWED", "use GET, POST or DELETE");
    }
    if (strncmp(path, "/sandboxes/", 11) == 0 && strcmp(r->method, "POST") == 0) {
        char id[64];
        const char *s = path + 11, *e = strchr(s, '/');
        if (e && (size_t)(e - s) < sizeof id) {
            memcpy(id, s, (size_t)(e - s));
            id[e - s] = 0;
            if (strcmp(e, "/vanish") == 0)
                return sim_sandbox_fault(c, id, 0);
            if (strcmp(e, "/fail") == 0)
                return sim_sandbox_fault(c, id, 1);
            if (strcmp(e, "/expire") == 0)
                return sim_sandbox_fault(c, id, 2);
        }
    }
    if (strcmp(path, "/stats") == 0 && strcmp(r->method, "GET") == 0)
        return sim_stats_handle(c);
    if (strcmp(path, "/health") == 0)
        return sim_reply_empty(c, 200);
    return sim_reply_text(c, 404, "404 page not found");
}
