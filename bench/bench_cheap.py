# SPDX-License-Identifier: Apache-2.0
"""Cheap requests side by side: rock-admin against nginx, Redis and the OpenSandbox
simulator on the same machine, in one run, with wrk (keep-alive, -t2 -c64), medians of three.

  python3 ../../bench/bench_cheap.py [all|status|proxy|download|execute|upload|inflight N [--reused]|wsrelays N|startup] [--seconds S] [--strace] [--shared-session]

Run from a configured build directory with the environment described in docs/performance.md
(ROCK_ADMIN_BIN, ROCK_TEST_PLUGIN_DIR, ROCK_OPENSANDBOX_PLUGIN_DIR, OPENSANDBOX_SIM).
Needs wrk, nginx, redis-server, redis-benchmark; perf and strace are optional (CPU time and
context switches per request come from /proc when perf is missing). Not part of `make check`.

Per-request figures: Redis commands from INFO commandstats (delta / requests), rock-admin CPU
time from /proc/PID/stat (utime+stime delta / requests), context switches from perf stat when
available, syscalls from `strace -c -f` on a separate short run (--strace; strace slows the
process, so that run's throughput is not reported). The nginx proxy anchor's CPU time is its
workers'.

Every measured server (rock-admin, the nginx anchors) runs in a session of its own, the upstream
app and wrk in the bench's; --shared-session runs them all in the bench's session (see nginx():
the kernel's autogroup scheduling makes each session a scheduling group).

inflight --reused sends each command on a keep-alive connection that has already served a
request (GET /), as the SDKs' connection pools do: such a connection keeps libmicrohttpd's whole
pool (server.max_header_bytes), a fresh one only what its first request touched.
"""
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
import harness  # noqa: E402
from harness import Admin, Redis, Sim, cleanup, free_port, wait_until  # noqa: E402

PREFIX = "/apis/envs/sandbox/v1"
API_KEY = "bench-key"
SECONDS = 5
RUNS = 3
THREADS, CONNS = 2, 64
RESULTS = []
# extra server.* settings for the in-flight and WebSocket-relay scenarios, e.g. BENCH_SERVER='{"max_header_bytes": 8192}'
SERVER_EXTRA = json.loads(os.environ.get("BENCH_SERVER", "{}"))
# --shared-session: the measured servers (rock-admin and the nginx anchors) run in the bench's
# session, with wrk and the upstream app, instead of one session each (see nginx()).
SHARED_SESSION = False


def log(*a):
    print(*a, flush=True)


def wrk(url, headers=None, seconds=None):
    """One wrk run; returns requests/s and the number of requests."""
    cmd = ["wrk", "-t%d" % THREADS, "-c%d" % CONNS, "-d%ds" % (seconds or SECONDS), "--latency"]
    for k, v in (headers or {}).items():
        cmd += ["-H", "%s: %s" % (k, v)]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=120).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    p50 = re.search(r"50%\s+([\d.]+\w+)", out)
    return rps, total, int(errs.group(1)) if errs else 0, p50.group(1) if p50 else "?"


def cpu_ticks(pid):
    """utime + stime (clock ticks) of a process, or the sum over a list of them."""
    if isinstance(pid, (list, tuple)):
        return sum(cpu_ticks(p) for p in pid)
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])


def redis_calls(redis):
    """{command: calls} from INFO commandstats."""
    out = redis.cli("INFO", "commandstats")
    calls = {}
    for line in out.splitlines():
        m = re.match(r"cmdstat_(\S+):calls=(\d+)", line)
        if m:
            calls[m.group(1)] = int(m.group(2))
    return calls


def perf_start(pid):
    if not shutil.which("perf"):
        return None
    out = tempfile.NamedTemporaryFile(prefix="rock-perf-", delete=False).name
    pids = ",".join(str(p) for p in pid) if isinstance(pid, (list, tuple)) else str(pid)
    p = subprocess.Popen(["perf", "stat", "-x,", "-o", out, "-e", "context-switches,task-clock",
                          "-p", pids], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    return p, out


def perf_stop(h):
    if not h:
        return {}
    p, out = h
    p.send_signal(signal.SIGINT)
    p.wait(timeout=20)
    vals = {}
    with open(out) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) > 2 and parts[0].replace(".", "").isdigit():
                vals[parts[2]] = float(parts[0])
    os.unlink(out)
    return vals


