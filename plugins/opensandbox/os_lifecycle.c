/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_lifecycle.c
 * @brief Lifecycle server calls: create (with lost-reply adoption), status, kill,
 *        endpoint discovery (with a short per-instance cache) and proxy targets.
 */
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "os_internal.h"

/** Metadata key that records the ROCK id upstream. */
#define OS_META_ROCK_ID "rock_sandbox_id"
/** Most list pages read while looking a sandbox up by metadata. */
#define OS_LIST_MAX_PAGES 10
/** Pages of 200 the reconciler's list pass reads at most (100,000 sandboxes). */
#define OS_RECONCILE_MAX_PAGES 500

/** Prepare a lifecycle request to {protocol}://{endpoint}/v1{path}. */
static rk_status lc_xfer(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
                         const char *method, const char *path)
{
    memset(x, 0, sizeof(*x));
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/v1%s", path);
    char *p = os_sb_take(&sb);
    char *url = p ? os_join_url(inst->protocol, inst->endpoint, p) : NULL;
    free(p);
    if (!url)
        return RK_E_NOMEM;
    rk_status s = os_xfer_init(x, inst, call, method, url, inst->default_timeout_s * 1000);
    free(url);
    if (s == RK_OK)
        s = os_xfer_header(x, "Accept", "application/json");
    if (s == RK_OK && inst->api_key)
        s = os_xfer_header(x, "OPEN-SANDBOX-API-KEY", inst->api_key);
    return s;
}

