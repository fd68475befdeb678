/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the relay helpers (core/relay/relay_policy.c, relay_url.c,
 * relay_wsproto.c): port selection, traversal check, header
 * filtering, URL building, Location rewriting, WebSocket accept key and
 * close frames, frame boundary tracking and the timed pipe; and for what a
 * relay uses from the domain: the endpoint cache and the idle touch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/app.h"
#include "base/bytepipe.h"
#include "base/util.h"
#include "domain/activity.h"
#include "domain/endpoint_cache.h"
#include "relay/relay_common.h"
#include "store/store.h"

/* Port selection: one source, none, several, bad values (§5.20, U31). */
static void test_port_sources(void **state)
{
    (void)state;
    struct rk_port_choice pc;
    char err[256];

    assert_int_equal(rk_relay_select_port("api/items", NULL, NULL, 8080, &pc, err, sizeof err),
                     RK_PORTSEL_OK);
    assert_int_equal(pc.port, 8080);
    assert_string_equal(pc.fwd, "api/items");
    assert_int_equal(pc.from_path, 0);

    assert_int_equal(
        rk_relay_select_port("port/9000/health", NULL, NULL, 8080, &pc, err, sizeof err),
        RK_PORTSEL_OK);
    assert_int_equal(pc.port, 9000);
    assert_string_equal(pc.fwd, "health");
    assert_int_equal(pc.from_path, 1);

    assert_int_equal(rk_relay_select_port("port/8080", NULL, NULL, 8080, &pc, err, sizeof err),
                     RK_PORTSEL_OK);
    assert_string_equal(pc.fwd, "");
    assert_int_equal(pc.from_path, 1);

    /* A non-integer segment is no port: the whole path is forwarded. */
    assert_int_equal(rk_relay_select_port("port/abc/x", NULL, NULL, 8080, &pc, err, sizeof err),
                     RK_PORTSEL_OK);
    assert_int_equal(pc.port, 8080);
    assert_string_equal(pc.fwd, "port/abc/x");

    /* An empty header counts as absent. */
    assert_int_equal(rk_relay_select_port("x", "", NULL, 8080, &pc, err, sizeof err),
                     RK_PORTSEL_OK);
    assert_int_equal(pc.port, 8080);
    assert_int_equal(rk_relay_select_port("x", " 7000 ", NULL, 8080, &pc, err, sizeof err),
                     RK_PORTSEL_OK);
    assert_int_equal(pc.port, 7000);
    assert_int_equal(rk_relay_select_port("x", NULL, "3000", 8080, &pc, err, sizeof err),
                     RK_PORTSEL_OK);
    assert_int_equal(pc.port, 3000);

    assert_int_equal(rk_relay_select_port("port/1/x", "2", "3", 8080, &pc, err, sizeof err),
                     RK_PORTSEL_MULTIPLE);
    assert_string_equal(err, "Cannot specify target port via multiple sources: path, header "
                             "X-ROCK-Target-Port, query parameter rock_target_port");
    assert_int_equal(rk_relay_select_port("port/1/x", NULL, "3", 8080, &pc, err, sizeof err),
                     RK_PORTSEL_MULTIPLE);
    assert_string_equal(err, "Cannot specify target port via multiple sources: path, query "
                             "parameter rock_target_port");
    assert_int_equal(rk_relay_select_port("x", "2", "3", 8080, &pc, err, sizeof err),
                     RK_PORTSEL_MULTIPLE);
    assert_string_equal(err, "Cannot specify target port via multiple sources: header "
                             "X-ROCK-Target-Port, query parameter rock_target_port");

    assert_int_equal(rk_relay_select_port("x", "abc", NULL, 8080, &pc, err, sizeof err),
                     RK_PORTSEL_BAD_HEADER);
    assert_string_equal(err, "invalid literal for int() with base 10: 'abc'");
    assert_int_equal(rk_relay_select_port("x", NULL, "1.5", 8080, &pc, err, sizeof err),
                     RK_PORTSEL_BAD_QUERY);
}

