/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's lifecycle routes at the server root, as ROCK 1.11 serves them
 * (docs/e2b.md): create, get, delete and list, answered in E2B's shapes
 * (e2b_map.h). They go through the same start path, status read and delete
 * as ROCK's routes (start_submit.h, sandbox_ops.h), so a sandbox is one
 * record whichever API made it, and the fail-closed backend tag rule holds
 * for both. The route table of the whole E2B surface is at the end.
 */
#include <ctype.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access/auth.h"
#include "access/secret.h"
#include "api/e2b.h"
#include "api/e2b_envd.h"
#include "api/e2b_map.h"
#include "api/route_path.h"
#include "api/sandbox_ops.h"
#include "api/start_submit.h"
#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "domain/record.h"
#include "domain/status_text.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"
#include "store/store.h"

/* Most sandboxes one list page holds (E2B's maximum). */
#define LIST_MAX 100
/* Most metadata filter pairs of one list query. */
#define FILTER_MAX 32

/* 1 for an image reference rock-admin passes on: [A-Za-z0-9._/:@-], 1-512 characters. */
static int template_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > 512)
        return 0;
    for (; *t; t++)
        if (!isalnum((unsigned char)*t) && !strchr("._/:@-", *t))
            return 0;
    return 1;
}

/* A field the create body may carry but rock-admin cannot honour: a problem
 * naming why when it is present (not null). */
static void refuse_field(struct rk_v *v, json_object *body, const char *key, const char *why)
{
    json_object *val = NULL;
    if (body && json_object_object_get_ex(body, key, &val) && val)
        rk_v_problem(v, key, why);
}

/* The create failed after the record was made: forget the sandbox again
 * (best effort) and answer why it did not start. */
static void reply_start_failed(struct rk_req *r, const char *id)
{
    rk_status st = rk_call_error_code(r->call);
    const char *why = rk_arena_strdup(r->call, rk_call_error_text(r->call));
    if (rk_sandbox_delete(r, id) != RK_OK)
        rk_warn("[%s] E2B create: removing sandbox %s that did not start failed: %s", r->request_id,
                id, rk_call_error_text(r->call));
    if (st == RK_E_TIMEOUT)
        rk_e2b_reply_error(r, 504,
                           rk_arena_printf(r->call, "Sandbox %s did not start within %d s", id,
                                           r->app->cfg->runtime.start_wait_s));
    else if (st == RK_E_CANCELLED)
        rk_e2b_reply_error(r, 499, "the client went away");
    else
        rk_e2b_reply_error(r, 400,
                           rk_arena_printf(r->call, "Sandbox %s failed to start: %s", id, why));
}

/* POST /sandboxes and /v2/sandboxes: E2B's NewSandbox -> 201 Sandbox. */
void rk_e2b_create(struct rk_req *r)
{
    const struct rk_config *cfg = r->app->cfg;
    struct rk_route_path p;
    rk_path_body(&p, r);
    struct rk_v *v = &p.v;
    json_object *body = p.body;
    const char *tmpl = rk_v_str(v, body, "templateID", RK_V_REQUIRED | RK_V_NONBLANK, NULL);
    int has_timeout = 0;
    int64_t timeout = rk_v_int_in(v, body, "timeout", 0, 0, 0, RK_MAX_SECONDS, &has_timeout);
    json_object *metadata = rk_v_strmap(v, body, "metadata", 0);
    json_object *env = rk_v_strmap(v, body, "envVars", 0);
    if (rk_v_bool(v, body, "autoPause", 0, 0))
        rk_v_problem(v, "autoPause",
                     "pausing on timeout is not supported: rock-admin deletes idle sandboxes");
    refuse_field(v, body, "mcp", "MCP gateways are not supported");
    refuse_field(v, body, "volumeMounts", "volume mounts are not supported");
    if (tmpl && !template_ok(tmpl))
        rk_v_problem(v, "templateID",
                     "Input should be an image reference ([A-Za-z0-9._/:@-], 1-512 characters)");
    if (!rk_v_ok(v)) {
        rk_e2b_reply_error(r, 400, rk_v_text(v));
        rk_path_end(&p);
        return;
    }
    char token[33], digest[RK_SECRET_DIGEST_HEX];
    int with_token = rk_auth_enabled();
    if (with_token && rk_secret_issue(token, digest) != 0) {
        rk_call_set_error(r->call, RK_E_INTERNAL, "cannot hash the envd access token");
        rk_e2b_reply_call_error(r);
        rk_path_end(&p);
        return;
    }
    struct rk_start_req s = {
        .image = tmpl,
        .image_os = "linux",
        .memory = "8g",
        .disk = "50G",
        .cpus = 2.0,
        .startup_timeout_s = 600.0, /* ROCK's default */
        .auto_clear_minutes =
            has_timeout ? rk_e2b_timeout_minutes(timeout) : cfg->runtime.default_auto_clear_minutes,
        .user_id = "default",
        .experiment_id = "default",
        .namespace_name = "default",
        .cluster_name = "default",
        .env = env,
        .metadata = metadata,
        .envd_token_digest = with_token ? digest : NULL,
    };
    const char *id = NULL;
    if (rk_start_submit(r, &s, &id) != RK_OK) {
        rk_e2b_reply_call_error(r);
    } else if (rk_lifecycle_wait_running(r->app, r->call, id, cfg->runtime.start_wait_s) != RK_OK) {
        /* E2B answers with a sandbox that runs: the SDK calls envd right away. */
        reply_start_failed(r, id);
    } else {
        r->outcome = "success";
        rk_req_reply_json(r, 201, rk_e2b_sandbox(id, tmpl, with_token ? token : NULL));
    }
    rk_path_end(&p);
}

