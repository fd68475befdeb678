/* execd file endpoints: info, download (Range), upload (multipart), delete, mkdir, search, mv,
 * permissions. Paths are host paths; relative paths and "~" resolve inside the sandbox dir. */
#include "sim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SIM_MAX_SEARCH 10000

/* Resolve a client path ("~" and relative paths go to the sandbox dir). */
static char *sim_fpath(const char *dir, const char *p)
{
    size_t n = strlen(dir) + strlen(p) + 2;
    char *out = sim_xmalloc(n);
    if (p[0] == '~' && (p[1] == 0 || p[1] == '/'))
        snprintf(out, n, "%s%s", dir, p + 1);
    else if (p[0] == '/')
        snprintf(out, n, "%s", p);
    else
        snprintf(out, n, "%s/%s", dir, p);
    return out;
}

/* Go RFC3339Nano-like timestamp in local time. */
static void sim_go_time(const struct timespec *ts, char *out, size_t n)
{
    struct tm tm;
    localtime_r(&ts->tv_sec, &tm);
    char base[32], frac[16] = "", zone[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    if (ts->tv_nsec) {
        snprintf(frac, sizeof frac, ".%09ld", ts->tv_nsec);
        for (size_t i = strlen(frac) - 1; i > 0 && frac[i] == '0'; i--)
            frac[i] = 0;
    }
    long off = tm.tm_gmtoff;
    if (off == 0)
        snprintf(zone, sizeof zone, "Z");
    else
        snprintf(zone, sizeof zone, "%c%02ld:%02ld", off < 0 ? '-' : '+', labs(off) / 3600,
                 (labs(off) % 3600) / 60);
    snprintf(out, n, "%s%s%s", base, frac, zone);
}

/* Permission bits written as octal digits in a decimal number (0644 -> 644). */
static int sim_mode_digits(mode_t m)
{
    char buf[8];
    snprintf(buf, sizeof buf, "%o", (unsigned)(m & 0777));
    return atoi(buf);
}

/* Convert "decimal digits meaning octal" (644) to a mode; -1 if a digit is 8 or 9. */
static int sim_mode_from_digits(int64_t v)
{
    int mode = 0, shift = 0;
    if (v < 0)
        return -1;
    while (v > 0) {
        int d = (int)(v % 10);
        if (d > 7)
            return -1;
        mode |= d << shift;
        shift += 3;
        v /= 10;
    }
    return mode & 07777;
}

/* FileInfo JSON from lstat data. */
static json_object *sim_file_json(const char *abs, const struct stat *st)
{
    char ts[64], name[64];
    json_object *o = json_object_new_object();
    json_object_object_add(o, "path", json_object_new_string(abs));
    const char *type = S_ISREG(st->st_mode)   ? "file"
                       : S_ISDIR(st->st_mode) ? "directory"
                       : S_ISLNK(st->st_mode) ? "symlink"
                                              : "other";
    json_object_object_add(o, "type", json_object_new_string(type));
    json_object_object_add(o, "size", json_object_new_int64((int64_t)st->st_size));
    sim_go_time(&st->st_mtim, ts, sizeof ts);
    json_object_object_add(o, "modified_at", json_object_new_string(ts));
    sim_go_time(&st->st_ctim, ts, sizeof ts);
    json_object_object_add(o, "created_at", json_object_new_string(ts));
    struct passwd pw, *pwp = NULL;
    struct group gr, *grp = NULL;
    char buf[4096];
    if (getpwuid_r(st->st_uid, &pw, buf, sizeof buf, &pwp) == 0 && pwp)
        snprintf(name, sizeof name, "%s", pw.pw_name);
    else
        snprintf(name, sizeof name, "%u", (unsigned)st->st_uid);
    json_object_object_add(o, "owner", json_object_new_string(name));
    if (getgrgid_r(st->st_gid, &gr, buf, sizeof buf, &grp) == 0 && grp)
        snprintf(name, sizeof name, "%s", gr.gr_name);
    else
        snprintf(name, sizeof name, "%u", (unsigned)st->st_gid);
    json_object_object_add(o, "group", json_object_new_string(name));
    json_object_object_add(o, "mode", json_object_new_int(sim_mode_digits(st->st_mode)));
    return o;
}

/* Collected repeated path= query values. */
struct sim_paths {
    const char *v[256];
    int n;
};

/* MHD iterator collecting every path= argument. */
static enum MHD_Result sim_paths_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    struct sim_paths *p = cls;
    if (strcmp(key, "path") == 0 && p->n < 256)
        p->v[p->n++] = value ? value : "";
    return MHD_YES;
}

