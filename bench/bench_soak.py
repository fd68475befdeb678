# SPDX-License-Identifier: Apache-2.0
"""Memory under sustained load: a mixed soak of rock-admin with opensandbox.so, the OpenSandbox
simulator and the Redis store on this machine.

W client workers (default 16, Python threads, one keep-alive connection each) loop over a whole
sandbox life:

  start_async -> get_status until alive -> execute -> create_session / run_in_session /
  close_session -> upload (16 KiB multipart) -> read_file (the uploaded file) -> HTTP proxy
  GETs to an app in the sandbox (nginx serving 1 KiB; the simulator maps a sandbox port to
  127.0.0.1:port) -> stop (opensandbox.stop_mode: delete, so the simulator's 64-sandbox cap
  holds)

and a sampler reads rock-admin's /proc/PID/status (VmRSS, VmHWM, Threads), its open descriptors
and the size of /metrics every 10 s. After the warm-up (default 2 minutes) the RSS is the
baseline; the verdict compares the last sample with it (target: within 2 MiB) and gives the
growth per 1,000 operations (least-squares slope over the samples after the warm-up). At the
warm-up and at the end the resident memory is broken down by mapping (main heap, malloc arenas,
thread stacks, the rest) from /proc/PID/smaps, and rock-admin is stopped with SIGTERM: a clean
exit (0) is asserted, and with an ASan build (ROCK_ADMIN_BIN from _build/asan) LeakSanitizer's
report is the leak check.

Run from a configured build directory with ROCK_ADMIN_BIN, ROCK_OPENSANDBOX_PLUGIN_DIR and
OPENSANDBOX_SIM set (as bench_lifecycle.py; bench_cheap.py's nginx helper is reused):
  python3 ../../bench/bench_soak.py [--minutes 12] [--warmup-seconds 120] [--workers 16]
      [--interval 10] [--proxy-gets 4] [--env NAME=VALUE ...]
--env passes an environment variable to rock-admin (e.g. MALLOC_ARENA_MAX=2 to compare).
Not part of `make check`: numbers depend on the machine.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
sys.path.insert(0, HERE)
from harness import PREFIX, Admin, Redis, Sim, cleanup, free_port  # noqa: E402
from bench_cheap import nginx, stop  # noqa: E402

API_KEY = "bench-key"
START = json.dumps({"image": "python:3.11", "memory": "2g", "cpus": 1}).encode()
UPLOAD_BYTES = 16 << 10


def log(*a):
    print(*a, flush=True)


class Client:
    """One keep-alive connection to rock-admin; reconnects after an error."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def call(self, method, path, body=None, headers=None):
        """Returns (status, body bytes)."""
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, data
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def api(self, method, route, obj=None, query=""):
        body = json.dumps(obj).encode() if obj is not None else None
        h = {"Content-Type": "application/json"} if body is not None else {}
        st, data = self.call(method, PREFIX + route + query, body, h)
        try:
            return st, json.loads(data)
        except ValueError:
            return st, {"raw": data[:200].decode("utf-8", "replace")}


