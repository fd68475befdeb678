/* SPDX-License-Identifier: Apache-2.0 */
/* Handle pool and worker-thread cache of the HTTP relay (see relay_pool.h). */
#include "relay/relay_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- easy handles per origin -------------------------------------------------------------- */

struct pooled {
    char origin[256]; /* scheme://host[:port] */
    CURL *c;
};

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pooled pool[RK_RELAY_POOL_TOTAL];
static size_t pool_len;

/* The scheme://authority prefix of url into out; 0 if it fits. A plain cut:
 * url comes from rk_relay_build_url and is only a pool key here. */
static int origin_of(const char *url, char out[256])
{
    const char *p = strstr(url, "://");
    size_t n = p ? (size_t)(p + 3 - url) + strcspn(p + 3, "/?#") : strlen(url);
    if (n >= 256)
        return -1;
    memcpy(out, url, n);
    out[n] = '\0';
    return 0;
}

CURL *rk_relay_curl_get(const char *url)
{
    char origin[256];
    CURL *c = NULL;
    if (origin_of(url, origin) == 0) {
        pthread_mutex_lock(&pool_mu);
        for (size_t i = pool_len; i-- > 0;) { /* newest first: its connection is warmest */
            if (strcmp(pool[i].origin, origin) == 0) {
                c = pool[i].c;
                pool[i] = pool[--pool_len];
                break;
            }
        }
        pthread_mutex_unlock(&pool_mu);
    }
    return c ? c : curl_easy_init();
}

void rk_relay_curl_put(const char *url, CURL *c, int reusable)
{
    if (!c)
        return;
    char origin[256];
    if (reusable && origin_of(url, origin) == 0) {
        curl_easy_reset(c); /* keeps the live connections */
        pthread_mutex_lock(&pool_mu);
        size_t same = 0;
        for (size_t i = 0; i < pool_len; i++)
            same += strcmp(pool[i].origin, origin) == 0;
        if (pool_len < RK_RELAY_POOL_TOTAL && same < RK_RELAY_POOL_PER_ORIGIN) {
            memcpy(pool[pool_len].origin, origin, sizeof origin);
            pool[pool_len].c = c;
            pool_len++;
            c = NULL;
        }
        pthread_mutex_unlock(&pool_mu);
    }
    if (c)
        curl_easy_cleanup(c);
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
    pthread_mutex_lock(&pool_mu);
    for (size_t i = 0; i < pool_len; i++)
        curl_easy_cleanup(pool[i].c);
    pool_len = 0;
    pthread_mutex_unlock(&pool_mu);
}
