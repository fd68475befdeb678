/* execd API served per sandbox: /ping, /command, /session, /files (delegated), egress stub. */
#include "sim.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_MAX_SESSIONS 64
#define SIM_SESSION_DEFAULT_TIMEOUT_MS (24LL * 3600 * 1000)

/* Resolve a client path against the sandbox dir ("~" = sandbox dir, relative = inside it). */
static char *sim_resolve(const char *dir, const char *p)
{
    size_t n = strlen(dir) + strlen(p) + 2;
    char *out = sim_xmalloc(n);
    if (p[0] == '~' && (p[1] == 0 || p[1] == '/'))
        snprintf(out, n, "%s%s", dir, p + 1);
    else if (p[0] == '/')
        snprintf(out, n, "%s", p);
    else
        snprintf(out, n, "%s/%s", dir, p);
    return out;
}

/* Append s single-quoted for bash to buf (growable). */
static void sim_shell_quote(char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    *buf = sim_xrealloc(*buf, *len + n * 4 + 3);
    char *o = *buf + *len;
    *o++ = '\'';
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = s[i];
        }
    }
    *o++ = '\'';
    *o = 0;
    *len = (size_t)(o - *buf);
}

/* Append a plain string to buf (growable). */
static void sim_append(char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    *buf = sim_xrealloc(*buf, *len + n + 1);
    memcpy(*buf + *len, s, n + 1);
    *len += n;
}

/* Register a started command with its sandbox (bounded list); caller holds g_sim.mu. */
static void sim_track_cmd_locked(struct sim_sandbox *sb, struct sim_cmd *cmd)
{
    if (sb->npgids == SIM_MAX_PGIDS) {
        memmove(sb->pgids, sb->pgids + 1, sizeof(pid_t) * (SIM_MAX_PGIDS - 1));
        sb->npgids--;
    }
    if (!sb->pgids)
        sb->pgids = sim_xmalloc(sizeof(pid_t) * SIM_MAX_PGIDS);
    sb->pgids[sb->npgids++] = cmd->pid;
    if (sb->ncmds == SIM_MAX_CMDS_PER_SANDBOX) {
        int victim = 0;
        for (int i = 0; i < sb->ncmds; i++) {
            pthread_mutex_lock(&sb->cmds[i]->mu);
            bool done = sb->cmds[i]->done;
            pthread_mutex_unlock(&sb->cmds[i]->mu);
            if (done) {
                victim = i;
                break;
            }
        }
        sim_cmd_unref(sb->cmds[victim]);
        memmove(sb->cmds + victim, sb->cmds + victim + 1,
                sizeof(sb->cmds[0]) * (size_t)(sb->ncmds - victim - 1));
        sb->ncmds--;
    }
    sim_cmd_ref(cmd);
    sb->cmds[sb->ncmds++] = cmd;
}

/* Build a finished stream (background commands): init + execution_complete. */
static enum MHD_Result sim_reply_background(struct MHD_Connection *c, struct sim_cmd *cmd)
{
    char buf[512];
    int64_t now = sim_now_ms();
    snprintf(buf, sizeof buf,
             "{\"type\":\"init\",\"text\":\"%s\",\"timestamp\":%lld}\n\n"
             "{\"type\":\"execution_complete\",\"timestamp\":%lld}\n\n",
             cmd->id, (long long)now, (long long)now);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(buf), buf, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return sim_queue(c, 200, r);
}

/* Read an optional non-negative integer (ms); false if present with the wrong type. */
static bool sim_opt_int(json_object *o, const char *key, int64_t *out)
{
    json_object *v;
    *out = 0;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return true;
    if (!json_object_is_type(v, json_type_int))
        return false;
    *out = json_object_get_int64(v);
    return *out >= 0;
}

