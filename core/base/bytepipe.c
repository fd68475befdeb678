/* SPDX-License-Identifier: Apache-2.0 */
#include "base/bytepipe.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

/* A one-shot notification registered by a side that must not block. */
struct notify {
    void (*fn)(void *ctx);
    void *ctx;
    size_t want; /* room wanted (room notifications) */
};

/* The ring's first allocation. A pipe holds at most `cap` bytes, but its ring starts at this
 * size and doubles (up to cap) only when a write finds it full: most pipes carry small bodies
 * (a 1 KiB proxied answer, a 16 KiB upload) and never hold more than one chunk of a transfer.
 * Allocating the whole 256 KiB or 1 MiB bound for every request made glibc serve these rings
 * from its per-thread arenas (its mmap threshold rises after the first large free) and left
 * the arenas' freed pages resident: RSS crept up by ~120 KiB per 1,000 requests under a mixed
 * soak (bench/bench_soak.py). The ring is allocated by the first write: a pipe nothing is
 * written to (a proxied answer the relay takes whole in its own buffer) costs none. */
#define RING_INITIAL (16 * 1024)

/* A ring buffer guarded by one mutex and two condition variables. */
struct rk_bytepipe {
    pthread_mutex_t mu;
    pthread_cond_t can_read;
    pthread_cond_t can_write;
    char *ring;
    size_t size;           /* bytes allocated for ring (<= cap) */
    size_t cap, head, len; /* cap: most bytes held (the bound writers see) */
    int closed;
    int aborted;
    struct notify on_room; /* rk_bytepipe_notify_room */
    struct notify on_data; /* rk_bytepipe_notify_data */
};

/* Take a notification that is due (under the lock); run it after unlocking. */
static struct notify take_notify(struct notify *n)
{
    struct notify t = *n;
    memset(n, 0, sizeof *n);
    return t;
}

/* Run a taken notification (outside the lock). */
static void run_notify(struct notify t)
{
    if (t.fn)
        t.fn(t.ctx);
}

struct rk_bytepipe *rk_bytepipe_new(size_t capacity)
{
    struct rk_bytepipe *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->cap = capacity; /* ring and size: 0 until the first write (grow_ring) */
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

/* Make room for `want` more bytes in the ring (under the lock): double its allocation, at most
 * to cap, moving the held bytes to its start. 0 on success, -1 when out of memory. */
static int grow_ring(struct rk_bytepipe *p, size_t want)
{
    size_t size = p->size ? p->size : p->cap < RING_INITIAL ? p->cap : RING_INITIAL;
    while (size < p->len + want && size < p->cap)
        size = size > p->cap / 2 ? p->cap : size * 2;
    char *ring = malloc(size);
    if (!ring)
        return -1;
    if (p->len)
        rk_ring_copy(ring, p->ring, p->size, p->head, p->len);
    free(p->ring);
    p->ring = ring;
    p->size = size;
    p->head = 0;
    return 0;
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
            struct timespec until = rk_time_after_ms(CLOCK_MONOTONIC, timeout_ms);
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
        if (p->len + (len - done) > p->size && p->size < p->cap && grow_ring(p, len - done) != 0 &&
            p->len == p->size) {
            rc = -1; /* out of memory with a full ring: like an abort, the data is lost */
            break;
        }
        size_t tail = (p->head + p->len) % p->size;
        size_t chunk = len - done;
        if (chunk > p->size - p->len)
            chunk = p->size - p->len;
        if (chunk > p->size - tail)
            chunk = p->size - tail;
        memcpy(p->ring + tail, src + done, chunk);
        p->len += chunk;
        done += chunk;
        pthread_cond_signal(&p->can_read);
    }
    struct notify due = {0};
    if (done > 0 && p->on_data.fn)
        due = take_notify(&p->on_data);
    pthread_mutex_unlock(&p->mu);
    run_notify(due);
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
    struct notify due = take_notify(&p->on_data);
    pthread_mutex_unlock(&p->mu);
    run_notify(due);
}

ssize_t rk_bytepipe_read(struct rk_bytepipe *p, void *buf, size_t len, int timeout_ms)
{
    struct timespec until = rk_time_after_ms(CLOCK_MONOTONIC, timeout_ms > 0 ? timeout_ms : 0);
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
    rk_ring_copy(buf, p->ring, p->size, p->head, n);
    p->head = p->len == n ? 0 : (p->head + n) % p->size;
    p->len -= n;
    pthread_cond_signal(&p->can_write);
    struct notify due = {0};
    if (p->on_room.fn && p->cap - p->len >= p->on_room.want)
        due = take_notify(&p->on_room);
    pthread_mutex_unlock(&p->mu);
    run_notify(due);
    return (ssize_t)n;
}

void rk_bytepipe_abort(struct rk_bytepipe *p)
{
    pthread_mutex_lock(&p->mu);
    p->aborted = 1;
    pthread_cond_broadcast(&p->can_read);
    pthread_cond_broadcast(&p->can_write);
    struct notify room = take_notify(&p->on_room);
    struct notify data = take_notify(&p->on_data);
    pthread_mutex_unlock(&p->mu);
    run_notify(room);
    run_notify(data);
}

size_t rk_bytepipe_room(struct rk_bytepipe *p)
{
    pthread_mutex_lock(&p->mu);
    size_t room = p->aborted ? 0 : p->cap - p->len;
    pthread_mutex_unlock(&p->mu);
    return room;
}

ssize_t rk_bytepipe_try_read(struct rk_bytepipe *p, void *buf, size_t len)
{
    pthread_mutex_lock(&p->mu);
    int empty = p->len == 0 && !p->closed && !p->aborted;
    pthread_mutex_unlock(&p->mu);
    /* One reader: what is there now stays there, so the read cannot block. */
    return empty ? -2 : rk_bytepipe_read(p, buf, len, 0);
}

int rk_bytepipe_notify_room(struct rk_bytepipe *p, size_t want, void (*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&p->mu);
    if (want > p->cap)
        want = p->cap;
    int now = p->aborted || p->cap - p->len >= want;
    if (!now)
        p->on_room = (struct notify){fn, ctx, want};
    pthread_mutex_unlock(&p->mu);
    return now;
}

int rk_bytepipe_notify_data(struct rk_bytepipe *p, void (*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&p->mu);
    int now = p->aborted || p->closed || p->len > 0;
    if (!now)
        p->on_data = (struct notify){fn, ctx, 0};
    pthread_mutex_unlock(&p->mu);
    return now;
}

void rk_bytepipe_notify_cancel(struct rk_bytepipe *p)
{
    pthread_mutex_lock(&p->mu);
    memset(&p->on_room, 0, sizeof p->on_room);
    memset(&p->on_data, 0, sizeof p->on_data);
    pthread_mutex_unlock(&p->mu);
}

int rk_bytepipe_aborted(struct rk_bytepipe *p)
{
    pthread_mutex_lock(&p->mu);
    int a = p->aborted;
    pthread_mutex_unlock(&p->mu);
    return a;
}
