/* SPDX-License-Identifier: Apache-2.0 */
#include "util.h"

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

int64_t rk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rk_epoch_s(void)
{
    return (int64_t)time(NULL);
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
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    size_t nbytes = (nchars + 1) / 2;
    if (nbytes > sizeof raw)
        nbytes = sizeof raw;
    size_t got = 0;
    while (got < nbytes) {
        ssize_t n = getrandom(raw + got, nbytes - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            /* Fall back to a weak but unique-enough source; never fails silently. */
            for (; got < nbytes; got++)
                raw[got] = (unsigned char)(rand() ^ (int)rk_now_ms());
            break;
        }
        got += (size_t)n;
    }
    size_t i;
    for (i = 0; i < nchars && i / 2 < nbytes; i++)
        out[i] = hex[(i % 2) ? (raw[i / 2] & 0xf) : (raw[i / 2] >> 4)];
    out[i] = '\0';
}

/* ---- buffers ------------------------------------------------------------- */

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

/* ---- quoting --------------------------------------------------------------- */

int rk_shell_quote(struct rk_buf *b, const char *s)
{
    /* shlex.quote: safe words stay bare, anything else is single-quoted with
     * embedded quotes written as '"'"'. */
    if (!*s)
        return rk_buf_append(b, "''", 2);
    int safe = 1;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalnum(c) || strchr("@%+=:,./-_", c))) {
            safe = 0;
            break;
        }
    }
    if (safe)
        return rk_buf_append(b, s, strlen(s));
    if (rk_buf_append(b, "'", 1))
        return -1;
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            if (rk_buf_append(b, "'\"'\"'", 5))
                return -1;
        } else if (rk_buf_append(b, p, 1)) {
            return -1;
        }
    }
    return rk_buf_append(b, "'", 1);
}

/* Length of a valid UTF-8 sequence at s (max n bytes), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n, unsigned *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    size_t len;
    unsigned c;
    if ((s[0] & 0xe0) == 0xc0) {
        len = 2;
        c = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3;
        c = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4;
        c = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
        c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

int rk_py_repr(struct rk_buf *b, const char *str, size_t len)
{
    /* Python picks double quotes when the text has ' but no ". */
    int has_sq = memchr(str, '\'', len) != NULL;
    int has_dq = memchr(str, '"', len) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (rk_buf_append(b, &q, 1))
        return -1;
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned cp;
        size_t n = utf8_seq(s + i, len - i, &cp);
        char tmp[16];
        if (n == 0) {
            /* Not valid UTF-8: Python would show a surrogate escape. */
            snprintf(tmp, sizeof tmp, "\\udc%02x", s[i]);
            if (rk_buf_append(b, tmp, strlen(tmp)))
                return -1;
            i++;
            continue;
        }
        if (cp == (unsigned)q || cp == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)cp;
            if (rk_buf_append(b, tmp, 2))
                return -1;
        } else if (cp == '\n') {
            if (rk_buf_append(b, "\\n", 2))
                return -1;
        } else if (cp == '\r') {
            if (rk_buf_append(b, "\\r", 2))
                return -1;
        } else if (cp == '\t') {
            if (rk_buf_append(b, "\\t", 2))
                return -1;
        } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
            snprintf(tmp, sizeof tmp, "\\x%02x", cp);
            if (rk_buf_append(b, tmp, 4))
                return -1;
        } else if (rk_buf_append(b, s + i, n)) {
            return -1;
        }
        i += n;
    }
    return rk_buf_append(b, &q, 1);
}

void rk_py_float(double v, char out[64])
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 1e16) {
        snprintf(out, 64, "%.1f", v);
        return;
    }
    /* Shortest representation that round-trips, like Python's repr(float). */
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, 64, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

int rk_strcaseeq(const char *a, const char *b)
{
    return a && b && strcasecmp(a, b) == 0;
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