/* POST /command: validate, spawn, stream. */
static enum MHD_Result sim_command(struct MHD_Connection *c, struct sim_req *r,
                                   struct sim_sandbox *sb)
{
    json_object *body = json_tokener_parse(r->body), *v;
    enum MHD_Result ret;
    const char *bad = NULL;
    int64_t timeout = 0, uid = -1, gid = -1;
    bool background = false;
    json_object *envs = NULL;
    char *cwd = NULL;
    if (!body || !json_object_is_type(body, json_type_object)) {
        bad = "invalid request body";
    } else if (!json_object_object_get_ex(body, "command", &v) ||
               !json_object_is_type(v, json_type_string) || !*json_object_get_string(v)) {
        bad = "command is required and must be a non-empty string";
    } else if (!sim_opt_int(body, "timeout", &timeout)) {
        bad = "timeout must be a non-negative integer (milliseconds)";
    } else if (json_object_object_get_ex(body, "background", &v) &&
               !json_object_is_type(v, json_type_null) &&
               !json_object_is_type(v, json_type_boolean)) {
        bad = "background must be a boolean";
    } else if (json_object_object_get_ex(body, "envs", &envs) &&
               !json_object_is_type(envs, json_type_null) &&
               !json_object_is_type(envs, json_type_object)) {
        bad = "envs must be an object of strings";
    } else if (json_object_object_get_ex(body, "cwd", &v) &&
               !json_object_is_type(v, json_type_null) &&
               !json_object_is_type(v, json_type_string)) {
        bad = "cwd must be a string";
    } else if (!sim_opt_int(body, "uid", &uid) || !sim_opt_int(body, "gid", &gid)) {
        bad = "uid/gid must be non-negative integers";
    }
    if (!bad) {
        json_object *uv = NULL, *gv = NULL;
        bool has_uid =
            json_object_object_get_ex(body, "uid", &uv) && !json_object_is_type(uv, json_type_null);
        bool has_gid =
            json_object_object_get_ex(body, "gid", &gv) && !json_object_is_type(gv, json_type_null);
        if (!has_uid)
            uid = -1;
        if (!has_gid)
            gid = -1;
        else if (!has_uid)
            bad = "uid is required when gid is provided";
    }
    if (!bad && envs && json_object_is_type(envs, json_type_object)) {
        json_object_object_foreach(envs, ek, ev)
        {
            (void)ek;
            if (!json_object_is_type(ev, json_type_string))
                bad = "envs must be an object of strings";
        }
    }
    if (bad) {
        json_object_put(body);
        return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", bad);
    }
    if ((uid >= 0 && (uid_t)uid != getuid()) || (gid >= 0 && (gid_t)gid != getgid())) {
        json_object_put(body);
        return sim_reply_error(c, 500, "RUNTIME_ERROR",
                               "opensandbox-sim runs commands as its own user only");
    }
    if (json_object_object_get_ex(body, "background", &v))
        background = json_object_get_boolean(v);
    if (json_object_object_get_ex(body, "cwd", &v) && json_object_is_type(v, json_type_string) &&
        *json_object_get_string(v))
        cwd = sim_resolve(sb->dir, json_object_get_string(v));
    else
        cwd = sim_strdup(sb->dir);
    struct stat st;
    if (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        free(cwd);
        json_object_put(body);
        return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", "working directory does not exist");
    }
    json_object_object_get_ex(body, "command", &v);
    char **envp = sim_build_env(sb, envs);
    char err[128];
    struct sim_cmd *cmd =
        sim_cmd_spawn(background ? SIM_CMD_BACKGROUND : SIM_CMD_FOREGROUND,
                      json_object_get_string(v), cwd, envp, timeout, NULL, err, sizeof err);
    sim_free_env(envp);
    free(cwd);
    json_object_put(body);
    if (!cmd)
        return sim_reply_error(c, 500, "RUNTIME_ERROR", err);
    sim_track_cmd_locked(sb, cmd);
    if (background)
        ret = sim_reply_background(c, cmd);
    else
        ret = sim_queue(c, 200, sim_cmd_stream_response(cmd));
    sim_cmd_unref(cmd);
    return ret;
}

/* Find a tracked command by id; caller holds g_sim.mu. */
static struct sim_cmd *sim_find_cmd_locked(struct sim_sandbox *sb, const char *id)
{
    for (int i = 0; i < sb->ncmds; i++)
        if (strcmp(sb->cmds[i]->id, id) == 0)
            return sb->cmds[i];
    return NULL;
}

