/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_session.c
 * @brief execd bash sessions: open (user check, env validation, init), run, close.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "os_internal.h"
#include "rkutil.h"

/** Most bytes of init / `id -un` output kept per stream. */
#define OS_COLLECT_MAX (1024u * 1024u)

/** A sink that keeps (bounded) stdout and stderr in memory. */
struct collect {
    struct os_sb out;
    struct os_sb err;
};

/** Collector write: append up to OS_COLLECT_MAX bytes per stream, drop the rest. */
static rk_status collect_write(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    struct collect *c = ctx;
    struct os_sb *sb = stream == RK_STREAM_STDERR ? &c->err : &c->out;
    size_t room = sb->len < OS_COLLECT_MAX ? OS_COLLECT_MAX - sb->len : 0;
    os_sb_putn(sb, buf, len < room ? len : room);
    return sb->oom ? RK_E_NOMEM : RK_OK;
}

/** Python str.strip() of a buffer into a fresh string. */
static char *strip_copy(const char *s, size_t n)
{
    if (!s)
        return strdup("");
    rku_strip(&s, &n);
    return strndup(s, n);
}

/** Check remote_user against `id -un` in the sandbox. */
static rk_status check_remote_user(struct os_inst *inst, struct rk_call *call,
                                   const struct rk_sandbox_ref *ref, const char *user)
{
    const struct rk_host *h = inst->host;
    struct collect c = {0};
    struct rk_sink sink = {collect_write, &c};
    struct rk_exec_req req = {.command = "id -un", .timeout_ms = inst->default_timeout_s * 1000};
    struct rk_exec_res res;
    rk_status s = os_exec(inst, call, ref, &req, &sink, &res);
    if (s != RK_OK) {
        os_sb_free(&c.out);
        os_sb_free(&c.err);
        return s;
    }
    char *who = strip_copy(c.out.p, c.out.len);
    char *err = strip_copy(c.err.p, c.err.len);
    os_sb_free(&c.out);
    os_sb_free(&c.err);
    if (!who || !err) {
        free(who);
        free(err);
        return h->set_error(call, RK_E_NOMEM, "out of memory");
    }
    if (!res.has_exit_code || res.exit_code != 0 || res.timed_out || !*who) {
        if (*err)
            s = h->set_error(call, RK_E_INVALID, "Cannot determine OpenSandbox effective user: %s",
                             err);
        else if (res.has_exit_code && !res.timed_out)
            s = h->set_error(call, RK_E_INVALID,
                             "Cannot determine OpenSandbox effective user: exit code %d",
                             res.exit_code);
        else
            s = h->set_error(call, RK_E_INVALID,
                             "Cannot determine OpenSandbox effective user: exit code None");
    } else if (strcmp(who, user) != 0) {
        s = h->set_error(call, RK_E_INVALID,
                         "OpenSandbox does not support remote_user=%s; the sandbox effective user "
                         "is %s",
                         user, who);
    }
    free(who);
    free(err);
    return s;
}

/** "/session/<escaped sid><suffix>" (caller frees). */
static char *session_path(const char *sid, const char *suffix)
{
    char *enc = os_escape(sid);
    if (!enc)
        return NULL;
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/session/%s%s", enc, suffix);
    free(enc);
    return os_sb_take(&sb);
}

/** Add the `{}` body to POST /session. */
static rk_status open_prep(struct os_xfer *x, void *ctx, int attempt)
{
    (void)ctx;
    if (attempt >= 0)
        os_xfer_json(x, "{}");
    return RK_OK;
}

/** DELETE /session/{sid}; 200 and 404 (already gone) are success. */
static rk_status delete_session(struct os_inst *inst, struct rk_call *call, const char *osid,
                                const char *sid)
{
    char *p = session_path(sid, "");
    if (!p)
        return inst->host->set_error(
            call, RK_E_NOMEM, "opensandbox delete_session failed for %s: out of memory", osid);
    int64_t dl = inst->host->deadline_ms(call);
    if (dl > 0 && inst->host->now_ms() >= dl) {
        /* A session whose init ran out of the call's time is still closed. */
        long st = os_execd_after_deadline(inst, call, osid, "DELETE", p);
        free(p);
        return (st >= 200 && st < 300) || st == 404
                   ? RK_OK
                   : inst->host->set_error(call, RK_E_UNAVAILABLE,
                                           "opensandbox delete_session failed for %s: %s", osid,
                                           st ? "error" : "no answer");
    }
    struct os_xfer x;
    rk_status s = os_execd_simple(inst, call, osid, "delete_session", "DELETE", p,
                                  inst->default_timeout_s * 1000, NULL, NULL, &x);
    free(p);
    if (s == RK_OK && !(x.status >= 200 && x.status < 300) && x.status != 404) {
        char *d = os_error_detail(x.status, x.body, x.body_len);
        s = inst->host->set_error(call, RK_E_UPSTREAM,
                                  "opensandbox delete_session failed for %s: %s", osid,
                                  d ? d : "error");
        free(d);
    }
    os_xfer_cleanup(&x);
    return s;
}

