/* Snapshots: POST /sandboxes/<id>/snapshots, GET /snapshots, GET/DELETE /snapshots/<id>, and
 * the file copy behind create-from-snapshotId. A snapshot is a copy of the sandbox directory
 * under <root>/.snapshots/<snapshot id>, made by a helper thread (Creating -> Ready | Failed).
 *
 * Matched against alibaba/OpenSandbox server/opensandbox_server:
 *   - api/lifecycle.py: create answers 202 with the Snapshot and `Location: /v1/snapshots/<id>`;
 *     list takes sandboxId, repeated state, page >= 1, 1 <= pageSize <= 200; delete answers 204.
 *   - services/snapshot_service.py (PersistedSnapshotService): create looks the sandbox up
 *     (404), then requires state Running (409 SNAPSHOT::INVALID_SOURCE_STATE "Snapshot can only
 *     be created from a Running sandbox."), then runtime support (501 SNAPSHOT::NOT_IMPLEMENTED);
 *     the record starts Creating / snapshot_accepted / "Snapshot creation accepted."; get/delete
 *     of an unknown id is 404 SNAPSHOT::NOT_FOUND "Snapshot <id> not found"; delete while
 *     Creating is 409 SNAPSHOT::INVALID_STATE "Snapshot <id> is still being created and cannot
 *     be deleted".
 *   - services/docker/snapshot_runtime.py: `docker commit` of the container; Ready with
 *     snapshot_runtime_ready / "Docker snapshot image created successfully.", Failed with
 *     snapshot_runtime_failed / the error text; deleting the image while a container still
 *     uses it is 409 SNAPSHOT::DELETE_CONFLICT "snapshot image cannot be deleted due to a
 *     conflict" (a sandbox restored from the snapshot and not deleted yet).
 *   - restore (create with snapshotId): unknown 404 SNAPSHOT::NOT_FOUND, not Ready 409
 *     SNAPSHOT::NOT_READY "Snapshot <id> is not ready for restore."; the entrypoint defaults
 *     to the snapshot's. */
#include "sim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_COPY_MAX_DEPTH 64

static const char *const sim_snap_state_names[] = {"Creating", "Ready", "Failed"};

/* Copy one regular file (contents and mode); 0 on success. */
static int sim_copy_file(const char *src, const char *dst, mode_t mode)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) {
        int e = errno;
        close(in);
        errno = e;
        return -1;
    }
    char buf[65536];
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -1 : 0;
            break;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t k = write(out, buf + off, (size_t)(n - off));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                rc = -1;
                break;
            }
            off += k;
        }
        if (rc)
            break;
    }
    int e = errno;
    close(in);
    if (close(out) != 0 && rc == 0)
        rc = -1, e = errno;
    if (rc == 0 && chmod(dst, mode & 07777) != 0)
        rc = -1, e = errno;
    errno = e;
    return rc;
}

/* Recursive copy of src into dst (created): directories, regular files, symlinks; sockets and
 * fifos are skipped. */
