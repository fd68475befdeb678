/* SPDX-License-Identifier: Apache-2.0 */
/* Small shared helpers: time, ids, strings, growable buffers, shell quoting. */
#ifndef RK_UTIL_H
#define RK_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "rock-admin/operator.h"

/** CLOCK_MONOTONIC in milliseconds. */
int64_t rk_now_ms(void);
/** Reads CLOCK_MONOTONIC, returns it in milliseconds and makes it this thread's rk_turn_ms until
 *  the next call: an event loop calls it when a turn begins (and before it computes how long
 *  to sleep), as nginx reads its clock once per loop iteration. */
int64_t rk_now_ms_turn(void);
/** On an event loop's thread, the time its current turn began (rk_now_ms_turn); elsewhere
 *  rk_now_ms. For the per-request stamps (activity, phases, durations), which a turn (well under
 *  a millisecond) does not move: never for a wait that must see time pass within one turn. */
int64_t rk_turn_ms(void);
/** CLOCK_MONOTONIC in nanoseconds (durations for metrics). */
int64_t rk_mono_ns(void);
/** The time ms milliseconds from now on clock (CLOCK_MONOTONIC for a condition variable set up
 *  with it, else CLOCK_REALTIME): the deadline pthread_cond_timedwait takes. */
struct timespec rk_time_after_ms(clockid_t clock, int64_t ms);
/** Copy the first n queued bytes of a ring buffer (size bytes, the oldest at head; n at most
 *  the bytes queued) to dst, unwrapped. */
void rk_ring_copy(void *dst, const char *ring, size_t size, size_t head, size_t n);
/** Wall clock, epoch seconds. */
int64_t rk_epoch_s(void);
/** Wall clock, epoch milliseconds (times shared between admins through the store). */
int64_t rk_epoch_ms(void);
/** Select the zone used by rk_iso_time (ROCK_TIME_ZONE, else TZ, else Asia/Shanghai). */
void rk_time_init(void);
/** Format epoch seconds as ISO-8601 with the zone offset, e.g. 2026-01-21T19:38:00+08:00. */
void rk_iso_time(int64_t epoch, char out[32]);
/** 32 lowercase hex characters from the kernel RNG (uuid4().hex-like). */
void rk_random_hex(char *out, size_t nbytes_hex_chars);
/** Like rk_random_hex (nchars hex digits + NUL) for identifiers that must be
 *  unique, not unguessable (request ids): no system call after a thread's
 *  first. Never for tokens or secrets. */
void rk_unique_hex(char *out, size_t nchars);

/** A growable byte buffer with a hard cap (cap 0 = unbounded). */
struct rk_buf {
    char *data;
    size_t len;
    size_t alloc;
    size_t cap;
};
/** Append bytes; returns -1 when the cap would be exceeded or on OOM. */
int rk_buf_append(struct rk_buf *b, const void *data, size_t len);
/** Makes room for len more bytes (and the NUL) in one allocation, so the appends that follow
 *  do not grow the buffer step by step; -1 like rk_buf_append. */
int rk_buf_reserve(struct rk_buf *b, size_t len);
/** Append the standard base64 (with padding) of len bytes; -1 like rk_buf_append. */
int rk_buf_base64(struct rk_buf *b, const void *data, size_t len);
/** Append a formatted string. */
int rk_buf_printf(struct rk_buf *b, const char *fmt, ...) RK_PRINTF(2, 3);
/** NUL-terminate (not counted in len) and return data ("" if empty). */
const char *rk_buf_cstr(struct rk_buf *b);
/** Free the buffer's memory and reset it (keeps cap). */
void rk_buf_free(struct rk_buf *b);

/** malloc'd printf; aborts the process on OOM (tiny strings only). */
char *rk_strdup_printf(const char *fmt, ...) RK_PRINTF(1, 2);
/** strdup that aborts on OOM. */
char *rk_xstrdup(const char *s);
/** The first n bytes of s as a string (s need not be terminated); aborts on OOM. */
char *rk_xstrndup(const char *s, size_t n);

/** Append s to b as a POSIX-shell single-quoted word (shlex.quote rules). */
int rk_shell_quote(struct rk_buf *b, const char *s);
/** Python repr() of a UTF-8 string (single quotes, escapes) into b. */
int rk_py_repr(struct rk_buf *b, const char *s, size_t len);
/** Python str(float) of a number: 9 -> "9.0", 2.5 -> "2.5". */
void rk_py_float(double v, char out[64]);

/** Case-insensitive ASCII equality (0 when either is NULL). */
int rk_strcaseeq(const char *a, const char *b);
/** FNV-1a (64-bit) of a NUL-terminated string: for hash tables and slots, not for security. */
uint64_t rk_hash_str(const char *s);
/** Parse a query/bool string (true/false/1/0/yes/no/on/off/t/f/y/n); -1 if invalid. */
int rk_parse_bool(const char *s);

#endif /* RK_UTIL_H */
