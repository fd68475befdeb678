/* SPDX-License-Identifier: Apache-2.0 */
/* The OpenAPI document (api/openapi.json) and the /docs page (api/docs.html),
 * compiled into the daemon from api/ at build time (core/Makefile.am). */
#ifndef RK_API_ASSETS_H
#define RK_API_ASSETS_H

#include <stddef.h>

/** api/openapi.json, NUL-terminated. */
extern const char rk_openapi_json[];
/** Its length in bytes. */
extern const size_t rk_openapi_json_len;
/** api/docs.html, NUL-terminated. */
extern const char rk_docs_html[];
/** Its length in bytes. */
extern const size_t rk_docs_html_len;

#endif /* RK_API_ASSETS_H */
