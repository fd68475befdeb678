/* SPDX-License-Identifier: Apache-2.0 */
/*
 * librkutil: small helpers that the core and the bundled plugins both need,
 * kept once (an internal static library, linked into the daemon and into
 * each plugin; not installed and not part of the operator ABI: plugins still
 * link nothing from the daemon). Prefix rku_. No global state; every
 * function is thread-safe; allocation failures return NULL / -1. The pool of
 * libcurl easy handles is in rkcurlpool.h.
 */
#ifndef RK_UTIL_LIB_H
#define RK_UTIL_LIB_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/** POSIX-shell word for s (Python's shlex.quote rules: safe words stay bare,
 *  anything else single-quoted with ' written as '"'"'). malloc'd; NULL on OOM. */
char *rku_shell_quote(const char *s);

/** Python repr() of the str that decoding these bytes as UTF-8 with
 *  surrogateescape gives: single quotes unless the text has ' but no ",
 *  escapes for \\, the quote, \n \r \t, other C0/C1 controls and DEL as \xNN,
 *  undecodable bytes as \udcNN. malloc'd; NULL on OOM. */
char *rku_py_repr(const char *s, size_t len);

/** Python repr() of a float into out: shortest round-trip digits, "9.0" for
 *  integral values, exponent form below 1e-4 and from 1e16, nan/inf/-0.0. */
void rku_py_float(double v, char out[64]);

/** Decode one UTF-8 sequence at s (at most n bytes): its length (1-4) and
 *  code point in *cp, or 0 if the bytes are not valid UTF-8 (overlong forms,
 *  surrogates and code points above U+10FFFF are invalid). */
size_t rku_utf8_decode(const unsigned char *s, size_t n, unsigned *cp);

/** nchars lowercase hex characters (at most 128) from the kernel RNG, NUL
 *  terminated (out holds nchars + 1). */
void rku_random_hex(char *out, size_t nchars);

/** Python str.strip() without arguments on ASCII text: move *s past leading and
 *  shorten *n past trailing whitespace (space, \t, \n, \v, \f, \r). A blank
 *  string ends with *n == 0. */
void rku_strip(const char **s, size_t *n);

/* Switch the calling thread to the "C" locale object, once per thread. json-c's parser
 * switches LC_NUMERIC to "C" around every parse with duplocale/newlocale/freelocale, which
 * allocate and take glibc's process-wide locale lock, unless the thread already uses the C
 * locale object: then glibc returns at once. The daemon never calls setlocale, so its locale
 * is "C" already and no output changes. Call at the start of threads that parse JSON. */
void rku_thread_c_locale(void);

/** The absolute time ms milliseconds from now on clock (for pthread_cond_timedwait with a
 *  condition variable set to that clock). */
struct timespec rku_time_after_ms(clockid_t clock, int64_t ms);

#endif /* RK_UTIL_LIB_H */
