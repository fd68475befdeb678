/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of librkutil's pool of libcurl easy handles (rkcurlpool.h); no network. */
#include "rkcurlpool.h"

#include <stdio.h>
#include <string.h>

static int failures;

/* Count a failed expectation with its line. */
#define EXPECT(c)                                                                                  \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #c);                       \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);

    char o[RKU_CURL_KEY_MAX];
    EXPECT(rku_curl_origin("http://h:8080/a?b#c", o) == 0 && !strcmp(o, "http://h:8080"));
    EXPECT(rku_curl_origin("https://[::1]:1?x", o) == 0 && !strcmp(o, "https://[::1]:1"));
    EXPECT(rku_curl_origin("no-scheme", o) == 0 && !strcmp(o, "no-scheme"));
    char long_url[400];
    memset(long_url, 'a', sizeof long_url - 1);
    long_url[sizeof long_url - 1] = '\0';
    memcpy(long_url, "http://", 7);
    EXPECT(rku_curl_origin(long_url, o) == -1);

    /* Keyed: a handle comes back only under its key, newest first. */
    struct rku_curl_pool *p = rku_curl_pool_new(3, 2);
    EXPECT(p != NULL);
    CURL *a = rku_curl_pool_get(p, "http://a");
    CURL *b = rku_curl_pool_get(p, "http://a");
    CURL *c = rku_curl_pool_get(p, "http://b");
    EXPECT(a && b && c && a != b);
    rku_curl_pool_put(p, "http://a", a, 1);
    rku_curl_pool_put(p, "http://a", b, 1);
    rku_curl_pool_put(p, "http://b", c, 1);
    EXPECT(rku_curl_pool_get(p, "http://b") == c);
    EXPECT(rku_curl_pool_get(p, "http://a") == b);
    EXPECT(rku_curl_pool_get(p, "http://a") == a);
    CURL *fresh = rku_curl_pool_get(p, "http://a"); /* none left under the key: a new one */
    EXPECT(fresh && fresh != a && fresh != b && fresh != c);

    /* Bounds: at most 2 under one key, 3 in total; beyond them the handle is cleaned up. */
    rku_curl_pool_put(p, "http://a", a, 1);
    rku_curl_pool_put(p, "http://a", b, 1);
    rku_curl_pool_put(p, "http://a", fresh, 1); /* over per_key: cleaned up */
    rku_curl_pool_put(p, "http://b", c, 1);
    CURL *d = curl_easy_init();
    rku_curl_pool_put(p, "http://c", d, 1); /* over total: cleaned up */
    /* Not reusable: never kept. */
    CURL *e = rku_curl_pool_get(p, "http://e");
    rku_curl_pool_put(p, "http://e", e, 0);

    /* The NULL key takes any handle, newest first; only a, b and c were kept. */
    EXPECT(rku_curl_pool_get(p, NULL) == c);
    EXPECT(rku_curl_pool_get(p, NULL) == b);
    EXPECT(rku_curl_pool_get(p, NULL) == a);
    CURL *n = rku_curl_pool_get(p, NULL); /* empty: a new one (a, b, c are still alive) */
    EXPECT(n && n != a && n != b && n != c);
    rku_curl_pool_put(p, NULL, n, 1);
    rku_curl_pool_put(p, "http://a", a, 1);
    rku_curl_pool_clear(p); /* n and a were idle: cleaned up */
    CURL *g = rku_curl_pool_get(p, NULL);
    EXPECT(g != NULL && g != b && g != c);
    rku_curl_pool_put(p, NULL, g, 1);
    EXPECT(rku_curl_pool_get(p, NULL) == g);
    curl_easy_cleanup(g);
    curl_easy_cleanup(b);
    curl_easy_cleanup(c);
    rku_curl_pool_free(p);

    /* Without a pool (OOM at creation) get and put fall back to init and cleanup. */
    CURL *h = rku_curl_pool_get(NULL, "k");
    EXPECT(h != NULL);
    rku_curl_pool_put(NULL, "k", h, 1);
    rku_curl_pool_put(NULL, "k", NULL, 1);

    curl_global_cleanup();
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