static int sim_copy_rec(const char *src, const char *dst, int depth, char *err, size_t errn)
{
    struct stat st;
    if (lstat(src, &st) != 0) {
        snprintf(err, errn, "lstat %s: %s", src, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlink(src, target, sizeof target - 1);
        if (n < 0 || (target[n] = 0, symlink(target, dst) != 0)) {
            snprintf(err, errn, "symlink %s: %s", dst, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (S_ISREG(st.st_mode)) {
        if (sim_copy_file(src, dst, st.st_mode) != 0) {
            snprintf(err, errn, "copy %s: %s", src, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return 0;
    if (depth > SIM_COPY_MAX_DEPTH) {
        snprintf(err, errn, "copy %s: directory tree too deep", src);
        return -1;
    }
    if (mkdir(dst, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errn, "mkdir %s: %s", dst, strerror(errno));
        return -1;
    }
    DIR *d = opendir(src);
    if (!d) {
        snprintf(err, errn, "opendir %s: %s", src, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *s2 = NULL, *d2 = NULL;
        if (asprintf(&s2, "%s/%s", src, de->d_name) < 0 ||
            asprintf(&d2, "%s/%s", dst, de->d_name) < 0)
            abort();
        rc = sim_copy_rec(s2, d2, depth + 1, err, errn);
        free(s2);
        free(d2);
    }
    closedir(d);
    if (rc == 0 && chmod(dst, st.st_mode & 07777) != 0) {
        snprintf(err, errn, "chmod %s: %s", dst, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* Copy the directory tree src into dst (dst is created or merged into); 0 on success, else -1
 * with a message in err. */
int sim_copy_tree(const char *src, const char *dst, char *err, size_t errn)
{
    return sim_copy_rec(src, dst, 0, err, errn);
}

/* Find a snapshot by id; caller holds g_sim.mu. */
static struct sim_snapshot *sim_snap_find_locked(const char *id, struct sim_snapshot ***link)
{
    struct sim_snapshot **pp = &g_sim.snapshots;
    while (*pp && strcmp((*pp)->id, id) != 0)
        pp = &(*pp)->next;
    if (link)
        *link = pp;
    return *pp;
}

/* Free a snapshot record (already unlinked); its directory is left alone. */
static void sim_snap_free(struct sim_snapshot *s)
{
    free(s->name);
    free(s->dir);
    json_object_put(s->entrypoint);
    free(s);
}

/* Free every snapshot record (shutdown; directories stay under --root). */
void sim_snapshots_free_all(void)
{
    pthread_mutex_lock(&g_sim.mu);
    struct sim_snapshot *s = g_sim.snapshots;
    g_sim.snapshots = NULL;
    pthread_mutex_unlock(&g_sim.mu);
    while (s) {
        struct sim_snapshot *n = s->next;
        sim_snap_free(s);
        s = n;
    }
}

/* The API's Snapshot object; caller holds g_sim.mu. */
static json_object *sim_snap_json(const struct sim_snapshot *s)
{
    char ts[64];
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_string(s->id));
    json_object_object_add(o, "sandboxId", json_object_new_string(s->sandbox_id));
    if (s->name)
        json_object_object_add(o, "name", json_object_new_string(s->name));
    json_object *st = json_object_new_object();
    json_object_object_add(st, "state", json_object_new_string(sim_snap_state_names[s->state]));
    json_object_object_add(st, "reason", json_object_new_string(s->reason));
    json_object_object_add(st, "message", json_object_new_string(s->message));
    sim_iso_time(s->transition_ms, ts, sizeof ts);
    json_object_object_add(st, "lastTransitionAt", json_object_new_string(ts));
    json_object_object_add(o, "status", st);
    sim_iso_time(s->created_ms, ts, sizeof ts);
    json_object_object_add(o, "createdAt", json_object_new_string(ts));
    return o;
}

/* Work item of one snapshot capture. */
struct sim_snap_job {
    char id[37];
    char *src, *dst;
    bool fail;
    int64_t ready_at_ms;
};

/* Capture thread: copy the files, honour the slow-snapshot delay, then Ready or Failed. */
static void *sim_snap_worker(void *arg)
{
    struct sim_snap_job *job = arg;
    char err[sizeof(((struct sim_snapshot *)0)->message)] = "";
    int rc = -1;
    if (job->fail)
        snprintf(err, sizeof err, "injected failure (opensandbox-sim)");
    else
        rc = sim_copy_tree(job->src, job->dst, err, sizeof err);
    while (!g_sim.shutting_down && sim_now_ms() < job->ready_at_ms)
        sim_sleep_ms(50);
    if (g_sim.shutting_down && rc == 0 && sim_now_ms() < job->ready_at_ms) {
        rc = -1;
        snprintf(err, sizeof err, "simulator shutting down");
    }
    if (rc != 0)
        sim_remove_all(job->dst);
    pthread_mutex_lock(&g_sim.mu);
    struct sim_snapshot *s = sim_snap_find_locked(job->id, NULL);
    if (s) {
        s->state = rc == 0 ? SIM_SNAP_READY : SIM_SNAP_FAILED;
        s->transition_ms = sim_now_ms();
        snprintf(s->reason, sizeof s->reason, "%s",
                 rc == 0 ? "snapshot_runtime_ready" : "snapshot_runtime_failed");
        snprintf(s->message, sizeof s->message, "%s",
                 rc == 0 ? "Docker snapshot image created successfully." : err);
    }
    pthread_mutex_unlock(&g_sim.mu);
    free(job->src);
    free(job->dst);
    free(job);
    sim_thread_finished();
    return NULL;
}

/* Validate the optional CreateSnapshotRequest body ({"name": non-empty string}, nothing else);
 * replies 422 and returns false when bad. *name is set (borrowed from *out) when given. */
static bool sim_snap_body_ok(struct MHD_Connection *c, struct sim_req *r, json_object **out,
                             const char **name, enum MHD_Result *ret)
{
    *out = NULL;
    *name = NULL;
    if (r->len == 0)
        return true;
    json_object *body = json_tokener_parse(r->body);
    if (!body || json_object_is_type(body, json_type_null)) {
        json_object_put(body);
        if (!body && r->len > 0) {
            *ret = sim_reply_422(c, "json_invalid", "body", NULL, "JSON decode error");
            return false;
        }
        return true;
    }
    if (!json_object_is_type(body, json_type_object)) {
        json_object_put(body);
        *ret = sim_reply_422(c, "model_attributes_type", "body", NULL,
                             "Input should be a valid dictionary or object");
        return false;
    }
    json_object_object_foreach(body, k, v)
    {
        if (strcmp(k, "name") != 0) {
            *ret = sim_reply_422(c, "extra_forbidden", "body", k, "Extra inputs are not permitted");
            json_object_put(body);
            return false;
        }
        if (json_object_is_type(v, json_type_null))
            continue;
        if (!json_object_is_type(v, json_type_string)) {
            *ret =
                sim_reply_422(c, "string_type", "body", "name", "Input should be a valid string");
            json_object_put(body);
            return false;
        }
        if (!*json_object_get_string(v)) {
            *ret = sim_reply_422(c, "string_too_short", "body", "name",
                                 "String should have at least 1 character");
            json_object_put(body);
            return false;
        }
        *name = json_object_get_string(v);
    }
    *out = body;
    return true;
}

/* POST /sandboxes/<id>/snapshots. */
enum MHD_Result sim_snapshot_create(struct MHD_Connection *c, struct sim_req *r,
                                    const char *sandbox_id)
{
    enum MHD_Result ret;
    json_object *body;
    const char *name;
    if (!sim_snap_body_ok(c, r, &body, &name, &ret))
        return ret;
    struct sim_faults f;
    sim_faults_get(&f);
    int64_t now = sim_now_ms();
    char msg[256];
    pthread_mutex_lock(&g_sim.mu);
    struct sim_sandbox *sb = sim_find_locked(sandbox_id);
    if (!sb) {
        pthread_mutex_unlock(&g_sim.mu);
        json_object_put(body);
        snprintf(msg, sizeof msg, "Sandbox %s not found", sandbox_id);
        return sim_reply_error(c, 404, "DOCKER::SANDBOX_NOT_FOUND", msg);
    }
    if (sim_effective_state(sb, now) != SIM_RUNNING) {
        pthread_mutex_unlock(&g_sim.mu);
        json_object_put(body);
        return sim_reply_error(c, 409, "SNAPSHOT::INVALID_SOURCE_STATE",
                               "Snapshot can only be created from a Running sandbox.");
    }
    if (f.snapshot_unsupported || g_sim.no_snapshots) {
        pthread_mutex_unlock(&g_sim.mu);
        json_object_put(body);
        return sim_reply_error(c, 501, "SNAPSHOT::NOT_IMPLEMENTED",
                               "Snapshot creation is not supported by the configured runtime.");
    }
    struct sim_snapshot *s = calloc(1, sizeof *s);
    struct sim_snap_job *job = calloc(1, sizeof *job);
    if (!s || !job)
        abort();
    sim_uuid(s->id);
    snprintf(s->sandbox_id, sizeof s->sandbox_id, "%s", sb->id);
    s->name = sim_strdup(name);
    if (asprintf(&s->dir, "%s/.snapshots/%s", g_sim.root, s->id) < 0)
        abort();
    s->entrypoint = sb->entrypoint ? json_object_get(sb->entrypoint) : NULL;
    s->state = SIM_SNAP_CREATING;
    snprintf(s->reason, sizeof s->reason, "snapshot_accepted");
    snprintf(s->message, sizeof s->message, "Snapshot creation accepted.");
    s->created_ms = s->transition_ms = now;
    memcpy(job->id, s->id, sizeof job->id);
    job->src = sim_strdup(sb->dir);
    job->dst = sim_strdup(s->dir);
    job->fail = f.snapshot_fail;
    job->ready_at_ms = now + f.snapshot_delay_ms;
    s->next = g_sim.snapshots;
    g_sim.snapshots = s;
    json_object *resp = sim_snap_json(s);
    char loc[128];
    snprintf(loc, sizeof loc, "/v1/snapshots/%s", s->id);
    pthread_mutex_unlock(&g_sim.mu);
    json_object_put(body);

    char parent[4200];
    snprintf(parent, sizeof parent, "%s/.snapshots", g_sim.root);
    sim_mkdir_p(parent, 0755);
    sim_thread_started();
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, sim_snap_worker, job) != 0) {
        sim_thread_finished();
        job->fail = true;
        job->ready_at_ms = 0;
        sim_thread_started();
        sim_snap_worker(job); /* marks it Failed synchronously */
    }
    pthread_attr_destroy(&attr);

    const char *text = json_object_to_json_string_ext(resp, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    struct MHD_Response *mr =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    json_object_put(resp);
    if (!mr)
        return MHD_NO;
    MHD_add_response_header(mr, "Content-Type", "application/json");
    MHD_add_response_header(mr, "Location", loc);
    return sim_queue(c, 202, mr);
}

/* Collected GET /snapshots query arguments. */
struct sim_snap_list_args {
    char states[16][32];
    int nstates;
    const char *sandbox_id, *page, *page_size;
};

/* MHD iterator collecting the list arguments (repeated state= allowed). */
static enum MHD_Result sim_snap_list_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                          const char *value)
{
    (void)kind;
    struct sim_snap_list_args *a = cls;
    if (!value)
        value = "";
    if (strcmp(key, "state") == 0 && a->nstates < 16)
        snprintf(a->states[a->nstates++], 32, "%s", value);
    else if (strcmp(key, "sandboxId") == 0)
        a->sandbox_id = value;
    else if (strcmp(key, "page") == 0)
        a->page = value;
    else if (strcmp(key, "pageSize") == 0)
        a->page_size = value;
    return MHD_YES;
}

/* Parse a decimal integer query value in [lo, hi]; false if malformed or out of range. */
static bool sim_snap_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* GET /snapshots: sandboxId and state filters, paging; newest first (the server's SQLite
 * repository: ORDER BY created_at DESC, id DESC, repositories/snapshots/sqlite.py). */
static enum MHD_Result sim_snap_list(struct MHD_Connection *c)
{
    struct sim_snap_list_args a;
    memset(&a, 0, sizeof a);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sim_snap_list_iter, &a);
    long page = 1, page_size = 20;
    if (a.page && !sim_snap_int(a.page, 1, 1000000000L, &page))
        return sim_reply_422(c, "greater_than_equal", "query", "page",
                             "Input should be an integer greater than or equal to 1");
    if (a.page_size && !sim_snap_int(a.page_size, 1, 200, &page_size))
        return sim_reply_422(c, "less_than_equal", "query", "pageSize",
                             "Input should be an integer between 1 and 200");
    pthread_mutex_lock(&g_sim.mu);
    int total = 0;
    for (struct sim_snapshot *s = g_sim.snapshots; s; s = s->next)
        total++;
    struct sim_snapshot **match = sim_xmalloc(sizeof(*match) * (size_t)(total + 1));
    int n = 0;
    for (struct sim_snapshot *s = g_sim.snapshots; s; s = s->next) {
        bool ok = !a.sandbox_id || strcmp(a.sandbox_id, s->sandbox_id) == 0;
        bool st_ok = a.nstates == 0;
        for (int i = 0; i < a.nstates; i++)
            st_ok = st_ok || strcasecmp(a.states[i], sim_snap_state_names[s->state]) == 0;
        if (ok && st_ok)
            match[n++] = s;
    }
    json_object *items = json_object_new_array();
    long start = (page - 1) * page_size;
    for (long i = start; i < n && i < start + page_size; i++)
        json_object_array_add(items, sim_snap_json(match[i]));
    pthread_mutex_unlock(&g_sim.mu);
    free(match);
    long pages = (n + page_size - 1) / page_size;
    json_object *pg = json_object_new_object();
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

/* True if a live sandbox (not Terminated/Failed) was restored from snapshot id; caller holds
 * g_sim.mu. Docker refuses to remove an image a container still uses. */
static bool sim_snap_in_use_locked(const char *id)
{
    int64_t now = sim_now_ms();
    for (struct sim_sandbox *sb = g_sim.sandboxes; sb; sb = sb->next) {
        if (!sb->snapshot_id || strcmp(sb->snapshot_id, id) != 0)
            continue;
        enum sim_state st = sim_effective_state(sb, now);
        if (st != SIM_TERMINATED && st != SIM_FAILED)
            return true;
    }
    return false;
}

/* GET /snapshots, GET /snapshots/<id>, DELETE /snapshots/<id> (path without /v1). */
enum MHD_Result sim_snapshots_handle(struct MHD_Connection *c, struct sim_req *r, const char *path)
{
    const char *m = r->method;
    if (strcmp(path, "/snapshots") == 0) {
        if (strcmp(m, "GET") == 0)
            return sim_snap_list(c);
        return sim_reply_json(c, 405, json_tokener_parse("{\"detail\":\"Method Not Allowed\"}"));
    }
    const char *id = path + strlen("/snapshots/");
    if (!*id || strchr(id, '/') || strlen(id) > 64)
        return sim_reply_json(c, 404, json_tokener_parse("{\"detail\":\"Not Found\"}"));
    bool del = strcmp(m, "DELETE") == 0;
    if (!del && strcmp(m, "GET") != 0)
        return sim_reply_json(c, 405, json_tokener_parse("{\"detail\":\"Method Not Allowed\"}"));
    char msg[256];
    pthread_mutex_lock(&g_sim.mu);
    struct sim_snapshot **link;
    struct sim_snapshot *s = sim_snap_find_locked(id, &link);
    if (!s) {
        pthread_mutex_unlock(&g_sim.mu);
        snprintf(msg, sizeof msg, "Snapshot %s not found", id);
        return sim_reply_error(c, 404, "SNAPSHOT::NOT_FOUND", msg);
    }
    if (!del) {
        json_object *o = sim_snap_json(s);
        pthread_mutex_unlock(&g_sim.mu);
        return sim_reply_json(c, 200, o);
    }
    if (s->state == SIM_SNAP_CREATING) {
        pthread_mutex_unlock(&g_sim.mu);
        snprintf(msg, sizeof msg, "Snapshot %s is still being created and cannot be deleted", id);
        return sim_reply_error(c, 409, "SNAPSHOT::INVALID_STATE", msg);
    }
    if (sim_snap_in_use_locked(s->id)) {
        pthread_mutex_unlock(&g_sim.mu);
        return sim_reply_error(c, 409, "SNAPSHOT::DELETE_CONFLICT",
                               "snapshot image cannot be deleted due to a conflict");
    }
    *link = s->next;
    pthread_mutex_unlock(&g_sim.mu);
    sim_remove_all(s->dir);
    sim_snap_free(s);
    return sim_reply_empty(c, 204);
}

/* Check that snap_id can be restored; on success copies its files into dest_dir and sets
 * *entrypoint (new reference, may be NULL). On failure returns -1 with the reply's status,
 * code and message. Takes g_sim.mu itself (not held by the caller). */
int sim_snapshot_restore(const char *snap_id, const char *dest_dir, json_object **entrypoint,
                         unsigned *status, const char **code, char *msg, size_t msgn)
{
    *entrypoint = NULL;
    pthread_mutex_lock(&g_sim.mu);
    struct sim_snapshot *s = sim_snap_find_locked(snap_id, NULL);
    if (!s || s->state != SIM_SNAP_READY) {
        pthread_mutex_unlock(&g_sim.mu);
        *status = s ? 409 : 404;
        *code = s ? "SNAPSHOT::NOT_READY" : "SNAPSHOT::NOT_FOUND";
        if (s)
            snprintf(msg, msgn, "Snapshot %s is not ready for restore.", snap_id);
        else
            snprintf(msg, msgn, "Snapshot %s not found", snap_id);
        return -1;
    }
    char *dir = sim_strdup(s->dir);
    *entrypoint = s->entrypoint ? json_object_get(s->entrypoint) : NULL;
    pthread_mutex_unlock(&g_sim.mu);
    if (!dest_dir) {
        free(dir);
        return 0;
    }
    char err[512];
    int rc = sim_copy_tree(dir, dest_dir, err, sizeof err);
    free(dir);
    if (rc != 0) {
        json_object_put(*entrypoint);
        *entrypoint = NULL;
        *status = 500;
        *code = "DOCKER::SANDBOX_START_FAILED";
        snprintf(msg, msgn, "Failed to restore snapshot %s: %s", snap_id, err);
        return -1;
    }
    return 0;
}
