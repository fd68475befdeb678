/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Streaming multipart /upload (see upload.h for the design).
 *
 * Threads: the event loop runs body() and feeds the multipart parser; it
 * never blocks. The consumer - the gate and the plugin calls, on its own
 * struct rk_call because the per-call arena is not thread-safe - runs as a
 * job on the worker pool and reads the byte pipe. When the pipe is full the
 * body callback keeps the bytes it did not feed (r->body_kept), suspends the
 * connection and asks the pipe to resume it once the consumer has drained
 * enough (rk_bytepipe_notify_room). The parser is only fed while the pipe has
 * room for what it can emit (the fed bytes plus its own buffer), so a write
 * into the pipe never waits. begin() and handler() run on workers; the
 * handler answers once the consumer is done (deferred if it is still
 * writing). The upload state is shared by the request and the consumer and
 * freed by whichever leaves it last.
 *
 * Failure handling:
 *   - consumer fails early (sandbox not found, stat error, upstream error): it
 *     aborts the pipe, later pipe writes fail, the loop drains and discards
 *     the rest of the body and the handler replies with the consumer's error;
 *   - server.max_upload_bytes exceeded: the pipe is aborted (the plugin's
 *     source read returns -1 so it abandons the upstream write), the rest of
 *     the body is discarded, and the reply is 5000 naming the key;
 *   - client gone mid-upload: libmicrohttpd ends the request, the context
 *     destructor aborts the pipe and leaves the state to the consumer.
 *   - a file part after sandbox_id but before target_path: the connection is
 *     suspended while a job runs the dispatch gate, so nothing is spooled for
 *     a sandbox that does not pass it.
 */
#include "api/upload.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/app.h"
#include "base/budget.h"
#include "base/bytepipe.h"
#include "config/config.h"
#include "domain/dispatch.h"
#include "engine/envelope.h"
#include "engine/reply.h"
#include "host/host.h"
#include "engine/http_server.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "api/body_handoff.h"
#include "api/routes.h"
#include "base/util.h"
#include "api/validate.h"

/* What the bytes of the current multipart part are used for. */
enum part_kind {
    PART_IGNORE = 0,   /* unknown part, or a second `file` part */
    PART_FILE_PIPE,    /* file bytes streamed to the worker */
    PART_FILE_SPOOL,   /* file bytes spooled until the fields are known */
    PART_FILE_DISCARD, /* file bytes dropped (failure or invalid fields) */
    PART_FILE_HOLD,    /* file bytes kept in memory while the early gate runs */
    PART_TARGET,       /* target_path text */
    PART_SANDBOX,      /* sandbox_id text */
};

/* A text form field. */
struct field {
    char *buf; /* NUL-terminated value (malloc) */
    size_t len;
    int seen;
};

/* Room the pipe keeps beyond what the parser is fed: what it may still emit
 * from its own buffer, and its final flush at the end of the body. */
#define UPLOAD_PIPE_SLACK (4 * RK_UPLOAD_PP_BUFFER)
/* Most file bytes held in memory while the early gate runs (one read's worth). */
#define UPLOAD_HOLD_MAX (4 * 1024 * 1024)

/* Per-request upload state (r->route_ctx; shared with the consumer job). */
struct upload {
    struct rk_handoff h; /* the request (h.r, NULL once it ended) and the consumer */
    struct rk_app *app;
    int gate_needed;    /* run the early gate once the parser returns */
    struct rk_buf held; /* PART_FILE_HOLD bytes */
    struct MHD_PostProcessor *pp;
    int malformed; /* the multipart body could not be parsed */
    int closing;   /* the request is being torn down: ignore parser callbacks */

    /* current part */
    char *cur_key;
    enum part_kind cur_kind;
    uint64_t cur_bytes;
    int in_part;

    struct field target;
    struct field sandbox;
    int frozen; /* the worker has started: text fields no longer change */
    int file_seen;
    uint64_t file_bytes;
    FILE *spool;

