/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_map.c
 * @brief Pure mapping helpers: resources, images, states, quoting, Python-style formatting.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "os_internal.h"
#include "rkutil.h"

/* ------------------------------------------------------------------------ */
/* String builder                                                            */
/* ------------------------------------------------------------------------ */

/** Make room for n more bytes plus a NUL; latches oom on failure. */
static int sb_reserve(struct os_sb *sb, size_t n)
{
    if (sb->oom)
        return 0;
    if (sb->len + n + 1 <= sb->cap)
        return 1;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + n + 1) {
        if (cap > SIZE_MAX / 2) {
            sb->oom = 1;
            return 0;
        }
        cap *= 2;
    }
    char *p = realloc(sb->p, cap);
    if (!p) {
        sb->oom = 1;
        return 0;
    }
    sb->p = p;
    sb->cap = cap;
    return 1;
}

/** Append n bytes. */
void os_sb_putn(struct os_sb *sb, const char *s, size_t n)
{
    if (!sb_reserve(sb, n))
        return;
    if (n)
        memcpy(sb->p + sb->len, s, n);
    sb->len += n;
    sb->p[sb->len] = '\0';
}

/** Append a NUL-terminated string. */
void os_sb_puts(struct os_sb *sb, const char *s)
{
    os_sb_putn(sb, s, strlen(s));
}

