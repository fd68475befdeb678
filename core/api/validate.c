/* SPDX-License-Identifier: Apache-2.0 */
/* The lax request validators (validate.h): fields of a JSON body or the
 * query string, problems accumulated in pydantic's wording. */
#include "api/validate.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "host/host.h"
#include "engine/http_server.h"
#include "rkutil.h"

/* Apply the identifier rules the flags name to a non-empty value. An empty
 * value keeps the route's own handling (Field required / not found). */
static int id_ok(struct rk_v *v, const char *key, unsigned flags, const char *s, size_t len)
{
    if (len == 0)
        return 1;
    if ((flags & RK_V_SANDBOX_ID) && !rk_id_valid(s, len)) {
        rk_v_problem(v, key, RK_ID_RULE_MSG);
        return 0;
    }
    if ((flags & RK_V_SESSION) && !rk_session_name_valid(s, len)) {
        rk_v_problem(v, key, RK_SESSION_RULE_MSG);
        return 0;
    }
    return 1;
}

/* The accepted value of a field (arena copy); a sandbox id is noted on the
 * request for the access log. */
static const char *accept_str(struct rk_v *v, unsigned flags, const char *s, size_t len)
{
    const char *out = rk_arena_strndup(v->call, s, len);
    if ((flags & RK_V_SANDBOX_ID) && v->req && out && *out)
        rk_req_set_sandbox(v->req, out);
    return out;
}

void rk_v_init(struct rk_v *v, struct rk_call *call, const char *loc)
{
    memset(v, 0, sizeof *v);
    v->call = call;
    v->loc = loc;
}

int rk_v_ok(const struct rk_v *v)
{
    return v->n == 0;
}

const char *rk_v_text(struct rk_v *v)
{
    return rk_buf_cstr(&v->text);
}

void rk_v_free(struct rk_v *v)
{
    rk_buf_free(&v->text);
}

void rk_v_problem(struct rk_v *v, const char *key, const char *msg)
{
    if (v->n++)
        rk_buf_append(&v->text, "; ", 2);
    rk_buf_printf(&v->text, "%s.%s: %s", v->loc, key, msg);
}

