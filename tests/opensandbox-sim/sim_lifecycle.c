/* Lifecycle API (/v1/sandboxes...): validation, state machine, listing, endpoints. */
#include "sim.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const sim_state_names[] = {"Pending", "Running", "Paused",  "Terminated",
                                              "Failed",  "Pausing", "Resuming"};

/* The API name of a state ("Running", "Paused", ...). */
const char *sim_state_name(enum sim_state st)
{
    return sim_state_names[st];
}

/* The by_id bucket of an id (FNV-1a). */
static unsigned sim_id_bucket(const char *id)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h & (SIM_ID_BUCKETS - 1);
}

/* Find a sandbox by id; caller holds g_sim.mu. The real server asks Docker for the container
 * labelled with the id (docker_service.py _get_container_by_sandbox_id); the hash index only
 * keeps the lookup O(1) with thousands of sandboxes, the answers are the same. */
struct sim_sandbox *sim_find_locked(const char *id)
{
    for (struct sim_sandbox *sb = g_sim.by_id[sim_id_bucket(id)]; sb; sb = sb->hnext)
        if (strcmp(sb->id, id) == 0)
            return sb;
    return NULL;
}

/* Add a new sandbox to the list (newest first) and the id index; caller holds g_sim.mu. */
void sim_link_locked(struct sim_sandbox *sb)
{
    sb->prev = NULL;
    sb->next = g_sim.sandboxes;
    if (sb->next)
        sb->next->prev = sb;
    else
        g_sim.oldest = sb;
    g_sim.sandboxes = sb;
    unsigned b = sim_id_bucket(sb->id);
    sb->hnext = g_sim.by_id[b];
    g_sim.by_id[b] = sb;
    g_sim.nsandboxes++;
    g_sim.linked++;
}

/* Take a sandbox out of the list and the id index (O(1) + its bucket); caller holds g_sim.mu. */
void sim_unlink_locked(struct sim_sandbox *sb)
{
    if (sb->prev)
        sb->prev->next = sb->next;
    else
        g_sim.sandboxes = sb->next;
    if (sb->next)
        sb->next->prev = sb->prev;
    else
        g_sim.oldest = sb->prev;
    sb->next = sb->prev = NULL;
    g_sim.page_at = NULL;
    struct sim_sandbox **pp = &g_sim.by_id[sim_id_bucket(sb->id)];
    while (*pp && *pp != sb)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = sb->hnext;
    sb->hnext = NULL;
    g_sim.nsandboxes--;
}

/* SIGKILL every process group started in the sandbox; caller holds g_sim.mu. */
void sim_sandbox_kill_all_locked(struct sim_sandbox *sb)
{
    for (int i = 0; i < sb->ncmds; i++)
        sim_cmd_kill(sb->cmds[i], SIGKILL);
    for (int i = 0; i < sb->npgids; i++)
        kill(-sb->pgids[i], SIGKILL);
    for (struct sim_session *s = sb->sessions; s; s = s->next)
        if (s->running)
            sim_cmd_kill(s->running, SIGKILL);
}

/* Free a sandbox record (already unlinked). */
void sim_sandbox_free(struct sim_sandbox *sb)
{
    for (int i = 0; i < sb->ncmds; i++)
        sim_cmd_unref(sb->cmds[i]);
    struct sim_session *s = sb->sessions;
    while (s) {
        struct sim_session *n = s->next;
        if (s->running)
            sim_cmd_unref(s->running);
        free(s->cwd);
        free(s->exports);
        free(s);
        s = n;
    }
    json_object_put(sb->image);
    json_object_put(sb->entrypoint);
    json_object_put(sb->metadata);
    json_object_put(sb->env);
    json_object_put(sb->platform);
    free(sb->snapshot_id);
    free(sb->pgids);
    free(sb->dir);
    free(sb);
}

/* Current state, applying the Pending->Running delay and expiry; caller holds g_sim.mu. */
enum sim_state sim_effective_state(struct sim_sandbox *sb, int64_t now)
{
    if (sb->state == SIM_PENDING && now >= sb->ready_ms) {
        sb->state = SIM_RUNNING;
        sb->transition_ms = sb->ready_ms;
        snprintf(sb->reason, sizeof sb->reason, "CONTAINER_RUNNING");
        /* the docker runtime's texts (services/docker/docker_service.py, container states) */
        snprintf(sb->message, sizeof sb->message, "Sandbox container is running.");
    }
    if ((sb->state == SIM_PAUSING || sb->state == SIM_RESUMING) && now >= sb->transition_due_ms) {
        bool resume = sb->state == SIM_RESUMING;
        if (resume)
            sim_signal_all_locked(sb, SIGCONT);
        sb->state = resume ? SIM_RUNNING : SIM_PAUSED;
        sb->transition_ms = sb->transition_due_ms;
        snprintf(sb->reason, sizeof sb->reason, "%s",
                 resume ? "CONTAINER_RUNNING" : "CONTAINER_PAUSED");
        snprintf(sb->message, sizeof sb->message, "%s",
                 resume ? "Sandbox container is running." : "Sandbox container is paused.");
    }
    if (sb->expires_ms > 0 && now >= sb->expires_ms && sb->state != SIM_TERMINATED &&
        sb->state != SIM_FAILED) {
        sim_sandbox_kill_all_locked(sb);
        sb->state = SIM_TERMINATED;
        sb->transition_ms = sb->expires_ms;
        snprintf(sb->reason, sizeof sb->reason, "SANDBOX_EXPIRED");
        snprintf(sb->message, sizeof sb->message, "sandbox timeout lapsed");
    }
    return sb->state;
}

