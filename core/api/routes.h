/* SPDX-License-Identifier: Apache-2.0 */
/* The API's route table (route_table.c) and its handlers. */
#ifndef RK_ROUTES_H
#define RK_ROUTES_H

#include <stddef.h>

#include "engine/router.h"

struct rk_req;

/** The API and operational routes (NULL-pattern terminated), for rk_router_use. */
extern const struct rk_route rk_api_routes[];

/* Every handler answers its request (the route's fail_message and shape
 * come from the table). One file per resource: */

/* routes_start.c */
void rk_route_start_async(struct rk_req *r);
void rk_route_start(struct rk_req *r);
/* routes_status.c */
void rk_route_get_status(struct rk_req *r);
void rk_route_is_alive(struct rk_req *r);
void rk_route_statistics(struct rk_req *r);
/* routes_list.c */
void rk_route_list(struct rk_req *r);
void rk_route_batch(struct rk_req *r);
/* routes_state.c */
void rk_route_stop(struct rk_req *r);
void rk_route_delete(struct rk_req *r);
void rk_route_restart(struct rk_req *r);
void rk_route_restart_path(struct rk_req *r);
/* routes_archive.c */
void rk_route_archive(struct rk_req *r);
void rk_route_commit(struct rk_req *r);
void rk_route_commit_get(struct rk_req *r);
/* routes_execute.c */
void rk_route_execute(struct rk_req *r);
/* routes_sessions.c */
void rk_route_create_session(struct rk_req *r);
void rk_route_run_in_session(struct rk_req *r);
void rk_route_close_session(struct rk_req *r);
/* routes_files.c */
void rk_route_read_file(struct rk_req *r);
void rk_route_write_file(struct rk_req *r);

/* upload.c (streaming multipart) */
int rk_route_upload_begin(struct rk_req *r);
int rk_route_upload_body(struct rk_req *r, const char *data, size_t len);
void rk_route_upload(struct rk_req *r);

/* routes_misc.c */
void rk_route_root(struct rk_req *r);
void rk_route_get_token(struct rk_req *r);
void rk_route_host_proxy(struct rk_req *r);
void rk_route_proxy_stub(struct rk_req *r);
void rk_route_livez(struct rk_req *r);
void rk_route_readyz(struct rk_req *r);
void rk_route_metrics(struct rk_req *r);
void rk_route_openapi(struct rk_req *r); /* GET /openapi.json */
void rk_route_docs(struct rk_req *r);    /* GET /docs */

#endif /* RK_ROUTES_H */
