/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_http.c
 * @brief One HTTP exchange: the request's description, the choice of its carrier (the loop's
 *        HTTP/1.1 client or a pooled libcurl handle), bounded buffering, deadlines and
 *        cancellation.
 *
 * The carrier is chosen when the exchange starts, in one place (xfer_begin): an exchange run on
 * the loop (command streams, session runs, readiness pings, interrupts) or sent at most once
 * (os_xfer_send_once: the lifecycle POSTs) to a plain-HTTP IP literal goes through librkutil's
 * HTTP/1.1 client (lib/rkh1.c), whose open stream costs a few hundred bytes where a libcurl
 * transfer costs about 11 KiB, and which can keep connections for requests that must not be
 * re-sent; everything else, and whatever asks for its easy handle (os_xfer_curl: uploads,
 * downloads), goes through libcurl. Both report libcurl's codes, so xfer_result maps them once.
 *
 * Connection reuse: every exchange borrows an easy handle from the instance's
 * pool (librkutil's rku_curl_pool, the same implementation as the core relay's;
 * unkeyed here, so any idle handle serves any upstream) and gives it back
 * afterwards (curl_easy_reset keeps the handle's live connections). Each
 * handle owns its connections; only the DNS cache and TLS
 * sessions are shared, because sharing the connection cache
 * (CURL_LOCK_DATA_CONNECT) between concurrently running threads is not
 * supported by libcurl 7.88. Reusing handles also avoids the per-handle
 * socketpair/fcntl set-up of a fresh handle.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "os_internal.h"
#include "rkcurlpool.h"

/** User-Agent sent upstream. */
#define OS_USER_AGENT "rock-admin-opensandbox/1.0"

/** curl share lock callback: one mutex per data kind. */
static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    (void)h;
    (void)access;
    struct os_inst *inst = ud;
    if ((unsigned)data < 8)
        pthread_mutex_lock(&inst->share_locks[data]);
}

/** curl share unlock callback. */
static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    struct os_inst *inst = ud;
    if ((unsigned)data < 8)
        pthread_mutex_unlock(&inst->share_locks[data]);
}

/** Set up the instance's transfer state: the command-stream loop, the handle pool and the
 *  share of DNS cache and TLS sessions between its handles. */
void os_http_init(struct os_inst *inst)
{
    inst->loop = os_loop_new();
    for (int i = 0; i < 8; i++)
        pthread_mutex_init(&inst->share_locks[i], NULL);
    inst->pool = rku_curl_pool_new(OS_CURL_POOL_MAX, OS_CURL_POOL_MAX);
    inst->share_locks_ready = 1;
    CURLSH *sh = curl_share_init();
    if (!sh)
        return; /* every handle then simply opens its own connection */
    curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(sh, CURLSHOPT_USERDATA, inst);
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    inst->share = sh;
}

/** Stop the loop, destroy the pooled handles and the share (after the last request). */
void os_http_free(struct os_inst *inst)
{
    os_loop_free(inst->loop); /* its transfers hold pooled handles and the share */
    inst->loop = NULL;
    rku_curl_pool_free(inst->pool);
    inst->pool = NULL;
    if (inst->share)
        curl_share_cleanup(inst->share);
    inst->share = NULL;
    if (inst->share_locks_ready) {
        for (int i = 0; i < 8; i++)
            pthread_mutex_destroy(&inst->share_locks[i]);
        inst->share_locks_ready = 0;
    }
}

/** Percent-encode a query value fully (caller frees with free()). */
char *os_escape(const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    if (!e)
        return NULL;
    char *r = strdup(e);
    curl_free(e);
    return r;
}

/** Answer bytes (x->status known): stream 2xx bodies to on_data, buffer everything else
 *  (bounded). 0, or -1 to end the exchange (x->cb_status says why). */
static int deliver(struct os_xfer *x, const char *ptr, size_t n)
{
    if (x->on_data && x->status >= 200 && x->status < 300) {
        rk_status s = x->on_data(x->on_data_ctx, ptr, n);
        if (s != RK_OK) {
            x->cb_status = s;
            return -1;
        }
        return 0;
    }
    size_t room = x->body_len < x->body_max ? x->body_max - x->body_len : 0;
    size_t take = n < room ? n : room;
    if (take < n) {
        x->body_truncated = 1;
        if (!x->on_data) {
            /* A buffered (JSON) reply above the cap is an error. */
            x->cb_status = RK_E_TOO_LARGE;
            return -1;
        }
    }
    if (take) {
        char *b = realloc(x->body, x->body_len + take + 1);
        if (!b) {
            x->cb_status = RK_E_NOMEM;
            return -1;
        }
        x->body = b;
        memcpy(x->body + x->body_len, ptr, take);
        x->body_len += take;
        x->body[x->body_len] = '\0';
    }
    return 0;
}

