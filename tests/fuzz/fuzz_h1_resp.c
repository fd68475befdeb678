/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz the event loops' HTTP/1.1 answer parser (lib/rkh1.c): execd's answers to the OpenSandbox
 * plugin and the answers of apps in sandboxes to the HTTP relay are upstream bytes. Byte 0 sizes
 * the chunks the rest is fed in (bits 0-5) and says whether the answer is to a HEAD request
 * (bit 6); the split feed must end exactly as one whole feed does (result, bytes taken, status,
 * headers, body), and neither the headers nor the body can be longer than the input.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "rkh1.h"

struct seen {
    long status;
    int statuses;
    size_t header_bytes;
    unsigned long header_sum;
    size_t body_len;
    unsigned long sum; /* reading every byte lets ASan check the range */
};

static void on_header(void *ctx, const char *n, size_t nl, const char *v, size_t vl)
{
    struct seen *s = ctx;
    for (size_t i = 0; i < nl; i++)
        s->header_sum = s->header_sum * 31 + (unsigned char)n[i];
    for (size_t i = 0; i < vl; i++)
        s->header_sum = s->header_sum * 37 + (unsigned char)v[i];
    s->header_bytes += nl + vl;
}

static void on_status(void *ctx, long st)
{
    struct seen *s = ctx;
    s->status = st;
    s->statuses++;
}

static int on_body(void *ctx, const char *p, size_t n)
{
    struct seen *s = ctx;
    for (size_t i = 0; i < n; i++)
        s->sum = s->sum * 31 + (unsigned char)p[i];
    s->body_len += n;
    return 0;
}

static const struct rku_h1_ops ops = {
    .on_header = on_header, .on_status = on_status, .on_body = on_body};

/** Feed data in pieces of chunk bytes until the answer ends or fails. */
static int run(const uint8_t *data, size_t size, size_t chunk, int head_only, struct seen *s,
               size_t *taken, int *eof_ok)
{
    struct rku_h1_resp r;
    memset(&r, 0, sizeof r);
    r.head_only = head_only;
    memset(s, 0, sizeof *s);
    *taken = 0;
    int res = RKU_H1_MORE;
    while (*taken < size) {
        size_t n = size - *taken < chunk ? size - *taken : chunk;
        size_t used = 0;
        res = rku_h1_resp_feed(&r, (const char *)data + *taken, n, &used, &ops, s);
        assert(used <= n);
        *taken += used;
        if (res != RKU_H1_MORE)
            break;
        assert(used == n);
    }
    *eof_ok = rku_h1_resp_eof(&r);
    rku_h1_resp_reset(&r);
    return res;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)(data[0] % 64) + 1;
    int head_only = (data[0] >> 6) & 1;
    struct seen a, b;
    size_t ta, tb;
    int ea, eb;
    int ra = run(data + 1, size - 1, chunk, head_only, &a, &ta, &ea);
    int rb = run(data + 1, size - 1, size, head_only, &b, &tb, &eb);
    assert(a.body_len <= size && a.header_bytes <= size);
    assert(!head_only || a.body_len == 0);
    assert(a.statuses <= 1);
    if (ra != RKU_H1_BAD && rb != RKU_H1_BAD) {
        /* A malformed answer may be noticed at different points; anything else ends alike. */
        assert(ra == rb && ta == tb && ea == eb);
        assert(a.status == b.status && a.statuses == b.statuses);
        assert(a.header_bytes == b.header_bytes && a.header_sum == b.header_sum);
        assert(a.body_len == b.body_len && a.sum == b.sum);
    }
    return 0;
}
