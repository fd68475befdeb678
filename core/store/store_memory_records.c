/* SPDX-License-Identifier: Apache-2.0 */
/* In-process store: sandbox records. Owns the stored copies and the caller's views of
 * them (with expire_time), the purge of deleted records after the retention, get,
 * get_many, create, the read-modify-write update, the idle touch and the hot-path read
 * that touches (get_touch, same semantics as the Redis script). */
#include "store/store_memory_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value destructor for records. */
void rkm_free_rec(void *v)
{
    struct mem_rec *r = v;
    if (r) {
        json_object_put(r->rec);
        free(r);
    }
}

/* Deep copy of a json object; NULL on failure. */
static json_object *deep_copy(json_object *src)
{
    json_object *dst = NULL;
    if (json_object_deep_copy(src, &dst, NULL) != 0)
        return NULL;
    return dst;
}

/* The caller's view of a stored record: a copy with expire_time when active. */
static json_object *view_of(const struct mem_rec *r)
{
    json_object *o = deep_copy(r->rec);
    if (o && r->active && r->expire > 0)
        json_object_object_add(o, "expire_time", json_object_new_int64(r->expire));
    return o;
}

/* A version never given before, for a record whose content or deadline changed (caller holds
 * the lock). */
static uint64_t new_version(struct mem_store *m)
{
    return ++m->versions;
}

/* 1 if the record's retention has run out at now_ms. */
static bool rec_purged(const struct mem_rec *r, int64_t now_ms)
{
    return r->purge_at_ms > 0 && r->purge_at_ms <= now_ms;
}

/* Set the record's purge time from its state and queue it when deleted
 * (caller holds the lock). Best effort on OOM: the record is then kept. */
static void schedule_purge(struct mem_store *m, const char *id, struct mem_rec *r)
{
    r->purge_at_ms = 0;
    if (m->base.deleted_retention_s <= 0 || !rk_store_rec_deleted(r->rec))
        return;
    size_t len = strlen(id);
    struct purge_ent *p = malloc(sizeof *p + len + 1);
    if (!p)
        return;
    p->next = NULL;
    p->at_ms = rk_store_now_ms() + m->base.deleted_retention_s * 1000;
    memcpy(p->id, id, len + 1);
    r->purge_at_ms = p->at_ms;
    if (m->purge_tail)
        m->purge_tail->next = p;
    else
        m->purge_head = p;
    m->purge_tail = p;
}

/* Drop records whose retention ran out (caller holds the lock). A queue entry
 * whose record was re-created or re-deleted since no longer matches. */
void rkm_purge_due(struct mem_store *m)
{
    int64_t now = rk_store_now_ms();
    while (m->purge_head && m->purge_head->at_ms <= now) {
        struct purge_ent *p = m->purge_head;
        struct mem_ent *e = rkm_map_find(&m->records, p->id);
        if (e && ((struct mem_rec *)e->val)->purge_at_ms == p->at_ms) {
            rkm_map_del(&m->records, p->id);
            rkm_map_del(&m->sessions, p->id);
        }
        m->purge_head = p->next;
        if (!m->purge_head)
            m->purge_tail = NULL;
        free(p);
    }
}

/* The record of id unless it is absent or its retention ran out (caller holds the lock). */
static const struct mem_rec *live_locked(struct mem_store *m, const char *id)
{
    struct mem_ent *e = rkm_map_find(&m->records, id);
    return e && !rec_purged(e->val, rk_store_now_ms()) ? e->val : NULL;
}

/* Fetch one record (caller holds the lock). */
static rk_store_rc get_locked(struct mem_store *m, const char *id, json_object **out, char *err,
                              size_t errlen)
{
    const struct mem_rec *r = live_locked(m, id);
    if (!r)
        return RK_STORE_NOT_FOUND;
    *out = view_of(r);
    return *out ? RK_STORE_OK : rkm_oom(err, errlen);
}