    /* consumer */
    struct rk_bytepipe *pipe;
    int pipe_closed;
    int thread_started; /* the consumer job was queued */
    struct rk_call *wcall;
    char *w_sid;
    char *w_path;
    rk_status wst;
    int eof_seen;

    /* first local failure (too large, spool error, ...) */
    rk_status fail_st;
    char fail_msg[256];
    int busy;              /* the failure is a full spool budget: answer 503 */
    int gate_failed;       /* the early gate refused the sandbox (error on r->call) */
    int64_t spool_charged; /* bytes taken from rk_spool_budget */
};

const char *rk_upload_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Record the first local failure. */
static void upload_fail(struct upload *u, rk_status st, const char *fmt, ...) RK_PRINTF(3, 4);

/* Record the first local failure. */
static void upload_fail(struct upload *u, rk_status st, const char *fmt, ...)
{
    if (u->fail_st != RK_OK)
        return;
    u->fail_st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(u->fail_msg, sizeof u->fail_msg, fmt, ap);
    va_end(ap);
}

/* The sandbox_id value stripped of surrounding whitespace (NonBlankStr);
 * returns its start and length. */
static const char *stripped_sandbox(const struct upload *u, size_t *len)
{
    const char *s = u->sandbox.buf ? u->sandbox.buf : "";
    size_t n = u->sandbox.len;
    while (n && (*s == ' ' || (*s >= '\t' && *s <= '\r'))) {
        s++;
        n--;
    }
    while (n && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r')))
        n--;
    *len = n;
    return s;
}

/* rk_source.read for the plugin: blocks until file bytes arrive; 0 at the
 * end of the part, -1 once the pipe was aborted. */
static long long pipe_source_read(void *ctx, char *buf, size_t len)
{
    struct upload *u = ctx;
    ssize_t n = rk_bytepipe_read(u->pipe, buf, len, 0);
    if (n == 0)
        u->eof_seen = 1;
    return (long long)n;
}

/* rk_source.read from the spooled file (the handler, on a worker). */
static long long spool_source_read(void *ctx, char *buf, size_t len)
{
    struct upload *u = ctx;
    size_t n = fread(buf, 1, len, u->spool);
    if (n == 0 && ferror(u->spool))
        return -1;
    if (n == 0)
        u->eof_seen = 1;
    return (long long)n;
}

/* The consumer: gate, keep-or-644 mode, streamed write (B57-B59, B64). */
static rk_status upload_consume(struct upload *u, struct rk_source *src)
{
    struct rk_app *app = u->app;
    const struct rk_plugin *pl = app->plugin;
    struct rk_target t;
    rk_status st = rk_dispatch(app, u->wcall, RK_OP_UPLOAD, u->w_sid, &t);
    if (st == RK_OK) {
        struct rk_file_info info = {0};
        rk_metrics_upstream_begin();
        st = pl->ops.file_stat(pl->inst, u->wcall, &t.ref, u->w_path, &info);
        rk_metrics_upstream("file_stat", st);
        if (st == RK_OK) {
            unsigned mode = info.exists ? (info.mode & 07777) : 0644;
            rk_metrics_upstream_begin();
            st = pl->ops.file_write(pl->inst, u->wcall, &t.ref, u->w_path, mode, src);
            rk_metrics_upstream("file_write", st);
            if (st == RK_OK && !u->eof_seen)
                st = rk_call_set_error(u->wcall, RK_E_INTERNAL,
                                       "%s plugin finished the upload before its end",
                                       pl->desc->display_name);
        }
        rk_target_release(&t);
    }
    if (st != RK_OK && rk_call_error_code(u->wcall) == RK_OK)
        rk_call_set_error(u->wcall, st, "%s", rk_status_name(st));
    return st;
}

/* Free the state once both the request and the consumer left it. */
static void upload_unref(struct upload *u);
/* Answer the request from the consumer's result (the handler or the consumer). */
static void upload_answer(struct rk_req *r, struct upload *u);

/* The consumer job (worker pool): stream the pipe to the plugin, then answer
 * the request if the handler is already waiting for it. */
static void upload_job(void *arg)
{
    struct upload *u = arg;
    struct rk_source src = {.read = pipe_source_read, .ctx = u, .size = -1};
    u->wst = upload_consume(u, &src);
    /* Wake a suspended writer; what it still sends is dropped. */
    rk_bytepipe_abort(u->pipe);
    struct rk_req *answer = rk_handoff_consumer_done(&u->h);
    if (answer) {
        upload_answer(answer, u);
        rk_req_finish(answer);
    }
    upload_unref(u);
}

/* Start the worker for the known fields. Returns 0, or -1 with a failure. */
static int start_worker(struct upload *u)
{
    size_t n;
    const char *sid = stripped_sandbox(u, &n);
    u->w_sid = malloc(n + 1);
    u->w_path = rk_xstrdup(u->target.buf ? u->target.buf : "");
    u->pipe = rk_bytepipe_new(RK_UPLOAD_PIPE_BYTES + UPLOAD_PIPE_SLACK);
    if (!u->w_sid || !u->pipe) {
        upload_fail(u, RK_E_NOMEM, "out of memory starting the upload");
        return -1;
    }
    memcpy(u->w_sid, sid, n);
    u->w_sid[n] = '\0';
    u->wcall = rk_call_new(u->h.r->request_id, rk_req_client_fd(u->h.r), 0);
    u->frozen = 1;
    return 0;
}

/* Queue the consumer for the pipe (on the loop). Returns 0, or -1 with a
 * failure when the worker queue is full. */
static int queue_consumer(struct upload *u)
{
    rk_handoff_ref(&u->h);
    if (rk_req_submit(u->h.r, upload_job, u) != 0) {
        rk_handoff_unref(&u->h); /* the request still holds it */
        upload_fail(u, RK_E_UNAVAILABLE,
                    "admin is busy: all workers are busy and their queue is full "
                    "(server.worker_queue); retry later");
        u->busy = 1;
        rk_bytepipe_abort(u->pipe);
        return -1;
    }
    u->thread_started = 1;
    return 0;
}

/* Signal the end of the file data to the worker (idempotent). */
static void close_pipe(struct upload *u)
{
    if (u->pipe && !u->pipe_closed) {
        rk_bytepipe_close(u->pipe);
        u->pipe_closed = 1;
    }
}

/* 1 if both text fields arrived and the sandbox id is not blank. */
static int fields_ready(const struct upload *u)
{
    size_t n;
    stripped_sandbox(u, &n);
    return u->target.seen && u->sandbox.seen && n > 0;
}

/* Note the sandbox_id field on the request for the access log (an id that
 * breaks the identifier rule is not kept). */
static void note_sandbox(struct upload *u)
{
    size_t n;
    const char *s = stripped_sandbox(u, &n);
    char id[RK_ID_MAX + 1];
    if (!u->sandbox.seen || n == 0 || n > RK_ID_MAX)
        return;
    memcpy(id, s, n);
    id[n] = '\0';
    rk_req_set_sandbox(u->h.r, id);
}

/* 1 if the sandbox_id field arrived and breaks the identifier rule. */
static int sandbox_id_invalid(const struct upload *u)
{
    size_t n;
    const char *s = stripped_sandbox(u, &n);
    return u->sandbox.seen && n > 0 && !rk_id_valid(s, n);
}

/* The file arrives before target_path but after sandbox_id: run the dispatch
 * gate now, so no byte is spooled for a sandbox that does not pass it.
 * Returns 0 when the sandbox passed. */
static int early_gate(struct upload *u)
{
    size_t n;
    const char *s = stripped_sandbox(u, &n);
    char *sid = rk_strdup_printf("%.*s", (int)n, s);
    struct rk_target t;
    rk_status st = sid ? rk_dispatch(u->h.r->app, u->h.r->call, RK_OP_UPLOAD, sid, &t) : RK_E_NOMEM;
    free(sid);
    if (st != RK_OK) {
        if (rk_call_error_code(u->h.r->call) == RK_OK)
            rk_call_set_error(u->h.r->call, st, "%s", rk_status_name(st));
        u->gate_failed = 1;
        return -1;
    }
    rk_target_release(&t);
    return 0;
}

/* Finish the current part. */
static void end_part(struct upload *u)
{
    if (!u->in_part)
        return;
    if (u->cur_kind == PART_FILE_PIPE)
        close_pipe(u);
    u->in_part = 0;
}

/* Reset a text field for a new value (the last part with a name wins). */
static void field_reset(struct field *f)
{
    free(f->buf);
    f->buf = NULL;
    f->len = 0;
    f->seen = 1;
}

/* Choose what to do with a part that starts now. */
static void begin_part(struct upload *u, const char *key)
{
    free(u->cur_key);
    u->cur_key = rk_xstrdup(key);
    u->in_part = 1;
    u->cur_bytes = 0;
    u->cur_kind = PART_IGNORE;
    if (strcmp(key, "file") == 0) {
        if (u->file_seen)
            return;
        u->file_seen = 1;
        if (u->fail_st != RK_OK || u->gate_failed || sandbox_id_invalid(u)) {
            u->cur_kind = PART_FILE_DISCARD;
        } else if (fields_ready(u)) {
            u->cur_kind =
                start_worker(u) == 0 && queue_consumer(u) == 0 ? PART_FILE_PIPE : PART_FILE_DISCARD;
        } else if (u->target.seen && u->sandbox.seen) {
            /* Blank sandbox_id: validation fails anyway. */
            u->cur_kind = PART_FILE_DISCARD;
        } else if (u->sandbox.seen) {
            /* Gate first (a job, once the parser returns); hold the bytes. */
            u->gate_needed = 1;
            u->cur_kind = PART_FILE_HOLD;
        } else {
            /* The file came before target_path/sandbox_id: spool it to an
             * unlinked temporary file and stream it once the body is done.
             * Bounded by server.max_upload_bytes and the total spool budget. */
            u->spool = tmpfile();
            if (!u->spool) {
                upload_fail(u, RK_E_INTERNAL, "cannot create a temporary file for the upload: %s",
                            strerror(errno));
                u->cur_kind = PART_FILE_DISCARD;
            } else {
                u->cur_kind = PART_FILE_SPOOL;
            }
        }
    } else if (strcmp(key, "target_path") == 0 && !u->frozen) {
        field_reset(&u->target);
        u->cur_kind = PART_TARGET;
    } else if (strcmp(key, "sandbox_id") == 0 && !u->frozen) {
        field_reset(&u->sandbox);
        u->cur_kind = PART_SANDBOX;
    }
}

/* Append text to a field, bounded by RK_UPLOAD_FIELD_MAX. */
static void field_append(struct upload *u, struct field *f, const char *data, size_t size)
{
    if (f->len + size > RK_UPLOAD_FIELD_MAX) {
        upload_fail(u, RK_E_INVALID, "body.%s: String should have at most %d characters",
                    u->cur_key, RK_UPLOAD_FIELD_MAX);
        u->cur_kind = PART_IGNORE;
        return;
    }
    char *nb = realloc(f->buf, f->len + size + 1);
    if (!nb) {
        upload_fail(u, RK_E_NOMEM, "out of memory reading the upload form");
        u->cur_kind = PART_IGNORE;
        return;
    }
    memcpy(nb + f->len, data, size);
    f->buf = nb;
    f->len += size;
    f->buf[f->len] = '\0';
}

/* Handle file bytes: enforce the size cap, then pipe or spool them. */
static void file_data(struct upload *u, const char *data, size_t size)
{
    int64_t max = u->h.r->app->cfg->server.max_upload_bytes;
    if (max > 0 && u->file_bytes + size > (uint64_t)max) {
        upload_fail(u, RK_E_TOO_LARGE,
                    "upload exceeds the configured limit of %lld bytes (server.max_upload_bytes)",
                    (long long)max);
        if (u->pipe)
            rk_bytepipe_abort(u->pipe);
        u->cur_kind = PART_FILE_DISCARD;
        return;
    }
    u->file_bytes += size;
    if (u->cur_kind == PART_FILE_HOLD) {
        if (u->held.len + size > UPLOAD_HOLD_MAX) {
            upload_fail(u, RK_E_INTERNAL, "too much file data before the sandbox was checked");
            u->cur_kind = PART_FILE_DISCARD;
        } else {
            rk_buf_append(&u->held, data, size);
        }
    } else if (u->cur_kind == PART_FILE_PIPE) {
        /* The parser is fed only while the pipe has room for what it emits
         * (rk_route_upload_body), so this does not wait. -1: the consumer
         * stopped; drain the rest and report its result at the end. */
        if (rk_bytepipe_write(u->pipe, data, size) != 0)
            u->cur_kind = PART_FILE_DISCARD;
    } else if (rk_budget_take(&rk_spool_budget, (int64_t)size) != 0) {
        upload_fail(u, RK_E_UNAVAILABLE,
                    "the upload spool budget of %lld bytes is in use (server.max_spool_bytes)",
                    (long long)rk_spool_budget.limit);
        u->busy = 1;
        u->cur_kind = PART_FILE_DISCARD;
        /* Give the disk back at once rather than at the end of the request. */
        if (u->spool && ftruncate(fileno(u->spool), 0) == 0) {
            rk_budget_give(&rk_spool_budget, u->spool_charged);
            u->spool_charged = 0;
        }
    } else {
        u->spool_charged += (int64_t)size;
        if (fwrite(data, 1, size, u->spool) != size) {
            upload_fail(u, RK_E_INTERNAL, "cannot spool the upload: %s", strerror(errno));
            u->cur_kind = PART_FILE_DISCARD;
        }
    }
}

/* libmicrohttpd post processor callback: one chunk of one part. A new part
 * starts when the name changes or a name repeats from offset 0. */
static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *filename, const char *content_type,
                               const char *transfer_encoding, const char *data, uint64_t off,
                               size_t size)
{
    struct upload *u = cls;
    (void)kind;
    (void)filename;
    (void)content_type;
    (void)transfer_encoding;
    if (u->closing)
        return MHD_YES;
    if (!key)
        key = "";
    if (!u->in_part || strcmp(key, u->cur_key) != 0 || (off == 0 && u->cur_bytes > 0)) {
        end_part(u);
        begin_part(u, key);
    }
    if (size == 0)
        return MHD_YES;
    u->cur_bytes += size;
    switch (u->cur_kind) {
    case PART_TARGET:
        field_append(u, &u->target, data, size);
        break;
    case PART_SANDBOX:
        field_append(u, &u->sandbox, data, size);
        break;
    case PART_FILE_PIPE:
    case PART_FILE_SPOOL:
    case PART_FILE_HOLD:
        file_data(u, data, size);
        break;
    case PART_FILE_DISCARD:
    case PART_IGNORE:
        break;
    }
    return MHD_YES;
}

