/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The event loops (docs/architecture.md "Concurrency"): server.event_threads
 * threads, each with one epoll set that holds
 *   - one libmicrohttpd daemon (epoll mode, no thread of its own; all daemons
 *     accept from the one listening socket), run with MHD_run when its epoll
 *     descriptor is readable or its timeout is due, and
 *   - one libcurl multi (lib/rkcurlloop.h, driven): upstream transfers that a
 *     request on this loop starts (the HTTP relay) run on the same thread as
 *     the request's connection, so a relayed request is accepted, sent
 *     upstream, answered and resumed without waking another thread, and
 *   - one HTTP/1.1 client (lib/rkh1.h) for the relay's plain-HTTP upstreams
 *     at IP literals, on the same thread for the same reason; its kept
 *     connections are this loop's.
 * Other threads reach a loop only through the loop's eventfd (rk_evloop_wake:
 * a connection was resumed; libmicrohttpd 0.9.75 gives a daemon without a
 * thread of its own no inter-thread channel, so MHD_resume_connection alone
 * would wait for the loop's next timeout) and the curl loop's submission and
 * wake queue (its eventfd is in the curl loop's epoll set); the HTTP/1.1
 * client's submissions and resumes from other threads come through the
 * loop's eventfd, from its own thread through a flag (no syscall).
 */
#include "engine/event_loops.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/util.h"
#include "obs/log.h"
#include "rkcurlloop.h"
#include "rkh1.h"
#include "store/store_reader.h"
#include "rkutil.h"

/* How often every upstream transfer is checked (cancellation, client gone, inactivity). */
#define CURL_SWEEP_MS 250
/* Idle upstream keep-alive connections each loop's multi keeps. */
#define CURL_MAXCONNECTS 256
/* Idle upstream keep-alive connections each loop's HTTP/1.1 client keeps. */
#define H1_MAXCONNECTS 256
/* The longest a loop sleeps without events (libmicrohttpd reports no timeout). */
#define IDLE_WAIT_MS 1000
/* The loop thread's stack: libmicrohttpd's and curl's call chains and the inline routes. */
#define LOOP_STACK (512 * 1024)

/* epoll tags of a loop's descriptors. */
enum { TAG_MHD = 1, TAG_CURL = 2, TAG_WAKE = 3, TAG_STORE = 4, TAG_H1 = 5 };

struct rk_evloop {
    struct MHD_Daemon *daemon;
    struct rku_curl_loop *curl;
    struct rku_h1 *h1;              /* the relay's plain-HTTP upstreams at IP literals */
    int h1_due;                     /* a submission or resume from the loop's own thread */
    atomic_int h1_wake;             /* ... from another thread (then the eventfd is written) */
    atomic_int h1_closed;           /* rk_evloop_stop_transfers: no new exchanges */
    struct rk_store_reader *reader; /* NULL: the store's reads run on the workers */
    int epfd;
    int mhd_due; /* a connection of this loop was resumed from its own thread */
    int wakefd;  /* eventfd: a resumed connection or the stop (rk_evloop_wake, rk_evloop_join) */
    atomic_int stop;
    int started;
    pthread_t thread;
};

static _Thread_local struct rk_evloop *current;

static int watch(int epfd, int fd, uint32_t tag)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* The HTTP/1.1 client asks for a pass (any thread); -1 once transfers are stopped. */
static int h1_wake(void *ctx)
{
    struct rk_evloop *el = ctx;
    if (atomic_load(&el->h1_closed))
        return -1;
    if (el == current) {
        el->h1_due = 1; /* the loop runs the client before it sleeps */
        return 0;
    }
    atomic_store(&el->h1_wake, 1);
    uint64_t one = 1;
    ssize_t w = write(el->wakefd, &one, sizeof one);
    (void)w; /* EAGAIN: a wake-up is pending already */
    return 0;
}

struct rk_evloop *rk_evloop_new(struct MHD_Daemon *daemon, struct rk_store *store)
{
    struct rk_evloop *el = calloc(1, sizeof *el);
    if (!el)
        return NULL;
    el->daemon = daemon;
    el->epfd = epoll_create1(EPOLL_CLOEXEC);
    el->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    el->curl = rku_curl_loop_new_driven(CURL_SWEEP_MS, CURL_MAXCONNECTS);
    el->h1 = rku_h1_new(H1_MAXCONNECTS, h1_wake, el);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (el->epfd < 0 || el->wakefd < 0 || !el->curl || !el->h1 || !di ||
        watch(el->epfd, di->epoll_fd, TAG_MHD) != 0 ||
        watch(el->epfd, rku_curl_loop_fd(el->curl), TAG_CURL) != 0 ||
        watch(el->epfd, el->wakefd, TAG_WAKE) != 0 ||
        watch(el->epfd, rku_h1_fd(el->h1), TAG_H1) != 0 ||
        (store && (el->reader = rk_store_reader_new(store)) != NULL &&
         watch(el->epfd, rk_store_reader_fd(el->reader), TAG_STORE) != 0)) {
        rk_err("cannot set up an event loop: %s", strerror(errno));
        rk_evloop_free(el);
        return NULL;
    }
    return el;
}

/* The loop thread: wait for the daemon, the curl loop or the stop, then run what is due. */
static void *evloop_main(void *arg)
{
    struct rk_evloop *el = arg;
    current = el;
    rku_thread_c_locale(); /* inline routes parse JSON here (json-c's per-parse locale switch) */
    rku_curl_loop_adopt(el->curl); /* transfers started here need no eventfd wake-up */
    int64_t curl_at = 0;           /* when the curl loop must run even without activity */
    int64_t store_at = -1; /* when the store reader must run (a read's deadline), -1 never */
    int64_t h1_at = 0;     /* when the HTTP/1.1 client must run even without activity */
    struct epoll_event evs[5];
    while (!atomic_load(&el->stop)) {
        int wait = IDLE_WAIT_MS;
        int64_t now = rk_now_ms_turn();
        /* libmicrohttpd's own timeout: 0 when it has work without a new event (a connection
         * with unprocessed input, a resumed one); -1 when it has nothing timed. */
        int64_t mhd_at = -1;
        MHD_UNSIGNED_LONG_LONG mt;
        if (MHD_get_timeout(el->daemon, &mt) == MHD_YES) {
            if (mt < (MHD_UNSIGNED_LONG_LONG)wait)
                wait = (int)mt;
            mhd_at = now + (mt < IDLE_WAIT_MS ? (int64_t)mt : IDLE_WAIT_MS);
        }
        if (curl_at - now < wait)
            wait = curl_at > now ? (int)(curl_at - now) : 0;
        if (store_at >= 0 && store_at - now < wait)
            wait = store_at > now ? (int)(store_at - now) : 0;
        if (h1_at - now < wait)
            wait = h1_at > now ? (int)(h1_at - now) : 0;
        int mhd_ready = el->mhd_due;
        if (el->mhd_due || el->h1_due) {
            el->mhd_due = 0;
            wait = 0;
        }
        if (rku_curl_loop_due(el->curl))
            wait = 0; /* a transfer started on this thread after the curl loop's pass */
        int n = epoll_wait(el->epfd, evs, 5, wait);
        now = rk_now_ms_turn();
        int curl_ready = 0, store_ready = 0, h1_ready = 0;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u32 == TAG_CURL)
                curl_ready = 1;
            else if (evs[i].data.u32 == TAG_H1)
                h1_ready = 1;
            else if (evs[i].data.u32 == TAG_STORE)
                store_ready = 1;
            else if (evs[i].data.u32 == TAG_WAKE) {
                uint64_t v;
                ssize_t r = read(el->wakefd, &v, sizeof v); /* EAGAIN: drained already */
                (void)r;
                mhd_ready = 1; /* another thread resumed a connection or stopped the loop */
            } else
                mhd_ready = 1;
        }
        /* libmicrohttpd first: what it reads may start transfers and store reads; then the
         * transfers and the reads, whose answers resume connections (run on the next turn:
         * their resumes set mhd_due instead of waking the loop through its eventfd). A turn
         * with nothing for libmicrohttpd (only upstream answers arrived) skips it: its run
         * costs an epoll_wait of its own. */
        if (mhd_ready || (mhd_at >= 0 && now >= mhd_at))
            MHD_run(el->daemon);
        if (curl_ready || rku_curl_loop_due(el->curl) || now >= curl_at)
            curl_at = rk_now_ms() + rku_curl_loop_run(el->curl);
        if (h1_ready || el->h1_due || atomic_exchange(&el->h1_wake, 0) || now >= h1_at) {
            el->h1_due = 0;
            h1_at = now + rku_h1_run(el->h1, now);
        }
        if (el->reader && (store_ready || (store_at >= 0 && now >= store_at))) {
            int in = rk_store_reader_run(el->reader);
            store_at = in < 0 ? -1 : now + in;
        }
    }
    current = NULL;
    return NULL;
}

