/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request validation with the lax rules the SDKs rely on (pydantic lax mode):
 * unknown fields ignored, explicit null accepted for optional fields, numbers
 * as int/float/numeric strings, int fields reject fractions, NonBlank strings
 * are stripped. Problems accumulate as "<loc>: <msg>" joined by "; ".
 */
#ifndef RK_VALIDATE_H
#define RK_VALIDATE_H

#include <json-c/json.h>
#include <stdint.h>

#include "util.h"

struct rk_call;
struct rk_req;

/** Field flags. */
#define RK_V_REQUIRED 0x1u /* absent -> "Field required" */
#define RK_V_NONBLANK 0x2u /* strip; empty -> "String should have at least 1 character" */

/** Accumulated validation problems. */
struct rk_v {
    struct rk_call *call; /* arena for stripped strings */
    const char *loc;      /* "body" or "query" */
    struct rk_buf text;
    int n;
};

/** Start validating; loc is "body" or "query". */
void rk_v_init(struct rk_v *v, struct rk_call *call, const char *loc);
/** 1 if no problem was found. */
int rk_v_ok(const struct rk_v *v);
/** The joined problem text ("" if none). */
const char *rk_v_text(struct rk_v *v);
/** Free the problem text. */
void rk_v_free(struct rk_v *v);
/** Add a problem for key. */
void rk_v_problem(struct rk_v *v, const char *key, const char *msg);

/** Parse the request body as a JSON object; on failure adds the problem and
 *  returns NULL. The object is owned by the caller. */
json_object *rk_v_body(struct rk_v *v, struct rk_req *r);

/** String field (NULL when absent/null and not required). Result lives in the arena. */
const char *rk_v_str(struct rk_v *v, json_object *obj, const char *key, unsigned flags,
                     const char *def);
/** Number field; *present set to 1 when a non-null value was given. */
double rk_v_num(struct rk_v *v, json_object *obj, const char *key, unsigned flags, double def,
                int *present);
/** Integer field (fractions rejected). */
int64_t rk_v_int(struct rk_v *v, json_object *obj, const char *key, unsigned flags, int64_t def,
                 int *present);
/** Boolean field (true/false, 0/1, and the string forms of rk_parse_bool). */
int rk_v_bool(struct rk_v *v, json_object *obj, const char *key, unsigned flags, int def);
/** Object of strings, or NULL when absent/null. Borrowed from obj. */
json_object *rk_v_strmap(struct rk_v *v, json_object *obj, const char *key, unsigned flags);
/** Array of strings, or NULL when absent/null. Borrowed from obj. */
json_object *rk_v_strlist(struct rk_v *v, json_object *obj, const char *key, unsigned flags);

/** Query string argument as a string (arena). */
const char *rk_v_qstr(struct rk_v *v, struct rk_req *r, const char *key, unsigned flags);
/** Query boolean (case-insensitive forms); def when absent. */
int rk_v_qbool(struct rk_v *v, struct rk_req *r, const char *key, int def);
/** Query integer; def when absent. */
int64_t rk_v_qint(struct rk_v *v, struct rk_req *r, const char *key, int64_t def);

#endif /* RK_VALIDATE_H */