/** Append printf-formatted text. */
void os_sb_printf(struct os_sb *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sb_reserve(sb, (size_t)n)) {
        sb->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(sb->p + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

/** Return the built string (caller frees) and reset the builder; NULL on OOM. */
char *os_sb_take(struct os_sb *sb)
{
    if (!sb->oom && !sb->p)
        sb_reserve(sb, 0);
    if (sb->oom) {
        os_sb_free(sb);
        return NULL;
    }
    sb->p[sb->len] = '\0';
    char *p = sb->p;
    sb->p = NULL;
    sb->len = sb->cap = 0;
    return p;
}

/** Release the builder's buffer. */
void os_sb_free(struct os_sb *sb)
{
    free(sb->p);
    sb->p = NULL;
    sb->len = sb->cap = 0;
    sb->oom = 0;
}

/* ------------------------------------------------------------------------ */
/* Resource and image mapping                                                */
/* ------------------------------------------------------------------------ */

/** Strip Python-whitespace on both ends into a fresh string. */
static char *strip_dup(const char *s)
{
    size_t n = strlen(s);
    rku_strip(&s, &n);
    return strndup(s, n);
}

/** Docker-style memory to Kubernetes units: 8g -> 8Gi, 4096m -> 4096Mi, rest unchanged. */
char *os_mem_to_k8s(const char *mem)
{
    char *m = strip_dup(mem ? mem : "");
    if (!m)
        return NULL;
    size_t n = strlen(m);
    if (n >= 2 && (strcmp(m + n - 2, "Gi") == 0 || strcmp(m + n - 2, "Mi") == 0 ||
                   strcmp(m + n - 2, "Ki") == 0))
        return m;
    if (n >= 1) {
        char last = m[n - 1];
        const char *unit = NULL;
        if (last == 'g' || last == 'G')
            unit = "Gi";
        else if (last == 'm' || last == 'M')
            unit = "Mi";
        if (unit) {
            struct os_sb sb = {0};
            os_sb_putn(&sb, m, n - 1);
            os_sb_puts(&sb, unit);
            free(m);
            return os_sb_take(&sb);
        }
    }
    return m;
}

/** Format a double the way Python's repr(float) does (shortest round trip, "3.0"). */
char *os_py_float(double x)
{
    char buf[64];
    rku_py_float(x, buf);
    return strdup(buf);
}

/** The environment kv[0..n) as a JSON object of strings (a missing value as ""). */
json_object *os_env_object(const struct rk_kv *kv, size_t n)
{
    json_object *env = json_object_new_object();
    for (size_t i = 0; env && i < n; i++)
        json_object_object_add(env, kv[i].key,
                               json_object_new_string(kv[i].value ? kv[i].value : ""));
    return env;
}

/** CPU value for OpenSandbox: `limit_cpus or cpus`, "4" for integral values else repr. */
char *os_format_cpu(double cpus, double limit_cpus)
{
    double x = limit_cpus != 0 ? limit_cpus : cpus;
    if (isfinite(x) && x == floor(x) && fabs(x) < 1e18) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%lld", (long long)x);
        return strdup(buf);
    }
    return os_py_float(x);
}

/** Prefix an image with a registry unless it already names one (behaviour §0.3). */
char *os_qualify_image(const char *image, const char *prefix)
{
    if (!image)
        image = "";
    char *p = strip_dup(prefix ? prefix : "");
    if (!p)
        return NULL;
    size_t pn = strlen(p);
    while (pn && p[pn - 1] == '/')
        p[--pn] = '\0';
    if (pn == 0) {
        free(p);
        return strdup(image);
    }
    char *img = strip_dup(image);
    if (!img || !*img) {
        free(p);
        return img;
    }
    const char *slash = strchr(img, '/');
    if (slash) {
        size_t fn = (size_t)(slash - img);
        if (memchr(img, '.', fn) || memchr(img, ':', fn) ||
            (fn == 9 && strncmp(img, "localhost", 9) == 0)) {
            free(p);
            return img;
        }
    }
    struct os_sb sb = {0};
    os_sb_printf(&sb, "%s/%s", p, img);
    free(p);
    free(img);
    return os_sb_take(&sb);
}

/** Map an OpenSandbox status.state to a ROCK state (exact, case-sensitive). */
enum rk_state os_map_state(const char *state, int *failed)
{
    if (failed)
        *failed = 0;
    if (!state)
        return RK_STATE_PENDING;
    if (strcmp(state, "Pending") == 0)
        return RK_STATE_PENDING;
    if (strcmp(state, "Running") == 0)
        return RK_STATE_RUNNING;
    if (strcmp(state, "Pausing") == 0 || strcmp(state, "Paused") == 0 ||
        strcmp(state, "Stopping") == 0)
        return RK_STATE_STOPPED;
    if (strcmp(state, "Failed") == 0) {
        if (failed)
            *failed = 1;
        return RK_STATE_STOPPED;
    }
    if (strcmp(state, "Terminated") == 0)
        return RK_STATE_DELETED;
    return RK_STATE_PENDING;
}

/* ------------------------------------------------------------------------ */
/* Quoting and Python formatting                                             */
/* ------------------------------------------------------------------------ */

/** POSIX shell quoting equivalent to Python's shlex.quote. */
char *os_shell_quote(const char *s)
{
    return rku_shell_quote(s);
}

/** Python repr() of a str holding these bytes (librkutil, shared with the core). */
char *os_py_repr(const char *s, size_t len)
{
    return rku_py_repr(s, len);
}

/** True if name matches [A-Za-z_][A-Za-z0-9_]*. */
int os_env_name_valid(const char *name)
{
    if (!name || !(isalpha((unsigned char)*name) || *name == '_'))
        return 0;
    for (const char *c = name; *c; c++) {
        if (!(isalnum((unsigned char)*c) || *c == '_') || (unsigned char)*c >= 0x80)
            return 0;
    }
    return 1;
}

/** The reason for a host[:port] that CURLU refused (rc), in the order the rules are written
 *  in the configuration docs. Only picks the message; CURLU decided. */
static const char *endpoint_refusal(const char *ep, CURLUcode rc)
{
    const char *port = NULL;
    if (*ep == '[') {
        const char *close = strchr(ep, ']');
        if (!close || close == ep + 1)
            return "has an unterminated IPv6 address; expected [addr]:port";
        if (close[1] && close[1] != ':')
            return "has junk after the IPv6 address; expected [addr]:port";
        if (rc == CURLUE_BAD_IPV6)
            return "has an invalid IPv6 address; expected [addr]:port";
        port = close[1] ? close + 2 : NULL;
    } else {
        const char *colon = strchr(ep, ':');
        if (colon == ep || rc == CURLUE_NO_HOST)
            return "has an empty host; expected host[:port]";
        if (colon && strchr(colon + 1, ':'))
            return "has more than one ':'; write IPv6 addresses as [addr]:port";
        port = colon ? colon + 1 : NULL;
    }
    if (port && rc == CURLUE_BAD_PORT_NUMBER) {
        size_t n = strlen(port);
        if (n == 0 || n > 5 || strspn(port, "0123456789") != n)
            return "has an invalid port; expected 1-65535";
        return "has a port outside 1-65535";
    }
    return "contains an invalid character; expected host[:port]";
}

/** Validate an endpoint as host[:port] (IPv6 in brackets); sets *why on failure. The host and
 *  port are parsed and checked by libcurl's URL parser (CURLU), as they will be used. */
int os_endpoint_valid(const char *ep, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    if (!ep || !*ep) {
        *why = "must not be empty; expected host[:port]";
        return 0;
    }
    /* Parts a URL may carry but an endpoint must not: CURLU would take them apart silently. */
    if (strstr(ep, "://")) {
        *why = "must not contain a scheme; set protocol separately and use host[:port]";
        return 0;
    }
    for (const char *c = ep; *c; c++) {
        if (*c == '/' || *c == '?' || *c == '#') {
            *why = "must not contain a path, query or fragment; expected host[:port]";
            return 0;
        }
        if (isspace((unsigned char)*c) || *c == '@' || (unsigned char)*c < 0x20) {
            *why = "contains an invalid character; expected host[:port]";
            return 0;
        }
    }
    struct os_sb sb = {0};
    os_sb_printf(&sb, "http://%s", ep);
    char *url = os_sb_take(&sb);
    CURLU *u = url ? curl_url() : NULL;
    if (!u) {
        free(url);
        *why = "could not be checked (out of memory)";
        return 0;
    }
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
    free(url);
    char *host = NULL, *port = NULL;
    if (rc == CURLUE_OK)
        rc = curl_url_get(u, CURLUPART_HOST, &host, 0);
    CURLUcode prc = rc == CURLUE_OK ? curl_url_get(u, CURLUPART_PORT, &port, 0) : rc;
    curl_url_cleanup(u);
    int ok = 1;
    if (rc != CURLUE_OK || !host || !*host) {
        *why = endpoint_refusal(ep, rc == CURLUE_OK ? CURLUE_NO_HOST : rc);
        ok = 0;
    } else if (prc == CURLUE_NO_PORT) {
        /* CURLU takes "host:" as no port; an endpoint with a ':' must name one. */
        if (ep[strlen(ep) - 1] == ':') {
            *why = "has an invalid port; expected 1-65535";
            ok = 0;
        }
    } else if (prc != CURLUE_OK || !port) {
        *why = endpoint_refusal(ep, CURLUE_BAD_PORT_NUMBER);
        ok = 0;
    } else {
        /* CURLU accepts port 0 and any number of leading zeros; an endpoint port is 1-65535
         * written in at most five digits. */
        const char *text = strrchr(ep, ':') + 1;
        if (strlen(text) > 5) {
            *why = "has an invalid port; expected 1-65535";
            ok = 0;
        } else if (strtol(port, NULL, 10) < 1) {
            *why = "has a port outside 1-65535";
            ok = 0;
        }
    }
    curl_free(host);
    curl_free(port);
    return ok;
}

/** execd mode encoding (644 meaning 0644) to permission bits; *ok = 0 on digits 8/9. */
unsigned os_mode_from_decimal(int64_t digits, int *ok)
{
    unsigned mode = 0, mul = 1;
    int good = digits >= 0;
    while (good && digits > 0) {
        int d = (int)(digits % 10);
        if (d > 7 || mul > 0x8000u) {
            good = 0;
            break;
        }
        mode += (unsigned)d * mul;
        mul *= 8;
        digits /= 10;
    }
    if (ok)
        *ok = good;
    return good ? (mode & 07777u) : 0;
}

/** Permission bits to execd's decimal-digit encoding (0644 -> 644). */
int64_t os_mode_to_decimal(unsigned mode)
{
    char buf[16];
    snprintf(buf, sizeof(buf), "%o", mode & 07777u);
    return strtoll(buf, NULL, 10);
}

/** Case-insensitive substring test. */
int os_contains_ci(const char *hay, const char *needle)
{
    if (!hay || !needle)
        return 0;
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        if (strncasecmp(hay, needle, n) == 0)
            return 1;
    }
    return n == 0;
}

