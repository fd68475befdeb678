/* SPDX-License-Identifier: Apache-2.0 */
/* In-process store: string-keyed hash tables guarded by one mutex. Records are
 * deep copies, so callers never share json objects with the store. Deleted
 * records are kept for the deleted retention, then purged: a FIFO of
 * (id, purge time) in deletion order, popped lazily on every write, so the
 * cost is O(purged) and reads of a purged-but-not-popped record already see
 * it gone. */
#include "store/store_common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One hash table entry; val is owned and freed with the table's free_val. */
struct mem_ent {
    struct mem_ent *next;
    char *key;
    void *val;
};

/* A chained hash table with power-of-two buckets. */
struct mem_map {
    struct mem_ent **buckets;
    size_t nbuckets;
    size_t count;
    void (*free_val)(void *val);
};

/* A sandbox record with its idle deadline (0 = none). */
struct mem_rec {
    json_object *rec;
    int64_t expire;
    bool active;
    int64_t purge_at_ms; /* deleted: gone at this epoch ms; 0 = kept */
};

/* A deleted record due to be purged (FIFO in deletion order). */
struct purge_ent {
    struct purge_ent *next;
    int64_t at_ms;
    char id[];
};

/* The memory store. */
struct mem_store {
    struct rk_store base;
    pthread_mutex_t mu;
    struct mem_map records;       /* id -> struct mem_rec */
    struct mem_map sessions;      /* sandbox id -> struct mem_map (name -> char *value) */
    struct mem_map claims;        /* name -> int64_t deadline ms */
    char mark[RK_STORE_MARK_MAX]; /* the reconciler's mark */
    struct purge_ent *purge_head, *purge_tail;
};

/* FNV-1a hash of a string. */
static size_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return (size_t)h;
}

/* Initialise an empty map; -1 on OOM. */
static int map_init(struct mem_map *m, void (*free_val)(void *))
{
    m->nbuckets = 64;
    m->count = 0;
    m->free_val = free_val;
    m->buckets = calloc(m->nbuckets, sizeof *m->buckets);
    return m->buckets ? 0 : -1;
}

