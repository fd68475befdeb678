/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the relays let through: target-port selection and port ranges
 * (§5.20), the raw sub-path split and the traversal/NUL refusal of proxied
 * paths, and the header filters (hop-by-hop, rock-admin credentials, the
 * WebSocket handshake's reserved set): pure functions over strings. Last,
 * the one way every relay learns its endpoint: the gate, then the plugin.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "relay/relay_common.h"
#include "base/app.h"
#include "base/util.h"
#include "engine/http_server.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/metrics.h"

/* ---- port selection -------------------------------------------------------- */

/* Python's str.strip() whitespace set (ASCII part). */
static int py_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Python int() over an ASCII string. */
int rk_relay_parse_int(const char *s, long long *out)
{
    if (!s)
        return -1;
    while (py_space(*s))
        s++;
    int neg = 0;
    if (*s == '+' || *s == '-')
        neg = *s++ == '-';
    long long v = 0;
    int digits = 0;
    int prev_digit = 0;
    for (; *s && !py_space(*s); s++) {
        if (*s == '_') {
            if (!prev_digit || !isdigit((unsigned char)s[1]))
                return -1;
            prev_digit = 0;
            continue;
        }
        if (!isdigit((unsigned char)*s))
            return -1;
        if (v < 1000000000000000LL)
            v = v * 10 + (*s - '0');
        digits++;
        prev_digit = 1;
    }
    while (py_space(*s))
        s++;
    if (*s || digits == 0)
        return -1;
    *out = neg ? -v : v;
    return 0;
}

/* Python's "invalid literal for int() with base 10: <repr>" text. */
static void int_error(const char *value, char *err, size_t errlen)
{
    struct rk_buf b = {0};
    b.cap = 512;
    if (rk_py_repr(&b, value, strlen(value)) != 0) {
        rk_buf_free(&b);
        b.cap = 0;
        rk_buf_append(&b, "'...'", 5);
    }
    snprintf(err, errlen, "invalid literal for int() with base 10: %s", rk_buf_cstr(&b));
    rk_buf_free(&b);
}

/* Path prefix, header, query: at most one may name the port (§5.20). */
enum rk_portsel rk_relay_select_port(const char *rest, const char *header, const char *query,
                                     int def_port, struct rk_port_choice *out, char *err,
                                     size_t errlen)
{
    out->port = def_port;
    out->from_path = 0;
    out->fwd = rest ? rest : "";
    if (err && errlen)
        err[0] = '\0';

    /* 1. "port/<int>[/...]" prefix of the sub-path. */
    long long path_port = 0;
    int have_path = 0;
    const char *path_fwd = out->fwd;
    if (rest && strncmp(rest, "port/", 5) == 0) {
        const char *seg = rest + 5;
        const char *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);
        char tmp[32];
        if (n > 0 && n < sizeof tmp) {
            memcpy(tmp, seg, n);
            tmp[n] = '\0';
            if (rk_relay_parse_int(tmp, &path_port) == 0) {
                have_path = 1;
                path_fwd = end ? end + 1 : seg + n;
            }
        }
    }
    int have_header = header && header[0];
    int have_query = query != NULL;

    if (have_path + have_header + have_query > 1) {
        snprintf(err, errlen, "Cannot specify target port via multiple sources: %s%s%s%s%s",
                 have_path ? "path" : "", have_path && have_header ? ", " : "",
                 have_header ? "header X-ROCK-Target-Port" : "",
                 (have_path || have_header) && have_query ? ", " : "",
                 have_query ? "query parameter rock_target_port" : "");
        return RK_PORTSEL_MULTIPLE;
    }
    if (have_header) {
        if (rk_relay_parse_int(header, &out->port) != 0) {
            int_error(header, err, errlen);
            return RK_PORTSEL_BAD_HEADER;
        }
    } else if (have_query) {
        if (rk_relay_parse_int(query, &out->port) != 0) {
            snprintf(err, errlen,
                     "query.rock_target_port: Input should be a valid integer, "
                     "unable to parse string as an integer");
            return RK_PORTSEL_BAD_QUERY;
        }
    } else if (have_path) {
        out->port = path_port;
        out->from_path = 1;
        out->fwd = path_fwd;
    }
    return RK_PORTSEL_OK;
}

/* The HTTP proxy accepts every TCP port. */
int rk_relay_check_port_http(long long port, char *err, size_t errlen)
{
    if (port >= 1 && port <= 65535)
        return 0;
    snprintf(err, errlen, "Invalid target port %lld: must be between 1 and 65535", port);
    return -1;
}

