/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /create_session, /run_in_session and /close_session (§5.6-5.8,
 * B66-B89): named bash sessions. A name is reserved in the store's session
 * registry before the plugin opens the session and committed after, so two
 * admins never open one name twice; a failed open or commit rolls it back.
 */
#include <stdlib.h>
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "api/runtime.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "engine/envelope.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"
#include "store/store.h"

/* run_in_session's `check`, parsed once from its literal. */
enum check { CHECK_RAISE, CHECK_SILENT, CHECK_IGNORE };
static const char *const check_names[] = {"raise", "silent", "ignore", NULL};

/* Reply the 5000 "session registry unavailable: <err>". */
static void reply_registry_error(struct rk_req *r, const char *err)
{
    rk_reply_error(r, RK_E_UNAVAILABLE,
                   rk_arena_printf(r->call, "session registry unavailable: %s", err));
}

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
    reply_registry_error(r, err);
    return RK_E_UNAVAILABLE;
}

/* The gate for op, then the id of the session name (malloc'd). Replies and
 * returns -1 on failure. */
static int gate_session(struct rk_route_path *p, enum rk_op op, const char *id, const char *name,
                        char **session_id)
{
    if (rk_path_gate(p, op, id) != 0)
        return -1;
    return lookup_session(p->r, p->t.ref.sandbox_id, name, session_id) == RK_OK ? 0 : -1;
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
    struct rk_route_path p;
    const char *id = rk_path_sandbox(&p, r);
    const char *name = rk_v_str(&p.v, p.body, "session", RK_V_SESSION, "default");
    rk_v_choice(&p.v, p.body, "session_type", rk_bash_only, 0);
    json_object *sources = rk_v_strlist(&p.v, p.body, "startup_source", 0);
    /* env_enable is accepted and ignored: the admin's environment never
     * crosses into a sandbox. */
    (void)rk_v_bool(&p.v, p.body, "env_enable", 0, 0);
    json_object *env = rk_v_strmap(&p.v, p.body, "env", 0);
    const char *remote_user = rk_v_str(&p.v, p.body, "remote_user", 0, NULL);
    double startup_s;
    int has_startup = rk_v_opt_seconds(&p.v, p.body, "startup_timeout", 1, 1.0, &startup_s);
    (void)rk_v_int(&p.v, p.body, "max_read_size", 0, 2000, NULL);
    if (rk_path_gate(&p, RK_OP_SESSION_CREATE, id) != 0)
        goto out;
    const char *sid = p.t.ref.sandbox_id;
    char token[128] = "";
    char err[RK_STORE_ERRLEN] = "";
    rk_store_rc rc =
        rk_session_reserve(r->app->store, sid, name, r->app->cfg->runtime.session_reservation_ttl_s,
                           token, err, sizeof err);
    if (rc == RK_STORE_EXISTS) {
        rk_reply_error(r, RK_E_COMMAND,
                       rk_arena_printf(r->call, "session '%s' already exists", name));
        goto out;
    }
    if (rc != RK_STORE_OK) {
        reply_registry_error(r, err);
        goto out;
    }

    const struct rk_plugin *pl = r->app->plugin;
    struct rk_session_opts opts = {
        .remote_user = remote_user,
        .startup_timeout_ms = rk_seconds_to_ms(has_startup, startup_s),
    };
    opts.env = rk_env_overlay(r->call, p.t.rec, env, &opts.env_len);
    opts.startup_source = rk_v_strings(&p.v, sources, &opts.startup_source_len);
    struct rk_session_opened opened = {0};
    rk_status st;
    RK_UPSTREAM(st, pl, session_open, r->call, &p.t.ref, &opts, &opened);
    if (st == RK_OK && !opened.session_id)
        st = rk_call_set_error(r->call, RK_E_INTERNAL, "%s returned no session id",
                               rk_display_name(r));
    if (st != RK_OK) {
        /* B82: release the name, then report the original error. */
        rollback_reservation(r, sid, name, token);
        rk_path_fail(&p, st);
        goto out;
    }

    rc = rk_session_commit(r->app->store, sid, name, token, opened.session_id, err, sizeof err);
    if (rc != RK_STORE_OK) {
        /* B83/B84: close the remote session and roll back; their failures
         * are only logged, the commit error is what the client sees. */
        rk_status fst = rc == RK_STORE_CONFLICT ? RK_E_COMMAND : RK_E_UNAVAILABLE;
        const char *text =
            rc == RK_STORE_CONFLICT
                ? rk_arena_printf(r->call, "%s session reservation expired before commit",
                                  rk_display_name(r))
                : rk_arena_printf(r->call, "session registry commit failed: %s", err);
        rk_status cst;
        RK_UPSTREAM(cst, pl, session_close, r->call, &p.t.ref, opened.session_id);
        if (cst != RK_OK)
            rk_warn("[%s] cannot close session after a failed commit: %s", sid,
                    rk_call_error_text(r->call));
        rollback_reservation(r, sid, name, token);
        rk_reply_error(r, fst, text);
        goto out;
    }

    json_object *result = json_object_new_object();
    const char *output = opened.output ? opened.output : "";
    json_object_object_add(result, "output", rk_json_text(output, strlen(output)));
    json_object_object_add(result, "session_type", json_object_new_string("bash"));
    rk_reply_ok(r, result);
out:
    rk_path_end(&p);
}