/** Parse a buffered JSON body into an object (NULL if not an object). */
static json_object *body_json(const struct os_xfer *x)
{
    if (!x->body || !x->body_len)
        return NULL;
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    json_object *o = json_tokener_parse_ex(tok, x->body, (int)x->body_len);
    json_tokener_free(tok);
    if (o && !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

/** String member of an object or NULL. */
static const char *jstr(json_object *o, const char *key)
{
    json_object *v;
    if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
        return json_object_get_string(v);
    return NULL;
}

/** Record "opensandbox <op> failed for <osid>: <detail>" for a non-2xx answer. */
static rk_status http_fail(struct os_inst *inst, struct rk_call *call, rk_status code,
                           const char *op, const char *osid, const struct os_xfer *x)
{
    char *d = os_error_detail(x->status, x->body, x->body_len);
    rk_status r;
    if (osid)
        r = inst->host->set_error(call, code, "opensandbox %s failed for %s: %s", op, osid,
                                  d ? d : "error");
    else
        r = inst->host->set_error(call, code, "opensandbox %s failed: %s", op, d ? d : "error");
    free(d);
    return r;
}

/** Record the failure of a transfer that got no HTTP answer. */
static rk_status xfer_fail(struct os_inst *inst, struct rk_call *call, rk_status s, const char *op,
                           const char *osid, const struct os_xfer *x)
{
    const char *err = s == RK_E_CANCELLED   ? "cancelled"
                      : s == RK_E_TIMEOUT   ? "request deadline exceeded"
                      : s == RK_E_NOMEM     ? "out of memory"
                      : s == RK_E_TOO_LARGE ? "response too large"
                                            : os_xfer_err(x);
    if (osid)
        return inst->host->set_error(call, s, "opensandbox %s failed for %s: %s", op, osid, err);
    return inst->host->set_error(call, s, "opensandbox %s failed: %s", op, err);
}

/** One sandbox found by metadata. */
struct lc_found {
    char *id;
    char *state;
    char *reason;
};

/** Free a found list. */
static void found_free(struct lc_found *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(f[i].id);
        free(f[i].state);
        free(f[i].reason);
    }
    free(f);
}

/** Reason text of a status object: "reason: message" or either part. */
static char *status_reason(json_object *st)
{
    const char *reason = jstr(st, "reason"), *msg = jstr(st, "message");
    struct os_sb sb = {0};
    if (reason && msg)
        os_sb_printf(&sb, "%s: %s", reason, msg);
    else if (reason || msg)
        os_sb_puts(&sb, reason ? reason : msg);
    else
        return NULL;
    return os_sb_take(&sb);
}

/** List sandboxes whose metadata rock_sandbox_id equals rock_id (all pages, bounded). */
static rk_status lc_find(struct os_inst *inst, struct rk_call *call, const char *rock_id,
                         const char *op, struct lc_found **out, size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    struct os_sb sb = {0};
    char *enc = os_metadata_filter(OS_META_ROCK_ID, rock_id);
    if (!enc)
        return inst->host->set_error(call, RK_E_NOMEM, "opensandbox %s failed: out of memory", op);
    struct lc_found *list = NULL;
    size_t n = 0;
    rk_status rs = RK_OK;
    for (int page = 1; page <= OS_LIST_MAX_PAGES && rs == RK_OK; page++) {
        os_sb_printf(&sb, "/sandboxes?metadata=%s&page=%d&pageSize=200", enc, page);
        char *path = os_sb_take(&sb);
        struct os_xfer x;
        rs = path ? lc_xfer(&x, inst, call, "GET", path) : RK_E_NOMEM;
        free(path);
        if (rs == RK_OK)
            rs = os_xfer_perform(&x);
        if (rs != RK_OK) {
            xfer_fail(inst, call, rs == RK_E_TOO_LARGE ? RK_E_UPSTREAM : rs, op, rock_id, &x);
            os_xfer_cleanup(&x);
            break;
        }
        if (x.status != 200) {
            rs = http_fail(inst, call, RK_E_UPSTREAM, op, rock_id, &x);
            os_xfer_cleanup(&x);
            break;
        }
        json_object *o = body_json(&x), *items = NULL, *pg = NULL, *v;
        os_xfer_cleanup(&x);
        int more = 0;
        if (o && json_object_object_get_ex(o, "items", &items) &&
            json_object_is_type(items, json_type_array)) {
            size_t cnt = json_object_array_length(items);
            struct lc_found *nl = realloc(list, (n + cnt + 1) * sizeof(*list));
            if (!nl) {
                json_object_put(o);
                rs = RK_E_NOMEM;
                break;
            }
            list = nl;
            for (size_t i = 0; i < cnt; i++) {
                json_object *it = json_object_array_get_idx(items, i), *st = NULL;
                const char *id = jstr(it, "id");
                if (!id)
                    continue;
                json_object_object_get_ex(it, "status", &st);
                const char *state = jstr(st, "state");
                list[n].id = strdup(id);
                list[n].state = state ? strdup(state) : NULL;
                list[n].reason = status_reason(st);
                n++;
            }
            if (json_object_object_get_ex(o, "pagination", &pg) &&
                json_object_object_get_ex(pg, "hasNextPage", &v))
                more = json_object_get_boolean(v);
        } else {
            json_object_put(o);
            rs = inst->host->set_error(call, RK_E_UPSTREAM,
                                       "opensandbox %s failed for %s: malformed list response", op,
                                       rock_id);
            break;
        }
        json_object_put(o);
        if (!more)
            break;
    }
    free(enc);
    if (rs != RK_OK) {
        found_free(list, n);
        return rs;
    }
    for (size_t i = 0; i < n; i++) {
        if (!list[i].id) {
            found_free(list, n);
            return RK_E_NOMEM;
        }
    }
    *out = list;
    *out_n = n;
    return RK_OK;
}

/** Index of the preferred match (first not Terminated), or 0. */
static size_t found_pick(const struct lc_found *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!f[i].state || strcmp(f[i].state, "Terminated") != 0)
            return i;
    }
    return 0;
}

/** DELETE one sandbox; 404 counts as success. */
static rk_status lc_kill(struct os_inst *inst, struct rk_call *call, const char *osid)
{
    char *enc = os_escape(osid);
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/sandboxes/%s", enc ? enc : "");
    free(enc);
    char *path = os_sb_take(&sb);
    struct os_xfer x;
    rk_status s = path ? lc_xfer(&x, inst, call, "DELETE", path) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK)
        s = os_xfer_perform(&x);
    if (s != RK_OK) {
        s = xfer_fail(inst, call, s == RK_E_TOO_LARGE ? RK_E_UPSTREAM : s, "kill", osid, &x);
    } else if (!(x.status >= 200 && x.status < 300) && x.status != 404) {
        s = http_fail(inst, call, RK_E_UPSTREAM, "kill", osid, &x);
    }
    os_xfer_cleanup(&x);
    return s;
}

