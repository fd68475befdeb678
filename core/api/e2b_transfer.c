/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envd's plain-HTTP file transfer, /files (docs/e2b.md), streamed both ways
 * through the plugin's file ABI; no file is ever held whole in memory.
 *
 *   GET /files    file_read runs as a job on the worker pool; its sink feeds a
 *                 streamed response (engine/stream_reply.h) and waits while
 *                 the client reads slower than the sandbox sends, so at most
 *                 DOWNLOAD_QUEUE bytes (charged to server.max_buffered_bytes)
 *                 are held. The status waits for the first byte: a missing
 *                 file is still a clean 404; a failure after it cuts the
 *                 transfer short (the client never sees a complete-looking
 *                 body).
 *   POST /files   multipart (one `file` part per file, its file name the path;
 *                 the query's path for the first file when given) or
 *                 application/octet-stream (the body is the file at the
 *                 query's path). The sandbox is checked at the headers; a
 *                 consumer job on the worker pool runs file_stat (an existing
 *                 file keeps its mode) and file_write for each file, reading
 *                 from a bounded byte pipe that the event loop fills as body
 *                 chunks arrive; the connection is suspended while the pipe is
 *                 full (backpressure). The pipe carries the files as frames:
 *                 'F' + path, 'D' + data, 'E' (end of that file). Bounded by
 *                 server.max_upload_bytes (all files of the body together:
 *                 413) and the memory budget (the pipe is charged to it).
 *
 * The upload state is shared by the request and the consumer and freed by
 * whichever leaves it last (body_handoff.h, as for /upload). File contents are never logged.
 */
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/body_handoff.h"
#include "api/e2b_envd.h"
#include "api/e2b_map.h"
#include "api/upload.h"
#include "base/app.h"
#include "base/budget.h"
#include "base/bytepipe.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/lifecycle.h"
#include "engine/http_server.h"
#include "engine/stream_reply.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/metrics.h"

/* Most bytes a download holds while its client reads. */
#define DOWNLOAD_QUEUE (1024 * 1024)
/* Most files one POST /files carries, and the longest path of one. */
#define MAX_FILES 64
#define MAX_PATH 4096
/* A frame's header: type byte, 4-byte big-endian length. */
#define FRAME_HEAD 5
/* The pipe: what the loop may feed, plus the room the parser's own buffer and the frames
 * around the data may take beyond it (never waited for on the loop). */
#define PIPE_FEED (512 * 1024)
#define PIPE_SLACK (4 * RK_UPLOAD_PP_BUFFER + MAX_FILES * (MAX_PATH + 4 * FRAME_HEAD))
#define PIPE_BYTES (PIPE_FEED + PIPE_SLACK)

/* ---- GET /files ------------------------------------------------------------------------- */

/* One download (shared by the job and, once started, the response). */
struct download {
    _Atomic int refs;
    struct rk_req *r; /* until the answer is handed over (rk_req_finish) */
    struct rk_call *call;
    const struct rk_plugin *pl;
    struct rk_sandbox_ref ref;
    const char *path;    /* in call's arena */
    int64_t deadline_ms; /* the client's (connect-timeout-ms), 0 = none */
    struct rk_outstream *stream;
    int busy; /* the memory budget refused the queue */
};

static void download_unref(struct download *d)
{
    if (atomic_fetch_sub(&d->refs, 1) != 1)
        return;
    rk_stream_unref(d->stream);
    rk_call_free(d->call);
    free(d);
}

/* The response ended (sent whole, or the client left): stop the transfer. */
static void download_gone(void *ctx)
{
    struct download *d = ctx;
    rk_call_cancel(d->call);
    download_unref(d);
}

/* file_read's sink: the first bytes answer 200 and hand the request over; every chunk waits
 * for room in the response (this is a worker; the plugin's transfer is blocking). */
static rk_status download_sink(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    struct download *d = ctx;
    (void)stream;
    if (!d->stream) {
        d->stream = rk_stream_new(DOWNLOAD_QUEUE, 0, NULL, NULL);
        if (!d->stream)
            return rk_call_set_error(d->call, RK_E_NOMEM, "out of memory");
        struct rk_req *r = d->r;
        d->r = NULL;
        atomic_fetch_add(&d->refs, 1); /* the response's */
        r->outcome = "success";
        rk_req_reply_stream(r, 200, "application/octet-stream", d->stream, download_gone, d);
        rk_req_finish(r); /* r is not ours any more */
    }
    int rc = rk_stream_push_wait(d->stream, buf, len, d->deadline_ms);
    if (rc == -2)
        return rk_call_set_error(d->call, RK_E_TIMEOUT, "the download's deadline passed");
    if (rc == -3) {
        d->busy = 1;
        return rk_call_set_error(d->call, RK_E_UNAVAILABLE, "memory budget reached");
    }
    return rc == 0 ? RK_OK : RK_E_CANCELLED;
}

/* The transfer (worker pool): file_read into the response, then its end. */
static void download_job(void *arg)
{
    struct download *d = arg;
    struct rk_sink sink = {download_sink, d};
    rk_status st;
    RK_UPSTREAM(st, d->pl, file_read, d->call, &d->ref, d->path, &sink);
    if (d->r) {
        /* nothing sent yet: a clean answer (an empty file is 200 with no bytes) */
        struct rk_req *r = d->r;
        rk_status code = rk_call_error_code(d->call);
        if (st == RK_OK) {
            r->outcome = "success";
            rk_req_reply_bytes(r, 200, "application/octet-stream", "", 0);
        } else if (d->busy) {
            rk_envd_reply_error(r, "unavailable",
                                "admin is busy: memory budget reached "
                                "(server.max_buffered_bytes)");
        } else if (code == RK_E_NOT_FOUND || (st == RK_E_NOT_FOUND && code == RK_OK)) {
            rk_e2b_reply_error(r, 404,
                               rk_arena_printf(r->call, "path '%s' does not exist", d->path));
        } else {
            rk_call_set_error(r->call, code ? code : st, "%s", rk_call_error_text(d->call));
            rk_e2b_reply_call_error(r);
        }
        rk_req_finish(r);
    } else if (st == RK_OK) {
        rk_stream_close(d->stream);
    } else {
        rk_stream_abort(d->stream); /* cut short: never a complete-looking body */
    }
    download_unref(d);
}

/* GET /files?path=P: the file's bytes, streamed. */
void rk_envd_files_get(struct rk_req *r)
{
    const char *path = rk_req_query(r, "path");
    if (!path || !*path) {
        rk_e2b_reply_error(r, 400, "query.path is required");
        return;
    }
    struct rk_target t;
    if (rk_envd_target(r, RK_OP_FILE_READ, 0, &t) != 0)
        return;
    int64_t asked = rk_envd_timeout_ms(r);
    struct download *d = calloc(1, sizeof *d);
    if (!d)
        abort();
    d->refs = 1;
    d->r = r;
    d->pl = r->app->plugin;
    d->deadline_ms = asked ? rk_now_ms() + asked : 0;
    d->call = rk_call_new(r->request_id, rk_req_client_fd(r), d->deadline_ms);
    d->path = rk_arena_strdup(d->call, path);
    rk_target_detach(&t, d->call);
    d->ref = t.ref;
    rk_target_release(&t);
    rk_req_defer(r);
    if (rk_req_submit(r, download_job, d) != 0) {
        rk_envd_reply_error(r, "unavailable",
                            "admin is busy: all workers are busy and their queue is full "
                            "(server.worker_queue); retry later");
        rk_req_finish(r);
        download_unref(d);
    }
}

/* ---- POST /files ------------------------------------------------------------------------ */

/* The state of one POST /files (r->route_ctx; shared with the consumer job). */
struct upload_files {
    struct rk_handoff h; /* the request (h.r, NULL once it ended) and the consumer */
    int64_t charged;     /* bytes of rk_mem_budget the pipe holds */

    /* the loop's side */
    struct MHD_PostProcessor *pp; /* NULL for an octet-stream body */
    struct rk_bytepipe *pipe;
    const char *qpath; /* the query's path (request arena), NULL if none */
    int qpath_used;
    int in_file;     /* a file's frames are open */
    char *part_name; /* file name of the current part */
    uint64_t part_bytes;
    size_t nfiles;
    int64_t bytes, cap;
    int too_large, too_many, malformed, no_path, closing;

    /* the consumer's side */
    struct rk_call *wcall;
    const struct rk_plugin *pl;
    struct rk_sandbox_ref ref;
    rk_status wst;
    json_object *written;
    uint32_t data_left; /* bytes of the current 'D' frame not yet read */
    int file_end;       /* the current file's 'E' frame was read */
};

static void uf_unref(struct upload_files *u)
{
    if (!rk_handoff_unref(&u->h))
        return;
    rk_bytepipe_free(u->pipe);
    rk_budget_give(&rk_mem_budget, u->charged);
    rk_call_free(u->wcall);
    json_object_put(u->written);
    free(u->part_name);
    free(u);
}

/* The request ends (answered, or the client left): stop the consumer's input. */
static void uf_free(struct rk_req *r)
{
    struct upload_files *u = r->route_ctx;
    if (!u)
        return;
    r->route_ctx = NULL;
    rk_handoff_request_ended(&u->h, &u->closing, &u->pp, u->pipe);
    uf_unref(u);
}

/* Read exactly len bytes from the pipe: 1, 0 at its end before any byte, -1 aborted or cut. */
static int read_full(struct rk_bytepipe *p, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = rk_bytepipe_read(p, (char *)buf + got, len - got, 0);
        if (n == 0 && got == 0)
            return 0;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 1;
}

/* A frame's header: its type and length; 1, 0 at the end of the pipe, -1 aborted. */
static int read_head(struct upload_files *u, char *type, uint32_t *len)
{
    unsigned char h[FRAME_HEAD];
    int rc = read_full(u->pipe, h, sizeof h);
    if (rc != 1)
        return rc;
    *type = (char)h[0];
    *len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
    return 1;
}

/* rk_source.read of one file: its 'D' frames up to its 'E'; -1 once the pipe was aborted. */
static long long file_source_read(void *ctx, char *buf, size_t len)
{
    struct upload_files *u = ctx;
    while (u->data_left == 0) {
        if (u->file_end)
            return 0;
        char type;
        uint32_t n;
        if (read_head(u, &type, &n) != 1 || (type != 'D' && type != 'E'))
            return -1;
        if (type == 'E')
            u->file_end = 1;
        else
            u->data_left = n;
    }
    size_t want = len < u->data_left ? len : u->data_left;
    ssize_t n = rk_bytepipe_read(u->pipe, buf, want, 0);
    if (n <= 0)
        return -1;
    u->data_left -= (uint32_t)n;
    return (long long)n;
}

/* Write the file at path from the pipe (keep-or-0644 mode) and note it in u->written. */
static rk_status consume_file(struct upload_files *u, const char *path)
{
    struct rk_file_info info = {0};
    rk_status st;
    RK_UPSTREAM(st, u->pl, file_stat, u->wcall, &u->ref, path, &info);
    if (st != RK_OK)
        return st;
    u->data_left = 0;
    u->file_end = 0;
    struct rk_source src = {.read = file_source_read, .ctx = u, .size = -1};
    RK_UPSTREAM(st, u->pl, file_write, u->wcall, &u->ref, path,
                info.exists ? (info.mode & 07777) : 0644, &src);
    if (st == RK_OK && !u->file_end)
        st = rk_call_set_error(u->wcall, RK_E_INTERNAL,
                               "the plugin finished the upload of '%s' before its end", path);
    if (st != RK_OK)
        return st;
    json_object *e = json_object_new_object();
    json_object_object_add(e, "name", json_object_new_string(rk_upload_basename(path)));
    json_object_object_add(e, "type", json_object_new_string("file"));
    json_object_object_add(e, "path", json_object_new_string(path));
    json_object_array_add(u->written, e);
    return RK_OK;
}

/* The answer from the consumer's result (the consumer is done). */
static void uf_answer(struct rk_req *r, struct upload_files *u)
{
    if (u->wst != RK_OK) {
        rk_status code = rk_call_error_code(u->wcall);
        rk_call_set_error(r->call, code ? code : u->wst, "%s", rk_call_error_text(u->wcall));
        rk_e2b_reply_call_error(r);
        return;
    }
    if (json_object_array_length(u->written) == 0) {
        rk_e2b_reply_error(r, 400,
                           "expected multipart/form-data with file parts, or an "
                           "application/octet-stream body");
        return;
    }
    r->outcome = "success";
    rk_req_reply_json(r, 200, json_object_get(u->written));
}

/* The consumer (worker pool): every file of the pipe in turn, then the answer if the
 * handler already waits for it. */
static void uf_job(void *arg)
{
    struct upload_files *u = arg;
    rk_status st = RK_OK;
    char path[MAX_PATH + 1];
    for (;;) {
        char type;
        uint32_t n;
        int rc = read_head(u, &type, &n);
        if (rc == 0)
            break; /* the body's end */
        if (rc < 0 || type != 'F' || n == 0 || n > MAX_PATH || read_full(u->pipe, path, n) != 1) {
            st = rk_call_set_error(u->wcall, RK_E_CANCELLED, "the upload was abandoned");
            break;
        }
        path[n] = '\0';
        st = consume_file(u, path);
        if (st != RK_OK)
            break;
    }
    u->wst = st;
    rk_bytepipe_abort(u->pipe); /* a suspended body is resumed; the rest is dropped */
    struct rk_req *answer = rk_handoff_consumer_done(&u->h);
    if (answer) {
        uf_answer(answer, u);
        rk_req_finish(answer);
    }
    uf_unref(u);
}

/* Queue one frame (on the loop; the feed limit keeps room for it). -1: the consumer left. */
static int frame(struct upload_files *u, char type, const char *data, size_t len)
{
    unsigned char h[FRAME_HEAD] = {(unsigned char)type, (unsigned char)(len >> 24),
                                   (unsigned char)(len >> 16), (unsigned char)(len >> 8),
                                   (unsigned char)len};
    if (rk_bytepipe_write(u->pipe, h, sizeof h) != 0)
        return -1;
    return len ? rk_bytepipe_write(u->pipe, data, len) : 0;
}

/* Close the current file's frames. */
static void end_file(struct upload_files *u)
{
    if (u->in_file)
        frame(u, 'E', NULL, 0);
    u->in_file = 0;
}

/* Open a file at path (the query's for the first file when given, else name). */
static void start_file(struct upload_files *u, const char *name)
{
    end_file(u);
    const char *path = u->qpath && !u->qpath_used ? u->qpath : name;
    u->qpath_used = 1;
    if (u->nfiles == MAX_FILES) {
        u->too_many = 1;
    } else if (!path || !*path || strlen(path) > MAX_PATH) {
        u->no_path = 1;
    } else {
        u->nfiles++;
        u->in_file = frame(u, 'F', path, strlen(path)) == 0;
        return;
    }
    rk_bytepipe_abort(u->pipe);
}

/* File bytes: counted against server.max_upload_bytes, then queued. */
static void file_bytes(struct upload_files *u, const char *data, size_t size)
{
    if (!u->in_file || size == 0)
        return;
    if (u->cap && u->bytes + (int64_t)size > u->cap) {
        u->too_large = 1;
        u->in_file = 0;
        rk_bytepipe_abort(u->pipe); /* the plugin abandons the write */
        return;
    }
    u->bytes += (int64_t)size;
    if (frame(u, 'D', data, size) != 0)
        u->in_file = 0;
}

/* The multipart parser's callback: `file` parts are files (a new one when the part's offset
 * starts again or its file name changes). */
static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *filename, const char *content_type,
                               const char *transfer_encoding, const char *data, uint64_t off,
                               size_t size)
{
    struct upload_files *u = cls;
    (void)kind;
    (void)content_type;
    (void)transfer_encoding;
    if (u->closing || u->too_large || u->too_many || u->no_path)
        return MHD_YES;
    if (!key || strcmp(key, "file") != 0) {
        end_file(u);
        free(u->part_name);
        u->part_name = NULL;
        return MHD_YES;
    }
    const char *name = filename ? filename : "";
    if (!u->part_name || (off == 0 && (u->part_bytes > 0 || strcmp(name, u->part_name) != 0))) {
        free(u->part_name);
        u->part_name = rk_xstrdup(name);
        u->part_bytes = 0;
        start_file(u, filename);
    }
    u->part_bytes += size;
    file_bytes(u, data, size);
    return MHD_YES;
}

int rk_envd_files_begin(struct rk_req *r)
{
    const char *enc = rk_req_header(r, "Content-Encoding");
    if (enc && *enc && strcasecmp(enc, "identity") != 0) {
        rk_e2b_reply_error(r, 400,
                           "Content-Encoding is not emulated: send the file uncompressed "
                           "(no gzip option)");
        return 1;
    }
    const char *ct = rk_req_header(r, "Content-Type");
    int multipart = ct && !strncasecmp(ct, "multipart/form-data", 19);
    const char *qpath = rk_req_query(r, "path");
    if (!multipart && !(qpath && *qpath)) {
        rk_e2b_reply_error(r, 400, "query.path is required for an application/octet-stream body");
        return 1;
    }
    struct rk_target t;
    if (rk_envd_target(r, RK_OP_FILE_WRITE, 0, &t) != 0)
        return 1;
    if (rk_budget_take(&rk_mem_budget, PIPE_BYTES) != 0) {
        rk_target_release(&t);
        rk_envd_reply_error(r, "unavailable",
                            "admin is busy: memory budget reached "
                            "(server.max_buffered_bytes)");
        return 1;
    }
    struct upload_files *u = calloc(1, sizeof *u);
    if (!u)
        abort();
    rk_handoff_init(&u->h, r);
    u->charged = PIPE_BYTES;
    r->route_ctx = u;
    r->route_ctx_free = uf_free;
    u->cap = r->app->cfg->server.max_upload_bytes;
    u->qpath = qpath && *qpath ? qpath : NULL;
    u->pl = r->app->plugin;
    u->written = json_object_new_array();
    int64_t asked = rk_envd_timeout_ms(r);
    u->wcall = rk_call_new(r->request_id, rk_req_client_fd(r), asked ? rk_now_ms() + asked : 0);
    rk_target_detach(&t, u->wcall);
    u->ref = t.ref;
    rk_target_release(&t);
    u->pipe = rk_bytepipe_new(PIPE_BYTES);
    if (multipart)
        u->pp = MHD_create_post_processor(r->conn, RK_UPLOAD_PP_BUFFER, on_part, u);
    if (!u->pipe || (multipart && !u->pp)) {
        if (multipart)
            rk_e2b_reply_error(r, 400, "the multipart body has no boundary");
        else
            rk_envd_reply_error(r, "resource_exhausted", "out of memory");
        return 1;
    }
    rk_handoff_ref(&u->h);
    if (rk_req_submit(r, uf_job, u) != 0) {
        rk_handoff_unref(&u->h); /* the request still holds it */
        rk_envd_reply_error(r, "unavailable",
                            "admin is busy: all workers are busy and their queue is full "
                            "(server.worker_queue); retry later");
        return 1;
    }
    if (!multipart)
        start_file(u, NULL); /* the body is the file at the query's path */
    return 0;
}

int rk_envd_files_body(struct rk_req *r, const char *data, size_t len)
{
    struct upload_files *u = r->route_ctx;
    if (!u)
        return 0;
    if (!data) {
        /* the body's end (on the loop): flush the parser, close the last file and the pipe */
        if (u->pp && MHD_destroy_post_processor(u->pp) != MHD_YES)
            u->malformed = 1;
        u->pp = NULL;
        end_file(u);
        rk_bytepipe_close(u->pipe);
        return 0;
    }
    if (u->malformed || rk_bytepipe_aborted(u->pipe))
        return 0; /* drained and dropped: the handler answers */
    size_t take = rk_handoff_feed_limit(u->pipe, len, PIPE_SLACK);
    if (take > 0) {
        if (u->pp) {
            if (MHD_post_process(u->pp, data, take) != MHD_YES) {
                u->malformed = 1;
                rk_bytepipe_abort(u->pipe);
            }
        } else {
            file_bytes(u, data, take);
        }
    }
    if (take < len) /* the pipe is full: keep the rest, wait for the consumer to drain it */
        rk_handoff_hold_body(r, u->pipe, len, take, PIPE_SLACK + RK_UPLOAD_PP_BUFFER);
    return 0;
}

/* POST /files: [{"name","type","path"}] once every file is written. */
void rk_envd_files_post(struct rk_req *r)
{
    struct upload_files *u = r->route_ctx;
    if (!u)
        return;
    if (u->too_large || u->too_many || u->no_path || u->malformed) {
        rk_bytepipe_abort(u->pipe);
        if (u->too_large)
            rk_e2b_reply_error(r, 413,
                               rk_arena_printf(r->call,
                                               "the upload is larger than "
                                               "server.max_upload_bytes (%lld bytes)",
                                               (long long)u->cap));
        else
            rk_e2b_reply_error(r, 400,
                               u->too_many  ? "too many files in one upload"
                               : u->no_path ? "every file needs a path (query.path or the "
                                              "part's file name, at most 4096 bytes)"
                                            : "the multipart body could not be parsed");
        return;
    }
    /* the consumer answers once the last file is written */
    if (!rk_handoff_handler_waits(&u->h, r))
        uf_answer(r, u);
}
