/* SPDX-License-Identifier: Apache-2.0 */
/* Relays of upgraded TLS connections on their own threads (see upgrade_thread.h). */
#include "relay/upgrade_thread.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "relay/relay_common.h"
#include "engine/tls.h"

/* One detached relay. */
struct upgrade_job {
    rk_upgrade_serve_fn serve;
    rk_upgrade_release_fn release;
    void *state;
    int sock;
    char *extra;
    size_t extra_len;
    struct MHD_UpgradeResponseHandle *urh;
};

/* Thread body: relay, free, and leave the live-relay count. */
static void *upgrade_thread(void *arg)
{
    struct upgrade_job *job = arg;
    job->serve(job->state, job->sock, job->extra, job->extra_len, job->urh);
    job->release(job->state);
    free(job->extra);
    free(job);
    rk_relay_leave();
    return NULL;
}

int rk_upgrade_detach(rk_upgrade_serve_fn serve, rk_upgrade_release_fn release, void *state,
                      int sock, const char *extra, size_t extra_len,
                      struct MHD_UpgradeResponseHandle *urh, size_t stack_bytes)
{
    if (!rk_tls_enabled())
        return 0;
    struct upgrade_job *job = calloc(1, sizeof *job);
    char *copy = job && extra_len ? malloc(extra_len) : NULL;
    if (!job || (extra_len && !copy)) {
        free(job);
        return -1;
    }
    if (extra_len)
        memcpy(copy, extra, extra_len);
    *job = (struct upgrade_job){serve, release, state, sock, copy, extra_len, urh};
    pthread_attr_t attr;
    pthread_t tid;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, stack_bytes);
    int rc = pthread_create(&tid, &attr, upgrade_thread, job);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(copy);
        free(job);
        return -1;
    }
    return 1;
}