/* Apply expiry to every sandbox (janitor); caller holds g_sim.mu. */
void sim_expire_locked(int64_t now)
{
    for (struct sim_sandbox *sb = g_sim.sandboxes; sb; sb = sb->next)
        sim_effective_state(sb, now);
}

/* Kill and free every sandbox (shutdown). */
void sim_free_all(void)
{
    pthread_mutex_lock(&g_sim.mu);
    struct sim_sandbox *sb = g_sim.sandboxes;
    g_sim.sandboxes = g_sim.oldest = g_sim.page_at = NULL;
    memset(g_sim.by_id, 0, sizeof g_sim.by_id);
    g_sim.nsandboxes = 0;
    pthread_mutex_unlock(&g_sim.mu);
    while (sb) {
        struct sim_sandbox *n = sb->next;
        sim_sandbox_free(sb);
        sb = n;
    }
}

/* Kill every process of every sandbox (shutdown, before waiting for reader threads). */
void sim_kill_everything(void)
{
    pthread_mutex_lock(&g_sim.mu);
    for (struct sim_sandbox *sb = g_sim.sandboxes; sb; sb = sb->next)
        sim_sandbox_kill_all_locked(sb);
    pthread_mutex_unlock(&g_sim.mu);
}

/* Deep copy of a stored JSON value: json-c caches serialisations inside objects and its reference
 * count is not atomic, so objects shared with response bodies serialised outside g_sim.mu race. */
static json_object *sim_json_copy(json_object *src)
{
    json_object *dst = NULL;
    if (json_object_deep_copy(src, &dst, NULL) != 0)
        return NULL;
    return dst;
}

/* Serialise a sandbox as the API's Sandbox object; caller holds g_sim.mu. */
static json_object *sim_sandbox_json(struct sim_sandbox *sb, int64_t now)
{
    char ts[64];
    enum sim_state st = sim_effective_state(sb, now);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_string(sb->id));
    json_object *status = json_object_new_object();
    json_object_object_add(status, "state", json_object_new_string(sim_state_names[st]));
    if (sb->reason[0])
        json_object_object_add(status, "reason", json_object_new_string(sb->reason));
    if (sb->message[0])
        json_object_object_add(status, "message", json_object_new_string(sb->message));
    sim_iso_time(sb->transition_ms, ts, sizeof ts);
    json_object_object_add(status, "lastTransitionAt", json_object_new_string(ts));
    json_object_object_add(o, "status", status);
    if (sb->image)
        json_object_object_add(o, "image", sim_json_copy(sb->image));
    if (sb->snapshot_id)
        json_object_object_add(o, "snapshotId", json_object_new_string(sb->snapshot_id));
    if (sb->platform)
        json_object_object_add(o, "platform", sim_json_copy(sb->platform));
    if (sb->metadata && json_object_object_length(sb->metadata) > 0)
        json_object_object_add(o, "metadata", sim_json_copy(sb->metadata));
    json_object_object_add(o, "entrypoint", sim_json_copy(sb->entrypoint));
    if (sb->expires_ms > 0) {
        sim_iso_time(sb->expires_ms, ts, sizeof ts);
        json_object_object_add(o, "expiresAt", json_object_new_string(ts));
    }
    sim_iso_time(sb->created_ms, ts, sizeof ts);
    json_object_object_add(o, "createdAt", json_object_new_string(ts));
    return o;
}