class Stats:
    """Operation and error counts shared by the workers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ops = {}
        self.errors = {}
        self.cycles = 0

    def op(self, name, ok, why=None):
        with self.lock:
            self.ops[name] = self.ops.get(name, 0) + 1
            if not ok:
                key = "%s: %s" % (name, re.sub(r"[0-9a-f]{32}", "<id>", str(why))[:160])
                self.errors[key] = self.errors.get(key, 0) + 1

    def total(self):
        with self.lock:
            return sum(self.ops.values())


def multipart(sid, target, data, boundary="soakBoundary7f3a"):
    pre = ("--%s\r\nContent-Disposition: form-data; name=\"sandbox_id\"\r\n\r\n%s\r\n"
           "--%s\r\nContent-Disposition: form-data; name=\"target_path\"\r\n\r\n%s\r\n"
           "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.txt\"\r\n"
           "Content-Type: application/octet-stream\r\n\r\n"
           % (boundary, sid, boundary, target, boundary)).encode()
    return pre + data + ("\r\n--%s--\r\n" % boundary).encode(), \
        {"Content-Type": "multipart/form-data; boundary=" + boundary}


def worker(idx, port, app_port, files_dir, deadline, stats, proxy_gets, stop_evt):
    """One client: whole sandbox lives in a loop until the deadline."""
    c = Client(port)
    n = 0
    while time.time() < deadline and not stop_evt.is_set():
        n += 1
        sid = None
        try:
            st, js = c.api("POST", "/start_async", json.loads(START))
            ok = js.get("status") == "Success"
            stats.op("start_async", ok, js.get("error") or st)
            if not ok:
                time.sleep(0.5)
                continue
            sid = js["result"]["sandbox_id"]
            t0 = time.time()
            while True:
                st, js = c.api("GET", "/get_status", query="?sandbox_id=" + sid)
                ok = js.get("status") == "Success"
                stats.op("get_status", ok, js.get("error") or st)
                if ok and js["result"].get("is_alive"):
                    break
                if time.time() - t0 > 30:
                    stats.op("alive", False, "not alive within 30 s")
                    raise TimeoutError
                time.sleep(0.1)
            st, js = c.api("POST", "/execute", {"sandbox_id": sid, "command": "echo soak %d" % n})
            stats.op("execute", js.get("status") == "Success" and
                     (js.get("result") or {}).get("stdout") == "soak %d\n" % n, js.get("error") or js)
            sess = "bash-soak-%d-%d" % (idx, n)
            st, js = c.api("POST", "/create_session", {"sandbox_id": sid, "session_type": "bash",
                                                       "session": sess, "startup_source": [],
                                                       "env_enable": False})
            stats.op("create_session", js.get("status") == "Success", js.get("error") or js)
            st, js = c.api("POST", "/run_in_session", {"action_type": "bash", "session": sess,
                                                       "command": "echo in-session",
                                                       "sandbox_id": sid, "check": "raise"})
            stats.op("run_in_session", js.get("status") == "Success", js.get("error") or js)
            st, js = c.api("POST", "/close_session", {"sandbox_id": sid, "session_type": "bash",
                                                      "session": sess})
            stats.op("close_session", js.get("status") == "Success", js.get("error") or js)
            target = os.path.join(files_dir, "w%d.txt" % idx)  # overwritten each round
            content = ("soak %d %d " % (idx, n)) * (UPLOAD_BYTES // 16)
            content = content[:UPLOAD_BYTES]
            body, h = multipart(sid, target, content.encode())
            st, data = c.call("POST", PREFIX + "/upload", body, h)
            try:
                js = json.loads(data)
            except ValueError:
                js = {"raw": data[:200]}
            stats.op("upload", js.get("status") == "Success", js.get("error") or st)
            st, js = c.api("POST", "/read_file", {"sandbox_id": sid, "path": target})
            stats.op("read_file", js.get("status") == "Success" and
                     (js.get("result") or {}).get("content") == content, js.get("error") or st)
            for _ in range(proxy_gets):
                st, data = c.call("GET", "%s/sandboxes/%s/proxy/port/%d/1k" % (PREFIX, sid, app_port))
                stats.op("proxy", st == 200 and len(data) == 1024, "HTTP %d %r" % (st, data[:120]))
        except TimeoutError:
            pass
        except Exception as e:  # noqa: BLE001 - counted, the soak goes on
            stats.op("client", False, repr(e))
        finally:
            if sid:
                try:
                    st, js = c.api("POST", "/stop", {"sandbox_id": sid})
                    stats.op("stop", js.get("status") == "Success", js.get("error") or st)
                except Exception as e:  # noqa: BLE001
                    stats.op("stop", False, repr(e))
            with stats.lock:
                stats.cycles += 1


def status_of(pid):
    vals = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "Threads", "RssAnon", "RssFile"):
                vals[k] = int(v.split()[0])
    vals["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    return vals


def smaps_kinds(pid):
    """Resident KiB by mapping: the main [heap] (brk), glibc's per-thread malloc arenas (anonymous
    read-write mappings starting on a 64 MiB boundary), thread stacks (anonymous read-write
    mappings right above a guard page), other anonymous mappings (large allocations malloc
    serves with mmap, library pools), file-backed mappings (code, libraries) and the rest."""
    maps = []
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \d+\s*(.*)$", line)
            if m:
                maps.append([int(m.group(1), 16), int(m.group(2), 16), m.group(3),
                             m.group(4).strip(), 0])
            elif line.startswith("Rss:") and maps:
                maps[-1][4] = int(line.split()[1])
    kinds = {"heap": 0, "arenas": 0, "stacks": 0, "anon": 0, "files": 0, "other": 0}
    for i, (start, end, perm, name, rss) in enumerate(maps):
        prev = maps[i - 1] if i else None
        if name == "[heap]":
            k = "heap"
        elif name.startswith("/"):
            k = "files"
        elif name and name != "":
            k = "stacks" if name.startswith("[stack") else "other"
        elif perm.startswith("rw") and start % (64 << 20) == 0:
            k = "arenas"
        elif perm.startswith("rw") and prev and prev[1] == start and prev[2].startswith("---") \
                and not prev[3]:
            k = "stacks"
        else:
            k = "anon"
        kinds[k] += rss
    return kinds


def metrics_size(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        data = conn.getresponse().read()
        conn.close()
        return len(data), data.count(b"\n")
    except OSError:
        return 0, 0


def slope_per_1000(points):
    """Least-squares slope of RSS KiB over operations, per 1,000 operations."""
    if len(points) < 3:
        return float("nan")
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if not sxx:
        return float("nan")
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=12)
    ap.add_argument("--warmup-seconds", type=float, default=None,
                    help="default 120, or a quarter of the run when it is shorter than 8 minutes")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--proxy-gets", type=int, default=4)
    ap.add_argument("--ready-delay-ms", type=int, default=100)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for rock-admin")
    ap.add_argument("--tolerance-mib", type=float, default=2.0)
    ap.add_argument("--log-level", default="warning", help="rock-admin's log.level")
    ap.add_argument("--keep-log", help="copy rock-admin's output to this file at the end")
    args = ap.parse_args()
    total_s = args.minutes * 60
    warm_s = args.warmup_seconds
    if warm_s is None:
        warm_s = 120 if total_s >= 480 else total_s / 4
    env = dict(kv.split("=", 1) for kv in args.env)

    log("machine: %s, %d cores, load %s" % (
        subprocess.run(["sh", "-c", "lscpu | sed -n 's/Model name: *//p'"], capture_output=True,
                       text=True).stdout.strip(), os.cpu_count(), os.getloadavg()))
    log("commit: %s; rock-admin %s; env %s" % (
        subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True, cwd=HERE).stdout.strip(),
        os.environ.get("ROCK_ADMIN_BIN", "rock-admin"), env or "-"))
    log("soak: %.1f min, warm-up %.0f s, %d workers, %d proxy GETs per cycle, samples every %.0f s"
        % (args.minutes, warm_s, args.workers, args.proxy_gets, args.interval))
    files_dir = tempfile.mkdtemp(prefix="rock-soak-files-")
    app_dir = tempfile.mkdtemp(prefix="rock-soak-app-")
    with open(os.path.join(app_dir, "1k"), "wb") as f:
        f.write(b"x" * 1024)
    app_port = free_port()
    app = None
    rc = None
    try:
        app, _ = nginx("server { listen 127.0.0.1:%d; location / { root %s; } }"
                       % (app_port, app_dir))
        redis = Redis()
        sim = Sim(api_key=API_KEY, ready_delay_ms=args.ready_delay_ms)
        admin = Admin(operator="opensandbox", redis=redis, env=env, config={
            "opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                            "use_server_proxy": False, "stop_mode": "delete"},
            "log": {"level": args.log_level}})
        pid = admin.proc.pid
        stats = Stats()
        stop_evt = threading.Event()
        t_start = time.time()
        deadline = t_start + total_s
        threads = [threading.Thread(target=worker, daemon=True,
                                    args=(i, admin.port, app_port, files_dir, deadline, stats,
                                          args.proxy_gets, stop_evt))
                   for i in range(args.workers)]
        for t in threads:
            t.start()
        samples = []
        log("%7s %9s %9s %9s %8s %5s %8s %9s %9s" % ("t (s)", "ops", "ops/s", "RSS KiB",
                                                     "HWM KiB", "thr", "fds", "metrics",
                                                     "redis keys"))
        warm = None
        breakdown = {}
        next_t = t_start
        last_ops, last_t = 0, t_start
        while True:
            next_t += args.interval
            now = time.time()
            if next_t > deadline:
                next_t = deadline
            time.sleep(max(0, next_t - now))
            now = time.time()
            ops = stats.total()
            st = status_of(pid)
            mb, ml = metrics_size(admin.port)
            keys = redis.cli("DBSIZE")
            row = {"t": now - t_start, "ops": ops, "rss": st["VmRSS"], "hwm": st["VmHWM"],
                   "threads": st["Threads"], "fds": st["fds"], "metrics_lines": ml,
                   "metrics_bytes": mb, "redis_keys": keys}
            samples.append(row)
            log("%7.0f %9d %9.0f %9d %8d %5d %8d %9d %9s" % (
                row["t"], ops, (ops - last_ops) / max(now - last_t, 1e-9), row["rss"],
                row["hwm"], row["threads"], row["fds"], ml, keys))
            last_ops, last_t = ops, now
            if warm is None and row["t"] >= warm_s - 1:
                warm = row
                breakdown["warm-up"] = smaps_kinds(pid)
                log("        ^ end of warm-up: resident KiB by mapping %s" % breakdown["warm-up"])
            if now >= deadline - 0.01:
                break
        stop_evt.set()
        for t in threads:
            t.join(90)
        end = samples[-1]
        breakdown["end"] = smaps_kinds(pid)
        log("        end: resident KiB by mapping %s" % breakdown["end"])
        # idle after the load: what stays
        time.sleep(3)
        idle = status_of(pid)
        log("        3 s after the load: RSS %d KiB, %d threads, %d fds"
            % (idle["VmRSS"], idle["Threads"], idle["fds"]))
        with stats.lock:
            ops = dict(stats.ops)
            errors = dict(stats.errors)
            cycles = stats.cycles
        total = sum(ops.values())
        elapsed = end["t"]
        log("operations: %d in %.0f s (%.0f/s), %d sandbox lives; %s" % (
            total, elapsed, total / max(elapsed, 1), cycles,
            ", ".join("%s %d" % kv for kv in sorted(ops.items()))))
        nerr = sum(errors.values())
        log("errors: %d%s" % (nerr, "".join("\n    %6d  %s" % (v, k) for k, v in
                                            sorted(errors.items(), key=lambda kv: -kv[1])[:12])))
        rc = admin.stop(timeout=60)
        out = admin.output()
        bad = [m for m in ("AddressSanitizer", "LeakSanitizer", "ThreadSanitizer", "runtime error:")
               if m in out]
        admin.check_exit = False  # checked here
        if args.keep_log:
            with open(args.keep_log, "w") as f:
                f.write(out)
        log("rock-admin exit: %s%s" % (rc, ", sanitizer report: %s" % bad if bad else
                                       " (no sanitizer report)"))
        if bad:
            log(out[-6000:])
        after = [s for s in samples if s["t"] >= warm["t"]]
        growth = end["rss"] - warm["rss"]
        ops_after = end["ops"] - warm["ops"]
        slope = slope_per_1000([(s["ops"], s["rss"]) for s in after])
        log("")
        log("| | after warm-up (%.0f s) | end (%.0f s) | change |" % (warm["t"], end["t"]))
        log("|---|---|---|---|")
        for k, name in (("rss", "RSS KiB"), ("hwm", "VmHWM KiB"), ("threads", "threads"),
                        ("fds", "fds"), ("metrics_lines", "/metrics lines"), ("ops", "operations")):
            log("| %s | %s | %s | %+d |" % (name, warm[k], end[k], end[k] - warm[k]))
        for k in breakdown["end"]:
            log("| resident %s KiB | %d | %d | %+d |" % (k, breakdown["warm-up"][k],
                                                       breakdown["end"][k],
                                                       breakdown["end"][k] - breakdown["warm-up"][k]))
        ok = abs(growth) <= args.tolerance_mib * 1024 and nerr == 0 and rc == 0 and not bad
        log("")
        log("verdict: %s: RSS %.1f -> %.1f MiB after warm-up (%+d KiB, target within %.0f MiB), "
            "%+.1f KiB per 1,000 operations (slope over %d samples; %d operations after warm-up), "
            "%d errors, exit %s" % ("PASS" if ok else "FAIL", warm["rss"] / 1024, end["rss"] / 1024,
                                    growth, args.tolerance_mib, slope, len(after), ops_after, nerr,
                                    rc))
        print(json.dumps({"samples": samples, "ops": ops, "errors": errors,
                          "breakdown": breakdown, "growth_kib": growth,
                          "kib_per_1000_ops": slope, "pass": ok}))
        sys.exit(0 if ok else 1)
    finally:
        stop(app)
        cleanup()


if __name__ == "__main__":
    main()
