/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz core/decode.c (read_file's Python codec semantics). Input: byte 0 picks
 * the encoding, byte 1 the error handler, the rest is the text. Checks: no
 * crash, the output length matches its NUL terminator, errors carry a message.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/decode.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const encodings[] = {"utf-8",     "UTF8", "ascii", "latin-1", "cp65001",
                                            "iso8859-1", "u8",   "bogus", NULL};
    static const char *const handlers[] = {"strict",           "replace", "ignore",
                                           "backslashreplace", "nope",    NULL};
    if (size < 2)
        return 0;
    const char *enc = encodings[data[0] % (sizeof encodings / sizeof *encodings)];
    const char *err = handlers[data[1] % (sizeof handlers / sizeof *handlers)];
    char *out = NULL;
    size_t out_len = 0;
    char msg[256];
    enum rk_decode_rc rc =
        rk_decode((const char *)data + 2, size - 2, enc, err, &out, &out_len, msg, sizeof msg);
    if (rc == RK_DECODE_OK) {
        assert(out != NULL);
        assert(out[out_len] == '\0');
        free(out);
    } else {
        assert(out == NULL);
        assert(msg[0] != '\0');
    }
    return 0;
}
