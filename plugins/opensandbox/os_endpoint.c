/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_endpoint.c
 * @brief Endpoint discovery (GET /sandboxes/{id}/endpoints/{port}) and its short
 *        per-instance cache, for execd and for the service proxy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "os_internal.h"

/* One sandbox whose execd answered: "<osid>@<since>" and when that was noted. */
struct os_ready_entry {
    struct os_ready_entry *next;
    int64_t noted_ms;
    char key[];
};

/** Free one cache entry. */
static void ep_entry_free(struct os_ep_entry *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->headers_len; i++) {
        free((char *)e->headers[i].key);
        free((char *)e->headers[i].value);
    }
    free(e->headers);
    free(e->osid);
    free(e->base);
    free(e);
}

/** Set up the instance's (empty) endpoint cache; 0 on success. */
int os_ep_cache_init(struct os_inst *inst)
{
    inst->ep_head = NULL;
    inst->ep_count = 0;
    inst->ready_tab = NULL;
    inst->ready_count = 0;
    inst->ready_pruned_ms = 0;
    return pthread_mutex_init(&inst->ep_lock, NULL) == 0 ? 0 : -1;
}

/** Drop every cached endpoint and release the cache (after the last request). */
void os_ep_cache_free(struct os_inst *inst)
{
    struct os_ep_entry *e = inst->ep_head;
    while (e) {
        struct os_ep_entry *n = e->next;
        ep_entry_free(e);
        e = n;
    }
    inst->ep_head = NULL;
    inst->ep_count = 0;
    for (size_t b = 0; inst->ready_tab && b < OS_READY_BUCKETS; b++) {
        struct os_ready_entry *r = inst->ready_tab[b];
        while (r) {
            struct os_ready_entry *n = r->next;
            free(r);
            r = n;
        }
    }
    free(inst->ready_tab);
    inst->ready_tab = NULL;
    inst->ready_count = 0;
    pthread_mutex_destroy(&inst->ep_lock);
}

/** Drop cached endpoints of a sandbox (port -1 = every port). */
void os_ep_invalidate(struct os_inst *inst, const char *osid, int port)
{
    pthread_mutex_lock(&inst->ep_lock);
    struct os_ep_entry **pp = &inst->ep_head;
    while (*pp) {
        struct os_ep_entry *e = *pp;
        if (strcmp(e->osid, osid) == 0 && (port < 0 || e->port == port)) {
            *pp = e->next;
            ep_entry_free(e);
            inst->ep_count--;
        } else {
            pp = &e->next;
        }
    }
    pthread_mutex_unlock(&inst->ep_lock);
}

/* The set key of osid and since; 0 when it does not fit (then never known). */
static int ready_key(char out[OS_READY_KEY_MAX], const char *osid, const char *since)
{
    int n = snprintf(out, OS_READY_KEY_MAX, "%s@%s", osid, since ? since : "");
    return n > 0 && n < OS_READY_KEY_MAX;
}

/* The bucket of a key (FNV-1a). */
static size_t ready_bucket(const char *k)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)k; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % OS_READY_BUCKETS;
}

/* The entry of key k or NULL (caller holds ep_lock). */
static struct os_ready_entry *ready_find_locked(struct os_inst *inst, const char *k)
{
    if (!inst->ready_tab)
        return NULL;
    for (struct os_ready_entry *r = inst->ready_tab[ready_bucket(k)]; r; r = r->next)
        if (strcmp(r->key, k) == 0)
            return r;
    return NULL;
}

/* Drop the entries noted more than OS_READY_WINDOW_S ago: their transition is older still, so
 * they are never asked for again (caller holds ep_lock). */
static void ready_prune_locked(struct os_inst *inst, int64_t now)
{
    inst->ready_pruned_ms = now;
    for (size_t b = 0; b < OS_READY_BUCKETS; b++) {
        struct os_ready_entry **pp = &inst->ready_tab[b];
        while (*pp) {
            struct os_ready_entry *r = *pp;
            if (now - r->noted_ms > (int64_t)OS_READY_WINDOW_S * 1000) {
                *pp = r->next;
                free(r);
                inst->ready_count--;
            } else {
                pp = &r->next;
            }
        }
    }
}

int os_ep_ready_known(struct os_inst *inst, const char *osid, const char *since)
{
    char k[OS_READY_KEY_MAX];
    if (!ready_key(k, osid, since))
        return 0;
    pthread_mutex_lock(&inst->ep_lock);
    int found = ready_find_locked(inst, k) != NULL;
    pthread_mutex_unlock(&inst->ep_lock);
    return found;
}

