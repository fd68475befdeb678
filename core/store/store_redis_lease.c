/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store: claims, leases and the reconciler's mark. Owns the short-lived claims
 * (SET NX EX), the lease one process holds to run the reconciler (Lua, renewed by its
 * owner) and the mark the reconciler leaves for readers of get_touch. */
#include "store/store_redis_internal.h"

#include <stdio.h>

/* SET <p>claim:<name> 1 NX EX ttl. */
rk_store_rc rkr_claim(struct rk_store *st, const char *name, int ttl_s, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX], ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_s);
    struct cmd c;
    redisReply *r = NULL;
    rkr_cmd_build(&c, "SET", rkr_key_of(rs, k, "claim:", name), "1", "NX", "EX", ttl,
                  (const char *)NULL);
    rk_store_rc rc = rkr_run(rs, &c, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    rc = r->type == REDIS_REPLY_NIL ? RK_STORE_EXISTS : RK_STORE_OK;
    freeReplyObject(r);
    return rc;
}

/* SET <p>lease:<name> owner PX ttl when free or ours (one script). */
rk_store_rc rkr_lease(struct rk_store *st, const char *name, const char *owner, int ttl_ms,
                      char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX], ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms > 0 ? ttl_ms : 1);
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", rkr_lua_lease, "1", rkr_key_of(rs, k, "lease:", name), owner, ttl,
                  (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_int(rs, &c, &v, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : RK_STORE_EXISTS;
}

/* SET <p>reconcile_mark value. */
rk_store_rc rkr_set_mark(struct rk_store *st, const char *value, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX], v[RK_STORE_MARK_MAX];
    snprintf(v, sizeof v, "%s", value);
    struct cmd c;
    redisReply *r = NULL;
    rkr_cmd_build(&c, "SET", rkr_key_of(rs, k, "reconcile_mark", NULL), v, (const char *)NULL);
    rk_store_rc rc = rkr_run(rs, &c, &r, err, errlen);
    freeReplyObject(r);
    return rc;
}