/* Free every entry and the bucket array. */
static void map_free(struct mem_map *m)
{
    if (!m->buckets)
        return;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct mem_ent *e = m->buckets[i];
        while (e) {
            struct mem_ent *next = e->next;
            m->free_val(e->val);
            free(e->key);
            free(e);
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = NULL;
    m->count = 0;
}

/* Find the entry for key, or NULL. */
static struct mem_ent *map_find(const struct mem_map *m, const char *key)
{
    for (struct mem_ent *e = m->buckets[hash_str(key) & (m->nbuckets - 1)]; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* Double the bucket array when the load factor exceeds 1 (best effort). */
static void map_grow(struct mem_map *m)
{
    if (m->count < m->nbuckets)
        return;
    size_t nb = m->nbuckets * 2;
    struct mem_ent **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct mem_ent *e = m->buckets[i];
        while (e) {
            struct mem_ent *next = e->next;
            size_t h = hash_str(e->key) & (nb - 1);
            e->next = b[h];
            b[h] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = nb;
}

/* Set key to val, freeing any previous value; takes ownership of val even on
 * failure. Returns -1 on OOM. */
static int map_put(struct mem_map *m, const char *key, void *val)
{
    struct mem_ent *e = map_find(m, key);
    if (e) {
        m->free_val(e->val);
        e->val = val;
        return 0;
    }
    e = calloc(1, sizeof *e);
    char *k = strdup(key);
    if (!e || !k) {
        free(e);
        free(k);
        m->free_val(val);
        return -1;
    }
    map_grow(m);
    size_t h = hash_str(key) & (m->nbuckets - 1);
    e->key = k;
    e->val = val;
    e->next = m->buckets[h];
    m->buckets[h] = e;
    m->count++;
    return 0;
}

/* Remove key; 1 if it was there. */
static int map_del(struct mem_map *m, const char *key)
{
    struct mem_ent **pp = &m->buckets[hash_str(key) & (m->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next) {
        struct mem_ent *e = *pp;
        if (strcmp(e->key, key) == 0) {
            *pp = e->next;
            m->free_val(e->val);
            free(e->key);
            free(e);
            m->count--;
            return 1;
        }
    }
    return 0;
}

/* Value destructor for records. */
static void free_rec(void *v)
{
    struct mem_rec *r = v;
    if (r) {
        json_object_put(r->rec);
        free(r);
    }
}

/* Value destructor for a sandbox's session map. */
static void free_session_map(void *v)
{
    struct mem_map *m = v;
    if (m) {
        map_free(m);
        free(m);
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

/* Return the memory store behind the interface pointer. */
static struct mem_store *mem(struct rk_store *st)
{
    return (struct mem_store *)st;
}

/* Report an allocation failure. */
static rk_store_rc oom(char *err, size_t errlen)
{
    return rk_store_fail(err, errlen, "store: out of memory");
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
static void purge_due(struct mem_store *m)
{
    int64_t now = rk_store_now_ms();
    while (m->purge_head && m->purge_head->at_ms <= now) {
        struct purge_ent *p = m->purge_head;
        struct mem_ent *e = map_find(&m->records, p->id);
        if (e && ((struct mem_rec *)e->val)->purge_at_ms == p->at_ms) {
            map_del(&m->records, p->id);
            map_del(&m->sessions, p->id);
        }
        m->purge_head = p->next;
        if (!m->purge_head)
            m->purge_tail = NULL;
        free(p);
    }
}

/* Free the memory store. */
static void mem_close(struct rk_store *st)
{
    struct mem_store *m = mem(st);
    while (m->purge_head) {
        struct purge_ent *p = m->purge_head;
        m->purge_head = p->next;
        free(p);
    }
    map_free(&m->records);
    map_free(&m->sessions);
    map_free(&m->claims);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* Always reachable. */
static rk_store_rc mem_ping(struct rk_store *st, char *err, size_t errlen)
{
    (void)st;
    (void)err;
    (void)errlen;
    return RK_STORE_OK;
}

/* Fetch one record (caller holds the lock). */
static rk_store_rc get_locked(struct mem_store *m, const char *id, json_object **out, char *err,
                              size_t errlen)
{
    struct mem_ent *e = map_find(&m->records, id);
    if (!e || rec_purged(e->val, rk_store_now_ms()))
        return RK_STORE_NOT_FOUND;
    *out = view_of(e->val);
    return *out ? RK_STORE_OK : oom(err, errlen);
}

/* Fetch one record. */
static rk_store_rc mem_get(struct rk_store *st, const char *id, json_object **out, char *err,
                           size_t errlen)
{
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    rk_store_rc rc = get_locked(m, id, out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Fetch several records; unknown ids give NULL. */
static rk_store_rc mem_get_many(struct rk_store *st, const char *const *ids, size_t n,
                                json_object **out, char *err, size_t errlen)
{
    struct mem_store *m = mem(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n && rc == RK_STORE_OK; i++) {
        rk_store_rc r = get_locked(m, ids[i], &out[i], err, errlen);
        if (r == RK_STORE_ERROR)
            rc = r;
    }
    pthread_mutex_unlock(&m->mu);
    if (rc != RK_STORE_OK)
        for (size_t i = 0; i < n; i++) {
            json_object_put(out[i]);
            out[i] = NULL;
        }
    return rc;
}

/* Insert unless an active record exists. */
static rk_store_rc mem_create(struct rk_store *st, const char *id, json_object *rec,
                              int64_t expire_time, char *err, size_t errlen)
{
    struct mem_store *m = mem(st);
    struct mem_rec *r = calloc(1, sizeof *r);
    if (!r)
        return oom(err, errlen);
    r->rec = deep_copy(rec);
    if (!r->rec) {
        free(r);
        return oom(err, errlen);
    }
    r->active = rk_store_rec_active(r->rec);
    r->expire = r->active && expire_time > 0 ? expire_time : 0;
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    purge_due(m);
    struct mem_ent *e = map_find(&m->records, id);
    if (e && ((struct mem_rec *)e->val)->active) {
        free_rec(r);
        rc = RK_STORE_EXISTS;
    } else {
        schedule_purge(m, id, r);
        if (map_put(&m->records, id, r) != 0)
            rc = oom(err, errlen);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Read-modify-write under the lock; fn works on a private copy. */
static rk_store_rc mem_update(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                              json_object **out, char *err, size_t errlen)
{
    struct mem_store *m = mem(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    purge_due(m);
    struct mem_ent *e = map_find(&m->records, id);
    if (!e) {
        pthread_mutex_unlock(&m->mu);
        return RK_STORE_NOT_FOUND;
    }
    struct mem_rec *r = e->val;
    json_object *work = deep_copy(r->rec);
    if (!work) {
        rc = oom(err, errlen);
        goto out;
    }
    int f = fn(work, ctx);
    if (f == 1) {
        rc = RK_STORE_ABORTED;
    } else if (f != 0) {
        rc = rk_store_fail(err, errlen, "store: update callback failed for %s", id);
    } else if (!json_object_is_type(work, json_type_object)) {
        rc = rk_store_fail(err, errlen, "store: update produced a non-object for %s", id);
    } else {
        json_object_put(r->rec);
        r->rec = work;
        work = NULL;
        r->active = rk_store_rec_active(r->rec);
        if (!r->active)
            r->expire = 0;
        if (!rk_store_rec_deleted(r->rec) || r->purge_at_ms == 0)
            schedule_purge(m, id, r); /* keeps the first deletion time */
        if (out) {
            *out = view_of(r);
            if (!*out)
                rc = oom(err, errlen);
        }
    }
out:
    pthread_mutex_unlock(&m->mu);
    json_object_put(work);
    return rc;
}

/* Collect ids of active records matching a deadline filter (now < 0: all). */
static rk_store_rc collect_active(struct mem_store *m, int64_t now, size_t max, char ***ids_out,
                                  size_t *n_out, char *err, size_t errlen)
{
    size_t cap = 16, n = 0;
    char **ids = malloc(cap * sizeof *ids);
    if (!ids)
        return oom(err, errlen);
    for (size_t b = 0; b < m->records.nbuckets && n < max; b++) {
        for (struct mem_ent *e = m->records.buckets[b]; e && n < max; e = e->next) {
            struct mem_rec *r = e->val;
            if (!r->active || (now >= 0 && (r->expire <= 0 || r->expire > now)))
                continue;
            if (n == cap) {
                char **grown = realloc(ids, cap * 2 * sizeof *ids);
                if (!grown)
                    goto fail;
                ids = grown;
                cap *= 2;
            }
            ids[n] = strdup(e->key);
            if (!ids[n])
                goto fail;
            n++;
        }
    }
    *ids_out = ids;
    *n_out = n;
    return RK_STORE_OK;
fail:
    rk_store_free_ids(ids, n);
    return oom(err, errlen);
}

/* Ids of active records. */
static rk_store_rc mem_list_active(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                                   size_t errlen)
{
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    rk_store_rc rc = collect_active(m, -1, SIZE_MAX, ids_out, n_out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Set the idle deadline of an active record; others are left alone. */
static rk_store_rc mem_touch(struct rk_store *st, const char *id, int64_t expire_time, char *err,
                             size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    struct mem_ent *e = map_find(&m->records, id);
    if (e && ((struct mem_rec *)e->val)->active)
        ((struct mem_rec *)e->val)->expire = expire_time;
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

/* Active ids whose deadline is <= now. */
static rk_store_rc mem_expired(struct rk_store *st, int64_t now, size_t max, char ***ids_out,
                               size_t *n_out, char *err, size_t errlen)
{
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    purge_due(m);
    rk_store_rc rc = collect_active(m, now < 0 ? 0 : now, max, ids_out, n_out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Drop expired claims so the table stays small (caller holds the lock). */
static void purge_claims(struct mem_map *claims, int64_t now_ms)
{
    for (size_t b = 0; b < claims->nbuckets; b++) {
        struct mem_ent **pp = &claims->buckets[b];
        while (*pp) {
            struct mem_ent *e = *pp;
            if (*(int64_t *)e->val <= now_ms) {
                *pp = e->next;
                claims->free_val(e->val);
                free(e->key);
                free(e);
                claims->count--;
            } else {
                pp = &e->next;
            }
        }
    }
}

/* Take a claim unless a live one exists. */
static rk_store_rc mem_claim(struct rk_store *st, const char *name, int ttl_s, char *err,
                             size_t errlen)
{
    struct mem_store *m = mem(st);
    int64_t now = rk_store_now_ms();
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    if (m->claims.count >= m->claims.nbuckets)
        purge_claims(&m->claims, now);
    struct mem_ent *e = map_find(&m->claims, name);
    if (e && *(int64_t *)e->val > now) {
        rc = RK_STORE_EXISTS;
    } else {
        int64_t *deadline = malloc(sizeof *deadline);
        if (!deadline) {
            rc = oom(err, errlen);
        } else {
            *deadline = now + (int64_t)ttl_s * 1000;
            if (map_put(&m->claims, name, deadline) != 0)
                rc = oom(err, errlen);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* The session map of a sandbox, optionally created (caller holds the lock). */
static struct mem_map *sessions_of(struct mem_store *m, const char *sandbox_id, bool create)
{
    struct mem_ent *e = map_find(&m->sessions, sandbox_id);
    if (e || !create)
        return e ? e->val : NULL;
    struct mem_map *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    if (map_init(s, free) != 0) {
        free(s);
        return NULL;
    }
    if (map_put(&m->sessions, sandbox_id, s) != 0)
        return NULL;
    return s;
}

/* Delete a name and drop the sandbox's map when it becomes empty. */
static void session_del(struct mem_store *m, const char *sandbox_id, struct mem_map *s,
                        const char *name)
{
    map_del(s, name);
    if (s->count == 0)
        map_del(&m->sessions, sandbox_id);
}

/* Reserve a name unless it is committed or reserved by a live reservation. */
static rk_store_rc mem_reserve(struct rk_store *st, const char *sandbox_id, const char *name,
                               int ttl_s, const char *token, char *err, size_t errlen)
{
    struct mem_store *m = mem(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    int64_t now = rk_store_now_ms();
    struct mem_map *s = sessions_of(m, sandbox_id, true);
    struct mem_ent *e = s ? map_find(s, name) : NULL;
    if (!s) {
        rc = oom(err, errlen);
    } else if (e && rk_store_value_blocks(e->val, now)) {
        rc = RK_STORE_EXISTS;
    } else {
        char *v = rk_store_reservation_value(token, now + (int64_t)ttl_s * 1000);
        if (!v || map_put(s, name, v) != 0) {
            if (s->count == 0)
                map_del(&m->sessions, sandbox_id);
            rc = oom(err, errlen);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Replace our reservation with a committed mapping. */
static rk_store_rc mem_commit(struct rk_store *st, const char *sandbox_id, const char *name,
                              const char *token, const char *session_id, char *err, size_t errlen)
{
    struct mem_store *m = mem(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    struct mem_ent *e = s ? map_find(s, name) : NULL;
    if (!e || !rk_store_value_is_reservation_of(e->val, token)) {
        rc = RK_STORE_CONFLICT;
    } else {
        char *v = rk_store_session_value(session_id);
        if (!v) {
            rc = oom(err, errlen);
        } else {
            free(e->val);
            e->val = v;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Delete our reservation. */
static rk_store_rc mem_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                                const char *token, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = mem(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    struct mem_ent *e = s ? map_find(s, name) : NULL;
    if (!e || !rk_store_value_is_reservation_of(e->val, token))
        rc = RK_STORE_CONFLICT;
    else
        session_del(m, sandbox_id, s, name);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Look up a committed mapping. */
static rk_store_rc mem_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                                   char **session_id_out, char *err, size_t errlen)
{
    struct mem_store *m = mem(st);
    rk_store_rc rc = RK_STORE_NOT_FOUND;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    struct mem_ent *e = s ? map_find(s, name) : NULL;
    if (e && strncmp(e->val, "s:", 2) == 0) {
        *session_id_out = strdup((char *)e->val + 2);
        rc = *session_id_out ? RK_STORE_OK : oom(err, errlen);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Remove a mapping only if it points at expected. */
static rk_store_rc mem_session_remove(struct rk_store *st, const char *sandbox_id, const char *name,
                                      const char *expected, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = mem(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    struct mem_ent *e = s ? map_find(s, name) : NULL;
    const char *v = e ? e->val : NULL;
    if (!v)
        rc = RK_STORE_NOT_FOUND;
    else if (strncmp(v, "s:", 2) != 0 || strcmp(v + 2, expected) != 0)
        rc = RK_STORE_CONFLICT;
    else
        session_del(m, sandbox_id, s, name);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Remove every mapping of a sandbox. */
static rk_store_rc mem_session_clear(struct rk_store *st, const char *sandbox_id, char *err,
                                     size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    map_del(&m->sessions, sandbox_id);
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

/* Count the mappings of a sandbox. */
static rk_store_rc mem_session_count(struct rk_store *st, const char *sandbox_id, size_t *n_out,
                                     char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    *n_out = s ? s->count : 0;
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

/* Record + idle deadline; when active with a positive auto_clear_time, move the deadline to
 * now_s + minutes*60 if later (same semantics as the Redis script). */
static rk_store_rc mem_get_touch(struct rk_store *st, const char *id, int64_t now_s,
                                 json_object **out, char *mark, size_t marklen, char *err,
                                 size_t errlen)
{
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    if (mark && marklen)
        snprintf(mark, marklen, "%s", m->mark);
    struct mem_ent *e = map_find(&m->records, id);
    if (e && now_s > 0) {
        struct mem_rec *r = e->val;
        json_object *mv;
        int64_t minutes = 0;
        if (r->active && json_object_object_get_ex(r->rec, "auto_clear_time", &mv) && mv)
            minutes = json_object_get_int64(mv);
        if (minutes > 0 && minutes < INT64_MAX / 120 && now_s + minutes * 60 > r->expire)
            r->expire = now_s + minutes * 60;
    }
    rk_store_rc rc = get_locked(m, id, out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Keep the reconciler's mark. */
static rk_store_rc mem_set_mark(struct rk_store *st, const char *value, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    snprintf(m->mark, sizeof m->mark, "%s", value);
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

/* One process: the lease is always ours. */
static rk_store_rc mem_lease(struct rk_store *st, const char *name, const char *owner, int ttl_ms,
                             char *err, size_t errlen)
{
    (void)st;
    (void)name;
    (void)owner;
    (void)ttl_ms;
    (void)err;
    (void)errlen;
    return RK_STORE_OK;
}

/* One active record's list key and id, for sorting a page. */
struct page_ent {
    char *key; /* rk_store_list_key */
    const char *id;
};

/* Byte order of list keys. */
static int page_cmp(const void *a, const void *b)
{
    return strcmp(((const struct page_ent *)a)->key, ((const struct page_ent *)b)->key);
}

/* Sort every active record by list key and copy ids [offset, offset+limit). */
static rk_store_rc mem_list_page(struct rk_store *st, size_t offset, size_t limit, char ***ids_out,
                                 size_t *n_out, size_t *total_out, char *err, size_t errlen)
{
    struct mem_store *m = mem(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct page_ent *all = calloc(m->records.count ? m->records.count : 1, sizeof *all);
    size_t n = 0;
    for (size_t b = 0; all && b < m->records.nbuckets; b++)
        for (struct mem_ent *e = m->records.buckets[b]; e; e = e->next) {
            struct mem_rec *r = e->val;
            if (!r->active)
                continue;
            all[n].id = e->key;
            all[n].key = rk_store_list_key(r->rec, e->key);
            if (!all[n].key)
                rc = oom(err, errlen);
            n++;
        }
    if (!all)
        rc = oom(err, errlen);
    char **ids = NULL;
    size_t k = 0;
    if (rc == RK_STORE_OK) {
        qsort(all, n, sizeof *all, page_cmp);
        size_t first = offset < n ? offset : n;
        size_t want = n - first < limit ? n - first : limit;
        ids = calloc(want ? want : 1, sizeof *ids);
        if (!ids)
            rc = oom(err, errlen);
        for (; ids && k < want; k++)
            if (!(ids[k] = strdup(all[first + k].id))) {
                rc = oom(err, errlen);
                break;
            }
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; all && i < n; i++)
        free(all[i].key);
    free(all);
    if (rc != RK_STORE_OK) {
        rk_store_free_ids(ids, k);
        return rc;
    }
    *ids_out = ids;
    *n_out = k;
    *total_out = n;
    return RK_STORE_OK;
}

/* Count active records by state. */
static rk_store_rc mem_count_states(struct rk_store *st, size_t *pending_out, size_t *running_out,
                                    char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = mem(st);
    pthread_mutex_lock(&m->mu);
    for (size_t b = 0; b < m->records.nbuckets; b++)
        for (struct mem_ent *e = m->records.buckets[b]; e; e = e->next) {
            struct mem_rec *r = e->val;
            json_object *v = NULL;
            if (!r->active || !json_object_object_get_ex(r->rec, "state", &v))
                continue;
            if (strcmp(json_object_get_string(v), "pending") == 0)
                (*pending_out)++;
            else
                (*running_out)++;
        }
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

static const struct rk_store_ops mem_ops = {
    .close = mem_close,
    .ping = mem_ping,
    .get = mem_get,
    .get_many = mem_get_many,
    .create = mem_create,
    .update = mem_update,
    .list_active = mem_list_active,
    .touch = mem_touch,
    .expired = mem_expired,
    .claim = mem_claim,
    .reserve = mem_reserve,
    .commit = mem_commit,
    .rollback = mem_rollback,
    .session_get = mem_session_get,
    .session_remove = mem_session_remove,
    .session_clear = mem_session_clear,
    .session_count = mem_session_count,
    .get_touch = mem_get_touch,
    .lease = mem_lease,
    .set_mark = mem_set_mark,
    .list_page = mem_list_page,
    .count_states = mem_count_states,
};

/* Open the in-process store. */
struct rk_store *rk_store_open_memory(void)
{
    struct mem_store *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    if (map_init(&m->records, free_rec) != 0 || map_init(&m->sessions, free_session_map) != 0 ||
        map_init(&m->claims, free) != 0) {
        map_free(&m->records);
        map_free(&m->sessions);
        map_free(&m->claims);
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    rk_store_base_init(&m->base, &mem_ops, 0);
    return &m->base;
}
