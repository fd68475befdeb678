/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A JSON object read in place: its members located in the text, nothing allocated, no tree
 * built. For the records a status poll reads (a json-c tree of one was most of a poll's
 * cost). The scanner only accepts the form json-c writes with JSON_C_TO_STRING_PLAIN, in which
 * a value's text is exactly what json-c writes again after parsing it (rk_json_copy): anything
 * else is refused, and the caller parses the text with json-c as before.
 */
#ifndef RK_JSON_SCAN_H
#define RK_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

/** What a scanned value is. A number is RK_JSON_INT when json-c reads it as an integer (no
 *  fraction, no exponent), else RK_JSON_DOUBLE. */
enum rk_json_kind {
    RK_JSON_NULL,
    RK_JSON_BOOL,
    RK_JSON_INT,
    RK_JSON_DOUBLE,
    RK_JSON_STRING,
    RK_JSON_OBJECT,
    RK_JSON_ARRAY
};

/** A value in the text: a string's span is its content between the quotes (escapes not
 *  decoded), any other value's span its whole text. */
struct rk_json_span {
    const char *p;
    size_t n;
    enum rk_json_kind kind;
};

/** One member of a scanned object: its name (no escapes in it) and its value. */
struct rk_json_member {
    struct rk_json_span key;
    struct rk_json_span value;
};

/** Scan text[0..len), one JSON object with optional whitespace around it, into its members
 *  m[0..max). Returns the number of members, or -1 when the text is not an object of the form
 *  this scanner reads: malformed; more than max members; whitespace inside it; a member name
 *  twice in one object; a name with an escape; a string with a \u escape or a raw control
 *  byte; an integer json-c would not write back as it is ("-0", beyond int64); a number that
 *  is not finite; objects or arrays nested deeper than 16. */
int rk_json_scan_object(const char *text, size_t len, struct rk_json_member *m, size_t max);

/** The value of member key among m[0..n), or NULL. */
const struct rk_json_span *rk_json_member_get(const struct rk_json_member *m, size_t n,
                                              const char *key);

/** Append the scanned value v as json-c writes it with RK_JSON_FLAGS after parsing it: its
 *  text, "\/" written as "/" (strings with their quotes). -1 when the buffer's cap would be
 *  exceeded or memory ran out. */
int rk_json_copy(struct rk_buf *b, const struct rk_json_span *v);

/** Decode the string value v (its escapes) into out[0..cap) with a terminating NUL. Returns
 *  out, or NULL when it does not fit or v is not a string. */
char *rk_json_decode(const struct rk_json_span *v, char *out, size_t cap);

/** The value of the integer v (RK_JSON_INT). */
int64_t rk_json_int(const struct rk_json_span *v);

/** The value of the number v (RK_JSON_INT or RK_JSON_DOUBLE) as json-c's
 *  json_object_get_double gives it. */
double rk_json_number(const struct rk_json_span *v);

#endif /* RK_JSON_SCAN_H */
