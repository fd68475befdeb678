/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz /upload's multipart field handling (core/api/upload.c): the part state
 * machine that libmicrohttpd's post processor drives (which part is a text
 * field, when the file is piped, spooled or discarded, the field and size
 * bounds, the spool budget, the early dispatch gate). The byte-level
 * multipart parsing is libmicrohttpd's own; here the input is decoded into a
 * sequence of part callbacks: [key selector][offset flag][len][data...]...
 *
 * upload.c is included so its static callbacks can be called; the rest of the
 * core it uses is stubbed below (the gate admits ids starting with 'o' on the
 * request's call and refuses everything on the worker's, so no plugin is
 * needed).
 */
#include "../../core/api/upload.c"

#include <assert.h>

#include "fuzz.h"

/* ---- stubs of the core ----------------------------------------------------- */

struct rk_call {
    rk_status code;
    char text[256];
};

struct rk_call *rk_call_new(const char *request_id, int client_fd, int64_t deadline_ms)
{
    (void)request_id;
    (void)client_fd;
    (void)deadline_ms;
    return calloc(1, sizeof(struct rk_call));
}

void rk_call_free(struct rk_call *call)
{
    free(call);
}

rk_status rk_call_set_error(struct rk_call *call, rk_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->text, sizeof call->text, fmt, ap);
    va_end(ap);
    call->code = code;
    return code;
}

rk_status rk_call_error_code(const struct rk_call *call)
{
    return call->code;
}

const char *rk_call_error_text(const struct rk_call *call)
{
    return call->text;
}

const char *rk_status_name(rk_status st)
{
    return st == RK_OK ? "ok" : "error";
}

static struct rk_call *g_request_call;

rk_status rk_dispatch(struct rk_app *app, struct rk_call *call, enum rk_op op,
                      const char *sandbox_id, struct rk_target *t)
{
    (void)app;
    (void)op;
    memset(t, 0, sizeof *t);
    if (call == g_request_call && sandbox_id[0] == 'o')
        return RK_OK;
    return rk_call_set_error(call, RK_E_NOT_FOUND, "Sandbox %s not found", sandbox_id);
}

void rk_target_release(struct rk_target *t)
{
    (void)t;
}

void rk_metrics_upstream_begin(void) {}

void rk_metrics_upstream(const char *op, rk_status st)
{
    (void)op;
    (void)st;
}

int rk_id_valid(const char *s, size_t len)
{
    return len > 0 && len <= 128 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789._-") >= len;
}

int rk_req_client_fd(struct rk_req *r)
{
    (void)r;
    return -1;
}

void rk_req_set_sandbox(struct rk_req *r, const char *sandbox_id)
{
    (void)r;
    (void)sandbox_id;
}

/* The worker pool runs a job at once (the consumer's gate refuses, so it
 * ends without reading); suspension and deferral are no-ops here. */
int rk_req_submit(struct rk_req *r, void (*fn)(void *), void *arg)
{
    (void)r;
    fn(arg);
    return 0;
}

void rk_req_suspend(struct rk_req *r)
{
    (void)r;
}

void rk_req_resume(struct rk_req *r)
{
    (void)r;
}

void rk_req_defer(struct rk_req *r)
{
    (void)r;
    assert(0 && "the consumer ran at once: nothing to wait for");
}

void rk_req_finish(struct rk_req *r)
{
    (void)r;
}

/* Replies only mark the request answered. */
static void answered(struct rk_req *r)
{
    r->responded = 1;
}

void rk_reply_ok(struct rk_req *r, json_object *result)
{
    json_object_put(result);
    answered(r);
}

void rk_reply_error(struct rk_req *r, rk_status st, const char *error)
{
    (void)st;
    assert(error);
    answered(r);
}

void rk_reply_call_error(struct rk_req *r)
{
    answered(r);
}

void rk_reply_invalid(struct rk_req *r, const char *error)
{
    assert(error && *error);
    answered(r);
}

void rk_reply_detail(struct rk_req *r, unsigned http_status, const char *detail)
{
    (void)http_status;
    (void)detail;
    answered(r);
}

void rk_req_reply_busy(struct rk_req *r, const char *why)
{
    (void)why;
    answered(r);
}

/* ---- the target ------------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const keys[] = {"file", "target_path", "sandbox_id", "other", ""};
    static struct rk_config cfg;
    static struct rk_app app;
    cfg.server.max_upload_bytes = 4096;
    app.cfg = &cfg;
    rk_budget_init(0, 2048);

    struct rk_req r;
    memset(&r, 0, sizeof r);
    r.app = &app;
    r.call = rk_call_new("fuzz", -1, 0);
    g_request_call = r.call;
    struct upload *u = calloc(1, sizeof *u);
    rk_handoff_init(&u->h, &r);
    u->app = &app;
    r.route_ctx = u;
    r.route_ctx_free = upload_free;

    uint64_t off = 0;
    const char *prev = NULL;
    size_t i = 0;
    while (i + 3 <= size) {
        const char *key = keys[data[i] % (sizeof keys / sizeof *keys)];
        int restart = data[i + 1] & 1;
        size_t len = data[i + 2];
        i += 3;
        if (len > size - i)
            len = size - i;
        if (!prev || strcmp(prev, key) != 0 || restart)
            off = 0;
        on_part(u, MHD_POSTDATA_KIND, key, NULL, NULL, NULL, (const char *)data + i, off, len);
        if (u->gate_needed) { /* what rk_route_upload_body does after the parser */
            u->gate_needed = 0;
            upload_gate_job(u);
        }
        off += len;
        prev = key;
        i += len;
    }
    rk_route_upload_body(&r, NULL, 0); /* the end of the body */
    rk_route_upload(&r);
    assert(r.responded);
    upload_free(&r);
    rk_call_free(r.call);
    assert(rk_budget_used(&rk_spool_budget) == 0);
    return 0;
}
