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

#include "base/ident.h"
#include "base/util.h"

struct rk_call;
struct rk_req;

/** Field flags. */
#define RK_V_REQUIRED 0x1u /* absent -> "Field required" */
#define RK_V_NONBLANK 0x2u /* strip; empty -> "String should have at least 1 character" */
/* A sandbox id (rk_v_str, rk_v_qstr: the identifier rule of base/ident.h,
 * and the value is noted on the request for the access log; rk_v_strlist:
 * every item follows the rule). */
#define RK_V_SANDBOX_ID 0x4u
#define RK_V_SESSION 0x8u /* a session name (the session name rule of base/ident.h) */

/** Accumulated validation problems. */
struct rk_v {
    struct rk_call *call; /* arena for stripped strings */
    struct rk_req *req;   /* the request (set by rk_v_body / rk_v_qstr); NULL in unit tests */
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

/** The items of a list rk_v_strlist accepted (NULL: none) as a C array in
 *  the arena; *n_out receives the count (0 gives NULL). Borrowed from list. */
const char **rk_v_strings(struct rk_v *v, json_object *list, size_t *n_out);

/** Pydantic Literal: absent/null gives def; otherwise the value must be one
 *  of allowed (NULL-terminated). Returns the index of the value in allowed. */
int rk_v_choice(struct rk_v *v, json_object *obj, const char *key, const char *const *allowed,
                int def);
/** Seconds where an explicit null means "none": returns 1 when a value
 *  applies (in *out), 0 for none; absent gives def when has_def. */
int rk_v_opt_seconds(struct rk_v *v, json_object *obj, const char *key, int has_def, double def,
                     double *out);

/** Query string argument as a string (arena). */
const char *rk_v_qstr(struct rk_v *v, struct rk_req *r, const char *key, unsigned flags);
/** Query boolean (case-insensitive forms); def when absent. */
int rk_v_qbool(struct rk_v *v, struct rk_req *r, const char *key, int def);
/** Query integer; def when absent. */
int64_t rk_v_qint(struct rk_v *v, struct rk_req *r, const char *key, int64_t def);

/** Range check of a number already read: a problem naming key and the range
 *  when x is outside [lo, hi] (INT64_MIN / INT64_MAX = no bound on that side);
 *  returns x clamped into the range so callers never compute with an
 *  out-of-range value. */
int64_t rk_v_irange(struct rk_v *v, const char *key, int64_t x, int64_t lo, int64_t hi);
/** Same for floating values (-INFINITY / INFINITY = no bound; NaN refused). */
double rk_v_frange(struct rk_v *v, const char *key, double x, double lo, double hi);
/** rk_v_int, then rk_v_irange when a value was given. */
int64_t rk_v_int_in(struct rk_v *v, json_object *obj, const char *key, unsigned flags, int64_t def,
                    int64_t lo, int64_t hi, int *present);
/** rk_v_num, then rk_v_frange when a value was given. */
double rk_v_num_in(struct rk_v *v, json_object *obj, const char *key, unsigned flags, double def,
                   double lo, double hi, int *present);
/** Saturate x into [lo, hi] (for values whose range is not an error). */
int64_t rk_sat_i64(int64_t x, int64_t lo, int64_t hi);

/** Upper bounds of request numbers (validation errors above them). */
#define RK_MAX_MINUTES 5256000LL   /* ten years */
#define RK_MAX_SECONDS 315360000LL /* ten years */

#endif /* RK_VALIDATE_H */
