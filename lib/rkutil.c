/* SPDX-License-Identifier: Apache-2.0 */
/* librkutil: see rkutil.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getrandom */
#endif
#include "rkutil.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* A tiny growable string for the malloc'd results. */
struct sb {
    char *p;
    size_t len, cap;
    int oom;
};

static void sb_put(struct sb *b, const void *data, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static char *sb_take(struct sb *b)
{
    if (b->oom) {
        free(b->p);
        return NULL;
    }
    if (!b->p)
        return strdup("");
    return b->p;
}

char *rku_shell_quote(const char *s)
{
    if (!s || !*s)
        return strdup("''");
    int safe = 1;
    for (const char *c = s; *c; c++) {
        unsigned char u = (unsigned char)*c;
        int alnum = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9');
        if (!(alnum || strchr("@%+=:,./-_", u))) {
            safe = 0;
            break;
        }
    }
    if (safe)
        return strdup(s);
    struct sb b = {0};
    sb_put(&b, "'", 1);
    for (const char *c = s; *c; c++) {
        if (*c == '\'')
            sb_put(&b, "'\"'\"'", 5);
        else
            sb_put(&b, c, 1);
    }
    sb_put(&b, "'", 1);
    return sb_take(&b);
}

size_t rku_utf8_decode(const unsigned char *s, size_t n, unsigned *cp)
{
    if (n == 0)
        return 0;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    size_t len;
    unsigned c, min;
    if ((s[0] & 0xe0) == 0xc0) {
        len = 2;
        c = s[0] & 0x1f;
        min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3;
        c = s[0] & 0x0f;
        min = 0x800;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4;
        c = s[0] & 0x07;
        min = 0x10000;
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
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

char *rku_py_repr(const char *str, size_t len)
{
    /* Python picks double quotes when the text has ' but no ". */
    int has_sq = memchr(str, '\'', len) != NULL;
    int has_dq = memchr(str, '"', len) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    struct sb b = {0};
    sb_put(&b, &q, 1);
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned cp;
        size_t n = rku_utf8_decode(s + i, len - i, &cp);
        char tmp[16];
        if (n == 0) {
            /* Not valid UTF-8: Python shows the surrogate escape. */
            snprintf(tmp, sizeof tmp, "\\udc%02x", s[i]);
            sb_put(&b, tmp, strlen(tmp));
            i++;
            continue;
        }
        if (cp == (unsigned)q || cp == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)cp;
            sb_put(&b, tmp, 2);
        } else if (cp == '\n') {
            sb_put(&b, "\\n", 2);
        } else if (cp == '\r') {
            sb_put(&b, "\\r", 2);
        } else if (cp == '\t') {
            sb_put(&b, "\\t", 2);
        } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
            snprintf(tmp, sizeof tmp, "\\x%02x", cp);
            sb_put(&b, tmp, 4);
        } else {
            sb_put(&b, s + i, n);
        }
        i += n;
    }
    sb_put(&b, &q, 1);
    return sb_take(&b);
}

void rku_py_float(double x, char out[64])
{
    if (isnan(x)) {
        snprintf(out, 64, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(out, 64, "%s", x < 0 ? "-inf" : "inf");
        return;
    }
    if (x == 0) {
        snprintf(out, 64, "%s", signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char buf[64];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    if (prec > 17)
        prec = 17;
    /* %.*e may round up into the next decade (9.99 -> 1.0e+01): trust its exponent. */
    int exp10 = (int)floor(log10(fabs(x)));
    const char *e = strchr(buf, 'e');
    if (e)
        exp10 = atoi(e + 1);
    if (exp10 >= -4 && exp10 < 16) {
        int decimals = prec - 1 - exp10;
        if (decimals < 0)
            decimals = 0;
        snprintf(out, 64, "%.*f", decimals, x);
        if (!strchr(out, '.'))
            strncat(out, ".0", 64 - strlen(out) - 1);
        return;
    }
    /* Python writes 1e+16 / 1.5e-05: the mantissa without a trailing ".0". */
    snprintf(out, 64, "%.*e", prec - 1, x);
}

void rku_random_hex(char *out, size_t nchars)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    if (nchars > 2 * sizeof raw)
        nchars = 2 * sizeof raw;
    size_t nbytes = (nchars + 1) / 2;
    size_t got = 0;
    while (got < nbytes) {
        ssize_t n = getrandom(raw + got, nbytes - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            /* Fall back to a weak but unique-enough source; never fails silently. */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            for (; got < nbytes; got++)
                raw[got] = (unsigned char)(rand() ^ (int)ts.tv_nsec ^ (int)got);
            break;
        }
        got += (size_t)n;
    }
    size_t i;
    for (i = 0; i < nchars; i++)
        out[i] = hex[(i % 2) ? (raw[i / 2] & 0xf) : (raw[i / 2] >> 4)];
    out[i] = '\0';
}

/* The ASCII whitespace Python's str.strip() removes. */
static int rku_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

void rku_strip(const char **s, size_t *n)
{
    while (*n && rku_space((unsigned char)**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && rku_space((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

void rku_thread_c_locale(void)
{
    static _Thread_local int done;
    if (done)
        return;
    done = 1;
    /* newlocale(LC_ALL_MASK, "C", 0) returns glibc's static C locale object (never freed). */
    locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (c)
        uselocale(c);
}

struct timespec rku_time_after_ms(clockid_t clock, int64_t ms)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}
