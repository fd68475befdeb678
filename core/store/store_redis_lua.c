/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store: the Lua scripts (each runs atomically in Redis) and the digests learnt with
 * SCRIPT LOAD, so a script's text crosses the wire once per server (store_redis_cmd.c sends
 * EVAL as EVALSHA). The callers name the scripts' KEYS and ARGV. */
#include "store/store_redis_internal.h"

#include <pthread.h>
#include <string.h>

/* Create a record unless its id is active. KEYS: record, active, expire, bycreated,
 * state:pending, state:running; ARGV: id, JSON, "1" if active, idle deadline (0 = none),
 * TTL s (0 = none), list key, state. 1 if written, 0 if the id is active. */
const char rkr_lua_create[] = RKR_LUA_CREATE_FN "return create(KEYS, ARGV)\n";

/* Undo our create (KEYS as rkr_lua_create) if the record is still exactly what we
 * wrote (ARGV[2]); used when replicas did not confirm it. */
const char rkr_lua_uncreate[] = "if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end\n"
                                "redis.call('DEL', KEYS[1])\n"
                                "redis.call('SREM', KEYS[2], ARGV[1])\n"
                                "redis.call('ZREM', KEYS[3], ARGV[1])\n"
                                "redis.call('ZREM', KEYS[4], ARGV[3])\n"
                                "redis.call('SREM', KEYS[5], ARGV[1])\n"
                                "redis.call('SREM', KEYS[6], ARGV[1])\n"
                                "return 1\n";

/* Turn our unconfirmed commit (ARGV[2], the "s:" value of name ARGV[1]) back
 * into our reservation, already expired ("r:<token ARGV[3]>:0"): the caller's
 * rollback then removes it, and nobody is blocked if it does not. */
const char rkr_lua_uncommit[] =
    "if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end\n"
    "redis.call('HSET', KEYS[1], ARGV[1], 'r:' .. ARGV[3] .. ':0')\n"
    "return 1\n";

/* Index the given active ids (ARGV[2..]) under prefix ARGV[1] in bycreated
 * and the per-state sets; ids no longer active are skipped. */
const char rkr_lua_reindex[] =
    "local p = ARGV[1]\n"
    "for i = 2, #ARGV do\n"
    "  local id = ARGV[i]\n"
    "  local v = redis.call('GET', p .. 'sandbox:' .. id)\n"
    "  if v and redis.call('SISMEMBER', p .. 'active', id) == 1 then\n"
    "    local ok, rec = pcall(cjson.decode, v)\n"
    "    if ok and type(rec) == 'table' then\n"
    "      local t = rec['create_time']\n"
    "      if type(t) ~= 'string' then t = '' end\n"
    "      redis.call('ZADD', p .. 'bycreated', 0, t .. '\\1' .. id)\n"
    "      if rec['state'] == 'pending' then redis.call('SADD', p .. 'state:pending', id)\n"
    "      else redis.call('SADD', p .. 'state:running', id) end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return 1\n";

/* Set the idle deadline ARGV[2] (0 = none) of id ARGV[1] if it is in the active set KEYS[1]
 * (KEYS[2]: expire). 1 if it is active. */
const char rkr_lua_touch[] =
    "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
    "if tonumber(ARGV[2]) > 0 then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])\n"
    "else redis.call('ZREM', KEYS[2], ARGV[1]) end\n"
    "return 1\n";

/* Reserve name ARGV[1] in the session hash KEYS[1] for token ARGV[2] for ARGV[3] ms of Redis
 * TIME, unless it is committed or held by a live reservation. 1 if reserved. */