json_object *rkm_record_copy_locked(struct mem_store *m, const char *id)
{
    const struct mem_rec *r = live_locked(m, id);
    return r ? deep_copy(r->rec) : NULL;
}

/* Fetch one record. */
rk_store_rc rkm_get(struct rk_store *st, const char *id, json_object **out, char *err,
                    size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    rk_store_rc rc = get_locked(m, id, out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Records copied per hold of the store lock by get_many: the reconciler reads every active
 * record each pass, and copying 16,000 under one hold stalled every request for that long. */
#define GET_MANY_CHUNK 256

/* Fetch several records; unknown ids give NULL. Each record is read atomically, the set is
 * not (the lock is released between chunks, as the Redis store reads in chunks too). */
rk_store_rc rkm_get_many(struct rk_store *st, const char *const *ids, size_t n, json_object **out,
                         char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n && rc == RK_STORE_OK; i++) {
        if (i > 0 && i % GET_MANY_CHUNK == 0) {
            pthread_mutex_unlock(&m->mu);
            pthread_mutex_lock(&m->mu);
        }
        rk_store_rc r = get_locked(m, ids[i], &out[i], err, errlen);
        if (r == RK_STORE_ERROR)
            rc = r;
    }
    pthread_mutex_unlock(&m->mu);
    if (rc != RK_STORE_OK)
        rk_store_put_records(out, n);
    return rc;
}

/* Show several records in place, a chunk per hold of the lock (as get_many copies them), and
 * copy those the caller keeps. */
rk_store_rc rkm_view_many(struct rk_store *st, const char *const *ids, size_t n,
                          rk_store_view_each_fn *fn, void *ctx, json_object **kept, char *err,
                          size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    int64_t now = rk_store_now_ms();
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n && rc == RK_STORE_OK; i++) {
        if (i > 0 && i % GET_MANY_CHUNK == 0) {
            pthread_mutex_unlock(&m->mu);
            pthread_mutex_lock(&m->mu);
        }
        struct mem_ent *e = rkm_map_find(&m->records, ids[i]);
        struct mem_rec *r = e && !rec_purged(e->val, now) ? e->val : NULL;
        if (fn(ctx, i, r ? r->rec : NULL) && kept && r && !(kept[i] = view_of(r)))
            rc = rkm_oom(err, errlen);
    }
    pthread_mutex_unlock(&m->mu);
    if (rc != RK_STORE_OK && kept)
        rk_store_put_records(kept, n);
    return rc;
}