json_object *rk_v_body(struct rk_v *v, struct rk_req *r)
{
    v->req = r;
    if (!r->body || r->body_len == 0) {
        rk_v_problem(v, "body", "Field required");
        return NULL;
    }
    struct json_tokener *tok = json_tokener_new();
    json_object *o = json_tokener_parse_ex(tok, r->body, (int)r->body_len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t consumed = (size_t)json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    /* Trailing garbage after the JSON value is a decode error too. */
    while (o && consumed < r->body_len && isspace((unsigned char)r->body[consumed]))
        consumed++;
    if (!o || jerr != json_tokener_success || consumed < r->body_len) {
        json_object_put(o);
        char key[32];
        snprintf(key, sizeof key, "%zu", consumed);
        rk_v_problem(v, key, "JSON decode error");
        return NULL;
    }
    if (!json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        rk_v_problem(v, "body", "Input should be a valid dictionary");
        return NULL;
    }
    return o;
}

/* Member lookup treating JSON null like absence; obj may be NULL. */
static json_object *member(json_object *obj, const char *key, int *present)
{
    json_object *val = NULL;
    int has = obj && json_object_object_get_ex(obj, key, &val);
    if (present)
        *present = has && val != NULL;
    return has ? val : NULL;
}

/* The member's value, or NULL when absent/null (a problem if required). */
static json_object *given(struct rk_v *v, json_object *obj, const char *key, unsigned flags)
{
    int present;
    json_object *val = member(obj, key, &present);
    if (!present && (flags & RK_V_REQUIRED) && obj)
        rk_v_problem(v, key, "Field required");
    return present ? val : NULL;
}

const char *rk_v_str(struct rk_v *v, json_object *obj, const char *key, unsigned flags,
                     const char *def)
{
    json_object *val = given(v, obj, key, flags);
    if (!val)
        return def;
    if (!json_object_is_type(val, json_type_string)) {
        rk_v_problem(v, key, "Input should be a valid string");
        return def;
    }
    const char *s = json_object_get_string(val);
    size_t len = (size_t)json_object_get_string_len(val);
    if (flags & RK_V_NONBLANK) {
        rku_strip(&s, &len);
        if (!len) {
            rk_v_problem(v, key, "String should have at least 1 character");
            return def;
        }
    }
    if (!id_ok(v, key, flags, s, len))
        return def;
    return accept_str(v, flags, s, len);
}

/* Parse a number from JSON (int, double, or numeric string). */
static int number_of(json_object *val, double *out)
{
    if (json_object_is_type(val, json_type_int)) {
        *out = (double)json_object_get_int64(val);
        return 0;
    }
    if (json_object_is_type(val, json_type_double)) {
        *out = json_object_get_double(val);
        return isfinite(*out) ? 0 : -1;
    }
    if (json_object_is_type(val, json_type_string)) {
        const char *s = json_object_get_string(val);
        char *end;
        errno = 0;
        double d = strtod(s, &end);
        while (*end && isspace((unsigned char)*end))
            end++;
        if (end == s || *end || errno || !isfinite(d))
            return -1;
        *out = d;
        return 0;
    }
    return -1;
}

double rk_v_num(struct rk_v *v, json_object *obj, const char *key, unsigned flags, double def,
                int *present_out)
{
    if (present_out)
        *present_out = 0;
    json_object *val = given(v, obj, key, flags);
    if (!val)
        return def;
    double d;
    if (json_object_is_type(val, json_type_boolean) || number_of(val, &d)) {
        rk_v_problem(v, key, "Input should be a valid number");
        return def;
    }
    if (present_out)
        *present_out = 1;
    return d;
}

int64_t rk_v_int(struct rk_v *v, json_object *obj, const char *key, unsigned flags, int64_t def,
                 int *present_out)
{
    if (present_out)
        *present_out = 0;
    json_object *val = given(v, obj, key, flags);
    if (!val)
        return def;
    if (json_object_is_type(val, json_type_int)) {
        if (present_out)
            *present_out = 1;
        return json_object_get_int64(val);
    }
    double d;
    if (json_object_is_type(val, json_type_boolean) || number_of(val, &d)) {
        rk_v_problem(v, key, "Input should be a valid integer");
        return def;
    }
    if (d != floor(d) || fabs(d) > 9.0e15) {
        rk_v_problem(v, key,
                     "Input should be a valid integer, got a number with a fractional part");
        return def;
    }
    if (present_out)
        *present_out = 1;
    return (int64_t)d;
}

int rk_v_bool(struct rk_v *v, json_object *obj, const char *key, unsigned flags, int def)
{
    json_object *val = given(v, obj, key, flags);
    if (!val)
        return def;
    if (json_object_is_type(val, json_type_boolean))
        return json_object_get_boolean(val);
    if (json_object_is_type(val, json_type_int)) {
        int64_t i = json_object_get_int64(val);
        if (i == 0 || i == 1)
            return (int)i;
    }
    if (json_object_is_type(val, json_type_string)) {
        int b = rk_parse_bool(json_object_get_string(val));
        if (b >= 0)
            return b;
    }
    rk_v_problem(v, key, "Input should be a valid boolean");
    return def;
}

json_object *rk_v_strmap(struct rk_v *v, json_object *obj, const char *key, unsigned flags)
{
    json_object *val = given(v, obj, key, flags);
    if (!val)
        return NULL;
    if (!json_object_is_type(val, json_type_object)) {
        rk_v_problem(v, key, "Input should be a valid dictionary");
        return NULL;
    }
    json_object_object_foreach(val, k, item)
    {
        if (!item || !json_object_is_type(item, json_type_string)) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%s", key, k);
            rk_v_problem(v, sub, "Input should be a valid string");
            return NULL;
        }
    }
    return val;
}

