/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_execd.c
 * @brief execd requests: URL/header composition and streamed command runs.
 */
#include <stddef.h>
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

/** One streamed command run (/command or /session/{sid}/run), blocking or started on the
 *  loop (the ABI 1.2 asynchronous forms). */
struct os_run {
    struct os_inst *inst;
    struct rk_call *call;
    const char *osid;
    struct os_run_opts opts;
    const struct rk_sink *sink;
    struct rk_exec_res *out;
    int64_t limit; /**< the transfer's own bound (0 when the call has a deadline) */
    int64_t t0;    /**< when the stream was sent */
    int attempt;
    int async; /**< started with os_run_stream_start: completes with host->call_done */
    struct run_ctx rc;
    struct os_endpoint ep;
    struct os_xfer x;
    struct os_loop_task retry; /**< re-resolve and resend on the loop's helper (async) */
    char *owned;               /**< async: osid, path and body copied into one block */
};

/** Set up a run of opts; out is zeroed. */
static void run_init(struct os_run *r, struct os_inst *inst, struct rk_call *call, const char *osid,
                     const struct os_run_opts *opts, const struct rk_sink *sink,
                     struct rk_exec_res *out)
{
    const struct rk_host *h = inst->host;
    memset(out, 0, sizeof(*out));
    r->inst = inst;
    r->call = call;
    r->osid = osid;
    r->opts = *opts;
    r->sink = sink;
    r->out = out;
    /* The core owns the deadline (a command's timeout + runtime.command_timeout_margin) and
     * sets it on the call; the transfer only honours it (os_xfer_perform). A call without one
     * (a command without a timeout; a session's init commands while the core gives
     * session_open no deadline) is bounded by the command's own timeout, the core's value that
     * execd enforces as well, or by OS_NO_TIMEOUT_DEADLINE_MS; the plugin adds no margin. */
    r->limit = h->deadline_ms(call) > 0 ? 0
               : opts->timeout_ms > 0   ? opts->timeout_ms
                                        : OS_NO_TIMEOUT_DEADLINE_MS;
}

/** Resolve execd and prepare the stream's exchange. RK_OK, or the error (recorded; nothing
 *  left to clean up). */
static rk_status run_prepare(struct os_run *r)
{
    const struct rk_host *h = r->inst->host;
    memset(&r->rc, 0, sizeof(r->rc));
    r->rc.sink = r->sink;
    r->rc.session = r->opts.session;
    r->rc.sink_status = RK_OK;
    os_stream_init(&r->rc.st, run_out, &r->rc, OS_MAX_EVENT_LINE);
    rk_status s = os_lc_endpoint(r->inst, r->call, r->osid, OS_EXECD_PORT, 1, r->opts.op, &r->ep);
    if (s != RK_OK) {
        os_stream_free(&r->rc.st);
        return s;
    }
    s = os_execd_xfer(&r->x, r->inst, r->call, &r->ep, "POST", r->opts.path, r->limit);
    if (s == RK_OK)
        s = os_xfer_header(&r->x, "Accept", "text/event-stream");
    if (s == RK_OK)
        s = os_xfer_header(&r->x, "Cache-Control", "no-cache");
    if (s != RK_OK) {
        os_xfer_cleanup(&r->x);
        os_stream_free(&r->rc.st);
        return h->set_error(r->call, s, "opensandbox %s failed for %s: out of memory", r->opts.op,
                            r->osid);
    }
    os_xfer_json(&r->x, r->opts.body);
    r->x.on_data = run_data;
    r->x.on_data_ctx = &r->rc;
    r->x.use_loop = 1; /* run_data only parses and appends to the core's collector */
    r->rc.x = &r->x;
    r->t0 = h->now_ms();
    return RK_OK;
}

/** 1 (and the exchange released) when the transfer ended with s on a stale cached endpoint:
 *  re-resolve once and resend, never switch routes. */
