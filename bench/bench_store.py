# SPDX-License-Identifier: Apache-2.0
"""Store benchmark at scale: 100,000 sandbox records (and one session mapping
each) in Redis, then what a client sees through rock-admin:

  list        GET /sandboxes?page_size=100 (one page from the list index), the
              one-time indexing of records written without the index, and a
              filtered list (which still reads every active record)
  batch       POST /sandboxes/batch with 100 and with 2,000 ids
  get_status  GET /get_status of a live sandbox while 100,000 others exist
  metrics     GET /metrics (counts active sandboxes by state)
  sweep       1,000 of the records made expired; two admins sweep them: time
              until all are deleted, and each deleted exactly once
  wait        POST /start_async latency with redis.min_replicas_ack 0 vs 1
              (master + one replica on loopback)

Records are cloned from one real record (created through the API) and loaded
with redis-cli --pipe, so seeding takes seconds, not a 100,000-request run.

Run from a configured build directory:
  python3 ../../bench/bench_store.py [N]        (N records, default 100000)
with ROCK_ADMIN_BIN and ROCK_TEST_PLUGIN_DIR set (see docs/performance.md).
Not part of `make check`: numbers depend on the machine.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
from harness import Admin, Process, Redis, cleanup, free_port, wait_until  # noqa: E402


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def timed(fn, n):
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def seed(redis, template, n):
    """n clones of template as running sandboxes, each with one session."""
    far = int(time.time()) + 86400
    buf = []
    for i in range(n):
        sid = "bench%06d" % i
        rec = dict(template)
        rec["sandbox_id"] = sid
        buf.append(resp("SET", "rock:sandbox:" + sid, json.dumps(rec, separators=(",", ":"))))
        buf.append(resp("SADD", "rock:active", sid))
        buf.append(resp("ZADD", "rock:expire", far, sid))
        buf.append(resp("HSET", "rock:sessions:" + sid, "bash-1", "s:sess-%06d" % i))
    t0 = time.time()
    p = subprocess.run(["redis-cli", "-p", str(redis.port), "--pipe"], input=b"".join(buf),
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return time.time() - t0


def main(n):
    redis = Redis()
    cfg = {"log": {"level": "warning"}, "runtime": {"sweep_interval": 1},
           "redis": {"timeout_ms": 10000}}
    a = Admin(config=cfg, redis=redis)
    live = a.start_sandbox()
    template = json.loads(redis.cli("GET", "rock:sandbox:" + live))
    secs = seed(redis, template, n)
    mem = redis.cli("INFO", "memory")
    used = [l for l in mem.split("\n") if l.startswith("used_memory:")][0].split(":")[1]
    print("seeded %d records + sessions in %.1f s; redis used_memory %.1f MiB (%.0f B/record)"
          % (n, secs, int(used) / 1048576, int(used) / n))

    def lst(page=1):
        r = a.ok("GET", "/sandboxes", query={"page": page, "page_size": 100})
        assert r["total"] == n + 1 and len(r["items"]) == 100, r["total"]
    t0 = time.time()
    lst()
    print("first list: one-time index of %d records written without it: %.1f s"
          % (n + 1, time.time() - t0))
    print("list (page_size 100 of %d): p50 %.1f ms, p99 %.1f ms" % ((n + 1,) + timed(lst, 50)))
    last = (n + 1) // 100 - 1
    print("list, page %d of %d: p50 %.1f ms, p99 %.1f ms"
          % ((last, (n + 100) // 100) + timed(lambda: lst(last), 20)))

    def lst_filtered():
        r = a.ok("GET", "/sandboxes", query={"page": 1, "page_size": 100,
                                             "image": "python:3.11"})
        assert r["total"] == n + 1
    print("list with a filter (scans every active record): p50 %.0f ms, p99 %.0f ms"
          % timed(lst_filtered, 3))
    for k in (100, 2000):
        ids = ["bench%06d" % (i * (n // k)) for i in range(k)]

        def batch():
            r = a.ok("POST", "/sandboxes/batch", {"sandbox_ids": ids})
            assert len(r["statuses"]) == k
        print("batch of %d ids: p50 %.1f ms, p99 %.1f ms" % ((k,) + timed(batch, 20)))

    def status():
        a.ok("GET", "/get_status", query={"sandbox_id": live})
    print("get_status: p50 %.2f ms, p99 %.2f ms" % timed(status, 500))

    def metrics():
        st, body = a.request("GET", "/metrics", raw=True)[:2]
        assert st == 200
    print("metrics: p50 %.1f ms, p99 %.1f ms" % timed(metrics, 50))

    # sweep: two admins, 1,000 expired among n
    b = Admin(config=cfg, redis=redis)
    expired = ["bench%06d" % i for i in range(0, min(n, 1000))]
    pipe = b"".join(resp("ZADD", "rock:expire", 1, s) for s in expired)
    t0 = time.time()
    subprocess.run(["redis-cli", "-p", str(redis.port), "--pipe"], input=pipe,
                   capture_output=True, timeout=60, check=True)
    wait_until(lambda: redis.cli("ZCOUNT", "rock:expire", "-inf", "2") == "0", 600, 0.1,
               "the sweep")
    took = time.time() - t0
    once = 0
    for s in expired[:50]:
        rec = json.loads(redis.cli("GET", "rock:sandbox:" + s))
        dels = [h for h in rec.get("state_history", []) if h.get("to_state") == "deleted"]
        once += len(dels) == 1
    print("sweep: %d expired of %d deleted by 2 admins in %.1f s (%.1f ms each); "
          "%d/50 sampled have exactly one delete" % (len(expired), n, took,
                                                    took * 1000 / len(expired), once))
    ttl = redis.cli("TTL", "rock:sandbox:" + expired[0])
    print("deleted record TTL (redis.deleted_retention default): %s s" % ttl)
    a.stop()
    b.stop()
    wait_bench()


def wait_bench(k=300):
    """start_async latency without and with WAIT 1 (one replica on loopback)."""
    master = Redis()
    rport = free_port()
    Process(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--replicaof", "127.0.0.1", str(master.port)],
            name="replica")
    wait_until(lambda: "state=online" in master.cli("INFO", "replication"), 20, 0.1, "replica")
    for ack in (0, 1):
        a = Admin(config={"log": {"level": "warning"},
                          "redis": {"min_replicas_ack": ack, "wait_timeout_ms": 1000}},
                  redis=master)

        def start():
            a.ok("POST", "/start_async", {"image": "python:3.11"})
        print("start_async with min_replicas_ack %d: p50 %.2f ms, p99 %.2f ms"
              % ((ack,) + timed(start, k)))
        a.stop()


if __name__ == "__main__":
    try:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 100000)
    finally:
        cleanup()
