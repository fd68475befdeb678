/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /sandboxes and POST /sandboxes/batch (§5.17-5.18): stored metadata
 * only, never a backend call. An unfiltered list reads one page through the
 * store's list index; a filtered one reads the active records and filters
 * them by exact string equality.
 */
#include <stdlib.h>
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "base/app.h"
#include "base/util.h"
#include "domain/record.h"
#include "domain/status_text.h"
#include "host/host.h"
#include "store/store.h"

/* Most sandboxes one list page or batch may name. */
#define MAX_BATCH 2000

/* The exact-match filters of a list query (every argument but the paging). */
struct filter_ctx {
    struct rk_call *call;
    const char **keys;
    const char **vals;
    size_t n;
};

/* rk_req_query_each: keep one filter argument. */
static void collect_filter(void *ctx, const char *k, const char *v)
{
    struct filter_ctx *f = ctx;
    if (!strcmp(k, "page") || !strcmp(k, "page_size") || f->n >= 32)
        return;
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->keys[i], k)) {
            f->vals[i] = rk_arena_strdup(f->call, v); /* last value wins */
            return;
        }
    f->keys[f->n] = rk_arena_strdup(f->call, k);
    f->vals[f->n] = rk_arena_strdup(f->call, v);
    f->n++;
}

/* Exact string equality on stored string fields; numbers never match. */
static int record_matches(json_object *rec, const struct filter_ctx *f)
{
    for (size_t i = 0; i < f->n; i++) {
        const char *s = rk_rec_str(rec, f->keys[i]);
        if (!s || strcmp(s, f->vals[i]) != 0)
            return 0;
    }
    return 1;
}

/* qsort: list order (create_time, then id). */
static int by_create_time(const void *a, const void *b)
{
    json_object *ra = *(json_object *const *)a, *rb = *(json_object *const *)b;
    const char *ta = rk_rec_str(ra, "create_time"), *tb = rk_rec_str(rb, "create_time");
    int c = strcmp(ta ? ta : "", tb ? tb : "");
    if (c)
        return c;
    return strcmp(rk_rec_str(ra, "sandbox_id") ? rk_rec_str(ra, "sandbox_id") : "",
                  rk_rec_str(rb, "sandbox_id") ? rk_rec_str(rb, "sandbox_id") : "");
}

/* The records of ids (out[i] NULL for unknown ids), or NULL after a store
 * error was replied. The array is the caller's to free. */
static json_object **read_records(struct rk_req *r, const char *const *ids, size_t n)
{
    char err[RK_STORE_ERRLEN];
    json_object **recs = calloc(n ? n : 1, sizeof *recs);
    if (!recs)
        abort();
    if (n && rk_store_get_many(r->app->store, ids, n, recs, err, sizeof err) != RK_STORE_OK) {
        free(recs);
        rk_reply_store_error(r, err);
        return NULL;
    }
    return recs;
}

/* Load every active record (stored metadata only; no backend call). */
static int load_active(struct rk_req *r, json_object ***recs_out, size_t *n_out)
{
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    if (rk_store_list_active(r->app->store, &ids, &n, err, sizeof err) != RK_STORE_OK) {
        rk_reply_store_error(r, err);
        return -1;
    }
    json_object **recs = read_records(r, (const char *const *)ids, n);
    rk_store_free_ids(ids, n);
    if (!recs)
        return -1;
    *recs_out = recs;
    *n_out = n;
    return 0;
}

/* Append the status of rec to the array being written in b, after a comma unless it is the
 * array's first (*count). A list item also names the encrypted authorization, which the
 * list never shows. -1 when memory ran out. */
static int append_status(struct rk_buf *b, json_object *rec, int list_item, size_t *count)
{
    static const char auth[] = ",\"rock_authorization_encrypted\":null}";
    if ((*count)++ && rk_buf_append(b, ",", 1) != 0)
        return -1;
    struct rk_rec_src src = rk_src_tree(rec);
    if (rk_rec_status_text(&src, rk_rec_state(rec), 1, b) != 0)
        return -1;
    if (!list_item)
        return 0;
    b->len--; /* the status's closing brace */
    return rk_buf_append(b, auth, sizeof auth - 1);
}

/* Reply the list page recs[first, last) (inactive or unknown ones skipped)
 * out of total, then release all n records. */
