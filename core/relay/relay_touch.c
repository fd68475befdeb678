/* SPDX-License-Identifier: Apache-2.0 */
/* The idle touch of the relays on the loops, on one worker thread (see relay_touch.h). */
#include "relay/relay_touch.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/app.h"
#include "domain/activity.h"
#include "obs/log.h"

/** Touches waiting for the worker at most (each is a distinct moment of activity). */
#define TOUCH_QUEUE 1024

struct touch {
    char id[128];
    int64_t idle_minutes;
};

static pthread_mutex_t touch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t touch_cv = PTHREAD_COND_INITIALIZER;
static struct touch queue[TOUCH_QUEUE];
static size_t q_head, q_len;
static int running, stop_wanted;
static pthread_t touch_tid;
static struct rk_app *touch_app;

/* Worker: take one touch at a time and make it (outside the lock). */
static void *touch_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&touch_mu);
    for (;;) {
        while (!q_len && !stop_wanted)
            pthread_cond_wait(&touch_cv, &touch_mu);
        if (stop_wanted)
            break;
        struct touch t = queue[q_head];
        q_head = (q_head + 1) % TOUCH_QUEUE;
        q_len--;
        pthread_mutex_unlock(&touch_mu);
        rk_activity_touch(touch_app, t.id, t.idle_minutes);
        pthread_mutex_lock(&touch_mu);
    }
    pthread_mutex_unlock(&touch_mu);
    return NULL;
}

int rk_relay_touch_start(struct rk_app *app)
{
    pthread_mutex_lock(&touch_mu);
    if (running) {
        pthread_mutex_unlock(&touch_mu);
        return 0;
    }
    touch_app = app;
    q_head = q_len = 0;
    stop_wanted = 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int rc = pthread_create(&touch_tid, &attr, touch_main, NULL);
    pthread_attr_destroy(&attr);
    running = rc == 0;
    pthread_mutex_unlock(&touch_mu);
    if (rc != 0)
        rk_err("cannot start the relay touch worker");
    return rc == 0 ? 0 : -1;
}

void rk_relay_touch_note(const char *id, int64_t idle_minutes)
{
    if (!id || !*id || idle_minutes <= 0)
        return;
    pthread_mutex_lock(&touch_mu);
    if (running && q_len < TOUCH_QUEUE) {
        struct touch *t = &queue[(q_head + q_len) % TOUCH_QUEUE];
        snprintf(t->id, sizeof t->id, "%s", id);
        t->idle_minutes = idle_minutes;
        q_len++;
        pthread_cond_signal(&touch_cv);
    }
    pthread_mutex_unlock(&touch_mu);
}

int64_t rk_relay_touch_interval_ms(int64_t idle_minutes)
{
    int64_t half = idle_minutes * 30000;
    return half > 0 && half < RK_RELAY_TOUCH_EVERY_MS ? half : RK_RELAY_TOUCH_EVERY_MS;
}

void rk_relay_touch_stop(void)
{
    pthread_mutex_lock(&touch_mu);
    if (!running) {
        pthread_mutex_unlock(&touch_mu);
        return;
    }
    stop_wanted = 1;
    running = 0;
    pthread_cond_signal(&touch_cv);
    pthread_mutex_unlock(&touch_mu);
    pthread_join(touch_tid, NULL);
}
