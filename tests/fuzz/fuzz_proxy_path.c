/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz the proxy's path checks in core/relay/relay_policy.c and core/relay/relay_url.c: the
 * traversal/NUL refusal, the raw sub-path split and the upstream URL builder. Invariant checked: a
 * path that is accepted never holds, after one decode, a NUL byte or a "." / ".." segment.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "relay/relay_common.h"

/* Value of a hex digit or -1. */
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

/* Independent check: decode once and look for NUL and plain dot segments. */
static int plainly_bad(const char *s)
{
    size_t n = strlen(s), o = 0;
    char *d = malloc(n + 1);
    assert(d);
    for (size_t i = 0; i < n;) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 &&
            (lo = hexval(s[i + 2])) >= 0) {
            d[o++] = (char)(hi * 16 + lo);
            i += 3;
        } else {
            d[o++] = s[i++];
        }
    }
    int bad = memchr(d, 0, o) != NULL;
    for (size_t i = 0; !bad && i <= o;) {
        size_t e = i;
        while (e < o && d[e] != '/' && d[e] != '\\')
            e++;
        size_t len = e - i;
        bad = (len == 1 && d[i] == '.') || (len == 2 && d[i] == '.' && d[i + 1] == '.');
        i = e + 1;
    }
    free(d);
    return bad;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    int refused = rk_relay_has_dot_segment(s);
    if (!refused)
        assert(!plainly_bad(s));
    for (int nseg = 0; nseg < 4; nseg++)
        (void)rk_relay_raw_rest(s, nseg);
    const char *q = strchr(s, '?');
    struct rk_url_parts base;
    if (rk_relay_split_url("http://127.0.0.1:8080/base/", &base) == 0) {
        char *url = rk_relay_build_url(&base, s, q ? q + 1 : NULL);
        free(url);
        rk_relay_url_parts_free(&base);
    }
    char *loc = rk_relay_rewrite_location(s, "/apis/envs/sandbox/v1/sandboxes/x/proxy", "/base");
    free(loc);
    free(s);
    return 0;
}
