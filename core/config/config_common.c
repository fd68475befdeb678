/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the configuration files: OOM-aborting allocation, scalar
 * parsing (integers, booleans, numbers), and problem lines (rk_problems and
 * the "file:line: section.key: problem" format, secrets never quoted).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

/* Abort on allocation failure: configuration strings are tiny. */
void rk_config_oom(void)
{
    fputs("rock-admin: out of memory while reading the configuration\n", stderr);
    abort();
}

/* strdup that aborts on OOM. */
char *rk_config_strdup(const char *s)
{
    char *r = strdup(s ? s : "");
    if (!r)
        rk_config_oom();
    return r;
}

/* calloc that aborts on OOM. */
void *rk_config_calloc(size_t n, size_t size)
{
    void *r = calloc(n ? n : 1, size ? size : 1);
    if (!r)
        rk_config_oom();
    return r;
}

/* realloc of an array that aborts on OOM or overflow. */
void *rk_config_reallocarray(void *ptr, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        rk_config_oom();
    size_t bytes = n * size;
    void *r = realloc(ptr, bytes ? bytes : 1);
    if (!r)
        rk_config_oom();
    return r;
}

/* Replace *dst with a copy of src. */
void rk_config_set_str(char **dst, const char *src)
{
    char *copy = rk_config_strdup(src);
    free(*dst);
    *dst = copy;
}

/* Case-insensitive ASCII equality. */
static int ascii_caseeq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

/* Parse a decimal integer with an optional sign; 0 on success, -1 if invalid. */
int rk_config_parse_int(const char *s, long long *out)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    if (!*p)
        return -1;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q))
            return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || !end || *end)
        return -1;
    *out = v;
    return 0;
}

/* Parse a YAML-style boolean (true/false/yes/no/on/off); 1, 0 or -1 if invalid. */
int rk_config_parse_bool(const char *s)
{
    if (ascii_caseeq(s, "true") || ascii_caseeq(s, "yes") || ascii_caseeq(s, "on"))
        return 1;
    if (ascii_caseeq(s, "false") || ascii_caseeq(s, "no") || ascii_caseeq(s, "off"))
        return 0;
    return -1;
}

/* Parse a finite decimal number (no hex, inf or nan); 0 on success, -1 if invalid. */
int rk_config_parse_double(const char *s, double *out)
{
    int digits = 0;
    for (const char *q = s; *q; q++) {
        if (isdigit((unsigned char)*q))
            digits = 1;
        else if (!strchr("+-.eE", *q))
            return -1;
    }
    if (!digits)
        return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno == ERANGE || !end || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Problems                                                                  */
/* ------------------------------------------------------------------------ */

/* Append a formatted line; control characters become spaces so each problem stays one line. */
void rk_problems_add(struct rk_problems *p, const char *fmt, ...)
{
    if (!p)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    char *line = malloc((size_t)n + 1);
    if (!line)
        rk_config_oom();
    va_start(ap, fmt);
    vsnprintf(line, (size_t)n + 1, fmt, ap);
    va_end(ap);
    for (char *c = line; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    p->lines = rk_config_reallocarray(p->lines, p->n + 1, sizeof *p->lines);
    p->lines[p->n++] = line;
}

/* Free every problem line and reset the list. */
void rk_problems_free(struct rk_problems *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->lines[i]);
    free(p->lines);
    p->lines = NULL;
    p->n = 0;
}

/* Implementation of rk_config_problem_at. */
void rk_config_problem_at(struct rk_problems *p, const char *file, int line, const char *sect,
                          const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[32] = "";
    if (line > 0)
        snprintf(where, sizeof where, ":%d", line);
    rk_problems_add(p, "%s%s: %s%s%s: %s", file, where, sect, key ? "." : "", key ? key : "", msg);
}

/*
 * Describe an offending value for a type error: `"abc"`, `the quoted string "abc"`,
 * `a mapping or a sequence`, or for secrets only its kind (`a string`).
 */
void rk_config_describe_value(char *buf, size_t size, const char *text, int is_scalar, int quoted,
                              int secret)
{
    if (!is_scalar) {
        snprintf(buf, size, "a mapping or a sequence");
        return;
    }
    if (secret) {
        long long iv;
        double dv;
        if (quoted)
            snprintf(buf, size, "a string");
        else if (rk_config_parse_int(text, &iv) == 0)
            snprintf(buf, size, "an integer");
        else if (rk_config_parse_double(text, &dv) == 0)
            snprintf(buf, size, "a number");
        else if (rk_config_parse_bool(text) >= 0)
            snprintf(buf, size, "a boolean");
        else
            snprintf(buf, size, "a string");
        return;
    }
    size_t len = strlen(text);
    int cut = len > RK_CONFIG_VALUE_SHOWN_MAX;
    snprintf(buf, size, "%s\"%.*s%s\"", quoted ? "the quoted string " : "",
             (int)(cut ? RK_CONFIG_VALUE_SHOWN_MAX : len), text, cut ? "..." : "");
}

/* True if s is one of the NULL-terminated list. */
int rk_config_in_list(const char *const *list, const char *s)
{
    for (size_t i = 0; list && list[i]; i++)
        if (!strcmp(list[i], s))
            return 1;
    return 0;
}