/* Python int() parsing rules. */
static void test_parse_int(void **state)
{
    (void)state;
    long long v;
    assert_int_equal(rk_relay_parse_int("8080", &v), 0);
    assert_int_equal(v, 8080);
    assert_int_equal(rk_relay_parse_int("+0080", &v), 0);
    assert_int_equal(v, 80);
    assert_int_equal(rk_relay_parse_int("-1", &v), 0);
    assert_int_equal(v, -1);
    assert_int_equal(rk_relay_parse_int("8_080", &v), 0);
    assert_int_equal(v, 8080);
    assert_int_equal(rk_relay_parse_int("8__080", &v), -1);
    assert_int_equal(rk_relay_parse_int("_8", &v), -1);
    assert_int_equal(rk_relay_parse_int("", &v), -1);
    assert_int_equal(rk_relay_parse_int(" ", &v), -1);
    assert_int_equal(rk_relay_parse_int("80a", &v), -1);
    assert_int_equal(rk_relay_parse_int("99999999999999999999999", &v), 0);
    assert_true(v > 65535);
}

/* Range checks: HTTP 1-65535; WebSocket 1024-65535 and not 22. */
static void test_port_ranges(void **state)
{
    (void)state;
    char err[128];
    assert_int_equal(rk_relay_check_port_http(80, err, sizeof err), 0);
    assert_int_equal(rk_relay_check_port_http(22, err, sizeof err), 0);
    assert_int_equal(rk_relay_check_port_http(0, err, sizeof err), -1);
    assert_int_equal(rk_relay_check_port_http(65536, err, sizeof err), -1);
    assert_non_null(strstr(err, "65536"));

    assert_int_equal(rk_relay_check_port_ws(8080, err, sizeof err), 0);
    assert_int_equal(rk_relay_check_port_ws(80, err, sizeof err), -1);
    assert_string_equal(err, "Port 80 is below minimum allowed port 1024");
    assert_int_equal(rk_relay_check_port_ws(70000, err, sizeof err), -1);
    assert_string_equal(err, "Port 70000 is above maximum allowed port 65535");
    assert_int_equal(rk_relay_check_port_ws(22, err, sizeof err), -1);
    assert_string_equal(err, "Port 22 is not allowed for port forwarding");
}

/* Traversal: repeated decoding, backslashes, dot segments (B103). */
static void test_traversal(void **state)
{
    (void)state;
    assert_true(rk_relay_has_dot_segment("../admin/health"));
    assert_true(rk_relay_has_dot_segment("%2e%2e/admin/health"));
    assert_true(rk_relay_has_dot_segment("%252e%252e/admin/health"));
    assert_true(rk_relay_has_dot_segment("..\\admin"));
    assert_true(rk_relay_has_dot_segment("a/%5c..%5cb"));
    assert_true(rk_relay_has_dot_segment("a/./b"));
    assert_true(rk_relay_has_dot_segment("a/.."));
    assert_true(rk_relay_has_dot_segment("."));
    assert_false(rk_relay_has_dot_segment(""));
    assert_false(rk_relay_has_dot_segment("api/items"));
    assert_false(rk_relay_has_dot_segment("a/..b/c.d/.e"));
    assert_false(rk_relay_has_dot_segment("a%2Fb%20c"));
    assert_false(rk_relay_has_dot_segment("a/b/"));
    /* NUL after one decode, and other spellings of "..". */
    assert_true(rk_relay_has_dot_segment("%00/../.."));
    assert_true(rk_relay_has_dot_segment("a%00b"));
    assert_true(rk_relay_has_dot_segment("%2E%2e/x"));
    assert_true(rk_relay_has_dot_segment(".%2e/x"));
    assert_true(rk_relay_has_dot_segment("%25252e%25252e/x"));
    assert_true(rk_relay_has_dot_segment("%c0%ae%c0%ae/x"));
    assert_true(rk_relay_has_dot_segment("%e0%80%ae/x"));
    assert_true(rk_relay_has_dot_segment("%u002e%u002e/x"));
    assert_true(rk_relay_has_dot_segment("..;jsessionid=1/x"));
    assert_true(rk_relay_has_dot_segment("a%2f..%2fb"));
    assert_true(rk_relay_has_dot_segment("a/%252e%252e%255cadmin"));
    assert_true(rk_relay_has_dot_segment("a%25252f..%25252fb"));
    assert_true(rk_relay_has_dot_segment("a\\..\\b"));
    assert_false(rk_relay_has_dot_segment("..."));
    assert_false(rk_relay_has_dot_segment("a/%2e%2e%2e/b"));
    assert_false(rk_relay_has_dot_segment("%2541"));
    /* One decode, escapes at the very end included, truncated ones kept. */
    assert_true(rk_relay_has_dot_segment("a/%2e%2e"));
    assert_false(rk_relay_has_dot_segment("a/%2e%2"));
    assert_false(rk_relay_has_dot_segment("a/.%2"));
}

