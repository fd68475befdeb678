/* SPDX-License-Identifier: Apache-2.0 */
#include "host/host.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "obs/log.h"
#include "base/util.h"

/* ---- per-call arena -------------------------------------------------------- */

/* Arena blocks are chained; big allocations get their own block. */
struct arena_block {
    struct arena_block *next;
    size_t used, size;
    max_align_t data[];
};

struct rk_call {
    struct arena_block *blocks;
    char request_id[40];
    int client_fd;
    int64_t deadline_ms;
    rk_status err_code;
    char *err_text;
    int client_gone;
    int64_t last_probe_ms;
    /* ABI 1.2: who hears the end of an operation started asynchronously */
    rk_call_done_fn done_fn;
    void *done_ctx;
    _Atomic int cancel_requested; /* rk_call_cancel, from any thread */
};

static _Atomic int host_shutdown; /* set once by the main thread, read by all */
static char plugin_prefix[64] = "plugin";

void rk_host_set_plugin_name(const char *name)
{
    snprintf(plugin_prefix, sizeof plugin_prefix, "%s", name);
}

void rk_host_shutdown(void)
{
    host_shutdown = 1;
}

struct rk_call *rk_call_new(const char *request_id, int client_fd, int64_t deadline_ms)
{
    struct rk_call *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    if (request_id) { /* bounded copy, as snprintf "%s" did (no format parsing per request) */
        size_t n = strnlen(request_id, sizeof c->request_id - 1);
        memcpy(c->request_id, request_id, n); /* calloc'd: NUL-terminated */
    }
    c->client_fd = client_fd;
    c->deadline_ms = deadline_ms;
    return c;
}

void rk_call_free(struct rk_call *call)
{
    if (!call)
        return;
    struct arena_block *b = call->blocks;
    while (b) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    free(call->err_text);
    free(call);
}

void rk_call_set_deadline(struct rk_call *call, int64_t deadline_ms)
{
    call->deadline_ms = deadline_ms;
}

