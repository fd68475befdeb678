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

/* The entry of name in the sandbox's session map (the map in *s_out), or NULL when either is
 * missing (caller holds the lock). */
static struct mem_ent *session_find(struct mem_store *m, const char *sandbox_id, const char *name,
                                    struct mem_map **s_out)
{
    *s_out = sessions_of(m, sandbox_id, false);
    return *s_out ? rkm_map_find(*s_out, name) : NULL;
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
    struct mem_map *s;
    struct mem_ent *e = session_find(m, sandbox_id, name, &s);
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

/* Delete name if its value is owner's: the reservation of token owner (a missing name is a
 * conflict), or the committed mapping to session id owner (a missing name is not found). */
static rk_store_rc delete_owned(struct rk_store *st, const char *sandbox_id, const char *name,
                                bool reservation, const char *owner)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s;
    struct mem_ent *e = session_find(m, sandbox_id, name, &s);
    const char *v = e ? e->val : NULL;
    if (!v)
        rc = reservation ? RK_STORE_CONFLICT : RK_STORE_NOT_FOUND;
    else if (reservation ? !rk_store_value_is_reservation_of(v, owner)
                         : strncmp(v, "s:", 2) != 0 || strcmp(v + 2, owner) != 0)
        rc = RK_STORE_CONFLICT;
    else
        session_del(m, sandbox_id, s, name);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Delete our reservation. */
rk_store_rc rkm_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                         const char *token, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    return delete_owned(st, sandbox_id, name, true, token);
}

/* Look up a committed mapping. */
rk_store_rc rkm_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                            char **session_id_out, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_NOT_FOUND;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s;
    struct mem_ent *e = session_find(m, sandbox_id, name, &s);
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
    return delete_owned(st, sandbox_id, name, false, expected);
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

/* Remove every mapping of a sandbox; hand back the committed session ids. */
rk_store_rc rkm_session_take_all(struct rk_store *st, const char *sandbox_id, char ***ids_out,
                                 size_t *n_out, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct mem_map *s = sessions_of(m, sandbox_id, false);
    size_t cap = s ? (s->count < RK_SESSION_TAKE_MAX ? s->count : RK_SESSION_TAKE_MAX) : 0;
    char **ids = calloc(cap ? cap : 1, sizeof *ids);
    size_t n = 0;
    if (!ids) {
        rc = rkm_oom(err, errlen);
    } else if (s) {
        for (size_t b = 0; b < s->nbuckets && n < cap; b++)
            for (struct mem_ent *e = s->buckets[b]; e && n < cap; e = e->next)
                if (strncmp(e->val, "s:", 2) == 0 && (ids[n] = strdup((char *)e->val + 2)))
                    n++;
        rkm_map_del(&m->sessions, sandbox_id);
    }
    pthread_mutex_unlock(&m->mu);
    *ids_out = ids;
    *n_out = n;
    return rc;
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