static int run_should_retry(struct os_run *r, rk_status s)
{
    if (!(s == RK_E_UNAVAILABLE && r->x.not_sent && r->ep.from_cache && r->attempt == 0))
        return 0;
    os_ep_invalidate(r->inst, r->osid, OS_EXECD_PORT);
    os_xfer_cleanup(&r->x);
    os_stream_free(&r->rc.st);
    r->attempt++;
    return 1;
}

/** An exchange started by interrupt_async ended: release it. */
static void interrupt_done(struct os_xfer *x, rk_status s)
{
    (void)s;
    os_xfer_cleanup(x);
    free(x);
}

/** interrupt_command without waiting (asynchronous runs, on the loop): the request is built
 *  now (the endpoint belongs to the call) and sent on the loop; nobody waits for the answer. */
static void interrupt_async(struct os_inst *inst, const struct os_endpoint *ep, const char *id)
{
    if (!id || !*id)
        return;
    char *enc = os_escape(id);
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/command?id=%s", enc ? enc : "");
    free(enc);
    char *path = os_sb_take(&sb);
    struct os_xfer *x = calloc(1, sizeof(*x));
    if (path && x &&
        os_execd_xfer(x, inst, NULL, ep, "DELETE", path, OS_INTERRUPT_TIMEOUT_MS) == RK_OK &&
        os_xfer_start(x, interrupt_done) == RK_OK)
        x = NULL; /* interrupt_done releases it */
    if (x) {
        os_xfer_cleanup(x);
        free(x);
    }
    free(path);
}

/** Ask execd to stop the command the run gave up on (not for sessions). */
static void run_interrupt(struct os_run *r)
{
    if (r->opts.session)
        return;
    if (r->async)
        interrupt_async(r->inst, &r->ep, r->rc.st.init_id);
    else
        interrupt_command(r->inst, &r->ep, r->rc.st.init_id);
}

/** Map the transfer's end s onto the run's result (r->out) and status; releases the exchange. */
static rk_status run_finish(struct os_run *r, rk_status s)
{
    const struct rk_host *h = r->inst->host;
    struct rk_call *call = r->call;
    const struct os_run_opts *opts = &r->opts;
    const char *osid = r->osid;
    struct run_ctx *rc = &r->rc;
    struct os_xfer *x = &r->x;
    struct rk_exec_res *out = r->out;
    if (rc->done)
        s = RK_OK;
    if (s == RK_OK && x->status != 200) {
        char *d = os_error_detail(x->status, x->body, x->body_len);
        s = h->set_error(call, RK_E_UPSTREAM, "opensandbox %s failed for %s: %s", opts->op, osid,
                         d ? d : "error");
        free(d);
        goto out;
    }
    if (s == RK_OK) {
        s = os_stream_finish(&rc->st);
        if (s != RK_OK && rc->sink_status == RK_OK) {
            s = h->set_error(call, s == RK_E_UPSTREAM ? RK_E_UPSTREAM : s,
                             "opensandbox %s failed for %s: %s", opts->op, osid,
                             rc->st.error_text ? rc->st.error_text : "stream error");
        }
        if (s != RK_OK)
            goto out;
    } else if (rc->sink_status != RK_OK) {
        s = rc->sink_status; /* the core's sink recorded why (cap, client gone) */
        run_interrupt(r);
        goto out;
    } else if (rc->st.status == RK_E_TOO_LARGE) {
        s = h->set_error(call, RK_E_TOO_LARGE,
                         "opensandbox %s failed for %s: an output line exceeds %u bytes", opts->op,
                         osid, (unsigned)OS_MAX_EVENT_LINE);
        run_interrupt(r);
        goto out;
    } else if (x->timed_out) {
        /* The transfer's own bound expired (session init: no call deadline). */
        out->timed_out = 1;
        run_interrupt(r);
        s = RK_OK;
        goto out;
    } else if (s == RK_E_UNAVAILABLE && x->status == 200) {
        /* The stream broke after it started: complete if the terminal event made it. */
        if (os_stream_finish(&rc->st) != RK_OK || rc->sink_status != RK_OK) {
            if (rc->sink_status != RK_OK) {
                s = rc->sink_status;
            } else {
                s = h->set_error(call, RK_E_UPSTREAM,
                                 "opensandbox %s failed for %s: upstream stream ended early "
                                 "(%s): the command may have run, so it was not retried",
                                 opts->op, osid, os_xfer_err(x));
            }
            run_interrupt(r);
            goto out;
        }
        s = RK_OK;
    } else {
        const char *err = s == RK_E_CANCELLED ? "cancelled"
                          : s == RK_E_TIMEOUT ? "request deadline exceeded"
                                              : os_xfer_err(x);
        if (s == RK_E_CANCELLED || s == RK_E_TIMEOUT)
            run_interrupt(r);
        if (s == RK_E_UNAVAILABLE && x->not_sent)
            os_ep_invalidate(r->inst, osid, OS_EXECD_PORT);
        s = h->set_error(call, s, "opensandbox %s failed for %s: %s", opts->op, osid, err);
        goto out;
    }
    if (rc->st.bare_error && !rc->st.timed_out) {
        /* execd failed after the stream started (no exit code): an upstream error. */
        s = h->set_error(call, RK_E_UPSTREAM, "opensandbox %s failed for %s: %s", opts->op, osid,
                         rc->st.error_text ? rc->st.error_text : "stream error");
        goto out;
    }
    out->has_exit_code = rc->st.has_exit_code;
    out->exit_code = rc->st.exit_code;
    out->timed_out = rc->st.timed_out;
    if (!out->timed_out && out->has_exit_code && out->exit_code == -1 && opts->timeout_ms > 0 &&
        h->now_ms() - r->t0 >= opts->timeout_ms) {
        /* execd kills a command when its timeout runs out and reports that as exit -1
         * ("signal: killed"), naming no timeout. The command's own deadline decides: execd
         * started its clock after t0, so its timeout kill cannot arrive before t0 + timeout,
         * and a -1 before then is another kill. */
        out->timed_out = 1;
    }
    if (out->timed_out)
        out->has_exit_code = 0; /* a killed command's -1 is not an exit code */
    if (rc->st.error_text && !out->timed_out) {
        out->error_text = h->arena_strdup(call, rc->st.error_text);
        if (!out->error_text)
            s = RK_E_NOMEM;
    }
out:
    os_xfer_cleanup(x);
    os_stream_free(&rc->st);
    return s;
}