/* GET /files/info?path=...: all-or-nothing lstat. */
static enum MHD_Result sim_info(struct MHD_Connection *c, const char *dir)
{
    struct sim_paths ps = {.n = 0};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sim_paths_iter, &ps);
    json_object *o = json_object_new_object();
    for (int i = 0; i < ps.n; i++) {
        char *abs = sim_fpath(dir, ps.v[i]);
        struct stat st;
        if (lstat(abs, &st) != 0) {
            char msg[8300];
            int e = errno;
            snprintf(msg, sizeof msg, "file not found. file not found: %.2048s: lstat %.4096s: %s",
                     ps.v[i], abs, sim_go_strerror(e));
            free(abs);
            json_object_put(o);
            if (e == ENOENT || e == ENOTDIR)
                return sim_reply_error(c, 404, "FILE_NOT_FOUND", msg);
            return sim_reply_error(c, 500, "RUNTIME_ERROR", msg);
        }
        json_object_object_add(o, ps.v[i], sim_file_json(abs, &st));
        free(abs);
    }
    return sim_reply_json(c, 200, o);
}

/* Parse the first range of a Range header; 0 ok, -1 malformed, 1 unsatisfiable. */
static int sim_parse_range(const char *h, int64_t size, int64_t *start, int64_t *end)
{
    if (strncmp(h, "bytes=", 6) != 0)
        return -1;
    const char *p = h + 6;
    while (*p == ' ')
        p++;
    char *e;
    if (*p == '-') {
        long long n = strtoll(p + 1, &e, 10);
        if (e == p + 1 || (*e && *e != ',') || n <= 0)
            return -1;
        *start = size > n ? size - n : 0;
        *end = size - 1;
        return size == 0 ? 1 : 0;
    }
    long long a = strtoll(p, &e, 10);
    if (e == p || *e != '-' || a < 0)
        return -1;
    p = e + 1;
    long long b = size - 1;
    if (*p && *p != ',') {
        b = strtoll(p, &e, 10);
        if (e == p || (*e && *e != ',') || b < a)
            return -1;
    }
    if (a >= size)
        return 1;
    if (b >= size)
        b = size - 1;
    *start = a;
    *end = b;
    return 0;
}

