/* SPDX-License-Identifier: Apache-2.0 */
/* In-process store: the create queue (store.h). Two doubly linked lists — queued entries in
 * enqueue order and claimed ones — and an id index over both. One process uses it, so the
 * owner rules matter only for symmetry with Redis; they are kept so both backends behave
 * alike. */
#include "store/store_memory_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rkm_cq_keep(void *v)
{
    (void)v;
}

/* Unlink e from l. */
static void list_del(struct cq_list *l, struct cq_ent *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        l->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = NULL;
    l->n--;
}

/* Append e to l. */
static void list_append(struct cq_list *l, struct cq_ent *e)
{
    e->next = NULL;
    e->prev = l->tail;
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
    l->n++;
}

/* Insert e into the queue in enqueue order (from the tail: new entries are the newest). */
static void queue_insert(struct cq_list *l, struct cq_ent *e)
{
    struct cq_ent *after = l->tail;
    while (after && after->enqueued_ms > e->enqueued_ms)
        after = after->prev;
    if (!after) {
        e->prev = NULL;
        e->next = l->head;
        if (l->head)
            l->head->prev = e;
        else
            l->tail = e;
        l->head = e;
        l->n++;
        return;
    }
    e->prev = after;
    e->next = after->next;
    if (after->next)
        after->next->prev = e;
    else
        l->tail = e;
    after->next = e;
    l->n++;
}

static void free_list(struct cq_list *l)
{
    while (l->head) {
        struct cq_ent *e = l->head;
        l->head = e->next;
        free(e);
    }
    l->tail = NULL;
    l->n = 0;
}

void rkm_cq_free(struct mem_store *m)
{
    rkm_map_free(&m->cq_index);
    free_list(&m->cq_queued);
    free_list(&m->cq_claimed);
}

static struct cq_ent *find(struct mem_store *m, const char *id)
{
    struct mem_ent *me = rkm_map_find(&m->cq_index, id);
    return me ? me->val : NULL;
}

