/* SPDX-License-Identifier: Apache-2.0 */
/* Python-compatible bytes.decode() for utf-8, ascii and latin-1 (see decode.h). */
#include "base/decode.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The codecs this module implements. */
enum codec { CODEC_NONE = 0, CODEC_UTF8, CODEC_ASCII, CODEC_LATIN1 };

/* Error handlers. */
enum handler { H_UNKNOWN = 0, H_STRICT, H_REPLACE, H_IGNORE, H_BACKSLASH };

/* A growable output buffer (malloc). */
struct obuf {
    char *data;
    size_t len, alloc;
    int oom;
};

/* Make room for n more bytes (plus the terminating NUL). */
static int ob_reserve(struct obuf *b, size_t n)
{
    if (b->oom)
        return -1;
    if (b->len + n + 1 <= b->alloc)
        return 0;
    size_t want = b->alloc ? b->alloc : 256;
    while (want < b->len + n + 1) {
        if (want > ((size_t)-1) / 2) {
            b->oom = 1;
            return -1;
        }
        want *= 2;
    }
    char *d = realloc(b->data, want);
    if (!d) {
        b->oom = 1;
        return -1;
    }
    b->data = d;
    b->alloc = want;
    return 0;
}

/* Append n bytes. */
static void ob_put(struct obuf *b, const void *p, size_t n)
{
    if (ob_reserve(b, n))
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* Append one code point (< 0x800) as UTF-8; enough for latin-1 and U+FFFD. */
static void ob_put_cp(struct obuf *b, unsigned cp)
{
    unsigned char t[3];
    if (cp < 0x80) {
        t[0] = (unsigned char)cp;
        ob_put(b, t, 1);
    } else if (cp < 0x800) {
        t[0] = (unsigned char)(0xc0 | (cp >> 6));
        t[1] = (unsigned char)(0x80 | (cp & 0x3f));
        ob_put(b, t, 2);
    } else {
        t[0] = (unsigned char)(0xe0 | (cp >> 12));
        t[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        t[2] = (unsigned char)(0x80 | (cp & 0x3f));
        ob_put(b, t, 3);
    }
}

/* Normalise a codec name like encodings.normalize_encoding + lower(). */
static void normalize(const char *name, char *out, size_t outlen)
{
    size_t j = 0;
    int pending_us = 0;
    for (const char *p = name; *p && j + 2 < outlen; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c) || c == '.') {
            if (pending_us && j > 0)
                out[j++] = '_';
            pending_us = 0;
            out[j++] = (char)tolower(c);
        } else {
            pending_us = 1;
        }
    }
    out[j] = '\0';
}

/* Map an encoding name to a codec (CODEC_NONE if unknown). */
static enum codec codec_of(const char *encoding)
{
    static const struct {
        const char *name;
        enum codec codec;
    } names[] = {
        {"utf_8", CODEC_UTF8},     {"utf8", CODEC_UTF8},        {"u8", CODEC_UTF8},
        {"utf", CODEC_UTF8},       {"cp65001", CODEC_UTF8},     {"ascii", CODEC_ASCII},
        {"us_ascii", CODEC_ASCII}, {"646", CODEC_ASCII},        {"us", CODEC_ASCII},
        {"latin_1", CODEC_LATIN1}, {"latin1", CODEC_LATIN1},    {"latin", CODEC_LATIN1},
        {"l1", CODEC_LATIN1},      {"iso8859_1", CODEC_LATIN1}, {"iso_8859_1", CODEC_LATIN1},
        {"8859", CODEC_LATIN1},    {"cp819", CODEC_LATIN1},     {"iso_ir_100", CODEC_LATIN1},
    };
    char norm[64];
    if (strlen(encoding) >= sizeof norm)
        return CODEC_NONE;
    normalize(encoding, norm, sizeof norm);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(norm, names[i].name) == 0)
            return names[i].codec;
    return CODEC_NONE;
}

int rk_decode_known_encoding(const char *encoding)
{
    return codec_of(encoding ? encoding : "utf-8") != CODEC_NONE;
}

/* Map an error handler name (case-sensitive, as in Python). */
static enum handler handler_of(const char *errors)
{
    if (strcmp(errors, "strict") == 0)
        return H_STRICT;
    if (strcmp(errors, "replace") == 0)
        return H_REPLACE;
    if (strcmp(errors, "ignore") == 0)
        return H_IGNORE;
    if (strcmp(errors, "backslashreplace") == 0)
        return H_BACKSLASH;
    return H_UNKNOWN;
}

/* Decoding state shared by the codec loops. */
struct dec {
    const unsigned char *s;
    size_t n;
    const char *codec_name;
    const char *errors;
    enum handler h;
    struct obuf out;
    char *msg;
    size_t msglen;
};

/* Handle the undecodable range [start, end). Returns 0 to go on, or the
 * rk_decode_rc that stops decoding (msg filled). */