/* GET /files/download?path=... with optional Range. */
static enum MHD_Result sim_download(struct MHD_Connection *c, const char *dir)
{
    const char *p = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
    if (!p || !*p)
        return sim_reply_error(c, 400, "MISSING_QUERY", "missing query parameter path");
    char *abs = sim_fpath(dir, p);
    int fd = open(abs, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        int e = fd < 0 ? errno : EISDIR;
        char msg[4200];
        if (fd >= 0)
            close(fd);
        snprintf(msg, sizeof msg, "file not found. open %.4096s: %s", abs, sim_go_strerror(e));
        free(abs);
        if (e == ENOENT || e == ENOTDIR)
            return sim_reply_error(c, 404, "FILE_NOT_FOUND", msg);
        return sim_reply_error(c, 500, "RUNTIME_ERROR", msg);
    }
    int64_t size = (int64_t)st.st_size, start = 0, end = size - 1;
    unsigned status = 200;
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
    if (range && *range) {
        int rr = sim_parse_range(range, size, &start, &end);
        if (rr != 0) {
            close(fd);
            free(abs);
            if (rr < 0)
                return sim_reply_error(c, 416, "UNKNOWN", NULL);
            return sim_reply_text(c, 416, "invalid range: failed to overlap\n");
        }
        status = 206;
    }
    uint64_t len = size == 0 ? 0 : (uint64_t)(end - start + 1);
    struct MHD_Response *r = MHD_create_response_from_fd_at_offset64(len, fd, (uint64_t)start);
    if (!r) {
        close(fd);
        free(abs);
        return MHD_NO;
    }
    const char *base = strrchr(abs, '/');
    base = base ? base + 1 : abs;
    char hdr[1024];
    MHD_add_response_header(r, "Content-Type", "application/octet-stream");
    snprintf(hdr, sizeof hdr, "attachment; filename=\"%.900s\"", base);
    MHD_add_response_header(r, "Content-Disposition", hdr);
    MHD_add_response_header(r, "Accept-Ranges", "bytes");
    struct tm tm;
    gmtime_r(&st.st_mtim.tv_sec, &tm);
    strftime(hdr, sizeof hdr, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    MHD_add_response_header(r, "Last-Modified", hdr);
    if (status == 206) {
        snprintf(hdr, sizeof hdr, "bytes %lld-%lld/%lld", (long long)start, (long long)end,
                 (long long)size);
        MHD_add_response_header(r, "Content-Range", hdr);
    }
    free(abs);
    return sim_queue(c, status, r);
}

/* One multipart part. */
struct sim_part {
    char name[64];
    bool has_filename;
    const char *data;
    size_t len;
};

/* Find needle in haystack (binary). */
static const char *sim_memmem(const char *h, size_t hl, const char *n, size_t nl)
{
    return memmem(h, hl, n, nl);
}

/* Extract a quoted or bare parameter value (name="x") from a header line. */
static bool sim_header_param(const char *line, size_t ll, const char *param, char *out, size_t n)
{
    size_t pl = strlen(param);
    for (size_t i = 0; i + pl + 1 < ll; i++) {
        if ((i == 0 || line[i - 1] == ' ' || line[i - 1] == ';') &&
            strncasecmp(line + i, param, pl) == 0 && line[i + pl] == '=') {
            const char *v = line + i + pl + 1, *end = line + ll;
            size_t k = 0;
            if (*v == '"') {
                v++;
                while (v < end && *v != '"' && k + 1 < n)
                    out[k++] = *v++;
            } else {
                while (v < end && *v != ';' && *v != ' ' && k + 1 < n)
                    out[k++] = *v++;
            }
            out[k] = 0;
            return true;
        }
    }
    return false;
}

/* Split a multipart body into parts; returns count or -1 when unparsable. */
static int sim_multipart(const char *ctype, const char *body, size_t blen, struct sim_part *parts,
                         int max)
{
    char boundary[256], delim[264];
    if (!ctype || strncasecmp(ctype, "multipart/form-data", 19) != 0 ||
        !sim_header_param(ctype, strlen(ctype), "boundary", boundary, sizeof boundary) ||
        !*boundary)
        return -1;
    int dl = snprintf(delim, sizeof delim, "--%s", boundary);
    const char *p = sim_memmem(body, blen, delim, (size_t)dl), *end = body + blen;
    int n = 0;
    while (p && n < max) {
        p += dl;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            break;
        if (end - p >= 2 && p[0] == '\r' && p[1] == '\n')
            p += 2;
        const char *hend = sim_memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!hend)
            return -1;
        struct sim_part *pt = &parts[n];
        memset(pt, 0, sizeof *pt);
        for (const char *line = p; line < hend;) {
            const char *le = sim_memmem(line, (size_t)(hend - line), "\r\n", 2);
            if (!le)
                le = hend;
            if ((size_t)(le - line) > 20 && strncasecmp(line, "Content-Disposition:", 20) == 0) {
                char fname[8];
                sim_header_param(line, (size_t)(le - line), "name", pt->name, sizeof pt->name);
                pt->has_filename =
                    sim_header_param(line, (size_t)(le - line), "filename", fname, sizeof fname);
            }
            line = le + 2;
        }
        const char *data = hend + 4;
        char crlfdelim[270];
        int cl = snprintf(crlfdelim, sizeof crlfdelim, "\r\n%s", delim);
        const char *next = sim_memmem(data, (size_t)(end - data), crlfdelim, (size_t)cl);
        if (!next)
            return -1;
        pt->data = data;
        pt->len = (size_t)(next - data);
        n++;
        p = next + 2;
    }
    return n;
}

