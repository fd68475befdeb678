/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envd's process service mapped onto the plugin's exec (docs/e2b.md):
 *
 *   Start       the command runs on its own call, through the plugin's
 *               asynchronous exec_start (ABI 1.2: held by the plugin's event
 *               loop, no thread waits for it) or, for a plugin without it,
 *               through the blocking exec as a job on the worker pool
 *               (server.workers bounds those); the start event, every
 *               stdout/stderr chunk and the end event go to the client as
 *               Connect envelopes as they come (engine/stream_reply.h:
 *               bounded, never buffered whole), then the end-of-stream
 *               message. The command's deadline is the client's
 *               connect-timeout-ms; a client that leaves cancels it (execd
 *               kills a command whose stream is closed).
 *   List        the commands this rock-admin process streams for the sandbox.
 *   SendSignal  SIGKILL / SIGTERM: cancel the command's exec (execd kills it).
 *
 * pids are rock-admin's own (execd does not report one), unique per process.
 * A background command of the SDK is a Start whose stream the client keeps
 * open; wait() reads it to the end, kill() is SendSignal. Command text,
 * environment values and output are never logged.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/e2b_envd.h"
#include "api/runtime.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/lifecycle.h"
#include "engine/http_server.h"
#include "engine/stream_reply.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"
#include "obs/metrics.h"

/* Bytes one command's stream may hold while the client reads: server.max_output_bytes, or
 * this when that is 0 (unlimited for collected output, but a stream keeps a bound). */
#define STREAM_BYTES_UNLIMITED (64ll << 20)
/* Room kept for the end event and the end-of-stream message. */
#define END_ROOM (64u * 1024)
/* Keep-alive when the command is silent and the client asked for none. */
#define DEFAULT_KEEPALIVE_MS 30000

/* One streamed command. */
struct proc_job {
    _Atomic int refs; /* the worker and the response */
    struct rk_call *call;
    const struct rk_plugin *pl;
    struct rk_outstream *stream;
    struct rk_sandbox_ref ref;
    struct rk_exec_req req;
    struct rk_sink sink;
    struct rk_exec_res res; /* the plugin's until the command ended */
    int64_t mark;           /* metrics: the asynchronous call's start */
    uint32_t pid;
    char sandbox_id[RK_ID_MAX + 1];
    char *config;       /* the ProcessConfig as asked (for List) */
    _Atomic int killed; /* SendSignal */
    int overflow;       /* the client read slower than the command wrote */
    struct proc_job *next;
};

/* The commands that stream now (for List and SendSignal). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct proc_job *g_jobs;
static uint32_t g_next_pid = 1000;

static void job_unref(struct proc_job *j)
{
    if (--j->refs > 0)
        return;
    rk_stream_unref(j->stream);
    rk_call_free(j->call);
    free(j->config);
    free(j);
}

static void job_unlink(struct proc_job *j)
{
    pthread_mutex_lock(&g_mu);
    for (struct proc_job **p = &g_jobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

/* Push one message (JSON text) as a Connect envelope. */
static int push_message(struct proc_job *j, unsigned flags, json_object *msg, size_t keep_free)
{
    size_t len = 0;
    const char *text = json_object_to_json_string_length(msg, JSON_C_TO_STRING_PLAIN, &len);
    struct rk_buf b = {0};
    int rc = rk_envd_envelope(&b, flags, text, len) == 0
                 ? rk_stream_push(j->stream, b.data, b.len, keep_free)
                 : -1;
    rk_buf_free(&b);
    json_object_put(msg);
    return rc;
}

/* {"event": {kind: body}} */
static json_object *event(const char *kind, json_object *body)
{
    json_object *ev = json_object_new_object(), *o = json_object_new_object();
    json_object_object_add(ev, kind, body);
    json_object_object_add(o, "event", ev);
    return o;
}

/* The exec sink: each chunk as a data event, base64 as protobuf's JSON has bytes. Never
 * waits: a chunk the stream cannot take ends the command (RK_E_TOO_LARGE). */
static rk_status proc_sink(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    struct proc_job *j = ctx;
    if (rk_stream_finished(j->stream))
        return RK_E_CANCELLED;
    struct rk_buf b64 = {0};
    rk_buf_base64(&b64, buf, len);
    json_object *data = json_object_new_object();
    json_object_object_add(data, stream == RK_STREAM_STDERR ? "stderr" : "stdout",
                           json_object_new_string_len(b64.data ? b64.data : "", (int)b64.len));
    rk_buf_free(&b64);
    if (push_message(j, 0, event("data", data), END_ROOM) != 0) {
        j->overflow = 1;
        return RK_E_TOO_LARGE;
    }
    return RK_OK;
}