/** libcurl's write callback. */
static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct os_xfer *x = ud;
    size_t n = size * nmemb;
    if (x->status == 0)
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->status);
    return deliver(x, ptr, n) == 0 ? n : 0;
}

/** 1 (and x->abort_reason set) when the exchange must stop: the call's deadline passed (the
 *  core's; checked first, so a call that ran out of time reports RK_E_TIMEOUT even though the
 *  host also counts it as cancelled), the client left, or the exchange's own bound passed. */
static int should_abort(struct os_xfer *x)
{
    const struct rk_host *h = x->inst->host;
    int64_t now = h->now_ms();
    int64_t dl = x->call ? h->deadline_ms(x->call) : 0;
    if (dl > 0 && now >= dl) {
        x->abort_reason = OS_ABORT_CALL_DEADLINE;
        return 1;
    }
    if (x->call && h->cancelled(x->call)) {
        x->abort_reason = OS_ABORT_CANCELLED;
        return 1;
    }
    if (x->own_deadline_ms > 0 && now >= x->own_deadline_ms) {
        x->abort_reason = OS_ABORT_OWN;
        return 1;
    }
    return 0;
}

/** Progress callback: the call's deadline, client cancellation and the own bound. */
static int xferinfo_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    return should_abort(ud);
}

/** The loop's check of an idle stream (os_loop_job.should_abort). */
static int loop_should_abort(void *ctx)
{
    return should_abort(ctx);
}

/** Describe an exchange; timeout_ms bounds the whole exchange (0: only the call's deadline).
 *  Nothing is set up for a carrier yet (xfer_begin chooses it). */
rk_status os_xfer_init(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
                       const char *method, const char *url, int64_t timeout_ms)
{
    memset(x, 0, sizeof(*x));
    x->inst = inst;
    x->call = call;
    x->body_max = OS_MAX_JSON_BODY;
    x->cb_status = RK_OK;
    x->prep_status = RK_OK;
    x->h1.fd = -1;
    const struct rk_host *h = inst->host;
    if (strlen(method) >= sizeof x->method)
        return RK_E_INVALID;
    strcpy(x->method, method);
    x->url = strdup(url);
    if (!x->url)
        return RK_E_NOMEM;
    if (timeout_ms > 0)
        x->own_deadline_ms = h->now_ms() + timeout_ms;
    if (call) {
        rk_status s = os_xfer_header(x, "X-Request-ID", h->request_id(call));
        if (s != RK_OK)
            return s;
    }
    return os_xfer_header(x, "Expect", "");
}

void *os_xfer_curl(struct os_xfer *x)
{
    if (x->curl)
        return x->curl;
    struct os_inst *inst = x->inst;
    CURL *c = rku_curl_pool_get(inst->pool, NULL);
    if (!c)
        return NULL;
    x->curl = c;
    curl_easy_setopt(c, CURLOPT_URL, x->url);
    if (inst->share)
        curl_easy_setopt(c, CURLOPT_SHARE, inst->share);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(inst->connect_timeout_s * 1000));
    if (x->own_deadline_ms > 0) {
        int64_t left = x->own_deadline_ms - inst->host->now_ms();
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(left > 0 ? left : 1));
    }
    curl_easy_setopt(c, CURLOPT_USERAGENT, OS_USER_AGENT);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    if (strcmp(x->method, "GET") == 0) {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    } else {
        if (strcmp(x->method, "POST") == 0)
            curl_easy_setopt(c, CURLOPT_POST, 1L);
        else
            curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, x->method);
        if (x->req_body || strcmp(x->method, "POST") == 0) {
            const char *b = x->req_body ? x->req_body : "";
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(b));
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, b);
        }
    }
    if (x->once) { /* libcurl re-sends on a kept connection that died: one of its own */
        curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
    }
    return c;
}