def measure(name, url, headers=None, pid=None, redis=None, anchor=None):
    """Median of RUNS wrk runs, plus per-request costs measured over those runs."""
    rates, totals, errors, p50s = [], 0, 0, []
    ticks0 = cpu_ticks(pid) if pid else 0
    calls0 = redis_calls(redis) if redis else {}
    ph = perf_start(pid) if pid else None
    for _ in range(RUNS):
        rps, total, errs, p50 = wrk(url, headers)
        rates.append(rps)
        totals += total
        errors += errs
        p50s.append(p50)
    perf = perf_stop(ph)
    row = {"name": name, "median": statistics.median(rates), "runs": rates, "p50": p50s,
           "errors": errors}
    if pid:
        hz = os.sysconf("SC_CLK_TCK")
        row["cpu_us"] = (cpu_ticks(pid) - ticks0) / hz * 1e6 / max(totals, 1)
        if "context-switches" in perf:
            row["cs"] = perf["context-switches"] / max(totals, 1)
    if redis:
        calls1 = redis_calls(redis)
        delta = {k: v - calls0.get(k, 0) for k, v in calls1.items() if v - calls0.get(k, 0) > 0}
        row["redis"] = {k: round(v / max(totals, 1), 2) for k, v in sorted(delta.items())}
    if anchor:
        row["anchor"] = anchor
    RESULTS.append(row)
    extra = ""
    if "cpu_us" in row:
        extra += ", %.0f us CPU/req" % row["cpu_us"]
    if "cs" in row:
        extra += ", %.1f context switches/req" % row["cs"]
    if "redis" in row:
        extra += ", redis/req %s" % row["redis"]
    if errors:
        extra += ", %d non-2xx" % errors
    log("%-58s %10.0f req/s  (runs %s; p50 %s)%s" % (
        name, row["median"], ", ".join("%.0f" % r for r in rates), "/".join(p50s), extra))
    return row


def strace_count(pid, url, headers=None):
    """Syscalls per request over a 3 s wrk run under strace -c -f."""
    if not shutil.which("strace"):
        return None
    out = tempfile.NamedTemporaryFile(prefix="rock-strace-", delete=False).name
    p = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    _, total, _, _ = wrk(url, headers, seconds=3)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=30)
    top = []
    calls = 0
    with open(out) as f:
        for line in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
            if m and m.group(2) != "total":
                top.append((int(m.group(1)), m.group(2)))
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?total$", line)
            if m:
                calls = int(m.group(1))
    os.unlink(out)
    top.sort(reverse=True)
    per = calls / max(total, 1)
    detail = ", ".join("%s %.1f" % (n, c / max(total, 1)) for c, n in top[:8])
    log("    syscalls/req %.1f: %s" % (per, detail))
    return per, detail


# ---- nginx ------------------------------------------------------------------------------

def nginx(conf_body, measured=False):
    """Start nginx (2 workers, like the 2 cores) with the given http{} body; returns the Popen.

    measured: an anchor compared with rock-admin. It then runs in a session of its own, as
    rock-admin does (the harness starts it with start_new_session, and a packaged daemon has its
    own session too): with the kernel's autogroup scheduling each session is a scheduling group,
    and on two cores shared with wrk and the upstream app a server in a group of its own gets at
    most one core when all are busy, while one in wrk's group competes thread by thread. The
    helpers (the upstream app) stay in the bench's session with wrk."""
    d = tempfile.mkdtemp(prefix="rock-bench-nginx-")
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""daemon off; master_process on; worker_processes 2; pid %s/nginx.pid;
error_log %s/error.log warn; user root;
events { worker_connections 4096; }
http {
  access_log off; client_body_temp_path %s; proxy_temp_path %s; fastcgi_temp_path %s;
  uwsgi_temp_path %s; scgi_temp_path %s; keepalive_requests 1000000;
%s
}
""" % (d, d, d, d, d, d, d, conf_body))
    p = subprocess.Popen(["nginx", "-c", conf, "-p", d], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL,
                         start_new_session=measured and not SHARED_SESSION)
    time.sleep(0.5)
    assert p.poll() is None, open(os.path.join(d, "error.log")).read()
    return p, d


def nginx_workers(p):
    """The worker processes of an nginx master (for their CPU time)."""
    with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
        return [int(x) for x in f.read().split()]


def stop(p):
    if p and p.poll() is None:
        p.terminate()
        p.wait(timeout=10)


# ---- scenarios -------------------------------------------------------------------------

def os_admin(sim, redis, extra=None):
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                           "use_server_proxy": False},
           "log": {"level": "warning"}, "server": {"max_connections": 6000}}
    cfg.update(extra or {})
    return Admin(operator="opensandbox", config=cfg, redis=redis)


def os_sandbox(sim_extra=None, admin_extra=None):
    """Redis, the simulator and rock-admin with opensandbox.so, with one running sandbox:
    (redis, sim, admin, sid, the OpenSandbox id)."""
    redis = Redis()
    sim = Sim(api_key=API_KEY, ready_delay_ms=0, extra=sim_extra)
    admin = os_admin(sim, redis, admin_extra)
    sid = admin.start_sandbox()
    st, js = admin.api("GET", "/get_status", query={"sandbox_id": sid})
    return redis, sim, admin, sid, js["result"]["host_name"]


def execd_url(sim, osid, path):
    """The sandbox's execd URL for path and the headers it needs (endpoint discovery)."""
    st, ep = sim.request("GET", "/v1/sandboxes/%s/endpoints/44772" % osid)
    return "http://%s%s" % (ep["endpoint"], path), dict(ep.get("headers") or {})


