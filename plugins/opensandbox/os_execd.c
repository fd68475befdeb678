/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_execd.c
 * @brief execd requests: URL/header composition and streamed command runs.
 */
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "os_internal.h"

/** Deadline used when a command has no timeout (cancellation still applies). */
#define OS_NO_TIMEOUT_DEADLINE_MS (24LL * 3600 * 1000)
/** Timeout of the best-effort interrupt sent after giving up on a command. */
#define OS_INTERRUPT_TIMEOUT_MS 5000

/** Prepare an execd request: endpoint base + path, endpoint headers verbatim, no API key. */
rk_status os_execd_xfer(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
                        const struct os_endpoint *ep, const char *method, const char *path,
                        int64_t timeout_ms)
{
    memset(x, 0, sizeof(*x));
    struct os_sb sb = {0};
    os_sb_printf(&sb, "%s%s", ep->base, path);
    char *url = os_sb_take(&sb);
    if (!url)
        return RK_E_NOMEM;
    rk_status s = os_xfer_init(x, inst, call, method, url, timeout_ms);
    free(url);
    for (size_t i = 0; s == RK_OK && i < ep->headers_len; i++)
        s = os_xfer_header(x, ep->headers[i].key, ep->headers[i].value);
    return s;
}

/** State shared by the stream callbacks of one run. */
struct run_ctx {
    const struct rk_sink *sink;
    struct os_stream st;
    int session;
    int done;
    rk_status sink_status;
    struct os_xfer *x; /**< the exchange, to bound the read of the stream's tail */
};

/** After the terminal event the rest of the stream is read (so the connection can be reused) for
 *  at most this long; execd ends the response right after the terminal event. */
#define OS_STREAM_TAIL_MS 1000

/** Parser output: forward to the core's sink (sessions report everything as stdout). */
static rk_status run_out(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    struct run_ctx *rc = ctx;
    if (rc->session)
        stream = RK_STREAM_STDOUT;
    rk_status s = rc->sink->write(rc->sink->ctx, stream, buf, len);
    if (s != RK_OK)
        rc->sink_status = s;
    return s;
}

/** curl data: feed the parser; once the terminal event arrived, read the tail to its end (bounded
 *  by OS_STREAM_TAIL_MS) instead of aborting, so the connection goes back to the pool. */
static rk_status run_data(void *ctx, const char *buf, size_t len)
{
    struct run_ctx *rc = ctx;
    if (rc->done)
        return RK_OK; /* tail after the terminal event: only pings may follow */
    rk_status s = os_stream_feed(&rc->st, buf, len);
    if (s != RK_OK)
        return s;
    if (rc->st.terminal) {
        rc->done = 1; /* marks the exchange as a success whatever happens to the tail */
        int64_t tail = rc->x->inst->host->now_ms() + OS_STREAM_TAIL_MS;
        if (rc->x->own_deadline_ms == 0 || tail < rc->x->own_deadline_ms)
            rc->x->own_deadline_ms = tail;
    }
    return RK_OK;
}

/** Best effort: ask execd to stop a foreground command we gave up on. */
static void interrupt_command(struct os_inst *inst, const struct os_endpoint *ep, const char *id)
{
    if (!id || !*id)
        return;
    char *enc = os_escape(id);
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/command?id=%s", enc ? enc : "");
    free(enc);
    char *path = os_sb_take(&sb);
    struct os_xfer x;
    if (path && os_execd_xfer(&x, inst, NULL, ep, "DELETE", path, OS_INTERRUPT_TIMEOUT_MS) == RK_OK)
        os_xfer_perform(&x);
    os_xfer_cleanup(&x);
    free(path);
}

/** Best effort once the call's deadline has passed (clean-up of what the call left behind): one
 *  execd exchange on the sandbox's cached endpoint, bounded by OS_INTERRUPT_TIMEOUT_MS instead
 *  of the spent deadline. The answer's HTTP status, or 0 when none arrived. */
