# SPDX-License-Identifier: Apache-2.0
"""The create queue: start_async is accepted at once and the backend creates
are driven from the store with bounded concurrency.

  - a burst of 2,000 start_async over 64 keep-alive connections with
    runtime.create_concurrency 16: every request accepted, every sandbox
    alive, never more than 16 creates at once in the simulator, each created
    exactly once;
  - two admins on one Redis share the queue; SIGKILL one with creates queued
    and running, and the other completes every one of them, without creating
    any sandbox twice;
  - deleting or stopping a sandbox whose create is still queued never
    reaches the backend's create (a restart queues it again);
  - a full queue (runtime.create_queue_max) is the only refusal, with a
    message that names the capacity.

Real processes over real sockets: rock-admin, the OpenSandbox simulator
(its /_sim/stats counts the POST /sandboxes it answers at once) and
redis-server.
"""
import http.client
import json
import os
import signal
import threading
import time

from harness import PREFIX, Admin, Redis, Sim, run, test, wait_until

os.environ.pop("OPEN_SANDBOX_API_KEY", None)

API_KEY = "sim-key-q"
START = {"image": "python:3.11", "memory": "2g", "cpus": 1, "auto_clear_time_minutes": 30}


def sim_with(create_delay_ms, ready_delay_ms=300, max_sandboxes=64):
    return Sim(api_key=API_KEY, ready_delay_ms=ready_delay_ms,
               extra=["--create-delay-ms", str(create_delay_ms),
                      "--max-sandboxes", str(max_sandboxes), "--max-connections", "1024"])


def admin_on(sim, redis=None, **runtime):
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY},
           "server": {"per_ip_connections": 0},
           "runtime": runtime}
    return Admin(operator="opensandbox", config=cfg, redis=redis)


def sim_stats(sim):
    st, js = sim.request("GET", "/_sim/stats")
    assert st == 200, (st, js)
    return js


def sim_rock_ids(sim):
    """ROCK ids of every sandbox the simulator holds (one entry per backend sandbox)."""
    out, page = [], 1
    while True:
        st, js = sim.request("GET", "/v1/sandboxes?pageSize=200&page=%d" % page)
        assert st == 200, (st, js)
        out += [(i.get("metadata") or {}).get("rock_sandbox_id") for i in js["items"]]
        if len(js["items"]) < 200:
            return out
        page += 1


def metric(admin, name):
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    assert st == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("%s not in /metrics" % name)


class Client:
    """One keep-alive connection to an admin."""

    def __init__(self, admin):
        self.conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=60)

    def call(self, method, route, body=None):
        data = json.dumps(body).encode() if body is not None else None
        h = {"Content-Type": "application/json"} if data else {}
        self.conn.request(method, PREFIX + route, body=data, headers=h)
        resp = self.conn.getresponse()
        return resp.status, json.loads(resp.read())

    def close(self):
        self.conn.close()


