# SPDX-License-Identifier: Apache-2.0
"""Several rock-admin processes sharing one redis-server: shared sandboxes,
shared session registry, Redis outage and recovery without a restart."""
import json
import time

from harness import Admin, Redis, run, test, wait_until


@test
def two_processes_see_each_others_sandboxes():
    redis = Redis()
    a = Admin(redis=redis)
    b = Admin(redis=redis)
    sid = a.start_sandbox(wait_alive=False)
    # B sees the record A wrote, and its status (the backend here is per-process
    # test memory, so B only reads the stored record via list/batch).
    lst = b.ok("GET", "/sandboxes")
    assert [i["sandbox_id"] for i in lst["items"]] == [sid], lst
    batch = b.ok("POST", "/sandboxes/batch", {"sandbox_ids": [sid]})
    assert batch["statuses"][0]["sandbox_id"] == sid
    # A duplicate id is refused across processes.
    st, js = b.api("POST", "/start_async", {"image": "python:3.11", "sandbox_id": sid})
    assert js["error"] == "Sandbox %s already exists" % sid, js
    # Session names are unique across processes (registry in Redis).
    a.wait_alive(sid)
    a.ok("POST", "/create_session", {"sandbox_id": sid, "session": "shared"})
    st, js = b.api("POST", "/create_session", {"sandbox_id": sid, "session": "shared"})
    assert js["error"] == "session 'shared' already exists", js
    # Deleting through A removes the mappings everyone sees.
    a.ok("POST", "/delete", {"sandbox_id": sid})
    assert redis.cli("EXISTS", "rock:sessions:" + sid) == "0"
    st = b.ok("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": "true"})
    assert st["state"] == "deleted"
    assert b.ok("GET", "/sandboxes")["total"] == 0


@test
def redis_outage_gives_clear_errors_and_recovers():
    redis = Redis()
    port = redis.port
    a = Admin(redis=redis, config={"redis": {"timeout_ms": 500, "connect_timeout_ms": 300}})
    sid = a.start_sandbox()
    st, _ = a.request("GET", "/readyz")
    assert st == 200
    redis.stop()
    t0 = time.time()
    st, js = a.api("GET", "/get_status", query={"sandbox_id": sid})
    assert time.time() - t0 < 3, "store errors must be fast"
    assert js["status"] == "Failed" and js["result"]["code"] == 5000, js
    assert "redis" in js["error"] and "store" in js["error"], js
    st, js = a.request("GET", "/readyz")
    assert st == 503 and js["reason"] == "store unreachable", (st, js)
    st, js = a.request("GET", "/livez")
    assert st == 200
    # Same port, fresh server: the admin recovers without a restart; the data
    # is gone (no persistence), so the sandbox is unknown now, not an error.
    Redis(port=port)

    def recovered():
        st, js = a.api("GET", "/get_status", query={"sandbox_id": sid})
        return js["error"] == "Sandbox %s not found" % sid
    wait_until(recovered, 15, 0.3, "recovery after the redis restart")
    st, _ = a.request("GET", "/readyz")
    assert st == 200
    sid2 = a.start_sandbox()
    assert sid2


@test
def idle_sweep_is_safe_with_two_processes():
    redis = Redis()
    cfg = {"runtime": {"sweep_interval": 1}}
    a = Admin(redis=redis, config=cfg)
    b = Admin(redis=redis, config=cfg)
    sid = a.start_sandbox(auto_clear_time_minutes=1)
    # Force the idle deadline into the past; both sweepers race for it. Poll the
    # store directly: get_status itself counts as activity and renews the deadline.
    redis.cli("ZADD", "rock:expire", "1", sid)
    wait_until(lambda: json.loads(redis.cli("GET", "rock:sandbox:" + sid))["state"] == "deleted",
               10, 0.2, "the idle sweep")
    hist = b.ok("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": "true"})
    deletes = [h for h in hist["state_history"] if h["to_state"] == "deleted"]
    assert len(deletes) == 1 and deletes[0]["event"] == "idle_timeout", hist["state_history"]


if __name__ == "__main__":
    run()
