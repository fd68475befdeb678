/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file mock_host.c
 * @brief In-memory rk_host used by the unit tests (arena is a simple list).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_host.h"

char mock_problem_keys[16][64];
char mock_problem_texts[16][256];
int mock_problem_count;
char mock_last_error[1024];
rk_status mock_last_code;
volatile int mock_cancelled_flag;
int64_t mock_deadline_ms;

/** Arena block list. */
struct arena_block {
    struct arena_block *next;
    max_align_t data[];
};
static struct arena_block *arena_head;
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;

/** The opaque call handle is just a static byte. */
static char mock_call_storage;

/** Return the fake call handle. */
struct rk_call *mock_call(void)
{
    return (struct rk_call *)&mock_call_storage;
}

/** Free the arena and clear recorded problems. */
void mock_reset(void)
{
    pthread_mutex_lock(&arena_lock);
    while (arena_head) {
        struct arena_block *n = arena_head->next;
        free(arena_head);
        arena_head = n;
    }
    pthread_mutex_unlock(&arena_lock);
    mock_problem_count = 0;
    mock_last_error[0] = '\0';
    mock_last_code = RK_OK;
    mock_cancelled_flag = 0;
    mock_deadline_ms = 0;
}

/** host->log: discard. */
static void m_log(enum rk_log_level level, const char *fmt, ...)
{
    (void)level;
    (void)fmt;
}

/** host->set_error: remember the text. */
static rk_status m_set_error(struct rk_call *call, rk_status code, const char *fmt, ...)
{
    (void)call;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mock_last_error, sizeof(mock_last_error), fmt, ap);
    va_end(ap);
    mock_last_code = code;
    return code;
}

/** host->arena_alloc (thread-safe). */
static void *m_arena_alloc(struct rk_call *call, size_t n)
{
    (void)call;
    struct arena_block *b = calloc(1, sizeof(*b) + n + 1);
    if (!b)
        return NULL;
    pthread_mutex_lock(&arena_lock);
    b->next = arena_head;
    arena_head = b;
    pthread_mutex_unlock(&arena_lock);
    return b->data;
}

/** host->arena_strdup. */
static char *m_arena_strdup(struct rk_call *call, const char *s)
{
    size_t n = strlen(s);
    char *p = m_arena_alloc(call, n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

/* host->call_done (ABI 1.2): the reported status, waited for by mock_wait_done. */
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static int done_count;
static rk_status done_status;

/** host->call_done: remember the status and wake mock_wait_done. */
static void m_call_done(struct rk_call *call, rk_status st)
{
    (void)call;
    pthread_mutex_lock(&done_lock);
    done_count++;
    done_status = st;
    pthread_cond_signal(&done_cv);
    pthread_mutex_unlock(&done_lock);
}

rk_status mock_wait_done(int *count)
{
    pthread_mutex_lock(&done_lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    while (done_count == 0 && pthread_cond_timedwait(&done_cv, &done_lock, &until) == 0)
        ;
    *count = done_count;
    done_count = 0;
    rk_status st = done_status;
    pthread_mutex_unlock(&done_lock);
    return st;
}

/** host->deadline_ms: mock_deadline_ms (0 = none). */
static int64_t m_deadline(const struct rk_call *call)
{
    (void)call;
    return mock_deadline_ms;
}

/** host->now_ms: CLOCK_MONOTONIC. */
static int64_t m_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/** host->cancelled: mock_cancelled_flag. */
static int m_cancelled(const struct rk_call *call)
{
    (void)call;
    return mock_cancelled_flag;
}

/** host->request_id. */
static const char *m_request_id(const struct rk_call *call)
{
    (void)call;
    return "test-request-id";
}

/** Textual value of a key: explicit entry, else schema default. */
static const char *lookup(const struct rk_cfg *cfg, const char *key)
{
    for (const struct mock_cfg_entry *e = cfg->entries; e && e->key; e++) {
        if (strcmp(e->key, key) == 0)
            return e->value;
    }
    for (const struct rk_cfg_key *k = cfg->schema; k && k->name; k++) {
        if (strcmp(k->name, key) == 0)
            return k->default_value;
    }
    return NULL;
}

/** host->cfg_str. */
static const char *m_cfg_str(const struct rk_cfg *cfg, const char *key)
{
    return lookup(cfg, key);
}

/** host->cfg_int. */
static int64_t m_cfg_int(const struct rk_cfg *cfg, const char *key)
{
    const char *v = lookup(cfg, key);
    return v ? strtoll(v, NULL, 10) : 0;
}

/** host->cfg_bool. */
static int m_cfg_bool(const struct rk_cfg *cfg, const char *key)
{
    const char *v = lookup(cfg, key);
    return v && strcmp(v, "true") == 0;
}

/** host->cfg_double. */
static double m_cfg_double(const struct rk_cfg *cfg, const char *key)
{
    const char *v = lookup(cfg, key);
    return v ? strtod(v, NULL) : 0;
}

/** host->cfg_problem: remember key and text. */
static void m_cfg_problem(const struct rk_cfg *cfg, const char *key, const char *fmt, ...)
{
    (void)cfg;
    if (mock_problem_count >= 16)
        return;
    snprintf(mock_problem_keys[mock_problem_count], 64, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mock_problem_texts[mock_problem_count], 256, fmt, ap);
    va_end(ap);
    mock_problem_count++;
}

const struct rk_host mock_host = {
    .struct_size = sizeof(struct rk_host),
    .abi_major = RK_OPERATOR_ABI_MAJOR,
    .abi_minor = RK_OPERATOR_ABI_MINOR,
    .log = m_log,
    .set_error = m_set_error,
    .arena_alloc = m_arena_alloc,
    .arena_strdup = m_arena_strdup,
    .deadline_ms = m_deadline,
    .now_ms = m_now,
    .cancelled = m_cancelled,
    .request_id = m_request_id,
    .cfg_str = m_cfg_str,
    .cfg_int = m_cfg_int,
    .cfg_bool = m_cfg_bool,
    .cfg_double = m_cfg_double,
    .cfg_problem = m_cfg_problem,
    .call_done = m_call_done,
};