def burst(admin, total, conns):
    """total start_async over conns concurrent keep-alive connections; the answers."""
    answers = []
    lock = threading.Lock()
    per = [total // conns + (1 if i < total % conns else 0) for i in range(conns)]

    def worker(n):
        c = Client(admin)
        mine = []
        try:
            for _ in range(n):
                mine.append(c.call("POST", "/start_async", START))
        finally:
            c.close()
        with lock:
            answers.extend(mine)
    threads = [threading.Thread(target=worker, args=(n,)) for n in per]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def wait_all_alive(admin, ids, timeout, conns=16):
    """Poll get_status over conns connections until every id is alive."""
    left = set(ids)
    deadline = time.time() + timeout
    while left and time.time() < deadline:
        chunk = sorted(left)
        lock = threading.Lock()
        alive = set()

        def worker(part):
            c = Client(admin)
            try:
                for sid in part:
                    st, js = c.call("GET", "/get_status?sandbox_id=" + sid)
                    if st == 200 and js["status"] == "Success" and js["result"]["is_alive"]:
                        with lock:
                            alive.add(sid)
            finally:
                c.close()
        parts = [chunk[i::conns] for i in range(conns)]
        threads = [threading.Thread(target=worker, args=(p,)) for p in parts if p]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        left -= alive
        if left:
            time.sleep(0.5)
    assert not left, "%d sandboxes never became alive, e.g. %s" % (len(left), sorted(left)[:3])


@test
def burst_of_2000_is_accepted_and_every_sandbox_comes_alive():
    sim = sim_with(create_delay_ms=20, max_sandboxes=3000)
    admin = admin_on(sim, create_concurrency=16)
    answers = burst(admin, 2000, 64)
    assert len(answers) == 2000
    refused = [a for a in answers if a[0] != 200 or a[1]["status"] != "Success"]
    assert not refused, refused[:3]
    ids = [a[1]["result"]["sandbox_id"] for a in answers]
    assert len(set(ids)) == 2000
    wait_all_alive(admin, ids, timeout=180)
    stats = sim_stats(sim)
    assert stats["creates_in_flight_max"] <= 16, stats
    assert stats["creates_in_flight_max"] >= 2, stats  # the queue did run creates in parallel
    assert stats["creates_total"] == 2000, stats  # each sandbox created exactly once
    assert metric(admin, "rock_admin_create_queue_depth") == 0
    assert metric(admin, "rock_admin_create_queue_claimed") == 0
    assert metric(admin, "rock_admin_create_wait_seconds_count") == 2000
    assert metric(admin, "rock_admin_create_queue_refused_total") == 0


@test
def two_admins_share_the_queue_and_one_finishes_what_a_killed_one_left():
    redis = Redis()
    sim = sim_with(create_delay_ms=400, ready_delay_ms=200, max_sandboxes=200)
    a = admin_on(sim, redis=redis, create_concurrency=4)
    b = admin_on(sim, redis=redis, create_concurrency=4)
    ids = [a.ok("POST", "/start_async", START)["sandbox_id"] for _ in range(40)]
    # A runs four creates at a time (400 ms each): most are still queued, four are running.
    wait_until(lambda: sim_stats(sim)["creates_total"] >= 6, 20, 0.05, "A to start creating")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    a.check_exit = False
    queued = int(redis.cli("ZCARD", "rock:createq"))
    claimed = int(redis.cli("ZCARD", "rock:createq:claimed"))
    assert queued > 0 and claimed > 0, (queued, claimed)
    # B takes A's queued creates (after they waited 2 s) and, once A's claims expire
    # (15 s lease), re-runs those too, adopting the ones that had reached the backend.
    wait_all_alive(b, ids, timeout=90)
    rock_ids = sim_rock_ids(sim)
    assert sorted(rock_ids) == sorted(ids), "every sandbox created exactly once"
    assert redis.cli("ZCARD", "rock:createq") == "0"
    assert redis.cli("ZCARD", "rock:createq:claimed") == "0"
    assert metric(b, "rock_admin_create_queue_takeovers_total") >= 1
    assert sim_stats(sim)["creates_in_flight_max"] <= 4


@test
def two_admins_record_each_sandbox_of_a_burst_running_exactly_once():
    # Both admins' state-report appliers and the elected reconciler record pending sandboxes
    # running in batches (one Redis update of many records, a record changed meanwhile done
    # again alone): every sandbox must end up running, recorded so once, with the index sets
    # moved along.
    redis = Redis()
    sim = sim_with(create_delay_ms=5, ready_delay_ms=800, max_sandboxes=1000)
    a = admin_on(sim, redis=redis, create_concurrency=16)
    b = admin_on(sim, redis=redis, create_concurrency=16)
    answers = []
    threads = [threading.Thread(target=lambda adm=adm: answers.extend(burst(adm, 300, 16)))
               for adm in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 600 and all(x[0] == 200 and x[1]["status"] == "Success"
                                       for x in answers), answers[:3]
    ids = [x[1]["result"]["sandbox_id"] for x in answers]
    wait_all_alive(a, ids, timeout=120)
    wait_until(lambda: redis.cli("SCARD", "rock:state:pending") == "0", 10, 0.1,
               "the pending index to empty")
    assert redis.cli("SCARD", "rock:state:running") == "600"
    started = (metric(a, "rock_admin_sandbox_start_seconds_count") +
               metric(b, "rock_admin_sandbox_start_seconds_count"))
    assert started == 600, started  # each pending -> running recorded exactly once
    for sid in ids[::60]:
        st = a.ok("GET", "/get_status", query={"sandbox_id": sid})
        to_running = [h for h in st["state_history"] if h.get("to_state") == "running"]
        assert st["state"] == "running" and len(to_running) == 1, st


@test
def deleting_a_queued_sandbox_never_reaches_the_backend_create():
    sim = sim_with(create_delay_ms=1500)
    admin = admin_on(sim, create_concurrency=1)
    first = admin.ok("POST", "/start_async", START)["sandbox_id"]
    second = admin.ok("POST", "/start_async", START)["sandbox_id"]
    third = admin.ok("POST", "/start_async", START)["sandbox_id"]
    # One create at a time, 1.5 s each: the third is still queued.
    admin.ok("POST", "/delete", {"sandbox_id": third})
    st = admin.ok("GET", "/get_status", query={"sandbox_id": third, "include_all_states": "true"})
    assert st["state"] == "deleted", st
    admin.wait_alive(first, 30)
    admin.wait_alive(second, 30)
    time.sleep(2)  # a create of the third would have started by now
    assert sim_stats(sim)["creates_total"] == 2
    assert third not in sim_rock_ids(sim)
    st = admin.ok("GET", "/get_status", query={"sandbox_id": third, "include_all_states": "true"})
    assert st["state"] == "deleted" and st["status"] == {}, st
    assert metric(admin, "rock_admin_create_wait_seconds_count") == 2


@test
def stopping_a_queued_sandbox_takes_it_out_and_restart_queues_it_again():
    sim = sim_with(create_delay_ms=1500)
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                           "stop_mode": "pause"},
           "runtime": {"create_concurrency": 1}}
    admin = Admin(operator="opensandbox", config=cfg)
    first = admin.ok("POST", "/start_async", START)["sandbox_id"]
    second = admin.ok("POST", "/start_async", START)["sandbox_id"]
    admin.ok("POST", "/stop", {"sandbox_id": second})  # still queued behind the first
    st = admin.ok("GET", "/get_status", query={"sandbox_id": second, "include_all_states": "true"})
    assert st["state"] == "stopped", st
    admin.wait_alive(first, 30)
    time.sleep(2)  # a create of the second would have started by now
    assert sim_stats(sim)["creates_total"] == 1
    assert second not in sim_rock_ids(sim)
    # Restart: the backend never had it, so its create is queued again and it comes alive.
    admin.ok("POST", "/restart", {"sandbox_id": second})
    admin.wait_alive(second, 30)
    assert sim_stats(sim)["creates_total"] == 2
    assert sorted(sim_rock_ids(sim)) == sorted([first, second])


@test
def a_full_queue_is_the_only_refusal_and_names_its_capacity():
    sim = sim_with(create_delay_ms=2000)
    admin = admin_on(sim, create_concurrency=1, create_queue_max=3)
    ids = [admin.ok("POST", "/start_async", START)["sandbox_id"] for _ in range(3)]
    st, js = admin.api("POST", "/start_async", START)
    assert st == 200 and js["status"] == "Failed", js
    assert js["result"]["code"] == 5000, js
    assert "runtime.create_queue_max" in js["error"] and "create queue is full" in js["error"], js
    assert metric(admin, "rock_admin_create_queue_refused_total") == 1
    # The refused one was never sent anywhere; the others complete and free the queue.
    for sid in ids:
        admin.wait_alive(sid, 30)
    assert sim_stats(sim)["creates_total"] == 3
    admin.ok("POST", "/start_async", START)


if __name__ == "__main__":
    run()