/* Write one uploaded file: mkdir -p parent, create+truncate, fsync, chmod, chown. */
static int sim_write_file(const char *abs, const char *data, size_t len, int mode,
                          const char *owner, const char *group, char *err, size_t errn)
{
    char *parent = sim_strdup(abs);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        if (sim_mkdir_p(parent, 0777) != 0) {
            snprintf(err, errn, "mkdir %s: %s", parent, sim_go_strerror(errno));
            free(parent);
            return -1;
        }
    }
    free(parent);
    int fd = open(abs, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0777);
    if (fd < 0) {
        snprintf(err, errn, "open %s: %s", abs, sim_go_strerror(errno));
        return -1;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t k = write(fd, data + off, len - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            snprintf(err, errn, "write %s: %s", abs, sim_go_strerror(errno));
            close(fd);
            return -1;
        }
        off += (size_t)k;
    }
    fsync(fd);
    close(fd);
    if (mode > 0 && chmod(abs, (mode_t)mode) != 0) {
        snprintf(err, errn, "chmod %s: %s", abs, sim_go_strerror(errno));
        return -1;
    }
    if ((owner && *owner) || (group && *group)) {
        uid_t uid = (uid_t)-1;
        gid_t gid = (gid_t)-1;
        struct passwd *pw = owner && *owner ? getpwnam(owner) : NULL;
        struct group *gr = group && *group ? getgrnam(group) : NULL;
        if (pw)
            uid = pw->pw_uid;
        if (gr)
            gid = gr->gr_gid;
        if ((pw || gr) && chown(abs, uid, gid) != 0) {
            snprintf(err, errn, "chown %s: %s", abs, sim_go_strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* POST /files/upload (multipart: metadata part + file part, repeatable). */
static enum MHD_Result sim_upload(struct MHD_Connection *c, struct sim_req *r, const char *dir)
{
    enum { MAXP = 128 };
    struct sim_part *parts = calloc(MAXP, sizeof *parts);
    if (!parts)
        abort();
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    int n = sim_multipart(ct, r->body, r->len, parts, MAXP);
    enum MHD_Result ret;
    const struct sim_part *metas[MAXP], *files[MAXP];
    int nm = 0, nf = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(parts[i].name, "metadata") == 0 && parts[i].has_filename)
            metas[nm++] = &parts[i];
        else if (strcmp(parts[i].name, "file") == 0 && parts[i].has_filename)
            files[nf++] = &parts[i];
    }
    if (n <= 0) {
        ret = sim_reply_error(c, 400, "INVALID_FILE", "multipart form is empty");
    } else if (nm == 0) {
        ret = sim_reply_error(c, 400, "INVALID_FILE_METADATA", "metadata file is missing");
    } else if (nf == 0) {
        ret = sim_reply_error(c, 400, "INVALID_FILE_CONTENT", "file is missing");
    } else if (nm != nf) {
        ret = sim_reply_error(c, 400, "INVALID_FILE", "metadata and file count mismatch");
    } else {
        ret = MHD_YES;
        int i;
        for (i = 0; i < nm; i++) {
            char *mj = sim_xmalloc(metas[i]->len + 1);
            memcpy(mj, metas[i]->data, metas[i]->len);
            mj[metas[i]->len] = 0;
            json_object *m = json_tokener_parse(mj), *v;
            free(mj);
            const char *path = NULL, *owner = NULL, *group = NULL;
            int64_t modev = 0;
            bool okm = m && json_object_is_type(m, json_type_object) &&
                       json_object_object_get_ex(m, "path", &v) &&
                       json_object_is_type(v, json_type_string) && *json_object_get_string(v);
            if (okm)
                path = json_object_get_string(v);
            if (okm && json_object_object_get_ex(m, "mode", &v) &&
                !json_object_is_type(v, json_type_null)) {
                if (json_object_is_type(v, json_type_int))
                    modev = json_object_get_int64(v);
                else
                    okm = false;
            }
            if (okm && json_object_object_get_ex(m, "owner", &v) &&
                json_object_is_type(v, json_type_string))
                owner = json_object_get_string(v);
            if (okm && json_object_object_get_ex(m, "group", &v) &&
                json_object_is_type(v, json_type_string))
                group = json_object_get_string(v);
            if (!okm) {
                json_object_put(m);
                ret = sim_reply_error(c, 400, "INVALID_FILE_METADATA",
                                      "invalid file metadata: need a non-empty path");
                break;
            }
            int mode = sim_mode_from_digits(modev);
            char err[4200];
            char *abs = sim_fpath(dir, path);
            int rc = mode < 0
                         ? (snprintf(err, sizeof err, "invalid mode %lld", (long long)modev), -1)
                         : sim_write_file(abs, files[i]->data, files[i]->len, mode, owner, group,
                                          err, sizeof err);
            free(abs);
            json_object_put(m);
            if (rc != 0) {
                ret = sim_reply_error(c, 500, "RUNTIME_ERROR", err);
                break;
            }
        }
        if (i == nm)
            ret = sim_reply_empty(c, 200);
    }
    free(parts);
    return ret;
}

/* Recursively remove path (like os.RemoveAll); 0 on success or if absent. */
int sim_remove_all(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d)
            return -1;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            size_t n = strlen(path) + strlen(de->d_name) + 2;
            char *child = sim_xmalloc(n);
            snprintf(child, n, "%s/%s", path, de->d_name);
            sim_remove_all(child);
            free(child);
        }
        closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

