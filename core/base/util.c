/* SPDX-License-Identifier: Apache-2.0 */
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "rkutil.h"

/* This thread's turn time (rk_now_ms_turn); only event loop threads set it. */
static _Thread_local int64_t turn_ms;
static _Thread_local int on_turn;

static int64_t clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rk_now_ms(void)
{
    return clock_ms();
}

int64_t rk_turn_ms(void)
{
    return on_turn ? turn_ms : clock_ms();
}

int64_t rk_now_ms_turn(void)
{
    turn_ms = clock_ms();
    on_turn = 1;
    return turn_ms;
}

int64_t rk_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void rk_ring_copy(void *dst, const char *ring, size_t size, size_t head, size_t n)
{
    if (!n)
        return; /* the ring may not be allocated yet */
    size_t first = size - head < n ? size - head : n;
    memcpy(dst, ring + head, first);
    memcpy((char *)dst + first, ring, n - first);
}

struct timespec rk_time_after_ms(clockid_t clock, int64_t ms)
{
    return rku_time_after_ms(clock, ms);
}

int64_t rk_epoch_s(void)
{
    return (int64_t)time(NULL);
}

int64_t rk_epoch_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rk_time_init(void)
{
    /* ROCK formats timestamps in ROCK_TIME_ZONE (else TZ, else Asia/Shanghai). */
    const char *zone = getenv("ROCK_TIME_ZONE");
    if (!zone || !*zone)
        zone = getenv("TZ");
    if (!zone || !*zone)
        zone = "Asia/Shanghai";
    setenv("TZ", zone, 1);
    tzset();
}

void rk_iso_time(int64_t epoch, char out[32])
{
    time_t t = (time_t)epoch;
    struct tm tm;
    localtime_r(&t, &tm);
    long off = tm.tm_gmtoff;
    char sign = off < 0 ? '-' : '+';
    if (off < 0)
        off = -off;
    char tmp[96];
    snprintf(tmp, sizeof tmp, "%04d-%02d-%02dT%02d:%02d:%02d%c%02d:%02d", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, sign,
             (int)(off / 3600) % 100, (int)((off % 3600) / 60));
    snprintf(out, 32, "%.31s", tmp);
}

void rk_random_hex(char *out, size_t nchars)
{
    rku_random_hex(out, nchars);
}

/* splitmix64: one step of a well-mixed 64-bit sequence. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rk_unique_hex(char *out, size_t nchars)
{
    /* Per thread: a state seeded once from the kernel's random source, then
     * stepped without a system call. Distinct per thread with overwhelming
     * probability; not for secrets (tokens use rk_random_hex). */
    static _Thread_local uint64_t state;
    static _Thread_local int seeded;
    static const char hex[] = "0123456789abcdef";
    if (!seeded) {
        char seed[17];
        rku_random_hex(seed, 16);
        state = strtoull(seed, NULL, 16);
        seeded = 1;
    }
    size_t i = 0;
    while (i < nchars) {
        uint64_t v = splitmix64(&state);
        for (int k = 0; k < 16 && i < nchars; k++, v >>= 4)
            out[i++] = hex[v & 0xf];
    }
    out[i] = '\0';
}

/* ---- buffers ------------------------------------------------------------- */

int rk_buf_base64(struct rk_buf *b, const void *data, size_t len)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char q[4];
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < len)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        q[0] = abc[(v >> 18) & 63];
        q[1] = abc[(v >> 12) & 63];
        q[2] = i + 1 < len ? abc[(v >> 6) & 63] : '=';
        q[3] = i + 2 < len ? abc[v & 63] : '=';
        if (rk_buf_append(b, q, 4) != 0)
            return -1;
    }
    return 0;
}

int rk_buf_reserve(struct rk_buf *b, size_t len)
{
    if (b->len + len + 1 <= b->alloc)
        return 0;
    char *nd = realloc(b->data, b->len + len + 1);
    if (!nd)
        return -1;
    b->data = nd;
    b->alloc = b->len + len + 1;
    return 0;
}

int rk_buf_append(struct rk_buf *b, const void *data, size_t len)
{
    if (b->cap && b->len + len > b->cap)
        return -1;
    if (b->len + len + 1 > b->alloc) {
        size_t na = b->alloc ? b->alloc : 256;
        while (na < b->len + len + 1)
            na *= 2;
        char *nd = realloc(b->data, na);
        if (!nd)
            return -1;
        b->data = nd;
        b->alloc = na;
    }
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int rk_buf_printf(struct rk_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof small)
        return rk_buf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = rk_buf_append(b, big, (size_t)n);
    free(big);
    return rc;
}

const char *rk_buf_cstr(struct rk_buf *b)
{
    return b->data ? b->data : "";
}

void rk_buf_free(struct rk_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->alloc = 0;
}

char *rk_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        abort();
    va_end(ap);
    return s;
}

char *rk_xstrdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d)
        abort();
    return d;
}

char *rk_xstrndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        abort();
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- quoting --------------------------------------------------------------- */

int rk_shell_quote(struct rk_buf *b, const char *s)
{
    char *q = rku_shell_quote(s);
    int rc = q ? rk_buf_append(b, q, strlen(q)) : -1;
    free(q);
    return rc;
}

int rk_py_repr(struct rk_buf *b, const char *str, size_t len)
{
    char *r = rku_py_repr(str, len);
    int rc = r ? rk_buf_append(b, r, strlen(r)) : -1;
    free(r);
    return rc;
}

void rk_py_float(double v, char out[64])
{
    rku_py_float(v, out);
}

uint64_t rk_hash_str(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

int rk_strcaseeq(const char *a, const char *b)
{
    /* Most comparisons (header names against a list) differ in the first byte: settle those
     * without the call (| 0x20 folds ASCII letters; anything else goes to strcasecmp). */
    return a && b && (a[0] | 0x20) == (b[0] | 0x20) && strcasecmp(a, b) == 0;
}

int rk_parse_bool(const char *s)
{
    static const char *const yes[] = {"true", "1", "yes", "on", "t", "y"};
    static const char *const no[] = {"false", "0", "no", "off", "f", "n"};
    if (!s)
        return -1;
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return 1;
        if (strcasecmp(s, no[i]) == 0)
            return 0;
    }
    return -1;
}
