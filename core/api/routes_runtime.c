/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runtime routes: /execute, /create_session, /run_in_session, /close_session,
 * /read_file and /write_file (wire contract §5.5-5.10, behaviour B47-B89).
 *
 * Every handler validates the body, passes the fail-closed gate
 * (rk_dispatch), calls one or more plugin entry points and maps the outcome
 * onto the ROCK envelope. Command output and file contents are collected in
 * buffers capped by server.max_output_bytes / server.max_read_bytes, and are
 * never logged.
 */
#include "api/routes.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/app.h"
#include "base/budget.h"
#include "config/config.h"
#include "base/decode.h"
#include "domain/dispatch.h"
#include "engine/envelope.h"
#include "engine/reply.h"
#include "host/host.h"
#include "engine/http_server.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "store/store.h"
#include "base/util.h"
#include "api/validate.h"

/* The plugin's display name ("OpenSandbox") for user-facing texts. */
static const char *display_name(const struct rk_req *r)
{
    return r->app->plugin->desc->display_name;
}

/* Record a generic error for st unless the plugin recorded one, then reply. */
static void reply_plugin_error(struct rk_req *r, rk_status st)
{
    if (rk_call_error_code(r->call) == RK_OK)
        rk_call_set_error(r->call, st, "%s", rk_status_name(st));
    rk_reply_call_error(r);
}

/* A JSON string of bytes that may not be valid UTF-8 (invalid sequences
 * become U+FFFD so the response stays valid JSON). */
static json_object *json_text(const char *s, size_t len)
{
    char *out = NULL;
    size_t out_len = 0;
    if (rk_decode(s, len, "utf-8", "replace", &out, &out_len, NULL, 0) != RK_DECODE_OK)
        return json_object_new_string("");
    json_object *o = json_object_new_string_len(out, (int)out_len);
    free(out);
    return o;
}

/* Pydantic Literal check: an absent/null value is fine, anything else must be
 * one of allowed (NULL-terminated). */
static const char *v_literal(struct rk_v *v, json_object *body, const char *key,
                             const char *const *allowed, const char *def)
{
    json_object *val = NULL;
    if (!body || !json_object_object_get_ex(body, key, &val) || !val)
        return def;
    if (json_object_is_type(val, json_type_string))
        for (size_t i = 0; allowed[i]; i++)
            if (strcmp(json_object_get_string(val), allowed[i]) == 0)
                return allowed[i];
    struct rk_buf msg = {0};
    rk_buf_printf(&msg, "Input should be ");
    for (size_t i = 0; allowed[i]; i++) {
        if (i > 0)
            rk_buf_printf(&msg, allowed[i + 1] ? ", " : " or ");
        rk_buf_printf(&msg, "'%s'", allowed[i]);
    }
    rk_v_problem(v, key, rk_buf_cstr(&msg));
    rk_buf_free(&msg);
    return def;
}

static const char *const bash_only[] = {"bash", NULL};

/* A float number of seconds, where an explicit null means "no timeout".
 * Returns 1 if a timeout applies (value in *out), 0 for none. */
static int opt_seconds(struct rk_v *v, json_object *body, const char *key, int has_def, double def,
                       double *out)
{
    json_object *val = NULL;
    *out = 0;
    int given = body && json_object_object_get_ex(body, key, &val);
    if (given && !val)
        return 0;
    if (!given) {
        *out = def;
        return has_def;
    }
    int present = 0;
    *out = rk_v_num(v, body, key, 0, def, &present);
    return present;
}

/* Seconds to the ABI's milliseconds (0 = none). */
static int64_t seconds_to_ms(int has, double s)
{
    if (!has || !(s > 0))
        return 0;
    if (s > 9.0e12)
        return (int64_t)9.0e15;
    int64_t ms = llround(s * 1000.0);
    return ms < 1 ? 1 : ms;
}

/* "9.0" like Python's str(float), or "None" for no timeout. */
static void timeout_repr(int has, double s, char out[64])
{
    if (has)
        rk_py_float(s, out);
    else
        snprintf(out, 64, "None");
}

/*
 * Command timeouts have one owner, the core: it sets the call's deadline to
 * the command's timeout plus runtime.command_timeout_margin (time for the
 * backend to report its own kill), and the plugin only honours that deadline
 * (host->deadline_ms). A command timed out when the plugin says the backend
 * killed it for time (res.timed_out), or when the plugin stopped because this
 * deadline passed.
 */
