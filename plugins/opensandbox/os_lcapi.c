/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_lcapi.c
 * @brief The lifecycle server's client: request composition ({protocol}://{endpoint}/v1...,
 *        the API key), JSON replies, list pages (read in place where they allow it), failure
 *        texts and the sandbox paths, shared by every file that talks to the lifecycle server
 *        (os_endpoint.c, os_lifecycle.c, os_renew.c, os_pause.c, os_snapshot.c).
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "os_internal.h"

/** Prepare a lifecycle request to {protocol}://{endpoint}/v1{path}. */
rk_status os_lc_xfer(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
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
json_object *os_lc_body_json(const struct os_xfer *x)
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
const char *os_lc_jstr(json_object *o, const char *key)
{
    json_object *v;
    if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
        return json_object_get_string(v);
    return NULL;
}

char *os_lc_reason_text(const char *reason, const char *message)
{
    struct os_sb sb = {0};
    if (reason && message)
        os_sb_printf(&sb, "%s: %s", reason, message);
    else if (reason || message)
        os_sb_puts(&sb, reason ? reason : message);
    else
        return NULL;
    return os_sb_take(&sb);
}

/* ---- list pages ----------------------------------------------------------------------------
 * A reconciler pass reads every page of GET /sandboxes (200 sandboxes each) on every pass: a
 * json-c tree of each page was most of what the pass cost the admin in a create burst. The
 * lifecycle server writes compact JSON (FastAPI's JSONResponse: no whitespace, UTF-8 as it
 * is), which librkutil's scanner reads in place; a page it refuses (\u escapes, whitespace,
 * repeated names, a hasNextPage that is not a boolean: what json-c would read its own way) is
 * parsed with json-c, so both forms give the same items. */

/** Members of a page, an item, its metadata or status the scanner locates (the scanner refuses
 *  nested objects of more anyway). */
#define PAGE_MEMBERS_MAX 32

/* Open pg on the scanned page; -1 when the scanner does not take it. */
static int page_scan(struct os_lc_page *pg, const char *body, size_t len)
{
    struct rku_json_member m[PAGE_MEMBERS_MAX];
    int n = rku_json_scan_object(body, len, m, PAGE_MEMBERS_MAX);
    if (n < 0)
        return -1;
    const struct rku_json_span *items = rku_json_member_get(m, (size_t)n, "items");
    if (!items || items->kind != RKU_JSON_ARRAY)
        return -1; /* not a list page: json-c says so the same way */
    const struct rku_json_span *pag = rku_json_member_get(m, (size_t)n, "pagination");
    pg->more = 0;
    if (pag && pag->kind == RKU_JSON_OBJECT) {
        struct rku_json_member pm[PAGE_MEMBERS_MAX];
        int pn = rku_json_scan_object(pag->p, pag->n, pm, PAGE_MEMBERS_MAX);
        const struct rku_json_span *v =
            pn < 0 ? NULL : rku_json_member_get(pm, (size_t)pn, "hasNextPage");
        const struct rku_json_span *tp =
            pn < 0 ? NULL : rku_json_member_get(pm, (size_t)pn, "totalPages");
        if (pn < 0 || (v && v->kind != RKU_JSON_BOOL) || (tp && tp->kind != RKU_JSON_INT))
            return -1; /* json-c converts other types its own way */
        pg->more = v && v->p[0] == 't';
        int64_t total = tp ? rku_json_int(tp) : 0;
        pg->total_pages = total > 0 && total <= 1000000 ? (long)total : 0;
    }
    pg->items = *items;
    pg->scanned = 1;
    return 0;
}

int os_lc_page_open(struct os_lc_page *pg, const char *body, size_t len, const char *meta_key)
{
    memset(pg, 0, sizeof *pg);
    pg->meta_key = meta_key;
    if (body && page_scan(pg, body, len) == 0)
        return 0;
    struct os_xfer x = {.body = (char *)body, .body_len = len};
    json_object *o = os_lc_body_json(&x), *items = NULL, *pag = NULL, *v;
    if (!o || !json_object_object_get_ex(o, "items", &items) ||
        !json_object_is_type(items, json_type_array)) {
        json_object_put(o);
        return -1;
    }
    if (json_object_object_get_ex(o, "pagination", &pag) &&
        json_object_object_get_ex(pag, "hasNextPage", &v))
        pg->more = json_object_get_boolean(v);
    if (json_object_object_get_ex(pag, "totalPages", &v) && json_object_is_type(v, json_type_int)) {
        int64_t total = json_object_get_int64(v);
        pg->total_pages = total > 0 && total <= 1000000 ? (long)total : 0;
    }
    pg->tree = o;
    pg->arr = items;
    pg->n = json_object_array_length(items);
    return 0;
}

/* The string member key of the scanned object members m[0..n), decoded into the scratch at
 * *used, or NULL. */
static const char *scan_str(struct os_lc_page *pg, const struct rku_json_member *m, int n,
                            const char *key, size_t *used)
{
    const struct rku_json_span *v = n > 0 ? rku_json_member_get(m, (size_t)n, key) : NULL;
    if (!v || v->kind != RKU_JSON_STRING)
        return NULL;
    char *out = rku_json_decode(v, pg->scratch + *used, pg->cap - *used);
    if (out)
        *used += strlen(out) + 1;
    return out;
}

/* The members of the scanned object value v (of an item) into m, or 0 when v is none. */
static int scan_sub(const struct rku_json_span *v, struct rku_json_member *m)
{
    if (!v || v->kind != RKU_JSON_OBJECT)
        return 0;
    int n = rku_json_scan_object(v->p, v->n, m, PAGE_MEMBERS_MAX);
    return n < 0 ? 0 : n; /* cannot fail: the page was scanned whole */
}

/* The next scanned item: 1, 0 after the last one, -1 out of memory. */
static int page_next_scanned(struct os_lc_page *pg, struct os_lc_item *it)
{
    struct rku_json_span el;
    if (rku_json_array_next(&pg->items, &pg->at, &el) != 1)
        return 0;
    if (el.kind != RKU_JSON_OBJECT)
        return 1;             /* an item with nothing in it, as json-c reads one */
    if (el.n + 8 > pg->cap) { /* the decoded strings of one item fit in its text */
        char *nb = realloc(pg->scratch, el.n + 8);
        if (!nb)
            return -1;
        pg->scratch = nb;
        pg->cap = el.n + 8;
    }
    struct rku_json_member m[PAGE_MEMBERS_MAX], md[PAGE_MEMBERS_MAX], st[PAGE_MEMBERS_MAX];
    int n = scan_sub(&el, m);
    int nmd = scan_sub(rku_json_member_get(m, (size_t)n, "metadata"), md);
    int nst = scan_sub(rku_json_member_get(m, (size_t)n, "status"), st);
    size_t used = 0;
    it->id = scan_str(pg, m, n, "id", &used);
    it->rock_id = scan_str(pg, md, nmd, pg->meta_key, &used);
    it->state = scan_str(pg, st, nst, "state", &used);
    it->reason = scan_str(pg, st, nst, "reason", &used);
    it->message = scan_str(pg, st, nst, "message", &used);
    it->since = scan_str(pg, st, nst, "lastTransitionAt", &used);
    return 1;
}

int os_lc_page_next(struct os_lc_page *pg, struct os_lc_item *it)
{
    memset(it, 0, sizeof *it);
    if (pg->scanned)
        return page_next_scanned(pg, it);
    if (pg->i >= pg->n)
        return 0;
    json_object *o = json_object_array_get_idx(pg->arr, pg->i++), *md = NULL, *st = NULL;
    it->id = os_lc_jstr(o, "id");
    if (o && json_object_object_get_ex(o, "metadata", &md))
        it->rock_id = os_lc_jstr(md, pg->meta_key);
    if (o && json_object_object_get_ex(o, "status", &st)) {
        it->state = os_lc_jstr(st, "state");
        it->reason = os_lc_jstr(st, "reason");
        it->message = os_lc_jstr(st, "message");
        it->since = os_lc_jstr(st, "lastTransitionAt");
    }
    return 1;
}

void os_lc_page_close(struct os_lc_page *pg)
{
    json_object_put(pg->tree);
    free(pg->scratch);
    memset(pg, 0, sizeof *pg);
}

/** Record "opensandbox <op> failed for <osid>: <detail>" for a non-2xx answer. */
rk_status os_lc_http_fail(struct os_inst *inst, struct rk_call *call, rk_status code,
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
rk_status os_lc_xfer_fail(struct os_inst *inst, struct rk_call *call, rk_status s, const char *op,
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

/** Perform one lifecycle request (JSON body optional); x must be cleaned up. */
rk_status os_lc_request(struct os_inst *inst, struct rk_call *call, const char *method,
                        const char *path, const char *json_body, struct os_xfer *x)
{
    rk_status s = os_lc_xfer(x, inst, call, method, path);
    if (s == RK_OK && json_body)
        os_xfer_json(x, json_body);
    if (s == RK_OK && !strcmp(method, "POST"))
        os_xfer_send_once(x); /* not idempotent (snapshot, restore): sent once */
    if (s == RK_OK)
        s = os_xfer_perform(x);
    return s;
}

/** Record the failure of a lifecycle request: no answer (s != RK_OK) or a non-2xx one. */
rk_status os_lc_fail(struct os_inst *inst, struct rk_call *call, rk_status s, rk_status code,
                     const char *op, const char *osid, const struct os_xfer *x)
{
    if (s != RK_OK)
        return os_lc_xfer_fail(
            inst, call,
            (s == RK_E_CANCELLED || s == RK_E_TIMEOUT || s == RK_E_NOMEM) ? s : RK_E_UNAVAILABLE,
            op, osid, x);
    return os_lc_http_fail(inst, call, code, op, osid, x);
}

/** Path "/sandboxes/{osid}{suffix}" (malloc'd) or NULL. */
char *os_sbx_path(const char *osid, const char *suffix)
{
    char *enc = os_escape(osid);
    if (!enc)
        return NULL;
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/sandboxes/%s%s", enc, suffix);
    free(enc);
    return os_sb_take(&sb);
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