/* True if s is a Kubernetes label name/value segment: [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?. */
static bool sim_label_ok(const char *s, size_t n, bool allow_empty)
{
    if (n == 0)
        return allow_empty;
    if (n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

/* Validate a metadata key (optional DNS-subdomain prefix + name; opensandbox.io/ reserved). */
static bool sim_label_key_ok(const char *k)
{
    const char *slash = strrchr(k, '/');
    if (strncmp(k, "opensandbox.io/", 15) == 0)
        return false;
    if (slash) {
        size_t pl = (size_t)(slash - k);
        if (pl == 0 || pl > 253)
            return false;
        for (size_t i = 0; i < pl; i++)
            if (!islower((unsigned char)k[i]) && !isdigit((unsigned char)k[i]) && k[i] != '-' &&
                k[i] != '.')
                return false;
        k = slash + 1;
    }
    return sim_label_ok(k, strlen(k), false);
}

/* Check that o is an object whose values are all strings; sets *bad to the offending key. */
static bool sim_string_map(json_object *o, const char **bad)
{
    *bad = NULL;
    if (!json_object_is_type(o, json_type_object))
        return false;
    json_object_object_foreach(o, k, v)
    {
        if (!json_object_is_type(v, json_type_string)) {
            *bad = k;
            return false;
        }
    }
    return true;
}

/* Validate an optional string->string map field; replies 422 and returns false when bad. */
static bool sim_check_map(struct MHD_Connection *c, json_object *body, const char *field,
                          json_object **out, enum MHD_Result *ret)
{
    json_object *v = NULL;
    *out = NULL;
    if (!json_object_object_get_ex(body, field, &v) || json_object_is_type(v, json_type_null))
        return true;
    const char *bad;
    if (!sim_string_map(v, &bad)) {
        *ret =
            bad ? sim_reply_422(c, "string_type", field, bad, "Input should be a valid string")
                : sim_reply_422(c, "dict_type", field, NULL, "Input should be a valid dictionary");
        return false;
    }
    *out = v;
    return true;
}

/* POST /sandboxes: validate like the real server, create the directory, reply 202. */
static enum MHD_Result sim_create(struct MHD_Connection *c, struct sim_req *r)
{
    enum json_tokener_error jerr;
    json_object *body = json_tokener_parse_verbose(r->body, &jerr);
    enum MHD_Result ret = MHD_NO;
    if (!body)
        return sim_reply_422(c, "json_invalid", "body", NULL, "JSON decode error");
    if (!json_object_is_type(body, json_type_object)) {
        json_object_put(body);
        return sim_reply_422(c, "model_attributes_type", "body", NULL,
                             "Input should be a valid dictionary or object");
    }
    json_object *image = NULL, *snap = NULL, *entry = NULL, *limits = NULL, *timeout = NULL;
    json_object *env, *meta, *ext, *platform = NULL, *v;
    json_object_object_get_ex(body, "image", &image);
    json_object_object_get_ex(body, "snapshotId", &snap);
    json_object_object_get_ex(body, "entrypoint", &entry);
    json_object_object_get_ex(body, "resourceLimits", &limits);
    json_object_object_get_ex(body, "timeout", &timeout);
    json_object_object_get_ex(body, "platform", &platform);
    if (image && json_object_is_type(image, json_type_null))
        image = NULL;
    if (snap && json_object_is_type(snap, json_type_null))
        snap = NULL;
    if (image) {
        json_object *uri;
        if (!json_object_is_type(image, json_type_object)) {
            ret = sim_reply_422(c, "model_attributes_type", "image", NULL,
                                "Input should be a valid dictionary or object");
            goto out;
        }
        if (!json_object_object_get_ex(image, "uri", &uri)) {
            ret = sim_reply_422(c, "missing", "image", "uri", "Field required");
            goto out;
        }
        if (!json_object_is_type(uri, json_type_string) || !*json_object_get_string(uri)) {
            ret = sim_reply_422(c, "string_type", "image", "uri",
                                "Input should be a valid non-empty string");
            goto out;
        }
        if (json_object_object_get_ex(image, "auth", &v) &&
            !json_object_is_type(v, json_type_null)) {
            json_object *u, *p;
            if (!json_object_is_type(v, json_type_object) ||
                !json_object_object_get_ex(v, "username", &u) ||
                !json_object_object_get_ex(v, "password", &p) ||
                !json_object_is_type(u, json_type_string) ||
                !json_object_is_type(p, json_type_string)) {
                ret = sim_reply_422(c, "model_attributes_type", "image", "auth",
                                    "auth needs string username and password");
                goto out;
            }
        }
    }
    if (snap && !json_object_is_type(snap, json_type_string)) {
        ret = sim_reply_422(c, "string_type", "snapshotId", NULL, "Input should be a valid string");
        goto out;
    }
    if (!image == !snap) {
        ret = sim_reply_422(c, "value_error", "body", NULL,
                            "Value error, exactly one of image or snapshotId must be provided");
        goto out;
    }
    if (entry && !json_object_is_type(entry, json_type_null)) {
        if (!json_object_is_type(entry, json_type_array)) {
            ret = sim_reply_422(c, "list_type", "entrypoint", NULL, "Input should be a valid list");
            goto out;
        }
        size_t n = json_object_array_length(entry);
        if (n == 0) {
            ret = sim_reply_422(c, "too_short", "entrypoint", NULL,
                                "List should have at least 1 item after validation, not 0");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            if (!json_object_is_type(json_object_array_get_idx(entry, i), json_type_string)) {
                ret = sim_reply_422(c, "string_type", "entrypoint", NULL,
                                    "Input should be a valid string");
                goto out;
            }
        }
    } else if (image) {
        ret = sim_reply_422(c, "value_error", "entrypoint", NULL,
                            "Value error, entrypoint is required when image is provided");
        goto out;
    } else {
        entry = NULL;
    }
    if (!limits || json_object_is_type(limits, json_type_null)) {
        ret = sim_reply_422(c, "missing", "resourceLimits", NULL, "Field required");
        goto out;
    }
    {
        const char *bad;
        if (!sim_string_map(limits, &bad)) {
            ret = bad ? sim_reply_422(c, "string_type", "resourceLimits", bad,
                                      "Input should be a valid string")
                      : sim_reply_422(c, "dict_type", "resourceLimits", NULL,
                                      "Input should be a valid dictionary");
            goto out;
        }
    }
    int64_t timeout_s = 0;
    if (timeout && !json_object_is_type(timeout, json_type_null)) {
        if (json_object_is_type(timeout, json_type_double)) {
            double d = json_object_get_double(timeout);
            if (d != (double)(int64_t)d) {
                ret = sim_reply_422(c, "int_from_float", "timeout", NULL,
                                    "Input should be a valid integer, got a number with a "
                                    "fractional part");
                goto out;
            }
            timeout_s = (int64_t)d;
        } else if (json_object_is_type(timeout, json_type_int)) {
            timeout_s = json_object_get_int64(timeout);
        } else {
            ret = sim_reply_422(c, "int_type", "timeout", NULL, "Input should be a valid integer");
            goto out;
        }
        if (timeout_s < 60) {
            ret = sim_reply_422(c, "greater_than_equal", "timeout", NULL,
                                "Input should be greater than or equal to 60");
            goto out;
        }
        if (g_sim.max_timeout_s > 0 && timeout_s > g_sim.max_timeout_s) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "Sandbox timeout %lld seconds exceeds the maximum of %lld seconds",
                     (long long)timeout_s, (long long)g_sim.max_timeout_s);
            ret = sim_reply_error(c, 400, "SANDBOX::INVALID_PARAMETER", msg);
            goto out;
        }
    }
    if (!sim_check_map(c, body, "env", &env, &ret) ||
        !sim_check_map(c, body, "metadata", &meta, &ret) ||
        !sim_check_map(c, body, "extensions", &ext, &ret))
        goto out;
    if (json_object_object_get_ex(body, "secureAccess", &v) &&
        !json_object_is_type(v, json_type_null) && !json_object_is_type(v, json_type_boolean)) {
        ret =
            sim_reply_422(c, "bool_type", "secureAccess", NULL, "Input should be a valid boolean");
        goto out;
    }
    if (platform && !json_object_is_type(platform, json_type_null)) {
        json_object *os = NULL, *arch = NULL;
        json_object_object_get_ex(platform, "os", &os);
        json_object_object_get_ex(platform, "arch", &arch);
        const char *oss = os ? json_object_get_string(os) : "";
        const char *as = arch ? json_object_get_string(arch) : "";
        if (!json_object_is_type(platform, json_type_object) || !os ||
            !json_object_is_type(os, json_type_string) || !arch ||
            !json_object_is_type(arch, json_type_string) ||
            (strcmp(oss, "linux") && strcmp(oss, "windows")) ||
            (strcmp(as, "amd64") && strcmp(as, "arm64"))) {
            ret = sim_reply_422(c, "enum", "platform", NULL,
                                "platform needs os linux|windows and arch amd64|arm64");
            goto out;
        }
    } else {
        platform = NULL;
    }
    if (meta) {
        json_object_object_foreach(meta, mk, mv)
        {
            const char *val = json_object_get_string(mv);
            if (!sim_label_key_ok(mk) || !sim_label_ok(val, strlen(val), true)) {
                char msg[256];
                snprintf(msg, sizeof msg, "invalid metadata label %.64s=%.64s", mk, val);
                ret = sim_reply_error(c, 400, "SANDBOX::INVALID_METADATA_LABEL", msg);
                goto out;
            }
        }
    }

    /* Restore from a snapshot: it must exist and be Ready (see sim_snapshot.c). */
    json_object *snap_entry = NULL;
    if (snap) {
        unsigned sst;
        const char *scode;
        char smsg[256];
        if (sim_snapshot_restore(json_object_get_string(snap), NULL, &snap_entry, &sst, &scode,
                                 smsg, sizeof smsg) != 0) {
            ret = sim_reply_error(c, sst, scode, smsg);
            goto out;
        }
        struct sim_faults f;
        sim_faults_get(&f);
        if (f.restore_fail) {
            json_object_put(snap_entry);
            ret = sim_reply_error(c, 500, "DOCKER::SANDBOX_START_FAILED",
                                  "Failed to start sandbox container: injected failure "
                                  "(opensandbox-sim)");
            goto out;
        }
    }

    if (image) {
        /* The docker runtime pulls an image it does not have; a failed pull answers 500
         * IMAGE_PULL_FAILED and creates nothing (server/opensandbox_server/services/docker/
         * container_ops.py, _pull_image). */
        struct sim_faults f;
        sim_faults_get(&f);
        json_object *u = NULL;
        if (f.image_pull_fail && json_object_object_get_ex(image, "uri", &u)) {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "Failed to pull image %s: 404 Client Error: Not Found (\"pull access denied "
                     "for %s, repository does not exist\") (opensandbox-sim)",
                     json_object_get_string(u), json_object_get_string(u));
            ret = sim_reply_error(c, 500, "DOCKER::SANDBOX_IMAGE_PULL_FAILED", msg);
            goto out;
        }
    }

    /* Valid: create it. */
    struct sim_sandbox *sb = calloc(1, sizeof *sb);
    if (!sb)
        abort();
    sim_uuid(sb->id);
    size_t dl = strlen(g_sim.root) + strlen(sb->id) + 2;
    sb->dir = sim_xmalloc(dl);
    snprintf(sb->dir, dl, "%s/%s", g_sim.root, sb->id);
    if (mkdir(sb->dir, 0755) != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot create sandbox directory: %s", strerror(errno));
        free(sb->dir);
        free(sb);
        json_object_put(snap_entry);
        ret = sim_reply_error(c, 500, "DOCKER::SANDBOX_CREATE_FAILED", msg);
        goto out;
    }
    if (snap) {
        unsigned sst;
        const char *scode;
        char smsg[640];
        json_object_put(snap_entry);
        if (sim_snapshot_restore(json_object_get_string(snap), sb->dir, &snap_entry, &sst, &scode,
                                 smsg, sizeof smsg) != 0) {
            sim_remove_all(sb->dir);
            free(sb->dir);
            free(sb);
            ret = sim_reply_error(c, sst, scode, smsg);
            goto out;
        }
        if (!entry && snap_entry)
            entry = snap_entry; /* the server restores the snapshot's entrypoint */
    }
    if (image) {
        sb->image = json_object_new_object();
        json_object_object_get_ex(image, "uri", &v);
        json_object_object_add(sb->image, "uri", json_object_get(v));
    }
    if (snap)
        sb->snapshot_id = sim_strdup(json_object_get_string(snap));
    if (entry) {
        sb->entrypoint = json_object_get(entry);
        json_object_put(snap_entry);
    } else {
        json_object_put(snap_entry);
        sb->entrypoint = json_object_new_array();
        const char *dflt[] = {"tail", "-f", "/dev/null"};
        for (int i = 0; i < 3; i++)
            json_object_array_add(sb->entrypoint, json_object_new_string(dflt[i]));
    }
    sb->metadata = meta ? json_object_get(meta) : NULL;
    sb->env = env ? json_object_get(env) : NULL;
    sb->platform = platform ? json_object_get(platform) : NULL;
    int64_t now = sim_now_ms();
    sb->created_ms = now;
    sb->transition_ms = now;
    sb->ready_ms = now + g_sim.ready_delay_ms;
    sb->expires_ms = timeout_s > 0 ? now + timeout_s * 1000 : 0;
    sb->state = SIM_PENDING;
    snprintf(sb->reason, sizeof sb->reason, "CONTAINER_STARTING");
    snprintf(sb->message, sizeof sb->message, "Sandbox container is starting.");
    pthread_mutex_lock(&g_sim.mu);
    if (g_sim.nsandboxes >= g_sim.max_sandboxes) {
        pthread_mutex_unlock(&g_sim.mu);
        sim_remove_all(sb->dir);
        sim_sandbox_free(sb);
        ret = sim_reply_error(c, 409, "SANDBOX::QUOTA_EXCEEDED",
                              "opensandbox-sim: too many sandboxes (see --max-sandboxes)");
        goto out;
    }
    sb->seq = ++g_sim.seq;
    sim_link_locked(sb);
    json_object *resp = sim_sandbox_json(sb, now);
    pthread_mutex_unlock(&g_sim.mu);
    /* CreateSandboxResponse has no image (server/opensandbox_server/api/schema.py) */
    json_object_object_del(resp, "image");
    if (sim_fault_take_drop_create()) {
        json_object_put(resp);
        ret = MHD_NO;
        goto out;
    }
    ret = sim_reply_json(c, 202, resp);