/** Human-readable detail of a failed HTTP answer: "HTTP 404 CODE: message". */
char *os_error_detail(long http_status, const char *body, size_t len)
{
    struct os_sb sb = {0};
    os_sb_printf(&sb, "HTTP %ld", http_status);
    json_object *obj = NULL;
    if (body && len) {
        json_tokener *tok = json_tokener_new();
        if (tok) {
            obj = json_tokener_parse_ex(tok, body, (int)(len > 65536 ? 65536 : len));
            json_tokener_free(tok);
        }
    }
    json_object *v;
    if (obj && json_object_is_type(obj, json_type_object)) {
        const char *code = NULL, *msg = NULL;
        if (json_object_object_get_ex(obj, "code", &v) && json_object_is_type(v, json_type_string))
            code = json_object_get_string(v);
        if (json_object_object_get_ex(obj, "message", &v) &&
            json_object_is_type(v, json_type_string))
            msg = json_object_get_string(v);
        if (!msg && json_object_object_get_ex(obj, "error", &v) &&
            json_object_is_type(v, json_type_string))
            msg = json_object_get_string(v);
        if (code)
            os_sb_printf(&sb, " %s", code);
        if (msg)
            os_sb_printf(&sb, "%s %s", code ? ":" : "", msg);
        if (!code && !msg && json_object_object_get_ex(obj, "detail", &v)) {
            if (json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0) {
                json_object *d0 = json_object_array_get_idx(v, 0), *m;
                if (json_object_object_get_ex(d0, "msg", &m))
                    os_sb_printf(&sb, " %s", json_object_get_string(m));
            } else {
                os_sb_printf(&sb, " %s", json_object_get_string(v));
            }
        }
    } else if (body && len) {
        size_t n = len > 200 ? 200 : len;
        os_sb_puts(&sb, " ");
        for (size_t i = 0; i < n; i++) {
            char c = body[i];
            os_sb_putn(&sb, (c == '\n' || c == '\r' || (unsigned char)c < 0x20) ? " " : &c, 1);
        }
    }
    json_object_put(obj);
    return os_sb_take(&sb);
}

