/* SPDX-License-Identifier: Apache-2.0 */
/* A JSON object read in place (rkjson.h). */
#include "rkjson.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Nesting the scanner follows (json-c's own limit is 32). */
#define SCAN_DEPTH_MAX 16
/* Members of a nested object whose names are checked for repeats. */
#define NESTED_MEMBERS_MAX 32

struct scan {
    const char *s;
    size_t len;
    size_t at;
};

static int value(struct scan *sc, struct rku_json_span *out, int depth);

/* A string at sc->at (its opening quote): its content's span. Only the escapes json-c writes
 * for the characters it escapes by name; \u and raw control bytes are refused. */
static int string(struct scan *sc, struct rku_json_span *out, int is_key)
{
    const char *s = sc->s;
    size_t i = sc->at + 1;
    size_t start = i;
    for (;;) {
        if (i >= sc->len)
            return -1;
        unsigned char c = (unsigned char)s[i];
        if (c == '"')
            break;
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            if (is_key || i + 1 >= sc->len || !strchr("\"\\/bfnrt", s[i + 1]) || s[i + 1] == 0)
                return -1;
            i += 2;
            continue;
        }
        i++;
    }
    *out = (struct rku_json_span){s + start, i - start, RKU_JSON_STRING};
    sc->at = i + 1;
    return 0;
}

/* A number at sc->at, in JSON's grammar, that json-c writes back as it is. */
static int number(struct scan *sc, struct rku_json_span *out)
{
    const char *s = sc->s;
    size_t i = sc->at, n = sc->len;
    int is_double = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i >= n || s[i] < '0' || s[i] > '9')
        return -1;
    if (s[i] == '0')
        i++;
    else
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    if (i < n && s[i] == '.') {
        is_double = 1;
        if (++i >= n || s[i] < '0' || s[i] > '9')
            return -1;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        is_double = 1;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= n || s[i] < '0' || s[i] > '9')
            return -1;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    size_t len = i - sc->at;
    char buf[64];
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, s + sc->at, len);
    buf[len] = 0;
    errno = 0;
    if (is_double) {
        double d = strtod(buf, NULL);
        if (errno || !isfinite(d))
            return -1;
    } else {
        (void)strtoll(buf, NULL, 10);
        if (errno || strcmp(buf, "-0") == 0)
            return -1; /* beyond int64: json-c reads it otherwise; "-0" it writes as 0 */
    }
    *out = (struct rku_json_span){s + sc->at, len, is_double ? RKU_JSON_DOUBLE : RKU_JSON_INT};
    sc->at = i;
    return 0;
}

static int literal(struct scan *sc, const char *word, enum rku_json_kind kind,
                   struct rku_json_span *out)
{
    size_t n = strlen(word);
    if (sc->len - sc->at < n || memcmp(sc->s + sc->at, word, n) != 0)
        return -1;
    *out = (struct rku_json_span){sc->s + sc->at, n, kind};
    sc->at += n;
    return 0;
}

static int same_key(const struct rku_json_span *a, const struct rku_json_span *b)
{
    return a->n == b->n && memcmp(a->p, b->p, a->n) == 0;
}

/* An object at sc->at: its members into m[0..max) when m is given (the top level), else only
 * checked (names compared within the first NESTED_MEMBERS_MAX). The number of members or -1. */
static int object(struct scan *sc, struct rku_json_member *m, size_t max, int depth)
{
    struct rku_json_member local[NESTED_MEMBERS_MAX];
    if (!m) {
        m = local;
        max = NESTED_MEMBERS_MAX;
    }
    if (depth > SCAN_DEPTH_MAX)
        return -1;
    sc->at++; /* { */
    size_t count = 0;
    if (sc->at < sc->len && sc->s[sc->at] == '}') {
        sc->at++;
        return 0;
    }
    for (;;) {
        struct rku_json_member mb;
        if (sc->at >= sc->len || sc->s[sc->at] != '"' || string(sc, &mb.key, 1) != 0)
            return -1;
        if (sc->at >= sc->len || sc->s[sc->at] != ':')
            return -1;
        sc->at++;
        if (value(sc, &mb.value, depth) != 0)
            return -1;
        if (count >= max)
            return -1;
        for (size_t k = 0; k < count; k++)
            if (same_key(&m[k].key, &mb.key))
                return -1; /* json-c keeps one of them: its text would differ */
        m[count++] = mb;
        if (sc->at >= sc->len)
            return -1;
        char c = sc->s[sc->at++];
        if (c == '}')
            return (int)count;
        if (c != ',')
            return -1;
    }
}

static int array(struct scan *sc, int depth)
{
    if (depth > SCAN_DEPTH_MAX)
        return -1;
    sc->at++; /* [ */
    if (sc->at < sc->len && sc->s[sc->at] == ']') {
        sc->at++;
        return 0;
    }
    for (;;) {
        struct rku_json_span v;
        if (value(sc, &v, depth) != 0 || sc->at >= sc->len)
            return -1;
        char c = sc->s[sc->at++];
        if (c == ']')
            return 0;
        if (c != ',')
            return -1;
    }
}

