/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_files.c
 * @brief execd file operations: info (stat), streamed download, streamed multipart upload.
 */
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "os_internal.h"

/** "/files/<what>?path=<percent-encoded path>" (caller frees). */
static char *files_path(const char *what, const char *path)
{
    char *enc = os_escape(path);
    if (!enc)
        return NULL;
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/files/%s?path=%s", what, enc);
    free(enc);
    return os_sb_take(&sb);
}

/** True if an execd error body carries code FILE_NOT_FOUND. */
static int is_file_not_found(const struct os_xfer *x)
{
    return x->body && strstr(x->body, "\"FILE_NOT_FOUND\"") != NULL;
}

/** Record "opensandbox <op> failed for <osid>: HTTP ..." from an execd answer. */
static rk_status fail_http(struct os_inst *inst, struct rk_call *call, rk_status code,
                           const char *op, const char *osid, const struct os_xfer *x)
{
    char *d = os_error_detail(x->status, x->body, x->body_len);
    rk_status r = inst->host->set_error(call, code, "opensandbox %s failed for %s: %s", op, osid,
                                        d ? d : "error");
    free(d);
    return r;
}

/** ops.file_stat: GET /files/info; a missing path is exists = 0. */
rk_status os_file_stat(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                       const char *path, struct rk_file_info *out)
{
    const char *osid = NULL;
    memset(out, 0, sizeof(*out));
    out->size = -1;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    char *p = files_path("info", path);
    if (!p)
        return inst->host->set_error(call, RK_E_NOMEM,
                                     "opensandbox get_file_info failed for %s: "
                                     "out of memory",
                                     osid);
    struct os_xfer x;
    s = os_execd_simple(inst, call, osid, "get_file_info", "GET", p, inst->default_timeout_s * 1000,
                        NULL, NULL, &x);
    free(p);
    if (s != RK_OK) {
        os_xfer_cleanup(&x);
        return s;
    }
    if (x.status == 404 || is_file_not_found(&x)) {
        os_xfer_cleanup(&x);
        return RK_OK;
    }
    if (x.status != 200) {
        s = fail_http(inst, call, RK_E_UPSTREAM, "get_file_info", osid, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    json_object *o = x.body ? json_tokener_parse(x.body) : NULL, *info = NULL, *v;
    if (o && json_object_is_type(o, json_type_object) &&
        !json_object_object_get_ex(o, path, &info)) {
        json_object_object_foreach(o, k, val)
        {
            (void)k;
            info = val;
            break;
        }
    }
    if (!info || !json_object_is_type(info, json_type_object)) {
        /* {} for the path: treat as missing, like the original client (B57). */
        int empty =
            o && json_object_is_type(o, json_type_object) && json_object_object_length(o) == 0;
        json_object_put(o);
        os_xfer_cleanup(&x);
        if (empty)
            return RK_OK;
        return inst->host->set_error(call, RK_E_UPSTREAM,
                                     "opensandbox get_file_info failed for %s: malformed response",
                                     osid);
    }
    out->exists = 1;
    if (json_object_object_get_ex(info, "size", &v))
        out->size = json_object_get_int64(v);
    if (json_object_object_get_ex(info, "mode", &v)) {
        int ok = 0;
        out->mode = os_mode_from_decimal(json_object_get_int64(v), &ok);
        if (!ok)
            out->mode = 0644;
    } else {
        out->mode = 0644;
    }
    json_object_put(o);
    os_xfer_cleanup(&x);
    return RK_OK;
}

/** State of a streamed download. */
struct read_ctx {
    struct os_inst *inst;
    struct os_xfer *x;
    const struct rk_sink *sink;
    int64_t total;
    int64_t cap;
    int too_large;
    rk_status sink_status;
};

/** Download chunk: enforce max_file_bytes (up front when the length is known), then sink. */
static rk_status read_data(void *ctx, const char *buf, size_t len)
{
    struct read_ctx *rc = ctx;
    if (rc->total == 0) {
        curl_off_t cl = -1;
        curl_easy_getinfo(rc->x->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        if (cl > rc->cap) {
            rc->too_large = 1;
            return RK_E_TOO_LARGE;
        }
    }
    if (rc->total + (int64_t)len > rc->cap) {
        rc->too_large = 1;
        return RK_E_TOO_LARGE;
    }
    rc->total += (int64_t)len;
    rk_status s = rc->sink->write(rc->sink->ctx, RK_STREAM_DATA, buf, len);
    if (s != RK_OK)
        rc->sink_status = s;
    return s;
}

/** Attach the streaming callback to each attempt. */
static rk_status read_prep(struct os_xfer *x, void *ctx, int attempt)
{
    struct read_ctx *rc = ctx;
    if (attempt < 0)
        return rc->total == 0 ? RK_OK : RK_E_CONFLICT;
    rc->x = x;
    x->on_data = read_data;
    x->on_data_ctx = rc;
    x->body_max = 64 * 1024;   /* error bodies only */
    CURL *c = os_xfer_curl(x); /* a speed limit instead of a deadline: libcurl's */
    if (!c)
        return RK_E_NOMEM;
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 0L);
    x->own_deadline_ms = 0;
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)rc->inst->default_timeout_s);
    return RK_OK;
}

