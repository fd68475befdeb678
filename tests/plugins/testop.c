/* SPDX-License-Identifier: Apache-2.0 */
/*
 * testop: an in-memory operator plugin used by the test suite (a fixture, not
 * a product backend). Sandboxes, files and sessions live in this process.
 * Built twice: "testop" with every capability, and "testop_min"
 * (TESTOP_MINIMAL) with only the mandatory entry points, so the HTTP tests can
 * drive both the success paths and every capability refusal.
 *
 * Behaviour hooks for tests, chosen by the image name at create time:
 *   "...pending..."  stays Pending;   "...createfail..."  create fails;
 *   "...failed..."   reports Failed;  anything else       Running at once.
 * Commands (exec and session_run): "echo X" prints X, "fail N" exits N,
 * "stderr X" prints X on stderr, "sleep" times out when timeout_ms > 0,
 * "env NAME" prints the value of NAME from the request env, "wait N" sleeps
 * N x 100 ms (honouring cancellation), "big N" prints N bytes.
 *
 * Also built as "testop_v10" against tests/plugins/abi-1.0/ (the exact ABI
 * 1.0 header): a real 1.0 plugin binary that the current core must keep
 * loading and serving. Code for 1.1 additions is under
 * RK_OPERATOR_ABI_MINOR >= 1.
 *
 * 1.1 builds: session_run with expect strings reports the first expect
 * string found in the output as expect_string; create logs one line with
 * host->log_call (carries the request id); restore() brings an archived
 * sandbox back as running.
 *
 * 1.2 builds (testop) also have the asynchronous forms exec_start and
 * session_run_start: a command is queued to one loop thread of the plugin
 * ("testop-loop"), which runs it and reports its end with host->call_done; a
 * "wait N" is a timer there (no thread sleeps for it), checked against
 * cancelled() and deadline_ms() every 20 ms. "inline X" runs X inside
 * exec_start and reports the end before exec_start returns (the contract's
 * edge). Also built as "testop_v11" against tests/plugins/abi-1.1/.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rock-admin/operator.h"

#ifndef TESTOP_NAME
#define TESTOP_NAME "testop"
#endif

#define MAX_SBX 1024
#define MAX_FILES 256

struct tfile {
    char path[256];
    char *data;
    size_t len;
    unsigned mode;
};

struct tsbx {
    char rock_id[128];
    char up_id[140];
    int state; /* enum rk_state */
    int failed;
    struct tfile files[MAX_FILES];
    int nfiles;
};

struct tjob;

struct testop {
    const struct rk_host *host;
    pthread_mutex_t mu;
    struct tsbx *sbx[MAX_SBX];
    int n;
    const char *proxy_base;
    long long sessions;
    /* the asynchronous forms' loop (1.2), started on first use; guarded by mu */
    pthread_cond_t loop_cv;
    pthread_t loop;
    int loop_started;
    int loop_stop;
    struct tjob *queue; /* started, not yet taken by the loop */
};

static const struct rk_cfg_key config_keys[] = {
    {"proxy_base", RK_CFG_STR, 0, "http://127.0.0.1:9", NULL, NULL, "base URL for proxy_target"},
    {"token", RK_CFG_STR, RK_CFGF_SECRET, "", NULL, "TESTOP_TOKEN", "secret for redaction tests"},
    {"required_flag", RK_CFG_BOOL, 0, "false", NULL, NULL, "a boolean"},
    {NULL, 0, 0, NULL, NULL, NULL, NULL},
};

/* Find a sandbox by upstream id or, if up is NULL, by rock id. Locked by caller. */
static struct tsbx *find(struct testop *t, const char *rock, const char *up)
{
    for (int i = 0; i < t->n; i++) {
        if (up && strcmp(t->sbx[i]->up_id, up) == 0)
            return t->sbx[i];
        if (!up && rock && strcmp(t->sbx[i]->rock_id, rock) == 0)
            return t->sbx[i];
    }
    return NULL;
}

