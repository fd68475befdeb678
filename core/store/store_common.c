/* SPDX-License-Identifier: Apache-2.0 */
/* Public store entry points: argument checks, dispatch to the backend, the
 * error counter, and helpers shared by the memory and Redis backends. */
#include "store/store_common.h"

#include "obs/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Initialise the common head of a backend's store object. */
void rk_store_base_init(struct rk_store *st, const struct rk_store_ops *ops, int shared)
{
    st->ops = ops;
    st->shared = shared;
    atomic_init(&st->errors, 0);
    st->deleted_retention_s = RK_STORE_DEFAULT_RETENTION_S;
}

/* Set the retention of deleted records (0 = forever). */
void rk_store_set_deleted_retention(struct rk_store *st, int64_t seconds)
{
    if (st)
        st->deleted_retention_s = seconds > 0 ? seconds : 0;
}

/* True if the record's "state" is "deleted". */
bool rk_store_rec_deleted(json_object *rec)
{
    json_object *state = NULL;
    return rec && json_object_object_get_ex(rec, "state", &state) &&
           json_object_is_type(state, json_type_string) &&
           strcmp(json_object_get_string(state), "deleted") == 0;
}

/* Read the first line of a secret file. */
char *rk_store_read_secret_file(const char *path, char *msg, size_t msglen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(msg, msglen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(msg, msglen, "cannot read %s", path);
        return NULL;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    char *s = strdup(buf);
    explicit_bzero(buf, sizeof buf);
    if (!s)
        snprintf(msg, msglen, "out of memory");
    else if (!*s) {
        free(s);
        s = NULL;
        snprintf(msg, msglen, "%s is empty", path);
    }
    return s;
}

/* Format an error message into err and return RK_STORE_ERROR. */
rk_store_rc rk_store_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return RK_STORE_ERROR;
}

/* True if the record's "state" marks it active (pending or running). */
bool rk_store_rec_active(json_object *rec)
{
    json_object *state = NULL;
    if (!rec || !json_object_object_get_ex(rec, "state", &state) ||
        !json_object_is_type(state, json_type_string))
        return false;
    const char *s = json_object_get_string(state);
    return strcmp(s, "pending") == 0 || strcmp(s, "running") == 0;
}

/* Read n random bytes from the kernel, falling back to /dev/urandom. */
static int random_bytes(unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        got += (size_t)r;
    }
    if (got == n)
        return 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return got == n ? 0 : -1;
}

/* Generate a 128-bit random token as lowercase hex. */
int rk_store_new_token(char out[RK_STORE_TOKEN_HEX + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[RK_STORE_TOKEN_HEX / 2];
    if (random_bytes(raw, sizeof raw) != 0)
        return -1;
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[RK_STORE_TOKEN_HEX] = '\0';
    return 0;
}

/* Current wall-clock time in epoch milliseconds. */
int64_t rk_store_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Build "s:<session id>". */
char *rk_store_session_value(const char *session_id)
{
    size_t n = strlen(session_id) + 3;
    char *v = malloc(n);
    if (v)
        snprintf(v, n, "s:%s", session_id);
    return v;
}

/* Build "r:<token>:<deadline ms>". */
char *rk_store_reservation_value(const char *token, int64_t deadline_ms)
{
    size_t n = strlen(token) + 32;
    char *v = malloc(n);
    if (v)
        snprintf(v, n, "r:%s:%lld", token, (long long)deadline_ms);
    return v;
}

/* Decide whether an existing registry value keeps a name taken at now_ms. */
bool rk_store_value_blocks(const char *value, int64_t now_ms)
{
    if (strncmp(value, "r:", 2) != 0)
        return true;
    const char *colon = strrchr(value + 2, ':');
    if (!colon || colon[1] == '\0')
        return true;
    char *end = NULL;
    errno = 0;
    long long deadline = strtoll(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || colon[1] < '0' || colon[1] > '9')
        return true;
    return deadline > now_ms;
}

/* True if value is "r:<token>:<anything>". */
bool rk_store_value_is_reservation_of(const char *value, const char *token)
{
    size_t tl = strlen(token);
    return strncmp(value, "r:", 2) == 0 && strncmp(value + 2, token, tl) == 0 &&
           value[2 + tl] == ':';
}

/* Copy an array of strings; NULL on OOM (nothing leaked). */
char **rk_store_dup_ids(const char *const *ids, size_t n)
{
    char **out = calloc(n ? n : 1, sizeof *out);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        out[i] = strdup(ids[i]);
        if (!out[i]) {
            rk_store_free_ids(out, i);
            return NULL;
        }
    }
    return out;
}

