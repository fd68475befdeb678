/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The status reads: GET /get_status, /is_alive (§5.2-5.4) and
 * /get_sandbox_statistics. They only read: with the reconciler the record
 * in the store is the answer (one round trip, idle touch included);
 * otherwise the plugin is asked and what it says is persisted in the record
 * (lifecycle.c). Taking over dead archive/restore jobs and clearing the
 * session mappings of vanished sandboxes are background work (reconciler.c,
 * sweeper.c), never a read's.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/route_path.h"
#include "api/routes.h"
#include "api/sandbox_ops.h"
#include "base/app.h"
#include "base/util.h"
#include "domain/activity.h"
#include "domain/dispatch.h"
#include "domain/reconciler.h"
#include "domain/record.h"
#include "domain/status_text.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "store/store.h"
#include "store/store_reader.h"

/* Where a record a status read answers from comes from, which decides what the read may do. */
enum read_origin {
    READ_ON_WORKER, /* the store's synchronous read on a worker: may renew the backend expiry */
    READ_IN_PLACE,  /* the in-process store's record, seen under its lock (it changes in place) */
    READ_BY_READER, /* the loop's store reader: the record's text (store_reader.h) */
};

/* A status read's answer: the status as JSON text (rk_rec_status_text, NUL-terminated) and
 * the two members is_alive answers with. */
struct status_answer {
    const char *json; /* NULL: no status (an error is recorded on the call) */
    size_t len;
    int alive;
    const char *host; /* the status's host_name */
    char *owned;      /* the memory of json and host unless a loop's rendered slot holds it */
};

static void answer_free(struct status_answer *a)
{
    free(a->owned);
    *a = (struct status_answer){0};
}

/* The status of rec written once into one allocation: the text, a NUL, the host_name. 0, or
 * -1 when memory ran out. */
static int render(struct rk_rec_src *rec, enum rk_state shown, int alive, char **mem, size_t *len)
{
    struct rk_buf b = {0};
    const char *host = rk_rec_status_host(rec);
    if (rk_buf_reserve(&b, 1024) != 0 || rk_rec_status_text(rec, shown, alive, &b) != 0 ||
        rk_buf_append(&b, "", 1) != 0 || rk_buf_append(&b, host, strlen(host)) != 0 || rec->oom) {
        rk_buf_free(&b);
        return -1;
    }
    *len = b.len - strlen(host) - 1;
    *mem = b.data;
    return 0;
}

/* A status answer of its own (a->owned) for rec. 0, or -1 when memory ran out. */
static int render_owned(struct rk_rec_src *rec, enum rk_state shown, int alive,
                        struct status_answer *a)
{
    char *mem;
    size_t len;
    if (render(rec, shown, alive, &mem, &len) != 0)
        return -1;
    *a = (struct status_answer){mem, len, alive, mem + len + 1, mem};
    return 0;
}

/* render_owned of a tree. */
static int render_tree(json_object *rec, enum rk_state shown, int alive, struct status_answer *a)
{
    struct rk_rec_src src = rk_src_tree(rec);
    return render_owned(&src, shown, alive, a);
}

/* Statuses one event loop rendered, by what they were rendered from, so that a poll whose
 * record did not change is answered without rendering it again:
 *   - a version of the in-process store's records: it names the record with its deadline, and
 *     the store never gives it to other content (rk_store_view_fn);
 *   - a record text of the loop's store reader, with its deadline: the slot keeps a copy, and
 *     the bytes decide.
 * Direct-mapped by version or by the id's hash. Per thread (only event loops fill one), freed
 * when the thread ends. */
#define RENDERED_SLOTS 64
/* The largest record text a slot keeps (as the reader's own memory): 64 x 4 KiB per loop. */
#define RENDERED_TEXT_MAX 4096
struct rendered {
    uint64_t version; /* the in-process store's version, or 0: */
    char *text;       /* the reader's record text */
    size_t text_len;
    int64_t expire;
    int has_expire;
    enum rk_state shown;
    int alive;
    char *mem; /* render()'s text, NUL, host_name; NULL: empty */
    size_t len;
};
static pthread_key_t rendered_key;
static pthread_once_t rendered_once = PTHREAD_ONCE_INIT;

