/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store: commands. Owns building argument vectors and key names, running one command
 * or a pipeline on a pooled connection (EVAL sent as EVALSHA), the WAIT that confirms a
 * write on min_replicas_ack replicas, and turning array replies into id lists. */
#include "store/store_redis_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Append one string argument to a command (silently bounded by MAX_ARGS). */
void rkr_cmd_add(struct cmd *c, const char *s)
{
    if (c->argc < MAX_ARGS) {
        c->argv[c->argc] = s;
        c->lens[c->argc] = strlen(s);
        c->argc++;
    }
}

/* Build a command from a NULL-terminated list of strings. */
void rkr_cmd_build(struct cmd *c, const char *first, ...)
{
    va_list ap;
    c->argc = 0;
    va_start(ap, first);
    for (const char *s = first; s; s = va_arg(ap, const char *))
        rkr_cmd_add(c, s);
    va_end(ap);
}

/* Format "<prefix><kind><name>" into buf (always fits: names are bounded). */
const char *rkr_key_of(const struct redis_store *rs, char buf[KEY_MAX], const char *kind,
                       const char *name)
{
    snprintf(buf, KEY_MAX, "%s%s%s", rs->prefix, kind, name ? name : "");
    return buf;
}

/* Run one command on a checked-out connection; error replies become errors. EVAL is sent as
 * EVALSHA (the script's text crosses the wire once per server), and again as EVAL when the
 * server answers NOSCRIPT (restarted or SCRIPT FLUSH). */
rk_store_rc rkr_op_command(struct rop *op, const struct cmd *c, redisReply **out, char *err,
                           size_t errlen)
{
    *out = NULL;
    redisReply *r = NULL;
    char sha[41];
    if (c->argc >= 2 && strcmp(c->argv[0], "EVAL") == 0 &&
        rkr_script_sha(op, c->argv[1], sha) == 0) {
        struct cmd e = *c;
        e.argv[0] = "EVALSHA";
        e.lens[0] = 7;
        e.argv[1] = sha;
        e.lens[1] = 40;
        rk_store_rc rc = rkr_op_pipeline(op, &e, 1, &r, err, errlen);
        if (rc != RK_STORE_OK)
            return rc;
        if (r->type != REDIS_REPLY_ERROR || !r->str || strncmp(r->str, "NOSCRIPT", 8) != 0) {
            if (r->type == REDIS_REPLY_ERROR) {
                rc = rkr_reply_fail(r, err, errlen);
                freeReplyObject(r);
                return rc;
            }
            *out = r;
            return RK_STORE_OK;
        }
        freeReplyObject(r);
        r = NULL;
        rkr_script_forget(); /* the server lost its scripts: learn them again */
    }
    if (op->broken)
        return rkr_io_fail(op, err, errlen);
    rk_store_rc rc = rkr_op_pipeline(op, c, 1, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        rc = rkr_reply_fail(r, err, errlen);
        freeReplyObject(r);
        return rc;
    }
    *out = r;
    return RK_STORE_OK;
}

