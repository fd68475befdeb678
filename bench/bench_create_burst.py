# SPDX-License-Identifier: Apache-2.0
"""An RL rollout start: N concurrent start_async (default 16,000) from C client connections
(default 512, keep-alive, Python asyncio) against the OpenSandbox simulator with
--ready-delay-ms 3000, then every sandbox polled with get_status until it is alive (each
first polled 3 s after its start_async: none can be alive earlier; then in rounds, at most two
a second, as fast as the client goes).

Reports, per scenario:
  accepted        start_async answered Success (the create queue never refuses below
                  runtime.create_queue_max)
  answers/s       start_async answers per second over the burst (first sent -> last answered)
  alive p50/p99   per sandbox: its start_async sent -> get_status first shows is_alive
                  (get_status reads the reconciler's store state, so add up to one
                  runtime.reconcile_interval_ms of resolution, and up to one poll round)
  polls           get_status calls made until every sandbox was seen alive
  wait p50        the admin's rock_admin_create_wait_seconds (enqueue -> backend call), from /metrics
  recorded p50/p99  the admins' rock_admin_sandbox_start_seconds (start_async accepted -> the
                  admin recorded the sandbox running), from /metrics: what the admin adds, without
                  this client's poll rounds (a round of 16,000 polls takes over a second on 2 cores;
                  the SDKs poll every 3 s); the upper bound of the bucket, 1 s wide from 2 to 8 s
  CPU             user + system seconds of each admin, the simulator, Redis (redis scenario) and
                  this client over the run (burst + polling), from /proc: where a 2-core machine's
                  time goes
  Redis commands  (redis scenario) Redis's calls per accepted sandbox over the run, in all and
                  by command with Redis's own microseconds per sandbox (INFO commandstats)

Scenarios: "memory" (one admin, in-process store) and "redis" (two admins on one Redis, the
client connections split between them). Run from a configured build directory with ROCK_ADMIN_BIN,
ROCK_OPENSANDBOX_PLUGIN_DIR and OPENSANDBOX_SIM set (as bench_lifecycle.py):
  python3 ../../bench/bench_create_burst.py [memory|redis|both] [N] [C]
BENCH_RUNTIME='{"create_concurrency": 128}' merges runtime.* settings into the admins' configuration.
Not part of `make check`: numbers depend on the machine.
"""
import asyncio
import json
import os
import re
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
from harness import PREFIX, Admin, Redis, Sim, cleanup  # noqa: E402

API_KEY = "bench-key"
READY_DELAY_MS = 3000  # the simulator's Pending -> Running delay (--ready-delay-ms)
CONTENT_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)")
MAYBE_ALIVE = re.compile(rb'"is_alive": ?true')  # then confirmed by parsing the answer
START = json.dumps({"image": "python:3.11", "memory": "2g", "cpus": 1,
                    "auto_clear_time_minutes": 60}).encode()


class Conn:
    """One keep-alive HTTP/1.1 connection (asyncio streams; Content-Length or chunked). Lean on
    purpose: the client shares the machine's two cores with the admin and the simulator, so it
    reads the head in one call and leaves the body as bytes (call_json parses it)."""

    def __init__(self, port):
        self.port = port
        self.r = self.w = None

    async def call(self, method, path, body=None):
        """(status, body bytes)."""
        if self.w is None:
            self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (method, path)
        if body is not None:
            head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        self.w.write(head.encode() + b"\r\n" + (body or b""))
        raw = (await self.r.readuntil(b"\r\n\r\n")).lower()
        status = int(raw[9:12])
        m = CONTENT_LENGTH.search(raw)
        if m:
            return status, await self.r.readexactly(int(m.group(1)))
        if b"transfer-encoding: chunked" not in raw:
            return status, b""
        data = b""
        while True:
            n = int((await self.r.readline()).strip(), 16)
            data += await self.r.readexactly(n + 2)
            if n == 0:
                return status, data

    async def call_json(self, method, path, body=None):
        """(status, parsed JSON body or None)."""
        status, payload = await self.call(method, path, body)
        return status, json.loads(payload) if payload.strip() else None

    def close(self):
        if self.w:
            self.w.close()