/* Release each record and clear its slot. */
void rk_store_put_records(json_object **recs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_object_put(recs[i]);
        recs[i] = NULL;
    }
}

/* Clear err so a stale message is never mistaken for a new one. */
static void err_reset(char *err, size_t errlen)
{
    if (err && errlen > 0)
        err[0] = '\0';
}

/* Start of this thread's current backend call (CLOCK_MONOTONIC ns). */
static _Thread_local int64_t call_start_ns;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Count an error result and observe the round trip since call_start_ns
 * under the operation named by the calling function ("rk_store_get" ->
 * "get", "rk_session_reserve" -> "session_reserve"); pass any rc through. */
static rk_store_rc counted_call(struct rk_store *st, const char *fn, rk_store_rc rc)
{
    if (rc == RK_STORE_ERROR)
        atomic_fetch_add(&st->errors, 1);
    const char *op = strncmp(fn, "rk_store_", 9) == 0 ? fn + 9
                     : strncmp(fn, "rk_", 3) == 0     ? fn + 3
                                                      : fn;
    rk_metrics_store(op, (double)(mono_ns() - call_start_ns) / 1e9);
    return rc;
}

/* counted(st, st->ops->x(...)): the comma operator starts the clock before
 * the backend call is evaluated. */
#define counted(st, rc) (call_start_ns = mono_ns(), counted_call((st), __func__, (rc)))

/* Validate a name-like argument (non-empty, bounded). */
static bool name_ok(const char *s)
{
    return s && s[0] && strnlen(s, RK_STORE_MAX_NAME + 1) <= RK_STORE_MAX_NAME;
}

/* Report an invalid argument, counting it unless the store itself is NULL. */
static rk_store_rc invalid(struct rk_store *st, const char *what, char *err, size_t errlen)
{
    if (st)
        atomic_fetch_add(&st->errors, 1);
    return rk_store_fail(err, errlen, "store: invalid %s", what);
}

/* Close the store through its backend. */
void rk_store_close(struct rk_store *st)
{
    if (st)
        st->ops->close(st);
}

/* 1 for the Redis backend. */
int rk_store_is_shared(const struct rk_store *st)
{
    return st ? st->shared : 0;
}

/* PING the backend. */
rk_store_rc rk_store_ping(struct rk_store *st, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st)
        return invalid(st, "store", err, errlen);
    return counted(st, st->ops->ping(st, err, errlen));
}

/* Fetch one record. */
rk_store_rc rk_store_get(struct rk_store *st, const char *id, json_object **out, char *err,
                         size_t errlen)
{
    err_reset(err, errlen);
    if (out)
        *out = NULL;
    if (!st || !out)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(id))
        return invalid(st, "sandbox id", err, errlen);
    return counted(st, st->ops->get(st, id, out, err, errlen));
}

/* Fetch several records. */
rk_store_rc rk_store_get_many(struct rk_store *st, const char *const *ids, size_t n,
                              json_object **out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st || (n > 0 && (!ids || !out)))
        return invalid(st, "argument", err, errlen);
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    for (size_t i = 0; i < n; i++)
        if (!name_ok(ids[i]))
            return invalid(st, "sandbox id", err, errlen);
    if (n == 0)
        return RK_STORE_OK;
    return counted(st, st->ops->get_many(st, ids, n, out, err, errlen));
}

/* Insert a record unless an active one exists. */
rk_store_rc rk_store_create(struct rk_store *st, const char *id, json_object *rec,
                            int64_t expire_time, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st || !json_object_is_type(rec, json_type_object))
        return invalid(st, "record", err, errlen);
    if (!name_ok(id))
        return invalid(st, "sandbox id", err, errlen);
    return counted(st, st->ops->create(st, id, rec, expire_time, err, errlen));
}

/* Read-modify-write one record. */
rk_store_rc rk_store_update(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                            json_object **out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (out)
        *out = NULL;
    if (!st || !fn)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(id))
        return invalid(st, "sandbox id", err, errlen);
    return counted(st, st->ops->update(st, id, fn, ctx, out, err, errlen));
}