/* Sub-path extraction from raw request paths. */
static void test_raw_rest(void **state)
{
    (void)state;
    assert_int_equal(rk_relay_pattern_segments("/apis/envs/sandbox/v1/sandboxes/{id}/proxy/{*}"),
                     7);
    assert_int_equal(rk_relay_pattern_segments("/apis/envs/sandbox/v1/sandboxes/{id}/proxy"), 7);
    const char *p = "/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000/a%2Fb";
    assert_string_equal(rk_relay_raw_rest(p, 7), "port/9000/a%2Fb");
    assert_string_equal(rk_relay_raw_rest("/apis/envs/sandbox/v1/sandboxes/sb1/proxy", 7), "");
    assert_string_equal(rk_relay_raw_rest("/apis/envs/sandbox/v1/sandboxes/sb1/proxy/", 7), "");
    assert_null(rk_relay_raw_rest("/apis/envs", 7));
}

/* Hop-by-hop, Connection-listed and credential headers (anchor 17). */
static void test_header_filters(void **state)
{
    (void)state;
    assert_true(rk_relay_is_hop_header("Connection", NULL));
    assert_true(rk_relay_is_hop_header("Keep-Alive", NULL));
    assert_true(rk_relay_is_hop_header("proxy-authorization", NULL));
    assert_true(rk_relay_is_hop_header("Proxy-Foo", NULL));
    assert_true(rk_relay_is_hop_header("TE", NULL));
    assert_true(rk_relay_is_hop_header("Trailer", NULL));
    assert_true(rk_relay_is_hop_header("Transfer-Encoding", NULL));
    assert_true(rk_relay_is_hop_header("Upgrade", NULL));
    assert_true(rk_relay_is_hop_header("X-Foo", "keep-alive, x-foo"));
    assert_true(rk_relay_is_hop_header("x-bar", "X-Foo ,X-Bar"));
    assert_false(rk_relay_is_hop_header("X-Foobar", "x-foo"));
    assert_false(rk_relay_is_hop_header("Content-Type", "close"));

    assert_true(rk_relay_skip_request_header("Host", NULL));
    assert_true(rk_relay_skip_request_header("content-length", NULL));
    assert_true(rk_relay_skip_request_header("X-Key", NULL));
    assert_true(rk_relay_skip_request_header("X-API-Key", NULL));
    assert_true(rk_relay_skip_request_header("XRL-Authorization", NULL));
    assert_true(rk_relay_skip_request_header("Expect", NULL));
    assert_false(rk_relay_skip_request_header("Authorization", NULL));
    assert_false(rk_relay_skip_request_header("Content-Encoding", NULL));
    assert_false(rk_relay_skip_request_header("Cookie", NULL));

    assert_true(rk_relay_skip_response_header("Content-Length", NULL));
    assert_true(rk_relay_skip_response_header("Transfer-Encoding", NULL));
    assert_false(rk_relay_skip_response_header("Content-Encoding", NULL));
    assert_false(rk_relay_skip_response_header("Set-Cookie", NULL));

    /* B107's reserved set. */
    const char *blocked[] = {"host",
                             "connection",
                             "upgrade",
                             "sec-websocket-key",
                             "Sec-WebSocket-Version",
                             "sec-websocket-extensions",
                             "sec-websocket-protocol",
                             "transfer-encoding",
                             "te",
                             "trailer",
                             "keep-alive",
                             "proxy-authorization",
                             "proxy-connection",
                             "Content-Length",
                             "x-api-key"};
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
        assert_true(rk_relay_ws_blocked_header(blocked[i]));
    assert_false(rk_relay_ws_blocked_header("Authorization"));
    assert_false(rk_relay_ws_blocked_header("Origin"));
    assert_false(rk_relay_ws_blocked_header("X-Trace"));
}