/* The answer to a session command that ran (B72-B74): check=raise's failure
 * text for a non-zero exit, silent's observation of exit -1, else the
 * output (stdout then stderr) and the exit code. */
static void reply_ran(struct rk_req *r, struct rk_collector *col, const struct rk_exec_res *res,
                      enum check check, const char *command, const char *error_msg)
{
    /* B72: the output is stdout followed by stderr. */
    struct rk_buf output = {0};
    rk_buf_append(&output, col->out.data ? col->out.data : "", col->out.len);
    rk_buf_append(&output, col->err.data ? col->err.data : "", col->err.len);
    rk_append_error_text(&output, res->error_text);
    if (check == CHECK_RAISE && (!res->has_exit_code || res->exit_code != 0)) {
        /* B73: prefix: Command '<cmd>' failed with exit code N. Here is the output:\n'..' */
        struct rk_buf msg = {0};
        char code[24];
        rk_exit_repr(res, code);
        if (*error_msg)
            rk_buf_printf(&msg, "%s: ", error_msg);
        rk_buf_printf(&msg, "Command ");
        rk_py_repr(&msg, command, strlen(command));
        rk_buf_printf(&msg, " failed with exit code %s. Here is the output:\n", code);
        rk_py_repr(&msg, output.data ? output.data : "", output.len);
        rk_reply_error(r, RK_E_COMMAND, rk_buf_cstr(&msg));
        rk_buf_free(&msg);
    } else if (check == CHECK_SILENT && res->has_exit_code && res->exit_code == -1) {
        /* §2.7: an observation with exit code -1 is Failed with a null
         * message and its (empty) failure_reason as the error. */
        r->outcome = "failed";
        rk_req_reply_json(r, 200, rk_envelope_failure(NULL, "", 0, RK_SHAPE_NULL));
    } else {
        json_object *result = json_object_new_object();
        json_object_object_add(result, "session_type", json_object_new_string("bash"));
        json_object_object_add(result, "output", rk_json_text(output.data, output.len));
        /* B74: ignore returns no exit code; omit the key (TS rejects null). */
        if (check != CHECK_IGNORE && res->has_exit_code)
            json_object_object_add(result, "exit_code", json_object_new_int(res->exit_code));
        json_object_object_add(result, "failure_reason", json_object_new_string(""));
        /* expect_string (1.1): what matched, from a plugin that knows the field. */
        const char *matched =
            rk_plugin_minor_at_least(r->app->plugin, 1) ? res->expect_string : NULL;
        json_object_object_add(result, "expect_string",
                               json_object_new_string(matched ? matched : ""));
        rk_reply_ok(r, result);
    }
    rk_buf_free(&output);
}

/* One /run_in_session command from the gate to the reply: what the reply
 * needs once the plugin reports the end (on its own thread for
 * session_run_start). */
struct session_run {
    struct rk_command_async a; /* collector, result, completion */
    struct rk_session_req req; /* strings in the call's arena */
    struct rk_sandbox_ref ref; /* strings in the call's arena */
    char *session_id;          /* malloc'd */
    int has_timeout;
    double timeout_s;
    enum check check;
    const char *error_msg;
};

/* The session command's outcome onto the envelope; frees the run. */
static void session_run_complete(struct rk_command_async *a, rk_status st)
{
    struct session_run *run = (struct session_run *)a;
    struct rk_req *r = a->r;
    if (rk_collector_reply_busy(r, &a->col)) {
        /* answered 503 */
    } else if (rk_command_timed_out(r->call, st, &a->res)) {
        rk_reply_timeout(r, run->has_timeout, run->timeout_s, "session command");
    } else if (st != RK_OK) {
        rk_reply_plugin_failure(r, st);
    } else {
        reply_ran(r, &a->col, &a->res, run->check, run->req.command, run->error_msg);
    }
    rk_collector_free(&a->col);
    free(run->session_id);
    free(run);
}