/* List active ids. */
rk_store_rc rk_store_list_active(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                                 size_t errlen)
{
    err_reset(err, errlen);
    if (ids_out)
        *ids_out = NULL;
    if (n_out)
        *n_out = 0;
    if (!st || !ids_out || !n_out)
        return invalid(st, "argument", err, errlen);
    return counted(st, st->ops->list_active(st, ids_out, n_out, err, errlen));
}

/* A page of active ids in list order. */
rk_store_rc rk_store_list_page(struct rk_store *st, size_t offset, size_t limit, char ***ids_out,
                               size_t *n_out, size_t *total_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (ids_out)
        *ids_out = NULL;
    if (n_out)
        *n_out = 0;
    if (total_out)
        *total_out = 0;
    if (!st || !ids_out || !n_out || !total_out)
        return invalid(st, "argument", err, errlen);
    return counted(st,
                   st->ops->list_page(st, offset, limit, ids_out, n_out, total_out, err, errlen));
}

/* Active records per state. */
rk_store_rc rk_store_count_states(struct rk_store *st, size_t *pending_out, size_t *running_out,
                                  char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (pending_out)
        *pending_out = 0;
    if (running_out)
        *running_out = 0;
    if (!st || !pending_out || !running_out)
        return invalid(st, "argument", err, errlen);
    return counted(st, st->ops->count_states(st, pending_out, running_out, err, errlen));
}

/* "<create_time>\x01<id>". */
char *rk_store_list_key(json_object *rec, const char *id)
{
    json_object *v = NULL;
    const char *t = "";
    if (rec && json_object_object_get_ex(rec, "create_time", &v) &&
        json_object_is_type(v, json_type_string))
        t = json_object_get_string(v);
    size_t lt = strlen(t), li = strlen(id);
    char *k = malloc(lt + li + 2);
    if (!k)
        return NULL;
    memcpy(k, t, lt);
    k[lt] = '\x01';
    memcpy(k + lt + 1, id, li + 1);
    return k;
}

/* Free an id array. */
void rk_store_free_ids(char **ids, size_t n)
{
    if (!ids)
        return;
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}

/* Set the idle deadline of an active sandbox. */
rk_store_rc rk_store_touch(struct rk_store *st, const char *id, int64_t expire_time, char *err,
                           size_t errlen)
{
    err_reset(err, errlen);
    if (!st)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(id))
        return invalid(st, "sandbox id", err, errlen);
    return counted(st, st->ops->touch(st, id, expire_time, err, errlen));
}

/* Active ids whose idle deadline has passed. */
rk_store_rc rk_store_expired(struct rk_store *st, int64_t now, size_t max, char ***ids_out,
                             size_t *n_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (ids_out)
        *ids_out = NULL;
    if (n_out)
        *n_out = 0;
    if (!st || !ids_out || !n_out)
        return invalid(st, "argument", err, errlen);
    if (max == 0)
        return RK_STORE_OK;
    return counted(st, st->ops->expired(st, now, max, ids_out, n_out, err, errlen));
}

/* Take a named claim. */
rk_store_rc rk_store_claim(struct rk_store *st, const char *name, int ttl_s, char *err,
                           size_t errlen)
{
    err_reset(err, errlen);
    if (!st)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(name))
        return invalid(st, "claim name", err, errlen);
    return counted(st, st->ops->claim(st, name, ttl_s < 1 ? 1 : ttl_s, err, errlen));
}

/* Reserve a session name and hand out a fresh token. */
rk_store_rc rk_session_reserve(struct rk_store *st, const char *sandbox_id, const char *name,
                               int ttl_s, char *token_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (token_out)
        token_out[0] = '\0';
    if (!st || !token_out || ttl_s < 0)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(sandbox_id))
        return invalid(st, "sandbox id", err, errlen);
    if (!name_ok(name))
        return invalid(st, "session name", err, errlen);
    char token[RK_STORE_TOKEN_HEX + 1];
    if (rk_store_new_token(token) != 0)
        return counted(st, rk_store_fail(err, errlen, "store: no random bytes for a token"));
    rk_store_rc rc = counted(st, st->ops->reserve(st, sandbox_id, name, ttl_s, token, err, errlen));
    if (rc == RK_STORE_OK)
        memcpy(token_out, token, sizeof token);
    return rc;
}