static void set_command_deadline(struct rk_req *r, int64_t timeout_ms)
{
    int64_t margin_ms = (int64_t)r->app->cfg->runtime.command_timeout_margin_s * 1000;
    rk_call_set_deadline(r->call, timeout_ms ? rk_now_ms() + timeout_ms + margin_ms : 0);
}

/* 1 if the plugin's outcome means the command ran out of time. */
static int is_timeout(struct rk_call *call, rk_status st, const struct rk_exec_res *res)
{
    if (st == RK_OK)
        return res->timed_out;
    if (st == RK_E_TIMEOUT)
        return 1;
    /* The plugin saw our deadline as a cancelled call. */
    return st == RK_E_CANCELLED && rk_call_deadline_passed(call);
}

/* The sandbox's stored env overlaid by the request's (B54/B80): sandbox keys
 * first in their order, request values win, request-only keys appended. */
static const struct rk_kv *env_overlay(struct rk_call *call, json_object *rec, json_object *req_env,
                                       size_t *n_out)
{
    json_object *base = NULL;
    if (!rec || !json_object_object_get_ex(rec, "env", &base) ||
        !json_object_is_type(base, json_type_object))
        base = NULL;
    size_t cap = (base ? (size_t)json_object_object_length(base) : 0) +
                 (req_env ? (size_t)json_object_object_length(req_env) : 0);
    *n_out = 0;
    if (cap == 0)
        return NULL;
    struct rk_kv *kv = rk_arena_alloc(call, cap * sizeof *kv);
    size_t n = 0;
    if (base) {
        json_object_object_foreach(base, k, val)
        {
            json_object *over = NULL;
            if (req_env && json_object_object_get_ex(req_env, k, &over) && over)
                val = over;
            if (!val || !json_object_is_type(val, json_type_string))
                continue;
            /* copies: the record and the request body are released before a command runs */
            kv[n].key = rk_arena_strdup(call, k);
            kv[n].value = rk_arena_strdup(call, json_object_get_string(val));
            n++;
        }
    }
    if (req_env) {
        json_object_object_foreach(req_env, k, val)
        {
            if (base && json_object_object_get_ex(base, k, NULL))
                continue;
            if (!val || !json_object_is_type(val, json_type_string))
                continue;
            kv[n].key = rk_arena_strdup(call, k);
            kv[n].value = rk_arena_strdup(call, json_object_get_string(val));
            n++;
        }
    }
    *n_out = n;
    return n ? kv : NULL;
}

/* ---- output collection ------------------------------------------------- */

/* Collects stdout/stderr (or file bytes) with one cap over both buffers. */
struct collector {
    struct rk_call *call;
    struct rk_buf out; /* stdout, or file data */
    struct rk_buf err; /* stderr */
    int64_t limit;     /* 0 = unlimited */
    const char *what;  /* "command output" / "file" */
    const char *key;   /* config key named in the error */
    int64_t charged;   /* bytes taken from rk_mem_budget, given back by collector_free */
    int over_budget;   /* the global memory budget refused more bytes */
};

/* Start a collector. */
static void collector_init(struct collector *c, struct rk_call *call, int64_t limit,
                           const char *what, const char *key)
{
    memset(c, 0, sizeof *c);
    c->call = call;
    c->limit = limit > 0 ? limit : 0;
    c->what = what;
    c->key = key;
}

/* Free a collector's buffers. */
static void collector_free(struct collector *c)
{
    rk_buf_free(&c->out);
    rk_buf_free(&c->err);
    rk_budget_give(&rk_mem_budget, c->charged);
    c->charged = 0;
}

/* rk_sink.write: append to the stream's buffer, refusing output past the cap. */
static rk_status collector_write(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    struct collector *c = ctx;
    if (c->limit && (uint64_t)(c->out.len + c->err.len) + len > (uint64_t)c->limit)
        return rk_call_set_error(c->call, RK_E_TOO_LARGE,
                                 "%s exceeds the configured limit of %lld bytes (%s)", c->what,
                                 (long long)c->limit, c->key);
    /* Collected bytes count against the process-wide memory budget while
     * they are held, so many concurrent large reads or outputs cannot grow
     * the process past server.max_buffered_bytes (issue 10). */
    if (rk_budget_take(&rk_mem_budget, (int64_t)len) != 0) {
        c->over_budget = 1;
        return rk_call_set_error(c->call, RK_E_TOO_LARGE, "%s does not fit the memory budget",
                                 c->what);
    }
    c->charged += (int64_t)len;
    struct rk_buf *b = stream == RK_STREAM_STDERR ? &c->err : &c->out;
    if (rk_buf_append(b, buf, len))
        return rk_call_set_error(c->call, RK_E_NOMEM, "out of memory collecting %s", c->what);
    return RK_OK;
}

