/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the memory and Redis backends (store_common.h): the common head of a
 * store object, error messages, the active and deleted state tests, secret files, random
 * reservation tokens, the session-registry values, list keys and id arrays. */
#include "store/store_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
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
    return rk_store_state_active(json_object_get_string(state));
}

bool rk_store_state_active(const char *s)
{
    return s && (strcmp(s, "pending") == 0 || strcmp(s, "running") == 0);
}

int64_t rk_store_touch_deadline(json_object *rec, int64_t now_s, int64_t current)
{
    json_object *v;
    if (!json_object_object_get_ex(rec, "auto_clear_time", &v) || !v)
        return 0;
    return rk_store_idle_deadline(json_object_get_int64(v), now_s, current);
}

int64_t rk_store_idle_deadline(int64_t minutes, int64_t now_s, int64_t current)
{
    if (now_s <= 0 || minutes <= 0 || minutes >= INT64_MAX / 120)
        return 0;
    int64_t deadline = now_s + minutes * 60;
    return deadline > current ? deadline : 0;
}

/* True if the record carries a job lease and is not deleted. */
bool rk_store_rec_has_job(json_object *rec)
{
    return rec && json_object_object_get_ex(rec, "job_lease", NULL) && !rk_store_rec_deleted(rec);
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
