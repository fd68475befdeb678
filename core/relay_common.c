/* SPDX-License-Identifier: Apache-2.0 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP, getrandom */
#endif
#include "relay_common.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

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

/* Value of one hex digit, or -1. */
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

/* Percent-decode exactly once: src[0..n) into dst (at least n bytes); returns the
 * decoded length. Invalid escapes are kept as they are. */
static size_t pct_decode_once(const char *src, size_t n, char *dst)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int hi, lo;
        if (src[i] == '%' && i + 2 < n && (hi = hexval(src[i + 1])) >= 0 &&
            (lo = hexval(src[i + 2])) >= 0) {
            dst[o++] = (char)(hi * 16 + lo);
            i += 3;
        } else {
            dst[o++] = src[i++];
        }
    }
    return o;
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
    char *a = malloc(n + 1);
    if (!a)
        return 1;
    size_t len = pct_decode_once(raw, n, a);
    int bad = memchr(a, '\0', len) != NULL;
    for (size_t i = 0; !bad && i <= len;) {
        size_t e = i, sep = 0;
        while (e < len && (sep = separator_len(a + e, len - e)) == 0)
            e++;
        bad = dot_spelling(a + i, e - i);
        i = e + (sep ? sep : 1);
    }
    free(a);
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
    if (strncasecmp(name, "proxy-", 6) == 0)
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

/* ---- URLs ------------------------------------------------------------------ */