/* If the memory budget stopped the collection, answer 503 "admin is busy"
 * and return 1. */
static int collector_reply_busy(struct rk_req *r, const struct collector *c)
{
    if (!c->over_budget)
        return 0;
    rk_req_reply_busy(r, "the memory budget (server.max_buffered_bytes) is in use by other "
                         "requests");
    return 1;
}

/* Append a backend error that is not a timeout to b (U24). */
static void append_error_text(struct rk_buf *b, const char *error_text)
{
    if (!error_text || !*error_text)
        return;
    if (b->len)
        rk_buf_append(b, "\n", 1);
    rk_buf_append(b, error_text, strlen(error_text));
}

/* Exit code as Python prints it ("None" when the backend gave none). */
static void exit_repr(const struct rk_exec_res *res, char out[24])
{
    if (res->has_exit_code)
        snprintf(out, 24, "%d", res->exit_code);
    else
        snprintf(out, 24, "None");
}

/* ---- /execute ----------------------------------------------------------- */

/* The `command` field: a string as is, or a list shell-quoted and joined
 * (B47). Returns 1 for a string, 0 for a list, -1 on a validation problem. */
static int parse_command(struct rk_v *v, json_object *body, struct rk_buf *cmd)
{
    json_object *val = NULL;
    if (!body)
        return -1;
    if (!json_object_object_get_ex(body, "command", &val) || !val) {
        rk_v_problem(v, "command", "Field required");
        return -1;
    }
    if (json_object_is_type(val, json_type_string)) {
        rk_buf_append(cmd, json_object_get_string(val), strlen(json_object_get_string(val)));
        rk_buf_cstr(cmd);
        return 1;
    }
    if (!json_object_is_type(val, json_type_array)) {
        rk_v_problem(v, "command", "Input should be a valid string");
        return -1;
    }
    size_t n = json_object_array_length(val);
    for (size_t i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(val, i);
        if (!item || !json_object_is_type(item, json_type_string)) {
            char key[64];
            snprintf(key, sizeof key, "command.list[str].%zu", i);
            rk_v_problem(v, key, "Input should be a valid string");
            return -1;
        }
        if (i > 0)
            rk_buf_append(cmd, " ", 1);
        rk_shell_quote(cmd, json_object_get_string(item));
    }
    rk_buf_cstr(cmd);
    return 0;
}