json_object *rk_v_strlist(struct rk_v *v, json_object *obj, const char *key, unsigned flags)
{
    json_object *val = given(v, obj, key, flags);
    if (!val)
        return NULL;
    if (!json_object_is_type(val, json_type_array)) {
        rk_v_problem(v, key, "Input should be a valid list");
        return NULL;
    }
    size_t n = json_object_array_length(val);
    for (size_t i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(val, i);
        if (!item || !json_object_is_type(item, json_type_string)) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%zu", key, i);
            rk_v_problem(v, sub, "Input should be a valid string");
            return NULL;
        }
        if ((flags & RK_V_SANDBOX_ID) && json_object_get_string_len(item) > 0 &&
            !rk_id_valid(json_object_get_string(item), (size_t)json_object_get_string_len(item))) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%zu", key, i);
            rk_v_problem(v, sub, RK_ID_RULE_MSG);
            return NULL;
        }
    }
    return val;
}

const char **rk_v_strings(struct rk_v *v, json_object *list, size_t *n_out)
{
    size_t n = list ? json_object_array_length(list) : 0;
    *n_out = n;
    if (!n)
        return NULL;
    const char **out = rk_arena_alloc(v->call, n * sizeof *out);
    for (size_t i = 0; i < n; i++)
        out[i] = json_object_get_string(json_object_array_get_idx(list, i));
    return out;
}

int rk_v_choice(struct rk_v *v, json_object *obj, const char *key, const char *const *allowed,
                int def)
{
    json_object *val = member(obj, key, NULL);
    if (!val)
        return def;
    if (json_object_is_type(val, json_type_string))
        for (int i = 0; allowed[i]; i++)
            if (strcmp(json_object_get_string(val), allowed[i]) == 0)
                return i;
    struct rk_buf msg = {0};
    rk_buf_printf(&msg, "Input should be ");
    for (size_t i = 0; allowed[i]; i++) {
        if (i > 0)
            rk_buf_printf(&msg, allowed[i + 1] ? ", " : " or ");
        rk_buf_printf(&msg, "'%s'", allowed[i]);
    }
    rk_v_problem(v, key, rk_buf_cstr(&msg));
    rk_buf_free(&msg);
    return def;
}

int rk_v_opt_seconds(struct rk_v *v, json_object *obj, const char *key, int has_def, double def,
                     double *out)
{
    json_object *val = NULL;
    *out = 0;
    int given = obj && json_object_object_get_ex(obj, key, &val);
    if (given && !val)
        return 0;
    if (!given) {
        *out = def;
        return has_def;
    }
    int present = 0;
    *out = rk_v_num(v, obj, key, 0, def, &present);
    return present;
}

/* Value of one hex digit or -1. */
static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decode s[0..n) ('+' = space) into out (at least n + 1 bytes); returns the
 * length. Decoded NUL bytes are kept, so *has_nul tells if there was one.
 * Hand-written: form decoding maps '+' to space; curl_easy_unescape does not. */
static size_t form_decode(const char *s, size_t n, char *out, int *has_nul)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 &&
            (lo = hexval(s[i + 2])) >= 0) {
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[o++] = s[i] == '+' ? ' ' : s[i];
        }
    }
    out[o] = '\0';
    *has_nul = memchr(out, '\0', o) != NULL;
    return o;
}

/* 1 if the raw query gives key a value holding an encoded NUL byte (the
 * decoded C string would silently end there). */
static int query_value_has_nul(struct rk_req *r, const char *key)
{
    const char *q = rk_req_raw_query(r);
    int found = 0;
    while (*q && !found) {
        size_t seg = strcspn(q, "&");
        const char *eq = memchr(q, '=', seg);
        size_t klen = eq ? (size_t)(eq - q) : seg;
        char *k = malloc(klen + 1);
        if (!k)
            return 1;
        int knul, vnul = 0;
        size_t kl = form_decode(q, klen, k, &knul);
        if (!knul && kl == strlen(key) && memcmp(k, key, kl) == 0 && eq) {
            size_t vlen = seg - klen - 1;
            char *val = malloc(vlen + 1);
            if (!val) {
                free(k);
                return 1;
            }
            form_decode(eq + 1, vlen, val, &vnul);
            free(val);
            found = vnul;
        }
        free(k);
        q += seg;
        if (*q == '&')
            q++;
    }
    return found;
}