out:
    json_object_put(body);
    return ret;
}

/* Collected list query arguments. */
struct sim_list_args {
    char states[16][32];
    int nstates;
    const char *metadata, *page, *page_size;
};

/* MHD iterator collecting list query arguments (repeated state= allowed). */
static enum MHD_Result sim_list_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    struct sim_list_args *a = cls;
    if (!value)
        value = "";
    if (strcmp(key, "state") == 0 && a->nstates < 16)
        snprintf(a->states[a->nstates++], 32, "%s", value);
    else if (strcmp(key, "metadata") == 0)
        a->metadata = value;
    else if (strcmp(key, "page") == 0)
        a->page = value;
    else if (strcmp(key, "pageSize") == 0)
        a->page_size = value;
    return MHD_YES;
}

/* Parse a positive decimal integer query value; false if malformed. */
static bool sim_parse_uint(const char *s, long *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < 0)
        return false;
    *out = v;
    return true;
}

/* Value of a hex digit or -1. */
static int sim_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode s in place, '+' as a space (what parse_qsl does to each part). */
static void sim_qs_unquote(char *s)
{
    char *o = s;
    for (; *s; s++) {
        int hi, lo;
        if (*s == '+') {
            *o++ = ' ';
        } else if (*s == '%' && (hi = sim_hexval(s[1])) >= 0 && (lo = sim_hexval(s[2])) >= 0) {
            *o++ = (char)(hi * 16 + lo);
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
}

/* A metadata filter split once per list request (not once per sandbox). Like OpenSandbox's
 * list_sandboxes (server/src/api/lifecycle.py), the filter is split with parse_qsl: split on
 * '&', then on the first '=', then each part is percent-decoded, so an escaped '&' or '='
 * inside a value stays in the value. */
struct sim_meta_filter {
    char *copy; /* the decoded parts point into it */
    char **key, **val;
    int n;
};

/* Split filter (already checked: every part has a '=' after a non-empty key). */
static void sim_meta_filter_parse(struct sim_meta_filter *f, const char *filter)
{
    f->copy = sim_strdup(filter);
    size_t max = 1;
    for (const char *p = filter; *p; p++)
        max += *p == '&';
    f->key = sim_xmalloc(max * sizeof *f->key);
    f->val = sim_xmalloc(max * sizeof *f->val);
    f->n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(f->copy, "&", &save); tok; tok = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(tok, '=');
        *eq = 0;
        sim_qs_unquote(tok);
        sim_qs_unquote(eq + 1);
        f->key[f->n] = tok;
        f->val[f->n++] = eq + 1;
    }
}

static void sim_meta_filter_free(struct sim_meta_filter *f)
{
    free(f->copy);
    free(f->key);
    free(f->val);
}

/* True if the sandbox metadata contains every k=v pair of the filter. */
static bool sim_meta_match(struct sim_sandbox *sb, const struct sim_meta_filter *f)
{
    bool ok = true;
    for (int i = 0; i < f->n && ok; i++) {
        json_object *v;
        ok = sb->metadata && json_object_object_get_ex(sb->metadata, f->key[i], &v) &&
             strcmp(json_object_get_string(v), f->val[i]) == 0;
    }
    return ok;
}

/* GET /sandboxes: state/metadata filters and paging, newest first as both of the server's
 * runtimes sort (created_at descending: services/docker/docker_service.py list_sandboxes,
 * services/k8s/list_helpers.py _build_list_sandboxes_response). */
static enum MHD_Result sim_list(struct MHD_Connection *c)
{
    struct sim_list_args a;
    memset(&a, 0, sizeof a);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sim_list_iter, &a);
    long page = 1, page_size = 20;
    if (a.page && (!sim_parse_uint(a.page, &page) || page < 1))
        return sim_reply_422(c, "greater_than_equal", "query", "page",
                             "Input should be an integer greater than or equal to 1");
    if (a.page_size &&
        (!sim_parse_uint(a.page_size, &page_size) || page_size < 1 || page_size > 200))
        return sim_reply_422(c, "less_than_equal", "query", "pageSize",
                             "Input should be an integer between 1 and 200");
    if (a.metadata && *a.metadata) {
        char *copy = sim_strdup(a.metadata);
        char *save = NULL;
        bool ok = true;
        for (char *tok = strtok_r(copy, "&", &save); tok; tok = strtok_r(NULL, "&", &save))
            if (!strchr(tok, '=') || tok[0] == '=')
                ok = false;
        free(copy);
        if (!ok)
            return sim_reply_error(c, 400, "INVALID_METADATA_FORMAT",
                                   "metadata filter must look like k1=v1&k2=v2");
    }
    if (page >= 2) {
        /* list_later_pages_latency_ms: a later page waits before it is read, so a test can
         * change the list between the pages of one client's walk (the offset pages move). */
        struct sim_faults f;
        sim_faults_get(&f);
        if (f.list_later_pages_latency_ms > 0) {
            g_sim.list_pages_waiting++;
            sim_sleep_ms(f.list_later_pages_latency_ms);
            g_sim.list_pages_waiting--;
        }
    }
    struct sim_meta_filter mf = {0};
    if (a.metadata && *a.metadata)
        sim_meta_filter_parse(&mf, a.metadata);
    int64_t now = sim_now_ms();
    pthread_mutex_lock(&g_sim.mu);
    int n = 0;
    json_object *items = json_object_new_array();
    long start = (page - 1) * page_size;
    if (a.nstates == 0 && !(a.metadata && *a.metadata)) {
        /* No filter: every sandbox matches, so only the page is visited, not every sandbox per
         * page (a full listing would cost O(n^2)). The states of the others are not needed:
         * Pending -> Running and expiry are computed from their own times whenever a sandbox is
         * shown, and the janitor applies expiry. */
        n = g_sim.nsandboxes;
        struct sim_sandbox *sb = g_sim.sandboxes;
        long i = 0;
        if (g_sim.page_at) {
            /* each sandbox linked since moved the cursor's sandbox one place back */
            long at = g_sim.page_at_i + (long)(g_sim.linked - g_sim.page_at_linked);
            if (at <= start) {
                sb = g_sim.page_at;
                i = at;
            }
        }
        for (; sb && i < start; i++)
            sb = sb->next;
        for (long k = 0; sb && k < page_size; k++, i++, sb = sb->next)
            json_object_array_add(items, sim_sandbox_json(sb, now));
        g_sim.page_at = sb;
        g_sim.page_at_i = i;
        g_sim.page_at_linked = g_sim.linked;
        pthread_mutex_unlock(&g_sim.mu);
        goto reply;
    }
    struct sim_sandbox **match = sim_xmalloc(sizeof(*match) * (size_t)(g_sim.nsandboxes + 1));
    for (struct sim_sandbox *sb = g_sim.sandboxes; sb; sb = sb->next) {
        enum sim_state st = sim_effective_state(sb, now);
        bool ok = a.nstates == 0;
        for (int i = 0; i < a.nstates; i++)
            ok = ok || strcasecmp(a.states[i], sim_state_names[st]) == 0;
        if (ok && a.metadata && *a.metadata)
            ok = sim_meta_match(sb, &mf);
        if (ok)
            match[n++] = sb;
    }
    for (long i = start; i < n && i < start + page_size; i++)
        json_object_array_add(items, sim_sandbox_json(match[i], now));
    pthread_mutex_unlock(&g_sim.mu);
    free(match);
reply:
    sim_meta_filter_free(&mf);
    json_object *pg = json_object_new_object();
    long pages = (n + page_size - 1) / page_size;
    json_object_object_add(pg, "page", json_object_new_int64(page));
    json_object_object_add(pg, "pageSize", json_object_new_int64(page_size));
    json_object_object_add(pg, "totalItems", json_object_new_int64(n));
    json_object_object_add(pg, "totalPages", json_object_new_int64(pages));
    json_object_object_add(pg, "hasNextPage", json_object_new_boolean(page < pages));
    json_object *o = json_object_new_object();
    json_object_object_add(o, "items", items);
    json_object_object_add(o, "pagination", pg);
    return sim_reply_json(c, 200, o);
}

