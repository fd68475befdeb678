/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz the OpenSandbox plugin's HTTP/1.1 answer parser (plugins/opensandbox/os_h1.c): execd's
 * answers are upstream bytes. Byte 0 sizes the chunks the rest is fed in; the split feed must
 * end exactly as one whole feed does (result, bytes taken, status, body), and the body can never
 * be longer than the input.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "os_internal.h"

struct seen {
    long status;
    int statuses;
    size_t body_len;
    unsigned long sum; /* reading every byte lets ASan check the range */
};

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

static const struct os_h1_ops ops = {.on_status = on_status, .on_body = on_body};

/** Feed data in pieces of chunk bytes until the answer ends or fails. */
static int run(const uint8_t *data, size_t size, size_t chunk, struct seen *s, size_t *taken,
               int *eof_ok)
{
    struct os_h1_resp r;
    memset(&r, 0, sizeof r);
    memset(s, 0, sizeof *s);
    *taken = 0;
    int res = OS_H1_MORE;
    while (*taken < size) {
        size_t n = size - *taken < chunk ? size - *taken : chunk;
        size_t used = 0;
        res = os_h1_resp_feed(&r, (const char *)data + *taken, n, &used, &ops, s);
        assert(used <= n);
        *taken += used;
        if (res != OS_H1_MORE)
            break;
        assert(used == n);
    }
    *eof_ok = os_h1_resp_eof(&r);
    os_h1_resp_reset(&r);
    return res;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)(data[0] % 64) + 1;
    struct seen a, b;
    size_t ta, tb;
    int ea, eb;
    int ra = run(data + 1, size - 1, chunk, &a, &ta, &ea);
    int rb = run(data + 1, size - 1, size, &b, &tb, &eb);
    assert(a.body_len <= size);
    assert(a.statuses <= 1);
    if (ra != OS_H1_BAD && rb != OS_H1_BAD) {
        /* A malformed answer may be noticed at different points; anything else ends alike. */
        assert(ra == rb && ta == tb && ea == eb);
        assert(a.status == b.status && a.statuses == b.statuses);
        assert(a.body_len == b.body_len && a.sum == b.sum);
    }
    return 0;
}