def body_of(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    return r.read()


def scenario_status(do_strace):
    log("== get_status and anchors ==")
    redis, sim, admin, sid, osid = os_sandbox()
    url = "http://127.0.0.1:%d%s/get_status?sandbox_id=%s" % (admin.port, PREFIX, sid)
    measure("get_status, opensandbox.so + Redis store", url, pid=admin.proc.pid, redis=redis)
    if do_strace:
        strace_count(admin.proc.pid, url)
    measure("GET / on rock-admin (opensandbox + Redis)", "http://127.0.0.1:%d/" % admin.port,
            pid=admin.proc.pid)
    measure("simulator GET /v1/sandboxes/{id}",
            "http://127.0.0.1:%d/v1/sandboxes/%s" % (sim.port, osid),
            headers={"OPEN-SANDBOX-API-KEY": API_KEY}, pid=sim.proc.pid)
    out = subprocess.run(["redis-benchmark", "-p", str(redis.port), "-c", str(CONNS), "-n",
                          "300000", "-t", "get", "-q"], capture_output=True, text=True).stdout
    m = re.search(r"GET: ([\d.]+) requests per second", out.replace("\r", "\n"))
    if m:
        RESULTS.append({"name": "redis-benchmark GET (-c64)", "median": float(m.group(1))})
        log("%-58s %10.0f req/s" % ("redis-benchmark GET (-c64)", float(m.group(1))))
    # nginx serving the same JSON as a static file
    payload = body_of(admin.port, url.split(str(admin.port), 1)[1])
    port = free_port()
    d = tempfile.mkdtemp(prefix="rock-bench-static-")
    with open(os.path.join(d, "status.json"), "wb") as f:
        f.write(payload)
    p, _ = nginx("server { listen 127.0.0.1:%d; location / { root %s; } }" % (port, d),
                 measured=True)
    try:
        measure("nginx static JSON (same %d bytes)" % len(payload),
                "http://127.0.0.1:%d/status.json" % port)
    finally:
        stop(p)
    admin.stop()
    # opensandbox.so with the in-process store: the reconciler vouches, the read is in place
    a1 = os_admin(sim, None)
    sid1 = a1.start_sandbox()
    measure("get_status, opensandbox.so + in-process store",
            "http://127.0.0.1:%d%s/get_status?sandbox_id=%s" % (a1.port, PREFIX, sid1),
            pid=a1.proc.pid)
    a1.stop()
    # the test operator with the in-process store
    a2 = Admin(config={"log": {"level": "warning"}})
    sid2 = a2.start_sandbox()
    measure("get_status, test operator + in-process store",
            "http://127.0.0.1:%d%s/get_status?sandbox_id=%s" % (a2.port, PREFIX, sid2),
            pid=a2.proc.pid)
    a2.stop()


def scenario_proxy(do_strace):
    log("== HTTP service proxy, 1 KiB responses ==")
    d = tempfile.mkdtemp(prefix="rock-bench-app-")
    with open(os.path.join(d, "1k"), "wb") as f:
        f.write(b"x" * 1024)
    app_port = free_port()
    app, _ = nginx("server { listen 127.0.0.1:%d; location / { root %s; } }" % (app_port, d))
    px_port = free_port()
    px, _ = nginx("""upstream app { server 127.0.0.1:%d; keepalive 64; }
server { listen 127.0.0.1:%d; location / { proxy_pass http://app; proxy_http_version 1.1;
  proxy_set_header Connection ""; } }""" % (app_port, px_port), measured=True)
    redis = Redis()
    sim = Sim(api_key=API_KEY, ready_delay_ms=0)
    admin = os_admin(sim, redis)
    a2 = Admin(config={"log": {"level": "warning"},
                       "testop": {"proxy_base": "http://127.0.0.1:{port}"}})
    try:
        measure("direct to the app (nginx, 1 KiB file)", "http://127.0.0.1:%d/1k" % app_port)
        nx = measure("nginx proxy_pass, upstream keepalive", "http://127.0.0.1:%d/1k" % px_port,
                     pid=nginx_workers(px))
        sid = admin.start_sandbox()
        url = "http://127.0.0.1:%d%s/sandboxes/%s/proxy/port/%d/1k" % (
            admin.port, PREFIX, sid, app_port)
        r = measure("rock-admin proxy, opensandbox.so + Redis", url, pid=admin.proc.pid,
                    redis=redis)
        log("    ratio to nginx proxy_pass: %.2f" % (r["median"] / nx["median"]))
        if do_strace:
            strace_count(admin.proc.pid, url)
        sid2 = a2.start_sandbox()
        url2 = "http://127.0.0.1:%d%s/sandboxes/%s/proxy/port/%d/1k" % (
            a2.port, PREFIX, sid2, app_port)
        r2 = measure("rock-admin proxy, test operator + in-process", url2, pid=a2.proc.pid)
        log("    ratio to nginx proxy_pass: %.2f" % (r2["median"] / nx["median"]))
    finally:
        stop(app)
        stop(px)


def wrk_post(url, body, headers, conns=1, seconds=None):
    """wrk with a POST body (Lua script); returns requests/s, the p50 and the p99 latency (ms)."""
    script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
    script.write('wrk.method = "POST"\nwrk.body = %s\n' % json.dumps(body))
    for k, v in headers.items():
        script.write('wrk.headers[%s] = %s\n' % (json.dumps(k), json.dumps(v)))
    script.close()
    cmd = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % (seconds or SECONDS), "--latency",
           "-s", script.name, url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    os.unlink(script.name)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def pct(p):
        m = re.search(r"\b%s%%\s+([\d.]+)(\w+)" % p, out)
        return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
    return rps, pct(50), pct(99)


def scenario_execute():
    log("== /execute round trip: rock-admin vs execd directly (one connection, wrk -t1 -c1) ==")
    redis, sim, admin, sid, osid = os_sandbox()
    execd, hdr = execd_url(sim, osid, "/command")
    hdr["Content-Type"] = "application/json"
    rows = []
    for name, url, body, h in (
            ("execd POST /command directly", execd,
             json.dumps({"command": "true", "background": False}), hdr),
            ("rock-admin /execute, opensandbox.so + Redis",
             "http://127.0.0.1:%d%s/execute" % (admin.port, PREFIX),
             json.dumps({"sandbox_id": sid, "command": "true"}),
             {"Content-Type": "application/json"})):
        runs = [wrk_post(url, body, h) for _ in range(RUNS)]
        p50 = statistics.median(r[1] for r in runs)
        p99 = statistics.median(r[2] for r in runs)
        rps = statistics.median(r[0] for r in runs)
        rows.append((p50, p99))
        RESULTS.append({"name": name, "p50_ms": p50, "p99_ms": p99, "median": rps})
        log("%-58s p50 %.3f ms, p99 %.3f ms, %.0f req/s on one connection (runs p50 %s)" % (
            name, p50, p99, rps, ", ".join("%.3f" % r[1] for r in runs)))
    log("    rock-admin adds %.3f ms p50, %.3f ms p99" % (rows[1][0] - rows[0][0],
                                                        rows[1][1] - rows[0][1]))


def scenario_download():
    log("== 1 GiB proxied download (curl, median of three) ==")
    d = tempfile.mkdtemp(prefix="rock-bench-big-")
    subprocess.run(["truncate", "-s", "1G", os.path.join(d, "big")], check=True)
    port = free_port()
    app, _ = nginx("server { listen 127.0.0.1:%d; location / { root %s; } }" % (port, d))
    pxp = free_port()
    px, _ = nginx("""upstream app { server 127.0.0.1:%d; keepalive 8; }
server { listen 127.0.0.1:%d; location / { proxy_pass http://app; proxy_http_version 1.1;
  proxy_set_header Connection ""; } }""" % (port, pxp))
    a = Admin(config={"log": {"level": "warning"},
                      "testop": {"proxy_base": "http://127.0.0.1:{port}"}})
    sid = a.start_sandbox()

    def speed(url):
        runs = []
        for _ in range(RUNS):
            out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", url],
                                 capture_output=True, text=True, timeout=300).stdout
            runs.append(float(out) / 1e6)
        return statistics.median(runs), runs
    try:
        for name, url in (("direct from the app (nginx)", "http://127.0.0.1:%d/big" % port),
                          ("nginx proxy_pass", "http://127.0.0.1:%d/big" % pxp),
                          ("rock-admin proxy (test operator)",
                           "http://127.0.0.1:%d%s/sandboxes/%s/proxy/port/%d/big" % (
                               a.port, PREFIX, sid, port))):
            med, runs = speed(url)
            RESULTS.append({"name": "1 GiB download, " + name, "mb_s": med})
            log("%-58s %6.0f MB/s (runs %s)" % ("1 GiB download, " + name, med,
                                                ", ".join("%.0f" % r for r in runs)))
    finally:
        stop(app)
        stop(px)
        shutil.rmtree(d, ignore_errors=True)