/** Add one request header ("Name: value"; an empty value disables a curl default). */
rk_status os_xfer_header(struct os_xfer *x, const char *name, const char *value)
{
    struct os_sb sb = {0};
    if (value && *value)
        os_sb_printf(&sb, "%s: %s", name, value);
    else
        os_sb_printf(&sb, "%s:", name);
    char *line = os_sb_take(&sb);
    if (!line)
        return RK_E_NOMEM;
    /* Header values must not smuggle extra lines. */
    for (char *c = line; *c; c++) {
        if (*c == '\r' || *c == '\n')
            *c = ' ';
    }
    struct curl_slist *l = curl_slist_append(x->hdrs, line);
    free(line);
    if (!l)
        return RK_E_NOMEM;
    x->hdrs = l;
    return RK_OK;
}

/** Bound the whole exchange by timeout_ms from now instead of the bound it was prepared with. */
void os_xfer_limit(struct os_xfer *x, int64_t timeout_ms)
{
    x->own_deadline_ms = x->inst->host->now_ms() + timeout_ms;
    if (x->curl)
        curl_easy_setopt(x->curl, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
}

/** Send this exchange at most once. Both carriers re-send a request whose kept connection died
 * before any reply byte (the server's keep-alive timeout racing it), and a non-idempotent
 * request (a create, a snapshot, a restore) must never be sent twice: a lost reply surfaces as
 * an error instead (a lost create is then looked up by its ROCK id). The loop's HTTP/1.1 client
 * carries it when the origin allows (x then waits on the loop like a command stream's exchange):
 * it never re-sends such an exchange and gives it a kept connection only one idle for less than
 * half a second and checked open, so a burst of creates reuses connections. libcurl cannot be
 * told not to re-send, so through it the exchange gets a new connection, closed after it. */
void os_xfer_send_once(struct os_xfer *x)
{
    x->once = 1;
    if (x->curl) {
        curl_easy_setopt(x->curl, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(x->curl, CURLOPT_FORBID_REUSE, 1L);
    }
}

/** Send a JSON body (copied). */
void os_xfer_json(struct os_xfer *x, const char *json)
{
    free(x->req_body);
    x->req_body = strdup(json);
    if (!x->req_body || os_xfer_header(x, "Content-Type", "application/json") != RK_OK) {
        x->prep_status = RK_E_NOMEM;
        return;
    }
    if (x->curl) {
        curl_easy_setopt(x->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(x->req_body));
        curl_easy_setopt(x->curl, CURLOPT_POSTFIELDS, x->req_body);
    }
}

/** Set x up for libcurl with the attempt's deadline and headers. NULL on OOM. */
static void *curl_arm(struct os_xfer *x)
{
    if (!os_xfer_curl(x))
        return NULL;
    int64_t dl = x->call_dl;
    if (dl > 0 && (x->own_deadline_ms == 0 || dl < x->own_deadline_ms)) {
        int64_t left = dl - x->inst->host->now_ms();
        curl_easy_setopt(x->curl, CURLOPT_TIMEOUT_MS, (long)(left > 0 ? left : 1));
    }
    curl_easy_setopt(x->curl, CURLOPT_HTTPHEADER, x->hdrs);
    return x->curl;
}

/* ---- the loop's HTTP/1.1 client as carrier ---------------------------- */

/** os_xfer_perform's wait for an exchange on the client. */
struct os_h1_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int code;
};

static void h1_status(void *ctx, long status)
{
    ((struct os_xfer *)ctx)->status = status;
}

static int h1_body(void *ctx, const char *p, size_t n)
{
    return deliver(ctx, p, n);
}

static int h1_should_abort(void *ctx)
{
    return should_abort(ctx);
}

/** The exchange's deadline: the earlier of its own bound and the call's. */
static int64_t h1_deadline(void *ctx)
{
    const struct os_xfer *x = ctx;
    int64_t dl = x->own_deadline_ms;
    if (x->call_dl > 0 && (dl == 0 || x->call_dl < dl))
        dl = x->call_dl;
    return dl;
}

static rk_status xfer_result(struct os_xfer *x, CURLcode cc);

/** The client ended the exchange (loop thread): wake the waiter or report to done. */
static void h1_done(void *ctx, int code, const char *err)
{
    struct os_xfer *x = ctx;
    if (err && !x->errbuf[0])
        snprintf(x->errbuf, sizeof x->errbuf, "%s", err);
    struct os_h1_wait *w = x->h1_wait;
    if (!w) {
        x->done(x, xfer_result(x, (CURLcode)code));
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->code = code;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu); /* x and w are the waiter's again */
}

static const struct rku_h1_ops h1_ops = {
    .on_status = h1_status,
    .on_body = h1_body,
    .should_abort = h1_should_abort,
    .deadline = h1_deadline,
    .on_done = h1_done,
};

/** 1 when the loop's client can carry x: its request is then written out in x->h1. */
static int h1_prepare(struct os_xfer *x)
{
    const char *host, *path;
    size_t host_len;
    if (x->curl || !os_loop_h1(x->inst->loop) || /* an easy handle asked for: libcurl's */
        !rku_h1_target(&x->h1, x->url, &host, &host_len, &path))
        return 0;
    struct os_sb sb = {0};
    os_sb_printf(&sb, "%s %s HTTP/1.1\r\nHost: %.*s\r\nUser-Agent: %s\r\n", x->method, path,
                 (int)host_len, host, OS_USER_AGENT);
    int accept = 0;
    for (const struct curl_slist *l = x->hdrs; l; l = l->next) {
        size_t n = strlen(l->data);
        if (n && l->data[n - 1] == ':')
            continue; /* "Name:" only turns off a libcurl default */
        if (strncasecmp(l->data, "Accept:", 7) == 0)
            accept = 1;
        os_sb_printf(&sb, "%s\r\n", l->data);
    }
    if (!accept)
        os_sb_puts(&sb, "Accept: */*\r\n"); /* as libcurl sends */
    size_t blen = x->req_body ? strlen(x->req_body) : 0;
    if (x->req_body || strcmp(x->method, "POST") == 0)
        os_sb_printf(&sb, "Content-Length: %zu\r\n", blen);
    os_sb_puts(&sb, "\r\n");
    if (blen)
        os_sb_putn(&sb, x->req_body, blen);
    size_t len = sb.len;
    char *req = os_sb_take(&sb);
    if (!req)
        return 0; /* libcurl may still manage; it reports its own failure */
    x->h1.req = req;
    x->h1.req_len = len;
    x->h1.once = x->once;
    x->h1.connect_ms = (int64_t)x->inst->connect_timeout_s * 1000;
    x->h1.ops = &h1_ops;
    x->h1.ctx = x;
    x->on_h1 = 1;
    return 1;
}

/** Hand x to the client. 0, or -1 when the loop is unavailable: x is then set up for libcurl
 *  instead (-2 when even that fails: out of memory). */
static int h1_submit(struct os_xfer *x)
{
    if (rku_h1_submit(os_loop_h1(x->inst->loop), &x->h1) == 0)
        return 0;
    free(x->h1.req);
    x->h1.req = NULL;
    x->on_h1 = 0;
    return curl_arm(x) ? -1 : -2;
}

/** Checks and options before a transfer runs: RK_OK, or the status it ends with at once
 *  (the call's deadline passed, the client left). Remembers the deadline in x->call_dl. */
static rk_status xfer_begin(struct os_xfer *x)
{
    const struct rk_host *h = x->inst->host;
    int64_t dl = x->call ? h->deadline_ms(x->call) : 0;
    x->call_dl = dl;
    if (dl > 0 && dl - h->now_ms() <= 0)
        return RK_E_TIMEOUT;
    if (x->call && h->cancelled(x->call))
        return RK_E_CANCELLED;
    if (x->prep_status != RK_OK)
        return x->prep_status;
    x->status = 0; /* this attempt's answer */
    x->errbuf[0] = '\0';
    if ((x->use_loop || x->once) && h1_prepare(x))
        return RK_OK;
    if (!curl_arm(x))
        return RK_E_NOMEM;
    if (x->use_loop) {
        /* Events are small: libcurl's smallest receive buffer (1 KiB) instead of
         * 16 KiB per open stream; output arrives in more callbacks, not slower. */
        curl_easy_setopt(x->curl, CURLOPT_BUFFERSIZE, 1024L);
        x->job.curl = x->curl;
        x->job.should_abort = loop_should_abort;
        x->job.ctx = x;
        x->job.errbuf = x->errbuf;
        x->job.errbuf_len = sizeof x->errbuf;
    }
    return RK_OK;
}

/** The exchange's status once curl ended it with cc (see os_xfer_perform). */
static rk_status xfer_result(struct os_xfer *x, CURLcode cc)
{
    const struct rk_host *h = x->inst->host;
    int64_t dl = x->call_dl;
    x->curl_code = (int)cc;
    if (x->curl)
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->status);
    if (cc == CURLE_OK)
        return RK_OK;
    if (x->abort_reason == OS_ABORT_CALL_DEADLINE)
        return RK_E_TIMEOUT;
    if (x->abort_reason == OS_ABORT_CANCELLED)
        return RK_E_CANCELLED;
    if (x->abort_reason == OS_ABORT_OWN || cc == CURLE_OPERATION_TIMEDOUT) {
        /* libcurl's timer started after dl was read: when it was set from the call's deadline
         * and ended the transfer, that deadline has passed by now. */
        if (dl > 0 && h->now_ms() >= dl)
            return RK_E_TIMEOUT;
        x->timed_out = 1;
        if (!x->errbuf[0])
            snprintf(x->errbuf, sizeof(x->errbuf), "timed out");
        return RK_E_UNAVAILABLE;
    }
    if (x->cb_status != RK_OK)
        return x->cb_status;
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
        cc == CURLE_COULDNT_RESOLVE_PROXY)
        x->not_sent = 1;
    return RK_E_UNAVAILABLE;
}