/* The sandboxID path parameter, checked against the identifier rule; NULL
 * after a 404 (an id that cannot exist). */
static const char *path_id(struct rk_req *r)
{
    const char *id = r->params[0];
    if (!id || !rk_id_valid(id, strlen(id))) {
        rk_e2b_reply_error(r, 404, rk_arena_printf(r->call, "Sandbox %s not found", id ? id : ""));
        return NULL;
    }
    return id;
}

/* GET /sandboxes/{sandboxID}: SandboxDetail, 404 for unknown and deleted ids. */
void rk_e2b_get(struct rk_req *r)
{
    const char *id = path_id(r);
    if (!id)
        return;
    json_object *st = NULL;
    if (rk_sandbox_status(r, id, 1, &st) != RK_OK) {
        rk_e2b_reply_call_error(r);
        return;
    }
    json_object *detail = rk_e2b_detail(st);
    json_object_put(st);
    if (!detail) {
        rk_e2b_reply_error(r, 404, rk_arena_printf(r->call, "Sandbox %s not found", id));
        return;
    }
    r->outcome = "success";
    rk_req_reply_json(r, 200, detail);
}

/* DELETE /sandboxes/{sandboxID}: 204, or 404 for unknown and deleted ids. */
void rk_e2b_delete(struct rk_req *r)
{
    const char *id = path_id(r);
    if (!id)
        return;
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    rk_store_rc rc = rk_store_get(r->app->store, id, &rec, err, sizeof err);
    enum rk_state state = rc == RK_STORE_OK ? rk_rec_state(rec) : 0;
    json_object_put(rec);
    if (rc == RK_STORE_ERROR) {
        rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
        rk_e2b_reply_call_error(r);
    } else if (rc == RK_STORE_NOT_FOUND || state == RK_STATE_DELETED) {
        rk_e2b_reply_error(r, 404, rk_arena_printf(r->call, "Sandbox %s not found", id));
    } else if (rk_sandbox_delete(r, id) != RK_OK) {
        rk_e2b_reply_call_error(r);
    } else {
        r->outcome = "success";
        rk_req_reply_empty(r, 204);
    }
}

/* ---- list ------------------------------------------------------------------------------- */