static void reply_page(struct rk_req *r, json_object **recs, size_t n, size_t first, size_t last,
                       size_t total, int64_t page, int64_t page_size)
{
    struct rk_buf b = {0};
    size_t count = 0;
    static const char items[] = ",\"items\":[";
    int ok = rk_result_head_text(&b) == 0 && rk_buf_append(&b, items, sizeof items - 1) == 0;
    for (size_t i = first; ok && i < last && i < n; i++)
        if (recs[i] && rk_state_is_active(rk_rec_state(recs[i])))
            ok = append_status(&b, recs[i], 1, &count) == 0;
    ok = ok && rk_buf_printf(&b, "],\"total\":%zu,\"has_more\":%s}", total,
                             page * page_size < (int64_t)total ? "true" : "false") == 0;
    for (size_t i = 0; i < n; i++)
        json_object_put(recs[i]);
    free(recs);
    if (ok)
        rk_reply_ok_text(r, b.data, b.len);
    else
        rk_reply_error(r, RK_E_NOMEM, "out of memory writing the list");
    rk_buf_free(&b);
}

/* Unfiltered list: one page of ids in list order from the store's index, then
 * only those records (cost O(page), not O(all sandboxes)). */
static void list_page(struct rk_req *r, int64_t page, int64_t page_size)
{
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0, total = 0;
    size_t first = (size_t)((page - 1) * page_size);
    if (rk_store_list_page(r->app->store, first, (size_t)page_size, &ids, &n, &total, err,
                           sizeof err) != RK_STORE_OK) {
        rk_reply_store_error(r, err);
        return;
    }
    json_object **recs = read_records(r, (const char *const *)ids, n);
    rk_store_free_ids(ids, n);
    if (!recs)
        return;
    reply_page(r, recs, n, 0, n, total, page, page_size);
}

/* GET /sandboxes (§5.17): page, page_size and exact-match filters. */
void rk_route_list(struct rk_req *r)
{
    struct rk_route_path p;
    rk_path_query(&p, r);
    int64_t page = rk_sat_i64(rk_v_qint(&p.v, r, "page", 1), INT64_MIN, INT32_MAX);
    int64_t page_size = rk_v_qint(&p.v, r, "page_size", 500);
    int valid = rk_path_valid(&p) == 0;
    rk_path_end(&p);
    if (!valid)
        return;
    if (page < 1 || page_size < 1) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call,
                                       "page parameter invalid, page is %lld, page_size is %lld",
                                       (long long)page, (long long)page_size));
        return;
    }
    if (page_size > MAX_BATCH) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call, "page_size exceeds maximum %d", MAX_BATCH));
        return;
    }
    const char *keys[32], *vals[32];
    struct filter_ctx f = {r->call, keys, vals, 0};
    rk_req_query_each(r, collect_filter, &f);
    if (f.n == 0) { /* no filter: read one page through the store's list index */
        list_page(r, page, page_size);
        return;
    }

    json_object **recs;
    size_t n;
    if (load_active(r, &recs, &n) != 0)
        return;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (recs[i] && rk_state_is_active(rk_rec_state(recs[i])) && record_matches(recs[i], &f))
            recs[kept++] = recs[i];
        else
            json_object_put(recs[i]);
    }
    qsort(recs, kept, sizeof *recs, by_create_time);
    size_t first = (size_t)((page - 1) * page_size);
    reply_page(r, recs, kept, first, first + (size_t)page_size, kept, page, page_size);
}

/* POST /sandboxes/batch (§5.18): the statuses of the active ones among ids. */
void rk_route_batch(struct rk_req *r)
{
    struct rk_route_path p;
    rk_path_body(&p, r);
    json_object *ids = rk_v_strlist(&p.v, p.body, "sandbox_ids", RK_V_REQUIRED | RK_V_SANDBOX_ID);
    if (rk_path_valid(&p) != 0)
        goto out;
    size_t n = json_object_array_length(ids);
    if (n > MAX_BATCH) {
        rk_reply_error(
            r, RK_E_INVALID,
            rk_arena_printf(r->call, "sandbox_ids count too large, max count is %d", MAX_BATCH));
        goto out;
    }
    const char **idv = rk_arena_alloc(r->call, (n ? n : 1) * sizeof *idv);
    for (size_t i = 0; i < n; i++)
        idv[i] = json_object_get_string(json_object_array_get_idx(ids, i));
    json_object **recs = read_records(r, idv, n);
    if (!recs)
        goto out;
    struct rk_buf b = {0};
    size_t count = 0;
    static const char statuses[] = ",\"statuses\":[";
    int ok = rk_result_head_text(&b) == 0 && rk_buf_append(&b, statuses, sizeof statuses - 1) == 0;
    for (size_t i = 0; i < n; i++) {
        if (ok && recs[i] && rk_state_is_active(rk_rec_state(recs[i])))
            ok = append_status(&b, recs[i], 0, &count) == 0;
        json_object_put(recs[i]);
    }
    free(recs);
    if (ok && rk_buf_append(&b, "]}", 2) == 0)
        rk_reply_ok_text(r, b.data, b.len);
    else
        rk_reply_error(r, RK_E_NOMEM, "out of memory writing the statuses");
    rk_buf_free(&b);
out:
    rk_path_end(&p);
}