/* DELETE /files?path= (files only) and DELETE /directories?path= (recursive). */
static enum MHD_Result sim_delete(struct MHD_Connection *c, const char *dir, bool dirs)
{
    struct sim_paths ps = {.n = 0};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sim_paths_iter, &ps);
    for (int i = 0; i < ps.n; i++) {
        char *abs = sim_fpath(dir, ps.v[i]);
        int rc = dirs ? sim_remove_all(abs) : (unlink(abs) == 0 || errno == ENOENT ? 0 : -1);
        if (rc != 0) {
            char msg[4200];
            snprintf(msg, sizeof msg, "remove %.4096s: %s", abs, sim_go_strerror(errno));
            free(abs);
            return sim_reply_error(c, 500, "RUNTIME_ERROR", msg);
        }
        free(abs);
    }
    return sim_reply_empty(c, 200);
}

/* Owner/group change like execd's SetFileOwnership (components/execd/pkg/web/controller,
 * filesystem helpers): empty names are left alone; an unknown user or group is an error; then
 * chown. 0 on success, else -1 with a Go-style message in err. */
static int sim_set_ownership(const char *abs, const char *owner, const char *group, char *err,
                             size_t errn)
{
    if ((!owner || !*owner) && (!group || !*group))
        return 0;
    uid_t uid = (uid_t)-1;
    gid_t gid = (gid_t)-1;
    if (owner && *owner) {
        struct passwd *pw = getpwnam(owner);
        if (!pw) {
            snprintf(err, errn, "failed to lookup user %s: user: unknown user %s", owner, owner);
            return -1;
        }
        uid = pw->pw_uid;
    }
    if (group && *group) {
        struct group *gr = getgrnam(group);
        if (!gr) {
            snprintf(err, errn, "failed to lookup group %s: group: unknown group %s", group, group);
            return -1;
        }
        gid = gr->gr_gid;
    }
    if (chown(abs, uid, gid) != 0) {
        snprintf(err, errn, "chown %s: %s", abs, sim_go_strerror(errno));
        return -1;
    }
    return 0;
}