long os_execd_after_deadline(struct os_inst *inst, struct rk_call *call, const char *osid,
                             const char *method, const char *path)
{
    struct os_endpoint ep;
    if (os_lc_endpoint(inst, call, osid, OS_EXECD_PORT, 1, "cleanup", &ep) != RK_OK)
        return 0;
    struct os_xfer x;
    long status = 0;
    if (os_execd_xfer(&x, inst, NULL, &ep, method, path, OS_INTERRUPT_TIMEOUT_MS) == RK_OK &&
        os_xfer_header(&x, "X-Request-ID", inst->host->request_id(call)) == RK_OK &&
        os_xfer_perform(&x) == RK_OK)
        status = x.status;
    os_xfer_cleanup(&x);
    return status;
}

/** Run a streamed command (/command or /session/{sid}/run); output goes to sink. */
rk_status os_run_stream(struct os_inst *inst, struct rk_call *call, const char *osid,
                        const struct os_run_opts *opts, const struct rk_sink *sink,
                        struct rk_exec_res *out)
{
    const struct rk_host *h = inst->host;
    memset(out, 0, sizeof(*out));
    /* The core owns the deadline (a command's timeout + runtime.command_timeout_margin) and
     * sets it on the call; the transfer only honours it (os_xfer_perform). A call without one
     * (a command without a timeout; a session's init commands while the core gives
     * session_open no deadline) is bounded by the command's own timeout, the core's value that
     * execd enforces as well, or by OS_NO_TIMEOUT_DEADLINE_MS; the plugin adds no margin. */
    int64_t limit = h->deadline_ms(call) > 0 ? 0
                    : opts->timeout_ms > 0   ? opts->timeout_ms
                                             : OS_NO_TIMEOUT_DEADLINE_MS;
    struct run_ctx rc;
    struct os_endpoint ep;
    struct os_xfer x;
    rk_status s = RK_OK;
    int64_t t0 = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        memset(&rc, 0, sizeof(rc));
        rc.sink = sink;
        rc.session = opts->session;
        rc.sink_status = RK_OK;
        os_stream_init(&rc.st, run_out, &rc, OS_MAX_EVENT_LINE);
        s = os_lc_endpoint(inst, call, osid, OS_EXECD_PORT, 1, opts->op, &ep);
        if (s != RK_OK)
            return s;
        s = os_execd_xfer(&x, inst, call, &ep, "POST", opts->path, limit);
        if (s == RK_OK)
            s = os_xfer_header(&x, "Accept", "text/event-stream");
        if (s == RK_OK)
            s = os_xfer_header(&x, "Cache-Control", "no-cache");
        if (s != RK_OK) {
            os_xfer_cleanup(&x);
            os_stream_free(&rc.st);
            return h->set_error(call, s, "opensandbox %s failed for %s: out of memory", opts->op,
                                osid);
        }
        os_xfer_json(&x, opts->body);
        x.on_data = run_data;
        x.on_data_ctx = &rc;
        x.use_loop = 1; /* run_data only parses and appends to the core's collector */
        rc.x = &x;
        t0 = h->now_ms();
        s = os_xfer_perform(&x);
        if (s == RK_E_UNAVAILABLE && x.not_sent && ep.from_cache && attempt == 0) {
            /* Stale cached endpoint: re-resolve once, never switch routes. */
            os_ep_invalidate(inst, osid, OS_EXECD_PORT);
            os_xfer_cleanup(&x);
            os_stream_free(&rc.st);
            continue;
        }
        break;
    }
    if (rc.done)
        s = RK_OK;
    if (s == RK_OK && x.status != 200) {
        char *d = os_error_detail(x.status, x.body, x.body_len);
        s = h->set_error(call, RK_E_UPSTREAM, "opensandbox %s failed for %s: %s", opts->op, osid,
                         d ? d : "error");
        free(d);
        goto out;
    }
    if (s == RK_OK) {
        s = os_stream_finish(&rc.st);
        if (s != RK_OK && rc.sink_status == RK_OK) {
            s = h->set_error(call, s == RK_E_UPSTREAM ? RK_E_UPSTREAM : s,
                             "opensandbox %s failed for %s: %s", opts->op, osid,
                             rc.st.error_text ? rc.st.error_text : "stream error");
        }
        if (s != RK_OK)
            goto out;
    } else if (rc.sink_status != RK_OK) {
        s = rc.sink_status; /* the core's sink recorded why (cap, client gone) */
        if (!opts->session)
            interrupt_command(inst, &ep, rc.st.init_id);
        goto out;
    } else if (rc.st.status == RK_E_TOO_LARGE) {
        s = h->set_error(call, RK_E_TOO_LARGE,
                         "opensandbox %s failed for %s: an output line exceeds %u bytes", opts->op,
                         osid, (unsigned)OS_MAX_EVENT_LINE);
        if (!opts->session)
            interrupt_command(inst, &ep, rc.st.init_id);
        goto out;
    } else if (x.timed_out) {
        /* The transfer's own bound expired (session init: no call deadline). */
        out->timed_out = 1;
        if (!opts->session)
            interrupt_command(inst, &ep, rc.st.init_id);
        s = RK_OK;
        goto out;
    } else if (s == RK_E_UNAVAILABLE && x.status == 200) {
        /* The stream broke after it started: complete if the terminal event made it. */
        if (os_stream_finish(&rc.st) != RK_OK || rc.sink_status != RK_OK) {
            if (rc.sink_status != RK_OK) {
                s = rc.sink_status;
            } else {
                s = h->set_error(call, RK_E_UPSTREAM,
                                 "opensandbox %s failed for %s: upstream stream ended early "
                                 "(%s): the command may have run, so it was not retried",
                                 opts->op, osid, os_xfer_err(&x));
            }
            if (!opts->session)
                interrupt_command(inst, &ep, rc.st.init_id);
            goto out;
        }
        s = RK_OK;
    } else {
        const char *err = s == RK_E_CANCELLED ? "cancelled"
                          : s == RK_E_TIMEOUT ? "request deadline exceeded"
                                              : os_xfer_err(&x);
        if (!opts->session && (s == RK_E_CANCELLED || s == RK_E_TIMEOUT))
            interrupt_command(inst, &ep, rc.st.init_id);
        if (s == RK_E_UNAVAILABLE && x.not_sent)
            os_ep_invalidate(inst, osid, OS_EXECD_PORT);
        s = h->set_error(call, s, "opensandbox %s failed for %s: %s", opts->op, osid, err);
        goto out;
    }
    if (rc.st.bare_error && !rc.st.timed_out) {
        /* execd failed after the stream started (no exit code): an upstream error. */
        s = h->set_error(call, RK_E_UPSTREAM, "opensandbox %s failed for %s: %s", opts->op, osid,
                         rc.st.error_text ? rc.st.error_text : "stream error");
        goto out;
    }
    out->has_exit_code = rc.st.has_exit_code;
    out->exit_code = rc.st.exit_code;
    out->timed_out = rc.st.timed_out;
    if (!out->timed_out && out->has_exit_code && out->exit_code == -1 && opts->timeout_ms > 0 &&
        h->now_ms() - t0 >= opts->timeout_ms) {
        /* execd kills a command when its timeout runs out and reports that as exit -1
         * ("signal: killed"), naming no timeout. The command's own deadline decides: execd
         * started its clock after t0, so its timeout kill cannot arrive before t0 + timeout,
         * and a -1 before then is another kill. */
        out->timed_out = 1;
    }
    if (out->timed_out)
        out->has_exit_code = 0; /* a killed command's -1 is not an exit code */
    if (rc.st.error_text && !out->timed_out) {
        out->error_text = h->arena_strdup(call, rc.st.error_text);
        if (!out->error_text)
            s = RK_E_NOMEM;
    }
