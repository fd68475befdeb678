/* SPDX-License-Identifier: Apache-2.0 */
/* In-process store: the session-name registry, one map per sandbox (name ->
 * "s:<session id>" or "r:<token>:<deadline ms>"). Owns reserving a name, committing or
 * rolling back the reservation, and reading, removing, clearing and counting mappings. */
#include "store/store_memory_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The session map of a sandbox, optionally created (caller holds the lock). */
static struct mem_map *sessions_of(struct mem_store *m, const char *sandbox_id, bool create)
{
    struct mem_ent *e = rkm_map_find(&m->sessions, sandbox_id);
    if (e || !create)
        return e ? e->val : NULL;
    struct mem_map *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    if (rkm_map_init(s, free) != 0) {
        free(s);
        return NULL;
    }
    if (rkm_map_put(&m->sessions, sandbox_id, s) != 0)
        return NULL;
    return s;
}

/* Delete a name and drop the sandbox's map when it becomes empty. */
static void session_del(struct mem_store *m, const char *sandbox_id, struct mem_map *s,
                        const char *name)
{
    rkm_map_del(s, name);
    if (s->count == 0)
        rkm_map_del(&m->sessions, sandbox_id);
}

/* Reserve a name unless it is committed or reserved by a live reservation. */
rk_store_rc rkm_reserve(struct rk_store *st, const char *sandbox_id, const char *name, int ttl_s,
                        const char *token, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    int64_t now = rk_store_now_ms();
    struct mem_map *s = sessions_of(m, sandbox_id, true);
    struct mem_ent *e = s ? rkm_map_find(s, name) : NULL;
    if (!s) {
        rc = rkm_oom(err, errlen);
    } else if (e && rk_store_value_blocks(e->val, now)) {
        rc = RK_STORE_EXISTS;
    } else {
        char *v = rk_store_reservation_value(token, now + (int64_t)ttl_s * 1000);
        if (!v || rkm_map_put(s, name, v) != 0) {
            if (s->count == 0)
                rkm_map_del(&m->sessions, sandbox_id);
            rc = rkm_oom(err, errlen);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Replace our reservation with a committed mapping. */
rk_store_rc rkm_commit(struct rk_store *st, const char *sandbox_id, const char *name,
                       const char *token, const char *session_id, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    struct mem_ent *e = s ? rkm_map_find(s, name) : NULL;
    if (!e || !rk_store_value_is_reservation_of(e->val, token)) {
        rc = RK_STORE_CONFLICT;
    } else {
        char *v = rk_store_session_value(session_id);
        if (!v) {
            rc = rkm_oom(err, errlen);
        } else {
            free(e->val);
            e->val = v;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Delete our reservation. */
rk_store_rc rkm_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                         const char *token, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    struct mem_ent *e = s ? rkm_map_find(s, name) : NULL;
    if (!e || !rk_store_value_is_reservation_of(e->val, token))
        rc = RK_STORE_CONFLICT;
    else
        session_del(m, sandbox_id, s, name);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Look up a committed mapping. */
rk_store_rc rkm_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                            char **session_id_out, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_NOT_FOUND;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    struct mem_ent *e = s ? rkm_map_find(s, name) : NULL;
    if (e && strncmp(e->val, "s:", 2) == 0) {
        *session_id_out = strdup((char *)e->val + 2);
        rc = *session_id_out ? RK_STORE_OK : rkm_oom(err, errlen);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Remove a mapping only if it points at expected. */
rk_store_rc rkm_session_remove(struct rk_store *st, const char *sandbox_id, const char *name,
                               const char *expected, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    struct mem_ent *e = s ? rkm_map_find(s, name) : NULL;
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
rk_store_rc rkm_session_clear(struct rk_store *st, const char *sandbox_id, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    rkm_map_del(&m->sessions, sandbox_id);
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

/* Count the mappings of a sandbox. */
rk_store_rc rkm_session_count(struct rk_store *st, const char *sandbox_id, size_t *n_out, char *err,
                              size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    *n_out = s ? s->count : 0;
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}