/* POST /directories {"<path>": {"mode":755,"owner","group"}} and POST /files/permissions (same
 * shape, execd's map[string]model.Permission): mode as octal digits (0 = leave the mode),
 * then owner and group (ChmodFile / MakeDir + SetFileOwnership). */
static enum MHD_Result sim_path_map(struct MHD_Connection *c, struct sim_req *r, const char *dir,
                                    bool mkdirs)
{
    json_object *body = json_tokener_parse(r->body);
    bool ok = body && json_object_is_type(body, json_type_object);
    if (ok) {
        json_object_object_foreach(body, k0, v0)
        {
            (void)k0;
            json_object *fv;
            if (!json_object_is_type(v0, json_type_object)) {
                ok = false;
                break;
            }
            if (json_object_object_get_ex(v0, "mode", &fv) &&
                !json_object_is_type(fv, json_type_null) && !json_object_is_type(fv, json_type_int))
                ok = false;
            if (json_object_object_get_ex(v0, "owner", &fv) &&
                !json_object_is_type(fv, json_type_null) &&
                !json_object_is_type(fv, json_type_string))
                ok = false;
            if (json_object_object_get_ex(v0, "group", &fv) &&
                !json_object_is_type(fv, json_type_null) &&
                !json_object_is_type(fv, json_type_string))
                ok = false;
        }
    }
    if (!ok) {
        json_object_put(body);
        return sim_reply_error(
            c, 400, "INVALID_REQUEST_BODY",
            "error parsing request, MAYBE invalid body format. expected "
            "{\"<path>\": {\"mode\": int, \"owner\": string, \"group\": string}}");
    }
    enum MHD_Result ret = MHD_YES;
    bool failed = false;
    json_object_object_foreach(body, k, v)
    {
        if (failed)
            break;
        json_object *mv, *ov, *gv;
        int64_t digits = 0;
        if (json_object_object_get_ex(v, "mode", &mv) && json_object_is_type(mv, json_type_int))
            digits = json_object_get_int64(mv);
        const char *owner =
            json_object_object_get_ex(v, "owner", &ov) && json_object_is_type(ov, json_type_string)
                ? json_object_get_string(ov)
                : NULL;
        const char *group =
            json_object_object_get_ex(v, "group", &gv) && json_object_is_type(gv, json_type_string)
                ? json_object_get_string(gv)
                : NULL;
        int mode = sim_mode_from_digits(digits);
        char *abs = sim_fpath(dir, k);
        char err[4200] = "";
        int rc =
            mode < 0 ? (snprintf(err, sizeof err, "invalid mode %lld", (long long)digits), -1) : 0;
        if (rc == 0 && mkdirs && sim_mkdir_p(abs, mode > 0 ? (mode_t)mode : 0755) != 0)
            rc = -1, snprintf(err, sizeof err, "mkdir %.4096s: %s", abs, sim_go_strerror(errno));
        if (rc == 0 && mode > 0 && chmod(abs, (mode_t)mode) != 0)
            rc = -1, snprintf(err, sizeof err, "chmod %.4096s: %s", abs, sim_go_strerror(errno));
        if (rc == 0)
            rc = sim_set_ownership(abs, owner, group, err, sizeof err);
        if (rc != 0) {
            char msg[4400];
            if (mkdirs)
                snprintf(msg, sizeof msg, "%s", err);
            else
                snprintf(msg, sizeof msg, "error changing permissions for %.100s. %s", k, err);
            ret = sim_reply_error(c, 500, "RUNTIME_ERROR", msg);
            failed = true;
        }
        free(abs);
    }
    json_object_put(body);
    return failed ? ret : sim_reply_empty(c, 200);
}