int rk_relay_e2b_target(struct rk_req *r, long long *port, char *err, size_t errlen)
{
    const char *id = rk_req_header(r, "E2b-Sandbox-Id");
    const char *p = rk_req_header(r, "E2b-Sandbox-Port");
    if (!id || !*id || !rk_id_valid(id, strlen(id))) {
        snprintf(err, errlen, "the E2b-Sandbox-Id header names no sandbox");
        return -1;
    }
    if (!p || rk_relay_parse_int(p, port) != 0) {
        snprintf(err, errlen, "Invalid target port in E2b-Sandbox-Port: expected an integer");
        return -1;
    }
    r->params[0] = id;
    rk_req_set_sandbox(r, id);
    return 0;
}

/* The original's WebSocket/portforward policy, 22 first. */
int rk_relay_check_port_ws(long long port, char *err, size_t errlen)
{
    if (port == 22) {
        snprintf(err, errlen, "Port %lld is not allowed for port forwarding", port);
        return -1;
    }
    if (port < 1024) {
        snprintf(err, errlen, "Port %lld is below minimum allowed port 1024", port);
        return -1;
    }
    if (port > 65535) {
        snprintf(err, errlen, "Port %lld is above maximum allowed port 65535", port);
        return -1;
    }
    return 0;
}

/* ---- paths --------------------------------------------------------------- */

/* Count literal and capture segments of a pattern. */
int rk_relay_pattern_segments(const char *pattern)
{
    int n = 0;
    const char *p = pattern;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        if (strcmp(p, "{*}") == 0)
            break;
        n++;
        while (*p && *p != '/')
            p++;
    }
    return n;
}

/* Skip nseg segments of a raw path. */
const char *rk_relay_raw_rest(const char *raw_path, int nseg)
{
    const char *p = raw_path;
    for (int i = 0; i < nseg; i++) {
        if (*p != '/')
            return NULL;
        p++;
        while (*p && *p != '/')
            p++;
    }
    if (*p == '/')
        return p + 1;
    return *p ? NULL : p;
}

/* 1 if seg[0..n) spells "." or "..": plain dots, "%2e" (any depth of "%25"
 * nesting), the overlong UTF-8 forms C0 AE / E0 80 AE, IIS "%u002e", and a
 * Tomcat-style ";param" suffix ("..;x") that some servers strip. */
static int dot_spelling(const char *seg, size_t n)
{
    const char *semi = memchr(seg, ';', n);
    if (semi)
        n = (size_t)(semi - seg);
    int dots = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char *p = (const unsigned char *)seg + i;
        if (p[0] == '.') {
            i++;
        } else if (i + 1 < n && p[0] == 0xC0 && p[1] == 0xAE) {
            i += 2;
        } else if (i + 2 < n && p[0] == 0xE0 && p[1] == 0x80 && p[2] == 0xAE) {
            i += 3;
        } else if (p[0] == '%') {
            /* "%" then any number of "25", then "2e"/"2E" or "u002e". */
            size_t j = i + 1;
            while (j + 1 < n && seg[j] == '2' && seg[j + 1] == '5')
                j += 2;
            if (j + 1 < n && seg[j] == '2' && (seg[j + 1] == 'e' || seg[j + 1] == 'E'))
                i = j + 2;
            else if (j + 4 < n && (seg[j] == 'u' || seg[j] == 'U') &&
                     !strncmp(seg + j + 1, "002", 3) && (seg[j + 4] == 'e' || seg[j + 4] == 'E'))
                i = j + 5;
            else
                return 0;
        } else {
            return 0;
        }
        if (++dots > 2)
            return 0;
    }
    return dots == 1 || dots == 2;
}

/* Length of a segment separator at p (n bytes left), or 0: '/', '\', or an
 * encoded one that a second decode would produce ("%2f", "%5c", "%252f"...). */
static size_t separator_len(const char *p, size_t n)
{
    if (*p == '/' || *p == '\\')
        return 1;
    if (*p != '%')
        return 0;
    size_t j = 1;
    while (j + 1 < n && p[j] == '2' && p[j + 1] == '5')
        j += 2;
    if (j + 1 < n && ((p[j] == '2' && (p[j + 1] == 'f' || p[j + 1] == 'F')) ||
                      (p[j] == '5' && (p[j + 1] == 'c' || p[j + 1] == 'C'))))
        return j + 2;
    return 0;
}

/* Decode once, then refuse NUL anywhere and a dot segment in any spelling;
 * '/', '\' and their still-encoded forms all separate segments. */