int rk_evloop_start(struct rk_evloop *el)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, LOOP_STACK);
    int rc = pthread_create(&el->thread, &attr, evloop_main, el);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        rk_err("cannot start an event loop thread: %s", strerror(rc));
        return -1;
    }
    el->started = 1;
    return 0;
}

void rk_evloop_stop_transfers(struct rk_evloop *el)
{
    if (!el)
        return;
    if (el->curl)
        rku_curl_loop_stop(el->curl);
    atomic_store(&el->h1_closed, 1);
}

int rk_evloop_transfers_done(struct rk_evloop *el)
{
    return !el || !el->curl || !el->started ||
           (rku_curl_loop_drained(el->curl) && !(el->h1 && rku_h1_busy(el->h1)));
}

void rk_evloop_wake(struct rk_evloop *el)
{
    if (!el)
        return;
    if (el == current) { /* on the loop's own thread: it runs libmicrohttpd before it sleeps */
        el->mhd_due = 1;
        return;
    }
    uint64_t one = 1;
    ssize_t w = write(el->wakefd, &one, sizeof one);
    (void)w; /* EAGAIN: a wake-up is pending already */
}

void rk_evloop_join(struct rk_evloop *el)
{
    if (!el || !el->started)
        return;
    atomic_store(&el->stop, 1);
    rk_evloop_wake(el);
    pthread_join(el->thread, NULL);
    el->started = 0;
}

void rk_evloop_free(struct rk_evloop *el)
{
    if (!el)
        return;
    rk_evloop_join(el);
    rku_curl_loop_free(el->curl); /* what is still open ends aborted, on this thread */
    atomic_store(&el->h1_closed, 1);
    rku_h1_abort_all(el->h1); /* the same for the HTTP/1.1 client's exchanges */
    rku_h1_free(el->h1);
    rk_store_reader_free(el->reader); /* reads still pending are answered as failed */
    if (el->epfd >= 0)
        close(el->epfd);
    if (el->wakefd >= 0)
        close(el->wakefd);
    free(el);
}

struct rk_evloop *rk_evloop_current(void)
{
    return current;
}

struct rku_curl_loop *rk_evloop_curl(const struct rk_evloop *el)
{
    return el ? el->curl : NULL;
}

struct rku_h1 *rk_evloop_h1(const struct rk_evloop *el)
{
    return el ? el->h1 : NULL;
}

struct rk_store_reader *rk_evloop_store_reader(const struct rk_evloop *el)
{
    return el ? el->reader : NULL;
}
