/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz the execd event stream parser (plugins/opensandbox/os_stream.c). The
 * input is fed in chunks whose sizes come from the first byte, so line
 * reassembly across reads is exercised too.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "os_internal.h"

/* Output sink: sum the bytes (reading them all lets ASan check the range). */
static rk_status sink(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    size_t *total = ctx;
    (void)stream;
    for (size_t i = 0; i < len; i++)
        *total += (unsigned char)buf[i];
    return RK_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)(data[0] % 64) + 1;
    size_t total = 0;
    struct os_stream st;
    os_stream_init(&st, sink, &total, 4096);
    for (size_t off = 1; off < size && st.status == RK_OK; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (os_stream_feed(&st, (const char *)data + off, n) != RK_OK)
            break;
    }
    (void)os_stream_finish(&st);
    os_stream_free(&st);
    return 0;
}
