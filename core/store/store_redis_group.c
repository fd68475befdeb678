/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Redis store: single record updates that arrive together are written together (a group
 * commit). Each update on its own costs two round trips (WATCH + GET + ZSCORE, then the MULTI
 * block), and a create burst makes hundreds of them at once: the create workers record each
 * backend reply, the reconciler and the requests record what they saw. Here an update is
 * written at once while fewer than GROUP_WRITERS batches are being written; otherwise it
 * waits, and the next writer takes every update waiting (GROUP_BATCH at most) into one batch:
 * their records read in one round trip, written in one MULTI block (rkr_update_batch; a batch
 * whose records changed meanwhile is redone update by update). A batch holds one update per
 * record, and no record of a batch being written: two updates of one record in one block would
 * both start from the same stored record (the second write dropping the first's change), and
 * two batches sharing a record would make one of them redo every update alone. An update alone
 * is never delayed, and each caller still gets its own outcome and failure text.
 *
 * The callback of an update may run on another caller's thread (the writer of its batch); the
 * store's callbacks are side-effect free apart from their own context, which stays valid since
 * its caller waits for the outcome. Updates that ask for the written record (out) are written
 * on their own.
 */
#include "store/store_redis_internal.h"

#include "base/util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Batches written at once: the first updates of a burst go out without waiting, the rest
 * gather behind them. */
#define GROUP_WRITERS 4
/* Most updates in one batch (the records read in one pipeline, written in one block). */
#define GROUP_BATCH 64

/* One waiting update, on its caller's stack. */
struct rkr_group_entry {
    const char *id;
    uint64_t h; /* rk_hash_str(id) */
    rk_store_update_fn fn;
    void *ctx;
    rk_store_rc rc;
    bool done;
    bool flying; /* in a batch being written */
    char err[RK_STORE_ERRLEN];
    struct rkr_group_entry *next;     /* the queue */
    struct rkr_group_entry *fly_next; /* the batches being written */
};

int rkr_group_init(struct redis_store *rs)
{
    if (pthread_mutex_init(&rs->group_mu, NULL) != 0)
        return -1;
    if (pthread_cond_init(&rs->group_cv, NULL) != 0) {
        pthread_mutex_destroy(&rs->group_mu);
        return -1;
    }
    rs->group_head = rs->group_tail = rs->group_flying = NULL;
    rs->group_writers = 0;
    return 0;
}

void rkr_group_destroy(struct redis_store *rs)
{
    pthread_cond_destroy(&rs->group_cv);
    pthread_mutex_destroy(&rs->group_mu);
}

/* rk_store_update_fn of a batch: the entry's own callback. */
static int entry_update(json_object *rec, void *arg)
{
    struct rkr_group_entry *e = arg;
    return e->fn(rec, e->ctx);
}

/* Write the batch b[0..n) (no lock held). */
static void write_batch(struct redis_store *rs, struct rkr_group_entry **b, size_t n)
{
    char(*errs)[RK_STORE_ERRLEN] = n > 1 ? calloc(n, sizeof *errs) : NULL;
    if (!errs) { /* one update, or no memory for more: each on its own */
        for (size_t i = 0; i < n; i++)
            b[i]->rc = rkr_update_one(&rs->base, b[i]->id, b[i]->fn, b[i]->ctx, NULL, b[i]->err,
                                      sizeof b[i]->err);
        return;
    }
    const char *ids[GROUP_BATCH];
    void *ctxs[GROUP_BATCH];
    rk_store_rc rcs[GROUP_BATCH];
    char err[RK_STORE_ERRLEN] = "";
    for (size_t i = 0; i < n; i++) {
        ids[i] = b[i]->id;
        ctxs[i] = b[i];
    }
    rkr_update_batch(&rs->base, ids, n, NULL, entry_update, ctxs, rcs, errs, err, sizeof err);
    for (size_t i = 0; i < n; i++) {
        b[i]->rc = rcs[i];
        if (rcs[i] != RK_STORE_OK)
            memcpy(b[i]->err, errs[i], sizeof b[i]->err);
    }
    free(errs);
}

/* 1 when e's record is among b[0..n) or in a batch being written. */
static int record_taken(const struct redis_store *rs, struct rkr_group_entry *const *b, size_t n,
                        const struct rkr_group_entry *e)
{
    for (size_t i = 0; i < n; i++)
        if (b[i]->h == e->h && strcmp(b[i]->id, e->id) == 0)
            return 1;
    for (const struct rkr_group_entry *f = rs->group_flying; f; f = f->fly_next)
        if (f->h == e->h && strcmp(f->id, e->id) == 0)
            return 1;
    return 0;
}

/* Take the oldest waiting updates into b (under group_mu): at most GROUP_BATCH, none of a
 * record already taken (see the top), and mark them flying. The number taken (0: every waiting
 * update is of a record being written). */
static size_t take_batch(struct redis_store *rs, struct rkr_group_entry **b)
{
    size_t n = 0;
    struct rkr_group_entry **link = &rs->group_head, *last = NULL;
    while (*link && n < GROUP_BATCH) {
        struct rkr_group_entry *e = *link;
        if (record_taken(rs, b, n, e)) {
            last = e;
            link = &e->next;
            continue;
        }
        *link = e->next; /* out of the queue */
        b[n++] = e;
    }
    if (!*link) /* the queue's end was reached: its last kept entry is the tail */
        rs->group_tail = last;
    for (size_t i = 0; i < n; i++) {
        b[i]->flying = true;
        b[i]->fly_next = rs->group_flying;
        rs->group_flying = b[i];
    }
    return n;
}

/* The batch b[0..n) is written (under group_mu): off the flying list, and done; from then on
 * an entry's caller may return, and its stack go. */
static void batch_done(struct redis_store *rs, struct rkr_group_entry **b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i]->flying = false;
    struct rkr_group_entry **link = &rs->group_flying;
    while (*link) {
        if (!(*link)->flying)
            *link = (*link)->fly_next;
        else
            link = &(*link)->fly_next;
    }
    for (size_t i = 0; i < n; i++)
        b[i]->done = true;
}

rk_store_rc rkr_update(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                       json_object **out, char *err, size_t errlen)
{
    if (out)
        return rkr_update_one(st, id, fn, ctx, out, err, errlen);
    struct redis_store *rs = rkr_store(st);
    struct rkr_group_entry me = {
        .id = id, .h = rk_hash_str(id), .fn = fn, .ctx = ctx, .rc = RK_STORE_ERROR};
    pthread_mutex_lock(&rs->group_mu);
    if (rs->group_tail)
        rs->group_tail->next = &me;
    else
        rs->group_head = &me;
    rs->group_tail = &me;
    while (!me.done) {
        struct rkr_group_entry *b[GROUP_BATCH];
        size_t n = rs->group_writers < GROUP_WRITERS && rs->group_head ? take_batch(rs, b) : 0;
        if (!n) { /* writers busy, or what waits is of records being written */
            pthread_cond_wait(&rs->group_cv, &rs->group_mu);
            continue;
        }
        /* Write the oldest waiting updates (ours among them, or ahead of it). */
        rs->group_writers++;
        pthread_mutex_unlock(&rs->group_mu);
        write_batch(rs, b, n);
        pthread_mutex_lock(&rs->group_mu);
        batch_done(rs, b, n);
        rs->group_writers--;
        pthread_cond_broadcast(&rs->group_cv);
    }
    pthread_mutex_unlock(&rs->group_mu);
    if (me.rc != RK_STORE_OK && errlen)
        snprintf(err, errlen, "%s", me.err);
    return me.rc;
}
