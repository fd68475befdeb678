/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Upstream URLs of the relays: splitting the endpoint's base URL (libcurl's
 * URL API), building the proxied URL and the WebSocket request target, and
 * rewriting redirect Locations to stay under the proxy prefix.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "relay/relay_common.h"
#include "base/util.h"

/* A part of u as a malloc'd string ("" when the part is absent), or NULL on OOM. */
static char *url_part(CURLU *u, CURLUPart what)
{
    char *v = NULL;
    if (curl_url_get(u, what, &v, 0) != CURLUE_OK || !v)
        return rk_xstrdup("");
    char *copy = rk_xstrdup(v);
    curl_free(v);
    return copy;
}

/* 1 if s[0..n) is an IPv4 address in its canonical dotted-decimal form (four parts of 0-255,
 * no leading zeros: what inet_pton accepts and inet_ntop prints back the same). */
static int ipv4_canonical(const char *s, size_t n)
{
    int parts = 0;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        int v = 0;
        while (i < n && isdigit((unsigned char)s[i]) && i - start < 3)
            v = v * 10 + (s[i++] - '0');
        if (i == start || v > 255 || (s[start] == '0' && i - start > 1))
            return 0;
        if (++parts == 4)
            return i == n;
        if (i >= n || s[i] != '.')
            return 0;
        i++;
    }
    return 0;
}

/* The common endpoint, split by hand: "http://" (or no scheme), a dotted-quad IPv4 address in
 * its canonical form, an optional port without leading zeros and a path of unreserved
 * characters and slashes only: what the operators resolve sandboxes to, parsed for every
 * relayed request. The parts are the ones libcurl's parser gives for such a URL (test_relay.c
 * holds both forms to the same answers); anything else goes to libcurl. 1 when it applied. */
static int split_plain(const char *base, struct rk_url_parts *out)
{
    const char *p = base;
    if (strncmp(p, "http://", 7) == 0)
        p += 7;
    else if (strstr(p, "://"))
        return 0;
    const char *h = p;
    while (isdigit((unsigned char)*p) || *p == '.')
        p++;
    size_t hl = (size_t)(p - h);
    if (!ipv4_canonical(h, hl))
        return 0;
    int port = 80;
    if (*p == ':') {
        const char *ps = ++p;
        while (isdigit((unsigned char)*p))
            p++;
        if (p == ps || p - ps > 5 || *ps == '0')
            return 0;
        port = atoi(ps);
        if (port > 65535)
            return 0;
    }
    const char *hp_end = p;
    if (*p != '/' && *p != '\0')
        return 0;
    for (const char *c = p; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("-._~/", *c))
            return 0;
    size_t plen = strlen(p);
    while (plen > 0 && p[plen - 1] == '/')
        plen--;
    size_t hpl = (size_t)(hp_end - h);
    char *b = malloc(hl + 1 + hpl + 1 + plen + 1 + 1); /* one block for the four */
    if (!b)
        abort(); /* as rk_xstrndup */
    out->block = b;
    out->host = memcpy(b, h, hl);
    b[hl] = '\0';
    b += hl + 1;
    out->hostport = memcpy(b, h, hpl);
    b[hpl] = '\0';
    b += hpl + 1;
    out->path = memcpy(b, p, plen);
    b[plen] = '\0';
    out->query = b + plen + 1;
    out->query[0] = '\0';
    out->port = port;
    return 1;
}

/* Parse scheme://[user@]host[:port][/path][?query] with libcurl's URL parser
 * (path kept as is: no dot-segment removal, no re-encoding). */