void *rk_arena_try_alloc(struct rk_call *call, size_t n)
{
    const size_t align = sizeof(max_align_t);
    /* Round up to the alignment without overflowing: refuse sizes that have
     * no room for the rounding or for the block header. */
    if (n > SIZE_MAX - sizeof(struct arena_block) - align)
        return NULL;
    n = (n + align - 1) / align * align;
    if (n == 0)
        n = align;
    struct arena_block *b = call->blocks;
    if (!b || b->size - b->used < n) {
        /* The first block is small: most calls need a few hundred bytes, and an in-flight
         * command keeps its arena for the command's whole run. */
        size_t min = b ? 4096 : 1024;
        size_t size = n > min ? n : min;
        struct arena_block *nb = malloc(sizeof *nb + size);
        if (!nb)
            return NULL;
        nb->used = 0;
        nb->size = size;
        if (n > min && b) {
            /* Keep the current block for small allocations. */
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            call->blocks = nb;
        }
        b = nb;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void *rk_arena_alloc(struct rk_call *call, size_t n)
{
    void *p = rk_arena_try_alloc(call, n);
    if (!p)
        abort();
    return p;
}

char *rk_arena_strndup(struct rk_call *call, const char *s, size_t n)
{
    char *d = rk_arena_alloc(call, n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *rk_arena_strdup(struct rk_call *call, const char *s)
{
    if (!s)
        return NULL;
    return rk_arena_strndup(call, s, strlen(s));
}

char *rk_arena_printf(struct rk_call *call, const char *fmt, ...)
{
    if (!fmt) /* also keeps gcc's -Wformat-truncation quiet under -fsanitize */
        return rk_arena_strdup(call, "");
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    char *d = rk_arena_alloc(call, (size_t)n + 1);
    if ((size_t)n < sizeof small) {
        memcpy(d, small, (size_t)n + 1);
        return d;
    }
    va_start(ap, fmt);
    vsnprintf(d, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return d;
}

/* ---- asynchronous operations (ABI 1.2) ---------------------------------------- */

void rk_call_on_done(struct rk_call *call, rk_call_done_fn fn, void *ctx)
{
    call->done_fn = fn;
    call->done_ctx = ctx;
}

void rk_call_done(struct rk_call *call, rk_status st)
{
    /* Take the hook before running it: the completion may free the call. */
    rk_call_done_fn fn = call->done_fn;
    void *ctx = call->done_ctx;
    call->done_fn = NULL;
    call->done_ctx = NULL;
    if (!fn) {
        rk_err("%s: plugin reported the end of an operation that was not started "
               "asynchronously (request %s); ignored",
               plugin_prefix, call->request_id);
        return;
    }
    fn(ctx, st);
}

/* ---- state reports (ABI 1.3) ---------------------------------------------------- */

static _Atomic(rk_state_report_fn) state_report_fn; /* set by the domain layer's receiver */

void rk_host_on_state_report(rk_state_report_fn fn)
{
    state_report_fn = fn;
}

/* host->state_report: hand a plugin's report to the receiver, if there is one. */
static void host_state_report(const char *sandbox_id, const struct rk_status_info *info)
{
    rk_state_report_fn fn = state_report_fn;
    if (fn && sandbox_id && info)
        fn(sandbox_id, info);
}

/* ---- errors ---------------------------------------------------------------- */

static rk_status call_set_errorv(struct rk_call *call, rk_status code, const char *fmt, va_list ap)
{
    /* Unknown codes from a newer plugin are treated as internal errors. */
    if (code > 0 || code < RK_E_COMMAND)
        code = RK_E_INTERNAL;
    char *text = NULL;
    if (vasprintf(&text, fmt, ap) < 0)
        text = NULL;
    free(call->err_text);
    call->err_text = text;
    call->err_code = code;
    return code;
}

rk_status rk_call_set_error(struct rk_call *call, rk_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_status st = call_set_errorv(call, code, fmt, ap);
    va_end(ap);
    return st;
}

rk_status rk_call_error_code(const struct rk_call *call)
{
    return call->err_code;
}

const char *rk_call_error_text(const struct rk_call *call)
{
    if (call->err_text && *call->err_text)
        return call->err_text;
    return rk_status_name(call->err_code);
}

void rk_call_clear_error(struct rk_call *call)
{
    free(call->err_text);
    call->err_text = NULL;
    call->err_code = RK_OK;
}

const char *rk_call_request_id(const struct rk_call *call)
{
    return call->request_id;
}

int rk_call_deadline_passed(const struct rk_call *call)
{
    return call->deadline_ms && rk_now_ms() >= call->deadline_ms;
}

void rk_call_cancel(struct rk_call *call)
{
    call->cancel_requested = 1;
}

int rk_call_cancelled(const struct rk_call *call)
{
    if (host_shutdown || call->cancel_requested)
        return 1;
    struct rk_call *c = (struct rk_call *)call;
    if (c->client_gone)
        return 1;
    int64_t now = rk_now_ms();
    if (c->deadline_ms && now >= c->deadline_ms)
        return 1;
    /* Probe the client socket at most every 200 ms: a hang-up means the client
     * left and the upstream work should be abandoned. */
    if (c->client_fd >= 0 && now - c->last_probe_ms >= 200) {
        c->last_probe_ms = now;
        struct pollfd pfd = {.fd = c->client_fd, .events = POLLRDHUP};
        if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))
            c->client_gone = 1;
    }
    return c->client_gone;
}

/* ---- the host table ---------------------------------------------------------- */

static void host_log(enum rk_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_logv(level, plugin_prefix, fmt, ap);
    va_end(ap);
}

/* A plugin-prefixed log line from a format (helper for log_call). */
static void log_prefixed(enum rk_log_level level, const char *fmt, ...) RK_PRINTF(2, 3);
static void log_prefixed(enum rk_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_logv(level, plugin_prefix, fmt, ap);
    va_end(ap);
}

/* log_call (1.1): the plugin's line with the call's request id. */
static void host_log_call(const struct rk_call *call, enum rk_log_level level, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const char *rid = call && call->request_id[0] ? call->request_id : "-";
    log_prefixed(level, "id=%s %s", rid, line);
}

static rk_status host_set_error(struct rk_call *call, rk_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_status st = call_set_errorv(call, code, fmt, ap);
    va_end(ap);
    return st;
}

/* The ABI's arena_alloc: NULL on failure, never abort (operator.h). */
static void *host_arena_alloc(struct rk_call *call, size_t n)
{
    return rk_arena_try_alloc(call, n);
}

static char *host_arena_strdup(struct rk_call *call, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *d = rk_arena_try_alloc(call, n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

static int64_t host_deadline(const struct rk_call *call)
{
    return call->deadline_ms;
}

static int64_t host_now(void)
{
    return rk_now_ms();
}

static int host_cancelled(const struct rk_call *call)
{
    return rk_call_cancelled(call);
}

static const char *host_request_id(const struct rk_call *call)
{
    return call->request_id;
}

static void host_cfg_problem(const struct rk_cfg *cfg, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rk_cfg_problem(cfg, key, "%s", msg);
}

const struct rk_host rk_host_table = {
    .struct_size = sizeof(struct rk_host),
    .abi_major = RK_OPERATOR_ABI_MAJOR,
    .abi_minor = RK_OPERATOR_ABI_MINOR,
    .log = host_log,
    .set_error = host_set_error,
    .arena_alloc = host_arena_alloc,
    .arena_strdup = host_arena_strdup,
    .deadline_ms = host_deadline,
    .now_ms = host_now,
    .cancelled = host_cancelled,
    .request_id = host_request_id,
    .cfg_str = rk_cfg_get_str,
    .cfg_int = rk_cfg_get_int,
    .cfg_bool = rk_cfg_get_bool,
    .cfg_double = rk_cfg_get_double,
    .cfg_problem = host_cfg_problem,
    .log_call = host_log_call,
    .call_done = rk_call_done,
    .state_report = host_state_report,
};