int rk_relay_has_dot_segment(const char *raw)
{
    size_t n = strlen(raw);
    if (n > INT_MAX)
        return 1;
    /* curl_easy_unescape decodes exactly once, keeps invalid escapes as they
     * are, and reports the length, so a decoded NUL stays visible. */
    int len = 0;
    char *a = curl_easy_unescape(NULL, raw, (int)n, &len);
    if (!a)
        return 1;
    size_t alen = (size_t)len;
    int bad = memchr(a, '\0', alen) != NULL;
    for (size_t i = 0; !bad && i <= alen;) {
        size_t e = i, sep = 0;
        while (e < alen && (sep = separator_len(a + e, alen - e)) == 0)
            e++;
        bad = dot_spelling(a + i, e - i);
        i = e + (sep ? sep : 1);
    }
    curl_free(a);
    return bad;
}

/* ---- headers ------------------------------------------------------------- */

/* 1 if name equals one of the NULL-terminated list (case-insensitive). */
static int name_in(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (rk_strcaseeq(name, *list))
            return 1;
    return 0;
}

/* 1 if name is one of the comma-separated tokens of a Connection value. */
static int listed_in_connection(const char *name, const char *connection)
{
    if (!connection)
        return 0;
    size_t nlen = strlen(name);
    const char *p = connection;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *s = p;
        while (*p && *p != ',')
            p++;
        const char *e = p;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if ((size_t)(e - s) == nlen && strncasecmp(s, name, nlen) == 0)
            return 1;
    }
    return 0;
}

/* RFC 7230 §6.1 hop-by-hop headers. */
int rk_relay_is_hop_header(const char *name, const char *connection)
{
    static const char *const hop[] = {"connection",        "keep-alive", "te",
                                      "trailer",           "trailers",   "upgrade",
                                      "transfer-encoding", NULL};
    if (name_in(name, hop))
        return 1;
    if ((name[0] | 0x20) == 'p' && strncasecmp(name, "proxy-", 6) == 0)
        return 1;
    return listed_in_connection(name, connection);
}

/* Headers that carry the client's credentials for rock-admin itself. */
static const char *const rock_credentials[] = {"x-key", "x-api-key", "xrl-authorization", NULL};

/* Client headers that stay with rock-admin. */
int rk_relay_skip_request_header(const char *name, const char *connection)
{
    static const char *const skip[] = {"host", "content-length", "expect", "x-request-id", NULL};
    return rk_relay_is_hop_header(name, connection) || name_in(name, skip) ||
           name_in(name, rock_credentials);
}

/* Upstream headers the server re-creates or that are per hop. */
int rk_relay_skip_response_header(const char *name, const char *connection)
{
    return rk_relay_is_hop_header(name, connection) || rk_strcaseeq(name, "content-length");
}

/* Headers the upstream WebSocket handshake sets itself (§5.21, B107). */
int rk_relay_ws_blocked_header(const char *name)
{
    static const char *const blocked[] = {"host",
                                          "connection",
                                          "upgrade",
                                          "sec-websocket-key",
                                          "sec-websocket-version",
                                          "sec-websocket-extensions",
                                          "sec-websocket-protocol",
                                          "sec-websocket-accept",
                                          "transfer-encoding",
                                          "te",
                                          "trailer",
                                          "keep-alive",
                                          "proxy-authorization",
                                          "proxy-connection",
                                          "content-length",
                                          NULL};
    return name_in(name, blocked) || name_in(name, rock_credentials);
}

/* ---- the endpoint ------------------------------------------------------------ */

/* The gate for op, then the plugin's proxy_target. */
rk_status rk_relay_target(struct rk_req *r, enum rk_op op, int port, enum rk_proxy_kind kind,
                          struct rk_proxy_target *pt, int64_t *idle_minutes)
{
    struct rk_app *app = r->app;
    const struct rk_plugin *pl = app->plugin;
    memset(pt, 0, sizeof *pt);
    if (idle_minutes)
        *idle_minutes = 0;
    struct rk_target t;
    rk_status st = rk_dispatch(app, r->call, op, r->params[0], &t);
    if (st != RK_OK)
        return st;
    rk_metrics_upstream_begin();
    if (!pl->ops.proxy_target)
        st = rk_call_set_error(r->call, RK_E_UNSUPPORTED, "%s backend does not support %s",
                               pl->desc->display_name, rk_op_info(op)->name);
    else
        st = pl->ops.proxy_target(pl->inst, r->call, &t.ref, port, kind, pt);
    rk_metrics_upstream("proxy_target", st);
    json_object *m = NULL;
    if (idle_minutes && json_object_object_get_ex(t.rec, "auto_clear_time", &m) && m)
        *idle_minutes = json_object_get_int64(m);
    rk_target_release(&t);
    if (st == RK_OK && !pt->base_url)
        st = rk_call_set_error(r->call, RK_E_UPSTREAM, "the operator returned no endpoint");
    return st;
}
