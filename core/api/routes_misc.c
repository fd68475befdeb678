/* SPDX-License-Identifier: Apache-2.0 */
/* Small routes: hello, OSS token stub, host proxy refusal, admin proxy stub, health, metrics,
 * the OpenAPI document and its /docs page. */
#include <microhttpd.h>
#include <string.h>

#include "api/api_assets.h"
#include "base/app.h"
#include "engine/envelope.h"
#include "engine/reply.h"
#include "host/host.h"
#include "engine/http_server.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "api/routes.h"
#include "store/store.h"
#include "base/util.h"

void rk_route_root(struct rk_req *r)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "message", json_object_new_string("hello, ROCK!"));
    r->outcome = "success";
    rk_req_reply_json(r, 200, o);
}

void rk_route_get_token(struct rk_req *r)
{
    /* No OSS: the SDKs fall back to /upload (§5.24). */
    rk_reply_ok(r, NULL);
}

void rk_route_host_proxy(struct rk_req *r)
{
    rk_reply_error(r, RK_E_UNSUPPORTED,
                   rk_arena_printf(r->call, "%s backend does not support host proxy",
                                   r->app->plugin->desc->display_name));
}

void rk_route_proxy_stub(struct rk_req *r)
{
    /* ROCK's admin-role stub echoes the request (§5.24). */
    json_object *o = json_object_new_object();
    json_object_object_add(o, "sandbox_id", json_object_new_string(r->params[0]));
    json_object_object_add(o, "target_path", json_object_new_string(r->params[1]));
    if (r->body && r->body_len) {
        json_object *req = json_tokener_parse(r->body);
        if (req)
            json_object_object_add(o, "request", req);
    }
    rk_reply_ok(r, o);
}

void rk_route_livez(struct rk_req *r)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string("alive"));
    r->outcome = "success";
    rk_req_reply_json(r, 200, o);
}

void rk_route_readyz(struct rk_req *r)
{
    struct rk_app *app = r->app;
    json_object *o = json_object_new_object();
    char err[RK_STORE_ERRLEN] = "";
    const char *problem = NULL;
    if (app->draining)
        problem = "draining";
    else if (rk_store_ping(app->store, err, sizeof err) != RK_STORE_OK)
        problem = "store unreachable";
    json_object_object_add(o, "status", json_object_new_string(problem ? "not ready" : "ready"));
    if (problem) {
        json_object_object_add(o, "reason", json_object_new_string(problem));
        if (*err)
            json_object_object_add(o, "detail", json_object_new_string(err));
    }
    r->outcome = problem ? "not_ready" : "success";
    rk_req_reply_json(r, problem ? 503 : 200, o);
}

void rk_route_metrics(struct rk_req *r)
{
    struct rk_buf out = {0};
    rk_metrics_render(r->app, &out);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        out.len, out.data ? out.data : (void *)"", MHD_RESPMEM_MUST_COPY);
    rk_buf_free(&out);
    MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    r->outcome = "success";
    rk_req_reply_mhd(r, 200, resp);
}

void rk_route_openapi(struct rk_req *r)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        rk_openapi_json_len, (void *)rk_openapi_json, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    r->outcome = "success";
    rk_req_reply_mhd(r, 200, resp);
}

void rk_route_docs(struct rk_req *r)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        rk_docs_html_len, (void *)rk_docs_html, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", "text/html; charset=utf-8");
    /* The page is self-contained: its inline script may fetch only this origin. */
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'; connect-src 'self'");
    r->outcome = "success";
    rk_req_reply_mhd(r, 200, resp);
}
