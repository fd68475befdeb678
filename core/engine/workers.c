/* SPDX-License-Identifier: Apache-2.0 */
/* The worker pool (workers.h): a ring of jobs under one mutex. */
#include "engine/workers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "obs/log.h"
#include "rkutil.h"

/* One queued job. */
struct job {
    void (*fn)(void *);
    void *arg;
};

struct rk_workers {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *ring; /* queue_max slots */
    int cap, head, len;
    int running;
    int stopping;
    int nthreads;
    pthread_t *threads;
};

/* A worker thread: take jobs in order until the pool stops and the queue is empty. */
static void *worker_main(void *arg)
{
    struct rk_workers *w = arg;
    rku_thread_c_locale(); /* cheap json-c parses on this thread */
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->len == 0 && !w->stopping)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->len == 0)
            break;
        struct job j = w->ring[w->head];
        w->head = (w->head + 1) % w->cap;
        w->len--;
        w->running++;
        pthread_mutex_unlock(&w->mu);
        j.fn(j.arg);
        pthread_mutex_lock(&w->mu);
        w->running--;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

struct rk_workers *rk_workers_new(int nthreads, int queue_max)
{
    if (nthreads < 1)
        nthreads = 1;
    if (queue_max < 1)
        queue_max = 1;
    struct rk_workers *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->ring = calloc((size_t)queue_max, sizeof *w->ring);
    w->threads = calloc((size_t)nthreads, sizeof *w->threads);
    if (!w->ring || !w->threads) {
        free(w->ring);
        free(w->threads);
        free(w);
        return NULL;
    }
    w->cap = queue_max;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&w->threads[i], NULL, worker_main, w) != 0) {
            rk_err("cannot start worker thread %d of %d (server.workers)", i + 1, nthreads);
            rk_workers_free(w);
            return NULL;
        }
        w->nthreads = i + 1;
    }
    return w;
}

int rk_workers_submit(struct rk_workers *w, void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&w->mu);
    if (w->stopping || w->len == w->cap) {
        pthread_mutex_unlock(&w->mu);
        return -1;
    }
    w->ring[(w->head + w->len) % w->cap] = (struct job){fn, arg};
    w->len++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

void rk_workers_load(struct rk_workers *w, int *queued, int *running)
{
    pthread_mutex_lock(&w->mu);
    if (queued)
        *queued = w->len;
    if (running)
        *running = w->running;
    pthread_mutex_unlock(&w->mu);
}

void rk_workers_stop(struct rk_workers *w)
{
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_cond_broadcast(&w->cv);
    int n = w->nthreads;
    w->nthreads = 0; /* joined once */
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < n; i++)
        pthread_join(w->threads[i], NULL);
}

void rk_workers_free(struct rk_workers *w)
{
    if (!w)
        return;
    rk_workers_stop(w);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->ring);
    free(w->threads);
    free(w);
}