/* POST /execute (§5.5). */
void rk_route_execute(struct rk_req *r)
{
    struct rk_v v;
    struct rk_buf cmd = {0};
    struct collector col;
    collector_init(&col, r->call, r->app->cfg->server.max_output_bytes, "command output",
                   "server.max_output_bytes");
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *id = rk_v_str(&v, body, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    int is_string = parse_command(&v, body, &cmd);
    double timeout_s;
    int has_timeout = opt_seconds(&v, body, "timeout", 1, 1200.0, &timeout_s);
    const char *cwd = rk_v_str(&v, body, "cwd", 0, NULL);
    json_object *env = rk_v_strmap(&v, body, "env", 0);
    int shell = rk_v_bool(&v, body, "shell", 0, 0);
    int check = rk_v_bool(&v, body, "check", 0, 0);
    const char *error_msg = rk_v_str(&v, body, "error_msg", 0, "");
    v_literal(&v, body, "session_type", bash_only, "bash");
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        goto out;
    }

    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_EXEC, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        goto out;
    }
    /* B48: one warning, never the command text. */
    if (is_string == 1 && !shell)
        rk_warn("[%s] %s executes string commands with shell semantics although shell=False",
                t.ref.sandbox_id, display_name(r));

    const struct rk_plugin *pl = r->app->plugin;
    struct rk_exec_req req = {
        .command = rk_buf_cstr(&cmd),
        .cwd = cwd,
        .timeout_ms = seconds_to_ms(has_timeout, timeout_s),
    };
    req.env = env_overlay(r->call, t.rec, env, &req.env_len);
    /* An in-flight command keeps neither the parsed record nor the parsed body (issue 15:
     * memory per in-flight command): rk_v_str values and the env overlay are arena copies. */
    rk_target_detach(&t, r->call);
    json_object_put(body);
    body = NULL;
    env = NULL;
    struct rk_sink sink = {.write = collector_write, .ctx = &col};
    struct rk_exec_res res = {0};
    set_command_deadline(r, req.timeout_ms);
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.exec(pl->inst, r->call, &t.ref, &req, &sink, &res);
    rk_metrics_upstream("exec", st);

    char tbuf[64];
    if (collector_reply_busy(r, &col)) {
        /* answered 503 */
    } else if (is_timeout(r->call, st, &res)) {
        /* B51: checked before output mapping and before `check`. */
        timeout_repr(has_timeout, timeout_s, tbuf);
        char msg[128];
        snprintf(msg, sizeof msg, "Timeout (%ss) exceeded while running command", tbuf);
        rk_reply_error(r, RK_E_TIMEOUT, msg);
    } else if (st != RK_OK) {
        reply_plugin_error(r, st);
    } else {
        append_error_text(&col.err, res.error_text);
        if (check && (!res.has_exit_code || res.exit_code != 0)) {
            /* B50: prefix: Command failed with exit code N. Stdout:\n'..'\nStderr:\n'..' */
            struct rk_buf msg = {0};
            char code[24];
            exit_repr(&res, code);
            if (*error_msg)
                rk_buf_printf(&msg, "%s: ", error_msg);
            rk_buf_printf(&msg, "Command failed with exit code %s. Stdout:\n", code);
            rk_py_repr(&msg, col.out.data ? col.out.data : "", col.out.len);
            rk_buf_printf(&msg, "\nStderr:\n");
            rk_py_repr(&msg, col.err.data ? col.err.data : "", col.err.len);
            rk_reply_error(r, RK_E_COMMAND, rk_buf_cstr(&msg));
            rk_buf_free(&msg);
        } else {
            json_object *result = json_object_new_object();
            json_object_object_add(result, "stdout", json_text(col.out.data, col.out.len));
            json_object_object_add(result, "stderr", json_text(col.err.data, col.err.len));
            /* TS rejects a null exit_code: omit it when the backend gave none. */
            if (res.has_exit_code)
                json_object_object_add(result, "exit_code", json_object_new_int(res.exit_code));
            rk_reply_ok(r, result);
        }
    }
    rk_target_release(&t);
out:
    collector_free(&col);
    rk_buf_free(&cmd);
    rk_v_free(&v);
    json_object_put(body);
}

/* ---- sessions ----------------------------------------------------------- */

/* Look a session name up in the registry. Returns RK_OK with a malloc'd id,
 * or replies itself (missing name or store failure) and returns non-OK. */
static rk_status lookup_session(struct rk_req *r, const char *sandbox_id, const char *name,
                                char **session_id)
{
    char err[RK_STORE_ERRLEN] = "";
    *session_id = NULL;
    rk_store_rc rc = rk_session_get(r->app->store, sandbox_id, name, session_id, err, sizeof err);
    if (rc == RK_STORE_OK && *session_id)
        return RK_OK;
    free(*session_id);
    *session_id = NULL;
    if (rc == RK_STORE_NOT_FOUND || rc == RK_STORE_OK) {
        char *msg = rk_arena_printf(r->call, "session '%s' does not exist", name);
        rk_reply_error(r, RK_E_COMMAND, msg);
        return RK_E_NOT_FOUND;
    }
    char *msg = rk_arena_printf(r->call, "session registry unavailable: %s", err);
    rk_reply_error(r, RK_E_UNAVAILABLE, msg);
    return RK_E_UNAVAILABLE;
}