static void upload_unref(struct upload *u)
{
    if (!rk_handoff_unref(&u->h))
        return;
    rk_bytepipe_free(u->pipe);
    rk_call_free(u->wcall);
    if (u->spool)
        fclose(u->spool);
    rk_budget_give(&rk_spool_budget, u->spool_charged);
    rk_buf_free(&u->held);
    free(u->target.buf);
    free(u->sandbox.buf);
    free(u->cur_key);
    free(u->w_sid);
    free(u->w_path);
    free(u);
}

/* The request ends (answered, or the client left mid-upload): stop the
 * consumer's input and leave the state to it if it still runs. */
static void upload_free(struct rk_req *r)
{
    struct upload *u = r->route_ctx;
    if (!u)
        return;
    r->route_ctx = NULL;
    rk_handoff_request_ended(&u->h, &u->closing, &u->pp, u->pipe);
    upload_unref(u);
}

int rk_route_upload_begin(struct rk_req *r)
{
    struct upload *u = calloc(1, sizeof *u);
    if (!u) {
        rk_reply_error(r, RK_E_NOMEM, "out of memory");
        return 1;
    }
    rk_handoff_init(&u->h, r);
    u->app = r->app;
    r->route_ctx = u;
    r->route_ctx_free = upload_free;
    /* NULL unless the body is multipart/form-data or urlencoded: then every
     * part is reported missing at the end, as the original validation does. */
    u->pp = MHD_create_post_processor(r->conn, RK_UPLOAD_PP_BUFFER, on_part, u);
    return 0;
}

