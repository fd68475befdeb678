/* SPDX-License-Identifier: Apache-2.0 */
/* The relay loops: threads, epoll sets, hand-over, timers (see relay_loop.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "relay/relay_loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "obs/log.h"

/** Socket events taken from the kernel per epoll_wait. */
#define LOOP_EVENTS 256
/** The scratch buffer each loop reads into. */
#define LOOP_SCRATCH_BYTES (64 * 1024)

/* One loop: its thread and everything only that thread touches, plus the inbox. */
struct rk_loop {
    pthread_t tid;
    int started;
    int epfd;
    int wake_fd;                /* eventfd: inbox, drain, stop */
    pthread_mutex_t mu;         /* inbox, drain and stop requests */
    struct rk_loop_item *inbox; /* handed over, not yet started (linked by next) */
    int want_drain, want_stop;
    /* loop-thread state */
    struct rk_loop_item *items; /* every started item (prev/next) */
    struct rk_loop_item *ready_head, *ready_tail;
    struct rk_loop_item **heap; /* timer min-heap on deadline_ms */
    size_t heap_len, heap_cap;
    int draining;
    unsigned char *scratch;
};

static struct rk_loop *loops;
static int n_loops;
static _Atomic unsigned next_loop;
static pthread_mutex_t loops_mu = PTHREAD_MUTEX_INITIALIZER; /* start/stop against adopt */

/* ---- timer heap -------------------------------------------------------------------- */

static void heap_set(struct rk_loop *l, size_t i, struct rk_loop_item *it)
{
    l->heap[i] = it;
    it->heap_at = i + 1;
}

static void heap_up(struct rk_loop *l, size_t i)
{
    struct rk_loop_item *it = l->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (l->heap[p]->deadline_ms <= it->deadline_ms)
            break;
        heap_set(l, i, l->heap[p]);
        i = p;
    }
    heap_set(l, i, it);
}

static void heap_down(struct rk_loop *l, size_t i)
{
    struct rk_loop_item *it = l->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->heap_len)
            break;
        if (c + 1 < l->heap_len && l->heap[c + 1]->deadline_ms < l->heap[c]->deadline_ms)
            c++;
        if (it->deadline_ms <= l->heap[c]->deadline_ms)
            break;
        heap_set(l, i, l->heap[c]);
        i = c;
    }
    heap_set(l, i, it);
}

static void heap_remove(struct rk_loop *l, struct rk_loop_item *it)
{
    if (!it->heap_at)
        return;
    size_t i = it->heap_at - 1;
    it->heap_at = 0;
    l->heap_len--;
    if (i == l->heap_len)
        return;
    l->heap[i] = l->heap[l->heap_len];
    l->heap[i]->heap_at = i + 1;
    heap_down(l, i);
    heap_up(l, l->heap[i]->heap_at - 1);
}

/* Arm or re-arm (0 disarms). */
void rk_loop_timer(struct rk_loop_item *it, int64_t deadline_ms)
{
    struct rk_loop *l = it->loop;
    heap_remove(l, it);
    it->deadline_ms = deadline_ms;
    if (!deadline_ms)
        return;
    if (l->heap_len == l->heap_cap) {
        size_t cap = l->heap_cap ? l->heap_cap * 2 : 64;
        struct rk_loop_item **h = realloc(l->heap, cap * sizeof *h);
        if (!h) { /* no memory for the timer: run it at once, it re-arms */
            it->deadline_ms = 0;
            rk_loop_again(it);
            return;
        }
        l->heap = h;
        l->heap_cap = cap;
    }
    l->heap[l->heap_len] = it;
    it->heap_at = ++l->heap_len;
    heap_up(l, l->heap_len - 1);
}

/* ---- lists ------------------------------------------------------------------------- */

static void ready_unlink(struct rk_loop *l, struct rk_loop_item *it)
{
    if (!it->ready)
        return;
    if (it->ready_prev)
        it->ready_prev->ready_next = it->ready_next;
    else
        l->ready_head = it->ready_next;
    if (it->ready_next)
        it->ready_next->ready_prev = it->ready_prev;
    else
        l->ready_tail = it->ready_prev;
    it->ready_prev = it->ready_next = NULL;
    it->ready = 0;
}

/* Queue the item to run (once). */
void rk_loop_again(struct rk_loop_item *it)
{
    struct rk_loop *l = it->loop;
    if (it->ready)
        return;
    it->ready = 1;
    it->ready_next = NULL;
    it->ready_prev = l->ready_tail;
    if (l->ready_tail)
        l->ready_tail->ready_next = it;
    else
        l->ready_head = it;
    l->ready_tail = it;
}