const char rkr_lua_reserve[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
    "if v then\n"
    "  if string.sub(v, 1, 2) ~= 'r:' then return 0 end\n"
    "  local d = string.match(v, '^r:.*:(%d+)$')\n"
    "  if not d or tonumber(d) > now then return 0 end\n"
    "end\n"
    "redis.call('HSET', KEYS[1], ARGV[1],\n"
    "  'r:' .. ARGV[2] .. ':' .. string.format('%d', now + tonumber(ARGV[3])))\n"
    "return 1\n";

/* If name ARGV[1] holds token ARGV[2]'s reservation, replace it with ARGV[3] (delete it when
 * ARGV[3] is empty). 1 if done, 0 if the reservation is no longer ours. */
const char rkr_lua_commit[] = "local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
                              "local mine = 'r:' .. ARGV[2] .. ':'\n"
                              "if not v or string.sub(v, 1, #mine) ~= mine then return 0 end\n"
                              "if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[1])\n"
                              "else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end\n"
                              "return 1\n";

/* Delete name ARGV[1] if it maps to ARGV[2]: 1 deleted, 0 it maps to another value, -1 no
 * mapping. */
/* Every value of a session hash, and the hash deleted (one atomic step). */
const char rkr_lua_take_all[] = "local v = redis.call('HVALS', KEYS[1])\n"
                                "redis.call('DEL', KEYS[1])\n"
                                "return v\n";

const char rkr_lua_remove[] = "local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
                              "if not v then return -1 end\n"
                              "if v ~= ARGV[2] then return 0 end\n"
                              "redis.call('HDEL', KEYS[1], ARGV[1])\n"
                              "return 1\n";

/* Raise the idle deadline of id ARGV[1] to ARGV[2] if it is in the active set KEYS[1] and the
 * deadline in KEYS[2] (expire) is earlier or absent: a read's touch where ZADD XX GT cannot do
 * it (no deadline to update, or a server before Redis 6.2). 1 if raised. */
const char rkr_lua_touch_later[] =
    "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
    "local s = redis.call('ZSCORE', KEYS[2], ARGV[1])\n"
    "if s and tonumber(s) >= tonumber(ARGV[2]) then return 0 end\n"
    "redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])\n"
    "return 1\n";

/* Take or renew a lease: set when free or already ours, with a TTL in ms. */
const char rkr_lua_lease[] = "local v = redis.call('GET', KEYS[1])\n"
                             "if v and v ~= ARGV[1] then return 0 end\n"
                             "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
                             "return 1\n";

/* Script digests learnt with SCRIPT LOAD, keyed by the script text's address (scripts are
 * static constants). */
#define SCRIPT_CACHE_MAX 32
static struct {
    const char *script;
    char sha[41];
} script_cache[SCRIPT_CACHE_MAX];
static int script_cache_len;
static pthread_mutex_t script_cache_mu = PTHREAD_MUTEX_INITIALIZER;

/* The SHA1 of script if it was learnt already: 0 and sha filled, else -1. */
int rkr_script_sha_known(const char *script, char sha[41])
{
    int found = -1;
    pthread_mutex_lock(&script_cache_mu);
    for (int i = 0; i < script_cache_len && found != 0; i++)
        if (script_cache[i].script == script) {
            memcpy(sha, script_cache[i].sha, 41);
            found = 0;
        }
    pthread_mutex_unlock(&script_cache_mu);
    return found;
}

/* The SHA1 of script (SCRIPT LOAD on first use); 0 and sha filled, -1 to fall back to EVAL. */
int rkr_script_sha(struct rop *op, const char *script, char sha[41])
{
    if (rkr_script_sha_known(script, sha) == 0)
        return 0;
    redisReply *r = redisCommand(op->c, "SCRIPT LOAD %s", script);
    if (!r) {
        op->broken = true;
        return -1;
    }
    int ok = r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok) {
        memcpy(sha, r->str, 40);
        sha[40] = '\0';
        pthread_mutex_lock(&script_cache_mu);
        if (script_cache_len < SCRIPT_CACHE_MAX) {
            script_cache[script_cache_len].script = script;
            memcpy(script_cache[script_cache_len].sha, sha, 41);
            script_cache_len++;
        }
        pthread_mutex_unlock(&script_cache_mu);
    }
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Forget every digest (the server answered NOSCRIPT: restarted or SCRIPT FLUSH). */
void rkr_script_forget(void)
{
    pthread_mutex_lock(&script_cache_mu);
    script_cache_len = 0;
    pthread_mutex_unlock(&script_cache_mu);
}