/* The upstream URL for base, as the HTTP relay builds it; NULL when base is unusable. */
static char *build_url(const char *base, const char *fwd, const char *client_query)
{
    struct rk_url_parts p;
    if (rk_relay_split_url(base, &p) != 0)
        return NULL;
    char *url = rk_relay_build_url(&p, fwd, client_query);
    rk_relay_url_parts_free(&p);
    return url;
}

/* Upstream URLs (B101, B102, B106). */
static void test_urls(void **state)
{
    (void)state;
    char *u = build_url("https://sandbox-osb-1-8080.example.test", "api/items", "page=2");
    assert_string_equal(u, "https://sandbox-osb-1-8080.example.test/api/items?page=2");
    free(u);
    u = build_url("https://proxy.example/base?endpoint_token=abc", "health", "verbose=1");
    assert_string_equal(u, "https://proxy.example/base/health?endpoint_token=abc&verbose=1");
    free(u);
    u = build_url("10.0.0.5:44772/", "", "");
    assert_string_equal(u, "http://10.0.0.5:44772/");
    free(u);
    u = build_url("http://h/p", "x", "a=%2F&a=2");
    assert_string_equal(u, "http://h/p/x?a=%2F&a=2");
    free(u);
    assert_null(build_url("ftp://h/", "x", NULL));

    struct rk_url_parts p;
    assert_int_equal(rk_relay_split_url("https://proxy.example/sandboxes/osb-1/ports/7000", &p), 0);
    assert_int_equal(p.tls, 1);
    assert_string_equal(p.host, "proxy.example");
    assert_int_equal(p.port, 443);
    char *t = rk_relay_ws_request_target(&p, "socket/connect");
    assert_string_equal(t, "/sandboxes/osb-1/ports/7000/socket/connect");
    free(t);
    rk_relay_url_parts_free(&p);
    assert_int_equal(rk_relay_split_url("ws://[::1]:9000/x?q=1", &p), 0);
    assert_int_equal(p.tls, 0);
    assert_string_equal(p.host, "::1");
    assert_string_equal(p.hostport, "[::1]:9000");
    assert_int_equal(p.port, 9000);
    assert_string_equal(p.query, "q=1");
    rk_relay_url_parts_free(&p);
    assert_int_equal(rk_relay_split_url("http://h:99999/", &p), -1);
    /* libcurl's URL parser: an empty authority, a control byte in the host and
     * a foreign scheme are refused; an IPv6 zone survives; userinfo is dropped. */
    assert_int_equal(rk_relay_split_url("http:///x", &p), -1);
    assert_int_equal(rk_relay_split_url("http://a%0d%0aX-Evil:1/", &p), -1);
    assert_int_equal(rk_relay_split_url("http://a%7fb/", &p), -1);
    assert_int_equal(rk_relay_split_url("gopher://h/", &p), -1);
    assert_int_equal(rk_relay_split_url("http://[fe80::1%25eth0]:8080/a/", &p), 0);
    assert_string_equal(p.host, "fe80::1%25eth0");
    assert_string_equal(p.hostport, "[fe80::1%25eth0]:8080");
    assert_string_equal(p.path, "/a");
    rk_relay_url_parts_free(&p);
    assert_int_equal(rk_relay_split_url("HTTPS://u:pw@h/a/../b?x=1#frag", &p), 0);
    assert_int_equal(p.tls, 1);
    assert_string_equal(p.hostport, "h");
    assert_string_equal(p.path, "/a/../b"); /* no dot-segment removal */
    assert_string_equal(p.query, "x=1");
    rk_relay_url_parts_free(&p);
}

