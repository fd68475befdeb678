/* execd metrics: GET /metrics and GET /metrics/watch.
 *
 * Matched against alibaba/OpenSandbox components/execd/pkg/web/controller/metric.go and the
 * Metrics schema of shared/reference/opensandbox/execd-api.yaml: {"cpu_count", "cpu_used_pct",
 * "mem_total_mib", "mem_used_mib", "timestamp"}. execd reads them with gopsutil from the
 * machine it runs on (inside a container /proc shows the host's memory and CPUs):
 * cpu_count = runtime.GOMAXPROCS(-1) (the CPUs the process may use), cpu_used_pct =
 * cpu.Percent(1 s, false) (so every call takes a second), mem_*_mib from mem.VirtualMemory()
 * with Used = Total - Free - Buffers - Cached (Cached including SReclaimable). The simulator
 * reports the same host-wide figures. /metrics/watch writes one compact JSON object plus "\n"
 * per sample, after waiting 1 s each time, until the client goes away. Numbers are written
 * the way Go's encoding/json writes float64 (4, not 4.0). */
#include "sim.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Busy and total jiffies of the "cpu" line of /proc/stat; false if unreadable. */
static bool sim_cpu_times(unsigned long long *busy, unsigned long long *total)
{
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return false;
    unsigned long long v[10] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (n < 4)
        return false;
    /* user nice system idle iowait irq softirq steal (guest time is already in user/nice). */
    unsigned long long t = 0;
    for (int i = 0; i < 8; i++)
        t += v[i];
    *total = t;
    *busy = t - v[3] - v[4];
    return true;
}

/* Memory figures in MiB from /proc/meminfo; false if unreadable. */
static bool sim_mem_mib(double *total_mib, double *used_mib)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return false;
    unsigned long long total = 0, mfree = 0, buffers = 0, cached = 0, sreclaim = 0, kb;
    char key[64];
    while (fscanf(f, "%63s %llu kB\n", key, &kb) == 2) {
        if (!strcmp(key, "MemTotal:"))
            total = kb;
        else if (!strcmp(key, "MemFree:"))
            mfree = kb;
        else if (!strcmp(key, "Buffers:"))
            buffers = kb;
        else if (!strcmp(key, "Cached:"))
            cached = kb;
        else if (!strcmp(key, "SReclaimable:"))
            sreclaim = kb;
    }
    fclose(f);
    if (!total)
        return false;
    unsigned long long free_all = mfree + buffers + cached + sreclaim;
    *total_mib = (double)total / 1024.0;
    *used_mib = (double)(free_all < total ? total - free_all : 0) / 1024.0;
    return true;
}

/* A JSON number written like Go's strconv.FormatFloat(f, 'f' or 'e', -1, 64): the shortest
 * decimal that reads back as the same double. */
static json_object *sim_go_float(double d)
{
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    if (strchr(buf, 'e') && d > -1e21 && d < 1e21) {
        for (int prec = 0; prec <= 20; prec++) {
            snprintf(buf, sizeof buf, "%.*f", prec, d);
            if (strtod(buf, NULL) == d)
                break;
        }
    }
    return json_object_new_double_s(d, buf);
}

/* One metrics sample (takes about 1 s, as execd's); NULL with a message in err on failure. */
static json_object *sim_read_metrics(char *err, size_t errn)
{
    json_object *o = json_object_new_object();
    int64_t ts = sim_now_ms();
    cpu_set_t set;
    int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    unsigned long long b1, t1, b2, t2;
    double total_mib, used_mib;
    if (!sim_cpu_times(&b1, &t1)) {
        snprintf(err, errn, "failed to get CPU percent: cannot read /proc/stat");
        json_object_put(o);
        return NULL;
    }
    for (int i = 0; i < 10 && !g_sim.shutting_down; i++)
        sim_sleep_ms(100);
    if (!sim_cpu_times(&b2, &t2)) {
        snprintf(err, errn, "failed to get CPU percent: cannot read /proc/stat");
        json_object_put(o);
        return NULL;
    }
    if (!sim_mem_mib(&total_mib, &used_mib)) {
        snprintf(err, errn, "failed to get memory info: cannot read /proc/meminfo");
        json_object_put(o);
        return NULL;
    }
    double pct = 0;
    if (t2 > t1 && b2 >= b1)
        pct = (double)(b2 - b1) / (double)(t2 - t1) * 100.0;
    if (pct > 100)
        pct = 100;
    json_object_object_add(o, "cpu_count", sim_go_float((double)ncpu));
    json_object_object_add(o, "cpu_used_pct", sim_go_float(pct));
    json_object_object_add(o, "mem_total_mib", sim_go_float(total_mib));
    json_object_object_add(o, "mem_used_mib", sim_go_float(used_mib));
    json_object_object_add(o, "timestamp", json_object_new_int64(ts));
    return o;
}

/* State of one /metrics/watch stream. */
struct sim_watch {
    char *pending;
    size_t len, off;
};

/* MHD content reader for /metrics/watch: 1 s pause, then one sample line. */
static ssize_t sim_watch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct sim_watch *w = cls;
    if (w->off >= w->len) {
        free(w->pending);
        w->pending = NULL;
        w->len = w->off = 0;
        for (int i = 0; i < 10 && !g_sim.shutting_down; i++)
            sim_sleep_ms(100);
        if (g_sim.shutting_down)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        char err[128];
        json_object *m = sim_read_metrics(err, sizeof err);
        if (!m) {
            m = json_object_new_object();
            json_object_object_add(m, "error", json_object_new_string(err));
        }
        const char *s = json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN);
        w->len = strlen(s) + 1;
        w->pending = sim_xmalloc(w->len + 1);
        memcpy(w->pending, s, w->len - 1);
        w->pending[w->len - 1] = '\n';
        json_object_put(m);
        if (g_sim.shutting_down)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = w->len - w->off < max ? w->len - w->off : max;
    memcpy(buf, w->pending + w->off, n);
    w->off += n;
    return (ssize_t)n;
}

/* MHD free callback of a /metrics/watch stream. */
static void sim_watch_free(void *cls)
{
    struct sim_watch *w = cls;
    free(w->pending);
    free(w);
}

/* GET /metrics or /metrics/watch of execd (called without g_sim.mu held). */
enum MHD_Result sim_metrics_handle(struct MHD_Connection *c, const char *path)
{
    if (strcmp(path, "/metrics/watch") == 0) {
        struct sim_watch *w = calloc(1, sizeof *w);
        if (!w)
            abort();
        struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 4096, sim_watch_read, w, sim_watch_free);
        if (!r) {
            free(w);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        return sim_queue(c, 200, r);
    }
    char err[128];
    json_object *m = sim_read_metrics(err, sizeof err);
    if (!m) {
        char msg[200];
        snprintf(msg, sizeof msg, "error reading runtime metrics. %s", err);
        return sim_reply_error(c, 500, "RUNTIME_ERROR", msg);
    }
    return sim_reply_json(c, 200, m);
}