/** Build the create request body; NULL on OOM. */
static char *create_body(struct os_inst *inst, const struct rk_create_spec *spec, const char *image)
{
    json_object *root = json_object_new_object();
    json_object *img = json_object_new_object();
    json_object_object_add(img, "uri", json_object_new_string(image));
    json_object_object_add(root, "image", img);
    json_object *ep = json_object_new_array();
    json_object_array_add(ep, json_object_new_string("tail"));
    json_object_array_add(ep, json_object_new_string("-f"));
    json_object_array_add(ep, json_object_new_string("/dev/null"));
    json_object_object_add(root, "entrypoint", ep);
    json_object *res = json_object_new_object();
    char *cpu = os_format_cpu(spec->cpus, spec->limit_cpus);
    char *mem = (spec->memory && *spec->memory) ? os_mem_to_k8s(spec->memory) : NULL;
    if (cpu)
        json_object_object_add(res, "cpu", json_object_new_string(cpu));
    if (mem && *mem)
        json_object_object_add(res, "memory", json_object_new_string(mem));
    free(cpu);
    free(mem);
    json_object_object_add(root, "resourceLimits", res);
    if (spec->env_len) {
        json_object *env = json_object_new_object();
        for (size_t i = 0; i < spec->env_len; i++)
            json_object_object_add(
                env, spec->env[i].key,
                json_object_new_string(spec->env[i].value ? spec->env[i].value : ""));
        json_object_object_add(root, "env", env);
    }
    json_object *md = json_object_new_object();
#define MD_OR_DEFAULT(v) ((v) && *(v) ? (v) : "default")
    json_object_object_add(md, OS_META_ROCK_ID,
                           json_object_new_string(spec->sandbox_id ? spec->sandbox_id : ""));
    json_object_object_add(md, "user_id", json_object_new_string(MD_OR_DEFAULT(spec->user_id)));
    json_object_object_add(md, "experiment_id",
                           json_object_new_string(MD_OR_DEFAULT(spec->experiment_id)));
    json_object_object_add(md, "namespace",
                           json_object_new_string(MD_OR_DEFAULT(spec->namespace_name)));
#undef MD_OR_DEFAULT
    json_object_object_add(root, "metadata", md);
    int64_t timeout = inst->sandbox_timeout_s;
    if (inst->renew_margin_s > 0 && spec->idle_timeout_s > 0) /* lifetime by renewal */
        timeout = spec->idle_timeout_s + inst->renew_margin_s;
    if (timeout > 0)
        json_object_object_add(root, "timeout", json_object_new_int64(timeout));
    json_object_object_add(root, "secureAccess", json_object_new_boolean(0));
    const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                             JSON_C_TO_STRING_NOSLASHESCAPE);
    char *r = s ? strdup(s) : NULL;
    json_object_put(root);
    return r;
}

/** Adopt a sandbox created by a request whose reply was lost; 1 if one was found. */
static int adopt_lost(struct os_inst *inst, struct rk_call *call, const char *rock_id,
                      struct rk_created *out)
{
    struct lc_found *f = NULL;
    size_t n = 0;
    if (lc_find(inst, call, rock_id, "create", &f, &n) != RK_OK || n == 0) {
        found_free(f, n);
        return 0;
    }
    size_t pick = found_pick(f, n);
    for (size_t i = 0; i < n; i++) {
        if (i != pick)
            lc_kill(inst, call, f[i].id); /* duplicates: best effort */
    }
    out->upstream_id = inst->host->arena_strdup(call, f[pick].id);
    found_free(f, n);
    inst->host->log(RK_LOG_WARNING, "create reply lost for %s; adopted the sandbox found upstream",
                    rock_id);
    return out->upstream_id != NULL;
}