/** ops.file_read: GET /files/download streamed to the sink, capped at max_file_bytes. */
rk_status os_file_read(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                       const char *path, const struct rk_sink *sink)
{
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    char *p = files_path("download", path);
    if (!p)
        return inst->host->set_error(call, RK_E_NOMEM,
                                     "opensandbox read_bytes failed for %s: out of memory", osid);
    struct read_ctx rc = {.inst = inst, .sink = sink, .cap = inst->max_file_bytes};
    struct os_xfer x;
    s = os_execd_simple(inst, call, osid, "read_bytes", "GET", p, 0, read_prep, &rc, &x);
    free(p);
    if (s != RK_OK) {
        os_xfer_cleanup(&x);
        if (rc.too_large)
            return inst->host->set_error(call, RK_E_TOO_LARGE,
                                         "opensandbox read_bytes failed for %s: file %s is larger "
                                         "than max_file_bytes (%lld bytes)",
                                         osid, path, (long long)inst->max_file_bytes);
        return s; /* sink status or an error recorded by os_execd_simple */
    }
    if (x.status == 404 || (x.status >= 400 && is_file_not_found(&x)))
        s = fail_http(inst, call, RK_E_NOT_FOUND, "read_bytes", osid, &x);
    else if (x.status != 200 && x.status != 206)
        s = fail_http(inst, call, RK_E_UPSTREAM, "read_bytes", osid, &x);
    os_xfer_cleanup(&x);
    return s;
}

/** State of a streamed upload. */
struct write_ctx {
    struct os_inst *inst;
    const char *path;
    unsigned mode;
    const struct rk_source *src;
    long long sent;
    int source_failed;
    curl_mime *mime;
};

/** curl read callback for the file part: pull from the core's source. */
static size_t source_read(char *buf, size_t size, size_t nitems, void *arg)
{
    struct write_ctx *wc = arg;
    long long n = wc->src->read(wc->src->ctx, buf, size * nitems);
    if (n < 0) {
        wc->source_failed = 1;
        return CURL_READFUNC_ABORT;
    }
    wc->sent += n;
    return (size_t)n;
}

/** Build the multipart body: `metadata` (a file part, JSON) then `file` (streamed). */
static rk_status write_prep(struct os_xfer *x, void *ctx, int attempt)
{
    struct write_ctx *wc = ctx;
    if (attempt < 0)
        return wc->sent == 0 && !wc->source_failed ? RK_OK : RK_E_CONFLICT;
    CURL *c = os_xfer_curl(x); /* a streamed multipart upload: libcurl's */
    if (!c)
        return RK_E_NOMEM;
    curl_mime_free(wc->mime);
    wc->mime = curl_mime_init(c);
    if (!wc->mime)
        return RK_E_NOMEM;
    json_object *md = json_object_new_object();
    json_object_object_add(md, "path", json_object_new_string(wc->path));
    json_object_object_add(md, "owner", NULL);
    json_object_object_add(md, "group", NULL);
    json_object_object_add(md, "mode", json_object_new_int64(os_mode_to_decimal(wc->mode)));
    const char *mds =
        json_object_to_json_string_ext(md, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    curl_mimepart *part = curl_mime_addpart(wc->mime);
    int ok = part && mds && curl_mime_name(part, "metadata") == CURLE_OK &&
             curl_mime_filename(part, "metadata") == CURLE_OK &&
             curl_mime_type(part, "application/json") == CURLE_OK &&
             curl_mime_data(part, mds, CURL_ZERO_TERMINATED) == CURLE_OK;
    json_object_put(md);
    if (!ok)
        return RK_E_NOMEM;
    const char *base = strrchr(wc->path, '/');
    base = (base && base[1]) ? base + 1 : "file";
    part = curl_mime_addpart(wc->mime);
    ok = part && curl_mime_name(part, "file") == CURLE_OK &&
         curl_mime_filename(part, base) == CURLE_OK &&
         curl_mime_type(part, "application/octet-stream") == CURLE_OK &&
         curl_mime_data_cb(part, wc->src->size >= 0 ? (curl_off_t)wc->src->size : -1, source_read,
                           NULL, NULL, wc) == CURLE_OK;
    if (!ok)
        return RK_E_NOMEM;
    curl_easy_setopt(c, CURLOPT_MIMEPOST, wc->mime);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 0L);
    x->own_deadline_ms = 0;
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)wc->inst->default_timeout_s);
    return RK_OK;
}

/** ops.file_write: multipart POST /files/upload streamed from the source. */
rk_status os_file_write(struct os_inst *inst, struct rk_call *call,
                        const struct rk_sandbox_ref *ref, const char *path, unsigned mode,
                        const struct rk_source *source)
{
    const char *osid = NULL;
    rk_status s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    if (!path || !*path)
        return inst->host->set_error(call, RK_E_INVALID, "file path must not be empty");
    struct write_ctx wc = {.inst = inst, .path = path, .mode = mode, .src = source};
    struct os_xfer x;
    s = os_execd_simple(inst, call, osid, "write_file", "POST", "/files/upload", 0, write_prep, &wc,
                        &x);
    if (s != RK_OK && wc.source_failed)
        s = inst->host->set_error(call, RK_E_CANCELLED,
                                  "opensandbox write_file failed for %s: upload source aborted",
                                  osid);
    else if (s == RK_OK && (x.status < 200 || x.status >= 300))
        s = fail_http(inst, call, RK_E_UPSTREAM, "write_file", osid, &x);
    os_xfer_cleanup(&x);
    curl_mime_free(wc.mime);
    return s;
}