out:
    os_xfer_cleanup(&x);
    os_stream_free(&rc.st);
    return s;
}

/** ops.exec: POST /command with cwd, merged env and a millisecond timeout. */
rk_status os_exec(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                  const struct rk_exec_req *req, const struct rk_sink *sink,
                  struct rk_exec_res *out)
{
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    json_object *root = json_object_new_object();
    json_object_object_add(root, "command",
                           json_object_new_string(req->command ? req->command : ""));
    if (req->cwd && *req->cwd)
        json_object_object_add(root, "cwd", json_object_new_string(req->cwd));
    if (req->timeout_ms > 0)
        json_object_object_add(root, "timeout", json_object_new_int64(req->timeout_ms));
    if (req->env_len) {
        json_object *env = json_object_new_object();
        for (size_t i = 0; i < req->env_len; i++)
            json_object_object_add(
                env, req->env[i].key,
                json_object_new_string(req->env[i].value ? req->env[i].value : ""));
        json_object_object_add(root, "envs", env);
    }
    const char *js = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE);
    struct os_run_opts o = {.op = "execute",
                            .path = "/command",
                            .body = js,
                            .timeout_ms = req->timeout_ms,
                            .session = 0};
    if (!js) {
        json_object_put(root);
        return inst->host->set_error(call, RK_E_NOMEM, "opensandbox execute failed for %s: %s",
                                     osid, "out of memory");
    }
    s = os_run_stream(inst, call, osid, &o, sink, out);
    json_object_put(root);
    return s;
}