/** Create a sandbox; on an unknown outcome, adopt the one recorded under spec->sandbox_id. */
rk_status os_lc_create(struct os_inst *inst, struct rk_call *call,
                       const struct rk_create_spec *spec, struct rk_created *out)
{
    const struct rk_host *h = inst->host;
    char *image = os_qualify_image(spec->image, inst->registry_prefix);
    char *body = image ? create_body(inst, spec, image) : NULL;
    if (!body) {
        free(image);
        return h->set_error(call, RK_E_NOMEM, "opensandbox create failed: out of memory");
    }
    out->image = h->arena_strdup(call, image);
    out->host_name = NULL;
    free(image);
    struct os_xfer x;
    rk_status s = lc_xfer(&x, inst, call, "POST", "/sandboxes");
    if (s == RK_OK) {
        /* A fresh connection: libcurl silently re-sends a request whose reused connection
         * died before any reply byte, and a create must never be sent twice (a lost reply is
         * handled by looking the sandbox up by its ROCK id instead). */
        os_xfer_fresh_connection(&x);
        os_xfer_json(&x, body);
        /* Never on a pooled connection: libcurl silently re-sends a request
         * whose reused connection died before any reply byte, which would
         * create a second sandbox; a lost reply must surface as an error so
         * adopt_lost() finds the one that was made. */
        curl_easy_setopt(x.curl, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(x.curl, CURLOPT_FORBID_REUSE, 1L);
        s = os_xfer_perform(&x);
    }
    free(body);
    if (s == RK_OK && x.status >= 200 && x.status < 300) {
        json_object *o = body_json(&x);
        const char *id = jstr(o, "id");
        out->upstream_id = id ? h->arena_strdup(call, id) : NULL;
        json_object_put(o);
        if (out->upstream_id) {
            os_xfer_cleanup(&x);
            return RK_OK;
        }
        /* Accepted but unreadable: find it by metadata like a lost reply. */
    }
    int unknown =
        (s == RK_OK && (x.status < 300 || x.status == 502 || x.status == 503 || x.status == 504)) ||
        (s == RK_E_UNAVAILABLE && !x.not_sent) || s == RK_E_TOO_LARGE;
    if (unknown && spec->sandbox_id && *spec->sandbox_id &&
        adopt_lost(inst, call, spec->sandbox_id, out)) {
        os_xfer_cleanup(&x);
        return RK_OK;
    }
    if (s == RK_OK && x.status >= 200 && x.status < 300)
        s = h->set_error(call, RK_E_UPSTREAM, "opensandbox create failed: reply without an id");
    else if (s == RK_OK)
        s = http_fail(inst, call, x.status >= 500 ? RK_E_UNAVAILABLE : RK_E_UPSTREAM, "create",
                      NULL, &x);
    else
        s = xfer_fail(inst, call, s == RK_E_TOO_LARGE ? RK_E_UPSTREAM : s, "create", NULL, &x);
    if (s == RK_E_TIMEOUT || s == RK_E_CANCELLED)
        s = RK_E_UNAVAILABLE;
    os_xfer_cleanup(&x);
    return s;
}

/** Fill *out from a status object. */
static rk_status fill_status(struct os_inst *inst, struct rk_call *call, const char *state,
                             char *reason, struct rk_status_info *out)
{
    int failed = 0;
    out->state = os_map_state(state, &failed);
    out->failed = failed;
    out->reason = NULL;
    if (failed) {
        out->reason =
            inst->host->arena_strdup(call, reason ? reason : "OpenSandbox reports Failed");
        if (!out->reason)
            return RK_E_NOMEM;
    }
    return RK_OK;
}

/** Current state of a sandbox (look it up by ROCK id when the upstream id is unknown). */
rk_status os_lc_status(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                       struct rk_status_info *out)
{
    const struct rk_host *h = inst->host;
    memset(out, 0, sizeof(*out));
    if (!ref->upstream_id) {
        struct lc_found *f = NULL;
        size_t n = 0;
        rk_status s = lc_find(inst, call, ref->sandbox_id, "get_state", &f, &n);
        if (s != RK_OK)
            return s == RK_E_TIMEOUT || s == RK_E_CANCELLED ? s : RK_E_UNAVAILABLE;
        if (n == 0) {
            found_free(f, n);
            return h->set_error(call, RK_E_NOT_FOUND,
                                "opensandbox get_state failed for %s: no sandbox with %s=%s",
                                ref->sandbox_id, OS_META_ROCK_ID, ref->sandbox_id);
        }
        size_t pick = found_pick(f, n);
        out->upstream_id = h->arena_strdup(call, f[pick].id);
        s = out->upstream_id ? fill_status(inst, call, f[pick].state, f[pick].reason, out)
                             : RK_E_NOMEM;
        found_free(f, n);
        return s;
    }
    const char *osid = ref->upstream_id;
    char *enc = os_escape(osid);
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/sandboxes/%s", enc ? enc : "");
    free(enc);
    char *path = os_sb_take(&sb);
    struct os_xfer x;
    rk_status s = path ? lc_xfer(&x, inst, call, "GET", path) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK)
        s = os_xfer_perform(&x);
    if (s != RK_OK) {
        s = xfer_fail(
            inst, call,
            (s == RK_E_CANCELLED || s == RK_E_TIMEOUT || s == RK_E_NOMEM) ? s : RK_E_UNAVAILABLE,
            "get_state", osid, &x);
    } else if (x.status == 404) {
        s = http_fail(inst, call, RK_E_NOT_FOUND, "get_state", osid, &x);
    } else if (x.status != 200) {
        s = http_fail(inst, call, x.status >= 500 ? RK_E_UNAVAILABLE : RK_E_UPSTREAM, "get_state",
                      osid, &x);
    } else {
        json_object *o = body_json(&x), *st = NULL;
        if (!o || !json_object_object_get_ex(o, "status", &st)) {
            s = h->set_error(call, RK_E_UPSTREAM,
                             "opensandbox get_state failed for %s: malformed response", osid);
        } else {
            char *reason = status_reason(st);
            s = fill_status(inst, call, jstr(st, "state"), reason, out);
            free(reason);
        }
        json_object_put(o);
    }
    os_xfer_cleanup(&x);
    return s;
}