/* The early gate (a job; the connection is suspended): decide what the held
 * file bytes become, then resume. */
static void upload_gate_job(void *arg)
{
    struct upload *u = arg;
    struct rk_req *r = u->h.r;
    int passed = early_gate(u) == 0;
    int holding = u->cur_kind == PART_FILE_HOLD;
    if (passed) {
        /* The file came before target_path: spool it to an unlinked
         * temporary file and stream it once the body is done. Bounded by
         * server.max_upload_bytes and the total spool budget. */
        u->spool = tmpfile();
        if (!u->spool) {
            upload_fail(u, RK_E_INTERNAL, "cannot create a temporary file for the upload: %s",
                        strerror(errno));
            passed = 0;
        }
    }
    if (holding)
        u->cur_kind = passed ? PART_FILE_SPOOL : PART_FILE_DISCARD;
    if (passed && u->held.len) {
        enum part_kind k = u->cur_kind;
        u->cur_kind = PART_FILE_SPOOL;
        u->file_bytes -= u->held.len; /* counted again */
        file_data(u, u->held.data, u->held.len);
        if (holding)
            u->cur_kind = u->cur_kind == PART_FILE_SPOOL ? k : u->cur_kind;
        else
            u->cur_kind = k;
    }
    rk_buf_free(&u->held);
    rk_req_resume(r);
}