/* The end-of-stream message, with an error when code is set. */
static void push_end_stream(struct proc_job *j, const char *code, const char *message)
{
    json_object *end = json_object_new_object();
    if (code) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "code", json_object_new_string(code));
        json_object_object_add(e, "message", json_object_new_string(message ? message : ""));
        json_object_object_add(end, "error", e);
    }
    push_message(j, 0x02u, end, 0);
}

/* The end event of a command that ended (exit code, or killed). */
static void push_end_event(struct proc_job *j, int exit_code, int exited, const char *status,
                           const char *error)
{
    json_object *end = json_object_new_object();
    json_object_object_add(end, "exitCode", json_object_new_int(exit_code));
    json_object_object_add(end, "exited", json_object_new_boolean(exited));
    json_object_object_add(end, "status", json_object_new_string(status));
    if (error)
        json_object_object_add(end, "error", json_object_new_string(error));
    push_message(j, 0, event("end", end), 0);
}

/* The command ended with st (the plugin's report, or the blocking exec's return): end the
 * stream the way it ended and drop the command's reference. Any thread. */
static void proc_finish(struct proc_job *j, rk_status st)
{
    struct rk_exec_res *res = &j->res;
    if (j->killed) {
        push_end_event(j, -1, 0, "signal: killed", NULL);
        push_end_stream(j, NULL, NULL);
    } else if (rk_command_timed_out(j->call, st, res)) {
        push_end_stream(j, "deadline_exceeded",
                        rk_arena_printf(j->call, "the command ran longer than %lld ms",
                                        (long long)j->req.timeout_ms));
    } else if (j->overflow) {
        push_end_stream(j, "resource_exhausted",
                        "the client read the output slower than the command wrote it");
    } else if (st == RK_E_CANCELLED) {
        /* the client left: nobody reads the end */
    } else if (st != RK_OK) {
        rk_status code = rk_call_error_code(j->call);
        push_end_stream(j, rk_envd_code(code ? code : st), rk_call_error_text(j->call));
    } else {
        int code = res->has_exit_code ? res->exit_code : -1;
        const char *status = res->has_exit_code
                                 ? rk_arena_printf(j->call, "exit status %d", res->exit_code)
                                 : "exit status unknown";
        push_end_event(j, code, res->has_exit_code, status, res->error_text);
        push_end_stream(j, NULL, NULL);
    }
    rk_stream_close(j->stream);
    job_unlink(j);
    job_unref(j);
}

/* host->call_done of exec_start (the plugin's loop, or the starting thread). */
static void proc_done(void *ctx, rk_status st)
{
    struct proc_job *j = ctx;
    rk_metrics_upstream_end("exec", st, j->mark);
    proc_finish(j, st);
}

/* A worker-pool job for a plugin without exec_start: the blocking exec. */
static void proc_blocking(void *arg)
{
    struct proc_job *j = arg;
    rk_status st;
    RK_UPSTREAM(st, j->pl, exec, j->call, &j->ref, &j->req, &j->sink, &j->res);
    proc_finish(j, st);
}

/* Start the command: 0 once it is in flight (its end reaches proc_finish), -1 when it could
 * not be started (the worker queue is full; nothing will report). */
static int proc_launch(struct rk_req *r, struct proc_job *j)
{
    const struct rk_plugin *pl = j->pl;
    if (!pl->ops.exec_start)
        return rk_req_submit(r, proc_blocking, j);
    j->mark = rk_metrics_upstream_start();
    rk_call_on_done(j->call, proc_done, j);
    rk_status st = pl->ops.exec_start(pl->inst, j->call, &j->ref, &j->req, &j->sink, &j->res);
    if (st != RK_OK)
        rk_call_done(j->call, st); /* not started: the end is reported here */
    return 0;
}

/* The response ended (sent whole, or the client left): stop the command. */
static void proc_gone(void *ctx)
{
    struct proc_job *j = ctx;
    rk_call_cancel(j->call);
    job_unref(j);
}

/* A keep-alive event while the command is silent. */
static void proc_idle(struct rk_outstream *s, void *ctx)
{
    (void)ctx;
    static const char msg[] = "{\"event\":{\"keepalive\":{}}}";
    struct rk_buf b = {0};
    if (rk_envd_envelope(&b, 0, msg, sizeof msg - 1) == 0)
        rk_stream_push(s, b.data, b.len, END_ROOM);
    rk_buf_free(&b);
}

/* The command text of a ProcessConfig: the script of `bash [-l] -c <script>` (execd runs it
 * in its shell), otherwise cmd and args shell-quoted. NULL with a problem in *why. */