/* POST /files/mv [{"src","dest"}]. */
static enum MHD_Result sim_move(struct MHD_Connection *c, struct sim_req *r, const char *dir)
{
    json_object *body = json_tokener_parse(r->body);
    if (!body || !json_object_is_type(body, json_type_array)) {
        json_object_put(body);
        return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", "expected a JSON array");
    }
    for (size_t i = 0; i < json_object_array_length(body); i++) {
        json_object *it = json_object_array_get_idx(body, i), *s, *d;
        if (!json_object_object_get_ex(it, "src", &s) ||
            !json_object_object_get_ex(it, "dest", &d)) {
            json_object_put(body);
            return sim_reply_error(c, 400, "INVALID_REQUEST_BODY", "src and dest are required");
        }
        char *src = sim_fpath(dir, json_object_get_string(s));
        char *dst = sim_fpath(dir, json_object_get_string(d));
        int rc = rename(src, dst);
        int e = errno;
        free(src);
        free(dst);
        if (rc != 0) {
            json_object_put(body);
            return sim_reply_error(c, e == ENOENT ? 404 : 500,
                                   e == ENOENT ? "FILE_NOT_FOUND" : "RUNTIME_ERROR",
                                   sim_go_strerror(e));
        }
    }
    json_object_put(body);
    return sim_reply_empty(c, 200);
}

/* Depth-first search collecting files whose name matches pattern (bounded). */
static void sim_search_walk(const char *path, const char *pattern, json_object *out, int depth)
{
    if (depth > 32 || json_object_array_length(out) >= SIM_MAX_SEARCH)
        return;
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) && json_object_array_length(out) < SIM_MAX_SEARCH) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        size_t n = strlen(path) + strlen(de->d_name) + 2;
        char *child = sim_xmalloc(n);
        snprintf(child, n, "%s/%s", path, de->d_name);
        struct stat st;
        if (lstat(child, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                sim_search_walk(child, pattern, out, depth + 1);
            else if (fnmatch(pattern, de->d_name, 0) == 0)
                json_object_array_add(out, sim_file_json(child, &st));
        }
        free(child);
    }
    closedir(d);
}

/* GET /files/search?path=&pattern=. */
static enum MHD_Result sim_search(struct MHD_Connection *c, const char *dir)
{
    const char *p = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
    const char *pat = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pattern");
    if (!p || !*p)
        return sim_reply_error(c, 400, "MISSING_QUERY", "missing query parameter path");
    char *abs = sim_fpath(dir, p);
    struct stat st;
    if (stat(abs, &st) != 0) {
        free(abs);
        return sim_reply_error(c, 404, "FILE_NOT_FOUND", "file not found");
    }
    json_object *arr = json_object_new_array();
    sim_search_walk(abs, pat && *pat ? pat : "*", arr, 0);
    free(abs);
    return sim_reply_json(c, 200, arr);
}

/* Route /files... and /directories... */
enum MHD_Result sim_files_handle(struct MHD_Connection *c, struct sim_req *r,
                                 struct sim_sandbox *sb, const char *path, const char *dir)
{
    (void)sb;
    const char *m = r->method;
    if (strcmp(path, "/files/info") == 0 && strcmp(m, "GET") == 0)
        return sim_info(c, dir);
    if (strcmp(path, "/files/download") == 0 && strcmp(m, "GET") == 0)
        return sim_download(c, dir);
    if (strcmp(path, "/files/upload") == 0 && strcmp(m, "POST") == 0)
        return sim_upload(c, r, dir);
    if (strcmp(path, "/files") == 0 && strcmp(m, "DELETE") == 0)
        return sim_delete(c, dir, false);
    if (strcmp(path, "/directories") == 0 && strcmp(m, "DELETE") == 0)
        return sim_delete(c, dir, true);
    if (strcmp(path, "/directories") == 0 && strcmp(m, "POST") == 0)
        return sim_path_map(c, r, dir, true);
    if (strcmp(path, "/files/permissions") == 0 && strcmp(m, "POST") == 0)
        return sim_path_map(c, r, dir, false);
    if (strcmp(path, "/files/mv") == 0 && strcmp(m, "POST") == 0)
        return sim_move(c, r, dir);
    if (strcmp(path, "/files/search") == 0 && strcmp(m, "GET") == 0)
        return sim_search(c, dir);
    return sim_reply_text(c, 404, "404 page not found");
}