/* Parse use_server_proxy like pydantic's bool; -1 if invalid. */
static int sim_parse_bool(const char *s)
{
    if (!s)
        return 0;
    const char *t[] = {"true", "1", "yes", "on", "t", "y"};
    const char *f[] = {"false", "0", "no", "off", "f", "n"};
    for (int i = 0; i < 6; i++) {
        if (strcasecmp(s, t[i]) == 0)
            return 1;
        if (strcasecmp(s, f[i]) == 0)
            return 0;
    }
    return -1;
}

/* GET /sandboxes/<id>/endpoints/<port>. */
static enum MHD_Result sim_endpoint(struct MHD_Connection *c, struct sim_sandbox *sb,
                                    const char *port_s)
{
    long port;
    if (!sim_parse_uint(port_s, &port) || port < 1 || port > 65535)
        return sim_reply_422(c, "int_parsing", "path", "port",
                             "Input should be a valid integer between 1 and 65535");
    int proxy =
        sim_parse_bool(MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "use_server_proxy"));
    if (proxy < 0)
        return sim_reply_422(c, "bool_parsing", "query", "use_server_proxy",
                             "Input should be a valid boolean");
    const char *expires = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "expires");
    if (expires && proxy)
        return sim_reply_error(c, 400, "SANDBOX::INVALID_PARAMETER",
                               "expires cannot be combined with use_server_proxy=true");
    if (expires)
        return sim_reply_error(c, 400, "DOCKER::SIGNED_ENDPOINT_UNSUPPORTED",
                               "signed endpoints are not supported by opensandbox-sim");
    char host[300], ep[512];
    sim_host_for(c, host, sizeof host);
    if (proxy)
        snprintf(ep, sizeof ep, "%s/sandboxes/%s/proxy/%ld", host, sb->id, port);
    else if (port == SIM_EXECD_PORT || port == SIM_EGRESS_PORT)
        /* Docker bridge mode answers `<host>:<execd's mapped port>/proxy/<port>` (execd's own
         * reverse proxy; services/docker/networking.py _resolve_host_mapped_endpoint); here
         * `<H>/sandboxes/<id>/execd` stands for that per-sandbox execd address. */
        snprintf(ep, sizeof ep, "%s/sandboxes/%s/execd/proxy/%ld", host, sb->id, port);
    else
        snprintf(ep, sizeof ep, "127.0.0.1:%ld", port);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "endpoint", json_object_new_string(ep));
    if (port == SIM_EXECD_PORT && g_sim.execd_header_name) {
        json_object *h = json_object_new_object();
        json_object_object_add(h, g_sim.execd_header_name,
                               json_object_new_string(g_sim.execd_header_value));
        json_object_object_add(o, "headers", h);
    }
    /* OpenSandbox returns the egress sidecar's token with its endpoint (the Go SDK's e2e test
     * reads Headers["OPENSANDBOX-EGRESS-AUTH"] from GetEndpoint(18080)). */
    if (port == SIM_EGRESS_PORT && g_sim.egress_token) {
        json_object *h = json_object_new_object();
        json_object_object_add(h, "OPENSANDBOX-EGRESS-AUTH",
                               json_object_new_string(g_sim.egress_token));
        json_object_object_add(o, "headers", h);
    }
    return sim_reply_json(c, 200, o);
}