static const char *command_of(struct rk_call *call, json_object *proc, const char **why)
{
    json_object *cmd = NULL, *args = NULL;
    json_object_object_get_ex(proc, "cmd", &cmd);
    json_object_object_get_ex(proc, "args", &args);
    if (!cmd || !json_object_is_type(cmd, json_type_string) || !*json_object_get_string(cmd)) {
        *why = "process.cmd is required";
        return NULL;
    }
    size_t n =
        args && json_object_is_type(args, json_type_array) ? json_object_array_length(args) : 0;
    for (size_t i = 0; i < n; i++)
        if (!json_object_is_type(json_object_array_get_idx(args, i), json_type_string)) {
            *why = "process.args must be strings";
            return NULL;
        }
    const char *c = json_object_get_string(cmd);
    const char *base = strrchr(c, '/') ? strrchr(c, '/') + 1 : c;
    if (!strcmp(base, "bash") || !strcmp(base, "sh")) {
        size_t i = 0;
        if (i < n && !strcmp(json_object_get_string(json_object_array_get_idx(args, i)), "-l"))
            i++;
        if (i + 2 == n && !strcmp(json_object_get_string(json_object_array_get_idx(args, i)), "-c"))
            return rk_arena_strdup(call,
                                   json_object_get_string(json_object_array_get_idx(args, i + 1)));
    }
    struct rk_buf b = {0};
    rk_shell_quote(&b, c);
    for (size_t i = 0; i < n; i++) {
        rk_buf_append(&b, " ", 1);
        rk_shell_quote(&b, json_object_get_string(json_object_array_get_idx(args, i)));
    }
    const char *out = rk_arena_strdup(call, rk_buf_cstr(&b));
    rk_buf_free(&b);
    return out;
}

/* process.Process/Start (server streaming). */
void rk_envd_process_start(struct rk_req *r)
{
    json_object *body = rk_envd_request(r, 1);
    if (!body)
        return;
    json_object *proc = NULL, *pty = NULL, *stdin_v = NULL, *envs = NULL, *cwd = NULL;
    json_object_object_get_ex(body, "process", &proc);
    json_object_object_get_ex(body, "pty", &pty);
    json_object_object_get_ex(body, "stdin", &stdin_v);
    const char *why = NULL;
    if (!proc || !json_object_is_type(proc, json_type_object)) {
        rk_envd_reply_stream_error(r, "invalid_argument", "process is required");
        goto out;
    }
    if (pty) {
        rk_envd_reply_stream_error(r, "unimplemented",
                                   "PTY processes are not emulated: execd runs commands without "
                                   "a terminal");
        goto out;
    }
    if (stdin_v && json_object_get_boolean(stdin_v)) {
        rk_envd_reply_stream_error(r, "unimplemented",
                                   "stdin is not emulated: execd gives a command no input stream");
        goto out;
    }
    json_object_object_get_ex(proc, "envs", &envs);
    json_object_object_get_ex(proc, "cwd", &cwd);
    if (envs && !json_object_is_type(envs, json_type_object))
        envs = NULL;
    struct rk_call *wcall = rk_call_new(r->request_id, -1, 0);
    const char *command = command_of(wcall, proc, &why);
    if (!command) {
        rk_call_free(wcall);
        rk_envd_reply_stream_error(r, "invalid_argument", why);
        goto out;
    }
    struct rk_target t;
    if (rk_envd_target(r, RK_OP_EXEC, 1, &t) != 0) {
        rk_call_free(wcall);
        goto out;
    }
    struct proc_job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->call = wcall;
    j->pl = r->app->plugin;
    j->refs = 2;
    j->req.command = command;
    j->req.cwd = cwd && json_object_is_type(cwd, json_type_string) && *json_object_get_string(cwd)
                     ? rk_arena_strdup(wcall, json_object_get_string(cwd))
                     : NULL;
    j->req.timeout_ms = rk_envd_timeout_ms(r);
    j->req.env = rk_env_overlay(wcall, t.rec, envs, &j->req.env_len);
    int64_t margin_ms = (int64_t)r->app->cfg->runtime.command_timeout_margin_s * 1000;
    rk_call_set_deadline(wcall,
                         j->req.timeout_ms ? rk_now_ms() + j->req.timeout_ms + margin_ms : 0);
    rk_target_detach(&t, wcall);
    j->ref = t.ref;
    snprintf(j->sandbox_id, sizeof j->sandbox_id, "%s", t.ref.sandbox_id);
    j->config = strdup(json_object_to_json_string_ext(proc, JSON_C_TO_STRING_PLAIN));
    const char *ka = rk_req_header(r, "Keepalive-Ping-Interval");
    int64_t keepalive_ms = ka && atoi(ka) > 0 ? (int64_t)atoi(ka) * 1000 : DEFAULT_KEEPALIVE_MS;
    int64_t cap = r->app->cfg->server.max_output_bytes;
    j->stream = rk_stream_new((size_t)(cap > 0 ? cap : STREAM_BYTES_UNLIMITED) + END_ROOM,
                              keepalive_ms, proc_idle, NULL);
    if (!j->stream || !j->config) {
        rk_target_release(&t);
        j->refs = 1;
        job_unref(j);
        rk_envd_reply_stream_error(r, "resource_exhausted", "out of memory");
        goto out;
    }
    pthread_mutex_lock(&g_mu);
    j->pid = g_next_pid++;
    if (g_next_pid == 0)
        g_next_pid = 1000;
    j->next = g_jobs;
    g_jobs = j;
    pthread_mutex_unlock(&g_mu);
    json_object *start = json_object_new_object();
    json_object_object_add(start, "pid", json_object_new_int64(j->pid));
    push_message(j, 0, event("start", start), 0);
    rk_target_release(&t);
    j->sink = (struct rk_sink){proc_sink, j};
    if (proc_launch(r, j) != 0) {
        job_unlink(j);
        j->refs = 1;
        job_unref(j);
        rk_envd_reply_stream_error(r, "unavailable",
                                   "admin is busy: all workers are busy and their queue is full "
                                   "(server.worker_queue); retry later");
        goto out;
    }
    r->outcome = "success";
    rk_req_reply_stream(r, 200, "application/connect+json", j->stream, proc_gone, j);
out:
    json_object_put(body);
}

