/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz the WebSocket frame tracker (core/relay/relay_wsproto.c, used by the relay to
 * know when a close frame may be injected). Invariant: feeding the same bytes
 * in one piece or split at any point ends in the same state.
 */
#include <assert.h>
#include <string.h>

#include "fuzz.h"
#include "relay/relay_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cut = data[0] % (size);
    const unsigned char *p = data + 1;
    size_t n = size - 1;
    if (cut > n)
        cut = n;
    struct rk_ws_tracker whole, split;
    memset(&whole, 0, sizeof whole);
    memset(&split, 0, sizeof split);
    rk_ws_track(&whole, p, n);
    rk_ws_track(&split, p, cut);
    rk_ws_track(&split, p + cut, n - cut);
    assert(rk_ws_at_boundary(&whole) == rk_ws_at_boundary(&split));
    assert(whole.remain == split.remain && whole.hdr_len == split.hdr_len);
    assert(whole.hdr_len <= sizeof whole.hdr);
    return 0;
}