static void rendered_free(void *p)
{
    struct rendered *c = p;
    for (size_t i = 0; i < RENDERED_SLOTS; i++) {
        free(c[i].text);
        free(c[i].mem);
    }
    free(c);
}

static void rendered_key_init(void)
{
    if (pthread_key_create(&rendered_key, rendered_free) != 0)
        abort();
}

/* 1 when slot sl holds the status of rec (a version when non-zero, else rec's text). */
static int rendered_hit(const struct rendered *sl, struct rk_rec_src *rec, uint64_t version,
                        enum rk_state shown, int alive)
{
    if (!sl->mem || sl->shown != shown || sl->alive != alive)
        return 0;
    if (version)
        return !sl->text && sl->version == version;
    return sl->text && sl->text_len == rec->len && sl->has_expire == rec->has_expire &&
           (!rec->has_expire || sl->expire == rec->expire_time) &&
           memcmp(sl->text, rec->text, rec->len) == 0;
}

/* The status of a version of the in-process store's records (version non-zero) or of a record
 * text of the store reader: rendered once per version or text on this thread. *a borrows the
 * slot's memory (a->owned NULL) until this thread renders again. 0, or -1 when memory ran
 * out. */
static int rendered_status(struct rk_rec_src *rec, const char *id, uint64_t version,
                           enum rk_state shown, int alive, struct status_answer *a)
{
    if (!version && rec->len > RENDERED_TEXT_MAX)
        return render_owned(rec, shown, alive, a);
    pthread_once(&rendered_once, rendered_key_init);
    struct rendered *c = pthread_getspecific(rendered_key);
    if (!c) {
        c = calloc(RENDERED_SLOTS, sizeof *c);
        if (!c || pthread_setspecific(rendered_key, c) != 0) {
            free(c);
            return render_owned(rec, shown, alive, a);
        }
    }
    struct rendered *sl = &c[(version ? version : rk_hash_str(id)) % RENDERED_SLOTS];
    if (!rendered_hit(sl, rec, version, shown, alive)) {
        char *mem, *text = NULL;
        size_t len;
        if (!version && !(text = malloc(rec->len ? rec->len : 1)))
            return -1;
        if (render(rec, shown, alive, &mem, &len) != 0) {
            free(text);
            return -1;
        }
        if (text)
            memcpy(text, rec->text, rec->len);
        free(sl->text);
        free(sl->mem);
        *sl = (struct rendered){version, text, rec->len, rec->expire_time, rec->has_expire, shown,
                                alive,   mem,  len};
    }
    *a = (struct status_answer){sl->mem, sl->len, alive, sl->mem + sl->len + 1, NULL};
    return 0;
}

/* What a record read with the idle touch says when the reconciler keeps the store current.
 * Only reads rec (the caller keeps it; *out shares nothing with it; answer_free releases it).
 * FS_ANSWERED: *st and *out are the answer (an error recorded on r->call); FS_ASK_BACKEND: no
 * recent pass vouches for the store (backend down, no elected admin yet); FS_NEEDS_WORKER: the
 * read must renew the backend expiry, a plugin call, and the read is not on a worker. Nothing
 * is recorded on r->call unless the answer is FS_ANSWERED. */
