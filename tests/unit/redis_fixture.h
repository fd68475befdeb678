/* SPDX-License-Identifier: Apache-2.0 */
/* Test fixture: a throw-away redis-server on a free 127.0.0.1 port. */
#ifndef RK_REDIS_FIXTURE_H
#define RK_REDIS_FIXTURE_H

#include <stddef.h>
#include <sys/types.h>

/** A running (or stopped) redis-server started by the tests. */
struct rk_redis_fixture {
    pid_t pid;         /* 0 when not running */
    int port;          /* kept across stop/start so a restart reuses it */
    char password[64]; /* "" for none */
    char username[64]; /* ACL user for the readiness PING; "" = default user */
    char conf[128];    /* sentinel config file, removed by stop; "" = none */
};

/** Start redis-server (port 0 = pick a free one; password NULL = none) and
 *  wait until it answers PING. Returns 0, or -1 with msg filled. */
int rk_redis_fixture_start(struct rk_redis_fixture *fx, int port, const char *password, char *msg,
                           size_t msglen);

/** Like rk_redis_fixture_start, with extra redis-server arguments (a
 *  NULL-terminated list, e.g. {"--replicaof", "127.0.0.1", "6379", NULL});
 *  fx->username, when set before the call, is used for the readiness PING. */
int rk_redis_fixture_start_ex(struct rk_redis_fixture *fx, int port, const char *password,
                              const char *const *extra, char *msg, size_t msglen);

/** Start a Sentinel (redis-server --sentinel) monitoring master_name at
 *  127.0.0.1:master_port with quorum 1; waits until it answers PING. */
int rk_redis_fixture_start_sentinel(struct rk_redis_fixture *fx, int master_port,
                                    const char *master_name, char *msg, size_t msglen);

/** Like rk_redis_fixture_start_sentinel, with an ACL user (the default user
 *  off) that clients must AUTH as. */
int rk_redis_fixture_start_sentinel_acl(struct rk_redis_fixture *fx, int master_port,
                                        const char *master_name, const char *user,
                                        const char *password, char *msg, size_t msglen);

/** Kill the server (SIGKILL) and reap it; safe to call twice. */
void rk_redis_fixture_stop(struct rk_redis_fixture *fx);

#endif /* RK_REDIS_FIXTURE_H */
