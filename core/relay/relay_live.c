/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry of live relays (worker threads and WebSocket sessions) that
 * shutdown waits on, and the non-blocking peer hang-up probe.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP */
#endif
#include <poll.h>
#include <pthread.h>
#include <time.h>

#include "relay/relay_common.h"
#include "base/util.h"

/* Hang-up probe without reading. */
int rk_relay_peer_gone(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cv = PTHREAD_COND_INITIALIZER;
static int live_count;

/* One more live relay. */
void rk_relay_enter(void)
{
    pthread_mutex_lock(&live_mu);
    live_count++;
    pthread_mutex_unlock(&live_mu);
}

/* One live relay less; wakes rk_relay_wait(). */
void rk_relay_leave(void)
{
    pthread_mutex_lock(&live_mu);
    live_count--;
    pthread_cond_broadcast(&live_cv);
    pthread_mutex_unlock(&live_mu);
}

/* Live relays right now. */
int rk_relay_active(void)
{
    pthread_mutex_lock(&live_mu);
    int n = live_count;
    pthread_mutex_unlock(&live_mu);
    return n;
}

/* Wait for the live relays to end, bounded by deadline_ms. */
int rk_relay_wait(int64_t deadline_ms)
{
    pthread_mutex_lock(&live_mu);
    while (live_count > 0 && rk_now_ms() < deadline_ms) {
        struct timespec ts = rk_time_after_ms(CLOCK_REALTIME, 50);
        pthread_cond_timedwait(&live_cv, &live_mu, &ts);
    }
    int n = live_count;
    pthread_mutex_unlock(&live_mu);
    return n;
}
