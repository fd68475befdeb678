/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store (hiredis 0.14, plain Redis types). Key layout under a prefix p:
 *   <p>sandbox:<id>        string, the record's JSON text
 *   <p>active              set of active sandbox ids
 *   <p>expire              sorted set, active id -> idle deadline (epoch s)
 *   <p>claim:<name>        string with a TTL (SET NX EX)
 *   <p>sessions:<sandbox>  hash, name -> "s:<session id>" | "r:<token>:<deadline ms>"
 *   <p>bycreated           sorted set (all scores 0) of "<create_time>\x01<id>" of
 *                          active ids: list pages in list order with ZRANGE
 *   <p>state:pending|running  set per active state (counts for /metrics)
 *   <p>index:v2            marker: the two indexes above are complete (rebuilt
 *                          once from <p>active for data written before them)
 *   <p>createq...          the create queue (keys listed in store_redis_createq.c)
 * Record creation, the explicit touch and every registry change are Lua scripts
 * (atomic in Redis); a read's idle touch is ZADD XX GT (a script only where that
 * cannot do it); rk_store_update is WATCH/MULTI/EXEC with at most 5 attempts.
 * Connections come from a bounded pool; broken ones are freed and reconnection
 * is lazy with an exponential backoff shared by the pool.
 *
 * High availability: with sentinels configured the master's address comes
 * from SENTINEL get-master-addr-by-name (first sentinel that answers), every
 * new connection checks ROLE is "master", and the address is forgotten (so the
 * next connection asks the sentinels again) when a connection breaks, a reply
 * is -READONLY/-LOADING/-MASTERDOWN, or the ROLE check fails. With
 * min_replicas_ack > 0 the writes that matter are followed by WAIT on the same
 * connection (pipelined when the write is one command); fewer confirmations
 * than asked is an error. Records in state "deleted" are written with a TTL of
 * the deleted retention. get_many works in chunks of GET_CHUNK ids, one round
 * trip each.
 *
 * This file owns the store object: its settings (sentinels, ACL user, secrets,
 * WAIT), opening and closing it, PING and the ops table. The operations live
 * in the store_redis_*.c files listed in store_redis_internal.h. */
#include "store/store_redis_internal.h"
#include "obs/log.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Free the store, its contexts and settings. */
static void redis_close(struct rk_store *st)
{
    struct redis_store *rs = rkr_store(st);
    rkr_free_contexts(rs->idle, rs->n_idle);
    free(rs->idle);
    free(rs->host);
    if (rs->password) {
        explicit_bzero(rs->password, strlen(rs->password));
        free(rs->password);
    }
    if (rs->sentinel_password) {
        explicit_bzero(rs->sentinel_password, strlen(rs->sentinel_password));
        free(rs->sentinel_password);
    }
    free(rs->username);
    free(rs->sentinel_username);
    free(rs->master_name);
    free(rs->sentinels);
    pthread_mutex_destroy(&rs->mu);
    pthread_cond_destroy(&rs->cv);
    rkr_group_destroy(rs);
    free(rs);
}

/* PING the server. */
static rk_store_rc redis_ping(struct rk_store *st, char *err, size_t errlen)
{
    struct cmd c;
    redisReply *r = NULL;
    rkr_cmd_build(&c, "PING", (const char *)NULL);
    rk_store_rc rc = rkr_run(rkr_store(st), &c, &r, err, errlen);
    freeReplyObject(r);
    return rc;
}

static const struct rk_store_ops redis_ops = {
    .close = redis_close,
    .ping = redis_ping,
    .get = rkr_get,
    .get_many = rkr_get_many,
    .scan_many = rkr_scan_many,
    .create = rkr_create,
    .update = rkr_update,
    .update_many = rkr_update_many,
    .list_active = rkr_list_active,
    .list_jobs = rkr_list_jobs,
    .touch = rkr_touch,
    .expired = rkr_expired,
    .claim = rkr_claim,
    .reserve = rkr_reserve,
    .commit = rkr_commit,
    .rollback = rkr_rollback,
    .session_get = rkr_session_get,
    .session_remove = rkr_session_remove,
    .session_clear = rkr_session_clear,
    .session_take_all = rkr_session_take_all,
    .session_count = rkr_session_count,
    .get_touch = rkr_get_touch,
    .lease = rkr_lease,
    .set_mark = rkr_set_mark,
    .list_page = rkr_list_page,
    .count_states = rkr_count_states,
    .cq_push = rkr_cq_push,
    .cq_create = rkr_cq_create,
    .cq_claim = rkr_cq_claim,
    .cq_renew = rkr_cq_renew,
    .cq_done = rkr_cq_done,
    .cq_release = rkr_cq_release,
    .cq_cancel = rkr_cq_cancel,
    .cq_where = rkr_cq_where,
    .cq_depth = rkr_cq_depth,
    .reader_new = rkr_reader_new,
};

/* Parse "host:port,host:port" (IPv6 as [addr]:port) into rs->sentinels. */
static int parse_sentinels(struct redis_store *rs, const char *list)
{
    size_t cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    rs->sentinels = calloc(cap, sizeof *rs->sentinels);
    if (!rs->sentinels)
        return -1;
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *item = p, *end = p + len;
        p = *end ? end + 1 : end;
        while (item < end && (*item == ' ' || *item == '\t'))
            item++;
        while (end > item && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if (item == end)
            continue;
        const char *colon = end;
        while (colon > item && colon[-1] != ':')
            colon--;
        char *stop = NULL;
        long port = colon > item ? strtol(colon, &stop, 10) : 0;
        const char *h = item, *he = colon > item ? colon - 1 : item;
        if (he - h >= 2 && *h == '[' && he[-1] == ']') {
            h++;
            he--;
        }
        if (port < 1 || port > 65535 || stop != end || he <= h || he - h >= HOST_MAX) {
            rk_err("store: redis.sentinels: \"%.*s\" is not host:port", (int)(end - item), item);
            return -1;
        }
        struct sentinel_addr *sa = &rs->sentinels[rs->n_sentinels++];
        snprintf(sa->host, sizeof sa->host, "%.*s", (int)(he - h), h);
        sa->port = (int)port;
    }
    if (rs->n_sentinels == 0) {
        rk_err("store: redis.sentinels lists no sentinel");
        return -1;
    }
    return 0;
}

