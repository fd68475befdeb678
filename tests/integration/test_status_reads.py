# SPDX-License-Identifier: Apache-2.0
"""Status reads on the event loops (docs/architecture.md "Concurrency model"): with the
reconciler keeping the store current, get_status and is_alive are answered on the loop from
the in-process store or from the loop's own Redis connection, so they keep answering while
every worker is held by blocking plugin calls; a dropped or frozen Redis connection costs
no wrong answer (the read is done again on a worker, or fails with the store's clear error)
and the loops reconnect by themselves."""
import datetime
import json
import os
import signal
import threading
import time

from harness import Admin, Redis, Sim, run, sim_only, test, wait_until

API_KEY = "sim-key-status"


def metric(admin, name):
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    assert st == 200, st
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def status_calls(admin):
    """Backend status calls the admin made so far (rock_admin_upstream_calls_total)."""
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    assert st == 200, st
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith("rock_admin_upstream_calls_total{") and 'op="status"' in line)


def os_admin(sim, redis=None, server=None, extra=None):
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                           "use_server_proxy": False},
           # a pass every 3 s keeps the store vouched for 9 s (3 intervals)
           "runtime": {"reconcile_interval_ms": 3000}}
    if server:
        cfg["server"] = server
    if extra:
        cfg.update(extra)
    return Admin(operator="opensandbox", config=cfg, redis=redis)


def status(admin, sid):
    return admin.api("GET", "/get_status", query={"sandbox_id": sid})


def assert_alive(admin, sid):
    st, js = status(admin, sid)
    assert st == 200 and js["status"] == "Success", (st, js)
    assert js["result"]["sandbox_id"] == sid and js["result"]["is_alive"] is True, js
    st, js = admin.api("GET", "/is_alive", query={"sandbox_id": sid})
    assert st == 200 and js["result"]["is_alive"] is True, (st, js)


def answered_while_workers_are_busy(redis, password=None):
    sim = Sim(api_key=API_KEY)
    a = os_admin(sim, redis, server={"workers": 1, "worker_queue": 1},
                 extra={"redis": {"password": password}} if password else None)
    sid = a.start_sandbox()
    a.ok("POST", "/write_file", {"sandbox_id": sid, "path": "/tmp/f.txt", "content": "x"})
    assert_alive(a, sid)
    # Freeze the backend: a read_file (a blocking plugin call) holds the only worker, a
    # second one waits in the queue.
    os.kill(sim.proc.pid, signal.SIGSTOP)
    results = []

    def read():
        results.append(a.api("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/f.txt"}))
    threads = [threading.Thread(target=read, daemon=True) for _ in range(2)]
    try:
        threads[0].start()
        wait_until(lambda: metric(a, "rock_admin_workers_busy") == 1, 5, 0.05, "worker busy")
        threads[1].start()
        wait_until(lambda: metric(a, "rock_admin_worker_queue_depth") == 1, 5, 0.05,
                   "one queued")
        # a route that needs a worker is refused now ...
        st, js = a.api("POST", "/write_file",
                       {"sandbox_id": sid, "path": "/tmp/g.txt", "content": "y"})
        assert st == 503 and js["result"]["code"] == 5000 and "busy" in js["error"], (st, js)
        # ... while status reads are answered from the store on the event loop, at once
        t0 = time.time()
        for _ in range(20):
            assert_alive(a, sid)
        assert time.time() - t0 < 3, "status reads waited for a worker"
        st, js = status(a, "no-such-sandbox")
        assert js["status"] == "Failed" and js["error"] == "Sandbox no-such-sandbox not found", js
    finally:
        os.kill(sim.proc.pid, signal.SIGCONT)
    for t in threads:
        t.join(60)
    assert len(results) == 2 and all(js["status"] == "Success" for _, js in results), results


@test
def status_reads_from_redis_answer_while_every_worker_is_busy():
    # with a password: the loops' own connections authenticate as the pool's do
    answered_while_workers_are_busy(Redis(password="s3cret-status"), "s3cret-status")