/* Any value at sc->at (no whitespace before it). */
static int value(struct scan *sc, struct rku_json_span *out, int depth)
{
    if (sc->at >= sc->len)
        return -1;
    size_t start = sc->at;
    switch (sc->s[sc->at]) {
    case '"':
        return string(sc, out, 0);
    case '{':
        if (object(sc, NULL, 0, depth + 1) < 0)
            return -1;
        *out = (struct rku_json_span){sc->s + start, sc->at - start, RKU_JSON_OBJECT};
        return 0;
    case '[':
        if (array(sc, depth + 1) != 0)
            return -1;
        *out = (struct rku_json_span){sc->s + start, sc->at - start, RKU_JSON_ARRAY};
        return 0;
    case 't':
        return literal(sc, "true", RKU_JSON_BOOL, out);
    case 'f':
        return literal(sc, "false", RKU_JSON_BOOL, out);
    case 'n':
        return literal(sc, "null", RKU_JSON_NULL, out);
    default:
        return number(sc, out);
    }
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int rku_json_scan_object(const char *text, size_t len, struct rku_json_member *m, size_t max)
{
    struct scan sc = {text, len, 0};
    if (!text || !m)
        return -1;
    while (sc.at < len && is_space(text[sc.at]))
        sc.at++;
    if (sc.at >= len || text[sc.at] != '{')
        return -1;
    int n = object(&sc, m, max, 1);
    while (n >= 0 && sc.at < len && is_space(text[sc.at]))
        sc.at++;
    return n >= 0 && sc.at == len ? n : -1;
}

const struct rku_json_span *rku_json_member_get(const struct rku_json_member *m, size_t n,
                                                const char *key)
{
    size_t kn = strlen(key);
    for (size_t i = 0; i < n; i++)
        if (m[i].key.n == kn && memcmp(m[i].key.p, key, kn) == 0)
            return &m[i].value;
    return NULL;
}

size_t rku_json_copy(const struct rku_json_span *v, char *out)
{
    const char *p = v->p, *end = v->p + v->n;
    size_t o = 0;
    if (v->kind == RKU_JSON_STRING)
        out[o++] = '"';
    /* "\/" (json-c's PLAIN escape of "/") is written as "/"; every other escape as it is. A
     * backslash only occurs inside strings, so pairs are read from the left. */
    while (p < end) {
        const char *bs = memchr(p, '\\', (size_t)(end - p));
        if (!bs)
            break;
        memcpy(out + o, p, (size_t)(bs - p));
        o += (size_t)(bs - p);
        if (bs[1] == '/') {
            out[o++] = '/';
        } else {
            memcpy(out + o, bs, 2);
            o += 2;
        }
        p = bs + 2;
    }
    memcpy(out + o, p, (size_t)(end - p));
    o += (size_t)(end - p);
    if (v->kind == RKU_JSON_STRING)
        out[o++] = '"';
    return o;
}

int rku_json_array_next(const struct rku_json_span *v, size_t *at, struct rku_json_span *out)
{
    if (v->kind != RKU_JSON_ARRAY || v->n < 2 || v->p[0] != '[')
        return -1;
    struct scan sc = {v->p, v->n, *at ? *at : 1};
    if (sc.at >= sc.len - 1)
        return 0; /* after the last element, or "[]" */
    if (value(&sc, out, 1) != 0 || sc.at >= sc.len || (v->p[sc.at] != ',' && v->p[sc.at] != ']'))
        return -1;
    *at = sc.at + 1;
    return 1;
}

char *rku_json_decode(const struct rku_json_span *v, char *out, size_t cap)
{
    if (v->kind != RKU_JSON_STRING)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < v->n; i++) {
        char c = v->p[i];
        if (c == '\\') {
            /* the named escapes; the others (" \ /) stand for themselves */
            static const char names[] = "bfnrt", chars[] = "\b\f\n\r\t";
            c = v->p[++i];
            const char *named = c ? strchr(names, c) : NULL;
            if (named)
                c = chars[named - names];
        }
        if (o + 1 >= cap)
            return NULL;
        out[o++] = c;
    }
    if (o >= cap)
        return NULL;
    out[o] = 0;
    return out;
}

/* The number's text NUL-terminated in buf (the scanner admitted at most 63 bytes). */
static const char *number_text(const struct rku_json_span *v, char buf[64])
{
    size_t n = v->n < 63 ? v->n : 63;
    memcpy(buf, v->p, n);
    buf[n] = 0;
    return buf;
}

int64_t rku_json_int(const struct rku_json_span *v)
{
    char buf[64];
    return strtoll(number_text(v, buf), NULL, 10);
}

double rku_json_number(const struct rku_json_span *v)
{
    char buf[64];
    if (v->kind == RKU_JSON_INT)
        return (double)rku_json_int(v);
    return strtod(number_text(v, buf), NULL);
}
