/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_http.c
 * @brief One HTTP exchange over libcurl: pooled easy handles, bounded buffering,
 *        deadlines and cancellation.
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
#include <stdlib.h>
#include <string.h>

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

/** Write callback: stream 2xx bodies to on_data, buffer everything else (bounded). */
static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct os_xfer *x = ud;
    size_t n = size * nmemb;
    if (x->status == 0)
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->on_data && x->status >= 200 && x->status < 300) {
        rk_status s = x->on_data(x->on_data_ctx, ptr, n);
        if (s != RK_OK) {
            x->cb_status = s;
            return 0;
        }
        return n;
    }
    size_t room = x->body_len < x->body_max ? x->body_max - x->body_len : 0;
    size_t take = n < room ? n : room;
    if (take < n) {
        x->body_truncated = 1;
        if (!x->on_data) {
            /* A buffered (JSON) reply above the cap is an error. */
            x->cb_status = RK_E_TOO_LARGE;
            return 0;
        }
    }
    if (take) {
        char *b = realloc(x->body, x->body_len + take + 1);
        if (!b) {
            x->cb_status = RK_E_NOMEM;
            return 0;
        }
        x->body = b;
        memcpy(x->body + x->body_len, ptr, take);
        x->body_len += take;
        x->body[x->body_len] = '\0';
    }
    return n;
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

/** Create the easy handle with common options; timeout_ms bounds the whole exchange. */
rk_status os_xfer_init(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
                       const char *method, const char *url, int64_t timeout_ms)
{
    memset(x, 0, sizeof(*x));
    x->inst = inst;
    x->call = call;
    x->body_max = OS_MAX_JSON_BODY;
    x->cb_status = RK_OK;
    CURL *c = rku_curl_pool_get(inst->pool, NULL);
    if (!c)
        return RK_E_NOMEM;
    x->curl = c;
    const struct rk_host *h = inst->host;
    int64_t now = h->now_ms();
    if (timeout_ms > 0)
        x->own_deadline_ms = now + timeout_ms;
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (inst->share)
        curl_easy_setopt(c, CURLOPT_SHARE, inst->share);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(inst->connect_timeout_s * 1000));
    if (timeout_ms > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(c, CURLOPT_USERAGENT, OS_USER_AGENT);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    } else {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    if (call) {
        rk_status s = os_xfer_header(x, "X-Request-ID", h->request_id(call));
        if (s != RK_OK)
            return s;
    }
    return os_xfer_header(x, "Expect", "");
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
    curl_easy_setopt(x->curl, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
}

/** Send this exchange at most once: on a new connection, closed after it. libcurl silently
 * re-sends a request whose reused connection died before any reply byte; a non-idempotent
 * request (a create, a snapshot, a restore) must never be sent twice, so a lost reply surfaces
 * as an error instead (a lost create is then looked up by its ROCK id). The connection is not
 * kept either: it would only sit in this handle's cache, since the next such request again
 * needs a new one. */
void os_xfer_fresh_connection(struct os_xfer *x)
{
    curl_easy_setopt(x->curl, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(x->curl, CURLOPT_FORBID_REUSE, 1L);
}

/** Send a JSON body (copied by curl). */
void os_xfer_json(struct os_xfer *x, const char *json)
{
    curl_easy_setopt(x->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(json));
    curl_easy_setopt(x->curl, CURLOPT_COPYPOSTFIELDS, json);
    os_xfer_header(x, "Content-Type", "application/json");
}

/** Checks and options before a transfer runs: RK_OK, or the status it ends with at once
 *  (the call's deadline passed, the client left). Remembers the deadline in x->call_dl. */
static rk_status xfer_begin(struct os_xfer *x)
{
    const struct rk_host *h = x->inst->host;
    int64_t dl = x->call ? h->deadline_ms(x->call) : 0;
    x->call_dl = dl;
    if (dl > 0) {
        int64_t left = dl - h->now_ms();
        if (left <= 0)
            return RK_E_TIMEOUT;
        if (x->own_deadline_ms == 0 || dl < x->own_deadline_ms)
            curl_easy_setopt(x->curl, CURLOPT_TIMEOUT_MS, (long)left);
    }
    if (x->call && h->cancelled(x->call))
        return RK_E_CANCELLED;
    curl_easy_setopt(x->curl, CURLOPT_HTTPHEADER, x->hdrs);
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
    x->curl = NULL;
    x->hdrs = NULL;
    x->body = NULL;
}