/** Run one command in a session and collect its output. */
static rk_status run_collect(struct os_inst *inst, struct rk_call *call, const char *osid,
                             const char *sid, const char *command, int64_t timeout_ms,
                             struct collect *c, struct rk_exec_res *res)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "command", json_object_new_string(command));
    if (timeout_ms > 0)
        json_object_object_add(root, "timeout", json_object_new_int64(timeout_ms));
    const char *js = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE);
    char *path = session_path(sid, "/run");
    rk_status s;
    if (!js || !path) {
        s = inst->host->set_error(call, RK_E_NOMEM,
                                  "opensandbox run_in_session failed for %s: out of memory", osid);
    } else {
        struct rk_sink sink = {collect_write, c};
        struct os_run_opts o = {.op = "run_in_session",
                                .path = path,
                                .body = js,
                                .timeout_ms = timeout_ms,
                                .session = 1};
        s = os_run_stream(inst, call, osid, &o, &sink, res);
    }
    free(path);
    json_object_put(root);
    return s;
}

/** ops.session_open: user check, env names, POST /session, one init command. */
rk_status os_session_open(struct os_inst *inst, struct rk_call *call,
                          const struct rk_sandbox_ref *ref, const struct rk_session_opts *opts,
                          struct rk_session_opened *out)
{
    const struct rk_host *h = inst->host;
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    if (opts->remote_user && *opts->remote_user) {
        s = check_remote_user(inst, call, ref, opts->remote_user);
        if (s != RK_OK)
            return s;
    }
    for (size_t i = 0; i < opts->env_len; i++) {
        const char *k = opts->env[i].key ? opts->env[i].key : "";
        if (!os_env_name_valid(k)) {
            char *r = os_py_repr(k, strlen(k));
            s = h->set_error(call, RK_E_INVALID, "Invalid environment variable name: %s",
                             r ? r : k);
            free(r);
            return s;
        }
    }
    struct os_xfer x;
    s = os_execd_simple(inst, call, osid, "create_session", "POST", "/session",
                        inst->default_timeout_s * 1000, open_prep, NULL, &x);
    if (s != RK_OK) {
        os_xfer_cleanup(&x);
        return s;
    }
    json_object *o = (x.status == 200 && x.body) ? json_tokener_parse(x.body) : NULL, *v;
    const char *sid = NULL;
    if (o && json_object_object_get_ex(o, "session_id", &v) &&
        json_object_is_type(v, json_type_string))
        sid = json_object_get_string(v);
    char *sid_arena = sid ? h->arena_strdup(call, sid) : NULL;
    if (!sid_arena) {
        char *d = x.status == 200 ? NULL : os_error_detail(x.status, x.body, x.body_len);
        s = h->set_error(call, RK_E_UPSTREAM, "opensandbox create_session failed for %s: %s", osid,
                         d ? d : "response without session_id");
        free(d);
    }
    json_object_put(o);
    os_xfer_cleanup(&x);
    if (s != RK_OK)
        return s;