/* Forget an ending item. */
void rk_loop_item_done(struct rk_loop_item *it)
{
    struct rk_loop *l = it->loop;
    ready_unlink(l, it);
    heap_remove(l, it);
    if (it->prev)
        it->prev->next = it->next;
    else
        l->items = it->next;
    if (it->next)
        it->next->prev = it->prev;
    it->prev = it->next = NULL;
}

unsigned char *rk_loop_scratch(struct rk_loop_item *it, size_t *len)
{
    *len = LOOP_SCRATCH_BYTES;
    return it->loop->scratch;
}

/* ---- watches ----------------------------------------------------------------------- */

int rk_loop_watch_add(struct rk_loop_item *it, struct rk_loop_watch *w, int fd)
{
    w->item = it;
    w->fd = fd;
    w->events = 0;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = w};
    return epoll_ctl(it->loop->epfd, EPOLL_CTL_ADD, fd, &ev);
}

void rk_loop_watch_del(struct rk_loop_watch *w)
{
    if (!w->item || w->fd < 0)
        return;
    epoll_ctl(w->item->loop->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    w->fd = -1;
}

/* ---- the loop thread ------------------------------------------------------------------ */

/* Start the items handed over, and take the drain and stop requests. Returns
 * 1 when the loop must stop. Items adopted while the loop drains are drained
 * right after they start. */
static int loop_inbox(struct rk_loop *l)
{
    uint64_t v;
    while (read(l->wake_fd, &v, sizeof v) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&l->mu);
    struct rk_loop_item *in = l->inbox;
    l->inbox = NULL;
    int drain = l->want_drain, stop = l->want_stop;
    pthread_mutex_unlock(&l->mu);
    /* the inbox is a stack: start the oldest first */
    struct rk_loop_item *rev = NULL;
    while (in) {
        struct rk_loop_item *n = in->next;
        in->next = rev;
        rev = in;
        in = n;
    }
    struct rk_loop_item *old = l->items;
    for (struct rk_loop_item *it = rev, *n; it; it = n) {
        n = it->next;
        it->prev = NULL;
        it->next = l->items;
        if (l->items)
            l->items->prev = it;
        l->items = it;
        it->ops->start(it); /* may end it (an item only ever ends itself) */
    }
    if (drain && !l->draining) {
        l->draining = 1;
        old = NULL; /* all of them */
    }
    if (l->draining) {
        /* the new items sit in front of the old ones */
        for (struct rk_loop_item *it = l->items, *n; it && it != old; it = n) {
            n = it->next;
            it->ops->drain(it);
        }
    }
    return stop;
}

/* Expired timers. */
static void loop_timers(struct rk_loop *l, int64_t now)
{
    while (l->heap_len && l->heap[0]->deadline_ms <= now) {
        struct rk_loop_item *it = l->heap[0];
        heap_remove(l, it);
        it->deadline_ms = 0;
        it->ops->timer(it); /* may re-arm or end it */
    }
}

/* Run the items that were ready when this round began. */
static void loop_ready(struct rk_loop *l)
{
    struct rk_loop_item *last = l->ready_tail;
    while (l->ready_head) {
        struct rk_loop_item *it = l->ready_head;
        int was_last = it == last;
        ready_unlink(l, it);
        it->ops->run(it); /* may re-queue or end it */
        if (was_last)
            break;
    }
}

static void *loop_main(void *arg)
{
    struct rk_loop *l = arg;
    struct epoll_event evs[LOOP_EVENTS];
    int stop = 0;
    while (!stop) {
        int timeout = -1;
        if (l->ready_head) {
            timeout = 0;
        } else if (l->heap_len) {
            int64_t left = l->heap[0]->deadline_ms - rk_now_ms();
            timeout = left <= 0 ? 0 : left > 3600000 ? 3600000 : (int)left;
        }
        int n = epoll_wait(l->epfd, evs, LOOP_EVENTS, timeout);
        if (n < 0 && errno != EINTR) {
            rk_err("relay loop: epoll_wait: %s", strerror(errno));
            break;
        }
        int wake = 0;
        for (int i = 0; i < n; i++) {
            struct rk_loop_watch *w = evs[i].data.ptr;
            if (!w) {
                wake = 1;
                continue;
            }
            w->events |= evs[i].events;
            rk_loop_again(w->item);
        }
        /* after the events are noted: starting or draining may end an item, whose
         * watches must not be seen again in this batch */
        if (wake)
            stop = loop_inbox(l);
        loop_timers(l, rk_now_ms());
        loop_ready(l);
    }
    /* Stop: abort every item, including any still in the inbox. */
    for (;;) {
        pthread_mutex_lock(&l->mu);
        struct rk_loop_item *in = l->inbox;
        l->inbox = NULL;
        pthread_mutex_unlock(&l->mu);
        if (!in)
            break;
        while (in) {
            struct rk_loop_item *n = in->next;
            in->prev = NULL;
            in->next = l->items;
            if (l->items)
                l->items->prev = in;
            l->items = in;
            in = n;
        }
    }
    while (l->items)
        l->items->ops->abort(l->items); /* unlinks itself */
    return NULL;
}

/* ---- start, adopt, drain, stop ------------------------------------------------------ */

static void loop_free(struct rk_loop *l)
{
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->wake_fd >= 0)
        close(l->wake_fd);
    pthread_mutex_destroy(&l->mu);
    free(l->heap);
    free(l->scratch);
}