/* Percent-decode s (also '+' as a space when form) into the arena. */
static char *pct_decode(struct rk_call *call, const char *s, size_t n, int form)
{
    char *out = rk_arena_alloc(call, n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
            isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            out[j++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else if (form && s[i] == '+') {
            out[j++] = ' ';
        } else {
            out[j++] = s[i];
        }
    }
    out[j] = '\0';
    return out;
}

/* The list query: metadata pairs, states, page. */
struct list_query {
    const char *keys[FILTER_MAX], *vals[FILTER_MAX];
    size_t n;
    int running, paused; /* states asked for (both when none given) */
    int64_t limit, offset;
};

/*
 * The metadata filter as the SDK sends it: URLSearchParams of
 * encodeURIComponent'ed pairs ("k=v&k2=v2", each part encoded twice in all),
 * or ROCK's "k:v" form. 0, or -1 after a 400.
 */
static int parse_metadata(struct rk_req *r, const char *m, struct list_query *q)
{
    while (m && *m) {
        size_t len = strcspn(m, "&");
        if (len) {
            const char *eq = memchr(m, '=', len);
            if (!eq)
                eq = memchr(m, ':', len);
            if (!eq || eq == m || q->n >= FILTER_MAX) {
                rk_e2b_reply_error(r, 400,
                                   q->n >= FILTER_MAX
                                       ? "query.metadata: too many pairs"
                                       : "query.metadata: expected key=value pairs joined by &");
                return -1;
            }
            char *k = pct_decode(r->call, m, (size_t)(eq - m), 1);
            char *v = pct_decode(r->call, eq + 1, len - (size_t)(eq - m) - 1, 1);
            q->keys[q->n] = pct_decode(r->call, k, strlen(k), 0);
            q->vals[q->n] = pct_decode(r->call, v, strlen(v), 0);
            q->n++;
        }
        m += len;
        if (*m == '&')
            m++;
    }
    return 0;
}

/* Read the list query; 0, or -1 after a 400. */
static int parse_list_query(struct rk_req *r, struct list_query *q)
{
    memset(q, 0, sizeof *q);
    if (parse_metadata(r, rk_req_query(r, "metadata"), q) != 0)
        return -1;
    const char *state = rk_req_query(r, "state");
    while (state && *state) {
        size_t len = strcspn(state, ",");
        if (len == 7 && !strncmp(state, "running", 7))
            q->running = 1;
        else if (len == 6 && !strncmp(state, "paused", 6))
            q->paused = 1;
        else if (len) {
            rk_e2b_reply_error(r, 400, "query.state: Input should be 'running' or 'paused'");
            return -1;
        }
        state += len;
        if (*state == ',')
            state++;
    }
    if (!q->running && !q->paused)
        q->running = q->paused = 1;
    struct rk_v v;
    rk_v_init(&v, r->call, "query");
    q->limit = rk_v_irange(&v, "limit", rk_v_qint(&v, r, "limit", LIST_MAX), 1, LIST_MAX);
    const char *tok = rk_req_query(r, "nextToken");
    if (tok && *tok) {
        char *end = NULL;
        long long off = strtoll(tok, &end, 10);
        if (*end || off < 0)
            rk_v_problem(&v, "nextToken", "not a token this server issued");
        q->offset = off;
    }
    int ok = rk_v_ok(&v);
    if (!ok)
        rk_e2b_reply_error(r, 400, rk_v_text(&v));
    rk_v_free(&v);
    return ok ? 0 : -1;
}

/* 1 when rec is listed for q: this operator's, in an asked-for state, every metadata pair equal. */
static int listed(struct rk_req *r, json_object *rec, const struct list_query *q)
{
    const char *tag = rk_rec_backend(rec);
    if (!tag || strcmp(tag, r->app->plugin->desc->backend_tag) != 0)
        return 0;
    const char *state = rk_e2b_state(rk_rec_str(rec, "state"));
    if (!state || (!strcmp(state, "running") ? !q->running : !q->paused))
        return 0;
    json_object *md = NULL;
    json_object_object_get_ex(rec, "metadata", &md);
    for (size_t i = 0; i < q->n; i++) {
        json_object *val = NULL;
        if (!md || !json_object_object_get_ex(md, q->keys[i], &val) || !val ||
            strcmp(json_object_get_string(val), q->vals[i]) != 0)
            return 0;
    }
    return 1;
}

/* qsort: oldest first, then by id. */
static int by_age(const void *a, const void *b)
{
    json_object *ra = *(json_object *const *)a, *rb = *(json_object *const *)b;
    const char *ta = rk_rec_str(ra, "create_time"), *tb = rk_rec_str(rb, "create_time");
    int c = strcmp(ta ? ta : "", tb ? tb : "");
    if (c)
        return c;
    const char *ia = rk_rec_str(ra, "sandbox_id"), *ib = rk_rec_str(rb, "sandbox_id");
    return strcmp(ia ? ia : "", ib ? ib : "");
}

/* GET /v2/sandboxes and /sandboxes: ListedSandbox[] of the stored records
 * (no backend call), filtered by metadata and state, paged with limit and
 * the x-next-token header. */
void rk_e2b_list(struct rk_req *r)
{
    struct list_query q;
    if (parse_list_query(r, &q) != 0)
        return;
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    if (rk_store_list_active(r->app->store, &ids, &n, err, sizeof err) != RK_STORE_OK) {
        rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
        rk_e2b_reply_call_error(r);
        return;
    }
    json_object **recs = calloc(n ? n : 1, sizeof *recs);
    if (!recs)
        abort();
    if (n && rk_store_get_many(r->app->store, (const char *const *)ids, n, recs, err, sizeof err) !=
                 RK_STORE_OK) {
        rk_store_free_ids(ids, n);
        free(recs);
        rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
        rk_e2b_reply_call_error(r);
        return;
    }
    rk_store_free_ids(ids, n);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (recs[i] && listed(r, recs[i], &q))
            recs[kept++] = recs[i];
        else
            json_object_put(recs[i]);
    }
    qsort(recs, kept, sizeof *recs, by_age);
    json_object *items = json_object_new_array();
    size_t first = (size_t)q.offset, last = first + (size_t)q.limit;
    for (size_t i = 0; i < kept; i++) {
        if (i >= first && i < last) {
            json_object *st = rk_rec_status(recs[i], rk_rec_state(recs[i]), 1);
            json_object *item = rk_e2b_detail(st);
            json_object_put(st);
            if (item)
                json_object_array_add(items, item);
        }
        json_object_put(recs[i]);
    }
    free(recs);
    char next[24];
    struct rk_kv hdr = {"X-Next-Token", next};
    snprintf(next, sizeof next, "%zu", last);
    r->outcome = "success";
    rk_req_reply_json_headers(r, 200, items, &hdr, last < kept ? 1 : 0);
}