int rk_route_upload_body(struct rk_req *r, const char *data, size_t len)
{
    struct upload *u = r->route_ctx;
    if (!u)
        return 0;
    if (!data) {
        /* The end of the body (on the loop): flush the parser through
         * on_part and tell the consumer where the file ends. */
        if (u->pp && MHD_destroy_post_processor(u->pp) != MHD_YES)
            u->malformed = 1;
        u->pp = NULL;
        end_part(u);
        return 0;
    }
    if (!u->pp || u->malformed)
        return 0;
    size_t take = len;
    if (u->cur_kind == PART_FILE_PIPE && !u->pipe_closed && !rk_bytepipe_aborted(u->pipe))
        take = rk_handoff_feed_limit(u->pipe, len, UPLOAD_PIPE_SLACK);
    if (take > 0 && MHD_post_process(u->pp, data, take) != MHD_YES)
        u->malformed = 1;
    if (u->gate_needed) {
        u->gate_needed = 0;
        rk_req_suspend(r);
        if (rk_req_submit(r, upload_gate_job, u) != 0) {
            upload_fail(u, RK_E_UNAVAILABLE,
                        "admin is busy: all workers are busy and their queue is full "
                        "(server.worker_queue); retry later");
            u->busy = 1;
            u->cur_kind = PART_FILE_DISCARD;
            rk_buf_free(&u->held);
            rk_req_resume(r);
        }
        r->body_kept = len - take;
        return 0;
    }
    if (take < len) /* the pipe is full: keep the rest, wait for the consumer to drain */
        rk_handoff_hold_body(r, u->pipe, len, take, UPLOAD_PIPE_SLACK + RK_UPLOAD_PP_BUFFER);
    return 0;
}