/* Find a session by id (and its link pointer); caller holds g_sim.mu. */
static struct sim_session *sim_find_session_locked(struct sim_sandbox *sb, const char *id,
                                                   struct sim_session ***link)
{
    struct sim_session **pp = &sb->sessions;
    while (*pp && strcmp((*pp)->id, id) != 0)
        pp = &(*pp)->next;
    if (link)
        *link = pp;
    return *pp;
}

/* Remove and free a session, killing its current run; caller holds g_sim.mu. */
static void sim_session_delete_locked(struct sim_session **link)
{
    struct sim_session *s = *link;
    *link = s->next;
    if (s->running) {
        sim_cmd_kill(s->running, SIGKILL);
        sim_cmd_unref(s->running);
    }
    free(s->cwd);
    free(s->exports);
    free(s);
}

/* DELETE /command?id=: SIGTERM then SIGKILL after 3 s; a session id closes that session. */
static enum MHD_Result sim_interrupt(struct MHD_Connection *c, struct sim_sandbox *sb)
{
    const char *id = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "id");
    if (!id || !*id)
        return sim_reply_error(c, 400, "MISSING_QUERY", "missing query parameter id");
    struct sim_session **link;
    if (sim_find_session_locked(sb, id, &link)) {
        sim_session_delete_locked(link);
        return sim_reply_empty(c, 200);
    }
    struct sim_cmd *cmd = sim_find_cmd_locked(sb, id);
    bool running = false;
    if (cmd) {
        pthread_mutex_lock(&cmd->mu);
        running = cmd->running;
        if (running) {
            kill(-cmd->pid, SIGTERM);
            int64_t kill_at = sim_now_ms() + 3000;
            if (cmd->deadline_ms == 0 || cmd->deadline_ms > kill_at)
                cmd->deadline_ms = kill_at;
        }
        pthread_mutex_unlock(&cmd->mu);
    }
    if (!running)
        return sim_reply_error(c, 500, "RUNTIME_ERROR", "no running command with this id");
    return sim_reply_empty(c, 200);
}

/* GET /command/status/<id>. */
static enum MHD_Result sim_command_status(struct MHD_Connection *c, struct sim_sandbox *sb,
                                          const char *id)
{
    struct sim_cmd *cmd = sim_find_cmd_locked(sb, id);
    if (!cmd)
        return sim_reply_error(c, 404, "RUNTIME_ERROR", "command not found");
    char ts[64];
    json_object *o = json_object_new_object();
    pthread_mutex_lock(&cmd->mu);
    json_object_object_add(o, "id", json_object_new_string(cmd->id));
    json_object_object_add(o, "running", json_object_new_boolean(cmd->running));
    if (!cmd->running)
        json_object_object_add(o, "exit_code", json_object_new_int(cmd->exit_code));
    sim_iso_time(cmd->started_ms, ts, sizeof ts);
    json_object_object_add(o, "started_at", json_object_new_string(ts));
    if (!cmd->running) {
        sim_iso_time(cmd->finished_ms, ts, sizeof ts);
        json_object_object_add(o, "finished_at", json_object_new_string(ts));
    }
    pthread_mutex_unlock(&cmd->mu);
    return sim_reply_json(c, 200, o);
}

/* GET /command/<id>/logs?cursor=N (background command output). */
static enum MHD_Result sim_command_logs(struct MHD_Connection *c, struct sim_sandbox *sb,
                                        const char *id)
{
    struct sim_cmd *cmd = sim_find_cmd_locked(sb, id);
    if (!cmd)
        return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", "command not found");
    const char *cs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cursor");
    size_t cursor = cs ? (size_t)strtoull(cs, NULL, 10) : 0;
    pthread_mutex_lock(&cmd->mu);
    if (cursor > cmd->log_len)
        cursor = cmd->log_len;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        cmd->log_len - cursor, cmd->log ? cmd->log + cursor : (char *)"", MHD_RESPMEM_MUST_COPY);
    char next[32];
    snprintf(next, sizeof next, "%zu", cmd->log_len);
    pthread_mutex_unlock(&cmd->mu);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    MHD_add_response_header(r, "EXECD-COMMANDS-TAIL-CURSOR", next);
    return sim_queue(c, 200, r);
}