/* POST /sandboxes/<id>/renew-expiration, as DockerSandboxService.renew_expiration in
 * alibaba/OpenSandbox server/opensandbox_server/services/docker/docker_service.py:
 * 404 for an unknown sandbox; validators.ensure_future_expiration: 400
 * DOCKER::INVALID_EXPIRATION "New expiration time must be in the future." (a time without
 * offset counts as UTC; an earlier time than the current expiry is accepted); a sandbox created
 * without timeout (manual cleanup) is 409 DOCKER::INVALID_EXPIRATION. Paused sandboxes can be
 * renewed. The real Docker provider removes expired sandboxes (then 404); the simulator keeps
 * them as Terminated and answers 409 DOCKER::SANDBOX_NOT_RUNNING for them. */
static enum MHD_Result sim_renew(struct MHD_Connection *c, struct sim_req *r, const char *id)
{
    json_object *body = json_tokener_parse(r->body), *v;
    int64_t when;
    if (!body || !json_object_is_type(body, json_type_object) ||
        !json_object_object_get_ex(body, "expiresAt", &v) ||
        !json_object_is_type(v, json_type_string) ||
        sim_parse_iso_time(json_object_get_string(v), &when) != 0) {
        json_object_put(body);
        return sim_reply_422(c, "datetime_parsing", "body", "expiresAt",
                             "Input should be a valid RFC 3339 datetime");
    }
    json_object_put(body);
    int64_t now = sim_now_ms();
    char msg[160];
    pthread_mutex_lock(&g_sim.mu);
    struct sim_sandbox *sb = sim_find_locked(id);
    enum sim_state st = sb ? sim_effective_state(sb, now) : SIM_TERMINATED;
    enum MHD_Result ret;
    if (!sb) {
        snprintf(msg, sizeof msg, "Sandbox %s not found", id);
        ret = sim_reply_error(c, 404, "DOCKER::SANDBOX_NOT_FOUND", msg);
    } else if (when <= now) {
        ret = sim_reply_error(c, 400, "DOCKER::INVALID_EXPIRATION",
                              "New expiration time must be in the future.");
    } else if (sb->expires_ms == 0) {
        snprintf(msg, sizeof msg, "Sandbox %s does not have automatic expiration enabled.", id);
        ret = sim_reply_error(c, 409, "DOCKER::INVALID_EXPIRATION", msg);
    } else if (st == SIM_TERMINATED || st == SIM_FAILED) {
        ret = sim_reply_error(c, 409, "DOCKER::SANDBOX_NOT_RUNNING",
                              "Sandbox is not in a running state.");
    } else {
        sb->expires_ms = when;
        char ts[64];
        sim_iso_time(when, ts, sizeof ts);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "expiresAt", json_object_new_string(ts));
        ret = sim_reply_json(c, 200, o);
    }
    pthread_mutex_unlock(&g_sim.mu);
    return ret;
}

