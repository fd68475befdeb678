/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Text decoding for /read_file with Python codec semantics: the bytes read
 * from the sandbox are decoded with the request's `encoding` and `errors`
 * exactly as bytes.decode(encoding, errors) would, and produced as UTF-8.
 *
 * Encodings: utf-8 (utf8, utf_8, u8, utf, cp65001), ascii (us-ascii, 646, us),
 * latin-1 (latin1, latin, l1, iso-8859-1, iso8859-1, 8859, cp819). Names are
 * normalised like codecs.lookup() (case-insensitive; '-' and ' ' read as '_').
 * Error handlers: strict, replace (one U+FFFD per maximal invalid subpart),
 * ignore, backslashreplace (\xNN per byte). As in Python, the handler name is
 * only looked up when an undecodable byte is met.
 *
 * Self-contained (libc only) so the unit test can build it alone.
 */
#ifndef RK_DECODE_H
#define RK_DECODE_H

#include <stddef.h>

/** Outcome of rk_decode(). */
enum rk_decode_rc {
    RK_DECODE_OK = 0,
    RK_DECODE_UNKNOWN_ENCODING = 1, /* msg: "unknown encoding: <enc>" */
    RK_DECODE_UNKNOWN_HANDLER = 2,  /* msg: "unknown error handler name '<x>'" */
    RK_DECODE_ERROR = 3,            /* strict failure; msg is Python's UnicodeDecodeError text */
    RK_DECODE_NOMEM = 4,            /* msg: "out of memory" */
};

/**
 * Decode len bytes of in. encoding NULL means "utf-8", errors NULL means
 * "strict". On RK_DECODE_OK *out is a malloc'd NUL-terminated UTF-8 string of
 * *out_len bytes (embedded NULs possible) that the caller frees; otherwise
 * *out is NULL and msg (msglen > 0) holds the error text.
 */
enum rk_decode_rc rk_decode(const char *in, size_t len, const char *encoding, const char *errors,
                            char **out, size_t *out_len, char *msg, size_t msglen);

/** 1 if rk_decode() knows the encoding name, else 0. */
int rk_decode_known_encoding(const char *encoding);

#endif /* RK_DECODE_H */