def is_alive(body):
    """A get_status answer that says the sandbox is alive."""
    js = json.loads(body)
    return js["status"] == "Success" and js["result"]["is_alive"] is True


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else float("nan")


async def burst(ports, n, conns):
    """n start_async over conns connections (round robin over ports); per-id send times."""
    sent = {}
    accepted, refused = [], []
    per = [n // conns + (1 if i < n % conns else 0) for i in range(conns)]
    cs = [Conn(ports[i % len(ports)]) for i in range(conns)]

    async def worker(c, k):
        for _ in range(k):
            t = time.monotonic()
            st, js = await c.call_json("POST", PREFIX + "/start_async", START)
            if st == 200 and js and js.get("status") == "Success":
                sid = js["result"]["sandbox_id"]
                sent[sid] = t
                accepted.append(sid)
            else:
                refused.append(js)
    t0 = time.monotonic()
    await asyncio.gather(*(worker(c, k) for c, k in zip(cs, per)))
    t1 = time.monotonic()
    return cs, sent, accepted, refused, t1 - t0


async def poll_alive(cs, sent, timeout, not_before=READY_DELAY_MS / 1000.0):
    """get_status every id until alive, in rounds (at most two a second); the first time each
    was seen alive. A sandbox is first polled not_before after its start_async was sent: none
    can be alive before the simulator's start delay has passed, so earlier polls could only
    answer "not alive" while taking CPU from the creates the run measures (on 2 cores a round
    of 16,000 polls costs the client and the admin about 2 CPU-seconds)."""
    alive = {}
    polls = 0
    left = sorted(sent, key=sent.get)  # stays sorted: rounds only drop ids
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        now = time.monotonic()
        due = [sid for sid in left if sent[sid] + not_before <= now]
        if not due:
            await asyncio.sleep(sent[left[0]] + not_before - now)
            continue
        queue = asyncio.Queue()
        for sid in due:
            queue.put_nowait(sid)

        async def worker(c):
            nonlocal polls
            while not queue.empty():
                sid = queue.get_nowait()
                polls += 1
                st, body = await c.call("GET", PREFIX + "/get_status?sandbox_id=" + sid)
                if st == 200 and MAYBE_ALIVE.search(body) and is_alive(body):
                    alive.setdefault(sid, time.monotonic())
        t = time.monotonic()
        await asyncio.gather(*(worker(c) for c in cs))
        left = [s for s in left if s not in alive]
        if left and time.monotonic() - t < 0.5:
            await asyncio.sleep(0.5 - (time.monotonic() - t))
    return alive, polls


def cpu_seconds(pid):
    """User + system CPU seconds a process used so far (/proc/<pid>/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def histogram(port, name):
    """The cumulative buckets [(le, count)] of histogram name in an admin's /metrics."""
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    buckets = []
    for line in body.splitlines():
        if line.startswith(name + "_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[1])))
    return buckets


def bucket_quantile(buckets, q):
    """The upper bound of the bucket that holds quantile q (0..1) of a cumulative histogram,
    and the count: "at most this many seconds"."""
    total = buckets[-1][1] if buckets else 0
    for le, cum in buckets:
        if total and cum >= q * total:
            return le, int(total)
    return float("nan"), int(total)


def summed(hists):
    """Several admins' cumulative histograms (same buckets) added up."""
    return [(b[0][0], sum(x[1] for x in b)) for b in zip(*hists)] if hists else []


def redis_calls(redis, n):
    """Redis's calls per sandbox over the run, by command (INFO commandstats), the most frequent
    first: what the admins ask of the store per create, polls included."""
    calls = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        m = re.match(r"cmdstat_(\w+(?:\|\w+)?):calls=(\d+),usec=(\d+)", line)
        if m and m.group(1) not in ("info", "config", "ping"):
            calls[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    total = sum(c for c, _ in calls.values())
    top = sorted(calls.items(), key=lambda kv: -kv[1][0])
    return "%.1f (%s)" % (total / n, ", ".join("%s %.2f %.0fus" % (k, c / n, u / n) for k, (c, u) in top))


def sim_root_parent():
    """Where the simulator keeps its sandboxes' directories: on tmpfs (/dev/shm) unless
    BENCH_SIM_ROOT names another place. The simulator makes one directory per create, and on this
    machine's ext4 /tmp a mkdir took about 330 us (its inode allocator skips the many recently
    deleted inodes earlier runs left) against 5 us on tmpfs: 16,000 creates cost the simulator
    about 5 CPU seconds of the run's two cores, a cost of the stand-in's disk, not of a create."""
    want = os.environ.get("BENCH_SIM_ROOT", "/dev/shm")
    return want if os.path.isdir(want) and os.access(want, os.W_OK) else None


def scenario(name, n, conns):
    sim = Sim(api_key=API_KEY, ready_delay_ms=READY_DELAY_MS, root_parent=sim_root_parent(),
              extra=["--max-sandboxes", str(n + 100), "--max-connections", "4096"])
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY},
           "server": {"per_ip_connections": 0, "max_connections": 4096},
           "log": {"level": "warning"}}
    if os.environ.get("BENCH_RUNTIME"):
        cfg["runtime"] = json.loads(os.environ["BENCH_RUNTIME"])
    admins = []
    redis = None
    try:
        if name == "redis":
            redis = Redis()
            admins = [Admin(operator="opensandbox", redis=redis, config=cfg) for _ in range(2)]
        else:
            admins = [Admin(operator="opensandbox", config=cfg)]
        ports = [a.port for a in admins]

        async def run():
            cs, sent, accepted, refused, secs = await burst(ports, n, conns)
            alive, polls = await poll_alive(cs, sent, timeout=600)
            for c in cs:
                c.close()
            return sent, accepted, refused, secs, alive, polls
        procs = [a.proc.pid for a in admins] + [sim.proc.pid]
        if redis:
            procs.append(redis.proc.pid)
        cpu0 = [cpu_seconds(p) for p in procs] + [sum(os.times()[:2])]
        wall0 = time.monotonic()
        sent, accepted, refused, secs, alive, polls = asyncio.run(run())
        wall = time.monotonic() - wall0
        cpu = [cpu_seconds(p) - c for p, c in zip(procs, cpu0)] + [sum(os.times()[:2]) - cpu0[-1]]
        lat = [alive[s] - sent[s] for s in alive]
        waits = [bucket_quantile(histogram(p, "rock_admin_create_wait_seconds"), 0.5) for p in ports]
        starts = summed([histogram(p, "rock_admin_sandbox_start_seconds") for p in ports])
        s50, s99 = bucket_quantile(starts, 0.5), bucket_quantile(starts, 0.99)
        print("%-7s n=%d conns=%d admins=%d: accepted %d/%d (%.1f%%), %.0f start_async answers/s, "
              "alive %d, alive p50 %.2f s p99 %.2f s max %.2f s, create wait p50 <= %s s (%s)"
              % (name, n, conns, len(admins), len(accepted), n, 100.0 * len(accepted) / n,
                 n / secs, len(alive), pct(lat, 50), pct(lat, 99), max(lat) if lat else 0,
                 "/".join("%g" % w[0] for w in waits), "+".join(str(w[1]) for w in waits)))
        print("  recorded running by the admin%s (rock_admin_sandbox_start_seconds, %d): p50 <= %g s, "
              "p99 <= %g s" % ("s" if len(admins) > 1 else "", s50[1], s50[0], s99[0]))
        na = len(admins)
        print("  CPU over the %.1f s run: admin %s s, simulator %.1f s,%s client %.1f s; %d polls; "
              "simulator root in %s"
              % (wall, " + ".join("%.1f" % c for c in cpu[:na]), cpu[na],
                 " redis %.1f s," % cpu[na + 1] if redis else "", cpu[-1], polls,
                 os.path.dirname(sim.root)))
        if redis:
            print("  Redis commands per sandbox: %s" % redis_calls(redis, len(accepted) or n))
        if refused:
            print("  first refusal: %s" % refused[0])
        return statistics.median(lat) if lat else None
    finally:
        for a in admins:
            a.check_exit = False
        cleanup()


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 16000
    conns = int(sys.argv[3]) if len(sys.argv) > 3 else 512
    for name in (["memory", "redis"] if which == "both" else [which]):
        scenario(name, n, conns)


if __name__ == "__main__":
    main()
