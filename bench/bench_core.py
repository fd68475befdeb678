# SPDX-License-Identifier: Apache-2.0
"""Benchmarks of the core with the in-memory test operator (no upstream cost):

  latency   sequential /execute round trips on one keep-alive connection
  parallel  /execute throughput from N client threads
  inflight  memory and threads with N concurrent long-running requests

Run from a configured build directory:
  python3 ../../bench/bench_core.py latency|parallel|inflight [N]
with ROCK_ADMIN_BIN and ROCK_TEST_PLUGIN_DIR set (see bench/README.md).
Not part of `make check`: numbers depend on the machine.
"""
import http.client
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
from harness import Admin, cleanup  # noqa: E402


def vm(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def latency(n=5000):
    a = Admin(config={"log": {"level": "warning"}})
    sid = a.start_sandbox()
    conn = http.client.HTTPConnection("127.0.0.1", a.port)
    body = json.dumps({"sandbox_id": sid, "command": "echo hi"})
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("POST", "/apis/envs/sandbox/v1/execute", body,
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    print("execute round trip over %d requests: p50 %.3f ms, p99 %.3f ms, max %.3f ms" % (
        n, samples[len(samples) // 2], samples[int(len(samples) * 0.99)], samples[-1]))


def parallel(threads=16, per=1000):
    a = Admin(config={"log": {"level": "warning"}})
    sid = a.start_sandbox()
    body = json.dumps({"sandbox_id": sid, "command": "echo hi"})

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", a.port)
        for _ in range(per):
            conn.request("POST", "/apis/envs/sandbox/v1/execute", body,
                         {"Content-Type": "application/json"})
            conn.getresponse().read()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.time() - t0
    print("%d threads x %d executes: %.0f requests/s" % (threads, per, threads * per / dt))


def inflight(n=1000):
    a = Admin(config={"log": {"level": "warning"},
                      "server": {"max_connections": n + 100, "drain_timeout": 60}})
    sid = a.start_sandbox()
    pid = a.proc.pid
    idle_rss = vm(pid, "VmRSS")
    body = json.dumps({"sandbox_id": sid, "command": "wait 200"})  # 20 s each
    conns = []
    for _ in range(n):
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
        c.request("POST", "/apis/envs/sandbox/v1/execute", body,
                  {"Content-Type": "application/json"})
        conns.append(c)
    time.sleep(3)
    rss = vm(pid, "VmRSS")
    threads = vm(pid, "Threads")
    # other requests keep flowing meanwhile
    t0 = time.perf_counter()
    st, js = a.request("GET", "/")
    other = (time.perf_counter() - t0) * 1000
    print("%d in-flight long requests: RSS %d KiB (idle %d KiB, +%.1f KiB each), %d threads, "
          "a concurrent GET / took %.2f ms" % (n, rss, idle_rss, (rss - idle_rss) / n, threads,
                                                 other))
    for c in conns:
        r = c.getresponse()
        r.read()
        c.close()


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "latency"
    arg = [int(x) for x in sys.argv[2:]]
    try:
        {"latency": latency, "parallel": parallel, "inflight": inflight}[what](*arg)
    finally:
        cleanup()
