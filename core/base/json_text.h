/* SPDX-License-Identifier: Apache-2.0 */
/*
 * JSON text written straight into a buffer, byte for byte what json-c writes for the same
 * values with RK_JSON_FLAGS: for answers rendered without building a json-c tree first (the
 * status reads, whose objects were most of a poll's cost).
 */
#ifndef RK_JSON_TEXT_H
#define RK_JSON_TEXT_H

#include <json-c/json.h>

#include "base/util.h"

/** The serialization flags of every JSON answer: compact, "/" not escaped. */
#define RK_JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/** Append s as a JSON string (quotes and json-c's escapes; NULL appends null). -1 when the
 *  buffer's cap would be exceeded or memory ran out. */
int rk_json_str(struct rk_buf *b, const char *s);

/** Append d as json-c writes a double ("%.17g", ".0" added to an integral value); a value
 *  that is not finite, which JSON cannot carry, as null. -1 like rk_json_str. */
int rk_json_double(struct rk_buf *b, double d);

/** Append any json-c value (NULL: null) as json-c serializes it with RK_JSON_FLAGS. -1 like
 *  rk_json_str. */
int rk_json_value(struct rk_buf *b, json_object *v);

#endif /* RK_JSON_TEXT_H */