/* The plain endpoints the operators give (http, an IPv4 literal, a plain path) are split by
 * hand; each must come out exactly as libcurl's parser splits it, which "HTTP://" (upper case:
 * not the hand-split form) still takes. Near misses go to libcurl, which normalises them. */
static void test_plain_urls_split_as_libcurl_does(void **state)
{
    (void)state;
    static const char *const plain[] = {
        "10.0.3.7:44772/a/b/",
        "127.0.0.1",
        "127.0.0.1:80",
        "127.0.0.1:8080/",
        "192.168.1.20:65535/x-y_z.~/s//",
        "0.0.0.0:1/p",
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        char *fast = rk_strdup_printf("http://%s", plain[i]);
        char *slow = rk_strdup_printf("HTTP://%s", plain[i]);
        const char *forms[] = {fast, plain[i]};
        struct rk_url_parts b;
        assert_int_equal(rk_relay_split_url(slow, &b), 0);
        for (size_t f = 0; f < 2; f++) {
            struct rk_url_parts a;
            assert_int_equal(rk_relay_split_url(forms[f], &a), 0);
            assert_int_equal(a.tls, b.tls);
            assert_string_equal(a.host, b.host);
            assert_int_equal(a.port, b.port);
            assert_string_equal(a.hostport, b.hostport);
            assert_string_equal(a.path, b.path);
            assert_string_equal(a.query, b.query);
            rk_relay_url_parts_free(&a);
        }
        rk_relay_url_parts_free(&b);
        free(fast);
        free(slow);
    }
    struct rk_url_parts p;
    /* libcurl reads a leading zero as octal: "010.0.0.1" is 8.0.0.1, never 10.0.0.1. */
    assert_int_equal(rk_relay_split_url("http://010.0.0.1:8080/", &p), 0);
    assert_string_equal(p.host, "8.0.0.1");
    rk_relay_url_parts_free(&p);
    assert_int_equal(rk_relay_split_url("http://127.0.0.1:080/a%2Fb?q=1", &p), 0);
    assert_int_equal(p.port, 80);
    assert_string_equal(p.path, "/a%2Fb");
    assert_string_equal(p.query, "q=1");
    rk_relay_url_parts_free(&p);
    assert_int_equal(rk_relay_split_url("http://127.0.0.1:70000/", &p), -1);
    /* Not canonical dotted quads: libcurl's reading, never the hand split's. */
    assert_int_equal(rk_relay_split_url("http://1.2.3:80/", &p), 0);
    assert_string_equal(p.host, "1.2.0.3");
    rk_relay_url_parts_free(&p);
    assert_int_equal(rk_relay_split_url("http://1.2.3.04/", &p), 0);
    assert_string_equal(p.host, "1.2.3.4");
    rk_relay_url_parts_free(&p);
    assert_int_equal(rk_relay_split_url("http://1.2.3.4.5/", &p), 0);
    assert_string_equal(p.host, "1.2.3.4.5"); /* a host name */
    rk_relay_url_parts_free(&p);
}