/** Ensure the sandbox is gone (404 = gone; unknown id → look up by ROCK id). */
rk_status os_lc_destroy(struct os_inst *inst, struct rk_call *call,
                        const struct rk_sandbox_ref *ref)
{
    if (ref->upstream_id) {
        rk_status s = lc_kill(inst, call, ref->upstream_id);
        os_ep_invalidate(inst, ref->upstream_id, -1);
        return s;
    }
    struct lc_found *f = NULL;
    size_t n = 0;
    rk_status s = lc_find(inst, call, ref->sandbox_id, "kill", &f, &n);
    for (size_t i = 0; s == RK_OK && i < n; i++) {
        s = lc_kill(inst, call, f[i].id);
        os_ep_invalidate(inst, f[i].id, -1);
    }
    found_free(f, n);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Endpoint discovery and cache                                              */
/* ------------------------------------------------------------------------ */

/** Drop cached endpoints of a sandbox (port -1 = every port). */
void os_ep_invalidate(struct os_inst *inst, const char *osid, int port)
{
    pthread_mutex_lock(&inst->ep_lock);
    struct os_ep_entry **pp = &inst->ep_head;
    while (*pp) {
        struct os_ep_entry *e = *pp;
        if (strcmp(e->osid, osid) == 0 && (port < 0 || e->port == port)) {
            *pp = e->next;
            os_ep_entry_free(e);
            inst->ep_count--;
        } else {
            pp = &e->next;
        }
    }
    pthread_mutex_unlock(&inst->ep_lock);
}

/** Copy a cache entry's data into the call arena. */
static int ep_to_arena(struct os_inst *inst, struct rk_call *call, const char *base,
                       const struct rk_kv *hdrs, size_t n, struct os_endpoint *out)
{
    const struct rk_host *h = inst->host;
    out->base = h->arena_strdup(call, base);
    out->headers = n ? h->arena_alloc(call, n * sizeof(struct rk_kv)) : NULL;
    out->headers_len = n;
    if (!out->base || (n && !out->headers))
        return 0;
    for (size_t i = 0; i < n; i++) {
        out->headers[i].key = h->arena_strdup(call, hdrs[i].key);
        out->headers[i].value = h->arena_strdup(call, hdrs[i].value);
        if (!out->headers[i].key || !out->headers[i].value)
            return 0;
    }
    return 1;
}

/** Look up a live cache entry; 1 on hit. */
static int ep_cache_get(struct os_inst *inst, struct rk_call *call, const char *osid, int port,
                        struct os_endpoint *out)
{
    int hit = 0;
    int64_t now = inst->host->now_ms();
    pthread_mutex_lock(&inst->ep_lock);
    for (struct os_ep_entry *e = inst->ep_head; e; e = e->next) {
        if (e->port == port && strcmp(e->osid, osid) == 0) {
            if (e->expires_ms > now)
                hit = ep_to_arena(inst, call, e->base, e->headers, e->headers_len, out);
            break;
        }
    }
    pthread_mutex_unlock(&inst->ep_lock);
    return hit;
}

/** Insert or replace a cache entry (best effort; failures only skip caching). */
static void ep_cache_put(struct os_inst *inst, const char *osid, int port,
                         const struct os_endpoint *ep)
{
    struct os_ep_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return;
    e->osid = strdup(osid);
    e->port = port;
    e->base = strdup(ep->base);
    e->expires_ms = inst->host->now_ms() + OS_ENDPOINT_TTL_MS;
    e->headers = ep->headers_len ? calloc(ep->headers_len, sizeof(struct rk_kv)) : NULL;
    int ok = e->osid && e->base && (!ep->headers_len || e->headers);
    for (size_t i = 0; ok && i < ep->headers_len; i++) {
        e->headers[i].key = strdup(ep->headers[i].key);
        e->headers[i].value = strdup(ep->headers[i].value);
        e->headers_len = i + 1;
        ok = e->headers[i].key && e->headers[i].value;
    }
    if (!ok) {
        os_ep_entry_free(e);
        return;
    }
    os_ep_invalidate(inst, osid, port);
    pthread_mutex_lock(&inst->ep_lock);
    e->next = inst->ep_head;
    inst->ep_head = e;
    inst->ep_count++;
    if (inst->ep_count > OS_ENDPOINT_CACHE_MAX) {
        /* Drop the oldest entries (the list is newest first). */
        struct os_ep_entry *p = inst->ep_head;
        for (size_t i = 1; p && i < OS_ENDPOINT_CACHE_MAX / 2; i++)
            p = p->next;
        if (p) {
            struct os_ep_entry *rest = p->next;
            p->next = NULL;
            while (rest) {
                struct os_ep_entry *nx = rest->next;
                os_ep_entry_free(rest);
                inst->ep_count--;
                rest = nx;
            }
        }
    }
    pthread_mutex_unlock(&inst->ep_lock);
}

/** Resolve GET /sandboxes/{id}/endpoints/{port}?use_server_proxy=<cfg> (cached when allowed). */
rk_status os_lc_endpoint(struct os_inst *inst, struct rk_call *call, const char *osid, int port,
                         int use_cache, const char *op, struct os_endpoint *out)
{
    const struct rk_host *h = inst->host;
    memset(out, 0, sizeof(*out));
    if (use_cache && ep_cache_get(inst, call, osid, port, out)) {
        out->from_cache = 1;
        return RK_OK;
    }
    char *enc = os_escape(osid);
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/sandboxes/%s/endpoints/%d?use_server_proxy=%s", enc ? enc : "", port,
                 inst->use_server_proxy ? "true" : "false");
    free(enc);
    char *path = os_sb_take(&sb);
    struct os_xfer x;
    rk_status s = path ? lc_xfer(&x, inst, call, "GET", path) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK)
        s = os_xfer_perform(&x);
    if (s != RK_OK) {
        s = xfer_fail(
            inst, call,
            (s == RK_E_CANCELLED || s == RK_E_TIMEOUT || s == RK_E_NOMEM) ? s : RK_E_UNAVAILABLE,
            op, osid, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    if (x.status != 200) {
        s = http_fail(inst, call, RK_E_UPSTREAM, op, osid, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    json_object *o = body_json(&x), *hdrs = NULL;
    os_xfer_cleanup(&x);
    const char *endpoint = jstr(o, "endpoint");
    if (!endpoint || !*endpoint) {
        json_object_put(o);
        return h->set_error(call, RK_E_UPSTREAM,
                            "opensandbox %s failed for %s: endpoint response without endpoint", op,
                            osid);
    }
    char *base = os_join_url(inst->protocol, endpoint, NULL);
    size_t n = 0;
    struct rk_kv tmp[64];
    if (json_object_object_get_ex(o, "headers", &hdrs) &&
        json_object_is_type(hdrs, json_type_object)) {
        json_object_object_foreach(hdrs, k, v)
        {
            if (n < sizeof(tmp) / sizeof(tmp[0]) && json_object_is_type(v, json_type_string))
                tmp[n++] = (struct rk_kv){k, json_object_get_string(v)};
        }
    }
    int ok = base && ep_to_arena(inst, call, base, tmp, n, out);
    free(base);
    json_object_put(o);
    if (!ok)
        return h->set_error(call, RK_E_NOMEM, "opensandbox %s failed for %s: out of memory", op,
                            osid);
    ep_cache_put(inst, osid, port, out);
    return RK_OK;
}

/** The sandbox's upstream id, or the B52 refusal when it is not recorded. */
rk_status os_need_upstream_id(struct os_inst *inst, struct rk_call *call,
                              const struct rk_sandbox_ref *ref, const char **osid)
{
    if (ref->upstream_id && *ref->upstream_id) {
        *osid = ref->upstream_id;
        return RK_OK;
    }
    return inst->host->set_error(call, RK_E_INVALID,
                                 "OpenSandbox sandbox metadata is missing opensandbox_id");
}

/** Where the core relays traffic for a sandbox port: endpoint URL plus its headers. */
rk_status os_proxy_target(struct os_inst *inst, struct rk_call *call,
                          const struct rk_sandbox_ref *ref, int port, enum rk_proxy_kind kind,
                          struct rk_proxy_target *out)
{
    const char *osid = NULL;
    if (kind == RK_PROXY_TCP)
        return inst->host->set_error(call, RK_E_UNSUPPORTED,
                                     "OpenSandbox backend does not support portforward in this "
                                     "release");
    if (port < 1 || port > 65535)
        return inst->host->set_error(call, RK_E_INVALID, "invalid port %d", port);
    rk_status s = os_proxy_check_port(inst, call, port);
    if (s != RK_OK)
        return s;
    s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    struct os_endpoint ep;
    s = os_lc_endpoint(inst, call, osid, port, 1, "get_endpoint", &ep);
    if (s != RK_OK)
        return s;
    out->base_url = ep.base;
    out->headers = ep.headers;
    out->headers_len = ep.headers_len;
    return os_proxy_mark_credentials(inst, call, out);
}

/**
 * ops.list: every sandbox this deployment created (those carrying the rock id in
 * metadata["rock_sandbox_id"], set at create), all pages of GET /sandboxes with
 * pageSize 200 (the maximum the server's list route accepts). RK_OK only after a
 * complete pass; a truncated pass (more than OS_RECONCILE_MAX_PAGES pages) is an error
 * so the reconciler never takes a partial list as "the others vanished".
 */
rk_status os_lc_list(struct os_inst *inst, struct rk_call *call, rk_list_fn fn, void *ctx)
{
    const struct rk_host *h = inst->host;
    struct os_sb sb = {0};
    for (int page = 1; page <= OS_RECONCILE_MAX_PAGES; page++) {
        os_sb_printf(&sb, "/sandboxes?page=%d&pageSize=200", page);
        char *path = os_sb_take(&sb);
        struct os_xfer x;
        rk_status rs = path ? lc_xfer(&x, inst, call, "GET", path) : RK_E_NOMEM;
        free(path);
        if (rs == RK_OK)
            rs = os_xfer_perform(&x);
        if (rs != RK_OK) {
            rs = xfer_fail(inst, call, rs == RK_E_TOO_LARGE ? RK_E_UPSTREAM : rs, "list", "*", &x);
            os_xfer_cleanup(&x);
            return rs;
        }
        if (x.status != 200) {
            rs = http_fail(inst, call, RK_E_UPSTREAM, "list", "*", &x);
            os_xfer_cleanup(&x);
            return rs;
        }
        json_object *o = body_json(&x), *items = NULL, *pg = NULL, *v;
        os_xfer_cleanup(&x);
        if (!o || !json_object_object_get_ex(o, "items", &items) ||
            !json_object_is_type(items, json_type_array)) {
            json_object_put(o);
            return h->set_error(call, RK_E_UPSTREAM,
                                "opensandbox list failed: malformed list response");
        }
        size_t cnt = json_object_array_length(items);
        for (size_t i = 0; i < cnt; i++) {
            json_object *it = json_object_array_get_idx(items, i), *st = NULL, *md = NULL;
            const char *id = jstr(it, "id");
            const char *rock_id = NULL;
            if (json_object_object_get_ex(it, "metadata", &md))
                rock_id = jstr(md, OS_META_ROCK_ID);
            if (!id || !rock_id || !*rock_id)
                continue; /* not created by rock-admin */
            json_object_object_get_ex(it, "status", &st);
            char *reason = status_reason(st);
            struct rk_status_info info = {0};
            rk_status fs = fill_status(inst, call, jstr(st, "state"), reason, &info);
            free(reason);
            if (fs != RK_OK) {
                json_object_put(o);
                return fs;
            }
            info.upstream_id = id;
            fn(ctx, rock_id, &info);
        }
        int more = 0;
        if (json_object_object_get_ex(o, "pagination", &pg) &&
            json_object_object_get_ex(pg, "hasNextPage", &v))
            more = json_object_get_boolean(v);
        json_object_put(o);
        if (!more)
            return RK_OK;
    }
    return h->set_error(call, RK_E_UPSTREAM, "opensandbox list failed: more than %d pages",
                        OS_RECONCILE_MAX_PAGES);
}

/* ------------------------------------------------------------------------ */
/* Shared lifecycle helpers for os_pause.c / os_snapshot.c / os_renew.c      */
/* ------------------------------------------------------------------------ */

/** Perform one lifecycle request (JSON body optional); x must be cleaned up. */
rk_status os_lc_request(struct os_inst *inst, struct rk_call *call, const char *method,
                        const char *path, const char *json_body, struct os_xfer *x)
{
    rk_status s = lc_xfer(x, inst, call, method, path);
    if (s == RK_OK && json_body)
        os_xfer_json(x, json_body);
    if (s == RK_OK && !strcmp(method, "POST")) {
        /* Not idempotent (snapshot, restore): no silent re-send by libcurl on
         * a pooled connection that died (see os_lc_create). */
        curl_easy_setopt(x->curl, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(x->curl, CURLOPT_FORBID_REUSE, 1L);
    }
    if (s == RK_OK)
        s = os_xfer_perform(x);
    return s;
}

/** The buffered response as a JSON object (new reference) or NULL. */
json_object *os_lc_body_json(const struct os_xfer *x)
{
    return body_json(x);
}

/** String member of a JSON object or NULL. */
const char *os_lc_jstr(json_object *o, const char *key)
{
    return jstr(o, key);
}

/** Record the failure of a lifecycle request: no answer (s != RK_OK) or a non-2xx one. */
rk_status os_lc_fail(struct os_inst *inst, struct rk_call *call, rk_status s, rk_status code,
                     const char *op, const char *osid, const struct os_xfer *x)
{
    if (s != RK_OK)
        return xfer_fail(
            inst, call,
            (s == RK_E_CANCELLED || s == RK_E_TIMEOUT || s == RK_E_NOMEM) ? s : RK_E_UNAVAILABLE,
            op, osid, x);
    return http_fail(inst, call, code, op, osid, x);
}