/**
 * Run the exchange. RK_OK means an HTTP answer arrived (check x->status);
 * otherwise RK_E_TIMEOUT (the call's deadline passed: the deadline decides),
 * RK_E_CANCELLED, the streaming callback's status, or RK_E_UNAVAILABLE
 * (transport; x->timed_out when the exchange's own bound expired).
 */
rk_status os_xfer_perform(struct os_xfer *x)
{
    rk_status s = xfer_begin(x);
    if (s != RK_OK)
        return s;
    if (x->on_h1) {
        struct os_h1_wait w = {.done = 0};
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        x->h1_wait = &w;
        int r = h1_submit(x);
        if (r == 0) {
            pthread_mutex_lock(&w.mu);
            while (!w.done)
                pthread_cond_wait(&w.cv, &w.mu);
            pthread_mutex_unlock(&w.mu);
        }
        x->h1_wait = NULL;
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
        if (r == 0)
            return xfer_result(x, (CURLcode)w.code);
        if (r == -2)
            return RK_E_NOMEM;
        return xfer_result(x, curl_easy_perform(x->curl)); /* the loop is gone: run it here */
    }
    CURLcode cc;
    if (x->use_loop && os_loop_run(x->inst->loop, &x->job) == 0)
        cc = (CURLcode)x->job.curl_code;
    else
        cc = curl_easy_perform(x->curl);
    return xfer_result(x, cc);
}

