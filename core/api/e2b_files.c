/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envd's filesystem service mapped onto the plugin (docs/e2b.md; the /files
 * transfer is e2b_transfer.c):
 *
 *   Stat, ListDir, MakeDir,  a short POSIX shell script run with exec (the
 *   Remove, Move             ABI has no directory operations): `find
 *                            -printf` describes entries (GNU find in the
 *                            image), exit codes carry not found / not a
 *                            directory / exists
 *
 * Paths are passed shell-quoted; file contents are never logged.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/e2b_envd.h"
#include "api/e2b_map.h"
#include "api/runtime.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/lifecycle.h"
#include "engine/http_server.h"
#include "host/host.h"
#include "host/plugin_loader.h"

/* One entry per find -printf record: type, size, mode, permissions, owner, group, mtime,
 * name, path, symlink target; fields end with NUL. */
#define ENTRY_FORMAT "'%y\\0%s\\0%m\\0%M\\0%u\\0%g\\0%T@\\0%f\\0%p\\0%l\\0'"
#define ENTRY_FIELDS 10
/* Exit codes of the scripts. */
#define EXIT_NOT_FOUND 3
#define EXIT_NOT_DIR 4
#define EXIT_EXISTS 5
/* Deadline of a filesystem script (a shorter connect-timeout-ms wins). */
#define SCRIPT_TIMEOUT_MS 60000

/* Run script in the sandbox of t, its output into col; the exit code in *code. RK_OK, or the
 * error on r->call. */
static rk_status run_script(struct rk_req *r, struct rk_target *t, const char *script,
                            struct rk_collector *col, int *code)
{
    int64_t asked = rk_envd_timeout_ms(r); /* the client's deadline, when shorter */
    struct rk_exec_req req = {.command = script,
                              .timeout_ms =
                                  asked && asked < SCRIPT_TIMEOUT_MS ? asked : SCRIPT_TIMEOUT_MS};
    struct rk_sink sink = rk_collector_sink(col);
    struct rk_exec_res res = {0};
    rk_command_deadline(r, req.timeout_ms);
    rk_status st;
    RK_UPSTREAM(st, r->app->plugin, exec, r->call, &t->ref, &req, &sink, &res);
    if (st == RK_OK && res.timed_out)
        st = rk_call_set_error(r->call, RK_E_TIMEOUT, "the filesystem command timed out");
    if (st == RK_OK && !res.has_exit_code)
        st = rk_call_set_error(r->call, RK_E_UPSTREAM, "the backend reported no exit code");
    if (st == RK_OK && col->over_budget)
        st = rk_call_set_error(r->call, RK_E_TOO_LARGE, "admin is busy: memory budget reached");
    *code = res.exit_code;
    return st;
}

/* The shell-quoted path (arena). */
static const char *quoted(struct rk_call *call, const char *path)
{
    struct rk_buf b = {0};
    rk_shell_quote(&b, path);
    const char *q = rk_arena_strdup(call, rk_buf_cstr(&b));
    rk_buf_free(&b);
    return q;
}

/* RFC 3339 UTC time of an epoch with fraction ("1700000000.123"). */
static json_object *rfc3339(const char *epoch)
{
    double v = strtod(epoch, NULL);
    time_t secs = (time_t)v;
    struct tm tm;
    char out[40];
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, sizeof out - n, ".%09ldZ", (long)((v - (double)secs) * 1e9));
    return json_object_new_string(out);
}

/* EntryInfo from the ENTRY_FIELDS fields f[]. */
static json_object *entry_info(const char *const *f)
{
    const char *type = !strcmp(f[0], "f")   ? "FILE_TYPE_FILE"
                       : !strcmp(f[0], "d") ? "FILE_TYPE_DIRECTORY"
                       : !strcmp(f[0], "l") ? "FILE_TYPE_SYMLINK"
                                            : "FILE_TYPE_UNSPECIFIED";
    unsigned mode = (unsigned)strtoul(f[2], NULL, 8);
    if (!strcmp(f[0], "d"))
        mode |= 0x80000000u; /* Go's fs.ModeDir, as envd reports it */
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(f[7]));
    json_object_object_add(o, "type", json_object_new_string(type));
    json_object_object_add(o, "path", json_object_new_string(f[8]));
    json_object_object_add(o, "size", json_object_new_string(f[1]));
    json_object_object_add(o, "mode", json_object_new_int64(mode));
    json_object_object_add(o, "permissions", json_object_new_string(f[3]));
    json_object_object_add(o, "owner", json_object_new_string(f[4]));
    json_object_object_add(o, "group", json_object_new_string(f[5]));
    json_object_object_add(o, "modifiedTime", rfc3339(f[6]));
    if (*f[9])
        json_object_object_add(o, "symlinkTarget", json_object_new_string(f[9]));
    return o;
}

