/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /read_file and /write_file (§5.9-5.10, B56-B61): file contents
 * through the plugin, decoded with Python's codecs on read (base/decode.h),
 * the mode of an existing file kept on write. Contents are never logged.
 */
#include <stdlib.h>
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "api/runtime.h"
#include "base/app.h"
#include "base/decode.h"
#include "base/util.h"
#include "config/config.h"
#include "host/host.h"
#include "host/plugin_loader.h"

/* POST /read_file (§5.9, B56, U25). */
void rk_route_read_file(struct rk_req *r)
{
    struct rk_collector col;
    rk_collector_init(&col, r->call, r->app->cfg->server.max_read_bytes, "file",
                      "server.max_read_bytes");
    struct rk_route_path p;
    const char *id = rk_path_sandbox(&p, r);
    const char *path = rk_v_str(&p.v, p.body, "path", RK_V_REQUIRED, NULL);
    const char *encoding = rk_v_str(&p.v, p.body, "encoding", 0, "utf-8");
    const char *errors = rk_v_str(&p.v, p.body, "errors", 0, "strict");
    if (rk_path_gate(&p, RK_OP_FILE_READ, id) != 0)
        goto out;
    const struct rk_plugin *pl = r->app->plugin;
    struct rk_sink sink = rk_collector_sink(&col);
    rk_status st;
    RK_UPSTREAM(st, pl, file_read, r->call, &p.t.ref, path, &sink);
    if (rk_collector_reply_busy(r, &col))
        goto out;
    if (st != RK_OK) {
        /* §5.9: a missing file is a backend error (5000, B61), not a bad
         * request; the route shape keeps {"content":""}. */
        if (rk_call_error_code(r->call) == RK_E_NOT_FOUND ||
            (st == RK_E_NOT_FOUND && rk_call_error_code(r->call) == RK_OK))
            rk_reply_error(r, RK_E_UPSTREAM, rk_call_error_text(r->call));
        else
            rk_path_fail(&p, st);
        goto out;
    }
    /* Stderr chunks are not expected for files; treat them as data. */
    rk_buf_append(&col.out, col.err.data ? col.err.data : "", col.err.len);
    char *text = NULL;
    size_t text_len = 0;
    char msg[256];
    enum rk_decode_rc drc =
        rk_decode(col.out.data, col.out.len, encoding, errors, &text, &text_len, msg, sizeof msg);
    rk_collector_free(&col);
    if (drc == RK_DECODE_NOMEM) {
        rk_reply_error(r, RK_E_NOMEM, msg);
    } else if (drc != RK_DECODE_OK) {
        /* Decode failures are generic exceptions: Failed with result null. */
        rk_reply_error(r, RK_E_COMMAND, msg);
    } else {
        json_object *result = json_object_new_object();
        json_object_object_add(result, "content", json_object_new_string_len(text, (int)text_len));
        free(text);
        rk_reply_ok(r, result);
    }
out:
    rk_collector_free(&col);
    rk_path_end(&p);
}

/* A source over an in-memory string (write_file content). */
struct mem_source {
    const char *p;
    size_t left;
};

/* rk_source.read over a mem_source. */
static long long mem_source_read(void *ctx, char *buf, size_t len)
{
    struct mem_source *m = ctx;
    size_t n = m->left < len ? m->left : len;
    memcpy(buf, m->p, n);
    m->p += n;
    m->left -= n;
    return (long long)n;
}

/* POST /write_file (§5.10, B57-B59). */
void rk_route_write_file(struct rk_req *r)
{
    struct rk_route_path p;
    const char *id = rk_path_sandbox(&p, r);
    (void)rk_v_str(&p.v, p.body, "content", RK_V_REQUIRED, NULL);
    const char *path = rk_v_str(&p.v, p.body, "path", RK_V_REQUIRED, NULL);
    if (rk_path_valid(&p) != 0)
        goto out;
    /* The content may hold NUL bytes: take it with its length from the JSON. */
    json_object *cval = NULL;
    json_object_object_get_ex(p.body, "content", &cval);
    struct mem_source ms = {.p = json_object_get_string(cval),
                            .left = (size_t)json_object_get_string_len(cval)};

    if (rk_path_gate(&p, RK_OP_FILE_WRITE, id) != 0)
        goto out;
    const struct rk_plugin *pl = r->app->plugin;
    /* B57-B59: keep an existing file's mode, 0644 for a new one; a failed
     * lookup aborts without writing. */
    struct rk_file_info info = {0};
    rk_status st;
    RK_UPSTREAM(st, pl, file_stat, r->call, &p.t.ref, path, &info);
    if (st != RK_OK) {
        rk_path_fail(&p, st);
        goto out;
    }
    unsigned mode = info.exists ? (info.mode & 07777) : 0644;
    struct rk_source src = {.read = mem_source_read, .ctx = &ms, .size = (long long)ms.left};
    RK_UPSTREAM(st, pl, file_write, r->call, &p.t.ref, path, mode, &src);
    if (st != RK_OK) {
        rk_path_fail(&p, st);
        goto out;
    }
    json_object *result = json_object_new_object();
    json_object_object_add(result, "success", json_object_new_boolean(1));
    json_object_object_add(result, "message", json_object_new_string(""));
    rk_reply_ok(r, result);
out:
    rk_path_end(&p);
}
