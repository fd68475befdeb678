/* SPDX-License-Identifier: Apache-2.0 */
/* The application context shared by every request: config, plugin, store. */
#ifndef RK_APP_H
#define RK_APP_H

#include <pthread.h>

struct rk_config;
struct rk_plugin;
struct rk_store;

/** Everything a request handler may need. Created once at startup. */
struct rk_app {
    struct rk_config *cfg;
    struct rk_plugin *plugin;
    struct rk_store *store;
    void *http;           /* http_server private state */
    _Atomic int draining; /* SIGTERM received: /readyz fails, no new connections */
    _Atomic int stopping; /* in-flight requests are being cancelled */
    pthread_t sweeper;
    int sweeper_running;
};

/** Background create/lifecycle helpers run on detached threads; count them
 *  so shutdown can wait for them. */
void rk_app_bg_enter(void);
void rk_app_bg_leave(void);
/** Start fn(arg) on a detached thread (256 KiB stack) counted as a background
 *  job (rk_app_bg_enter; the job calls rk_app_bg_leave when it ends). 0 on
 *  success; on failure nothing is counted and fn never runs. */
int rk_app_bg_start(void *(*fn)(void *), void *arg);
/** Wait until no background job runs or deadline_ms (monotonic) passes. */
int rk_app_bg_wait(long long deadline_ms);

#endif /* RK_APP_H */