static rk_status t_init(const struct rk_host *host, const struct rk_cfg *cfg, void **inst)
{
    struct testop *t = calloc(1, sizeof *t);
    if (!t)
        return RK_E_NOMEM;
    t->host = host;
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->loop_cv, &ca);
    pthread_condattr_destroy(&ca);
    t->proxy_base = host->cfg_str(cfg, "proxy_base");
    const char *tok = host->cfg_str(cfg, "token");
    if (tok && strcmp(tok, "bad") == 0) {
        host->cfg_problem(cfg, "token", "must not be \"bad\"");
        pthread_cond_destroy(&t->loop_cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return RK_E_INVALID;
    }
    *inst = t;
    return RK_OK;
}

static void t_fini(void *inst)
{
    struct testop *t = inst;
    pthread_mutex_lock(&t->mu);
    int started = t->loop_started;
    t->loop_stop = 1;
    pthread_cond_signal(&t->loop_cv);
    pthread_mutex_unlock(&t->mu);
    if (started)
        pthread_join(t->loop, NULL);
    pthread_cond_destroy(&t->loop_cv);
    for (int i = 0; i < t->n; i++) {
        for (int f = 0; f < t->sbx[i]->nfiles; f++)
            free(t->sbx[i]->files[f].data);
        free(t->sbx[i]);
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static rk_status t_create(void *inst, struct rk_call *call, const struct rk_create_spec *spec,
                          struct rk_created *out)
{
    struct testop *t = inst;
    if (strstr(spec->image, "createfail"))
        return t->host->set_error(call, RK_E_UPSTREAM, "testop create failed: image %s refused",
                                  spec->image);
    pthread_mutex_lock(&t->mu);
    if (t->n >= MAX_SBX) {
        pthread_mutex_unlock(&t->mu);
        return t->host->set_error(call, RK_E_UNAVAILABLE, "testop is full");
    }
    struct tsbx *s = calloc(1, sizeof *s);
    snprintf(s->rock_id, sizeof s->rock_id, "%s", spec->sandbox_id);
    snprintf(s->up_id, sizeof s->up_id, "t-%s", spec->sandbox_id);
    s->state = strstr(spec->image, "pending") ? RK_STATE_PENDING : RK_STATE_RUNNING;
    s->failed = strstr(spec->image, "failed") != NULL;
    if (s->failed)
        s->state = RK_STATE_STOPPED;
    t->sbx[t->n++] = s;
#if RK_OPERATOR_ABI_MINOR >= 1
    if (RK_HOST_HAS(t->host, log_call))
        t->host->log_call(call, RK_LOG_INFO, "testop created %s", s->up_id);
#endif
    out->upstream_id = t->host->arena_strdup(call, s->up_id);
    out->image = t->host->arena_strdup(call, spec->image);
    pthread_mutex_unlock(&t->mu);
    return RK_OK;
}

static rk_status t_status(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                          struct rk_status_info *out)
{
    struct testop *t = inst;
    pthread_mutex_lock(&t->mu);
    struct tsbx *s = find(t, ref->sandbox_id, ref->upstream_id);
    if (!s) {
        pthread_mutex_unlock(&t->mu);
        return t->host->set_error(call, RK_E_NOT_FOUND, "no such sandbox");
    }
    out->state = s->state;
    out->failed = s->failed;
    out->reason = s->failed ? "testop sandbox failed" : NULL;
    if (!ref->upstream_id)
        out->upstream_id = t->host->arena_strdup(call, s->up_id);
    pthread_mutex_unlock(&t->mu);
    return RK_OK;
}

static rk_status t_destroy(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    (void)call;
    struct testop *t = inst;
    pthread_mutex_lock(&t->mu);
    struct tsbx *s = find(t, ref->sandbox_id, ref->upstream_id);
    if (s)
        s->state = RK_STATE_DELETED;
    pthread_mutex_unlock(&t->mu);
    return RK_OK;
}

#ifndef TESTOP_MINIMAL
static rk_status t_stop(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    struct testop *t = inst;
    (void)call;
    pthread_mutex_lock(&t->mu);
    struct tsbx *s = find(t, ref->sandbox_id, ref->upstream_id);
    if (s)
        s->state = RK_STATE_STOPPED;
    pthread_mutex_unlock(&t->mu);
    return RK_OK;
}

static rk_status t_restart(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    struct testop *t = inst;
    (void)call;
    pthread_mutex_lock(&t->mu);
    struct tsbx *s = find(t, ref->sandbox_id, ref->upstream_id);
    if (s)
        s->state = RK_STATE_RUNNING;
    pthread_mutex_unlock(&t->mu);
    return RK_OK;
}

static rk_status t_simple(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    (void)inst;
    (void)call;
    (void)ref;
    return RK_OK;
}

/* Restore: the sandbox (known or not, e.g. an injected archived record) runs again. */
static rk_status t_restore(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    struct testop *t = inst;
    pthread_mutex_lock(&t->mu);
    struct tsbx *s = find(t, ref->sandbox_id, ref->upstream_id);
    if (!s && t->n < MAX_SBX && (s = calloc(1, sizeof *s)) != NULL) {
        snprintf(s->rock_id, sizeof s->rock_id, "%s", ref->sandbox_id);
        snprintf(s->up_id, sizeof s->up_id, "%s",
                 ref->upstream_id ? ref->upstream_id : ref->sandbox_id);
        t->sbx[t->n++] = s;
    }
    if (s)
        s->state = RK_STATE_RUNNING;
    pthread_mutex_unlock(&t->mu);
    return s ? RK_OK : t->host->set_error(call, RK_E_UNAVAILABLE, "testop is full");
}

static rk_status t_commit(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                          const char *tag)
{
    (void)tag;
    return t_simple(inst, call, ref);
}

static rk_status t_statistics(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                              const struct rk_sink *sink)
{
    (void)inst;
    (void)call;
    char buf[256];
    snprintf(buf, sizeof buf, "{\"sandbox_id\":\"%s\",\"cpu_percent\":1.5}", ref->sandbox_id);
    return sink->write(sink->ctx, RK_STREAM_DATA, buf, strlen(buf));
}

/* Run the tiny command language shared by exec and session_run. */
static rk_status run_command(struct testop *t, struct rk_call *call, const char *cmd,
                             const struct rk_kv *env, size_t env_len, int64_t timeout_ms,
                             const struct rk_sink *sink, struct rk_exec_res *out, int merge)
{
    out->has_exit_code = 1;
    out->exit_code = 0;
    rk_status st = RK_OK;
    if (strncmp(cmd, "echo ", 5) == 0) {
        st = sink->write(sink->ctx, RK_STREAM_STDOUT, cmd + 5, strlen(cmd + 5));
        if (st == RK_OK)
            st = sink->write(sink->ctx, RK_STREAM_STDOUT, "\n", 1);
    } else if (strncmp(cmd, "stderr ", 7) == 0) {
        st = sink->write(sink->ctx, merge ? RK_STREAM_STDOUT : RK_STREAM_STDERR, cmd + 7,
                         strlen(cmd + 7));
    } else if (strncmp(cmd, "fail ", 5) == 0) {
        out->exit_code = atoi(cmd + 5);
        st = sink->write(sink->ctx, RK_STREAM_STDOUT, "failing", 7);
    } else if (strncmp(cmd, "env ", 4) == 0) {
        for (size_t i = 0; i < env_len; i++)
            if (strcmp(env[i].key, cmd + 4) == 0)
                st = sink->write(sink->ctx, RK_STREAM_STDOUT, env[i].value, strlen(env[i].value));
    } else if (strncmp(cmd, "big ", 4) == 0) {
        /* Emit N bytes in 64 KiB chunks (output cap tests). */
        long long n = atoll(cmd + 4);
        char chunk[65536];
        memset(chunk, 'x', sizeof chunk);
        while (n > 0 && st == RK_OK) {
            size_t k = n > (long long)sizeof chunk ? sizeof chunk : (size_t)n;
            st = sink->write(sink->ctx, RK_STREAM_STDOUT, chunk, k);
            n -= (long long)k;
        }
    } else if (strcmp(cmd, "sleep") == 0) {
        if (timeout_ms > 0) {
            out->timed_out = 1;
            out->has_exit_code = 1;
            out->exit_code = -1;
        }
    } else if (strncmp(cmd, "wait ", 5) == 0) {
        /* Sleep N x 100 ms, giving up when the call is cancelled (drain tests). */
        int n = atoi(cmd + 5);
        for (int i = 0; i < n; i++) {
            if (t->host->cancelled(call))
                return t->host->set_error(call, RK_E_CANCELLED, "cancelled after %d00 ms", i);
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        st = sink->write(sink->ctx, RK_STREAM_STDOUT, "waited\n", 7);
    } else if (strcmp(cmd, "backend-error") == 0) {
        out->error_text = t->host->arena_strdup(call, "RuntimeError: boom");
        out->has_exit_code = 0;
    } else {
        st = sink->write(sink->ctx, RK_STREAM_STDOUT, cmd, strlen(cmd));
    }
    return st;
}

static rk_status t_exec(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                        const struct rk_exec_req *req, const struct rk_sink *sink,
                        struct rk_exec_res *out)
{
    (void)ref;
    return run_command(inst, call, req->command, req->env, req->env_len, req->timeout_ms, sink, out,
                       0);
}

static struct tfile *find_file(struct tsbx *s, const char *path)
{
    for (int i = 0; i < s->nfiles; i++)
        if (strcmp(s->files[i].path, path) == 0)
            return &s->files[i];
    return NULL;
}

static rk_status t_file_read(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                             const char *path, const struct rk_sink *sink)
{
    struct testop *t = inst;
    pthread_mutex_lock(&t->mu);
    struct tsbx *s = find(t, ref->sandbox_id, ref->upstream_id);
    struct tfile *f = s ? find_file(s, path) : NULL;
    if (!f) {
        pthread_mutex_unlock(&t->mu);
        return t->host->set_error(call, RK_E_NOT_FOUND, "testop read failed: %s not found", path);
    }
    rk_status st = sink->write(sink->ctx, RK_STREAM_DATA, f->data, f->len);
    pthread_mutex_unlock(&t->mu);
    return st;
}

static rk_status t_file_stat(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                             const char *path, struct rk_file_info *out)
{
    struct testop *t = inst;
    (void)call;
    pthread_mutex_lock(&t->mu);
    struct tsbx *s = find(t, ref->sandbox_id, ref->upstream_id);
    struct tfile *f = s ? find_file(s, path) : NULL;
    out->exists = f != NULL;
    out->mode = f ? f->mode : 0;
    out->size = f ? (int64_t)f->len : -1;
    pthread_mutex_unlock(&t->mu);
    return RK_OK;
}

static rk_status t_file_write(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                              const char *path, unsigned mode, const struct rk_source *src)
{
    struct testop *t = inst;
    /* Read the whole source first (test files are small) without holding the lock. */
    char *data = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nd = realloc(data, cap);
            if (!nd) {
                free(data);
                return RK_E_NOMEM;
            }
            data = nd;
        }
        long long n = src->read(src->ctx, data + len, cap - len);
        if (n < 0) {
            free(data);
            return t->host->set_error(call, RK_E_CANCELLED, "upload aborted");
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    pthread_mutex_lock(&t->mu);
    struct tsbx *s = find(t, ref->sandbox_id, ref->upstream_id);
    if (!s) {
        pthread_mutex_unlock(&t->mu);
        free(data);
        return t->host->set_error(call, RK_E_NOT_FOUND, "no such sandbox");
    }
    struct tfile *f = find_file(s, path);
    if (!f && s->nfiles < MAX_FILES) {
        f = &s->files[s->nfiles++];
        snprintf(f->path, sizeof f->path, "%s", path);
    }
    if (!f) {
        pthread_mutex_unlock(&t->mu);
        free(data);
        return t->host->set_error(call, RK_E_TOO_LARGE, "too many files");
    }
    free(f->data);
    f->data = data;
    f->len = len;
    f->mode = mode;
    pthread_mutex_unlock(&t->mu);
    return RK_OK;
}

static rk_status t_session_open(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                                const struct rk_session_opts *opts, struct rk_session_opened *out)
{
    struct testop *t = inst;
    (void)ref;
    if (opts->remote_user && strcmp(opts->remote_user, "tester") != 0)
        return t->host->set_error(call, RK_E_INVALID,
                                  "testop does not support remote_user=%s; the sandbox effective "
                                  "user is tester",
                                  opts->remote_user);
    pthread_mutex_lock(&t->mu);
    long long n = ++t->sessions;
    pthread_mutex_unlock(&t->mu);
    char id[64];
    snprintf(id, sizeof id, "ts-%lld", n);
    out->session_id = t->host->arena_strdup(call, id);
    out->output = "";
    return RK_OK;
}

static rk_status t_session_run(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                               const char *sid, const struct rk_session_req *req,
                               const struct rk_sink *sink, struct rk_exec_res *out)
{
    (void)ref;
    (void)sid;
#if RK_OPERATOR_ABI_MINOR >= 1
    if (req->expect_len > 0 || req->flags) {
        /* Interactive: the output is the command text; report the first
         * expect string it contains. */
        struct testop *t = inst;
        out->has_exit_code = 1;
        out->exit_code = 0;
        for (size_t i = 0; i < req->expect_len; i++)
            if (strstr(req->command, req->expect[i])) {
                out->expect_string = t->host->arena_strdup(call, req->expect[i]);
                break;
            }
        return sink->write(sink->ctx, RK_STREAM_STDOUT, req->command, strlen(req->command));
    }
#endif
    return run_command(inst, call, req->command, NULL, 0, req->timeout_ms, sink, out, 1);
}

static rk_status t_session_close(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                                 const char *sid)
{
    (void)inst;
    (void)call;
    (void)ref;
    (void)sid;
    return RK_OK;
}

#if RK_OPERATOR_ABI_MINOR >= 2
/* ---- asynchronous forms (ABI 1.2) ---- */

/* One started command, owned by the loop until it reports the end. */
struct tjob {
    struct tjob *next;
    struct rk_call *call;
    const char *cmd;
    const struct rk_kv *env;
    size_t env_len;
    int64_t timeout_ms;
    const struct rk_sink *sink;
    struct rk_exec_res *out;
    int merge;
    int waits;        /* "wait N": N x 100 ms */
    int64_t start_ms; /* when it was started */
    int64_t ready_ms; /* when a wait is over */
};

#define TLOOP_TICK_MS 20

/* Run one job's command if it is due; 1 when it ended (*st set). */
static int tjob_step(struct testop *t, struct tjob *j, int64_t now, rk_status *st)
{
    const struct rk_host *h = t->host;
    int64_t dl = h->deadline_ms(j->call);
    if (dl > 0 && now >= dl) {
        *st = h->set_error(j->call, RK_E_TIMEOUT, "testop: the call's deadline passed");
        return 1;
    }
    if (h->cancelled(j->call)) {
        *st = h->set_error(j->call, RK_E_CANCELLED, "cancelled after %lld ms",
                           (long long)(now - j->start_ms));
        return 1;
    }
    if (j->waits) {
        if (now < j->ready_ms)
            return 0;
        j->out->has_exit_code = 1;
        j->out->exit_code = 0;
        *st = j->sink->write(j->sink->ctx, RK_STREAM_STDOUT, "waited\n", 7);
        return 1;
    }
    *st = run_command(t, j->call, j->cmd, j->env, j->env_len, j->timeout_ms, j->sink, j->out,
                      j->merge);
    return 1;
}

/* The loop thread: takes started jobs, runs them, reports their end; never
 * sleeps for a command. */
static void *tloop_main(void *arg)
{
    struct testop *t = arg;
    struct tjob *active = NULL;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->queue) {
            struct tjob *j = t->queue;
            t->queue = j->next;
            j->next = active;
            active = j;
        }
        if (t->loop_stop && !active)
            break;
        pthread_mutex_unlock(&t->mu);
        int64_t now = t->host->now_ms();
        struct tjob **pp = &active;
        while (*pp) {
            struct tjob *j = *pp;
            rk_status st;
            if (tjob_step(t, j, now, &st)) {
                *pp = j->next;
                struct rk_call *call = j->call;
                free(j);
                t->host->call_done(call, st); /* call, sink and out are the core's again */
            } else {
                pp = &j->next;
            }
        }
        pthread_mutex_lock(&t->mu);
        if (!t->queue && !(t->loop_stop && !active)) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += TLOOP_TICK_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&t->loop_cv, &t->mu, &ts);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Queue a job to the loop (started on first use). */
static rk_status tloop_submit(struct testop *t, struct tjob *j)
{
    pthread_mutex_lock(&t->mu);
    if (!t->loop_started) {
        if (pthread_create(&t->loop, NULL, tloop_main, t) != 0) {
            pthread_mutex_unlock(&t->mu);
            struct rk_call *call = j->call;
            free(j);
            return t->host->set_error(call, RK_E_INTERNAL, "testop: no loop thread");
        }
        pthread_setname_np(t->loop, "testop-loop");
        t->loop_started = 1;
    }
    j->next = t->queue;
    t->queue = j; /* hands the call over to the loop */
    pthread_cond_signal(&t->loop_cv);
    pthread_mutex_unlock(&t->mu);
    return RK_OK;
}

/* Start one command on the loop (both async forms). */
static rk_status tstart(struct testop *t, struct rk_call *call, const char *cmd,
                        const struct rk_kv *env, size_t env_len, int64_t timeout_ms,
                        const struct rk_sink *sink, struct rk_exec_res *out, int merge)
{
    if (strncmp(cmd, "inline ", 7) == 0) {
        /* The end reported before exec_start returns. */
        rk_status st = run_command(t, call, cmd + 7, env, env_len, timeout_ms, sink, out, merge);
        t->host->call_done(call, st);
        return RK_OK;
    }
    struct tjob *j = calloc(1, sizeof *j);
    if (!j)
        return RK_E_NOMEM;
    j->call = call;
    j->cmd = cmd;
    j->env = env;
    j->env_len = env_len;
    j->timeout_ms = timeout_ms;
    j->sink = sink;
    j->out = out;
    j->merge = merge;
    j->start_ms = t->host->now_ms();
    if (strncmp(cmd, "wait ", 5) == 0) {
        j->waits = atoi(cmd + 5);
        j->ready_ms = j->start_ms + j->waits * 100LL;
    }
    return tloop_submit(t, j);
}

static rk_status t_exec_start(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                              const struct rk_exec_req *req, const struct rk_sink *sink,
                              struct rk_exec_res *out)
{
    (void)ref;
    return tstart(inst, call, req->command, req->env, req->env_len, req->timeout_ms, sink, out, 0);
}

static rk_status t_session_run_start(void *inst, struct rk_call *call,
                                     const struct rk_sandbox_ref *ref, const char *sid,
                                     const struct rk_session_req *req, const struct rk_sink *sink,
                                     struct rk_exec_res *out)
{
    if (req->expect_len > 0 || req->flags) {
        /* Interactive commands end at once: the blocking form, reported now. */
        rk_status st = t_session_run(inst, call, ref, sid, req, sink, out);
        ((struct testop *)inst)->host->call_done(call, st);
        return RK_OK;
    }
    return tstart(inst, call, req->command, NULL, 0, req->timeout_ms, sink, out, 1);
}
#endif

static rk_status t_proxy_target(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                                int port, enum rk_proxy_kind kind, struct rk_proxy_target *out)
{
    struct testop *t = inst;
    (void)ref;
    if (kind == RK_PROXY_TCP) {
        /* Port forwarding: the raw TCP port on this host. */
        char *tcp = t->host->arena_alloc(call, 64);
        if (!tcp)
            return RK_E_NOMEM;
        snprintf(tcp, 64, "tcp://127.0.0.1:%d", port);
        out->base_url = tcp;
        return RK_OK;
    }
    char *url = t->host->arena_alloc(call, 512);
    snprintf(url, 512, "%s", t->proxy_base);
    /* "{port}" in proxy_base is replaced by the requested port. */
    char *hole = strstr(url, "{port}");
    if (hole) {
        char rest[256];
        snprintf(rest, sizeof rest, "%s", hole + 6);
        snprintf(hole, 512 - (size_t)(hole - url), "%d%s", port, rest);
    }
    struct rk_kv *h = t->host->arena_alloc(call, sizeof *h);
    h->key = "X-Testop-Endpoint";
    h->value = "yes";
    out->base_url = url;
    out->headers = h;
    out->headers_len = 1;
    return RK_OK;
}
#endif

static const struct rk_operator_ops ops = {
    .struct_size = sizeof(struct rk_operator_ops),
    .init = t_init,
    .fini = t_fini,
    .create = t_create,
    .status = t_status,
    .destroy = t_destroy,
#ifndef TESTOP_MINIMAL
    .stop = t_stop,
    .restart = t_restart,
    .archive = t_simple,
    .restore = t_restore,
    .commit = t_commit,
    .statistics = t_statistics,
    .exec = t_exec,
    .file_read = t_file_read,
    .file_stat = t_file_stat,
    .file_write = t_file_write,
    .session_open = t_session_open,
    .session_run = t_session_run,
    .session_close = t_session_close,
    .proxy_target = t_proxy_target,
#if RK_OPERATOR_ABI_MINOR >= 2
    .exec_start = t_exec_start,
    .session_run_start = t_session_run_start,
#endif
#endif
};

#ifdef TESTOP_MINIMAL
#define TESTOP_CAPS 0ull
static const struct rk_cap_msg unsupported[] = {
    {RK_CAP_STOP, "testop_min backend does not support stop; use delete instead."},
    {RK_CAP_SESSION_INTERACTIVE, "testop_min sessions do not support interactive commands"},
    {0, NULL},
};
#else
#define TESTOP_CAPS                                                                                \
    (RK_CAP_EXEC | RK_CAP_FILE_READ | RK_CAP_FILE_STAT | RK_CAP_FILE_WRITE | RK_CAP_SESSION |      \
     RK_CAP_PROXY_HTTP | RK_CAP_PROXY_WS | RK_CAP_STOP | RK_CAP_RESTART | RK_CAP_ARCHIVE |         \
     RK_CAP_RESTORE | RK_CAP_COMMIT | RK_CAP_STATISTICS | RK_CAP_DELETE_PENDING |                  \
     RK_CAP_SESSION_INTERACTIVE | RK_CAP_PORT_FORWARD)
static const struct rk_cap_msg unsupported[] = {
    {RK_CAP_SESSION_INTERACTIVE, "testop sessions do not support interactive commands"},
    {RK_CAP_PORT_FORWARD, "testop backend does not support portforward in this release"},
    {0, NULL},
};
#endif

RK_OPERATOR_EXPORT = {
    .magic = RK_OPERATOR_MAGIC,
    .abi_major = RK_OPERATOR_ABI_MAJOR,
    .abi_minor = RK_OPERATOR_ABI_MINOR,
    .struct_size = sizeof(struct rk_operator),
    .abi_flags = RK_ABI_FLAGS,
    .name = TESTOP_NAME,
    .backend_tag = TESTOP_NAME,
    .display_name = "Testop",
    .version = "1.0-test",
    .flags = RK_OPF_THREADSAFE,
    .caps = TESTOP_CAPS,
    .config = config_keys,
    .unsupported = unsupported,
    .ops = &ops,
#if RK_OPERATOR_ABI_MINOR >= 1
    RK_OPERATOR_ELEMENT_SIZES,
#endif
};
