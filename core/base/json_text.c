/* SPDX-License-Identifier: Apache-2.0 */
/* JSON text written without a json-c tree (json_text.h). */
#include "base/json_text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Append the len bytes at s as a JSON string (a NUL among them escaped, as json-c does). */
static int str_n(struct rk_buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    static const char named[] = "\b\n\r\t\f\"\\", as[] = "bnrtf\"\\"; /* json-c's short escapes */
    if (rk_buf_append(b, "\"", 1) != 0)
        return -1;
    const char *run = s; /* bytes written as they are, since the last escape */
    const unsigned char *end = (const unsigned char *)s + len;
    for (const unsigned char *p = (const unsigned char *)s; p < end; p++) {
        if (*p >= 0x20 && *p != '"' && *p != '\\')
            continue;
        char esc[6] = {'\\'};
        size_t n = 2;
        const char *hit = memchr(named, *p, sizeof named - 1);
        if (hit) {
            esc[1] = as[hit - named];
        } else { /* another control character */
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[*p >> 4];
            esc[5] = hex[*p & 0xf];
            n = 6;
        }
        if (rk_buf_append(b, run, (size_t)((const char *)p - run)) != 0 ||
            rk_buf_append(b, esc, n) != 0)
            return -1;
        run = (const char *)p + 1;
    }
    if (rk_buf_append(b, run, (size_t)((const char *)end - run)) != 0)
        return -1;
    return rk_buf_append(b, "\"", 1);
}

int rk_json_str(struct rk_buf *b, const char *s)
{
    return s ? str_n(b, s, strlen(s)) : rk_buf_append(b, "null", 4);
}

int rk_json_double(struct rk_buf *b, double d)
{
    if (!isfinite(d))
        return rk_buf_append(b, "null", 4);
    char num[40];
    int n = snprintf(num, sizeof num, "%.17g", d);
    if (n < 0 || (size_t)n >= sizeof num - 2)
        return -1;
    if (!strpbrk(num, ".e")) { /* integral: json-c marks it a double */
        memcpy(num + n, ".0", 3);
        n += 2;
    }
    return rk_buf_append(b, num, (size_t)n);
}

int rk_json_value(struct rk_buf *b, json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
        return rk_buf_append(b, "null", 4);
    case json_type_boolean:
        return json_object_get_boolean(v) ? rk_buf_append(b, "true", 4)
                                          : rk_buf_append(b, "false", 5);
    case json_type_string:
        return str_n(b, json_object_get_string(v), (size_t)json_object_get_string_len(v));
    default: {
        size_t len = 0;
        const char *text = json_object_to_json_string_length(v, RK_JSON_FLAGS, &len);
        return text ? rk_buf_append(b, text, len) : -1;
    }
    }
}