void os_ep_ready_note(struct os_inst *inst, const char *osid, const char *since)
{
    char k[OS_READY_KEY_MAX];
    if (!ready_key(k, osid, since))
        return;
    int64_t now = inst->host->now_ms();
    pthread_mutex_lock(&inst->ep_lock);
    if (!inst->ready_tab)
        inst->ready_tab = calloc(OS_READY_BUCKETS, sizeof *inst->ready_tab);
    if (inst->ready_tab && !ready_find_locked(inst, k)) {
        if (inst->ready_count >= OS_READY_MAX ||
            now - inst->ready_pruned_ms > (int64_t)OS_READY_WINDOW_S * 1000 / 4)
            ready_prune_locked(inst, now);
        size_t len = strlen(k);
        struct os_ready_entry *r =
            inst->ready_count < OS_READY_MAX ? malloc(sizeof *r + len + 1) : NULL;
        if (r) { /* full or out of memory: the sandbox is pinged again next time */
            memcpy(r->key, k, len + 1);
            r->noted_ms = now;
            size_t b = ready_bucket(k);
            r->next = inst->ready_tab[b];
            inst->ready_tab[b] = r;
            inst->ready_count++;
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
        ep_entry_free(e);
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
                ep_entry_free(rest);
                inst->ep_count--;
                rest = nx;
            }
        }
    }
    pthread_mutex_unlock(&inst->ep_lock);
}

/** The lifecycle path that resolves osid's port:
 * /sandboxes/{id}/endpoints/{port}?use_server_proxy=<cfg> (malloc'd; NULL when out of memory). */
char *os_ep_path(const struct os_inst *inst, const char *osid, int port)
{
    char *enc = os_escape(osid);
    if (!enc)
        return NULL;
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/sandboxes/%s/endpoints/%d?use_server_proxy=%s", enc, port,
                 inst->use_server_proxy ? "true" : "false");
    free(enc);
    return os_sb_take(&sb);
}

/** Read an endpoint reply o into *out: out->base is set to a malloc'd URL, which is also left in
 *  *base for the caller to free, and out->headers to hdrs (room for max) pointing into o. The
 *  endpoint is cached. 1, 0 when the reply names no endpoint, -1 when out of memory. */
int os_ep_from_reply(struct os_inst *inst, const char *osid, int port, struct json_object *o,
                     struct os_endpoint *out, struct rk_kv *hdrs, size_t max, char **base)
{
    memset(out, 0, sizeof(*out));
    *base = NULL;
    const char *endpoint = os_lc_jstr(o, "endpoint");
    if (!endpoint || !*endpoint)
        return 0;
    *base = os_join_url(inst->protocol, endpoint, NULL);
    if (!*base)
        return -1;
    size_t n = 0;
    json_object *jh = NULL;
    if (json_object_object_get_ex(o, "headers", &jh) && json_object_is_type(jh, json_type_object)) {
        json_object_object_foreach(jh, k, v)
        {
            if (n < max && json_object_is_type(v, json_type_string))
                hdrs[n++] = (struct rk_kv){k, json_object_get_string(v)};
        }
    }
    out->base = *base;
    out->headers = n ? hdrs : NULL;
    out->headers_len = n;
    ep_cache_put(inst, osid, port, out);
    return 1;
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
    char *path = os_ep_path(inst, osid, port);
    struct os_xfer x;
    rk_status s = path ? os_lc_xfer(&x, inst, call, "GET", path) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK)
        s = os_xfer_perform(&x);
    if (s != RK_OK) {
        s = os_lc_xfer_fail(
            inst, call,
            (s == RK_E_CANCELLED || s == RK_E_TIMEOUT || s == RK_E_NOMEM) ? s : RK_E_UNAVAILABLE,
            op, osid, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    if (x.status != 200) {
        s = os_lc_http_fail(inst, call, RK_E_UPSTREAM, op, osid, &x);
        os_xfer_cleanup(&x);
        return s;
    }
    json_object *o = os_lc_body_json(&x);
    os_xfer_cleanup(&x);
    struct rk_kv tmp[OS_ENDPOINT_HEADERS_MAX];
    struct os_endpoint parsed;
    char *base = NULL;
    int got = os_ep_from_reply(inst, osid, port, o, &parsed, tmp, OS_ENDPOINT_HEADERS_MAX, &base);
    int ok =
        got == 1 && ep_to_arena(inst, call, parsed.base, parsed.headers, parsed.headers_len, out);
    free(base);
    json_object_put(o);
    if (got == 0)
        return h->set_error(call, RK_E_UPSTREAM,
                            "opensandbox %s failed for %s: endpoint response without endpoint", op,
                            osid);
    if (!ok)
        return h->set_error(call, RK_E_NOMEM, "opensandbox %s failed for %s: out of memory", op,
                            osid);
    return RK_OK;
}