    out->session_id = sid_arena;
    out->output = "";
    char *cmd = os_session_init_command(opts->env, opts->env_len, opts->startup_source,
                                        opts->startup_source_len);
    if (!cmd) {
        delete_session(inst, call, osid, sid_arena);
        return h->set_error(call, RK_E_NOMEM, "out of memory");
    }
    if (!*cmd) {
        free(cmd);
        return RK_OK;
    }
    struct collect c = {0};
    struct rk_exec_res res;
    s = run_collect(inst, call, osid, sid_arena, cmd, opts->startup_timeout_ms, &c, &res);
    free(cmd);
    /* Failures are formatted first, the session closed, then the error recorded,
     * so that a failing cleanup cannot replace the original message. */
    rk_status fail = RK_OK;
    struct os_sb msg = {0};
    /* execd's timeout, or the call's deadline when the core set one (RK_E_TIMEOUT): either way
     * the init ran out of time. */
    if ((s == RK_OK && res.timed_out) || s == RK_E_TIMEOUT) {
        char *t = opts->startup_timeout_ms > 0 ? os_py_float(opts->startup_timeout_ms / 1000.0)
                                               : strdup("None");
        fail = RK_E_TIMEOUT;
        os_sb_printf(&msg, "Timeout (%ss) exceeded while initializing OpenSandbox session",
                     t ? t : "?");
        free(t);
    } else if (s == RK_OK && (!res.has_exit_code || res.exit_code != 0)) {
        const struct os_sb *src = c.err.len ? &c.err : &c.out;
        size_t n = src->len;
        if (n && src->p[n - 1] == '\n')
            n--; /* the parser terminates every line; the original text had no final newline */
        char *r = os_py_repr(src->p ? src->p : "", n);
        fail = RK_E_COMMAND;
        if (res.has_exit_code)
            os_sb_printf(&msg, "Failed to initialize OpenSandbox session with exit code %d: %s",
                         res.exit_code, r ? r : "''");
        else
            os_sb_printf(&msg, "Failed to initialize OpenSandbox session with exit code None: %s",
                         res.error_text ? res.error_text : (r ? r : "''"));
        free(r);
    } else if (s == RK_OK) {
        struct os_sb all = {0};
        os_sb_putn(&all, c.out.p ? c.out.p : "", c.out.len);
        os_sb_putn(&all, c.err.p ? c.err.p : "", c.err.len);
        char *text = os_sb_take(&all);
        out->output = text ? h->arena_strdup(call, text) : NULL;
        free(text);
        if (!out->output)
            s = h->set_error(call, RK_E_NOMEM, "out of memory");
    }
    os_sb_free(&c.out);
    os_sb_free(&c.err);
    if (s != RK_OK || fail != RK_OK)
        delete_session(inst, call, osid, sid_arena); /* best effort */
    if (fail != RK_OK) {
        char *m = os_sb_take(&msg);
        s = h->set_error(call, fail, "%s", m ? m : "session initialization failed");
        free(m);
    }
    os_sb_free(&msg);
    return s;
}

/*
 * A job that already ended when the command's final `disown` runs.
 *
 * The real execd runs each session command as a bash script (pkg/runtime/bash_session.go).
 * `cmd & ...; disown` (the ROCK SDK's nohup pattern: `nohup cmd < /dev/null > out 2>&1 &
 * echo PIDSTART${!}PIDEND;disown`) then fails at random when the job has ended and bash has
 * reaped it before `disown` runs: bash prints "<script>: line N: disown: current: no such
 * job" and the run exits 1, although the job ran and there is nothing left to detach. When the
 * command's last statement is a plain `disown` and that message is the run's last output line
 * and its exit code is 1, the run is reported as it would have been had the job still been
 * running: that line dropped, exit code 0. The output's last line is held back until the run
 * ends to allow that (bounded: a longer line is passed on at once).
 */
#define DISOWN_HOLD_MAX 512

struct disown_filter {
    struct rk_sink sink; /* this filter as the run's sink */
    struct os_inst *inst;
    char osid[128]; /* for the log line */
    const struct rk_sink *next;
    char held[DISOWN_HOLD_MAX];
    size_t len;
    int passthrough; /* the command does not end with `disown`: hold nothing */
    int cut;         /* the held line's start was passed on (a long line): never dropped */
};

/* 1 if the command's last statement is a plain `disown`. */
static int ends_with_disown(const char *cmd)
{
    size_t n = cmd ? strlen(cmd) : 0;
    while (n && (isspace((unsigned char)cmd[n - 1]) || cmd[n - 1] == ';'))
        n--;
    if (n < 6 || strncmp(cmd + n - 6, "disown", 6) != 0)
        return 0;
    if (n == 6)
        return 1;
    char b = cmd[n - 7];
    return b == ';' || b == '\n' || b == '&' || b == '|' || isspace((unsigned char)b);
}

/* 1 if line (without its newline) is bash's "disown: current: no such job" message. */
static int is_disown_no_job(const char *line, size_t len)
{
    static const char tail[] = "disown: current: no such job";
    size_t t = sizeof tail - 1;
    return len >= t && memcmp(line + len - t, tail, t) == 0;
}

static rk_status disown_flush(struct disown_filter *f, size_t n)
{
    rk_status s = RK_OK;
    if (n)
        s = f->next->write(f->next->ctx, RK_STREAM_STDOUT, f->held, n);
    memmove(f->held, f->held + n, f->len - n);
    f->len -= n;
    return s;
}