/* Check the arguments shared by commit and rollback. */
static rk_store_rc check_owner_args(struct rk_store *st, const char *sandbox_id, const char *name,
                                    const char *token, char *err, size_t errlen)
{
    if (!st)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(sandbox_id))
        return invalid(st, "sandbox id", err, errlen);
    if (!name_ok(name))
        return invalid(st, "session name", err, errlen);
    if (!name_ok(token) || strchr(token, ':'))
        return invalid(st, "reservation token", err, errlen);
    return RK_STORE_OK;
}

/* Turn our reservation into a committed mapping. */
rk_store_rc rk_session_commit(struct rk_store *st, const char *sandbox_id, const char *name,
                              const char *token, const char *session_id, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check_owner_args(st, sandbox_id, name, token, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (!name_ok(session_id))
        return invalid(st, "session id", err, errlen);
    return counted(st, st->ops->commit(st, sandbox_id, name, token, session_id, err, errlen));
}

/* Drop our reservation. */
rk_store_rc rk_session_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                                const char *token, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check_owner_args(st, sandbox_id, name, token, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->rollback(st, sandbox_id, name, token, err, errlen));
}

/* Look up a committed mapping. */
rk_store_rc rk_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                           char **session_id_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (session_id_out)
        *session_id_out = NULL;
    if (!st || !session_id_out)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(sandbox_id))
        return invalid(st, "sandbox id", err, errlen);
    if (!name_ok(name))
        return invalid(st, "session name", err, errlen);
    return counted(st, st->ops->session_get(st, sandbox_id, name, session_id_out, err, errlen));
}

/* Remove a mapping that still points at the expected session id. */
rk_store_rc rk_session_remove(struct rk_store *st, const char *sandbox_id, const char *name,
                              const char *expected_session_id, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(sandbox_id))
        return invalid(st, "sandbox id", err, errlen);
    if (!name_ok(name))
        return invalid(st, "session name", err, errlen);
    if (!name_ok(expected_session_id))
        return invalid(st, "session id", err, errlen);
    return counted(st,
                   st->ops->session_remove(st, sandbox_id, name, expected_session_id, err, errlen));
}

/* Remove every mapping of a sandbox. */
rk_store_rc rk_session_clear(struct rk_store *st, const char *sandbox_id, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(sandbox_id))
        return invalid(st, "sandbox id", err, errlen);
    return counted(st, st->ops->session_clear(st, sandbox_id, err, errlen));
}

/* Count the mappings of a sandbox. */
rk_store_rc rk_session_count(struct rk_store *st, const char *sandbox_id, size_t *n_out, char *err,
                             size_t errlen)
{
    err_reset(err, errlen);
    if (n_out)
        *n_out = 0;
    if (!st || !n_out)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(sandbox_id))
        return invalid(st, "sandbox id", err, errlen);
    return counted(st, st->ops->session_count(st, sandbox_id, n_out, err, errlen));
}

/* Errors counted since the store was opened. */
uint64_t rk_store_error_count(const struct rk_store *st)
{
    return st ? (uint64_t)atomic_load(&((struct rk_store *)st)->errors) : 0;
}

/* Fetch a record and refresh its idle deadline (throttled) in one round trip. */
rk_store_rc rk_store_get_touch(struct rk_store *st, const char *id, int64_t now_s,
                               json_object **out, char *mark, size_t marklen, char *err,
                               size_t errlen)
{
    err_reset(err, errlen);
    err_reset(mark, marklen);
    if (out)
        *out = NULL;
    if (!st || !out)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(id))
        return invalid(st, "sandbox id", err, errlen);
    return counted(st, st->ops->get_touch(st, id, now_s, out, mark, marklen, err, errlen));
}

/* Store the reconciler's mark. */
rk_store_rc rk_store_set_mark(struct rk_store *st, const char *value, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st || !value)
        return invalid(st, "argument", err, errlen);
    return counted(st, st->ops->set_mark(st, value, err, errlen));
}

/* Take or renew a named lease. */
rk_store_rc rk_store_lease(struct rk_store *st, const char *name, const char *owner, int ttl_ms,
                           char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st || !owner || !*owner)
        return invalid(st, "argument", err, errlen);
    if (!name_ok(name))
        return invalid(st, "lease name", err, errlen);
    return counted(st, st->ops->lease(st, name, owner, ttl_ms, err, errlen));
}