/* process.Process/List: the commands this process streams for the sandbox. */
void rk_envd_process_list(struct rk_req *r)
{
    json_object *body = rk_envd_request(r, 0);
    if (!body)
        return;
    json_object_put(body);
    struct rk_target t;
    if (rk_envd_target(r, RK_OP_EXEC, 0, &t) != 0)
        return;
    json_object *list = json_object_new_array();
    pthread_mutex_lock(&g_mu);
    for (struct proc_job *j = g_jobs; j; j = j->next) {
        if (strcmp(j->sandbox_id, t.ref.sandbox_id) != 0)
            continue;
        json_object *p = json_object_new_object();
        json_object_object_add(p, "config", json_tokener_parse(j->config));
        json_object_object_add(p, "pid", json_object_new_int64(j->pid));
        json_object_array_add(list, p);
    }
    pthread_mutex_unlock(&g_mu);
    rk_target_release(&t);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "processes", list);
    rk_envd_reply_message(r, o);
}

/* process.Process/SendSignal: SIGKILL and SIGTERM end the command (its exec is cancelled,
 * and execd kills a command whose stream closes). */
void rk_envd_process_signal(struct rk_req *r)
{
    json_object *body = rk_envd_request(r, 0);
    if (!body)
        return;
    json_object *proc = NULL, *pid_v = NULL, *sig = NULL;
    json_object_object_get_ex(body, "process", &proc);
    if (proc)
        json_object_object_get_ex(proc, "pid", &pid_v);
    json_object_object_get_ex(body, "signal", &sig);
    const char *sname = sig ? json_object_get_string(sig) : "";
    int known = sig && (!strcmp(sname, "SIGNAL_SIGKILL") || !strcmp(sname, "SIGNAL_SIGTERM") ||
                        !strcmp(sname, "9") || !strcmp(sname, "15"));
    int64_t pid = pid_v ? json_object_get_int64(pid_v) : 0;
    json_object_put(body);
    struct rk_target t;
    if (rk_envd_target(r, RK_OP_EXEC, 0, &t) != 0)
        return;
    if (!pid) {
        rk_target_release(&t);
        rk_envd_reply_error(r, "invalid_argument",
                            "process.pid is required (tags are not emulated)");
        return;
    }
    if (!known) {
        rk_target_release(&t);
        rk_envd_reply_error(r, "unimplemented", "only SIGKILL and SIGTERM are emulated");
        return;
    }
    int found = 0;
    pthread_mutex_lock(&g_mu);
    for (struct proc_job *j = g_jobs; j; j = j->next)
        if (j->pid == (uint32_t)pid && !strcmp(j->sandbox_id, t.ref.sandbox_id)) {
            j->killed = 1;
            rk_call_cancel(j->call);
            found = 1;
        }
    pthread_mutex_unlock(&g_mu);
    rk_target_release(&t);
    if (!found)
        rk_envd_reply_error(
            r, "not_found",
            rk_arena_printf(r->call, "process with pid %lld not found", (long long)pid));
    else
        rk_envd_reply_message(r, json_object_new_object());
}