enum from_store { FS_ANSWERED, FS_ASK_BACKEND, FS_NEEDS_WORKER };
static enum from_store status_from_record(struct rk_req *r, const char *id, int include_all,
                                          rk_store_rc rc, struct rk_rec_src *rec, uint64_t version,
                                          const char *mark, const char *err,
                                          enum read_origin origin, rk_status *st,
                                          struct status_answer *out)
{
    struct rk_app *app = r->app;
    const struct rk_operator *desc = app->plugin->desc;
    *st = RK_OK;
    *out = (struct status_answer){0};
    if (rc == RK_STORE_ERROR) {
        *st = rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
        return FS_ANSWERED;
    }
    enum rk_state stored = rc == RK_STORE_OK ? rk_src_state(rec) : 0;
    if (rk_state_is_active(stored) && !rk_reconciler_mark_fresh(app, mark))
        return FS_ASK_BACKEND;
    if (rc == RK_STORE_NOT_FOUND || (!include_all && !rk_state_is_active(stored))) {
        *st = rk_call_set_error(r->call, RK_E_NOT_FOUND, "Sandbox %s not found", id);
        return FS_ANSWERED;
    }
    if (rk_state_is_active(stored)) {
        const char *tag = rk_src_backend(rec);
        if (!tag)
            *st = rk_call_set_error(r->call, RK_E_INVALID,
                                    "%s sandbox metadata is missing required backend",
                                    desc->display_name);
        else if (strcmp(tag, desc->backend_tag) != 0)
            *st = rk_call_set_error(r->call, RK_E_INVALID,
                                    "Sandbox backend %s conflicts with configured operator %s", tag,
                                    desc->name);
        if (*st != RK_OK)
            return FS_ANSWERED;
    }
    if (rk_state_is_active(stored) && rk_activity_can_renew(app) &&
        rk_src_has(rec, "auto_clear_time") &&
        rk_src_int64(rec, "auto_clear_time") > 0) { /* a status poll is use too (renewal) */
        if (origin != READ_ON_WORKER || !rec->tree)
            return FS_NEEDS_WORKER;
        rk_activity_renew_used(app, rec->tree);
    }
    int create_failed = rk_src_bool(rec, "create_failed");
    /* A backend state the record cannot hold (e.g. failed -> stopped), as the reconciler saw it. */
    enum rk_state shown = stored;
    const char *observed = rk_state_is_active(stored) ? rk_src_str(rec, "backend_state") : NULL;
    if (observed && rk_state_parse(observed))
        shown = rk_state_parse(observed);
    int alive = shown == RK_STATE_RUNNING && !create_failed;
    /* version: non-zero only for the in-process store's record (READ_IN_PLACE); a text only
     * from the loop's reader */
    if ((version || !rec->tree ? rendered_status(rec, id, version, shown, alive, out)
                               : render_owned(rec, shown, alive, out)) != 0)
        *st = rk_call_set_error(r->call, RK_E_NOMEM, "out of memory rendering the status");
    return FS_ANSWERED;
}

/* Status when the reconciler keeps the store current: one store round trip (the record, with
 * the idle touch done by the store at most once per second), the backend-tag checks of the
 * dispatch gate on that record, and no backend call. *fallback is set when no recent pass
 * vouches for the store (ask the backend instead). */
static rk_status status_from_store(struct rk_req *r, const char *id, int include_all,
                                   int64_t touch_s, struct status_answer *out, int *fallback)
{
    char err[RK_STORE_ERRLEN], mark[RK_STORE_MARK_MAX];
    json_object *rec = NULL;
    if (touch_s < 0)
        touch_s = rk_activity_touch_second(id);
    rk_store_rc rc =
        rk_store_get_touch(r->app->store, id, touch_s, &rec, mark, sizeof mark, err, sizeof err);
    rk_status st;
    struct rk_rec_src src = rk_src_tree(rec);
    *fallback = status_from_record(r, id, include_all, rc, &src, 0, mark, err, READ_ON_WORKER, &st,
                                   out) == FS_ASK_BACKEND;
    json_object_put(rec);
    return st;
}

/* rk_sandbox_status with the idle touch's second decided by the caller: touch_s > 0 touches,
 * 0 reads only, -1 asks the throttle (rk_activity_touch_second). */
