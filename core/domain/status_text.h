/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's client-facing status (get_status's result, §5.2; list items, batch statuses and
 * E2B's details start from it): its one definition, written from the stored record.
 */
#ifndef RK_STATUS_TEXT_H
#define RK_STATUS_TEXT_H

#include <json-c/json.h>

#include "base/util.h"
#include "domain/record.h"
#include "domain/record_src.h"

/** Append the status of the record rec (a tree or its scanned text) as JSON text to out.
 *  state: the state to show; is_alive as the caller computed it. Only reads the record. -1 when
 *  out's cap would be exceeded or memory ran out (out then holds a partial text). */
int rk_rec_status_text(struct rk_rec_src *rec, enum rk_state state, int is_alive,
                       struct rk_buf *out);

/** The status's host_name: the record's host_name, else its sandbox_id, else "-". Valid while
 *  rec is (or static). */
const char *rk_rec_status_host(struct rk_rec_src *rec);

/** The status as a json-c object (new reference, sharing nothing with rec), for callers that
 *  add to it or map it: rk_rec_status_text parsed. NULL when memory ran out. */
json_object *rk_rec_status(json_object *rec, enum rk_state state, int is_alive);

#endif /* RK_STATUS_TEXT_H */