/* Every entry of find's output (NUL-separated fields) as an array of EntryInfo. */
static json_object *entries_of(const struct rk_buf *out)
{
    json_object *list = json_object_new_array();
    const char *f[ENTRY_FIELDS];
    size_t nf = 0, pos = 0;
    while (pos < out->len) {
        const char *field = out->data + pos;
        size_t len = strnlen(field, out->len - pos);
        if (pos + len >= out->len)
            break; /* a cut last field */
        f[nf++] = field;
        pos += len + 1;
        if (nf == ENTRY_FIELDS) {
            json_object_array_add(list, entry_info(f));
            nf = 0;
        }
    }
    return list;
}

/* Answer a script's failure: its exit code's meaning, or its stderr. */
static void reply_script_error(struct rk_req *r, int code, const char *path,
                               const struct rk_collector *col)
{
    if (code == EXIT_NOT_FOUND)
        rk_envd_reply_error(r, "not_found",
                            rk_arena_printf(r->call, "path '%s' does not exist", path));
    else if (code == EXIT_NOT_DIR)
        rk_envd_reply_error(r, "invalid_argument",
                            rk_arena_printf(r->call, "path '%s' is not a directory", path));
    else if (code == EXIT_EXISTS)
        rk_envd_reply_error(r, "already_exists",
                            rk_arena_printf(r->call, "path '%s' already exists", path));
    else
        rk_envd_reply_error(r, "unknown",
                            rk_arena_printf(r->call,
                                            "the filesystem command failed (exit %d): %.*s", code,
                                            (int)(col->err.len > 400 ? 400 : col->err.len),
                                            col->err.data ? col->err.data : ""));
}

/* A filesystem RPC: parse {"path"...}, pass the gate, run the script build(path) makes,
 * answer with reply(entries). */
struct fs_op {
    const char *(*script)(struct rk_call *call, json_object *body, const char **path,
                          const char **why);
    json_object *(*answer)(json_object *entries);
};

static void fs_rpc(struct rk_req *r, const struct fs_op *op)
{
    json_object *body = rk_envd_request(r, 0);
    if (!body)
        return;
    const char *path = NULL, *why = NULL;
    const char *script = op->script(r->call, body, &path, &why);
    json_object_put(body);
    if (!script) {
        rk_envd_reply_error(r, "invalid_argument", why);
        return;
    }
    struct rk_target t;
    if (rk_envd_target(r, RK_OP_EXEC, 0, &t) != 0)
        return;
    struct rk_collector col;
    rk_collector_output(&col, r);
    int code = 0;
    rk_status st = run_script(r, &t, script, &col, &code);
    rk_target_release(&t);
    if (st != RK_OK)
        rk_envd_reply_call_error(r, 0);
    else if (code != 0)
        reply_script_error(r, code, path, &col);
    else
        rk_envd_reply_message(r, op->answer(entries_of(&col.out)));
    rk_collector_free(&col);
}

/* The "path" member (non-empty string), or NULL with why set. */
static const char *path_of(struct rk_call *call, json_object *body, const char *key,
                           const char **why)
{
    json_object *p = NULL;
    if (!json_object_object_get_ex(body, key, &p) || !json_object_is_type(p, json_type_string) ||
        !*json_object_get_string(p)) {
        *why = rk_arena_printf(call, "%s is required", key);
        return NULL;
    }
    return rk_arena_strdup(call, json_object_get_string(p));
}