/* Add the validation problems of the form (FastAPI checks before the handler). */
static void form_problems(const struct upload *u, struct rk_buf *text)
{
    size_t n;
    stripped_sandbox(u, &n);
    const char *sep = "";
    if (!u->file_seen) {
        rk_buf_printf(text, "%sbody.file: Field required", sep);
        sep = "; ";
    }
    if (!u->target.seen) {
        rk_buf_printf(text, "%sbody.target_path: Field required", sep);
        sep = "; ";
    }
    if (!u->sandbox.seen)
        rk_buf_printf(text, "%sbody.sandbox_id: Field required", sep);
    else if (n == 0)
        rk_buf_printf(text, "%sbody.sandbox_id: String should have at least 1 character", sep);
    else if (sandbox_id_invalid(u))
        rk_buf_printf(text, "%sbody.sandbox_id: %s", sep, RK_ID_RULE_MSG);
}

/* Answer from the consumer's result (upload_consume); the consumer is done. */
static void upload_answer(struct rk_req *r, struct upload *u)
{
    if (u->fail_st != RK_OK) {
        if (u->busy)
            rk_req_reply_busy(r, u->fail_msg);
        else
            rk_reply_error(r, u->fail_st, u->fail_msg);
        return;
    }
    if (u->wst != RK_OK) {
        rk_call_set_error(r->call, rk_call_error_code(u->wcall), "%s",
                          rk_call_error_text(u->wcall));
        rk_reply_call_error(r);
        return;
    }
    json_object *result = json_object_new_object();
    json_object_object_add(result, "success", json_object_new_boolean(1));
    json_object_object_add(result, "message", json_object_new_string(""));
    json_object_object_add(result, "file_name",
                           json_object_new_string(rk_upload_basename(u->w_path)));
    rk_reply_ok(r, result);
}