int os_execd_ping(struct os_inst *inst, struct rk_call *call, const char *osid, int64_t timeout_ms)
{
    struct os_xfer x;
    if (os_execd_simple(inst, call, osid, "ping", "GET", "/ping", timeout_ms, NULL, NULL, &x) !=
        RK_OK)
        return 0;
    int ok = x.status == 200;
    os_xfer_cleanup(&x);
    return ok;
}

/**
 * One non-streamed (or custom-streamed) execd exchange with a single re-resolve
 * on a refused connection. `prep` adds the body; it runs once per attempt. On
 * RK_OK *x holds the answer (caller cleans up); otherwise *x is already cleaned
 * up and the error is recorded (except a callback's own status).
 */
rk_status os_execd_simple(struct os_inst *inst, struct rk_call *call, const char *osid,
                          const char *op, const char *method, const char *path, int64_t timeout_ms,
                          os_prep_fn prep, void *ctx, struct os_xfer *x)
{
    const struct rk_host *h = inst->host;
    rk_status s = RK_OK;
    struct os_endpoint ep;
    for (int attempt = 0; attempt < 2; attempt++) {
        s = os_lc_endpoint(inst, call, osid, OS_EXECD_PORT, 1, op, &ep);
        if (s != RK_OK) {
            memset(x, 0, sizeof(*x));
            return s;
        }
        s = os_execd_xfer(x, inst, call, &ep, method, path, timeout_ms);
        if (s == RK_OK && prep)
            s = prep(x, ctx, attempt);
        if (s != RK_OK) {
            os_xfer_cleanup(x);
            return h->set_error(call, s, "opensandbox %s failed for %s: %s", op, osid,
                                s == RK_E_NOMEM ? "out of memory" : "request setup failed");
        }
        s = os_xfer_perform(x);
        if (s == RK_E_UNAVAILABLE && x->not_sent) {
            os_ep_invalidate(inst, osid, OS_EXECD_PORT);
            if (ep.from_cache && attempt == 0 && (!prep || prep(NULL, ctx, -1) == RK_OK)) {
                os_xfer_cleanup(x);
                continue;
            }
        }
        break;
    }
    if (s == RK_OK)
        return RK_OK;
    if (x->cb_status != RK_OK && s == x->cb_status) {
        os_xfer_cleanup(x);
        return s; /* the caller's callback decided; it records its own message */
    }
    const char *err = s == RK_E_CANCELLED   ? "cancelled"
                      : s == RK_E_TIMEOUT   ? "request deadline exceeded"
                      : s == RK_E_TOO_LARGE ? "response too large"
                                            : os_xfer_err(x);
    if (s == RK_E_TOO_LARGE)
        s = RK_E_UPSTREAM;
    s = h->set_error(call, s, "opensandbox %s failed for %s: %s", op, osid, err);
    os_xfer_cleanup(x);
    return s;
}