def scenario_upload():
    """1 GiB multipart upload: curl -> rock-admin /upload -> opensandbox.so -> execd, next to curl
    straight to the (simulated) execd and through an nginx hop (request buffering off)."""
    log("== 1 GiB upload (curl -F, median of five) ==")
    # in memory, so disk write-back does not decide the figure
    d = tempfile.mkdtemp(prefix="rock-bench-up-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    src = os.path.join(d, "big")
    with open(src, "wb") as f:  # incompressible, written once
        for _ in range(1024):
            f.write(os.urandom(1 << 20))
    redis, sim, admin, sid, osid = os_sandbox(sim_extra=["--max-upload-mb", "2048"])
    meta = os.path.join(d, "meta.json")
    with open(meta, "w") as f:
        json.dump({"path": os.path.join(d, "direct.bin"), "owner": None, "group": None,
                   "mode": 644}, f)
    execd, execd_hdr = execd_url(sim, osid, "/files/upload")
    execd_path = "/" + execd.split("/", 3)[3]  # the same path through the nginx hop
    hdr_args = [a for k, v in execd_hdr.items() for a in ("-H", "%s: %s" % (k, v))]
    pxp = free_port()
    px, _ = nginx("""server { listen 127.0.0.1:%d; client_max_body_size 0;
  location / { proxy_pass http://127.0.0.1:%d; proxy_request_buffering off;
  proxy_http_version 1.1; } }""" % (pxp, sim.port))
    direct_form = hdr_args + ["-F", "metadata=@%s;type=application/json;filename=metadata" % meta,
                              "-F", "file=@%s;type=application/octet-stream" % src]
    admin_form = ["-F", "sandbox_id=%s" % sid, "-F", "target_path=%s" % os.path.join(d, "a.bin"),
                  "-F", "file=@%s;type=application/octet-stream" % src]

    def speed(url, form):
        runs = []
        for _ in range(5):
            out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{speed_upload}",
                                  "-H", "Expect:"] + form + [url],
                                 capture_output=True, text=True, timeout=600).stdout.split()
            assert out and out[0] == "200", out
            runs.append(float(out[1]) / 1e6)
            for f in ("direct.bin", "a.bin"):  # the written copies
                if os.path.exists(os.path.join(d, f)):
                    os.unlink(os.path.join(d, f))
        return statistics.median(runs), runs
    try:
        for name, url, form in (
                ("straight to execd", execd, direct_form),
                ("through an nginx hop", "http://127.0.0.1:%d%s" % (pxp, execd_path), direct_form),
                ("through rock-admin /upload",
                 "http://127.0.0.1:%d%s/upload" % (admin.port, PREFIX), admin_form)):
            med, runs = speed(url, form)
            RESULTS.append({"name": "1 GiB upload, " + name, "mb_s": med})
            log("%-58s %6.0f MB/s (runs %s)" % ("1 GiB upload, " + name, med,
                                                ", ".join("%.0f" % r for r in runs)))
    finally:
        stop(px)
        shutil.rmtree(d, ignore_errors=True)