/* Redirects under the proxy prefix stay under it, /port/N included. */
static void test_location(void **state)
{
    (void)state;
    const char *pre = "/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000";
    char *l = rk_relay_rewrite_location("http://10.0.0.5:9000/login?next=%2F", pre, "");
    assert_string_equal(l, "/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000/login?next=%2F");
    free(l);
    l = rk_relay_rewrite_location("/login", pre, "");
    assert_string_equal(l, "/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000/login");
    free(l);
    l = rk_relay_rewrite_location("https://h", pre, "");
    assert_string_equal(l, "/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000/");
    free(l);
    l = rk_relay_rewrite_location("https://proxy.example/sandboxes/osb-1/ports/9000/a?b=1", pre,
                                  "/sandboxes/osb-1/ports/9000");
    assert_string_equal(l, "/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000/a?b=1");
    free(l);
    l = rk_relay_rewrite_location("next/page", pre, "");
    assert_string_equal(l, "next/page");
    free(l);
    l = rk_relay_rewrite_location("//other.example/x", pre, "");
    assert_string_equal(l, "/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000/x");
    free(l);
    /* Already under the prefix: unchanged. */
    l = rk_relay_rewrite_location("/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000/y", pre, "");
    assert_string_equal(l, "/apis/envs/sandbox/v1/sandboxes/sb1/proxy/port/9000/y");
    free(l);
}