@test
def status_reads_show_every_change_of_the_record_and_its_deadline():
    """The loops' readers remember the records they parsed and answer a poll whose record and
    deadline came back unchanged from what they parsed before. Any change shows at once: the
    record changed behind the admin's back, then its idle deadline, each read by several
    connections (the loops each have a reader of their own)."""
    redis = Redis()
    sim = Sim(api_key=API_KEY)
    admin = os_admin(sim, redis, server={"event_threads": 2})
    sid = admin.start_sandbox()

    def reads(n=8):
        """n status reads, each on a connection of its own (so both loops serve some)."""
        out = []
        for _ in range(n):
            st, js = status(admin, sid)
            assert st == 200 and js["status"] == "Success", (st, js)
            out.append(js["result"])
        return out

    first = reads()
    assert all(r["image"] == first[0]["image"] and r["is_alive"] for r in first), first
    # the record changes in Redis (an admin elsewhere, say): every later read shows it
    raw = json.loads(redis.cli("GET", "rock:sandbox:" + sid))
    raw["image"] = "changed/image:2"
    raw.setdefault("metadata", {})["changed"] = "yes"
    assert redis.cli("SET", "rock:sandbox:" + sid, json.dumps(raw)) == "OK"
    for r in reads():
        assert r["image"] == "changed/image:2" and r["metadata"].get("changed") == "yes", r
    # so does its idle deadline (auto_stop_time), moved far ahead
    later = int(time.time()) + 10 * 24 * 3600
    assert redis.cli("ZADD", "rock:expire", "XX", str(later), sid) == "0"
    for r in reads():
        got = datetime.datetime.fromisoformat(r["auto_stop_time"]).timestamp()
        assert got == later, (r["auto_stop_time"], later)
    # and a change back to the first bytes
    raw["image"] = first[0]["image"]
    del raw["metadata"]["changed"]
    assert redis.cli("SET", "rock:sandbox:" + sid, json.dumps(raw)) == "OK"
    for r in reads():
        assert r["image"] == first[0]["image"] and "changed" not in r["metadata"], r


@test
def inprocess_status_reads_show_every_change_of_the_record_and_its_deadline():
    """The loops remember the status they rendered from each version of an in-process record
    (the store gives a record a new version whenever it or its idle deadline changes): the
    deadline a read's own idle touch moves and a state change show at once on every loop.
    (Without renewal configured, so the reads with the idle touch are answered in place.)"""
    sim = Sim(api_key=API_KEY)
    admin = Admin(operator="opensandbox", config={
        "opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                        "use_server_proxy": False, "stop_mode": "pause"},
        "runtime": {"reconcile_interval_ms": 3000}, "server": {"event_threads": 2}})
    sid = admin.start_sandbox(auto_clear_time=5)

    def reads(n=8, include_all=False):
        """n status reads, each on a connection of its own (so both loops serve some)."""
        out = []
        for _ in range(n):
            st, js = admin.api("GET", "/get_status",
                               query={"sandbox_id": sid,
                                      "include_all_states": "true" if include_all else "false"})
            assert st == 200 and js["status"] == "Success", (st, js)
            out.append(js["result"])
        return out

    def deadline(r):
        return datetime.datetime.fromisoformat(r["auto_stop_time"]).timestamp()

    first = reads()
    assert all(r["is_alive"] and r["auto_stop_time"] for r in first), first
    # Reads three seconds later touch the sandbox again (at most once a second): each shows the
    # deadline moved by at least two seconds.
    time.sleep(3)
    later = reads()
    assert min(deadline(r) for r in later) >= max(deadline(r) for r in first) + 2, \
        ([r["auto_stop_time"] for r in first], [r["auto_stop_time"] for r in later])
    assert all(r["state"] == "running" for r in reads(include_all=True))
    # a state change shows on every loop
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    for r in reads(include_all=True):
        assert r["state"] == "stopped" and r["is_alive"] is False, r


@test
def status_reads_from_the_inprocess_store_answer_while_every_worker_is_busy():
    answered_while_workers_are_busy(None)


