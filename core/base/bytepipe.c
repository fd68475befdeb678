/* SPDX-License-Identifier: Apache-2.0 */
#include "base/bytepipe.h"

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

/* Absolute CLOCK_MONOTONIC time timeout_ms from now. */
static struct timespec deadline_in(int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int rk_bytepipe_write_timed(struct rk_bytepipe *p, const void *data, size_t len, int timeout_ms,
                            size_t *written)
{
    const char *src = data;
    size_t done = 0;
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    while (done < len) {
        if (p->len == p->cap && !p->aborted) {
            struct timespec until = deadline_in(timeout_ms);
            while (p->len == p->cap && !p->aborted) {
                if (timeout_ms <= 0)
                    pthread_cond_wait(&p->can_write, &p->mu);
                else if (pthread_cond_timedwait(&p->can_write, &p->mu, &until) == ETIMEDOUT)
                    break;
            }
        }
        if (p->aborted) {
            rc = -1;
            break;
        }
        if (p->len == p->cap) {
            rc = 1;
            break;
        }
        size_t tail = (p->head + p->len) % p->cap;
        size_t chunk = len - done;
        if (chunk > p->cap - p->len)
            chunk = p->cap - p->len;
        if (chunk > p->cap - tail)
            chunk = p->cap - tail;
        memcpy(p->ring + tail, src + done, chunk);
        p->len += chunk;
        done += chunk;
        pthread_cond_signal(&p->can_read);
    }
    pthread_mutex_unlock(&p->mu);
    if (written)
        *written = done;
    return rc;
}

int rk_bytepipe_write(struct rk_bytepipe *p, const void *data, size_t len)
{
    return rk_bytepipe_write_timed(p, data, len, 0, NULL) == 0 ? 0 : -1;
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
    struct timespec until = deadline_in(timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&p->mu);
    while (p->len == 0 && !p->closed && !p->aborted) {
        if (timeout_ms > 0) {
            if (pthread_cond_timedwait(&p->can_read, &p->mu, &until) == ETIMEDOUT) {
                pthread_mutex_unlock(&p->mu);
                return -2;
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