def vm(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def smaps_breakdown(pid, stack_kib):
    """Resident KiB by kind: thread stacks (anonymous mappings of the configured stack size), malloc heap
    (the main [heap] and the 64 MiB per-thread arenas), everything else."""
    kinds = {"stacks": 0, "heap": 0, "other": 0}
    cur = None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$", line)
            if m:
                size = (int(m.group(2), 16) - int(m.group(1), 16)) // 1024
                name = m.group(3).strip()
                if name == "[heap]":
                    cur = "heap"
                elif name == "" and abs(size - stack_kib) <= 8:
                    cur = "stacks"
                elif name == "" and size >= 1024:
                    cur = "heap"
                else:
                    cur = "other"
            elif line.startswith("Rss:") and cur:
                kinds[cur] += int(line.split()[1])
    return kinds


def metric(port, name):
    """One unlabelled value from rock-admin's /metrics."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else 0.0


def latency_sample(port, method, path, headers=None, count=200):
    """count sequential requests on one keep-alive connection: (p50 ms, p99 ms, statuses)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times, statuses = [], {}
    for _ in range(count):
        t0 = time.perf_counter()
        c.request(method, path, None, headers or {})
        r = c.getresponse()
        r.read()
        times.append((time.perf_counter() - t0) * 1000)
        statuses[r.status] = statuses.get(r.status, 0) + 1
    c.close()
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))], statuses


