/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stored record to read from: its json-c tree, or its JSON text scanned in place
 * (lib/rkjson.h) when a status poll read it from the store, so that no tree is built for
 * it. The readers below answer the same for both forms; rk_src_text admits only texts whose
 * members they can read exactly as json-c would.
 */
#ifndef RK_RECORD_SRC_H
#define RK_RECORD_SRC_H

#include <json-c/json.h>
#include <stdint.h>

#include "rkjson.h"
#include "base/util.h"

/** A record read either way. Fill with rk_src_tree or rk_src_text; rk_src_release after. */
struct rk_rec_src {
    json_object *tree; /* the tree (borrowed), or NULL: the text */
    const char *text;  /* the text (borrowed) */
    size_t len;
    const struct rku_json_member *m; /* its members (borrowed) */
    size_t n;
    int64_t expire_time; /* the text's idle deadline, when has_expire */
    int has_expire;
    struct rk_src_block *arena; /* decoded strings of the text */
    int oom; /* a string could not be decoded for want of memory: answers are not to be used */
};

/** A source reading the tree rec (borrowed). */
struct rk_rec_src rk_src_tree(json_object *rec);

/** Read text[0..len), scanned into m[0..n) (all borrowed), whose idle deadline is expire_time
 *  when has_expire (the store keeps it beside the text). 0, or -1 when a member the readers
 *  interpret has a type they do not read as json-c does (parse the text instead). */
int rk_src_text(struct rk_rec_src *s, const char *text, size_t len, const struct rku_json_member *m,
                size_t n, int64_t expire_time, int has_expire);

/** Free what the source allocated (the record is not the source's). */
void rk_src_release(struct rk_rec_src *s);

/** String member key, NULL when it is absent or not a string. Valid until rk_src_release. */
const char *rk_src_str(struct rk_rec_src *s, const char *key);

/** String member key of the object member obj (NULL as rk_src_str). */
const char *rk_src_sub_str(struct rk_rec_src *s, const char *obj, const char *key);

/** 1 when member key is there and not null. */
int rk_src_has(struct rk_rec_src *s, const char *key);

/** 1 when member key is an object (RKU_JSON_OBJECT) or an array (RKU_JSON_ARRAY): kind. */
int rk_src_is(struct rk_rec_src *s, const char *key, enum rku_json_kind kind);

/** Append member key's value as json-c writes it with RK_JSON_FLAGS (null when absent). -1
 *  when the buffer's cap would be exceeded or memory ran out. */
int rk_src_value(struct rk_buf *b, struct rk_rec_src *s, const char *key);

/** Member key as json_object_get_int64 / _get_double / _get_boolean read it (0 when absent). */
int64_t rk_src_int64(struct rk_rec_src *s, const char *key);
double rk_src_double(struct rk_rec_src *s, const char *key);
int rk_src_bool(struct rk_rec_src *s, const char *key);

/** The idle deadline ("expire_time", epoch s): 1 and *v when there is one. */
int rk_src_expire(struct rk_rec_src *s, int64_t *v);

#endif /* RK_RECORD_SRC_H */
