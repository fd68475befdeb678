/* SPDX-License-Identifier: Apache-2.0 */
#include "bytepipe.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A ring buffer guarded by one mutex and two condition variables. */
struct rk_bytepipe {
    pthread_mutex_t mu;
    pthread_cond_t can_read;
    pthread_cond_t can_write;
    char *ring;
    size_t cap, head, len;
    int closed;
    int aborted;
};

struct rk_bytepipe *rk_bytepipe_new(size_t capacity)
{
    struct rk_bytepipe *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->ring = malloc(capacity);
    if (!p->ring) {
        free(p);
        return NULL;
    }
    p->cap = capacity;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->can_read, &ca);
    pthread_cond_init(&p->can_write, &ca);
    pthread_condattr_destroy(&ca);
    return p;
}

void rk_bytepipe_free(struct rk_bytepipe *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->can_read);
    pthread_cond_destroy(&p->can_write);
    free(p->ring);
    free(p);
}

int rk_bytepipe_write(struct rk_bytepipe *p, const void *data, size_t len)
{
    const char *src = data;
    pthread_mutex_lock(&p->mu);
    while (len > 0) {
        while (p->len == p->cap && !p->aborted)
            pthread_cond_wait(&p->can_write, &p->mu);
        if (p->aborted) {
            pthread_mutex_unlock(&p->mu);
            return -1;
        }
        size_t tail = (p->head + p->len) % p->cap;
        size_t room = p->cap - p->len;
        size_t chunk = len < room ? len : room;
        if (chunk > p->cap - tail)
            chunk = p->cap - tail;
        memcpy(p->ring + tail, src, chunk);
        p->len += chunk;
        src += chunk;
        len -= chunk;
        pthread_cond_signal(&p->can_read);
    }
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void rk_bytepipe_close(struct rk_bytepipe *p)
{
    pthread_mutex_lock(&p->mu);
    p->closed = 1;
    pthread_cond_broadcast(&p->can_read);
    pthread_mutex_unlock(&p->mu);
}

ssize_t rk_bytepipe_read(struct rk_bytepipe *p, void *buf, size_t len, int timeout_ms)
{
    struct timespec until;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&p->mu);
    while (p->len == 0 && !p->closed && !p->aborted) {
        if (timeout_ms > 0) {
            if (pthread_cond_timedwait(&p->can_read, &p->mu, &until) == ETIMEDOUT) {
                pthread_mutex_unlock(&p->mu);
                return -1;
            }
        } else {
            pthread_cond_wait(&p->can_read, &p->mu);
        }
    }
    if (p->aborted) {
        pthread_mutex_unlock(&p->mu);
        return -1;
    }
    size_t n = p->len < len ? p->len : len;
    size_t first = p->cap - p->head;
    if (first > n)
        first = n;
    memcpy(buf, p->ring + p->head, first);
    memcpy((char *)buf + first, p->ring, n - first);
    p->head = (p->head + n) % p->cap;
    p->len -= n;
    pthread_cond_signal(&p->can_write);
    pthread_mutex_unlock(&p->mu);
    return (ssize_t)n;
}

void rk_bytepipe_abort(struct rk_bytepipe *p)
{
    pthread_mutex_lock(&p->mu);
    p->aborted = 1;
    pthread_cond_broadcast(&p->can_read);
    pthread_cond_broadcast(&p->can_write);
    pthread_mutex_unlock(&p->mu);
}

int rk_bytepipe_aborted(struct rk_bytepipe *p)
{
    pthread_mutex_lock(&p->mu);
    int a = p->aborted;
    pthread_mutex_unlock(&p->mu);
    return a;
}