/* PATCH /sandboxes/<id>/metadata (JSON merge patch); caller holds g_sim.mu. */
static enum MHD_Result sim_patch_metadata(struct MHD_Connection *c, struct sim_req *r,
                                          struct sim_sandbox *sb)
{
    json_object *body = json_tokener_parse(r->body);
    if (!body || !json_object_is_type(body, json_type_object)) {
        json_object_put(body);
        return sim_reply_422(c, "dict_type", "body", NULL, "Input should be a valid dictionary");
    }
    json_object_object_foreach(body, k, v)
    {
        bool is_null = json_object_is_type(v, json_type_null);
        if (!is_null && !json_object_is_type(v, json_type_string)) {
            json_object_put(body);
            return sim_reply_422(c, "string_type", "body", k, "Input should be a valid string");
        }
        const char *val = is_null ? "" : json_object_get_string(v);
        if (!sim_label_key_ok(k) || !sim_label_ok(val, strlen(val), true)) {
            json_object_put(body);
            return sim_reply_error(c, 400, "SANDBOX::INVALID_METADATA_LABEL",
                                   "invalid metadata label");
        }
    }
    if (!sb->metadata)
        sb->metadata = json_object_new_object();
    json_object_object_foreach(body, k2, v2)
    {
        if (json_object_is_type(v2, json_type_null))
            json_object_object_del(sb->metadata, k2);
        else
            json_object_object_add(sb->metadata, k2, json_object_get(v2));
    }
    json_object_put(body);
    return sim_reply_json(c, 200, sim_sandbox_json(sb, sim_now_ms()));
}