/* POST /run_in_session (§5.7, B72-B75, B85-B86, U30). */
void rk_route_run_in_session(struct rk_req *r)
{
    struct session_run *run = calloc(1, sizeof *run);
    if (!run)
        abort();
    rk_command_async_init(&run->a, r, "session_run", session_run_complete);
    struct rk_route_path p;
    const char *id = rk_path_sandbox(&p, r);
    const char *command = rk_v_str(&p.v, p.body, "command", RK_V_REQUIRED, NULL);
    const char *name = rk_v_str(&p.v, p.body, "session", RK_V_SESSION, "default");
    rk_v_choice(&p.v, p.body, "action_type", rk_bash_only, 0);
    run->has_timeout = rk_v_opt_seconds(&p.v, p.body, "timeout", 0, 0, &run->timeout_s);
    run->check = (enum check)rk_v_choice(&p.v, p.body, "check", check_names, CHECK_RAISE);
    int interactive = rk_v_bool(&p.v, p.body, "is_interactive_command", 0, 0);
    int quit = rk_v_bool(&p.v, p.body, "is_interactive_quit", 0, 0);
    json_object *expect = rk_v_strlist(&p.v, p.body, "expect", 0);
    run->error_msg = rk_v_str(&p.v, p.body, "error_msg", 0, "");
    /* U30: an unknown name is reported before the interactive check. */
    if (gate_session(&p, RK_OP_SESSION_RUN, id, name, &run->session_id) != 0)
        goto refused;
    const struct rk_plugin *pl = r->app->plugin;
    size_t n_expect = expect ? json_object_array_length(expect) : 0;
    run->req.command = command;
    run->req.timeout_ms = rk_seconds_to_ms(run->has_timeout, run->timeout_s);
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
            goto refused;
        }
        run->req.flags =
            (interactive ? RK_SESSF_INTERACTIVE : 0u) | (quit ? RK_SESSF_INTERACTIVE_QUIT : 0u);
        const char **items = rk_v_strings(&p.v, expect, &run->req.expect_len);
        /* copies: the body is released before the command runs */
        for (size_t i = 0; i < run->req.expect_len; i++)
            items[i] = rk_arena_strdup(r->call, items[i]);
        run->req.expect = items;
    }
    rk_target_detach(&p.t, r->call);
    run->ref = p.t.ref;
    rk_path_end(&p);
    rk_command_deadline(r, run->req.timeout_ms);
    if (pl->ops.session_run_start) {
        /* ABI 1.2: no thread waits for the command; the reply is built where
         * the plugin reports its end. Neither run nor r is ours after this. */
        rk_command_async_begin(&run->a);
        rk_command_async_started(&run->a, pl->ops.session_run_start(pl->inst, r->call, &run->ref,
                                                                    run->session_id, &run->req,
                                                                    &run->a.sink, &run->a.res));
        return;
    }
    rk_status st;
    RK_UPSTREAM(st, pl, session_run, r->call, &run->ref, run->session_id, &run->req, &run->a.sink,
                &run->a.res);
    session_run_complete(&run->a, st);
    return;
refused:
    rk_path_end(&p);
    rk_collector_free(&run->a.col);
    free(run->session_id);
    free(run);
}

/* POST /close_session (§5.8, B76, B87-B88). */
void rk_route_close_session(struct rk_req *r)
{
    char *session_id = NULL;
    struct rk_route_path p;
    const char *id = rk_path_sandbox(&p, r);
    const char *name = rk_v_str(&p.v, p.body, "session", RK_V_SESSION, "default");
    rk_v_choice(&p.v, p.body, "session_type", rk_bash_only, 0);
    if (gate_session(&p, RK_OP_SESSION_CLOSE, id, name, &session_id) != 0)
        goto out;
    const struct rk_plugin *pl = r->app->plugin;
    rk_status st;
    RK_UPSTREAM(st, pl, session_close, r->call, &p.t.ref, session_id);
    if (st != RK_OK) {
        /* B88: the mapping is kept when the remote delete fails. */
        rk_path_fail(&p, st);
        goto out;
    }
    char err[RK_STORE_ERRLEN] = "";
    rk_store_rc rc =
        rk_session_remove(r->app->store, p.t.ref.sandbox_id, name, session_id, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        rk_warn("[%s] session closed but its name mapping could not be removed: %s",
                p.t.ref.sandbox_id, err);
    json_object *result = json_object_new_object();
    json_object_object_add(result, "session_type", json_object_new_string("bash"));
    rk_reply_ok(r, result);
out:
    free(session_id);
    rk_path_end(&p);
}
