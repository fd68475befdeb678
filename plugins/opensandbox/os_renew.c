/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_renew.c
 * @brief Lifetime by renewal (opensandbox.renew_margin > 0).
 *
 * OpenSandbox removes a sandbox at its `expiresAt`; POST
 * /sandboxes/{id}/renew-expiration {"expiresAt": RFC 3339 UTC} moves it (the
 * new time must lie after the current one, specs/sandbox-lifecycle.yml). The
 * core reports the idle deadline on activity; this file keeps OpenSandbox's
 * expiry at idle deadline + margin, calling upstream only when the expiry it
 * last set is less than margin/2 ahead of the deadline. So:
 *   - a sandbox in use never expires upstream before rock-admin's own idle
 *     deadline (its expiry stays >= deadline + margin/2);
 *   - an abandoned one (rock-admin gone too) dies at most idle timeout +
 *     margin after its last activity;
 *   - each admin process renews a busy sandbox at most once per margin/2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "os_internal.h"

/** Most sandboxes whose last renewal is remembered. */
#define OS_RENEW_CACHE_MAX 4096

/** Expiry this process last set for one sandbox. */
struct os_renew_entry {
    struct os_renew_entry *next;
    char *osid;
    int64_t expires_at; /**< epoch seconds */
};

/** Entry for osid (lock held) or NULL. */
static struct os_renew_entry *find(struct os_inst *inst, const char *osid)
{
    for (struct os_renew_entry *e = inst->renew_head; e; e = e->next)
        if (!strcmp(e->osid, osid))
            return e;
    return NULL;
}

/** Remember that osid expires at expires_at (bounded; the oldest entry goes first). */
void os_renew_note(struct os_inst *inst, const char *osid, int64_t expires_at)
{
    pthread_mutex_lock(&inst->renew_lock);
    struct os_renew_entry *e = find(inst, osid);
    if (!e) {
        if (inst->renew_count >= OS_RENEW_CACHE_MAX) {
            /* Drop the tail (the oldest insertion); it is only an optimisation. */
            struct os_renew_entry **pp = &inst->renew_head;
            while (*pp && (*pp)->next)
                pp = &(*pp)->next;
            if (*pp) {
                free((*pp)->osid);
                free(*pp);
                *pp = NULL;
                inst->renew_count--;
            }
        }
        e = calloc(1, sizeof *e);
        if (e)
            e->osid = strdup(osid);
        if (!e || !e->osid) {
            free(e);
            pthread_mutex_unlock(&inst->renew_lock);
            return;
        }
        e->next = inst->renew_head;
        inst->renew_head = e;
        inst->renew_count++;
    }
    if (expires_at > e->expires_at)
        e->expires_at = expires_at;
    pthread_mutex_unlock(&inst->renew_lock);
}

/** Set up the instance's (empty) renewal cache; 0 on success. */
int os_renew_init(struct os_inst *inst)
{
    inst->renew_head = NULL;
    inst->renew_count = 0;
    return pthread_mutex_init(&inst->renew_lock, NULL) == 0 ? 0 : -1;
}

/** Free the renewal cache and its lock (after the last request). */
void os_renew_cache_free(struct os_inst *inst)
{
    struct os_renew_entry *e = inst->renew_head;
    while (e) {
        struct os_renew_entry *n = e->next;
        free(e->osid);
        free(e);
        e = n;
    }
    inst->renew_head = NULL;
    inst->renew_count = 0;
    pthread_mutex_destroy(&inst->renew_lock);
}

/** Set OpenSandbox's expiry of osid to expires_at (epoch seconds). A 4xx
 *  answer other than 404 means the current expiry is already later (another
 *  admin process renewed further): that is success. */
static rk_status renew_to(struct os_inst *inst, struct rk_call *call, const char *osid,
                          int64_t expires_at)
{
    char when[32];
    time_t t = (time_t)expires_at;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char body[64];
    snprintf(body, sizeof body, "{\"expiresAt\":\"%s\"}", when);
    char *path = os_sbx_path(osid, "/renew-expiration");
    struct os_xfer x;
    rk_status s = path ? os_lc_request(inst, call, "POST", path, body, &x) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK && x.status >= 200 && x.status < 300) {
        os_xfer_cleanup(&x);
        os_renew_note(inst, osid, expires_at);
        return RK_OK;
    }
    if (s == RK_OK && x.status >= 400 && x.status < 500 && x.status != 404) {
        inst->host->log(RK_LOG_INFO, "renew-expiration of %s answered %ld; keeping its expiry",
                        osid, x.status);
        os_xfer_cleanup(&x);
        os_renew_note(inst, osid, expires_at);
        return RK_OK;
    }
    s = os_lc_fail(inst, call, s, x.status == 404 ? RK_E_NOT_FOUND : RK_E_UPSTREAM,
                   "renew_expiration", osid, &x);
    os_xfer_cleanup(&x);
    return s;
}

/** ops.renew: keep the expiry at idle_deadline + margin, rate-limited. */
rk_status os_renew(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                   int64_t idle_deadline)
{
    if (inst->renew_margin_s <= 0 || !ref->upstream_id || !*ref->upstream_id)
        return RK_OK;
    int64_t want_min = idle_deadline + inst->renew_margin_s / 2;
    pthread_mutex_lock(&inst->renew_lock);
    struct os_renew_entry *e = find(inst, ref->upstream_id);
    int fresh = e && e->expires_at >= want_min;
    pthread_mutex_unlock(&inst->renew_lock);
    if (fresh)
        return RK_OK;
    return renew_to(inst, call, ref->upstream_id, idle_deadline + inst->renew_margin_s);
}

/** After a pause: park the stopped sandbox for sandbox_timeout seconds. */
rk_status os_renew_parked(struct os_inst *inst, struct rk_call *call, const char *osid)
{
    if (inst->renew_margin_s <= 0 || inst->sandbox_timeout_s <= 0)
        return RK_OK;
    return renew_to(inst, call, osid, (int64_t)time(NULL) + inst->sandbox_timeout_s);
}