/* Drop a reservation after a failed create; failures are only logged (B83). */
static void rollback_reservation(struct rk_req *r, const char *sandbox_id, const char *name,
                                 const char *token)
{
    char err[RK_STORE_ERRLEN] = "";
    rk_store_rc rc = rk_session_rollback(r->app->store, sandbox_id, name, token, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        rk_warn("[%s] cannot roll back session reservation: %s", sandbox_id, err);
    else if (rc != RK_STORE_OK)
        rk_info("[%s] session reservation was already gone at rollback", sandbox_id);
}

/* POST /create_session (§5.6, B66-B71, B79-B84). */
void rk_route_create_session(struct rk_req *r)
{
    struct rk_v v;
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *id = rk_v_str(&v, body, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    const char *name = rk_v_str(&v, body, "session", 0, "default");
    v_literal(&v, body, "session_type", bash_only, "bash");
    json_object *sources = rk_v_strlist(&v, body, "startup_source", 0);
    /* env_enable is accepted and ignored: the admin's environment never
     * crosses into a sandbox. */
    (void)rk_v_bool(&v, body, "env_enable", 0, 0);
    json_object *env = rk_v_strmap(&v, body, "env", 0);
    const char *remote_user = rk_v_str(&v, body, "remote_user", 0, NULL);
    double startup_s;
    int has_startup = opt_seconds(&v, body, "startup_timeout", 1, 1.0, &startup_s);
    (void)rk_v_int(&v, body, "max_read_size", 0, 2000, NULL);
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        goto out;
    }

    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_SESSION_CREATE, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        goto out;
    }
    const char *sid = t.ref.sandbox_id;
    char token[128] = "";
    char err[RK_STORE_ERRLEN] = "";
    rk_store_rc rc =
        rk_session_reserve(r->app->store, sid, name, r->app->cfg->runtime.session_reservation_ttl_s,
                           token, err, sizeof err);
    if (rc == RK_STORE_EXISTS) {
        rk_reply_error(r, RK_E_COMMAND,
                       rk_arena_printf(r->call, "session '%s' already exists", name));
        goto release;
    }
    if (rc != RK_STORE_OK) {
        rk_reply_error(r, RK_E_UNAVAILABLE,
                       rk_arena_printf(r->call, "session registry unavailable: %s", err));
        goto release;
    }

    const struct rk_plugin *pl = r->app->plugin;
    struct rk_session_opts opts = {
        .remote_user = remote_user,
        .startup_timeout_ms = seconds_to_ms(has_startup, startup_s),
    };
    opts.env = env_overlay(r->call, t.rec, env, &opts.env_len);
    size_t nsrc = sources ? json_object_array_length(sources) : 0;
    if (nsrc) {
        const char **src = rk_arena_alloc(r->call, nsrc * sizeof *src);
        for (size_t i = 0; i < nsrc; i++)
            src[i] = json_object_get_string(json_object_array_get_idx(sources, i));
        opts.startup_source = src;
        opts.startup_source_len = nsrc;
    }
    struct rk_session_opened opened = {0};
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.session_open(pl->inst, r->call, &t.ref, &opts, &opened);
    rk_metrics_upstream("session_open", st);
    if (st == RK_OK && !opened.session_id)
        st =
            rk_call_set_error(r->call, RK_E_INTERNAL, "%s returned no session id", display_name(r));
    if (st != RK_OK) {
        /* B82: release the name, then report the original error. */
        rollback_reservation(r, sid, name, token);
        reply_plugin_error(r, st);
        goto release;
    }

    rc = rk_session_commit(r->app->store, sid, name, token, opened.session_id, err, sizeof err);
    if (rc != RK_STORE_OK) {
        /* B83/B84: close the remote session and roll back; their failures
         * are only logged, the commit error is what the client sees. */
        rk_status fst = rc == RK_STORE_CONFLICT ? RK_E_COMMAND : RK_E_UNAVAILABLE;
        const char *text =
            rc == RK_STORE_CONFLICT
                ? rk_arena_printf(r->call, "%s session reservation expired before commit",
                                  display_name(r))
                : rk_arena_printf(r->call, "session registry commit failed: %s", err);
        rk_metrics_upstream_begin();
        rk_status cst = pl->ops.session_close(pl->inst, r->call, &t.ref, opened.session_id);
        rk_metrics_upstream("session_close", cst);
        if (cst != RK_OK)
            rk_warn("[%s] cannot close session after a failed commit: %s", sid,
                    rk_call_error_text(r->call));
        rollback_reservation(r, sid, name, token);
        rk_reply_error(r, fst, text);
        goto release;
    }

    json_object *result = json_object_new_object();
    const char *output = opened.output ? opened.output : "";
    json_object_object_add(result, "output", json_text(output, strlen(output)));
    json_object_object_add(result, "session_type", json_object_new_string("bash"));
    rk_reply_ok(r, result);
release:
    rk_target_release(&t);
out:
    rk_v_free(&v);
    json_object_put(body);
}