/* POST /session: optional {"cwd"} (created if missing). */
static enum MHD_Result sim_session_create(struct MHD_Connection *c, struct sim_req *r,
                                          struct sim_sandbox *sb)
{
    char *cwd = NULL;
    if (r->len > 0) {
        json_object *body = json_tokener_parse(r->body), *v;
        if (!body || !json_object_is_type(body, json_type_object)) {
            json_object_put(body);
            return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", "invalid request body");
        }
        if (json_object_object_get_ex(body, "cwd", &v) && !json_object_is_type(v, json_type_null)) {
            if (!json_object_is_type(v, json_type_string)) {
                json_object_put(body);
                return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", "cwd must be a string");
            }
            if (*json_object_get_string(v))
                cwd = sim_resolve(sb->dir, json_object_get_string(v));
        }
        json_object_put(body);
    }
    if (!cwd)
        cwd = sim_strdup(sb->dir);
    if (sim_mkdir_p(cwd, 0755) != 0) {
        free(cwd);
        return sim_reply_error(c, 500, "RUNTIME_ERROR", "cannot create session directory");
    }
    int n = 0;
    for (struct sim_session *s = sb->sessions; s; s = s->next)
        n++;
    if (n >= SIM_MAX_SESSIONS) {
        free(cwd);
        return sim_reply_error(c, 500, "RUNTIME_ERROR", "too many sessions");
    }
    struct sim_session *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    sim_uuid(s->id);
    s->cwd = cwd;
    s->next = sb->sessions;
    sb->sessions = s;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "session_id", json_object_new_string(s->id));
    return sim_reply_json(c, 200, o);
}

/* Take the exported variables and cwd dumped by the previous run of a session. */
static void sim_session_harvest(struct sim_session *s)
{
    struct sim_cmd *cmd = s->running;
    if (!cmd)
        return;
    pthread_mutex_lock(&cmd->mu);
    if (cmd->state_ready && cmd->state) {
        char *mark = strstr(cmd->state, "\n__SIM_PWD__\n");
        if (mark) {
            *mark = 0;
            char *pwd = mark + 13;
            char *nl = strchr(pwd, '\n');
            if (nl)
                *nl = 0;
            free(s->exports);
            s->exports = sim_strdup(cmd->state);
            if (*pwd) {
                free(s->cwd);
                s->cwd = sim_strdup(pwd);
            }
        }
        free(cmd->state);
        cmd->state = NULL;
        cmd->state_len = 0;
    }
    bool done = cmd->done;
    pthread_mutex_unlock(&cmd->mu);
    if (done) {
        sim_cmd_unref(cmd);
        s->running = NULL;
    }
}