@test
def status_reads_survive_dropped_and_frozen_redis_connections():
    redis = Redis()
    sim = Sim(api_key=API_KEY)
    a = os_admin(sim, redis, extra={"redis": {"timeout_ms": 400, "connect_timeout_ms": 300}})
    sid = a.start_sandbox()
    assert_alive(a, sid)
    # every client connection dropped by the server: no status read fails for it
    for _ in range(3):
        out = redis.cli("CLIENT", "KILL", "TYPE", "normal")
        assert out.strip().isdigit(), out
        for _ in range(30):
            assert_alive(a, sid)
    # a frozen Redis: the read gives up within its deadlines (the loop's, then the worker's)
    # with the store's error, and the admin keeps answering everything else
    os.kill(redis.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.time()
        st, js = status(a, sid)
        took = time.time() - t0
        assert js["status"] == "Failed" and js["result"]["code"] == 5000, js
        assert "sandbox store unavailable" in js["error"], js
        assert took < 3, "the read outlived its deadlines: %.1f s" % took
        st, js = a.request("GET", "/livez")
        assert st == 200, st
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
    # and once Redis answers again the loops read from it again
    wait_until(lambda: status(a, sid)[1].get("status") == "Success", 15, 0.2,
               "status reads after Redis came back")
    for _ in range(30):
        assert_alive(a, sid)


@test
def a_long_reconciler_pass_keeps_vouching():
    """A reconciler pass that takes longer than the staleness bound (3 intervals, here 3 s)
    but makes progress keeps the store vouched for: status reads stay store reads (no backend
    call each, which would load a busy backend more) and the other admin does not take the
    lease and start a second pass beside it. Once the backend stops answering, reads fall back
    to it again after the bound and report its failure."""
    sim_only("it slows the lifecycle server down with the simulator's fault switch")
    redis = Redis()
    sim = Sim(api_key=API_KEY, extra=["--max-sandboxes", "600"], ready_delay_ms=0)
    cfg = {"runtime": {"reconcile_interval_ms": 1000}}
    a = os_admin(sim, redis, extra=cfg)
    b = os_admin(sim, redis, extra=cfg)
    # 450 sandboxes: a pass lists three pages of 200
    sids = []
    for _ in range(450):
        r = a.ok("POST", "/start_async", {"image": "python:3.11", "memory": "1g", "cpus": 0.5})
        sids.append(r["sandbox_id"])
    wait_until(lambda: all(status(a, s)[1]["result"]["is_alive"] for s in sids[-5:]), 60, 0.5,
               "the last sandboxes alive")
    a.wait_alive(sids[0], timeout=30)
    leaders = [x for x in (a, b) if "this admin is now the reconciler" in x.output()]
    assert len(leaders) == 1, [x.output()[-2000:] for x in (a, b)]
    # every lifecycle request now takes 1.4 s: a pass (three pages) takes over 4 s
    st, _ = sim.request("POST", "/_sim/faults", {"lifecycle_latency_ms": 1400})
    assert st == 200, st
    try:
        calls0 = status_calls(a) + status_calls(b)
        t_end = time.time() + 12
        slowest = 0.0
        while time.time() < t_end:
            for x in (a, b):
                t0 = time.time()
                assert_alive(x, sids[0])
                slowest = max(slowest, time.time() - t0)
            time.sleep(0.2)
        calls = status_calls(a) + status_calls(b) - calls0
        # two reads per round from each admin, about 100 in all: none asked the backend
        assert calls == 0, "status reads asked the backend %d times" % calls
        assert slowest < 1.0, "a status read waited for the backend: %.2f s" % slowest
        for x in (a, b):
            if x is not leaders[0]:
                assert "this admin is now the reconciler" not in x.output(), x.output()[-2000:]
        assert "reconciler: list failed" not in leaders[0].output()
        # the backend stops answering: the beats stop with the progress, reads fall back
        st, _ = sim.request("POST", "/_sim/faults", {"lifecycle_status": 503})
        assert st == 200, st

        def failing():
            js = status(a, sids[0])[1]
            return js if js["status"] == "Failed" else None
        js = wait_until(failing, 30, 0.3, "status reads reporting the backend's failure")
        assert js["result"]["code"] == 5000 and "503" in js["error"], js
    finally:
        sim.request("DELETE", "/_sim/faults")


def redis_calls(redis, command):
    """Calls of one Redis command so far (INFO commandstats)."""
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_%s:" % command):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


@test
def a_pass_at_rest_reads_few_records():
    """At rest the reconciler does not read every record each pass: those it found settled
    (running, nothing to change) it remembers and reads again only every 8th pass, so 200
    running sandboxes cost Redis far fewer than 200 record reads a pass. A sandbox that
    vanishes upstream is still noticed by the next pass (the listing disagrees with what is
    remembered), and a status read then reports it gone."""
    sim_only("200 sandboxes at once and the simulator's vanish switch")
    redis = Redis()
    sim = Sim(api_key=API_KEY, extra=["--max-sandboxes", "256"], ready_delay_ms=0)
    a = os_admin(sim, redis, extra={"runtime": {"reconcile_interval_ms": 500}})
    sids = [a.ok("POST", "/start_async", {"image": "python:3.11", "memory": "1g",
                                          "cpus": 0.5})["sandbox_id"] for _ in range(200)]
    wait_until(lambda: all(status(a, s)[1]["result"]["is_alive"] for s in sids), 60, 0.5,
               "every sandbox alive")
    time.sleep(2)  # passes after the last change
    p0, gets0 = metric(a, "rock_admin_reconciler_passes_total"), redis_calls(redis, "get")
    read0 = metric(a, "rock_admin_reconciler_records_read_total")
    time.sleep(6)
    p1, gets1 = metric(a, "rock_admin_reconciler_passes_total"), redis_calls(redis, "get")
    read1 = metric(a, "rock_admin_reconciler_records_read_total")
    passes = p1 - p0
    assert passes >= 5, (p0, p1)
    # Redis sees it: one GET per record read (a MULTI of GET + ZSCORE each)
    per_pass = (gets1 - gets0) / passes
    assert per_pass < 200 / 3, "%.1f record reads per pass of 200" % per_pass
    assert (read1 - read0) / passes < 200 / 3, (read0, read1, passes)
    assert metric(a, "rock_admin_reconciler_settled_remembered") >= 150

    victim = sids[7]
    osid = status(a, victim)[1]["result"]["host_name"]
    st, _ = sim.request("POST", "/_sim/sandboxes/%s/vanish" % osid)
    assert st == 204, st

    def gone():
        js = a.api("GET", "/get_status", query={"sandbox_id": victim,
                                                "include_all_states": "True"})[1]
        return js["result"] if js["result"]["state"] != "running" else None
    r = wait_until(gone, 10, 0.2, "the vanished sandbox reconciled")
    assert r["state"] == "deleted" and r["is_alive"] is False, r
    assert_alive(a, sids[8])


if __name__ == "__main__":
    run()