void rk_route_upload(struct rk_req *r)
{
    struct upload *u = r->route_ctx;
    if (!u) {
        rk_reply_error(r, RK_E_INTERNAL, "upload state missing");
        return;
    }
    /* The parser was flushed and the pipe closed at the end of the body. */
    note_sandbox(u);
    if (u->malformed) {
        if (u->pipe)
            rk_bytepipe_abort(u->pipe);
        rk_reply_detail(r, 400, "There was an error parsing the body");
        return;
    }
    if (u->fail_st != RK_OK) {
        if (u->pipe)
            rk_bytepipe_abort(u->pipe);
        if (u->fail_st == RK_E_INVALID)
            rk_reply_invalid(r, u->fail_msg);
        else if (u->busy)
            rk_req_reply_busy(r, u->fail_msg);
        else
            rk_reply_error(r, u->fail_st, u->fail_msg);
        return;
    }
    struct rk_buf problems = {0};
    form_problems(u, &problems);
    if (problems.len) {
        if (u->pipe)
            rk_bytepipe_abort(u->pipe);
        rk_reply_invalid(r, rk_buf_cstr(&problems));
        rk_buf_free(&problems);
        return;
    }
    rk_buf_free(&problems);
    if (u->gate_failed) {
        rk_reply_call_error(r);
        return;
    }

    if (!u->thread_started) {
        /* The file was spooled: stream it now that the fields are known, on
         * this worker. */
        if (!u->spool || start_worker(u) != 0 || fflush(u->spool) != 0 ||
            fseek(u->spool, 0, SEEK_SET) != 0) {
            if (u->fail_st == RK_OK)
                upload_fail(u, RK_E_INTERNAL, "upload file part was not kept");
            rk_reply_error(r, u->fail_st, u->fail_msg);
            return;
        }
        struct rk_source src = {.read = spool_source_read, .ctx = u, .size = -1};
        u->wst = upload_consume(u, &src);
        upload_answer(r, u);
        return;
    }
    close_pipe(u);
    /* The consumer answers when it has written the file (it finishes the request). */
    if (!rk_handoff_handler_waits(&u->h, r))
        upload_answer(r, u);
}
