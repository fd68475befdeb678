/* SPDX-License-Identifier: Apache-2.0 */
/* The ROCK envelope and failure shapes as JSON (envelope.h); no request state. */
#include "engine/envelope.h"

#include <pthread.h>

#include "base/json_text.h"

int rk_status_rock_code(rk_status st)
{
    switch (st) {
    case RK_E_INVALID:
    case RK_E_NOT_FOUND:
    case RK_E_CONFLICT:
    case RK_E_UNSUPPORTED:
    case RK_E_NOT_RUNNING:
        return 4000;
    case RK_E_UPSTREAM:
    case RK_E_UNAVAILABLE:
    case RK_E_NOMEM:
    case RK_E_INTERNAL:
    case RK_E_TOO_LARGE:
        return 5000;
    default:
        /* Timeouts, failed commands and cancellations carry no code (§2.2). */
        return 0;
    }
}

/* The members a Success envelope has before its result: name and string value (NULL: null). */
static const struct {
    const char *name, *value;
} success_head[] = {{"status", "Success"}, {"message", NULL}, {"error", NULL}};
#define SUCCESS_HEAD_N (sizeof success_head / sizeof success_head[0])

json_object *rk_envelope_success(json_object *result)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < SUCCESS_HEAD_N; i++)
        json_object_object_add(o, success_head[i].name,
                               success_head[i].value ? json_object_new_string(success_head[i].value)
                                                     : NULL);
    json_object_object_add(o, "result", result);
    return o;
}

/* The text of success_head ('{' and its members, with the comma before "result"), written
 * once from the table. */
static struct rk_buf success_head_text;
static pthread_once_t success_head_once = PTHREAD_ONCE_INIT;

static void success_head_init(void)
{
    struct rk_buf *b = &success_head_text;
    for (size_t i = 0; i < SUCCESS_HEAD_N; i++)
        if (rk_buf_printf(b, "%c\"%s\":", i ? ',' : '{', success_head[i].name) != 0 ||
            rk_json_str(b, success_head[i].value) != 0) {
            rk_buf_free(b); /* out of memory: rk_envelope_success_text fails */
            return;
        }
}

int rk_envelope_success_text(struct rk_buf *out, const char *result, size_t len)
{
    static const char key[] = ",\"result\":";
    pthread_once(&success_head_once, success_head_init);
    const struct rk_buf *h = &success_head_text;
    if (!h->len || rk_buf_reserve(out, h->len + sizeof key + len + 1) != 0 ||
        rk_buf_append(out, h->data, h->len) != 0 || rk_buf_append(out, key, sizeof key - 1) != 0 ||
        rk_buf_append(out, result, len) != 0)
        return -1;
    return rk_buf_append(out, "}", 1);
}

/* The SandboxResponse trio every coded failure carries. */
static void add_code(json_object *o, int code, const char *error)
{
    json_object_object_add(o, "code", json_object_new_int(code));
    json_object_object_add(o, "exit_code", NULL);
    json_object_object_add(o, "failure_reason", json_object_new_string(error));
}

/* Build the route's typed result filled with defaults (§2.4). */
static json_object *failure_shape(enum rk_shape shape, int code, const char *error)
{
    json_object *o = json_object_new_object();
    switch (shape) {
    case RK_SHAPE_NULL:
        json_object_put(o);
        return NULL;
    case RK_SHAPE_SANDBOX_RESPONSE:
        add_code(o, code, error);
        break;
    case RK_SHAPE_START:
        add_code(o, code, error);
        json_object_object_add(o, "sandbox_id", NULL);
        json_object_object_add(o, "host_name", NULL);
        json_object_object_add(o, "host_ip", NULL);
        json_object_object_add(o, "cpus", NULL);
        json_object_object_add(o, "memory", NULL);
        json_object_object_add(o, "disk", NULL);
        json_object_object_add(o, "disk_limit_rootfs", NULL);
        break;
    case RK_SHAPE_EXECUTE:
        json_object_object_add(o, "stdout", json_object_new_string(""));
        json_object_object_add(o, "stderr", json_object_new_string(""));
        json_object_object_add(o, "exit_code", NULL);
        json_object_object_add(o, "code", json_object_new_int(code));
        json_object_object_add(o, "failure_reason", json_object_new_string(error));
        break;
    case RK_SHAPE_CREATE_SESSION:
        json_object_object_add(o, "output", json_object_new_string(""));
        json_object_object_add(o, "session_type", json_object_new_string("bash"));
        json_object_object_add(o, "code", json_object_new_int(code));
        json_object_object_add(o, "failure_reason", json_object_new_string(error));
        break;
    case RK_SHAPE_RUN_SESSION:
        json_object_object_add(o, "session_type", json_object_new_string("bash"));
        json_object_object_add(o, "output", json_object_new_string(""));
        json_object_object_add(o, "exit_code", NULL);
        json_object_object_add(o, "failure_reason", json_object_new_string(error));
        json_object_object_add(o, "expect_string", json_object_new_string(""));
        json_object_object_add(o, "code", json_object_new_int(code));
        break;
    case RK_SHAPE_CLOSE_SESSION:
        json_object_object_add(o, "session_type", json_object_new_string("bash"));
        json_object_object_add(o, "code", json_object_new_int(code));
        json_object_object_add(o, "failure_reason", json_object_new_string(error));
        break;
    case RK_SHAPE_READ_FILE:
        /* Keep {"content":""}: the Python SDK returns "" instead of raising. */
        json_object_object_add(o, "content", json_object_new_string(""));
        json_object_object_add(o, "code", json_object_new_int(code));
        json_object_object_add(o, "failure_reason", json_object_new_string(error));
        break;
    case RK_SHAPE_WRITE_FILE:
        json_object_object_add(o, "success", json_object_new_boolean(0));
        json_object_object_add(o, "message", json_object_new_string(""));
        json_object_object_add(o, "code", json_object_new_int(code));
        json_object_object_add(o, "failure_reason", json_object_new_string(error));
        break;
    case RK_SHAPE_UPLOAD:
        json_object_object_add(o, "success", json_object_new_boolean(0));
        json_object_object_add(o, "message", json_object_new_string(""));
        json_object_object_add(o, "file_name", json_object_new_string(""));
        json_object_object_add(o, "code", json_object_new_int(code));
        json_object_object_add(o, "failure_reason", json_object_new_string(error));
        break;
    case RK_SHAPE_LIST:
        add_code(o, code, error);
        json_object_object_add(o, "items", json_object_new_array());
        json_object_object_add(o, "total", json_object_new_int(0));
        json_object_object_add(o, "has_more", json_object_new_boolean(0));
        break;
    case RK_SHAPE_BATCH:
        add_code(o, code, error);
        json_object_object_add(o, "statuses", NULL);
        break;
    }
    return o;
}

json_object *rk_envelope_failure(const char *message, const char *error, int code,
                                 enum rk_shape shape)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string("Failed"));
    json_object_object_add(o, "message", message ? json_object_new_string(message) : NULL);
    json_object_object_add(o, "error", json_object_new_string(error ? error : ""));
    json_object_object_add(o, "result",
                           code ? failure_shape(shape, code, error ? error : "") : NULL);
    return o;
}

json_object *rk_envelope_detail(const char *detail)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "detail", json_object_new_string(detail));
    return o;
}