/* POST /run_in_session (§5.7, B72-B75, B85-B86, U30). */
void rk_route_run_in_session(struct rk_req *r)
{
    static const char *const checks[] = {"raise", "silent", "ignore", NULL};
    struct rk_v v;
    char *session_id = NULL;
    struct collector col;
    collector_init(&col, r->call, r->app->cfg->server.max_output_bytes, "command output",
                   "server.max_output_bytes");
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *id = rk_v_str(&v, body, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    const char *command = rk_v_str(&v, body, "command", RK_V_REQUIRED, NULL);
    const char *name = rk_v_str(&v, body, "session", 0, "default");
    v_literal(&v, body, "action_type", bash_only, "bash");
    double timeout_s;
    int has_timeout = opt_seconds(&v, body, "timeout", 0, 0, &timeout_s);
    const char *check = v_literal(&v, body, "check", checks, "raise");
    int interactive = rk_v_bool(&v, body, "is_interactive_command", 0, 0);
    int quit = rk_v_bool(&v, body, "is_interactive_quit", 0, 0);
    json_object *expect = rk_v_strlist(&v, body, "expect", 0);
    const char *error_msg = rk_v_str(&v, body, "error_msg", 0, "");
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        goto out;
    }

    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_SESSION_RUN, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        goto out;
    }
    /* U30: an unknown name is reported before the interactive check. */
    if (lookup_session(r, t.ref.sandbox_id, name, &session_id) != RK_OK)
        goto release;
    const struct rk_plugin *pl = r->app->plugin;
    size_t n_expect = expect ? json_object_array_length(expect) : 0;
    struct rk_session_req req = {.command = command,
                                 .timeout_ms = seconds_to_ms(has_timeout, timeout_s)};
    if (interactive || quit || n_expect > 0) {
        /* Interactive flags and expect strings reach session_run only for a
         * plugin that declares RK_CAP_SESSION_INTERACTIVE and was built for
         * ABI >= 1.1 (1.0 had no fields to carry them); otherwise they are
         * refused with the plugin's own text. */
        if (!(pl->desc->caps & RK_CAP_SESSION_INTERACTIVE) || !rk_plugin_minor_at_least(pl, 1)) {
            char buf[256];
            rk_reply_error(r, RK_E_UNSUPPORTED,
                           rk_plugin_unsupported(pl, RK_CAP_SESSION_INTERACTIVE,
                                                 "interactive session commands", buf, sizeof buf));
            goto release;
        }
        req.flags =
            (interactive ? RK_SESSF_INTERACTIVE : 0u) | (quit ? RK_SESSF_INTERACTIVE_QUIT : 0u);
        if (n_expect) {
            const char **ev = rk_arena_alloc(r->call, n_expect * sizeof *ev);
            for (size_t i = 0; i < n_expect; i++)
                ev[i] = json_object_get_string(json_object_array_get_idx(expect, i));
            req.expect = ev;
            req.expect_len = n_expect;
        }
    }

    struct rk_sink sink = {.write = collector_write, .ctx = &col};
    struct rk_exec_res res = {0};
    set_command_deadline(r, req.timeout_ms);
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.session_run(pl->inst, r->call, &t.ref, session_id, &req, &sink, &res);
    rk_metrics_upstream("session_run", st);

    if (collector_reply_busy(r, &col))
        goto release;
    if (is_timeout(r->call, st, &res)) {
        char tbuf[64], msg[128];
        timeout_repr(has_timeout, timeout_s, tbuf);
        snprintf(msg, sizeof msg, "Timeout (%ss) exceeded while running session command", tbuf);
        rk_reply_error(r, RK_E_TIMEOUT, msg);
        goto release;
    }
    if (st != RK_OK) {
        reply_plugin_error(r, st);
        goto release;
    }
    /* B72: the output is stdout followed by stderr. */
    struct rk_buf output = {0};
    rk_buf_append(&output, col.out.data ? col.out.data : "", col.out.len);
    rk_buf_append(&output, col.err.data ? col.err.data : "", col.err.len);
    append_error_text(&output, res.error_text);
    if (strcmp(check, "raise") == 0 && (!res.has_exit_code || res.exit_code != 0)) {
        /* B73: prefix: Command '<cmd>' failed with exit code N. Here is the output:\n'..' */
        struct rk_buf msg = {0};
        char code[24];
        exit_repr(&res, code);
        if (*error_msg)
            rk_buf_printf(&msg, "%s: ", error_msg);
        rk_buf_printf(&msg, "Command ");
        rk_py_repr(&msg, command, strlen(command));
        rk_buf_printf(&msg, " failed with exit code %s. Here is the output:\n", code);
        rk_py_repr(&msg, output.data ? output.data : "", output.len);
        rk_reply_error(r, RK_E_COMMAND, rk_buf_cstr(&msg));
        rk_buf_free(&msg);
    } else if (strcmp(check, "silent") == 0 && res.has_exit_code && res.exit_code == -1) {
        /* §2.7: an observation with exit code -1 is Failed with a null
         * message and its (empty) failure_reason as the error. */
        r->outcome = "failed";
        rk_req_reply_json(r, 200, rk_envelope_failure(NULL, "", 0, RK_SHAPE_NULL));
    } else {
        json_object *result = json_object_new_object();
        json_object_object_add(result, "session_type", json_object_new_string("bash"));
        json_object_object_add(result, "output", json_text(output.data, output.len));
        /* B74: ignore returns no exit code; omit the key (TS rejects null). */
        if (strcmp(check, "ignore") != 0 && res.has_exit_code)
            json_object_object_add(result, "exit_code", json_object_new_int(res.exit_code));
        json_object_object_add(result, "failure_reason", json_object_new_string(""));
        /* expect_string (1.1): what matched, from a plugin that knows the field. */
        const char *matched = rk_plugin_minor_at_least(pl, 1) ? res.expect_string : NULL;
        json_object_object_add(result, "expect_string",
                               json_object_new_string(matched ? matched : ""));
        rk_reply_ok(r, result);
    }
    rk_buf_free(&output);