/* Sink write: pass everything on except the last complete line (and a partial one). */
static rk_status disown_write(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    struct disown_filter *f = ctx;
    if (f->passthrough)
        return f->next->write(f->next->ctx, stream, buf, len);
    while (len) {
        size_t room = sizeof f->held - f->len;
        if (room == 0) { /* a long line: it cannot be the message; pass the buffer on */
            rk_status s = disown_flush(f, f->len);
            f->cut = 1;
            if (s != RK_OK)
                return s;
            continue;
        }
        size_t k = len < room ? len : room;
        memcpy(f->held + f->len, buf, k);
        f->len += k;
        buf += k;
        len -= k;
        /* keep only the text after the second-to-last newline (the last line, complete or not) */
        size_t keep_from = 0;
        size_t end = f->len && f->held[f->len - 1] == '\n' ? f->len - 1 : f->len;
        for (size_t i = end; i > 0; i--) {
            if (f->held[i - 1] == '\n') {
                keep_from = i;
                break;
            }
        }
        if (keep_from)
            f->cut = 0; /* the held text now starts a line */
        rk_status s = disown_flush(f, keep_from);
        if (s != RK_OK)
            return s;
    }
    return RK_OK;
}

/* The run's end (os_run_opts.finish, both forms): the held line is dropped when it is the
 * message of a `disown` whose job had ended, else passed on; the filter is freed. */
static rk_status disown_finish(void *ctx, rk_status s, struct rk_exec_res *out)
{
    struct disown_filter *f = ctx;
    size_t n = f->len && f->held[f->len - 1] == '\n' ? f->len - 1 : f->len;
    if (s == RK_OK && !f->passthrough && out->has_exit_code && out->exit_code == 1 &&
        !out->timed_out && !f->cut && is_disown_no_job(f->held, n)) {
        f->len = 0; /* the job had ended: nothing was left to disown */
        out->exit_code = 0;
        f->inst->host->log(RK_LOG_INFO,
                           "run_in_session in %s: the job had ended before `disown`; "
                           "reported as exit 0",
                           f->osid);
    }
    rk_status fs = disown_flush(f, f->len);
    if (s == RK_OK)
        s = fs;
    free(f);
    return s;
}

/** POST /session/{sid}/run, output (merged) to the sink as stdout: run (start 0) or started on
 *  the loop (start 1, ABI 1.2). */
static rk_status session_run(struct os_inst *inst, struct rk_call *call,
                             const struct rk_sandbox_ref *ref, const char *session_id,
                             const struct rk_session_req *req, const struct rk_sink *sink,
                             struct rk_exec_res *out, int start)
{
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    json_object *root = json_object_new_object();
    json_object_object_add(root, "command",
                           json_object_new_string(req->command ? req->command : ""));
    if (req->timeout_ms > 0)
        json_object_object_add(root, "timeout", json_object_new_int64(req->timeout_ms));
    const char *js = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE);
    char *path = session_path(session_id, "/run");
    if (!js || !path) {
        s = inst->host->set_error(call, RK_E_NOMEM,
                                  "opensandbox run_in_session failed for %s: out of memory", osid);
    } else {
        struct os_run_opts o = {.op = "run_in_session",
                                .path = path,
                                .body = js,
                                .timeout_ms = req->timeout_ms,
                                .session = 1};
        struct disown_filter *f = calloc(1, sizeof *f);
        if (!f) {
            s = inst->host->set_error(
                call, RK_E_NOMEM, "opensandbox run_in_session failed for %s: out of memory", osid);
        } else {
            f->sink.write = disown_write;
            f->sink.ctx = f;
            f->inst = inst;
            snprintf(f->osid, sizeof f->osid, "%s", osid);
            f->next = sink;
            f->passthrough = !ends_with_disown(req->command);
            o.finish = disown_finish;
            o.finish_ctx = f;
            s = start ? os_run_stream_start(inst, call, osid, &o, &f->sink, out)
                      : os_run_stream(inst, call, osid, &o, &f->sink, out);
        }
    }
    free(path);
    json_object_put(root);
    return s;
}

/** ops.session_run. */
rk_status os_session_run(struct os_inst *inst, struct rk_call *call,
                         const struct rk_sandbox_ref *ref, const char *session_id,
                         const struct rk_session_req *req, const struct rk_sink *sink,
                         struct rk_exec_res *out)
{
    return session_run(inst, call, ref, session_id, req, sink, out, 0);
}

/** ops.session_run_start (ABI 1.2): session_run started on the loop; its end goes to
 *  host->call_done. */
rk_status os_session_run_start(struct os_inst *inst, struct rk_call *call,
                               const struct rk_sandbox_ref *ref, const char *session_id,
                               const struct rk_session_req *req, const struct rk_sink *sink,
                               struct rk_exec_res *out)
{
    return session_run(inst, call, ref, session_id, req, sink, out, 1);
}

/** ops.session_close: DELETE /session/{sid} (404 = already gone). */
rk_status os_session_close(struct os_inst *inst, struct rk_call *call,
                           const struct rk_sandbox_ref *ref, const char *session_id)
{
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    return delete_session(inst, call, osid, session_id);
}
