/* SPDX-License-Identifier: Apache-2.0 */
/* A stored record to read from, as a tree or as scanned text (record_src.h). */
#include "domain/record_src.h"

#include <stdlib.h>
#include <string.h>

#include "base/json_text.h"

/* Members of a nested object read by rk_src_sub_str. */
#define SUB_MEMBERS_MAX 32

/* Decoded strings live in blocks that are never moved (their addresses are handed out). */
struct rk_src_block {
    struct rk_src_block *next;
    size_t used, cap;
    char data[];
};

/* The members a reader below interprets with a type, and the kinds a text may give them:
 * json-c's getters convert other kinds in ways the text readers do not copy. Another typed
 * read of a member needs its row here. */
static const struct {
    const char *key;
    unsigned kinds; /* 1 << enum rku_json_kind */
} typed[] = {
    {"cpus", 1u << RKU_JSON_NULL | 1u << RKU_JSON_INT | 1u << RKU_JSON_DOUBLE},
    {"auto_clear_time", 1u << RKU_JSON_NULL | 1u << RKU_JSON_INT},
    {"create_failed", 1u << RKU_JSON_NULL | 1u << RKU_JSON_BOOL},
    {"create_deadline", 1u << RKU_JSON_NULL | 1u << RKU_JSON_INT},
};

struct rk_rec_src rk_src_tree(json_object *rec)
{
    return (struct rk_rec_src){.tree = rec};
}

int rk_src_text(struct rk_rec_src *s, const char *text, size_t len, const struct rku_json_member *m,
                size_t n, int64_t expire_time, int has_expire)
{
    *s = (struct rk_rec_src){.text = text,
                             .len = len,
                             .m = m,
                             .n = n,
                             .expire_time = expire_time,
                             .has_expire = has_expire};
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++) {
        const struct rku_json_span *v = rku_json_member_get(m, n, typed[i].key);
        if (v && !(typed[i].kinds & 1u << v->kind))
            return -1;
    }
    return 0;
}

void rk_src_release(struct rk_rec_src *s)
{
    while (s->arena) {
        struct rk_src_block *b = s->arena;
        s->arena = b->next;
        free(b);
    }
}

/* The text's value of member key, or NULL (absent). */
static const struct rku_json_span *text_get(const struct rk_rec_src *s, const char *key)
{
    return rku_json_member_get(s->m, s->n, key);
}

/* The tree's member key: NULL when it is absent or JSON null (json-c's getters read NULL as
 * their zero value). */
static json_object *tree_get(const struct rk_rec_src *s, const char *key)
{
    json_object *v = NULL;
    json_object_object_get_ex(s->tree, key, &v);
    return v;
}

/* The string v decoded into the source's arena, or NULL when memory ran out. */
static const char *decoded(struct rk_rec_src *s, const struct rku_json_span *v)
{
    struct rk_src_block *b = s->arena;
    if (!b || b->cap - b->used < v->n + 1) {
        size_t cap = v->n + 1 > 1024 ? v->n + 1 : 1024;
        b = malloc(sizeof *b + cap);
        if (!b) {
            s->oom = 1;
            return NULL;
        }
        *b = (struct rk_src_block){.next = s->arena, .cap = cap};
        s->arena = b;
    }
    char *out = rku_json_decode(v, b->data + b->used, b->cap - b->used);
    if (out)
        b->used += strlen(out) + 1;
    return out;
}

/* String member key of the object o, or NULL. */
static const char *tree_str(json_object *o, const char *key)
{
    json_object *v;
    if (o && json_object_object_get_ex(o, key, &v) && v && json_object_is_type(v, json_type_string))
        return json_object_get_string(v);
    return NULL;
}

const char *rk_src_str(struct rk_rec_src *s, const char *key)
{
    if (s->tree)
        return tree_str(s->tree, key);
    const struct rku_json_span *v = text_get(s, key);
    return v && v->kind == RKU_JSON_STRING ? decoded(s, v) : NULL;
}

const char *rk_src_sub_str(struct rk_rec_src *s, const char *obj, const char *key)
{
    if (s->tree)
        return tree_str(tree_get(s, obj), key);
    const struct rku_json_span *o = text_get(s, obj);
    struct rku_json_member sub[SUB_MEMBERS_MAX];
    int n = o && o->kind == RKU_JSON_OBJECT ? rku_json_scan_object(o->p, o->n, sub, SUB_MEMBERS_MAX)
                                            : -1;
    const struct rku_json_span *v = n > 0 ? rku_json_member_get(sub, (size_t)n, key) : NULL;
    return v && v->kind == RKU_JSON_STRING ? decoded(s, v) : NULL;
}

int rk_src_has(struct rk_rec_src *s, const char *key)
{
    if (s->tree)
        return tree_get(s, key) != NULL;
    const struct rku_json_span *v = text_get(s, key);
    return v && v->kind != RKU_JSON_NULL;
}

int rk_src_is(struct rk_rec_src *s, const char *key, enum rku_json_kind kind)
{
    if (s->tree) {
        json_object *v = tree_get(s, key);
        return v &&
               json_object_is_type(v, kind == RKU_JSON_OBJECT ? json_type_object : json_type_array);
    }
    const struct rku_json_span *v = text_get(s, key);
    return v && v->kind == kind;
}

int rk_src_value(struct rk_buf *b, struct rk_rec_src *s, const char *key)
{
    if (s->tree)
        return rk_json_value(b, tree_get(s, key));
    const struct rku_json_span *v = text_get(s, key);
    if (!v)
        return rk_buf_append(b, "null", 4);
    char small[256]; /* most values; a longer one is written through a copy of its own */
    char *tmp = v->n + 2 <= sizeof small ? small : malloc(v->n + 2);
    if (!tmp)
        return -1;
    int r = rk_buf_append(b, tmp, rku_json_copy(v, tmp));
    if (tmp != small)
        free(tmp);
    return r;
}

int64_t rk_src_int64(struct rk_rec_src *s, const char *key)
{
    if (s->tree)
        return json_object_get_int64(tree_get(s, key));
    const struct rku_json_span *v = text_get(s, key); /* admitted: int or null (typed[]) */
    return v && v->kind == RKU_JSON_INT ? rku_json_int(v) : 0;
}

double rk_src_double(struct rk_rec_src *s, const char *key)
{
    if (s->tree)
        return json_object_get_double(tree_get(s, key));
    const struct rku_json_span *v = text_get(s, key); /* admitted: a number or null */
    return v && (v->kind == RKU_JSON_INT || v->kind == RKU_JSON_DOUBLE) ? rku_json_number(v) : 0.0;
}

int rk_src_bool(struct rk_rec_src *s, const char *key)
{
    if (s->tree)
        return json_object_get_boolean(tree_get(s, key));
    const struct rku_json_span *v = text_get(s, key); /* admitted: a boolean or null */
    return v && v->kind == RKU_JSON_BOOL && v->p[0] == 't';
}

int rk_src_expire(struct rk_rec_src *s, int64_t *v)
{
    if (s->tree) {
        json_object *e = tree_get(s, "expire_time");
        if (e)
            *v = json_object_get_int64(e);
        return e != NULL;
    }
    *v = s->expire_time;
    return s->has_expire;
}