static rk_status sandbox_status_at(struct rk_req *r, const char *id, int include_all,
                                   int64_t touch_s, struct status_answer *out)
{
    struct rk_app *app = r->app;
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    *out = (struct status_answer){0};
    if (rk_reconciler_active(app)) {
        int fallback = 0;
        rk_status fs = status_from_store(r, id, include_all, touch_s, out, &fallback);
        if (!fallback)
            return fs;
    }
    rk_store_rc rc = rk_store_get(app->store, id, &rec, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        return rk_call_set_error(r->call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
    enum rk_state stored = rc == RK_STORE_OK ? rk_rec_state(rec) : 0;
    if (rc == RK_STORE_NOT_FOUND || (!include_all && !rk_state_is_active(stored))) {
        json_object_put(rec);
        return rk_call_set_error(r->call, RK_E_NOT_FOUND, "Sandbox %s not found", id);
    }
    if (!rk_state_is_active(stored)) {
        /* Final states come from the record; no backend call (B112). */
        rk_status st =
            render_tree(rec, stored, 0, out) == 0
                ? RK_OK
                : rk_call_set_error(r->call, RK_E_NOMEM, "out of memory rendering the status");
        json_object_put(rec);
        return st;
    }
    struct rk_target t;
    rk_status st = rk_dispatch_record(app, r->call, RK_OP_STATUS, id, rec, &t);
    if (st != RK_OK)
        return st;
    enum rk_state shown;
    int alive;
    st = rk_lifecycle_refresh(app, r->call, &t.rec, &shown, &alive);
    if (st == RK_OK && render_tree(t.rec, shown, alive, out) != 0)
        st = rk_call_set_error(r->call, RK_E_NOMEM, "out of memory rendering the status");
    rk_target_release(&t);
    return st;
}

rk_status rk_sandbox_status(struct rk_req *r, const char *id, int include_all, json_object **out)
{
    struct status_answer a;
    rk_status st = sandbox_status_at(r, id, include_all, -1, &a);
    *out = st == RK_OK && a.json ? json_tokener_parse(a.json) : NULL;
    if (st == RK_OK && !*out)
        st = rk_call_set_error(r->call, RK_E_NOMEM, "out of memory rendering the status");
    answer_free(&a);
    return st;
}

/* How a status read is answered: the route's reply shape. a->json is NULL unless st is
 * RK_OK. */
typedef void status_answer_fn(struct rk_req *r, const char *id, rk_status st,
                              const struct status_answer *a);

/* A status read waiting for the event loop's store reader. */
struct status_read {
    struct rk_req *r;
    int include_all;
    int64_t touch_s; /* the touch the reader was asked to do (0: none): a worker redoes it */
    status_answer_fn *answer;
    char id[];
};

/* The read again on a worker, synchronously (the reader could not answer it). */
static void status_on_worker(void *arg)
{
    struct status_read *sr = arg;
    struct rk_req *r = sr->r;
    struct status_answer a;
    rk_status st = sandbox_status_at(r, sr->id, sr->include_all, sr->touch_s, &a);
    sr->answer(r, sr->id, st, &a);
    answer_free(&a);
    free(sr);
    rk_req_finish(r);
}

/* rk_store_read_cb, on the loop: answer from the record, or hand the read to a worker when
 * the store failed here, the backend must be asked or the backend expiry renewed. The record
 * is read as its text; one whose members the text readers do not read is parsed. */
static void status_read_done(void *arg, rk_store_rc rc, const struct rk_store_found *found,
                             const char *mark, const char *err)
{
    struct status_read *sr = arg;
    struct rk_req *r = sr->r;
    enum from_store fs = FS_NEEDS_WORKER;
    rk_status st = RK_OK;
    struct status_answer a = {0};
    json_object *tree = NULL;
    struct rk_rec_src src = rk_src_tree(NULL);
    if (rc == RK_STORE_OK && !found->rec &&
        rk_src_text(&src, found->text, found->len, found->m, found->n, found->expire_time,
                    found->has_expire) != 0) {
        tree = rk_store_found_tree(found);
        src = rk_src_tree(tree);
        if (!tree)
            rc = RK_STORE_ERROR; /* out of memory: a worker reads it again */
    } else if (rc == RK_STORE_OK && found->rec) {
        src = rk_src_tree(found->rec);
    }
    if (rc != RK_STORE_ERROR)
        fs = status_from_record(r, sr->id, sr->include_all, rc, &src, 0, mark, err, READ_BY_READER,
                                &st, &a);
    rk_src_release(&src);
    json_object_put(tree);
    if (fs == FS_ANSWERED) {
        sr->answer(r, sr->id, st, &a);
        answer_free(&a);
        free(sr);
        rk_req_finish(r);
        return;
    }
    if (rk_req_submit(r, status_on_worker, sr) != 0) {
        free(sr);
        rk_req_reply_busy(r, "all workers are busy and their queue is full (server.worker_queue)");
        rk_req_finish(r);
    }
}

/* A status read answered from a record seen in place (rk_store_view_touch). */
struct status_view {
    struct rk_req *r;
    const char *id;
    int include_all;
    enum from_store fs; /* what status_from_record said */
    rk_status st;
    struct status_answer a;
};

/* rk_store_view_fn, under the in-process store's lock: status_from_record only reads the
 * record and its answer shares nothing with it. */
static void status_view(void *ctx, rk_store_rc rc, json_object *rec, uint64_t version,
                        const char *mark, const char *err)
{
    struct status_view *v = ctx;
    struct rk_rec_src src = rk_src_tree(rec);
    v->fs = status_from_record(v->r, v->id, v->include_all, rc, &src, version, mark, err,
                               READ_IN_PLACE, &v->st, &v->a);
}

/* On the event loop: answer a status read there when nothing has to wait — from the
 * in-process store, or from the loop's store reader (the request waits for its callback
 * without holding a thread) — else ask for a worker. */
static void status_on_loop(struct rk_req *r, const char *id, int include_all,
                           status_answer_fn *answer)
{
    struct rk_app *app = r->app;
    if (!rk_reconciler_active(app)) {
        rk_req_needs_worker(r); /* the backend is asked on every read */
        return;
    }
    if (!rk_store_reads_block(app->store)) {
        /* In place: the in-process store shows its record without a copy (status_view). */
        struct status_view v = {.r = r, .id = id, .include_all = include_all, .fs = FS_ASK_BACKEND};
        if (rk_store_view_touch(app->store, id, rk_activity_touch_second(id), status_view, &v) ==
                0 &&
            v.fs == FS_ANSWERED)
            answer(r, id, v.st, &v.a);
        else
            rk_req_needs_worker(r);
        answer_free(&v.a);
        return;
    }
    struct rk_store_reader *rd = rk_req_store_reader(r);
    size_t idlen = strlen(id);
    struct status_read *sr = rd ? malloc(sizeof *sr + idlen + 1) : NULL;
    /* The touch throttle is only peeked at here and taken once the reader took the read: a
     * read the reader refuses is done on a worker with the touch still due. */
    int64_t now = rk_epoch_s();
    int64_t touch_s = rk_activity_pending(id, now) ? now : 0;
    if (sr) {
        sr->r = r;
        sr->include_all = include_all;
        sr->touch_s = touch_s;
        sr->answer = answer;
        memcpy(sr->id, id, idlen + 1);
    }
    if (!sr || rk_store_reader_get_touch(rd, id, touch_s, status_read_done, sr) != 0) {
        free(sr);
        rk_req_needs_worker(r);
        return;
    }
    if (touch_s)
        rk_activity_due(id, now);
    rk_req_defer(r); /* the callback never comes before the loop's next turn */
}

/* Run a status read where the route code runs: started on the loop, or synchronously. */
static void status_read(struct rk_req *r, const char *id, int include_all, status_answer_fn *answer)
{
    if (rk_req_on_loop(r)) {
        status_on_loop(r, id, include_all, answer);
        return;
    }
    struct status_answer a;
    rk_status st = sandbox_status_at(r, id, include_all, -1, &a);
    answer(r, id, st, &a);
    answer_free(&a);
}

/* get_status's answer: the status, or the error recorded on the call. */
static void answer_status(struct rk_req *r, const char *id, rk_status st,
                          const struct status_answer *a)
{
    (void)id;
    if (st != RK_OK || !a->json)
        rk_reply_call_error(r);
    else
        rk_reply_ok_text(r, a->json, a->len);
}

/* GET /get_status (§5.2). */
void rk_route_get_status(struct rk_req *r)
{
    struct rk_route_path p;
    rk_path_query(&p, r);
    const char *id =
        rk_v_qstr(&p.v, r, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK | RK_V_SANDBOX_ID);
    int include_all = rk_v_qbool(&p.v, r, "include_all_states", 0);
    if (rk_path_valid(&p) == 0)
        status_read(r, id, include_all, answer_status);
    rk_path_end(&p);
}

/* is_alive's answer: never an error (§5.4). */
static void answer_alive(struct rk_req *r, const char *id, rk_status st,
                         const struct status_answer *a)
{
    json_object *o = json_object_new_object();
    if (st == RK_OK && a && a->json) {
        json_object_object_add(o, "is_alive", json_object_new_boolean(a->alive));
        json_object_object_add(o, "message", json_object_new_string(a->host));
    } else {
        json_object_object_add(o, "is_alive", json_object_new_boolean(0));
        json_object_object_add(o, "message",
                               json_object_new_string(rk_arena_printf(
                                   r->call, "sandbox %s is alive failed", id ? id : "")));
    }
    rk_reply_ok(r, o);
}

/* GET /is_alive (§5.4). */
void rk_route_is_alive(struct rk_req *r)
{
    /* Never fails: the admin semantics with the host_name bug fixed (§5.4). */
    const char *id = rk_req_query(r, "sandbox_id");
    rk_req_set_sandbox(r, id); /* kept only when it follows the identifier rule */
    if (id && *id && rk_id_valid(id, strlen(id)))
        status_read(r, id, 0, answer_alive);
    else
        answer_alive(r, id, RK_E_INVALID, NULL);
}

/* Sink collecting bytes into an rk_buf (bounded by its cap). */
static rk_status buf_sink_write(void *ctx, enum rk_stream stream, const char *data, size_t len)
{
    (void)stream;
    return rk_buf_append(ctx, data, len) == 0 ? RK_OK : RK_E_TOO_LARGE;
}

/* GET /get_sandbox_statistics: the plugin's statistics JSON as the result. */
void rk_route_statistics(struct rk_req *r)
{
    struct rk_route_path p;
    rk_path_query(&p, r);
    const char *id =
        rk_v_qstr(&p.v, r, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK | RK_V_SANDBOX_ID);
    if (rk_path_gate(&p, RK_OP_STATISTICS, id) != 0) {
        rk_path_end(&p);
        return;
    }
    struct rk_buf out = {.cap = 1 << 20};
    const struct rk_plugin *pl = r->app->plugin;
    struct rk_sink sink = {buf_sink_write, &out};
    rk_status st;
    RK_UPSTREAM(st, pl, statistics, r->call, &p.t.ref, &sink);
    rk_path_end(&p);
    json_object *res = st == RK_OK ? json_tokener_parse(rk_buf_cstr(&out)) : NULL;
    rk_buf_free(&out);
    if (st != RK_OK)
        rk_reply_call_error(r);
    else if (!res)
        rk_reply_error(r, RK_E_UPSTREAM, "backend statistics are not valid JSON");
    else
        rk_reply_ok(r, res);
}
