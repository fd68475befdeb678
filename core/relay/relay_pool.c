/* SPDX-License-Identifier: Apache-2.0 */
/* Handle pool and worker-thread cache of the HTTP relay (see relay_pool.h). */
#include "relay/relay_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "rkcurlpool.h"

/* ---- easy handles per origin -------------------------------------------------------------- */

/* The handles live in librkutil's pool (the plugin uses the same one), keyed by
 * the scheme://host[:port] of the URL. Created on first use; never freed (the
 * shutdown cleans up the idle handles). */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static struct rku_curl_pool *pool;

/* pthread_once: create the relay's pool with its bounds. */
static void pool_create(void)
{
    pool = rku_curl_pool_new(RK_RELAY_POOL_TOTAL, RK_RELAY_POOL_PER_ORIGIN);
}

/* The relay's pool (NULL on OOM: handles are then created and cleaned up each time). */
static struct rku_curl_pool *relay_pool(void)
{
    pthread_once(&pool_once, pool_create);
    return pool;
}

CURL *rk_relay_curl_get(const char *url)
{
    char origin[RKU_CURL_KEY_MAX];
    if (rku_curl_origin(url, origin) != 0)
        return curl_easy_init();
    return rku_curl_pool_get(relay_pool(), origin);
}

void rk_relay_curl_put(const char *url, CURL *c, int reusable)
{
    char origin[RKU_CURL_KEY_MAX];
    if (rku_curl_origin(url, origin) != 0)
        reusable = 0;
    rku_curl_pool_put(relay_pool(), origin, c, reusable);
}

/* ---- worker threads ------------------------------------------------------------------------ */

struct job {
    void (*fn)(void *);
    void *arg;
};

static pthread_mutex_t w_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t w_cv = PTHREAD_COND_INITIALIZER;
static struct job w_queue[RK_RELAY_IDLE_WORKERS];
static size_t w_queued;
static size_t w_idle; /* workers waiting for a job */
static int w_stop;

/* A worker: run its first job, then wait (bounded) for more. */
static void *worker_main(void *arg)
{
    struct job j = *(struct job *)arg;
    free(arg);
    for (;;) {
        j.fn(j.arg);
        pthread_mutex_lock(&w_mu);
        if (w_stop || w_idle >= RK_RELAY_IDLE_WORKERS) {
            pthread_mutex_unlock(&w_mu);
            return NULL;
        }
        w_idle++;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += RK_RELAY_WORKER_IDLE_MS / 1000;
        int timed_out = 0;
        while (!w_queued && !w_stop && !timed_out)
            timed_out = pthread_cond_timedwait(&w_cv, &w_mu, &ts) != 0;
        w_idle--;
        if (!w_queued) {
            pthread_mutex_unlock(&w_mu);
            return NULL;
        }
        j = w_queue[--w_queued];
        pthread_mutex_unlock(&w_mu);
    }
}

int rk_relay_run(void (*fn)(void *), void *arg, size_t stack_bytes)
{
    pthread_mutex_lock(&w_mu);
    if (!w_stop && w_idle > w_queued && w_queued < RK_RELAY_IDLE_WORKERS) {
        w_queue[w_queued++] = (struct job){fn, arg};
        pthread_cond_signal(&w_cv);
        pthread_mutex_unlock(&w_mu);
        return 0;
    }
    pthread_mutex_unlock(&w_mu);
    struct job *j = malloc(sizeof *j);
    if (!j)
        return -1;
    *j = (struct job){fn, arg};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, stack_bytes);
    pthread_t tid;
    int rc = pthread_create(&tid, &attr, worker_main, j);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(j);
        return -1;
    }
    return 0;
}

void rk_relay_pool_shutdown(void)
{
    pthread_mutex_lock(&w_mu);
    w_stop = 1;
    pthread_cond_broadcast(&w_cv);
    pthread_mutex_unlock(&w_mu);
    rku_curl_pool_clear(relay_pool());
}