/* RFC 6455 §1.3 example and SHA-1 test vectors. */
static void test_ws_accept(void **state)
{
    (void)state;
    char acc[29];
    rk_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", acc);
    assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    unsigned char d[20];
    char hex[41];
    const char *abc56 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    rk_sha1(abc56, strlen(abc56), d);
    for (int i = 0; i < 20; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(hex, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    rk_sha1("", 0, d);
    for (int i = 0; i < 20; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(hex, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    char b64[16];
    rk_base64((const unsigned char *)"fo", 2, b64);
    assert_string_equal(b64, "Zm8=");
    assert_true(rk_ws_key_valid("dGhlIHNhbXBsZSBub25jZQ=="));
    assert_false(rk_ws_key_valid("short"));
    assert_false(rk_ws_key_valid(NULL));
}

/* Close frames: unmasked, code big-endian, reason cut at a UTF-8 boundary. */
static void test_close_frame(void **state)
{
    (void)state;
    unsigned char f[256];
    size_t n = rk_ws_close_frame(1008, "Port 80 is below minimum allowed port 1024", f, sizeof f);
    assert_int_equal(n, 4 + 42);
    assert_int_equal(f[0], 0x88);
    assert_int_equal(f[1], 44);
    assert_int_equal(f[2], 0x03);
    assert_int_equal(f[3], 0xF0);
    assert_memory_equal(f + 4, "Port 80", 7);

    char longr[300];
    memset(longr, 'a', sizeof longr);
    longr[122] = (char)0xC3; /* a two-byte character straddling the 123-byte cut */
    longr[123] = (char)0xA9;
    longr[299] = '\0';
    n = rk_ws_close_frame(1011, longr, f, sizeof f);
    assert_int_equal(f[1], 2 + 122);
    assert_int_equal(n, 4 + 122);
    n = rk_ws_close_frame(1001, NULL, f, sizeof f);
    assert_int_equal(n, 4);
}

/* Frame boundary tracking across arbitrary splits. */
static void test_tracker(void **state)
{
    (void)state;
    unsigned char stream[2 + 5 + 4 + 300 + 2 + 4 + 3];
    size_t o = 0;
    stream[o++] = 0x81; /* text, 5 bytes */
    stream[o++] = 5;
    memcpy(stream + o, "hello", 5);
    o += 5;
    stream[o++] = 0x82; /* binary, 300 bytes (16-bit length) */
    stream[o++] = 126;
    stream[o++] = 300 >> 8;
    stream[o++] = 300 & 0xFF;
    memset(stream + o, 7, 300);
    o += 300;
    stream[o++] = 0x89; /* masked ping, 3 bytes */
    stream[o++] = 0x80 | 3;
    memset(stream + o, 0, 4 + 3);
    o += 7;
    for (size_t split = 1; split < o; split++) {
        struct rk_ws_tracker t;
        memset(&t, 0, sizeof t);
        rk_ws_track(&t, stream, split);
        int boundary = split == 7 || split == 7 + 304;
        assert_int_equal(rk_ws_at_boundary(&t), boundary);
        rk_ws_track(&t, stream + split, o - split);
        assert_true(rk_ws_at_boundary(&t));
    }
}

/* The timed pipe: data, end, timeouts, abort. */
static void test_bytepipe_timed(void **state)
{
    (void)state;
    struct rk_bytepipe *p = rk_bytepipe_new(8);
    size_t w = 0;
    assert_int_equal(rk_bytepipe_write_timed(p, "abcdef", 6, 10, &w), 0);
    assert_int_equal(w, 6);
    assert_int_equal(rk_bytepipe_write_timed(p, "ghijkl", 6, 10, &w), 1);
    assert_int_equal(w, 2);
    char buf[16];
    assert_int_equal(rk_bytepipe_read(p, buf, sizeof buf, 10), 8);
    assert_memory_equal(buf, "abcdefgh", 8);
    assert_int_equal(rk_bytepipe_read(p, buf, sizeof buf, 10), -2);
    assert_int_equal(rk_bytepipe_write_timed(p, "xy", 2, 10, &w), 0);
    rk_bytepipe_close(p);
    assert_int_equal(rk_bytepipe_read(p, buf, sizeof buf, 10), 2);
    assert_int_equal(rk_bytepipe_read(p, buf, sizeof buf, 10), 0);
    rk_bytepipe_abort(p);
    assert_int_equal(rk_bytepipe_read(p, buf, sizeof buf, 10), -1);
    assert_int_equal(rk_bytepipe_write_timed(p, "z", 1, 10, &w), -1);
    rk_bytepipe_free(p);
}

/* The endpoint cache only caches: a copy per hit (credential flags and the idle timeout
 * included), misses after the TTL, forget and forget-by-sandbox. */
static void test_endpoint_cache(void **state)
{
    (void)state;
    struct rk_kv hdr[2] = {{"X-Route", "r1"}, {"Authorization", "Bearer t"}};
    uint32_t flags[2] = {0, RK_PROXY_HEADER_CREDENTIAL};
    struct rk_proxy_target pt = {0};
    pt.base_url = "http://10.0.0.1:8080/base";
    pt.headers = hdr;
    pt.headers_len = 2;
    pt.header_flags = flags;
    rk_ep_cache_clear();
    struct rk_ep e;
    assert_int_equal(rk_ep_cache_get("sb-ep", 8080, 0, 60000, &e), -1);
    rk_ep_cache_put("sb-ep", 8080, 0, &pt, 7);
    rk_ep_cache_put("sb-ep", 9090, 0, &pt, 7);
    assert_int_equal(rk_ep_cache_get("sb-ep", 8080, 0, 60000, &e), 0);
    assert_string_equal(e.base_url, pt.base_url);
    assert_int_equal(e.headers_len, 2);
    assert_string_equal(e.headers[1].key, "Authorization");
    assert_string_equal(e.headers[1].value, "Bearer t");
    assert_non_null(e.header_flags);
    assert_int_equal(e.header_flags[1], RK_PROXY_HEADER_CREDENTIAL);
    assert_int_equal(e.idle_minutes, 7);
    rk_ep_free(&e);
    assert_int_equal(rk_ep_cache_get("sb-ep", 8080, 1, 60000, &e), -1); /* another kind */
    assert_int_equal(rk_ep_cache_get("sb-ep", 8080, 0, 0, &e), -1);     /* caching off */
    rk_ep_cache_forget("sb-ep", 8080, 0);
    assert_int_equal(rk_ep_cache_get("sb-ep", 8080, 0, 60000, &e), -1);
    assert_int_equal(rk_ep_cache_get("sb-ep", 9090, 0, 60000, &e), 0);
    rk_ep_free(&e);
    rk_ep_cache_forget_sandbox("sb-ep");
    assert_int_equal(rk_ep_cache_get("sb-ep", 9090, 0, 60000, &e), -1);
    /* The copy is one block: without headers, and with a header without a value. */
    struct rk_proxy_target bare = {.base_url = "http://10.0.0.2:80"};
    rk_ep_cache_put("sb-ep", 80, 0, &bare, 0);
    assert_int_equal(rk_ep_cache_get("sb-ep", 80, 0, 60000, &e), 0);
    assert_string_equal(e.base_url, "http://10.0.0.2:80");
    assert_null(e.headers);
    assert_null(e.header_flags);
    rk_ep_free(&e);
    struct rk_kv novalue[1] = {{"X-Empty", NULL}};
    bare.headers = novalue;
    bare.headers_len = 1;
    rk_ep_cache_put("sb-ep", 81, 0, &bare, 0);
    assert_int_equal(rk_ep_cache_get("sb-ep", 81, 0, 60000, &e), 0);
    assert_int_equal(e.headers_len, 1);
    assert_string_equal(e.headers[0].key, "X-Empty");
    assert_null(e.headers[0].value);
    assert_null(e.header_flags);
    rk_ep_free(&e);
    rk_ep_cache_clear();
}

/* The idle touch: the deadline rule, the once-per-second throttle, and the store write. */
static void test_activity_touch(void **state)
{
    (void)state;
    assert_int_equal(rk_activity_deadline(1000, 0), 0);
    assert_int_equal(rk_activity_deadline(1000, -5), 0);
    assert_int_equal(rk_activity_deadline(1000, 2), 1120);
    assert_true(rk_activity_due("sb-due", 5000));
    assert_false(rk_activity_due("sb-due", 5000));
    assert_true(rk_activity_due("sb-due-2", 5000));
    assert_true(rk_activity_due("sb-due", 5001));
    assert_false(rk_activity_due("sb-due", 5001));

    struct rk_app app = {0};
    app.store = rk_store_open_memory();
    assert_non_null(app.store);
    char err[RK_STORE_ERRLEN];
    json_object *rec = json_object_new_object();
    json_object_object_add(rec, "state", json_object_new_string("running"));
    assert_int_equal(rk_store_create(app.store, "sb-act", rec, 1, err, sizeof err), RK_STORE_OK);
    json_object_put(rec);
    assert_int_equal(rk_activity_touch(&app, "sb-act", 0), 0); /* no idle timeout */
    int64_t before = rk_epoch_s();
    int64_t d = rk_activity_touch(&app, "sb-act", 3);
    int64_t again = rk_activity_touch(&app, "sb-act", 3);
    int64_t after = rk_epoch_s();
    assert_true(d >= before + 180 && d <= after + 180);
    if (before == after)
        assert_int_equal(again, 0); /* the same second: not due */
    json_object *got = NULL;
    assert_int_equal(rk_store_get(app.store, "sb-act", &got, err, sizeof err), RK_STORE_OK);
    json_object *exp = NULL;
    assert_true(json_object_object_get_ex(got, "expire_time", &exp));
    assert_true(json_object_get_int64(exp) >= d);
    json_object_put(got);
    rk_store_close(app.store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_port_sources),
        cmocka_unit_test(test_parse_int),
        cmocka_unit_test(test_port_ranges),
        cmocka_unit_test(test_traversal),
        cmocka_unit_test(test_raw_rest),
        cmocka_unit_test(test_header_filters),
        cmocka_unit_test(test_urls),
        cmocka_unit_test(test_plain_urls_split_as_libcurl_does),
        cmocka_unit_test(test_location),
        cmocka_unit_test(test_ws_accept),
        cmocka_unit_test(test_close_frame),
        cmocka_unit_test(test_tracker),
        cmocka_unit_test(test_bytepipe_timed),
        cmocka_unit_test(test_endpoint_cache),
        cmocka_unit_test(test_activity_touch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