int rk_relay_loops_start(struct rk_app *app, int n)
{
    (void)app; /* the loops' threads take the default stack */
    pthread_mutex_lock(&loops_mu);
    if (loops || n < 1) {
        pthread_mutex_unlock(&loops_mu);
        return loops ? 0 : -1;
    }
    struct rk_loop *ls = calloc((size_t)n, sizeof *ls);
    int made = 0;
    for (; ls && made < n; made++) {
        struct rk_loop *l = &ls[made];
        pthread_mutex_init(&l->mu, NULL);
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        l->scratch = malloc(LOOP_SCRATCH_BYTES);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (l->epfd < 0 || l->wake_fd < 0 || !l->scratch ||
            epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wake_fd, &ev) != 0) {
            made++;
            break;
        }
        int rc = pthread_create(&l->tid, NULL, loop_main, l);
        if (rc != 0) {
            made++;
            break;
        }
        l->started = 1;
    }
    if (!ls || !ls[made - 1].started) {
        rk_err("cannot start the relay loops");
        for (int i = 0; ls && i < made; i++) {
            if (ls[i].started) {
                pthread_mutex_lock(&ls[i].mu);
                ls[i].want_stop = 1;
                pthread_mutex_unlock(&ls[i].mu);
                uint64_t one = 1;
                if (write(ls[i].wake_fd, &one, sizeof one) < 0) {
                }
                pthread_join(ls[i].tid, NULL);
            }
            loop_free(&ls[i]);
        }
        free(ls);
        pthread_mutex_unlock(&loops_mu);
        return -1;
    }
    loops = ls;
    n_loops = n;
    pthread_mutex_unlock(&loops_mu);
    return 0;
}

/* Post a request to one loop and wake it. */
static void loop_wake(struct rk_loop *l)
{
    uint64_t one = 1;
    while (write(l->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

int rk_relay_loop_adopt(struct rk_loop_item *it)
{
    pthread_mutex_lock(&loops_mu);
    if (!loops) {
        pthread_mutex_unlock(&loops_mu);
        return -1;
    }
    struct rk_loop *l = &loops[atomic_fetch_add(&next_loop, 1) % (unsigned)n_loops];
    pthread_mutex_lock(&l->mu);
    int ok = !l->want_stop;
    if (ok) {
        it->loop = l;
        it->next = l->inbox;
        l->inbox = it;
    }
    pthread_mutex_unlock(&l->mu);
    if (ok)
        loop_wake(l);
    pthread_mutex_unlock(&loops_mu);
    return ok ? 0 : -1;
}

void rk_relay_loops_drain(void)
{
    pthread_mutex_lock(&loops_mu);
    for (int i = 0; i < n_loops; i++) {
        pthread_mutex_lock(&loops[i].mu);
        loops[i].want_drain = 1;
        pthread_mutex_unlock(&loops[i].mu);
        loop_wake(&loops[i]);
    }
    pthread_mutex_unlock(&loops_mu);
}

void rk_relay_loops_stop(void)
{
    pthread_mutex_lock(&loops_mu);
    struct rk_loop *ls = loops;
    int n = n_loops;
    loops = NULL;
    n_loops = 0;
    pthread_mutex_unlock(&loops_mu);
    if (!ls)
        return;
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&ls[i].mu);
        ls[i].want_stop = 1;
        pthread_mutex_unlock(&ls[i].mu);
        loop_wake(&ls[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(ls[i].tid, NULL);
        loop_free(&ls[i]);
    }
    free(ls);
}

int rk_relay_loops_count(void)
{
    pthread_mutex_lock(&loops_mu);
    int n = n_loops;
    pthread_mutex_unlock(&loops_mu);
    return n;
}