/** The loop's end of an exchange started with os_xfer_start (loop thread). */
static void xfer_loop_done(struct os_loop_job *j)
{
    struct os_xfer *x = j->ctx;
    x->done(x, xfer_result(x, (CURLcode)j->curl_code));
}

/**
 * Start the exchange on the instance's loop without waiting (x->use_loop is implied): done(x,
 * status) runs on the loop thread when it ended, with os_xfer_perform's statuses. RK_OK: done
 * will run (when the loop is unavailable the exchange runs here and done runs before this
 * returns). Otherwise the exchange ended at once with that status and done is not called.
 */
rk_status os_xfer_start(struct os_xfer *x, void (*done)(struct os_xfer *x, rk_status s))
{
    x->use_loop = 1;
    rk_status s = xfer_begin(x);
    if (s != RK_OK)
        return s;
    x->done = done;
    if (x->on_h1) {
        int r = h1_submit(x);
        if (r == -2)
            return RK_E_NOMEM;
        if (r == -1)
            done(x, xfer_result(x, curl_easy_perform(x->curl)));
        return RK_OK;
    }
    x->job.on_done = xfer_loop_done;
    if (os_loop_submit(x->inst->loop, &x->job) != 0)
        done(x, xfer_result(x, curl_easy_perform(x->curl)));
    return RK_OK;
}

/** Text describing the last transport failure. */
const char *os_xfer_err(const struct os_xfer *x)
{
    if (x->errbuf[0])
        return x->errbuf;
    return curl_easy_strerror((CURLcode)x->curl_code);
}

/** Return the handle to the pool; release headers and buffered body. */
void os_xfer_cleanup(struct os_xfer *x)
{
    /* A handle whose exchange was aborted mid-stream closes its connection itself (curl does not
     * keep a connection it could not finish), so every handle can go back to the pool. */
    if (x->curl)
        rku_curl_pool_put(x->inst->pool, NULL, x->curl, 1);
    curl_slist_free_all(x->hdrs);
    free(x->body);
    free(x->url);
    free(x->req_body);
    free(x->h1.req); /* a request the client never took */
    x->curl = NULL;
    x->hdrs = NULL;
    x->body = NULL;
    x->url = NULL;
    x->req_body = NULL;
    x->h1.req = NULL;
}