static enum rk_decode_rc bad_range(struct dec *d, size_t start, size_t end, const char *reason)
{
    switch (d->h) {
    case H_REPLACE:
        ob_put_cp(&d->out, 0xfffd);
        return RK_DECODE_OK;
    case H_IGNORE:
        return RK_DECODE_OK;
    case H_BACKSLASH:
        for (size_t i = start; i < end; i++) {
            char t[8];
            snprintf(t, sizeof t, "\\x%02x", d->s[i]);
            ob_put(&d->out, t, 4);
        }
        return RK_DECODE_OK;
    case H_STRICT:
        if (end - start == 1)
            snprintf(d->msg, d->msglen, "'%s' codec can't decode byte 0x%02x in position %zu: %s",
                     d->codec_name, d->s[start], start, reason);
        else
            snprintf(d->msg, d->msglen, "'%s' codec can't decode bytes in position %zu-%zu: %s",
                     d->codec_name, start, end - 1, reason);
        return RK_DECODE_ERROR;
    case H_UNKNOWN:
        break;
    }
    snprintf(d->msg, d->msglen, "unknown error handler name '%s'", d->errors);
    return RK_DECODE_UNKNOWN_HANDLER;
}

/* 1 if c is a UTF-8 continuation byte within [lo, hi]. */
static int in_range(unsigned char c, unsigned char lo, unsigned char hi)
{
    return c >= lo && c <= hi;
}

/* UTF-8 with CPython's error ranges (maximal subparts). */
static enum rk_decode_rc decode_utf8(struct dec *d)
{
    const unsigned char *s = d->s;
    size_t n = d->n, i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            /* Copy the ASCII run in one go. */
            size_t j = i + 1;
            while (j < n && s[j] < 0x80)
                j++;
            ob_put(&d->out, s + i, j - i);
            i = j;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 3;
            if (c == 0xe0)
                lo = 0xa0; /* no overlongs */
            else if (c == 0xed)
                hi = 0x9f; /* no surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 4;
            if (c == 0xf0)
                lo = 0x90; /* no overlongs */
            else if (c == 0xf4)
                hi = 0x8f; /* nothing above U+10FFFF */
        } else {
            enum rk_decode_rc rc = bad_range(d, i, i + 1, "invalid start byte");
            if (rc)
                return rc;
            i++;
            continue;
        }
        /* Check the continuation bytes that are present. */
        size_t k = 1;
        int bad = 0;
        while (k < need && i + k < n) {
            int ok = k == 1 ? in_range(s[i + k], lo, hi) : in_range(s[i + k], 0x80, 0xbf);
            if (!ok) {
                bad = 1;
                break;
            }
            k++;
        }
        if (bad) {
            enum rk_decode_rc rc = bad_range(d, i, i + k, "invalid continuation byte");
            if (rc)
                return rc;
            i += k;
            continue;
        }
        if (k < need) {
            enum rk_decode_rc rc = bad_range(d, i, n, "unexpected end of data");
            if (rc)
                return rc;
            i = n;
            continue;
        }
        ob_put(&d->out, s + i, need);
        i += need;
    }
    return RK_DECODE_OK;
}

/* ASCII: every byte >= 0x80 is its own error. */
static enum rk_decode_rc decode_ascii(struct dec *d)
{
    for (size_t i = 0; i < d->n; i++) {
        if (d->s[i] < 0x80) {
            ob_put(&d->out, d->s + i, 1);
            continue;
        }
        enum rk_decode_rc rc = bad_range(d, i, i + 1, "ordinal not in range(128)");
        if (rc)
            return rc;
    }
    return RK_DECODE_OK;
}

/* Latin-1: every byte is the code point of the same value. */
static enum rk_decode_rc decode_latin1(struct dec *d)
{
    for (size_t i = 0; i < d->n; i++)
        ob_put_cp(&d->out, d->s[i]);
    return RK_DECODE_OK;
}

enum rk_decode_rc rk_decode(const char *in, size_t len, const char *encoding, const char *errors,
                            char **out, size_t *out_len, char *msg, size_t msglen)
{
    char dummy[8];
    if (!msg || msglen == 0) {
        msg = dummy;
        msglen = sizeof dummy;
    }
    msg[0] = '\0';
    *out = NULL;
    *out_len = 0;
    if (!encoding)
        encoding = "utf-8";
    if (!errors)
        errors = "strict";
    enum codec codec = codec_of(encoding);
    if (codec == CODEC_NONE) {
        snprintf(msg, msglen, "unknown encoding: %s", encoding);
        return RK_DECODE_UNKNOWN_ENCODING;
    }
    struct dec d = {
        .s = (const unsigned char *)(in ? in : ""),
        .n = in ? len : 0,
        .errors = errors,
        .h = handler_of(errors),
        .msg = msg,
        .msglen = msglen,
    };
    enum rk_decode_rc rc;
    /* Reserve the common case (same size) up front. */
    ob_reserve(&d.out, d.n);
    switch (codec) {
    case CODEC_UTF8:
        d.codec_name = "utf-8";
        rc = decode_utf8(&d);
        break;
    case CODEC_ASCII:
        d.codec_name = "ascii";
        rc = decode_ascii(&d);
        break;
    default:
        d.codec_name = "latin-1";
        rc = decode_latin1(&d);
        break;
    }
    if (rc == RK_DECODE_OK && (d.out.oom || ob_reserve(&d.out, 0))) {
        snprintf(msg, msglen, "out of memory");
        rc = RK_DECODE_NOMEM;
    }
    if (rc != RK_DECODE_OK) {
        free(d.out.data);
        return rc;
    }
    d.out.data[d.out.len] = '\0';
    *out = d.out.data;
    *out_len = d.out.len;
    return RK_DECODE_OK;
}