const char *rk_v_qstr(struct rk_v *v, struct rk_req *r, const char *key, unsigned flags)
{
    v->req = r;
    const char *s = rk_req_query(r, key);
    if (!s) {
        if (flags & RK_V_REQUIRED)
            rk_v_problem(v, key, "Field required");
        return NULL;
    }
    if (query_value_has_nul(r, key)) {
        rk_v_problem(v, key, "String should not contain NUL characters");
        return NULL;
    }
    size_t len = strlen(s);
    if (flags & RK_V_NONBLANK) {
        rku_strip(&s, &len);
        if (!len) {
            rk_v_problem(v, key, "String should have at least 1 character");
            return NULL;
        }
    }
    if (!id_ok(v, key, flags, s, len))
        return NULL;
    return accept_str(v, flags, s, len);
}

int rk_v_qbool(struct rk_v *v, struct rk_req *r, const char *key, int def)
{
    const char *s = rk_req_query(r, key);
    if (!s)
        return def;
    int b = rk_parse_bool(s);
    if (b < 0) {
        rk_v_problem(v, key, "Input should be a valid boolean, unable to interpret input");
        return def;
    }
    return b;
}

int64_t rk_v_qint(struct rk_v *v, struct rk_req *r, const char *key, int64_t def)
{
    const char *s = rk_req_query(r, key);
    if (!s)
        return def;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno) {
        rk_v_problem(v, key,
                     "Input should be a valid integer, unable to parse string as an integer");
        return def;
    }
    return x;
}

/* The problem text for a value outside [lo, hi]. */
static void range_problem(struct rk_v *v, const char *key, int has_lo, int has_hi, const char *lo,
                          const char *hi)
{
    char msg[160];
    if (has_lo && has_hi)
        snprintf(msg, sizeof msg, "Input should be in the range [%s, %s]", lo, hi);
    else if (has_hi)
        snprintf(msg, sizeof msg, "Input should be less than or equal to %s", hi);
    else
        snprintf(msg, sizeof msg, "Input should be greater than or equal to %s", lo);
    rk_v_problem(v, key, msg);
}

int64_t rk_v_irange(struct rk_v *v, const char *key, int64_t x, int64_t lo, int64_t hi)
{
    if (x >= lo && x <= hi)
        return x;
    char l[32], h[32];
    snprintf(l, sizeof l, "%lld", (long long)lo);
    snprintf(h, sizeof h, "%lld", (long long)hi);
    range_problem(v, key, lo != INT64_MIN, hi != INT64_MAX, l, h);
    return x < lo ? lo : hi;
}

double rk_v_frange(struct rk_v *v, const char *key, double x, double lo, double hi)
{
    if (x >= lo && x <= hi)
        return x;
    char l[32], h[32];
    snprintf(l, sizeof l, "%g", lo);
    snprintf(h, sizeof h, "%g", hi);
    range_problem(v, key, isfinite(lo), isfinite(hi), l, h);
    return !(x >= lo) ? (isfinite(lo) ? lo : 0) : hi;
}

int64_t rk_v_int_in(struct rk_v *v, json_object *obj, const char *key, unsigned flags, int64_t def,
                    int64_t lo, int64_t hi, int *present)
{
    int has = 0;
    int64_t x = rk_v_int(v, obj, key, flags, def, &has);
    if (present)
        *present = has;
    return has ? rk_v_irange(v, key, x, lo, hi) : x;
}

double rk_v_num_in(struct rk_v *v, json_object *obj, const char *key, unsigned flags, double def,
                   double lo, double hi, int *present)
{
    int has = 0;
    double x = rk_v_num(v, obj, key, flags, def, &has);
    if (present)
        *present = has;
    return has ? rk_v_frange(v, key, x, lo, hi) : x;
}

int64_t rk_sat_i64(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}