static const char *stat_script(struct rk_call *call, json_object *body, const char **path,
                               const char **why)
{
    if (!(*path = path_of(call, body, "path", why)))
        return NULL;
    return rk_arena_printf(call,
                           "p=%s; [ -e \"$p\" ] || [ -L \"$p\" ] || exit %d; "
                           "exec find \"$p\" -maxdepth 0 -printf %s",
                           quoted(call, *path), EXIT_NOT_FOUND, ENTRY_FORMAT);
}

static const char *list_script(struct rk_call *call, json_object *body, const char **path,
                               const char **why)
{
    if (!(*path = path_of(call, body, "path", why)))
        return NULL;
    json_object *d = NULL;
    int64_t depth =
        json_object_object_get_ex(body, "depth", &d) && d ? json_object_get_int64(d) : 1;
    if (depth < 1)
        depth = 1;
    if (depth > 64)
        depth = 64;
    return rk_arena_printf(call,
                           "p=%s; [ -e \"$p\" ] || exit %d; [ -d \"$p\" ] || exit %d; "
                           "exec find -H \"$p\" -mindepth 1 -maxdepth %lld -printf %s",
                           quoted(call, *path), EXIT_NOT_FOUND, EXIT_NOT_DIR, (long long)depth,
                           ENTRY_FORMAT);
}

static const char *mkdir_script(struct rk_call *call, json_object *body, const char **path,
                                const char **why)
{
    if (!(*path = path_of(call, body, "path", why)))
        return NULL;
    return rk_arena_printf(call,
                           "p=%s; [ -e \"$p\" ] && exit %d; mkdir -p -- \"$p\" || exit 1; "
                           "exec find \"$p\" -maxdepth 0 -printf %s",
                           quoted(call, *path), EXIT_EXISTS, ENTRY_FORMAT);
}

static const char *remove_script(struct rk_call *call, json_object *body, const char **path,
                                 const char **why)
{
    if (!(*path = path_of(call, body, "path", why)))
        return NULL;
    return rk_arena_printf(call,
                           "p=%s; [ -e \"$p\" ] || [ -L \"$p\" ] || exit %d; rm -rf -- \"$p\"",
                           quoted(call, *path), EXIT_NOT_FOUND);
}

static const char *move_script(struct rk_call *call, json_object *body, const char **path,
                               const char **why)
{
    const char *dst;
    if (!(*path = path_of(call, body, "source", why)) ||
        !(dst = path_of(call, body, "destination", why)))
        return NULL;
    return rk_arena_printf(call,
                           "s=%s; d=%s; [ -e \"$s\" ] || [ -L \"$s\" ] || exit %d; "
                           "mkdir -p -- \"$(dirname -- \"$d\")\" && mv -- \"$s\" \"$d\" || exit 1; "
                           "exec find \"$d\" -maxdepth 0 -printf %s",
                           quoted(call, *path), quoted(call, dst), EXIT_NOT_FOUND, ENTRY_FORMAT);
}

/* {"entry": <the one entry>} */
static json_object *answer_entry(json_object *entries)
{
    json_object *o = json_object_new_object();
    json_object *e =
        json_object_array_length(entries) ? json_object_array_get_idx(entries, 0) : NULL;
    json_object_object_add(o, "entry", e ? json_object_get(e) : json_object_new_object());
    json_object_put(entries);
    return o;
}

/* {"entries": [...]} */
static json_object *answer_entries(json_object *entries)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "entries", entries);
    return o;
}

/* {} */
static json_object *answer_empty(json_object *entries)
{
    json_object_put(entries);
    return json_object_new_object();
}

void rk_envd_fs_stat(struct rk_req *r)
{
    static const struct fs_op op = {stat_script, answer_entry};
    fs_rpc(r, &op);
}

void rk_envd_fs_list(struct rk_req *r)
{
    static const struct fs_op op = {list_script, answer_entries};
    fs_rpc(r, &op);
}

void rk_envd_fs_mkdir(struct rk_req *r)
{
    static const struct fs_op op = {mkdir_script, answer_entry};
    fs_rpc(r, &op);
}

void rk_envd_fs_remove(struct rk_req *r)
{
    static const struct fs_op op = {remove_script, answer_empty};
    fs_rpc(r, &op);
}

void rk_envd_fs_move(struct rk_req *r)
{
    static const struct fs_op op = {move_script, answer_entry};
    fs_rpc(r, &op);
}