/* Check out a connection, run one command, return the connection. */
rk_store_rc rkr_run(struct redis_store *rs, const struct cmd *c, redisReply **out, char *err,
                    size_t errlen)
{
    struct rop op;
    *out = NULL;
    rk_store_rc rc = rkr_op_begin(rs, &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    rc = rkr_op_command(&op, c, out, err, errlen);
    rkr_op_end(&op);
    return rc;
}

/* Send n commands in one round trip on a pooled connection and read every reply (replies[i] are
 * the caller's to free on success). */
rk_store_rc rkr_run_pipeline(struct redis_store *rs, const struct cmd *cmds, size_t n,
                             redisReply **replies, char *err, size_t errlen)
{
    struct rop op;
    rk_store_rc rc = rkr_op_begin(rs, &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    rc = rkr_op_pipeline(&op, cmds, n, replies, err, errlen);
    rkr_op_end(&op);
    return rc;
}

/* One read on a pooled connection: one command (rkr_op_command) or a pipeline. *retry is set
 * when it failed on an idle connection the server had closed, so a new one may succeed. */
static rk_store_rc read_once(struct redis_store *rs, const struct cmd *cmds, size_t n,
                             redisReply **replies, int pipeline, bool *retry, char *err,
                             size_t errlen)
{
    struct rop op;
    *retry = false;
    rk_store_rc rc = rkr_op_begin(rs, &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    rc = pipeline ? rkr_op_pipeline(&op, cmds, n, replies, err, errlen)
                  : rkr_op_command(&op, cmds, replies, err, errlen);
    *retry = rc != RK_STORE_OK && op.broken && op.closed && op.reused;
    rkr_op_end(&op); /* a broken connection takes the idle ones with it: the retry connects */
    return rc;
}

rk_store_rc rkr_run_read(struct redis_store *rs, const struct cmd *cmds, size_t n,
                         redisReply **replies, char *err, size_t errlen)
{
    bool retry;
    rk_store_rc rc = read_once(rs, cmds, n, replies, 1, &retry, err, errlen);
    return retry ? read_once(rs, cmds, n, replies, 1, &retry, err, errlen) : rc;
}

rk_store_rc rkr_run_read1(struct redis_store *rs, const struct cmd *c, redisReply **out, char *err,
                          size_t errlen)
{
    bool retry;
    *out = NULL;
    rk_store_rc rc = read_once(rs, c, 1, out, 0, &retry, err, errlen);
    return retry ? read_once(rs, c, 1, out, 0, &retry, err, errlen) : rc;
}

/* Run a command expecting an integer reply. */
rk_store_rc rkr_run_int(struct redis_store *rs, const struct cmd *c, long long *val, char *err,
                        size_t errlen)
{
    redisReply *r = NULL;
    rk_store_rc rc = rkr_run(rs, c, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r->type == REDIS_REPLY_INTEGER)
        *val = r->integer;
    else
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type %d", r->type);
    freeReplyObject(r);
    return rc;
}

/* Format WAIT <min_replicas_ack> <wait_timeout_ms> into c (bufs hold the numbers). */
static void wait_cmd(const struct redis_store *rs, struct cmd *c, char nbuf[16], char tbuf[16])
{
    snprintf(nbuf, 16, "%d", rs->min_replicas_ack);
    snprintf(tbuf, 16, "%d", rs->wait_timeout_ms);
    rkr_cmd_build(c, "WAIT", nbuf, tbuf, (const char *)NULL);
}

/* Judge a WAIT reply: fewer confirmations than asked is an error. */
static rk_store_rc wait_result(const struct redis_store *rs, const redisReply *r, char *err,
                               size_t errlen)
{
    if (r->type == REDIS_REPLY_ERROR)
        return rkr_reply_fail(r, err, errlen);
    if (r->type != REDIS_REPLY_INTEGER)
        return rk_store_fail(err, errlen, "redis error: unexpected WAIT reply type %d", r->type);
    if (r->integer < rs->min_replicas_ack)
        return rk_store_fail(err, errlen,
                             "redis write not confirmed by %d replica(s) within %d ms (%lld did); "
                             "it may be lost if the master fails now; retry",
                             rs->min_replicas_ack, rs->wait_timeout_ms, r->integer);
    return RK_STORE_OK;
}

/* Fewer replicas than asked may mean a master the sentinels already replaced
 * (cut off from its replicas): in Sentinel mode drop the connection so the
 * next one asks the sentinels again. */
static void note_short_wait(struct rop *op, const redisReply *r)
{
    if (op->rs->n_sentinels > 0 && r->type == REDIS_REPLY_INTEGER &&
        r->integer < op->rs->min_replicas_ack)
        op->broken = true;
}

/* After a write on op's connection: WAIT for min_replicas_ack replicas. */
rk_store_rc rkr_op_wait_replicas(struct rop *op, char *err, size_t errlen)
{
    struct redis_store *rs = op->rs;
    if (rs->min_replicas_ack <= 0)
        return RK_STORE_OK;
    char nbuf[16], tbuf[16];
    struct cmd c;
    redisReply *r = NULL;
    wait_cmd(rs, &c, nbuf, tbuf);
    rk_store_rc rc = rkr_op_pipeline(op, &c, 1, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    note_short_wait(op, r);
    rc = wait_result(rs, r, err, errlen);
    freeReplyObject(r);
    return rc;
}

/* Run a write expecting an integer reply; with min_replicas_ack > 0, WAIT is
 * pipelined behind it (same round trip) and must confirm the write. */
rk_store_rc rkr_run_write_int(struct redis_store *rs, const struct cmd *c, long long *val,
                              char *err, size_t errlen)
{
    if (rs->min_replicas_ack <= 0)
        return rkr_run_int(rs, c, val, err, errlen);
    struct rop op;
    rk_store_rc rc = rkr_op_begin(rs, &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    char nbuf[16], tbuf[16];
    struct cmd cmds[2];
    redisReply *r[2];
    cmds[0] = *c;
    wait_cmd(rs, &cmds[1], nbuf, tbuf);
    rc = rkr_op_pipeline(&op, cmds, 2, r, err, errlen);
    if (rc == RK_STORE_OK)
        note_short_wait(&op, r[1]);
    rkr_op_end(&op);
    if (rc != RK_STORE_OK)
        return rc;
    if (r[0]->type == REDIS_REPLY_ERROR)
        rc = rkr_reply_fail(r[0], err, errlen);
    else if (r[0]->type != REDIS_REPLY_INTEGER)
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type %d", r[0]->type);
    else
        *val = r[0]->integer;
    if (rc == RK_STORE_OK)
        rc = wait_result(rs, r[1], err, errlen);
    freeReplyObject(r[0]);
    freeReplyObject(r[1]);
    return rc;
}

/* Copy the string elements of an array reply into a malloc'd id list. */
rk_store_rc rkr_ids_from_array(const redisReply *r, char ***ids_out, size_t *n_out, char *err,
                               size_t errlen)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return rk_store_fail(err, errlen, "redis error: unexpected reply type %d", r->type);
    char **ids = calloc(r->elements ? r->elements : 1, sizeof *ids);
    if (!ids)
        return rk_store_fail(err, errlen, "store: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING)
            continue;
        ids[n] = strndup(e->str, e->len);
        if (!ids[n]) {
            rk_store_free_ids(ids, n);
            return rk_store_fail(err, errlen, "store: out of memory");
        }
        n++;
    }
    *ids_out = ids;
    *n_out = n;
    return RK_STORE_OK;
}