/** Run a streamed command (/command or /session/{sid}/run); output goes to sink. */
rk_status os_run_stream(struct os_inst *inst, struct rk_call *call, const char *osid,
                        const struct os_run_opts *opts, const struct rk_sink *sink,
                        struct rk_exec_res *out)
{
    struct os_run r;
    memset(&r, 0, sizeof(r));
    run_init(&r, inst, call, osid, opts, sink, out);
    rk_status s;
    int prepared;
    do {
        s = run_prepare(&r);
        prepared = s == RK_OK;
        if (!prepared)
            break; /* nothing left to clean up */
        s = os_xfer_perform(&r.x);
    } while (run_should_retry(&r, s));
    if (prepared)
        s = run_finish(&r, s);
    return opts->finish ? opts->finish(opts->finish_ctx, s, out) : s;
}

/** The end of an asynchronous run: report it to the core (the run is released first). */
static void run_complete(struct os_run *r, rk_status s)
{
    struct rk_call *call = r->call;
    const struct rk_host *h = r->inst->host;
    if (r->opts.finish)
        s = r->opts.finish(r->opts.finish_ctx, s, r->out);
    free(r->owned);
    free(r);
    h->call_done(call, s); /* call, sink and out are the core's from here */
}

static void run_retry(struct os_loop_task *t);

/** os_xfer_start's completion of an asynchronous run (loop thread). */
static void run_transfer_done(struct os_xfer *x, rk_status s)
{
    struct os_run *r = (struct os_run *)((char *)x - offsetof(struct os_run, x));
    if (run_should_retry(r, s)) {
        r->retry.run = run_retry;
        if (os_loop_defer(r->inst->loop, &r->retry) == 0)
            return; /* resolving again blocks: on the helper, not the loop */
        s = r->inst->host->set_error(r->call, RK_E_UNAVAILABLE,
                                     "opensandbox %s failed for %s: the daemon is stopping",
                                     r->opts.op, r->osid);
        run_complete(r, s);
        return;
    }
    run_complete(r, run_finish(r, s));
}