int rk_relay_split_url(const char *base, struct rk_url_parts *out)
{
    memset(out, 0, sizeof *out);
    if (split_plain(base, out))
        return 0;
    /* curl's own default scheme is https; a bare "host:port/path" means http here. */
    char *full = strstr(base, "://") ? rk_xstrdup(base) : rk_strdup_printf("http://%s", base);
    CURLU *u = curl_url();
    char *scheme = NULL, *port = NULL;
    int rc = -1;
    /* curl skips extra slashes ("http:///h"); an empty authority stays refused. */
    if (strchr("/?#", strstr(full, "://")[3]))
        goto out;
    if (!u ||
        curl_url_set(u, CURLUPART_URL, full,
                     CURLU_NON_SUPPORT_SCHEME | CURLU_PATH_AS_IS | CURLU_ALLOW_SPACE) != CURLUE_OK)
        goto out;
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK)
        goto out;
    if (!strcasecmp(scheme, "https") || !strcasecmp(scheme, "wss"))
        out->tls = 1;
    else if (strcasecmp(scheme, "http") && strcasecmp(scheme, "ws"))
        goto out;
    out->host = url_part(u, CURLUPART_HOST);
    if (!out->host[0])
        goto out;
    char *zone = NULL; /* curl splits an IPv6 zone off the host; the URL keeps it */
    if (out->host[0] == '[' && curl_url_get(u, CURLUPART_ZONEID, &zone, 0) == CURLUE_OK && zone) {
        char *withzone =
            rk_strdup_printf("%.*s%%25%s]", (int)strlen(out->host) - 1, out->host, zone);
        free(out->host);
        out->host = withzone;
    }
    curl_free(zone);
    /* curl percent-decodes host names: keep control bytes out of Host:. */
    for (const char *c = out->host; *c; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f)
            goto out;
    out->port = out->tls ? 443 : 80;
    if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK && port) {
        out->port = atoi(port); /* curl has checked 0-65535 */
        if (out->port < 1)
            goto out;
        out->hostport = rk_strdup_printf("%s:%s", out->host, port);
    } else {
        out->hostport = rk_xstrdup(out->host);
    }
    /* IPv6: curl gives "[addr]"; Host: and the URL keep the brackets, host drops them. */
    size_t hlen = strlen(out->host);
    if (out->host[0] == '[' && hlen >= 2 && out->host[hlen - 1] == ']') {
        memmove(out->host, out->host + 1, hlen - 2);
        out->host[hlen - 2] = '\0';
    }
    out->path = url_part(u, CURLUPART_PATH);
    size_t plen = strlen(out->path);
    while (plen > 0 && out->path[plen - 1] == '/')
        out->path[--plen] = '\0';
    out->query = url_part(u, CURLUPART_QUERY);
    rc = 0;
out:
    curl_free(scheme);
    curl_free(port);
    curl_url_cleanup(u);
    free(full);
    if (rc != 0)
        rk_relay_url_parts_free(out);
    return rc;
}

/* Release the strings of a split URL. */
void rk_relay_url_parts_free(struct rk_url_parts *u)
{
    if (u->block) {
        free(u->block);
        memset(u, 0, sizeof *u);
        return;
    }
    free(u->host);
    free(u->hostport);
    free(u->path);
    free(u->query);
    memset(u, 0, sizeof *u);
}

/* Endpoint path + '/' + forwarded path, endpoint query first (B101, B102).
 * Hand-joined from the parts curl split: the client's raw path and query must
 * pass byte for byte, without the base's userinfo or fragment. */
char *rk_relay_build_url(const struct rk_url_parts *u, const char *fwd, const char *client_query)
{
    int has_cq = client_query && client_query[0];
    int has_bq = u->query[0] != '\0';
    const char *parts[] = {u->tls ? "https://" : "http://",
                           u->hostport,
                           u->path,
                           "/",
                           fwd,
                           has_bq || has_cq ? "?" : "",
                           u->query,
                           has_bq && has_cq ? "&" : "",
                           has_cq ? client_query : ""};
    size_t n = sizeof parts / sizeof parts[0], lens[sizeof parts / sizeof parts[0]], total = 1;
    for (size_t i = 0; i < n; i++)
        total += lens[i] = strlen(parts[i]);
    char *url = malloc(total), *p = url; /* one allocation, no format parsing: per request */
    if (!url)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        memcpy(p, parts[i], lens[i]);
        p += lens[i];
    }
    *p = '\0';
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

/* Rewrite "/" + rest (a path that lost its leading '/' to a cut). */
static char *rewrite_rooted(const char *rest, const char *prefix, const char *base_path)
{
    char *tmp = rk_strdup_printf("/%s", rest);
    char *res = rk_relay_rewrite_location(tmp, prefix, base_path);
    free(tmp);
    return res;
}

/* Keep redirects under the proxy prefix. Hand-written: a Location may be any
 * text (relative, malformed, another scheme) and must pass unchanged; curl_url
 * would refuse or normalise what we only cut at the authority. */
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
        if (*rest != '/')
            return rewrite_rooted(rest, prefix, base_path);
    }
    if (rest[0] != '/')
        return rk_xstrdup(loc);
    if (base_path && has_path_prefix(rest, base_path)) {
        rest += strlen(base_path);
        if (*rest != '/')
            return rewrite_rooted(rest, prefix, NULL);
    }
    if (prefix && has_path_prefix(rest, prefix))
        return rk_xstrdup(rest);
    return rk_strdup_printf("%s%s", prefix ? prefix : "", rest);
}