/* Insert unless an active record exists. */
rk_store_rc rkm_create(struct rk_store *st, const char *id, json_object *rec, int64_t expire_time,
                       char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    struct mem_rec *r = calloc(1, sizeof *r);
    if (!r)
        return rkm_oom(err, errlen);
    r->rec = deep_copy(rec);
    if (!r->rec) {
        free(r);
        return rkm_oom(err, errlen);
    }
    r->active = rk_store_rec_active(r->rec);
    r->expire = r->active && expire_time > 0 ? expire_time : 0;
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    rkm_purge_due(m);
    struct mem_ent *e = rkm_map_find(&m->records, id);
    if (e && ((struct mem_rec *)e->val)->active) {
        rkm_free_rec(r);
        rc = RK_STORE_EXISTS;
    } else {
        r->version = new_version(m);
        schedule_purge(m, id, r);
        if (rkm_map_put(&m->records, id, r) != 0)
            rc = rkm_oom(err, errlen);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Read-modify-write under the lock; fn changes the stored record (see below). */
rk_store_rc rkm_update(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                       json_object **out, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    rkm_purge_due(m);
    struct mem_ent *e = rkm_map_find(&m->records, id);
    if (!e) {
        pthread_mutex_unlock(&m->mu);
        return RK_STORE_NOT_FOUND;
    }
    struct mem_rec *r = e->val;
    /* In place: fn decides to leave the record alone (1) or fails (-1) before it changes
     * anything (rk_store_update_fn), and every reader of the stored object holds the lock.
     * A copy to change and swap in cost a deep copy of the record per update (a tenth of
     * the admin's CPU in a burst of 16,000 creates). */
    int f = fn(r->rec, ctx);
    if (f == 1) {
        rc = RK_STORE_ABORTED;
    } else if (f != 0) {
        rc = rk_store_fail(err, errlen, "store: update callback failed for %s", id);
    } else {
        r->version = new_version(m);
        r->active = rk_store_rec_active(r->rec);
        if (!r->active)
            r->expire = 0;
        if (!rk_store_rec_deleted(r->rec) || r->purge_at_ms == 0)
            schedule_purge(m, id, r); /* keeps the first deletion time */
        if (out) {
            *out = view_of(r);
            if (!*out)
                rc = rkm_oom(err, errlen);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Set the idle deadline of an active record; others are left alone. */
rk_store_rc rkm_touch(struct rk_store *st, const char *id, int64_t expire_time, char *err,
                      size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    struct mem_ent *e = rkm_map_find(&m->records, id);
    struct mem_rec *r = e ? e->val : NULL;
    if (r && r->active && r->expire != expire_time) {
        r->expire = expire_time;
        r->version = new_version(m);
    }
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

/* The idle touch of get_touch (caller holds the lock): when the record is active with a
 * positive auto_clear_time, move its deadline to now_s + minutes*60 if later (same semantics as
 * the Redis script). now_s <= 0: no touch. */
static void touch_locked(struct mem_store *m, const char *id, int64_t now_s)
{
    struct mem_ent *e = now_s > 0 ? rkm_map_find(&m->records, id) : NULL;
    if (!e)
        return;
    struct mem_rec *r = e->val;
    int64_t deadline = r->active ? rk_store_touch_deadline(r->rec, now_s, r->expire) : 0;
    if (deadline && deadline != r->expire) {
        r->expire = deadline;
        r->version = new_version(m);
    }
}

/* Record + idle deadline, touched (touch_locked). */
rk_store_rc rkm_get_touch(struct rk_store *st, const char *id, int64_t now_s, json_object **out,
                          char *mark, size_t marklen, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    if (mark && marklen)
        snprintf(mark, marklen, "%s", m->mark);
    touch_locked(m, id, now_s);
    rk_store_rc rc = get_locked(m, id, out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* get_touch shown in place: fn sees the stored record itself, with the caller's view's
 * expire_time added for the call and taken away after it (everything happens under the lock,
 * where every reader of the stored object is). */
void rkm_view_touch(struct rk_store *st, const char *id, int64_t now_s, rk_store_view_fn *fn,
                    void *ctx)
{
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    touch_locked(m, id, now_s);
    struct mem_ent *e = rkm_map_find(&m->records, id);
    if (!e || rec_purged(e->val, rk_store_now_ms())) {
        fn(ctx, RK_STORE_NOT_FOUND, NULL, 0, m->mark, "");
    } else {
        struct mem_rec *r = e->val;
        int with_expire = r->active && r->expire > 0;
        json_object *ev = with_expire ? json_object_new_int64(r->expire) : NULL, *kept = NULL;
        if (with_expire && json_object_object_get_ex(r->rec, "expire_time", &kept))
            json_object_get(kept); /* a stored member the view hides: put back after */
        if (with_expire && (!ev || json_object_object_add(r->rec, "expire_time", ev) != 0)) {
            json_object_put(ev);
            json_object_put(kept);
            fn(ctx, RK_STORE_ERROR, NULL, 0, m->mark, "store: out of memory");
        } else {
            fn(ctx, RK_STORE_OK, r->rec, r->version, m->mark, "");
            if (kept)
                json_object_object_add(r->rec, "expire_time", kept);
            else if (with_expire)
                json_object_object_del(r->rec, "expire_time");
        }
    }
    pthread_mutex_unlock(&m->mu);
}
