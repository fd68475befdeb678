/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A JSON object read in place: its members located in the text, nothing allocated, no tree
 * built. For the records a status poll reads (a json-c tree of one was most of a poll's
 * cost) and the lifecycle list pages the OpenSandbox plugin reads on every reconciler pass. The
 * scanner only accepts the form json-c writes with JSON_C_TO_STRING_PLAIN, in which a value's text
 * is exactly what json-c writes again after parsing it (rku_json_copy): anything else is refused,
 * and the caller parses the text with json-c as before.
 */
#ifndef RKU_JSON_H
#define RKU_JSON_H

#include <stddef.h>
#include <stdint.h>

/** What a scanned value is. A number is RKU_JSON_INT when json-c reads it as an integer (no
 *  fraction, no exponent), else RKU_JSON_DOUBLE. */
enum rku_json_kind {
    RKU_JSON_NULL,
    RKU_JSON_BOOL,
    RKU_JSON_INT,
    RKU_JSON_DOUBLE,
    RKU_JSON_STRING,
    RKU_JSON_OBJECT,
    RKU_JSON_ARRAY
};

/** A value in the text: a string's span is its content between the quotes (escapes not
 *  decoded), any other value's span its whole text. */
struct rku_json_span {
    const char *p;
    size_t n;
    enum rku_json_kind kind;
};

/** One member of a scanned object: its name (no escapes in it) and its value. */
struct rku_json_member {
    struct rku_json_span key;
    struct rku_json_span value;
};

/** Scan text[0..len), one JSON object with optional whitespace around it, into its members
 *  m[0..max). Returns the number of members, or -1 when the text is not an object of the form
 *  this scanner reads: malformed; more than max members; whitespace inside it; a member name
 *  twice in one object; a name with an escape; a string with a \u escape or a raw control
 *  byte; an integer json-c would not write back as it is ("-0", beyond int64); a number that
 *  is not finite; objects or arrays nested deeper than 16. */
int rku_json_scan_object(const char *text, size_t len, struct rku_json_member *m, size_t max);

/** The value of member key among m[0..n), or NULL. */
const struct rku_json_span *rku_json_member_get(const struct rku_json_member *m, size_t n,
                                                const char *key);

/** Write the scanned value v into out as json-c writes it with JSON_C_TO_STRING_PLAIN after
 *  parsing it: its text, "\/" written as "/" (strings with their quotes). out must have room
 *  for v->n + 2 bytes; no NUL is written. Returns the bytes written. */
size_t rku_json_copy(const struct rku_json_span *v, char *out);

/** The elements of the array value v (a span this scanner produced, so already checked), one
 *  per call: *at starts at 0 and is advanced by each call. 1 with the next element in *out,
 *  0 after the last one, -1 when v is not an array. */
int rku_json_array_next(const struct rku_json_span *v, size_t *at, struct rku_json_span *out);

/** Decode the string value v (its escapes) into out[0..cap) with a terminating NUL. Returns
 *  out, or NULL when it does not fit or v is not a string. */
char *rku_json_decode(const struct rku_json_span *v, char *out, size_t cap);

/** The value of the integer v (RKU_JSON_INT). */
int64_t rku_json_int(const struct rku_json_span *v);

/** The value of the number v (RKU_JSON_INT or RKU_JSON_DOUBLE) as json-c's
 *  json_object_get_double gives it. */
double rku_json_number(const struct rku_json_span *v);

#endif /* RKU_JSON_H */
