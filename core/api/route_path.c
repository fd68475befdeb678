/* SPDX-License-Identifier: Apache-2.0 */
/* The one path of a sandbox route (route_path.h) and the result objects
 * several routes share. */
#include "api/route_path.h"

#include <string.h>

#include "base/app.h"
#include "base/status.h"
#include "domain/record.h"
#include "host/host.h"
#include "store/store.h"

void rk_path_body(struct rk_route_path *p, struct rk_req *r)
{
    memset(p, 0, sizeof *p);
    p->r = r;
    rk_v_init(&p->v, r->call, "body");
    p->body = rk_v_body(&p->v, r);
}

const char *rk_path_sandbox(struct rk_route_path *p, struct rk_req *r)
{
    rk_path_body(p, r);
    return rk_v_str(&p->v, p->body, "sandbox_id", RK_V_REQUIRED | RK_V_NONBLANK | RK_V_SANDBOX_ID,
                    NULL);
}

void rk_path_query(struct rk_route_path *p, struct rk_req *r)
{
    memset(p, 0, sizeof *p);
    p->r = r;
    rk_v_init(&p->v, r->call, "query");
    p->v.req = r;
}

int rk_path_valid(struct rk_route_path *p)
{
    if (rk_v_ok(&p->v))
        return 0;
    rk_reply_invalid(p->r, rk_v_text(&p->v));
    return -1;
}

int rk_path_gate(struct rk_route_path *p, enum rk_op op, const char *id)
{
    if (rk_path_valid(p) != 0)
        return -1;
    if (rk_dispatch(p->r->app, p->r->call, op, id, &p->t) != RK_OK) {
        rk_reply_call_error(p->r);
        return -1;
    }
    return 0;
}

void rk_path_fail(struct rk_route_path *p, rk_status st)
{
    rk_reply_plugin_failure(p->r, st);
}

void rk_reply_plugin_failure(struct rk_req *r, rk_status st)
{
    if (rk_call_error_code(r->call) == RK_OK)
        rk_call_set_error(r->call, st, "%s", rk_status_name(st));
    rk_reply_call_error(r);
}

void rk_path_end(struct rk_route_path *p)
{
    rk_target_release(&p->t);
    rk_v_free(&p->v);
    json_object_put(p->body);
    p->body = NULL;
}

void rk_reply_id_text(struct rk_req *r, const char *id, const char *what)
{
    rk_reply_ok(r, json_object_new_string(rk_arena_printf(r->call, "%s %s", id, what)));
}

void rk_reply_store_error(struct rk_req *r, const char *err)
{
    rk_reply_error(r, RK_E_UNAVAILABLE,
                   rk_arena_printf(r->call, "sandbox store unavailable: %s", err));
}

/* The members every sandbox result object starts with, all null. */
static const char *const result_head[] = {"code", "exit_code", "failure_reason"};

json_object *rk_result_head(void)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < sizeof result_head / sizeof result_head[0]; i++)
        json_object_object_add(o, result_head[i], NULL);
    return o;
}

int rk_result_head_text(struct rk_buf *b)
{
    for (size_t i = 0; i < sizeof result_head / sizeof result_head[0]; i++)
        if (rk_buf_printf(b, "%c\"%s\":null", i ? ',' : '{', result_head[i]) != 0)
            return -1;
    return 0;
}

json_object *rk_start_result(const char *id, const char *disk)
{
    /* The resource fields the start object names; the admin reports only
     * the disk it was asked for. */
    static const char *const unset[] = {"host_name", "host_ip", "cpus", "memory", NULL};
    json_object *o = rk_result_head();
    json_object_object_add(o, "sandbox_id", json_object_new_string(id));
    for (size_t i = 0; unset[i]; i++)
        json_object_object_add(o, unset[i], NULL);
    json_object_object_add(o, "disk", disk ? json_object_new_string(disk) : NULL);
    json_object_object_add(o, "disk_limit_rootfs", disk ? json_object_new_string(disk) : NULL);
    return o;
}

const char *rk_body_sandbox_id(struct rk_req *r, unsigned flags)
{
    struct rk_route_path p;
    rk_path_body(&p, r);
    const char *id =
        rk_v_str(&p.v, p.body, "sandbox_id", RK_V_REQUIRED | RK_V_SANDBOX_ID | flags, NULL);
    if (rk_path_valid(&p) != 0)
        id = NULL;
    rk_path_end(&p);
    return id;
}

int rk_route_state_op(struct rk_req *r, const char *id, enum rk_op op, enum rk_state to,
                      enum rk_state from)
{
    struct rk_target t;
    if (rk_dispatch(r->app, r->call, op, id, &t) != RK_OK) {
        rk_reply_call_error(r);
        return -1;
    }
    if (from && t.ref.state != from) {
        rk_reply_error(r, RK_E_INVALID,
                       rk_arena_printf(r->call, "Sandbox %s cannot be %s: current state is '%s'",
                                       id, op == RK_OP_RESTART ? "restarted" : "archived",
                                       rk_state_name(t.ref.state)));
        rk_target_release(&t);
        return -1;
    }
    rk_status st = rk_lifecycle_state_op(r->app, r->call, op, &t.ref, to);
    rk_target_release(&t);
    if (st != RK_OK) {
        rk_reply_call_error(r);
        return -1;
    }
    return 0;
}