/* POST /session/<sid>/run: fresh bash per run; exported vars and cwd carry over. */
static enum MHD_Result sim_session_run(struct MHD_Connection *c, struct sim_req *r,
                                       struct sim_sandbox *sb, const char *sid)
{
    struct sim_session *s = sim_find_session_locked(sb, sid, NULL);
    if (!s)
        return sim_reply_error(c, 500, "RUNTIME_ERROR",
                               "error running in session. context not found");
    json_object *body = json_tokener_parse(r->body), *v, *cmdv;
    int64_t timeout = 0;
    const char *bad = NULL;
    if (!body || !json_object_is_type(body, json_type_object))
        bad = "invalid request body";
    else if (!json_object_object_get_ex(body, "command", &cmdv) ||
             !json_object_is_type(cmdv, json_type_string) || !*json_object_get_string(cmdv))
        bad = "command is required";
    else if (!sim_opt_int(body, "timeout", &timeout))
        bad = "timeout must be a non-negative integer (milliseconds)";
    else if (json_object_object_get_ex(body, "cwd", &v) &&
             !json_object_is_type(v, json_type_null) && !json_object_is_type(v, json_type_string))
        bad = "cwd must be a string";
    if (bad) {
        json_object_put(body);
        return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", bad);
    }
    sim_session_harvest(s);
    char *cwd = NULL;
    if (json_object_object_get_ex(body, "cwd", &v) && json_object_is_type(v, json_type_string) &&
        *json_object_get_string(v)) {
        cwd = sim_resolve(sb->dir, json_object_get_string(v));
        struct stat st;
        if (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
            free(cwd);
            json_object_put(body);
            return sim_reply_error(c, 400, "INVALID_REQUEST_BODY",
                                   "working directory does not exist");
        }
    }
    char *script = NULL;
    size_t len = 0;
    sim_append(&script, &len, "");
    if (s->exports) {
        sim_append(&script, &len, s->exports);
        sim_append(&script, &len, "\n");
    }
    sim_append(&script, &len, "cd -- ");
    sim_shell_quote(&script, &len, cwd ? cwd : s->cwd);
    sim_append(&script, &len, " 2>/dev/null\n");
    sim_append(&script, &len, json_object_get_string(cmdv));
    sim_append(&script, &len,
               "\n__sim_rc=$?\n{ export -p; printf '\\n__SIM_PWD__\\n'; pwd; } >&3 "
               "2>/dev/null\nexit $__sim_rc\n");
    char **envp = sim_build_env(sb, NULL);
    char err[128];
    struct sim_cmd *cmd = sim_cmd_spawn(SIM_CMD_SESSION, script, sb->dir, envp,
                                        timeout > 0 ? timeout : SIM_SESSION_DEFAULT_TIMEOUT_MS,
                                        s->id, err, sizeof err);
    sim_free_env(envp);
    free(script);
    free(cwd);
    json_object_put(body);
    if (!cmd)
        return sim_reply_error(c, 500, "RUNTIME_ERROR", err);
    if (s->running)
        sim_cmd_unref(s->running);
    s->running = cmd; /* our spawn reference now belongs to the session */
    if (sb->npgids == SIM_MAX_PGIDS) {
        memmove(sb->pgids, sb->pgids + 1, sizeof(pid_t) * (SIM_MAX_PGIDS - 1));
        sb->npgids--;
    }
    if (!sb->pgids)
        sb->pgids = sim_xmalloc(sizeof(pid_t) * SIM_MAX_PGIDS);
    sb->pgids[sb->npgids++] = cmd->pid;
    return sim_queue(c, 200, sim_cmd_stream_response(cmd));
}

/* Check the configured execd header; true (after replying 401) when it is missing/wrong. */
static bool sim_execd_header_fails(struct MHD_Connection *c, enum MHD_Result *ret)
{
    if (!g_sim.execd_header_name)
        return false;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, g_sim.execd_header_name);
    if (v && strcmp(v, g_sim.execd_header_value) == 0)
        return false;
    json_object *o = json_object_new_object();
    char msg[256];
    snprintf(msg, sizeof msg, "missing or invalid header %s", g_sim.execd_header_name);
    json_object_object_add(o, "error", json_object_new_string(msg));
    *ret = sim_reply_json(c, 401, o);
    return true;
}