/* strdup of a non-empty string; NULL for NULL or "" (*fail set on OOM). */
static char *dup_opt(const char *s, int *fail)
{
    if (!s || !s[0])
        return NULL;
    char *d = strdup(s);
    if (!d)
        *fail = 1;
    return d;
}

/* Copy the HA settings (sentinels, ACL user, secrets, WAIT) into rs. */
static int apply_ha_settings(struct redis_store *rs, const struct rk_redis_cfg *cfg)
{
    int fail = 0;
    char msg[160];
    if (cfg->password_file && cfg->password_file[0]) {
        free(rs->password);
        rs->password = rk_store_read_secret_file(cfg->password_file, msg, sizeof msg);
        if (!rs->password) {
            rk_err("store: redis.password_file: %s", msg);
            return -1;
        }
    }
    rs->username = dup_opt(cfg->username, &fail);
    rs->sentinel_username = dup_opt(cfg->sentinel_username, &fail);
    rs->sentinel_password = dup_opt(cfg->sentinel_password, &fail);
    if (cfg->sentinel_password_file && cfg->sentinel_password_file[0]) {
        free(rs->sentinel_password);
        rs->sentinel_password =
            rk_store_read_secret_file(cfg->sentinel_password_file, msg, sizeof msg);
        if (!rs->sentinel_password) {
            rk_err("store: redis.sentinel_password_file: %s", msg);
            return -1;
        }
    }
    if (cfg->sentinels && cfg->sentinels[0]) {
        if (!cfg->master_name || !cfg->master_name[0]) {
            rk_err("store: redis.sentinels is set but redis.master_name is not");
            return -1;
        }
        rs->master_name = dup_opt(cfg->master_name, &fail);
        if (fail || parse_sentinels(rs, cfg->sentinels) != 0)
            return -1;
    }
    rs->min_replicas_ack = cfg->min_replicas_ack > 0 ? cfg->min_replicas_ack : 0;
    rs->wait_timeout_ms = cfg->wait_timeout_ms > 0 ? cfg->wait_timeout_ms : 1000;
    if (rs->min_replicas_ack > 0 && rs->wait_timeout_ms >= rs->op_timeout_ms) {
        /* the WAIT reply must arrive before the socket read gives up */
        rs->wait_timeout_ms = rs->op_timeout_ms / 2 > 0 ? rs->op_timeout_ms / 2 : 1;
        rk_warn("store: redis.wait_timeout_ms must be below redis.timeout_ms; using %d ms",
                rs->wait_timeout_ms);
    }
    return fail ? -1 : 0;
}

/* Open the Redis store; connections are made on first use. */
struct rk_store *rk_store_open_redis(const struct rk_redis_cfg *cfg)
{
    bool sentinel_mode = cfg && cfg->sentinels && cfg->sentinels[0];
    if (!cfg || (!sentinel_mode && (!cfg->host || !cfg->host[0]))) {
        rk_err("store: neither redis.host nor redis.sentinels is set");
        return NULL;
    }
    const char *prefix = cfg->key_prefix ? cfg->key_prefix : "rock:";
    if (strlen(prefix) > PREFIX_MAX) {
        rk_err("store: redis key prefix longer than %d characters", PREFIX_MAX);
        return NULL;
    }
    /* Writes to a closed Redis socket must fail with EPIPE, not kill the process: ignore
     * SIGPIPE once (unless the embedding program installed its own handler). */
    struct sigaction sa_old;
    if (sigaction(SIGPIPE, NULL, &sa_old) == 0 && sa_old.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    struct redis_store *rs = calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    rs->port = cfg->port > 0 ? cfg->port : 6379;
    rs->db = cfg->db;
    rs->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 2000;
    rs->op_timeout_ms = cfg->op_timeout_ms > 0 ? cfg->op_timeout_ms : 2000;
    rs->pool_size = cfg->pool_size > 0 ? cfg->pool_size : 16;
    snprintf(rs->prefix, sizeof rs->prefix, "%s", prefix);
    rs->host = strdup(cfg->host && cfg->host[0] ? cfg->host : "sentinel");
    snprintf(rs->cur_host, sizeof rs->cur_host, "%s", rs->host ? rs->host : "");
    rs->cur_port = rs->port;
    rs->password = cfg->password && cfg->password[0] ? strdup(cfg->password) : NULL;
    rs->idle = calloc((size_t)rs->pool_size, sizeof *rs->idle);
    pthread_mutex_init(&rs->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int cv_ok = pthread_cond_init(&rs->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (cv_ok && rkr_group_init(rs) != 0) {
        pthread_cond_destroy(&rs->cv);
        cv_ok = 0;
    }
    if (!cv_ok) {
        pthread_mutex_destroy(&rs->mu);
        free(rs->host);
        free(rs->password);
        free(rs->idle);
        free(rs);
        return NULL;
    }
    rk_store_base_init(&rs->base, &redis_ops, 1);
    if (!rs->host || (cfg->password && cfg->password[0] && !rs->password) || !rs->idle ||
        apply_ha_settings(rs, cfg) != 0) {
        redis_close(&rs->base);
        return NULL;
    }
    return &rs->base;
}
