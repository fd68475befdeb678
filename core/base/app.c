/* SPDX-License-Identifier: Apache-2.0 */
#include "base/app.h"

#include <pthread.h>
#include <time.h>

#include "base/util.h"

static pthread_mutex_t bg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bg_cv = PTHREAD_COND_INITIALIZER;
static int bg_count;

void rk_app_bg_enter(void)
{
    pthread_mutex_lock(&bg_mu);
    bg_count++;
    pthread_mutex_unlock(&bg_mu);
}

void rk_app_bg_leave(void)
{
    pthread_mutex_lock(&bg_mu);
    if (--bg_count == 0)
        pthread_cond_broadcast(&bg_cv);
    pthread_mutex_unlock(&bg_mu);
}

int rk_app_bg_start(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t th;
    rk_app_bg_enter();
    int rc = pthread_create(&th, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        rk_app_bg_leave();
    return rc;
}

int rk_app_bg_wait(long long deadline_ms)
{
    pthread_mutex_lock(&bg_mu);
    while (bg_count > 0 && rk_now_ms() < deadline_ms) {
        pthread_mutex_unlock(&bg_mu);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&bg_mu);
    }
    int left = bg_count;
    pthread_mutex_unlock(&bg_mu);
    return left;
}
