/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /upload: streaming multipart/form-data (parts `file`, `target_path`,
 * `sandbox_id`; wire contract §5.11, B64). The route handlers themselves are
 * declared in routes.h (rk_route_upload_begin / _body / rk_route_upload).
 *
 * The file part is never held in memory: once both text fields are known, a
 * job on the worker pool (the consumer) runs the gate and the plugin's
 * file_stat + file_write, whose rk_source reads from a bounded byte pipe that
 * the event loop fills as body chunks arrive; when the pipe is full the
 * connection is suspended until the consumer drained it (backpressure). A
 * file part that arrives before the text fields is spooled to an unlinked
 * temporary file and streamed from there by the handler once the body is
 * complete.
 */
#ifndef RK_UPLOAD_H
#define RK_UPLOAD_H

/** Capacity of the pipe between the event loop and the consumer. */
#define RK_UPLOAD_PIPE_BYTES (1024 * 1024)

/** Buffer given to libmicrohttpd's multipart post processor. */
#define RK_UPLOAD_PP_BUFFER (64 * 1024)

/** Longest accepted value of the text parts (target_path, sandbox_id). */
#define RK_UPLOAD_FIELD_MAX 16384

/** The file name part of path (after the last '/'; "" if path ends in '/'). */
const char *rk_upload_basename(const char *path);

#endif /* RK_UPLOAD_H */