rk_store_rc rkm_cq_push(struct rk_store *st, const char *id, const char *owner, int64_t now_ms,
                        long long max, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    if (find(m, id)) {
        pthread_mutex_unlock(&m->mu);
        return RK_STORE_OK;
    }
    if ((long long)(m->cq_queued.n + m->cq_claimed.n) >= max) {
        pthread_mutex_unlock(&m->mu);
        return RK_STORE_FULL;
    }
    size_t len = strlen(id);
    struct cq_ent *e = calloc(1, sizeof *e + len + 1);
    if (!e) {
        rc = rkm_oom(err, errlen);
    } else {
        memcpy(e->id, id, len + 1);
        snprintf(e->owner, sizeof e->owner, "%s", owner);
        e->enqueued_ms = now_ms;
        if (rkm_map_put(&m->cq_index, id, e) != 0) {
            free(e);
            rc = rkm_oom(err, errlen);
        } else {
            queue_insert(&m->cq_queued, e);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* The record, then its create: one process owns the in-process store, so nothing can come
 * between the two that would outlive it. */
rk_store_rc rkm_cq_create(struct rk_store *st, const char *id, json_object *rec,
                          int64_t expire_time, const char *owner, int64_t now_ms, long long max,
                          char *err, size_t errlen)
{
    rk_store_rc rc = rkm_create(st, id, rec, expire_time, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return rkm_cq_push(st, id, owner, now_ms, max, err, errlen);
}

/* Done (release 0) or released back to the queue (release 1), under m->mu. */
static rk_store_rc finish_locked(struct mem_store *m, const char *id, const char *owner,
                                 int release)
{
    rk_store_rc rc = RK_STORE_CONFLICT;
    struct cq_ent *e = find(m, id);
    if (e && e->claimed_until && strcmp(e->owner, owner) == 0) {
        list_del(&m->cq_claimed, e);
        if (release) {
            e->claimed_until = 0;
            e->owner[0] = '\0';
            queue_insert(&m->cq_queued, e);
        } else {
            rkm_map_del(&m->cq_index, id);
            free(e);
        }
        rc = RK_STORE_OK;
    }
    return rc;
}

/* Done (release 0) or released back to the queue (release 1). */
static rk_store_rc finish(struct rk_store *st, const char *id, const char *owner, int release)
{
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    rk_store_rc rc = finish_locked(m, id, owner, release);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

rk_store_rc rkm_cq_claim(struct rk_store *st, const struct rk_createq_claim *c,
                         struct rk_createq_item **items_out, size_t *n_out, size_t *requeued_out,
                         char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    /* The owner's finished creates. Their places are free for this claim: one process uses this
     * store, so there is no other admin to share the concurrency with (the Redis store caps an
     * owner at its share while other owners have creates queued). */
    for (size_t i = 0; i < c->n_done; i++)
        finish_locked(m, c->done[i], c->owner, 0);
    /* Expired claims go back to the queue with their enqueue time. */
    size_t requeued = 0;
    for (struct cq_ent *e = m->cq_claimed.head, *next; e; e = next) {
        next = e->next;
        if (e->claimed_until > c->now_ms)
            continue;
        list_del(&m->cq_claimed, e);
        e->claimed_until = 0;
        e->owner[0] = '\0'; /* anyone's now */
        e->retaken = 1;
        queue_insert(&m->cq_queued, e);
        requeued++;
    }
    if (requeued_out)
        *requeued_out = requeued;
    size_t want = c->want;
    long long room = (long long)c->concurrency - (long long)m->cq_claimed.n;
    if (room < (long long)want)
        want = room > 0 ? (size_t)room : 0;
    int64_t sec = c->now_ms / 1000;
    if (c->rate > 0) {
        if (m->cq_rate_sec != sec) {
            m->cq_rate_sec = sec;
            m->cq_rate_used = 0;
        }
        long long left = (long long)c->rate - m->cq_rate_used;
        if (left < (long long)want)
            want = left > 0 ? (size_t)left : 0;
    }
    struct rk_createq_item *items = want ? calloc(want, sizeof *items) : NULL;
    if (want && !items) {
        pthread_mutex_unlock(&m->mu);
        return rkm_oom(err, errlen);
    }
    size_t n = 0;
    int64_t cutoff = c->now_ms - c->steal_after_ms;
    for (struct cq_ent *e = m->cq_queued.head, *next; e && n < want; e = next) {
        next = e->next;
        if (strcmp(e->owner, c->owner) != 0 && e->enqueued_ms > cutoff)
            continue; /* another admin's (or nobody's), not waited long enough */
        char *id = strdup(e->id);
        if (!id)
            break;
        list_del(&m->cq_queued, e);
        e->claimed_until = c->now_ms + c->lease_ms;
        snprintf(e->owner, sizeof e->owner, "%s", c->owner);
        list_append(&m->cq_claimed, e);
        items[n].id = id;
        items[n].enqueued_ms = e->enqueued_ms;
        items[n].retaken = e->retaken;
        items[n].rec = rkm_record_copy_locked(m, e->id);
        n++;
    }
    if (c->rate > 0)
        m->cq_rate_used += (int)n;
    pthread_mutex_unlock(&m->mu);
    if (n == 0) {
        free(items);
        items = NULL;
    }
    *items_out = items;
    *n_out = n;
    return RK_STORE_OK;
}

rk_store_rc rkm_cq_renew(struct rk_store *st, const char *owner, int64_t deadline_ms, size_t *n_out,
                         char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    size_t n = 0;
    pthread_mutex_lock(&m->mu);
    for (struct cq_ent *e = m->cq_claimed.head; e; e = e->next)
        if (strcmp(e->owner, owner) == 0) {
            e->claimed_until = deadline_ms;
            n++;
        }
    pthread_mutex_unlock(&m->mu);
    if (n_out)
        *n_out = n;
    return RK_STORE_OK;
}

rk_store_rc rkm_cq_done(struct rk_store *st, const char *id, const char *owner, char *err,
                        size_t errlen)
{
    (void)err;
    (void)errlen;
    return finish(st, id, owner, 0);
}

rk_store_rc rkm_cq_release(struct rk_store *st, const char *id, const char *owner, char *err,
                           size_t errlen)
{
    (void)err;
    (void)errlen;
    return finish(st, id, owner, 1);
}

rk_store_rc rkm_cq_cancel(struct rk_store *st, const char *id, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_NOT_FOUND;
    pthread_mutex_lock(&m->mu);
    struct cq_ent *e = find(m, id);
    if (e && !e->claimed_until) {
        list_del(&m->cq_queued, e);
        rkm_map_del(&m->cq_index, id);
        free(e);
        rc = RK_STORE_OK;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

rk_store_rc rkm_cq_where(struct rk_store *st, const char *id, int *where_out, char *err,
                         size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    struct cq_ent *e = find(m, id);
    *where_out = !e ? 0 : e->claimed_until ? 2 : 1;
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

rk_store_rc rkm_cq_depth(struct rk_store *st, size_t *queued_out, size_t *claimed_out, char *err,
                         size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    *queued_out = m->cq_queued.n;
    *claimed_out = m->cq_claimed.n;
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}