release:
    rk_target_release(&t);
out:
    free(session_id);
    collector_free(&col);
    rk_v_free(&v);
    json_object_put(body);
}

/* POST /close_session (§5.8, B76, B87-B88). */
void rk_route_close_session(struct rk_req *r)
{
    struct rk_v v;
    char *session_id = NULL;
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *id = rk_v_str(&v, body, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    const char *name = rk_v_str(&v, body, "session", 0, "default");
    v_literal(&v, body, "session_type", bash_only, "bash");
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        goto out;
    }

    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_SESSION_CLOSE, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        goto out;
    }
    if (lookup_session(r, t.ref.sandbox_id, name, &session_id) != RK_OK)
        goto release;
    const struct rk_plugin *pl = r->app->plugin;
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.session_close(pl->inst, r->call, &t.ref, session_id);
    rk_metrics_upstream("session_close", st);
    if (st != RK_OK) {
        /* B88: the mapping is kept when the remote delete fails. */
        reply_plugin_error(r, st);
        goto release;
    }
    char err[RK_STORE_ERRLEN] = "";
    rk_store_rc rc =
        rk_session_remove(r->app->store, t.ref.sandbox_id, name, session_id, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        rk_warn("[%s] session closed but its name mapping could not be removed: %s",
                t.ref.sandbox_id, err);
    json_object *result = json_object_new_object();
    json_object_object_add(result, "session_type", json_object_new_string("bash"));
    rk_reply_ok(r, result);
release:
    rk_target_release(&t);
out:
    free(session_id);
    rk_v_free(&v);
    json_object_put(body);
}

/* ---- files -------------------------------------------------------------- */