def scenario_inflight(n, reused=False):
    """n concurrent /execute (sleep) through opensandbox.so against the simulator: rock-admin's
    RSS and threads with all of them in flight, and the latency of GET / and get_status meanwhile.
    reused: each command goes on a connection that has served a GET / before."""
    import resource
    log("== %d in-flight /execute through opensandbox.so%s ==" % (
        n, ", each on a connection that served a request before" if reused else ""))
    # the bench holds n client sockets; rock-admin two descriptors per command, the simulator
    # one connection and three descriptors per running command (all inherit this limit)
    want = 5 * n + 4096
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    except (ValueError, OSError) as e:
        log("    cannot raise the descriptor limit to %d (%s): the run may fall short" % (want, e))
    redis, sim, admin, sid, osid = os_sandbox(
        sim_extra=["--max-connections", str(n + 200)],
        admin_extra={"server": dict({"max_connections": n + 200, "per_ip_connections": 0,
                                     "drain_timeout": 60}, **SERVER_EXTRA)})
    # warm up: one command, so lazily allocated state is not counted per request
    admin.api("POST", "/execute", {"sandbox_id": sid, "command": "true"})
    pid = admin.proc.pid
    idle, idle_threads = vm(pid, "VmRSS"), vm(pid, "Threads")
    base_p50, base_p99, _ = latency_sample(admin.port, "GET", "/")
    # long enough to open all n first (about 250 per second here)
    body = json.dumps({"sandbox_id": sid, "command": "sleep %d" % (30 + n // 250), "timeout": 600})
    conns = []
    t0 = time.time()
    for _ in range(n):
        c = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=400)
        if reused:
            c.request("GET", "/")
            c.getresponse().read()
        c.request("POST", PREFIX + "/execute", body, {"Content-Type": "application/json"})
        conns.append(c)
    # every command running upstream (the plugin's upstream gauge counts them)
    wait_until(lambda: metric(admin.port, "rock_admin_inflight_requests") >= n, 300, 1,
               "%d requests in flight" % n)
    log("    %d sent and in flight in %.1f s" % (n, time.time() - t0))
    time.sleep(5)
    rss, threads = vm(pid, "VmRSS"), vm(pid, "Threads")
    log("    resident KiB by kind: %s" % smaps_breakdown(pid, 256))
    root = latency_sample(admin.port, "GET", "/")
    status = latency_sample(admin.port, "GET", PREFIX + "/get_status?sandbox_id=" + sid)
    upstream = latency_sample(sim.port, "GET", "/v1/sandboxes/" + osid,
                              {"OPEN-SANDBOX-API-KEY": API_KEY})
    log("    meanwhile the simulator's own GET /v1/sandboxes/{id}: p50 %.2f ms p99 %.2f ms %s" % upstream)
    log("%d in-flight: RSS %d KiB (idle %d KiB): +%.1f KiB per request, %d threads (idle %d)" % (
        n, rss, idle, (rss - idle) / n, threads, idle_threads))
    log("    meanwhile GET / p50 %.2f ms p99 %.2f ms (idle: p50 %.2f p99 %.2f) %s; get_status p50 %.2f ms "
        "p99 %.2f ms %s" % (root[0], root[1], base_p50, base_p99, root[2], status[0], status[1],
                            status[2]))
    RESULTS.append({"name": "%d in-flight /execute, opensandbox.so%s" % (
                        n, ", reused connections" if reused else ""), "rss_kib": rss,
                    "idle_kib": idle, "per_req_kib": (rss - idle) / n, "threads": threads,
                    "root_p99_ms": root[1], "get_status_p99_ms": status[1]})
    ok = 0
    failures = {}
    for c in conns:
        try:
            r = c.getresponse()
            js = json.loads(r.read())
            if js.get("status") == "Success":
                ok += 1
            else:
                failures[js.get("error")] = failures.get(js.get("error"), 0) + 1
        except Exception as e:
            failures[repr(e)] = failures.get(repr(e), 0) + 1
        c.close()
    log("    %d of %d commands succeeded; failures: %s" % (ok, n, failures))


WS_RELAY_JS = r"""
const path = require('path');
const readline = require('readline');
const WebSocket = require(path.join(process.env.NODE_MODULES, 'ws'));
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
if (process.argv[2] === 'server') {
  const wss = new WebSocket.Server({port: 0, host: '127.0.0.1', backlog: 8192});
  wss.on('listening', () => out({port: wss.address().port}));
  wss.on('connection', (ws) => ws.on('message', (d, bin) => ws.send(d, {binary: bin})));
} else {
  // open N relays, at most WS_BATCH (256) handshakes at a time; then "echo" and "close" on stdin
  const url = process.argv[3], n = parseInt(process.argv[4], 10), b = parseInt(process.env.WS_BATCH || '256', 10);
  const socks = [];
  let started = 0, opened = 0, failed = 0;
  const errors = {};
  const next = () => {
    if (started >= n) return;
    const ws = new WebSocket(url, {handshakeTimeout: 300000});
    started++;
    socks.push(ws);
    let settled = false;
    const settle = (ok, e) => {
      if (settled) return; settled = true;
      if (ok) opened++; else { failed++; errors[e] = (errors[e] || 0) + 1; }
      if (opened + failed === n) out({opened, failed, errors}); else next();
    };
    ws.on('open', () => settle(true));
    ws.on('error', (e) => settle(false, String(e)));
  };
  for (let i = 0; i < b; i++) next();
  readline.createInterface({input: process.stdin}).on('line', (cmd) => {
    const live = socks.filter((ws) => ws.readyState === WebSocket.OPEN);
    if (cmd === 'echo') {
      let ok = 0, bad = 0, done = 0;
      const t0 = Date.now();
      live.forEach((ws, i) => {
        const m = 'relay ' + i + ' ' + 'x'.repeat(i % 1000);
        ws.once('message', (d) => { if (d.toString() === m) ok++; else bad++;
          if (++done === live.length) out({echoed: ok, mismatch: bad, ms: Date.now() - t0}); });
        ws.send(m);
      });
    } else if (cmd === 'close') {
      let closed = 0;
      live.forEach((ws) => { ws.on('close', () => { if (++closed === live.length) { out({closed}); process.exit(0); } });
        ws.close(1000); });
    }
  });
}
"""


def scenario_wsrelays(n):
    """n concurrent WebSocket relays through the proxy to a node `ws` echo app (test operator:
    sandbox port P is 127.0.0.1:P): RSS and threads of rock-admin with all of them open, before and
    after one echo on each."""
    import resource
    from harness import NODE_MODULES
    log("== %d concurrent WebSocket relays (test operator, node ws echo app) ==" % n)
    # rock-admin holds two descriptors per relay (client, upstream) and checks
    # 2 * server.max_connections + 1024 against its limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * (n + 256) + 1024 + 64
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        fit = (hard - 1024 - 64) // 2 - 256
        if fit < n:
            log("    the descriptor limit (%d, not raisable here) fits %d relays, not %d" % (hard, fit, n))
            n = fit
    d = tempfile.mkdtemp(prefix="rock-bench-ws-")
    js = os.path.join(d, "ws.js")
    with open(js, "w") as f:
        f.write(WS_RELAY_JS)
    env = dict(os.environ, NODE_MODULES=NODE_MODULES)
    srv = subprocess.Popen(["node", js, "server"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = json.loads(srv.stdout.readline())["port"]
        admin = Admin(config={"testop": {"proxy_base": "http://127.0.0.1:{port}"},
                              "server": dict({"host": "127.0.0.1", "port": 0,
                                              "drain_timeout": 30, "max_connections": n + 256,
                                              "per_ip_connections": n + 256}, **SERVER_EXTRA),
                              "log": {"level": "warning"}})
        sid = admin.start_sandbox()
        pid = admin.proc.pid
        idle = vm(pid, "VmRSS")
        url = "ws://127.0.0.1:%d%s/sandboxes/%s/proxy/port/%d/echo" % (admin.port, PREFIX, sid, port)
        t0 = time.time()
        cli = subprocess.Popen(["node", js, "client", url, str(n)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=env)
        res = json.loads(cli.stdout.readline())
        log("    opened %d, failed %d in %.1f s %s" % (res["opened"], res["failed"],
                                                     time.time() - t0, res["errors"] or ""))
        time.sleep(3)
        rss_open, thr_open = vm(pid, "VmRSS"), vm(pid, "Threads")
        log("    resident KiB by kind: %s" % smaps_breakdown(pid, 256))
        cli.stdin.write("echo\n")
        cli.stdin.flush()
        echo = json.loads(cli.stdout.readline())
        time.sleep(1)
        rss_echo, thr_echo = vm(pid, "VmRSS"), vm(pid, "Threads")
        log("    echoes: %s" % echo)
        log("%d relays open: RSS %d KiB (idle %d KiB, +%.1f KiB per relay), %d threads; after one echo "
            "each: RSS %d KiB, %d threads" % (res["opened"], rss_open, idle,
                                             (rss_open - idle) / max(res["opened"], 1), thr_open,
                                             rss_echo, thr_echo))
        RESULTS.append({"name": "%d WebSocket relays" % n, "opened": res["opened"],
                        "idle_kib": idle, "rss_open_kib": rss_open, "threads_open": thr_open,
                        "rss_after_echo_kib": rss_echo, "threads_after_echo": thr_echo,
                        "echoed": echo["echoed"], "echo_ms": echo["ms"]})
        cli.stdin.write("close\n")
        cli.stdin.flush()
        cli.wait(120)
    finally:
        srv.kill()
        shutil.rmtree(d, ignore_errors=True)


def scenario_startup(runs=7):
    """Start-up time (exec to the first 200 from /readyz, polled every 1 ms) and idle RSS, with
    opensandbox.so, the simulator and Redis; medians of `runs`."""
    from harness import deep_merge, tmpdir, yaml_dump, ADMIN_BIN, OS_PLUGIN_DIR
    log("== start-up and idle memory (opensandbox.so + Redis) ==")
    redis = Redis()
    sim = Sim(api_key=API_KEY, ready_delay_ms=0)
    times, rss = [], []
    for i in range(runs):
        port = free_port()
        cfg = {"server": {"host": "127.0.0.1", "port": port},
               "runtime": {"operator_type": "opensandbox", "plugin_dir": OS_PLUGIN_DIR},
               "redis": {"host": "127.0.0.1", "port": redis.port},
               "opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY},
               "log": {"level": "warning"}}
        path = os.path.join(tmpdir(), "startup-%d.yml" % i)
        with open(path, "w") as f:
            f.write(yaml_dump(cfg) + "\n")
        t0 = time.perf_counter()
        p = subprocess.Popen([ADMIN_BIN, "-c", path], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        ready = None
        while time.perf_counter() - t0 < 10:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    ready = time.perf_counter() - t0
                    c.close()
                    break
                c.close()
            except OSError:
                pass
            time.sleep(0.001)
        time.sleep(2)
        rss.append(vm(p.pid, "VmRSS"))
        times.append(ready * 1000 if ready else float("nan"))
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    log("start-up to ready: median %.1f ms (runs %s); idle RSS median %d KiB (runs %s)" % (
        statistics.median(times), ", ".join("%.1f" % t for t in times), statistics.median(rss),
        ", ".join(str(x) for x in rss)))
    RESULTS.append({"name": "start-up", "ready_ms": statistics.median(times),
                    "idle_rss_kib": statistics.median(rss)})


def main():
    global SECONDS, SHARED_SESSION
    args = sys.argv[1:]
    if "--shared-session" in args:
        SHARED_SESSION = True
        harness.NEW_SESSION = False
    do_strace = "--strace" in args
    if "--seconds" in args:
        SECONDS = int(args[args.index("--seconds") + 1])
    what = args[0] if args and not args[0].startswith("--") else "all"
    log("machine: %s, %d cores, load %s" % (
        subprocess.run(["sh", "-c", "lscpu | sed -n 's/Model name: *//p'"], capture_output=True,
                       text=True).stdout.strip(), os.cpu_count(), os.getloadavg()))
    log("commit: %s" % subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                      capture_output=True, text=True).stdout.strip())
    try:
        if what in ("all", "status"):
            scenario_status(do_strace)
        if what in ("all", "proxy"):
            scenario_proxy(do_strace)
        if what in ("all", "download"):
            scenario_download()
        if what in ("all", "execute"):
            scenario_execute()
        if what in ("all", "upload"):
            scenario_upload()
        if what in ("all", "inflight"):
            n = int(args[1]) if what == "inflight" and len(args) > 1 else 5000
            scenario_inflight(n, "--reused" in args)
        if what in ("all", "startup"):
            scenario_startup()
        if what == "wsrelays":
            scenario_wsrelays(int(args[1]) if len(args) > 1 else 10000)
    finally:
        cleanup()
    print(json.dumps(RESULTS, indent=1))


if __name__ == "__main__":
    main()