/* Check the API key header; returns true (and replies 401) when the request must stop. */
static bool sim_auth_fails(struct MHD_Connection *c, enum MHD_Result *ret)
{
    if (!g_sim.api_key)
        return false;
    const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "OPEN-SANDBOX-API-KEY");
    if (!k || !*k) {
        *ret = sim_reply_error(c, 401, "MISSING_API_KEY",
                               "Authentication credentials were not provided");
        return true;
    }
    if (strcmp(k, g_sim.api_key) != 0) {
        *ret = sim_reply_error(c, 401, "INVALID_API_KEY", "Invalid API key");
        return true;
    }
    return false;
}

/* Route /sandboxes... (path already stripped of /v1). */
enum MHD_Result sim_lifecycle_handle(struct MHD_Connection *c, struct sim_req *r, const char *path)
{
    enum MHD_Result ret;
    if (sim_auth_fails(c, &ret))
        return ret;
    const char *m = r->method;
    if (strcmp(path, "/snapshots") == 0 || strncmp(path, "/snapshots/", 11) == 0)
        return sim_snapshots_handle(c, r, path);
    if (strcmp(path, "/sandboxes") == 0) {
        if (strcmp(m, "POST") == 0)
            return sim_create(c, r);
        if (strcmp(m, "GET") == 0)
            return sim_list(c);
        return sim_reply_json(c, 405, json_tokener_parse("{\"detail\":\"Method Not Allowed\"}"));
    }
    if (strncmp(path, "/sandboxes/", 11) != 0)
        return sim_reply_json(c, 404, json_tokener_parse("{\"detail\":\"Not Found\"}"));
    char id[64];
    const char *s = path + 11, *e = strchr(s, '/');
    size_t il = e ? (size_t)(e - s) : strlen(s);
    if (il == 0 || il >= sizeof id)
        return sim_reply_json(c, 404, json_tokener_parse("{\"detail\":\"Not Found\"}"));
    memcpy(id, s, il);
    id[il] = 0;
    const char *sub = e ? e : "";
    if (strcmp(sub, "/renew-expiration") == 0 && strcmp(m, "POST") == 0)
        return sim_renew(c, r, id);
    if (strcmp(sub, "/snapshots") == 0 && strcmp(m, "POST") == 0)
        return sim_snapshot_create(c, r, id);
    int64_t now = sim_now_ms();
    pthread_mutex_lock(&g_sim.mu);
    struct sim_sandbox *sb = sim_find_locked(id);
    if (!sb) {
        pthread_mutex_unlock(&g_sim.mu);
        char msg[128];
        snprintf(msg, sizeof msg, "Sandbox %s not found", id);
        return sim_reply_error(c, 404, "DOCKER::SANDBOX_NOT_FOUND", msg);
    }
    if (*sub == 0 && strcmp(m, "GET") == 0) {
        json_object *o = sim_sandbox_json(sb, now);
        pthread_mutex_unlock(&g_sim.mu);
        return sim_reply_json(c, 200, o);
    }
    if (*sub == 0 && strcmp(m, "DELETE") == 0) {
        sim_unlink_locked(sb);
        sim_sandbox_kill_all_locked(sb);
        pthread_mutex_unlock(&g_sim.mu);
        sim_sandbox_free(sb);
        return sim_reply_empty(c, 204);
    }
    if (strcmp(sub, "/metadata") == 0 && strcmp(m, "PATCH") == 0) {
        ret = sim_patch_metadata(c, r, sb);
        pthread_mutex_unlock(&g_sim.mu);
        return ret;
    }
    if (strncmp(sub, "/endpoints/", 11) == 0 && strcmp(m, "GET") == 0) {
        ret = sim_endpoint(c, sb, sub + 11);
        pthread_mutex_unlock(&g_sim.mu);
        return ret;
    }
    if ((strcmp(sub, "/pause") == 0 || strcmp(sub, "/resume") == 0) && strcmp(m, "POST") == 0) {
        ret = sim_pause_handle(c, sb, strcmp(sub, "/pause") == 0, now);
        pthread_mutex_unlock(&g_sim.mu);
        return ret;
    }
    pthread_mutex_unlock(&g_sim.mu);
    return sim_reply_json(c, 404, json_tokener_parse("{\"detail\":\"Not Found\"}"));
}