/* POST /read_file (§5.9, B56, U25). */
void rk_route_read_file(struct rk_req *r)
{
    struct rk_v v;
    struct collector col;
    collector_init(&col, r->call, r->app->cfg->server.max_read_bytes, "file",
                   "server.max_read_bytes");
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *id = rk_v_str(&v, body, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    const char *path = rk_v_str(&v, body, "path", RK_V_REQUIRED, NULL);
    const char *encoding = rk_v_str(&v, body, "encoding", 0, "utf-8");
    const char *errors = rk_v_str(&v, body, "errors", 0, "strict");
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        goto out;
    }

    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_FILE_READ, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        goto out;
    }
    const struct rk_plugin *pl = r->app->plugin;
    struct rk_sink sink = {.write = collector_write, .ctx = &col};
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.file_read(pl->inst, r->call, &t.ref, path, &sink);
    rk_metrics_upstream("file_read", st);
    if (collector_reply_busy(r, &col))
        goto release;
    if (st != RK_OK) {
        /* §5.9: a missing file is a backend error (5000, B61), not a bad
         * request; the route shape keeps {"content":""}. */
        if (rk_call_error_code(r->call) == RK_E_NOT_FOUND ||
            (st == RK_E_NOT_FOUND && rk_call_error_code(r->call) == RK_OK))
            rk_reply_error(r, RK_E_UPSTREAM, rk_call_error_text(r->call));
        else
            reply_plugin_error(r, st);
        goto release;
    }
    /* Stderr chunks are not expected for files; treat them as data. */
    rk_buf_append(&col.out, col.err.data ? col.err.data : "", col.err.len);
    char *text = NULL;
    size_t text_len = 0;
    char msg[256];
    enum rk_decode_rc drc =
        rk_decode(col.out.data, col.out.len, encoding, errors, &text, &text_len, msg, sizeof msg);
    collector_free(&col);
    if (drc == RK_DECODE_NOMEM) {
        rk_reply_error(r, RK_E_NOMEM, msg);
    } else if (drc != RK_DECODE_OK) {
        /* Decode failures are generic exceptions: Failed with result null. */
        rk_reply_error(r, RK_E_COMMAND, msg);
    } else {
        json_object *result = json_object_new_object();
        json_object_object_add(result, "content", json_object_new_string_len(text, (int)text_len));
        free(text);
        rk_reply_ok(r, result);
    }
release:
    rk_target_release(&t);
out:
    collector_free(&col);
    rk_v_free(&v);
    json_object_put(body);
}

/* A source over an in-memory string (write_file content). */
struct mem_source {
    const char *p;
    size_t left;
};

/* rk_source.read over a mem_source. */
static long long mem_source_read(void *ctx, char *buf, size_t len)
{
    struct mem_source *m = ctx;
    size_t n = m->left < len ? m->left : len;
    memcpy(buf, m->p, n);
    m->p += n;
    m->left -= n;
    return (long long)n;
}

/* POST /write_file (§5.10, B57-B59). */
void rk_route_write_file(struct rk_req *r)
{
    struct rk_v v;
    rk_v_init(&v, r->call, "body");
    json_object *body = rk_v_body(&v, r);
    const char *id = rk_v_str(&v, body, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    (void)rk_v_str(&v, body, "content", RK_V_REQUIRED, NULL);
    const char *path = rk_v_str(&v, body, "path", RK_V_REQUIRED, NULL);
    if (!rk_v_ok(&v)) {
        rk_reply_invalid(r, rk_v_text(&v));
        goto out;
    }
    /* The content may hold NUL bytes: take it with its length from the JSON. */
    json_object *cval = NULL;
    json_object_object_get_ex(body, "content", &cval);
    struct mem_source ms = {.p = json_object_get_string(cval),
                            .left = (size_t)json_object_get_string_len(cval)};

    struct rk_target t;
    if (rk_dispatch(r->app, r->call, RK_OP_FILE_WRITE, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        goto out;
    }
    const struct rk_plugin *pl = r->app->plugin;
    /* B57-B59: keep an existing file's mode, 0644 for a new one; a failed
     * lookup aborts without writing. */
    struct rk_file_info info = {0};
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.file_stat(pl->inst, r->call, &t.ref, path, &info);
    rk_metrics_upstream("file_stat", st);
    if (st != RK_OK) {
        reply_plugin_error(r, st);
        goto release;
    }
    unsigned mode = info.exists ? (info.mode & 07777) : 0644;
    struct rk_source src = {.read = mem_source_read, .ctx = &ms, .size = (long long)ms.left};
    rk_metrics_upstream_begin();
    st = pl->ops.file_write(pl->inst, r->call, &t.ref, path, mode, &src);
    rk_metrics_upstream("file_write", st);
    if (st != RK_OK) {
        reply_plugin_error(r, st);
        goto release;
    }
    json_object *result = json_object_new_object();
    json_object_object_add(result, "success", json_object_new_boolean(1));
    json_object_object_add(result, "message", json_object_new_string(""));
    rk_reply_ok(r, result);
release:
    rk_target_release(&t);
out:
    rk_v_free(&v);
    json_object_put(body);
}