/* Route an execd request for sandbox id; path is the part after the execd prefix. */
enum MHD_Result sim_execd_handle(struct MHD_Connection *c, struct sim_req *r, const char *id,
                                 const char *path)
{
    enum MHD_Result ret;
    if (sim_execd_header_fails(c, &ret))
        return ret;
    const char *m = r->method;
    pthread_mutex_lock(&g_sim.mu);
    struct sim_sandbox *sb = sim_find_locked(id);
    enum sim_state st = sb ? sim_effective_state(sb, sim_now_ms()) : SIM_TERMINATED;
    if (!sb || st != SIM_RUNNING) {
        pthread_mutex_unlock(&g_sim.mu);
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR",
                               sb ? "Could not connect to the backend sandbox: not running"
                                  : "Could not connect to the backend sandbox: no such sandbox");
    }
    if (sim_now_ms() < sb->ready_ms + g_sim.execd_start_ms) {
        /* The docker runtime reports Running when the container started; execd, started by
         * its bootstrap script, listens a moment later (components/execd/bootstrap.sh). */
        pthread_mutex_unlock(&g_sim.mu);
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR",
                               "Could not connect to the backend sandbox: execd not listening yet");
    }
    if (strcmp(path, "/ping") == 0 && (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0)) {
        ret = sim_reply_empty(c, 200);
    } else if (strcmp(path, "/command") == 0 && strcmp(m, "POST") == 0) {
        ret = sim_command(c, r, sb);
    } else if (strcmp(path, "/command") == 0 && strcmp(m, "DELETE") == 0) {
        ret = sim_interrupt(c, sb);
    } else if (strncmp(path, "/command/status/", 16) == 0 && strcmp(m, "GET") == 0) {
        ret = sim_command_status(c, sb, path + 16);
    } else if (strncmp(path, "/command/", 9) == 0 && strcmp(m, "GET") == 0 && strlen(path) > 14 &&
               strcmp(path + strlen(path) - 5, "/logs") == 0) {
        char cid[64];
        size_t n = strlen(path) - 14;
        snprintf(cid, sizeof cid, "%.*s", (int)(n < sizeof cid ? n : sizeof cid - 1), path + 9);
        ret = sim_command_logs(c, sb, cid);
    } else if (strcmp(path, "/session") == 0 && strcmp(m, "POST") == 0) {
        ret = sim_session_create(c, r, sb);
    } else if (strncmp(path, "/session/", 9) == 0) {
        char sid[64];
        const char *s = path + 9, *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        snprintf(sid, sizeof sid, "%.*s", (int)(n < sizeof sid ? n : sizeof sid - 1), s);
        struct sim_session **link;
        if (e && strcmp(e, "/run") == 0 && strcmp(m, "POST") == 0) {
            ret = sim_session_run(c, r, sb, sid);
        } else if (!e && strcmp(m, "DELETE") == 0) {
            if (sim_find_session_locked(sb, sid, &link)) {
                sim_session_delete_locked(link);
                ret = sim_reply_empty(c, 200);
            } else {
                char msg[128];
                snprintf(msg, sizeof msg, "session %s not found", sid);
                ret = sim_reply_error(c, 404, "CONTEXT_NOT_FOUND", msg);
            }
        } else {
            ret = sim_reply_text(c, 404, "404 page not found");
        }
    } else if ((strcmp(path, "/metrics") == 0 || strcmp(path, "/metrics/watch") == 0) &&
               strcmp(m, "GET") == 0) {
        pthread_mutex_unlock(&g_sim.mu);
        return sim_metrics_handle(c, path);
    } else if (strncmp(path, "/files", 6) == 0 || strncmp(path, "/directories", 12) == 0) {
        char *dir = sim_strdup(sb->dir);
        pthread_mutex_unlock(&g_sim.mu);
        ret = sim_files_handle(c, r, sb, path, dir);
        free(dir);
        return ret;
    } else {
        ret = sim_reply_text(c, 404, "404 page not found");
    }
    pthread_mutex_unlock(&g_sim.mu);
    return ret;
}

/* Minimal egress sidecar stand-in: GET /policy answers allow-all; the rest is unsupported. */
enum MHD_Result sim_egress_handle(struct MHD_Connection *c, struct sim_req *r, const char *id,
                                  const char *path)
{
    pthread_mutex_lock(&g_sim.mu);
    bool found = sim_find_locked(id) != NULL;
    pthread_mutex_unlock(&g_sim.mu);
    if (!found)
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR",
                               "Could not connect to the backend sandbox: no such sandbox");
    /* components/egress/policy_server.go authorize(): OPENSANDBOX-EGRESS-AUTH must equal the
     * sidecar's token when one is set; otherwise http.Error(w, "unauthorized", 401). */
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "OPENSANDBOX-EGRESS-AUTH");
    if (g_sim.egress_token && (!auth || strcmp(auth, g_sim.egress_token) != 0))
        return sim_reply_text(c, 401, "unauthorized\n");
    if (strcmp(path, "/policy") == 0 && strcmp(r->method, "GET") == 0)
        return sim_reply_json(
            c, 200,
            json_tokener_parse("{\"status\":\"ok\",\"mode\":\"allow_all\","
                               "\"policy\":{\"defaultAction\":\"allow\",\"egress\":[]}}"));
    return sim_reply_error(c, 501, "NOT_SUPPORTED", "egress is not simulated by opensandbox-sim");
}
