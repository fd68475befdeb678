/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /execute (wire contract §5.5, B47-B55): one command in the sandbox,
 * its output collected (runtime.h) and mapped onto the ROCK envelope, with
 * check=True's failure text. The command text is never logged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "api/runtime.h"
#include "base/app.h"
#include "base/util.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"

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

/* The answer to a command that ran: check=True's failure text for a
 * non-zero exit (B50), else stdout, stderr and the exit code. */
static void reply_ran(struct rk_req *r, struct rk_collector *col, const struct rk_exec_res *res,
                      int check, const char *error_msg)
{
    rk_append_error_text(&col->err, res->error_text);
    if (check && (!res->has_exit_code || res->exit_code != 0)) {
        /* B50: prefix: Command failed with exit code N. Stdout:\n'..'\nStderr:\n'..' */
        struct rk_buf msg = {0};
        char code[24];
        rk_exit_repr(res, code);
        if (*error_msg)
            rk_buf_printf(&msg, "%s: ", error_msg);
        rk_buf_printf(&msg, "Command failed with exit code %s. Stdout:\n", code);
        rk_py_repr(&msg, col->out.data ? col->out.data : "", col->out.len);
        rk_buf_printf(&msg, "\nStderr:\n");
        rk_py_repr(&msg, col->err.data ? col->err.data : "", col->err.len);
        rk_reply_error(r, RK_E_COMMAND, rk_buf_cstr(&msg));
        rk_buf_free(&msg);
        return;
    }
    json_object *result = json_object_new_object();
    json_object_object_add(result, "stdout", rk_json_text(col->out.data, col->out.len));
    json_object_object_add(result, "stderr", rk_json_text(col->err.data, col->err.len));
    /* TS rejects a null exit_code: omit it when the backend gave none. */
    if (res->has_exit_code)
        json_object_object_add(result, "exit_code", json_object_new_int(res->exit_code));
    rk_reply_ok(r, result);
}

/* One /execute command from the gate to the reply: what the reply needs
 * once the plugin reports the end (on its own thread for exec_start). */
struct exec_run {
    struct rk_command_async a; /* collector, result, completion */
    struct rk_buf cmd;
    struct rk_exec_req req;
    struct rk_sandbox_ref ref; /* strings in the call's arena */
    int has_timeout;
    double timeout_s;
    int check;
    const char *error_msg;
};

/* The command's outcome onto the envelope; frees the run. */
static void exec_complete(struct rk_command_async *a, rk_status st)
{
    struct exec_run *run = (struct exec_run *)a;
    struct rk_req *r = a->r;
    if (rk_collector_reply_busy(r, &a->col)) {
        /* answered 503 */
    } else if (rk_command_timed_out(r->call, st, &a->res)) /* B51: before output and `check` */
        rk_reply_timeout(r, run->has_timeout, run->timeout_s, "command");
    else if (st != RK_OK)
        rk_reply_plugin_failure(r, st);
    else
        reply_ran(r, &a->col, &a->res, run->check, run->error_msg);
    rk_collector_free(&a->col);
    rk_buf_free(&run->cmd);
    free(run);
}

/* POST /execute (§5.5). */
void rk_route_execute(struct rk_req *r)
{
    struct rk_route_path p;
    struct exec_run *run = calloc(1, sizeof *run);
    if (!run)
        abort();
    rk_command_async_init(&run->a, r, "exec", exec_complete);
    const char *id = rk_path_sandbox(&p, r);
    json_object *body = p.body;
    int is_string = parse_command(&p.v, body, &run->cmd);
    run->has_timeout = rk_v_opt_seconds(&p.v, body, "timeout", 1, 1200.0, &run->timeout_s);
    const char *cwd = rk_v_str(&p.v, body, "cwd", 0, NULL);
    json_object *env = rk_v_strmap(&p.v, body, "env", 0);
    int shell = rk_v_bool(&p.v, body, "shell", 0, 0);
    run->check = rk_v_bool(&p.v, body, "check", 0, 0);
    run->error_msg = rk_v_str(&p.v, body, "error_msg", 0, "");
    rk_v_choice(&p.v, body, "session_type", rk_bash_only, 0);
    if (rk_path_gate(&p, RK_OP_EXEC, id) != 0) {
        rk_path_end(&p);
        rk_collector_free(&run->a.col);
        rk_buf_free(&run->cmd);
        free(run);
        return;
    }
    /* B48: one warning, never the command text. */
    if (is_string == 1 && !shell)
        rk_warn("[%s] %s executes string commands with shell semantics although shell=False",
                p.t.ref.sandbox_id, rk_display_name(r));

    const struct rk_plugin *pl = r->app->plugin;
    run->req.command = rk_buf_cstr(&run->cmd);
    run->req.cwd = cwd;
    run->req.timeout_ms = rk_seconds_to_ms(run->has_timeout, run->timeout_s);
    run->req.env = rk_env_overlay(r->call, p.t.rec, env, &run->req.env_len);
    /* An in-flight command keeps neither the parsed record nor the parsed body (memory per
     * in-flight command): rk_v_str values and the env overlay are arena copies. */
    rk_target_detach(&p.t, r->call);
    run->ref = p.t.ref;
    rk_path_end(&p);
    rk_command_deadline(r, run->req.timeout_ms);
    if (pl->ops.exec_start) {
        /* ABI 1.2: no thread waits for the command; the reply is built where
         * the plugin reports its end. Neither run nor r is ours after this. */
        rk_command_async_begin(&run->a);
        rk_command_async_started(&run->a, pl->ops.exec_start(pl->inst, r->call, &run->ref,
                                                             &run->req, &run->a.sink, &run->a.res));
        return;
    }
    rk_status st;
    RK_UPSTREAM(st, pl, exec, r->call, &run->ref, &run->req, &run->a.sink, &run->a.res);
    exec_complete(&run->a, st);
}