/** Send the run's stream; its end arrives in run_transfer_done. */
static void run_send(struct os_run *r)
{
    rk_status s = run_prepare(r);
    if (s != RK_OK) {
        run_complete(r, s);
        return;
    }
    s = os_xfer_start(&r->x, run_transfer_done);
    if (s != RK_OK)
        run_transfer_done(&r->x, s); /* ended at once (deadline passed, client gone) */
}

/** The second attempt after a stale endpoint (helper thread). */
static void run_retry(struct os_loop_task *t)
{
    run_send((struct os_run *)((char *)t - offsetof(struct os_run, retry)));
}

/** Start a streamed command on the loop (ABI 1.2 asynchronous forms): RK_OK, after which the
 *  end is reported with host->call_done (possibly before this returns); otherwise nothing was
 *  started. osid and opts' strings are copied; sink and out must stay valid until call_done. */
rk_status os_run_stream_start(struct os_inst *inst, struct rk_call *call, const char *osid,
                              const struct os_run_opts *opts, const struct rk_sink *sink,
                              struct rk_exec_res *out)
{
    size_t n_osid = strlen(osid) + 1, n_path = strlen(opts->path) + 1;
    size_t n_body = strlen(opts->body) + 1;
    struct os_run *r = calloc(1, sizeof(*r));
    char *owned = malloc(n_osid + n_path + n_body);
    if (!r || !owned) {
        free(r);
        free(owned);
        rk_status s = inst->host->set_error(call, RK_E_NOMEM, "opensandbox %s failed for %s: %s",
                                            opts->op, osid, "out of memory");
        return opts->finish ? opts->finish(opts->finish_ctx, s, out) : s;
    }
    memcpy(owned, osid, n_osid);
    memcpy(owned + n_osid, opts->path, n_path);
    memcpy(owned + n_osid + n_path, opts->body, n_body);
    struct os_run_opts o = *opts;
    o.path = owned + n_osid;
    o.body = owned + n_osid + n_path;
    run_init(r, inst, call, owned, &o, sink, out);
    r->owned = owned;
    r->async = 1;
    /* The first resolve runs here (usually cached), so a failure is answered as not started. */
    rk_status s = run_prepare(r);
    if (s != RK_OK) {
        free(owned);
        free(r);
        return opts->finish ? opts->finish(opts->finish_ctx, s, out) : s;
    }
    s = os_xfer_start(&r->x, run_transfer_done);
    if (s != RK_OK)
        run_transfer_done(&r->x, s);
    return RK_OK;
}

/** POST /command with cwd, merged env and a millisecond timeout: run (start 0) or started on
 *  the loop (start 1). */
static rk_status exec_run(struct os_inst *inst, struct rk_call *call,
                          const struct rk_sandbox_ref *ref, const struct rk_exec_req *req,
                          const struct rk_sink *sink, struct rk_exec_res *out, int start)
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
    if (req->env_len)
        json_object_object_add(root, "envs", os_env_object(req->env, req->env_len));
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
    s = start ? os_run_stream_start(inst, call, osid, &o, sink, out)
              : os_run_stream(inst, call, osid, &o, sink, out);
    json_object_put(root);
    return s;
}

/** ops.exec. */
rk_status os_exec(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                  const struct rk_exec_req *req, const struct rk_sink *sink,
                  struct rk_exec_res *out)
{
    return exec_run(inst, call, ref, req, sink, out, 0);
}

/** ops.exec_start (ABI 1.2): os_exec started on the loop; its end goes to host->call_done. */
rk_status os_exec_start(struct os_inst *inst, struct rk_call *call,
                        const struct rk_sandbox_ref *ref, const struct rk_exec_req *req,
                        const struct rk_sink *sink, struct rk_exec_res *out)
{
    return exec_run(inst, call, ref, req, sink, out, 1);
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