/** Build "{protocol}://{endpoint}{path}" (endpoint used as-is if it has a scheme). */
char *os_join_url(const char *protocol, const char *endpoint, const char *path)
{
    struct os_sb sb = {0};
    if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0)
        os_sb_printf(&sb, "%s://", protocol);
    size_t n = strlen(endpoint);
    if (n && endpoint[n - 1] == '/')
        n--;
    os_sb_putn(&sb, endpoint, n);
    if (path)
        os_sb_puts(&sb, path);
    return os_sb_take(&sb);
}

char *os_query_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    struct os_sb sb = {0};
    os_sb_puts(&sb, "");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            os_sb_putn(&sb, (const char *)p, 1);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            os_sb_putn(&sb, e, 3);
        }
    }
    return os_sb_take(&sb);
}

char *os_metadata_filter(const char *key, const char *value)
{
    /* OpenSandbox: list_sandboxes() runs parse_qsl(metadata, strict_parsing=True)
     * on the already-decoded query parameter (server/src/api/lifecycle.py), so an
     * unescaped '&' or '=' in a value would add or replace filter pairs. */
    char *k = os_query_escape(key), *v = os_query_escape(value);
    char *out = NULL;
    if (k && v) {
        struct os_sb sb = {0};
        os_sb_printf(&sb, "%s=%s", k, v);
        char *inner = os_sb_take(&sb);
        out = inner ? os_query_escape(inner) : NULL;
        free(inner);
    }
    free(k);
    free(v);
    return out;
}

/** One init command: `export K=v && ... && source p` (shlex-quoted), or "" if nothing. */
char *os_session_init_command(const struct rk_kv *env, size_t env_len, const char *const *sources,
                              size_t sources_len)
{
    struct os_sb sb = {0};
    int first = 1;
    for (size_t i = 0; i < env_len; i++) {
        char *q = os_shell_quote(env[i].value ? env[i].value : "");
        if (!q) {
            os_sb_free(&sb);
            return NULL;
        }
        os_sb_printf(&sb, "%sexport %s=%s", first ? "" : " && ", env[i].key, q);
        free(q);
        first = 0;
    }
    for (size_t i = 0; i < sources_len; i++) {
        char *q = os_shell_quote(sources[i] ? sources[i] : "");
        if (!q) {
            os_sb_free(&sb);
            return NULL;
        }
        os_sb_printf(&sb, "%ssource %s", first ? "" : " && ", q);
        free(q);
        first = 0;
    }
    return os_sb_take(&sb);
}