/* ---- the route table ------------------------------------------------------------------- */

/* A lifecycle route: E2B's error shape, X-API-Key accepted. */
#define E2B_ROUTE(m, pat, nm, bm, fn, fl)                                                          \
    {                                                                                              \
        .method = m, .pattern = pat, .name = nm, .body_mode = bm, .handler = fn,                   \
        .flags = RK_ROUTE_API_KEY | (fl)                                                           \
    }

const struct rk_route rk_e2b_routes[] = {
    E2B_ROUTE("POST", "/sandboxes", "e2b_create", RK_BODY_JSON, rk_e2b_create, 0),
    E2B_ROUTE("POST", "/v2/sandboxes", "e2b_create", RK_BODY_JSON, rk_e2b_create, 0),
    E2B_ROUTE("GET", "/sandboxes", "e2b_list", RK_BODY_NONE, rk_e2b_list, 0),
    E2B_ROUTE("GET", "/v2/sandboxes", "e2b_list", RK_BODY_NONE, rk_e2b_list, 0),
    E2B_ROUTE("GET", "/sandboxes/{sandboxID}", "e2b_get", RK_BODY_NONE, rk_e2b_get,
              RK_ROUTE_SANDBOX_PARAM),
    E2B_ROUTE("DELETE", "/sandboxes/{sandboxID}", "e2b_delete", RK_BODY_NONE, rk_e2b_delete,
              RK_ROUTE_SANDBOX_PARAM),
    E2B_ROUTE("POST", "/sandboxes/{sandboxID}/timeout", "e2b_set_timeout", RK_BODY_JSON,
              rk_e2b_set_timeout, RK_ROUTE_SANDBOX_PARAM),
    E2B_ROUTE("POST", "/v2/sandboxes/{sandboxID}/connect", "e2b_connect", RK_BODY_JSON,
              rk_e2b_connect, RK_ROUTE_SANDBOX_PARAM),
    E2B_ROUTE("POST", "/sandboxes/{sandboxID}/pause", "e2b_pause", RK_BODY_JSON, rk_e2b_pause,
              RK_ROUTE_SANDBOX_PARAM),
    RK_E2B_ENVD_ROUTES,
    {.pattern = NULL},
};