/* Parse scheme://[user@]host[:port][/path][?query]. */
int rk_relay_split_url(const char *base, struct rk_url_parts *out)
{
    memset(out, 0, sizeof *out);
    const char *p = base;
    const char *sep = strstr(base, "://");
    if (sep) {
        size_t n = (size_t)(sep - base);
        if ((n == 5 && strncasecmp(base, "https", 5) == 0) ||
            (n == 3 && strncasecmp(base, "wss", 3) == 0))
            out->tls = 1;
        else if (!((n == 4 && strncasecmp(base, "http", 4) == 0) ||
                   (n == 2 && strncasecmp(base, "ws", 2) == 0)))
            return -1;
        p = sep + 3;
    }
    size_t alen = strcspn(p, "/?#");
    const char *at = memchr(p, '@', alen);
    if (at) {
        alen -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    if (alen == 0)
        return -1;
    out->hostport = rk_strdup_printf("%.*s", (int)alen, p);
    const char *hp = out->hostport;
    const char *portstr = NULL;
    if (hp[0] == '[') {
        const char *rb = strchr(hp, ']');
        if (!rb)
            goto bad;
        out->host = rk_strdup_printf("%.*s", (int)(rb - hp - 1), hp + 1);
        if (rb[1] == ':')
            portstr = rb + 2;
        else if (rb[1])
            goto bad;
    } else {
        const char *colon = strrchr(hp, ':');
        out->host = rk_strdup_printf("%.*s", (int)(colon ? (size_t)(colon - hp) : strlen(hp)), hp);
        if (colon)
            portstr = colon + 1;
    }
    out->port = out->tls ? 443 : 80;
    if (portstr && *portstr) {
        long long v;
        if (rk_relay_parse_int(portstr, &v) != 0 || v < 1 || v > 65535)
            goto bad;
        out->port = (int)v;
    }
    p += alen;
    size_t plen = strcspn(p, "?#");
    while (plen > 0 && p[plen - 1] == '/')
        plen--;
    out->path = rk_strdup_printf("%.*s", (int)plen, p);
    p += strcspn(p, "?#");
    if (*p == '?') {
        p++;
        out->query = rk_strdup_printf("%.*s", (int)strcspn(p, "#"), p);
    } else {
        out->query = rk_xstrdup("");
    }
    return 0;
bad:
    rk_relay_url_parts_free(out);
    return -1;
}

/* Release the strings of a split URL. */
void rk_relay_url_parts_free(struct rk_url_parts *u)
{
    free(u->host);
    free(u->hostport);
    free(u->path);
    free(u->query);
    memset(u, 0, sizeof *u);
}

/* Endpoint path + '/' + forwarded path, endpoint query first (B101, B102). */
char *rk_relay_build_url(const char *base, const char *fwd, const char *client_query)
{
    struct rk_url_parts u;
    if (rk_relay_split_url(base, &u) != 0)
        return NULL;
    int has_cq = client_query && client_query[0];
    int has_bq = u.query[0] != '\0';
    char *url = rk_strdup_printf("%s://%s%s/%s%s%s%s%s", u.tls ? "https" : "http", u.hostport,
                                 u.path, fwd, has_bq || has_cq ? "?" : "", u.query,
                                 has_bq && has_cq ? "&" : "", has_cq ? client_query : "");
    rk_relay_url_parts_free(&u);
    return url;
}

/* Request-line target of the upstream handshake (no client query). */
char *rk_relay_ws_request_target(const struct rk_url_parts *u, const char *fwd)
{
    return rk_strdup_printf("%s/%s%s%s", u->path, fwd, u->query[0] ? "?" : "", u->query);
}

/* 1 if s starts with prefix followed by '/', '?', '#' or the end. */
static int has_path_prefix(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    if (n == 0 || strncmp(s, prefix, n) != 0)
        return 0;
    return s[n] == '\0' || s[n] == '/' || s[n] == '?' || s[n] == '#';
}

/* Keep redirects under the proxy prefix. */
char *rk_relay_rewrite_location(const char *loc, const char *prefix, const char *base_path)
{
    const char *rest = loc;
    size_t slen = 0;
    while (isalnum((unsigned char)loc[slen]) || loc[slen] == '+' || loc[slen] == '-' ||
           loc[slen] == '.')
        slen++;
    int absolute = 0;
    if (slen > 0 && isalpha((unsigned char)loc[0]) && strncmp(loc + slen, "://", 3) == 0) {
        absolute = 1;
        rest = loc + slen + 3;
    } else if (loc[0] == '/' && loc[1] == '/') {
        absolute = 1;
        rest = loc + 2;
    }
    if (absolute) {
        rest += strcspn(rest, "/?#");
        if (*rest != '/') {
            char *tmp = rk_strdup_printf("/%s", rest);
            char *res = rk_relay_rewrite_location(tmp, prefix, base_path);
            free(tmp);
            return res;
        }
    }
    if (rest[0] != '/')
        return rk_xstrdup(loc);
    if (base_path && has_path_prefix(rest, base_path)) {
        rest += strlen(base_path);
        if (*rest != '/') {
            char *tmp = rk_strdup_printf("/%s", rest);
            char *res = rk_relay_rewrite_location(tmp, prefix, NULL);
            free(tmp);
            return res;
        }
    }
    if (prefix && has_path_prefix(rest, prefix))
        return rk_xstrdup(rest);
    return rk_strdup_printf("%s%s", prefix ? prefix : "", rest);
}

/* ---- SHA-1 / base64 --------------------------------------------------------- */

/* Rotate left. */
static uint32_t rol32(uint32_t v, int n)
{
    return (v << n) | (v >> (32 - n));
}

/* One 64-byte block of SHA-1 (FIPS 180-4). */
static void sha1_block(uint32_t h[5], const unsigned char *blk)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 |
               (uint32_t)blk[4 * i + 2] << 8 | blk[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t t = rol32(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol32(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

/* SHA-1 over a whole buffer. */
void rk_sha1(const void *data, size_t len, unsigned char out[20])
{
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    const unsigned char *p = data;
    size_t left = len;
    while (left >= 64) {
        sha1_block(h, p);
        p += 64;
        left -= 64;
    }
    unsigned char tail[128] = {0};
    memcpy(tail, p, left);
    tail[left] = 0x80;
    size_t tlen = left + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tlen == 128)
        sha1_block(h, tail + 64);
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (unsigned char)(h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(h[i] >> 8);
        out[4 * i + 3] = (unsigned char)h[i];
    }
}

/* RFC 4648 base64 with padding. */
void rk_base64(const unsigned char *in, size_t len, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    out[o] = '\0';
}

/* RFC 6455 §4.2.2: base64(SHA-1(key + GUID)). */
void rk_ws_accept_key(const char *key, char out[29])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s%s", key, guid);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = (int)sizeof buf - 1;
    unsigned char digest[20];
    rk_sha1(buf, (size_t)n, digest);
    rk_base64(digest, sizeof digest, out);
}

/* A key is base64 of 16 bytes: 22 characters and "==". */
int rk_ws_key_valid(const char *key)
{
    if (!key || strlen(key) != 24 || key[22] != '=' || key[23] != '=')
        return 0;
    for (int i = 0; i < 22; i++)
        if (!isalnum((unsigned char)key[i]) && key[i] != '+' && key[i] != '/')
            return 0;
    return 1;
}

/* FIN + close opcode, unmasked (server to client). */
size_t rk_ws_close_frame(uint16_t code, const char *reason, unsigned char *out, size_t outlen)
{
    size_t rlen = reason ? strlen(reason) : 0;
    if (rlen > 123) {
        rlen = 123;
        while (rlen > 0 && ((unsigned char)reason[rlen] & 0xC0) == 0x80)
            rlen--;
    }
    if (outlen < 4 + rlen)
        return 0;
    out[0] = 0x88;
    out[1] = (unsigned char)(2 + rlen);
    out[2] = (unsigned char)(code >> 8);
    out[3] = (unsigned char)code;
    if (rlen)
        memcpy(out + 4, reason, rlen);
    return 4 + rlen;
}

/* Walk frame headers and skip payloads. */
void rk_ws_track(struct rk_ws_tracker *t, const unsigned char *data, size_t len)
{
    while (len > 0) {
        if (t->in_payload) {
            uint64_t n = t->remain < len ? t->remain : len;
            t->remain -= n;
            data += n;
            len -= (size_t)n;
            if (t->remain == 0)
                t->in_payload = 0;
            continue;
        }
        t->hdr[t->hdr_len++] = *data++;
        len--;
        if (t->hdr_len < 2)
            continue;
        unsigned l7 = t->hdr[1] & 0x7F;
        size_t need = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + ((t->hdr[1] & 0x80) ? 4 : 0);
        if (t->hdr_len < need)
            continue;
        uint64_t plen = l7;
        if (l7 == 126)
            plen = (uint64_t)t->hdr[2] << 8 | t->hdr[3];
        else if (l7 == 127) {
            plen = 0;
            for (int i = 0; i < 8; i++)
                plen = plen << 8 | t->hdr[2 + i];
        }
        t->hdr_len = 0;
        t->remain = plen;
        t->in_payload = plen > 0;
    }
}

/* Between frames: no header or payload bytes pending. */
int rk_ws_at_boundary(const struct rk_ws_tracker *t)
{
    return !t->in_payload && t->hdr_len == 0;
}

/* ---- misc --------------------------------------------------------------------------- */

/* Hang-up probe without reading. */
int rk_relay_peer_gone(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cv = PTHREAD_COND_INITIALIZER;
static int live_count;

/* One more live relay. */
void rk_relay_enter(void)
{
    pthread_mutex_lock(&live_mu);
    live_count++;
    pthread_mutex_unlock(&live_mu);
}

/* One live relay less; wakes rk_relay_wait(). */
void rk_relay_leave(void)
{
    pthread_mutex_lock(&live_mu);
    live_count--;
    pthread_cond_broadcast(&live_cv);
    pthread_mutex_unlock(&live_mu);
}

/* Live relays right now. */
int rk_relay_active(void)
{
    pthread_mutex_lock(&live_mu);
    int n = live_count;
    pthread_mutex_unlock(&live_mu);
    return n;
}

/* Wait for the live relays to end, bounded by deadline_ms. */
int rk_relay_wait(int64_t deadline_ms)
{
    pthread_mutex_lock(&live_mu);
    while (live_count > 0 && rk_now_ms() < deadline_ms) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&live_cv, &live_mu, &ts);
    }
    int n = live_count;
    pthread_mutex_unlock(&live_mu);
    return n;
}
