# SPDX-License-Identifier: Apache-2.0
"""Every ROCK Admin route end to end over a real socket, with the in-memory
test operator (testop: every capability; testop_min: only the mandatory ones)
and a real redis-server. Covers the envelope, the §2.4 failure shapes and the
fail-closed dispatch order for every sandbox route."""
import json

from harness import Admin, Redis, PREFIX, run, test, wait_until

# route -> (method, path, body builder(sandbox_id), failure message, shape key)
SANDBOX_ROUTES = [
    ("execute", "POST", "/execute", lambda i: {"sandbox_id": i, "command": "echo hi"},
     "execute command failed", "execute"),
    ("create_session", "POST", "/create_session", lambda i: {"sandbox_id": i, "session": "s1"},
     "create session failed", "create_session"),
    ("run_in_session", "POST", "/run_in_session",
     lambda i: {"sandbox_id": i, "session": "s1", "command": "echo hi"},
     "run in session failed", "run_session"),
    ("close_session", "POST", "/close_session", lambda i: {"sandbox_id": i, "session": "s1"},
     "close session failed", "close_session"),
    ("read_file", "POST", "/read_file", lambda i: {"sandbox_id": i, "path": "/tmp/a"},
     "read file failed", "read_file"),
    ("write_file", "POST", "/write_file",
     lambda i: {"sandbox_id": i, "path": "/tmp/a", "content": "x"},
     "write file failed", "write_file"),
    ("stop", "POST", "/stop", lambda i: {"sandbox_id": i}, "stop sandbox failed", "sandbox"),
    ("restart", "POST", "/restart", lambda i: {"sandbox_id": i}, "restart sandbox failed",
     "start"),
    ("archive", "POST", "/sandboxes/{id}/archive", lambda i: {}, "archive sandbox failed",
     "sandbox"),
    ("commit", "POST", "/commit", lambda i: {"sandbox_id": i, "image_tag": "img:1"},
     "commit sandbox failed", "sandbox"),
    ("get_sandbox_statistics", "GET", "/get_sandbox_statistics", None,
     "get sandbox statistics failed", "sandbox"),
]

SHAPES = {
    "execute": {"stdout": "", "stderr": "", "exit_code": None},
    "create_session": {"output": "", "session_type": "bash"},
    "run_session": {"session_type": "bash", "output": "", "exit_code": None,
                    "expect_string": ""},
    "close_session": {"session_type": "bash"},
    "read_file": {"content": ""},
    "write_file": {"success": False, "message": ""},
    "sandbox": {"exit_code": None},
    "start": {"sandbox_id": None, "host_name": None, "host_ip": None},
}


def call_route(admin, method, path, body_fn, sid):
    p = path.replace("{id}", sid)
    if body_fn is None:
        return admin.api(method, p, query={"sandbox_id": sid})
    return admin.api(method, p, body_fn(sid))


def assert_failure(js, message, shape, error, code=4000):
    assert js["status"] == "Failed", js
    assert js["message"] == message, (js["message"], message)
    assert js["error"] == error, (js["error"], error)
    res = js["result"]
    assert isinstance(res, dict), js
    assert res["code"] == code, js
    assert res["failure_reason"] == error, js
    for k, v in SHAPES[shape].items():
        assert res.get(k, "MISSING") == v, (k, res)


def inject(redis, sid, record, active=True):
    """Write a raw record straight into Redis (what another admin might have left)."""
    redis.cli("SET", "rock:sandbox:" + sid, json.dumps(record))
    if active:
        redis.cli("SADD", "rock:active", sid)


def base_record(sid, backend, state="running"):
    rec = {"sandbox_id": sid, "state": state, "image": "python:3.11", "cpus": 1.0,
           "memory": "2.00g", "user_id": "default", "experiment_id": "default",
           "namespace": "default", "env": {}, "metadata": {}, "state_history": [],
           "create_time": "2026-01-01T00:00:00+08:00"}
    if backend is not None:
        rec["extended_params"] = {"backend": backend, backend + "_id": "up-" + sid}
    return rec


@test
def hello_and_unknown_paths():
    a = Admin()
    st, js = a.request("GET", "/")
    assert (st, js) == (200, {"message": "hello, ROCK!"})
    st, js = a.request("GET", PREFIX + "/nope")
    assert (st, js) == (404, {"detail": "Not Found"})
    st, js = a.request("GET", PREFIX + "/execute")
    assert (st, js) == (405, {"detail": "Method Not Allowed"})
    st, body, headers = a.request("GET", PREFIX + "/sandboxes/?page=1", raw=True)
    assert st == 307 and headers["Location"] == PREFIX + "/sandboxes?page=1", (st, headers)
    st, js = a.api("GET", "/get_token", query={"account": "primary"})
    assert js == {"status": "Success", "message": None, "error": None, "result": None}


@test
def validation_errors_are_http_200_envelopes():
    a = Admin()
    st, js = a.api("POST", "/execute", {"command": "echo"})
    assert st == 200 and js["status"] == "Failed" and js["message"] == "invalid parameter"
    assert js["error"] == "body.sandbox_id: Field required" and js["result"] is None, js
    st, js = a.api("POST", "/execute", "{not json", headers={"Content-Type": "application/json"})
    assert js["message"] == "invalid parameter" and "JSON decode error" in js["error"], js
    st, js = a.api("GET", "/get_status", query={"sandbox_id": "  "})
    assert js["error"] == "query.sandbox_id: String should have at least 1 character", js
    st, js = a.api("POST", "/start_async", {"image": "x", "auto_clear_time_minutes": 5.5})
    assert "auto_clear_time_minutes" in js["error"] and js["result"] is None, js
    st, js = a.api("POST", "/run_in_session", {"sandbox_id": "x", "command": "c",
                                                "check": "maybe"})
    assert js["message"] == "invalid parameter" and "check" in js["error"], js


@test
def start_validation_business_errors():
    a = Admin()
    st, js = a.api("POST", "/start_async", {"image": "python:3.11", "cpus": 20})
    assert js["status"] == "Failed" and js["message"] == "async start sandbox failed"
    assert js["error"] == "Requested CPUs 20 exceed the maximum allowed 16", js
    assert js["result"]["code"] == 4000 and js["result"]["sandbox_id"] is None, js
    st, js = a.api("POST", "/start_async", {"image": "python:3.11", "memory": "lots"})
    assert js["error"] == "Invalid memory size: lots", js


@test
def client_sequence_status_fields_and_headers():
    a = Admin()
    hdr = {"X-User-Id": "u1", "X-Experiment-Id": "e1", "X-Namespace": "n1", "X-Cluster": "c"}
    res = a.ok("POST", "/start_async", {
        "image": "python:3.11", "image_os": "linux", "auto_clear_time": 5,
        "auto_clear_time_minutes": 5, "startup_timeout": 180, "memory": "8g", "cpus": 2,
        "num_gpus": None, "accelerator_type": None, "registry_username": None,
        "registry_password": None, "use_kata_runtime": False, "limit_cpus": None,
        "sandbox_id": None, "auto_archive_seconds": None, "auto_delete_seconds": None,
        "disk": "50G"}, headers=hdr)
    sid = res["sandbox_id"]
    assert len(sid) == 32 and all(c in "0123456789abcdef" for c in sid)
    assert res["disk"] == "50G" and res["host_name"] is None
    # The pending record exists at once (Pitfall 8) and then turns running.
    a.wait_alive(sid)
    st = a.ok("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": "False"})
    for key in ("host_name", "host_ip", "status", "port_mapping", "image", "gateway_version",
                "swe_rex_version", "user_id", "experiment_id", "namespace", "cpus", "memory",
                "is_alive", "state_history"):
        assert st[key] is not None, key
    assert st["sandbox_id"] == sid and st["state"] == "running" and st["is_alive"] is True
    assert (st["user_id"], st["experiment_id"], st["namespace"]) == ("u1", "e1", "n1")
    assert st["memory"] == "8.00g" and st["cpus"] == 2.0 and st["host_name"]
    assert st["state_history"][-1]["event"] == "alive" and st["start_time"]
    assert st["auto_stop_time"] is not None
    out = a.ok("POST", "/execute", {"command": ["echo", "hello world"], "sandbox_id": sid,
                                    "timeout": 1200, "cwd": None, "env": None})
    assert out == {"stdout": "'hello world'\n", "stderr": "", "exit_code": 0}, out
    # is_alive (fixed admin semantics)
    r = a.ok("GET", "/is_alive", query={"sandbox_id": sid})
    assert r["is_alive"] is True and r["message"] == st["host_name"], r
    # list and batch read stored metadata
    lst = a.ok("GET", "/sandboxes", query={"user_id": "u1"})
    assert lst["total"] == 1 and lst["items"][0]["sandbox_id"] == sid and not lst["has_more"]
    # a list item is the stored status (always shown alive) with the authorization hidden (the
    # idle deadline aside: a status read may move it); a list or batch result starts with the
    # result head like every sandbox result
    def settled(status):
        assert status["auto_stop_time"], status
        return dict(status, auto_stop_time=None)
    stored = settled(a.ok("GET", "/get_status", query={"sandbox_id": sid}))
    item = settled(lst["items"][0])
    assert item == dict(stored, rock_authorization_encrypted=None), (item, stored)
    assert (lst["code"], lst["exit_code"], lst["failure_reason"]) == (None, None, None), lst
    assert a.ok("GET", "/sandboxes", query={"user_id": "other"})["total"] == 0
    assert a.ok("GET", "/sandboxes", query={"cpus": "2.0"})["total"] == 0  # numbers never match
    b = a.ok("POST", "/sandboxes/batch", {"sandbox_ids": [sid, "unknown"]})
    assert [s["sandbox_id"] for s in b["statuses"]] == [sid]
    assert settled(b["statuses"][0]) == stored and b["code"] is None, b
    # delete, then status
    assert a.ok("POST", "/delete", {"sandbox_id": sid}) == sid + " deleted"
    st2, js = a.api("GET", "/get_status", query={"sandbox_id": sid})
    assert_failure(js, "get sandbox status failed", "sandbox", "Sandbox %s not found" % sid)
    gone = a.ok("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": "TRUE"})
    assert gone["state"] == "deleted" and gone["is_alive"] is False and gone["delete_time"]
    assert a.ok("POST", "/delete", {"sandbox_id": "never-existed"}) == "never-existed deleted"
    r = a.ok("GET", "/is_alive", query={"sandbox_id": sid})
    assert r == {"is_alive": False, "message": "sandbox %s is alive failed" % sid}, r


@test
def list_paging_and_limits():
    a = Admin()
    ids = [a.start_sandbox(wait_alive=False) for _ in range(5)]
    page = a.ok("GET", "/sandboxes", query={"page": 2, "page_size": 2})
    assert page["total"] == 5 and len(page["items"]) == 2 and page["has_more"] is True
    page3 = a.ok("GET", "/sandboxes", query={"page": 3, "page_size": 2})
    assert len(page3["items"]) == 1 and page3["has_more"] is False
    st, js = a.api("GET", "/sandboxes", query={"page": 0})
    assert js["error"] == "page parameter invalid, page is 0, page_size is 500", js
    assert js["result"]["items"] == [] and js["result"]["total"] == 0
    st, js = a.api("GET", "/sandboxes", query={"page_size": 2001})
    assert js["error"] == "page_size exceeds maximum 2000", js
    st, js = a.api("POST", "/sandboxes/batch", {"sandbox_ids": ["x"] * 2001})
    assert js["error"] == "sandbox_ids count too large, max count is 2000"
    assert js["result"]["statuses"] is None
    assert len(ids) == 5


@test
def duplicate_active_id_refused():
    a = Admin()
    a.start_sandbox(sandbox_id="mine")
    st, js = a.api("POST", "/start_async", {"image": "python:3.11", "sandbox_id": "mine"})
    assert js["error"] == "Sandbox mine already exists" and js["result"]["code"] == 4000, js


@test
def dispatch_order_for_every_sandbox_route():
    """Not found -> missing backend -> conflicting backend -> capability ->
    state -> plugin, table-driven over every sandbox route."""
    redis = Redis()
    full = Admin(operator="testop", redis=redis)
    mini = Admin(operator="testop_min", redis=redis)
    inject(redis, "nobackend", base_record("nobackend", None))
    inject(redis, "foreign", base_record("foreign", "rocklet"))
    inject(redis, "pend-full", base_record("pend-full", "testop", "pending"))
    inject(redis, "run-mini", base_record("run-mini", "testop_min"))
    for name, method, path, body_fn, msg, shape in SANDBOX_ROUTES:
        # 1. unknown sandbox
        st, js = call_route(full, method, path, body_fn, "missing-id")
        assert st == 200, (name, st)
        assert_failure(js, msg, shape, "Sandbox missing-id not found")
        # 2. record without a backend tag (fails closed, B113)
        st, js = call_route(full, method, path, body_fn, "nobackend")
        assert_failure(js, msg, shape, "Testop sandbox metadata is missing required backend")
        # 3. a foreign backend tag (B114)
        st, js = call_route(full, method, path, body_fn, "foreign")
        assert_failure(js, msg, shape,
                       "Sandbox backend rocklet conflicts with configured operator testop")
        # 4. capability missing (testop_min has none): refused before the plugin
        st, js = call_route(mini, method, path, body_fn, "run-mini")
        expected = {
            "stop": "testop_min backend does not support stop; use delete instead.",
        }.get(name, "Testop backend does not support %s" % {
            "create_session": "create_session", "run_in_session": "run_in_session",
            "close_session": "close_session", "get_sandbox_statistics":
            "get_sandbox_statistics"}.get(name, name))
        assert_failure(js, msg, shape, expected)
    # 5. state precondition on runtime routes (B116)
    for name, method, path, body_fn, msg, shape in SANDBOX_ROUTES[:6]:
        st, js = call_route(full, method, path, body_fn, "pend-full")
        assert_failure(js, msg, shape, "Sandbox pend-full is not running (state=pending)")
    # delete applies the same tag gate but succeeds for unknown ids
    assert full.ok("POST", "/delete", {"sandbox_id": "missing-id"}) == "missing-id deleted"
    st, js = full.api("POST", "/delete", {"sandbox_id": "foreign"})
    assert_failure(js, "delete sandbox failed", "sandbox",
                   "Sandbox backend rocklet conflicts with configured operator testop")
    st, js = full.api("GET", "/get_status", query={"sandbox_id": "nobackend"})
    assert_failure(js, "get sandbox status failed", "sandbox",
                   "Testop sandbox metadata is missing required backend")


@test
def runtime_routes_reach_the_plugin():
    a = Admin()
    sid = a.start_sandbox()
    out = a.ok("POST", "/execute", {"sandbox_id": sid, "command": "fail 3"})
    assert out["exit_code"] == 3, out
    st, js = a.api("POST", "/execute", {"sandbox_id": sid, "command": "fail 3", "check": True,
                                        "error_msg": "prefix"})
    assert js["status"] == "Failed" and js["result"] is None, js
    assert js["error"] == "prefix: Command failed with exit code 3. Stdout:\n'failing'\nStderr:\n''"
    st, js = a.api("POST", "/execute", {"sandbox_id": sid, "command": "sleep", "timeout": 9})
    assert js["error"] == "Timeout (9.0s) exceeded while running command" and js["result"] is None
    out = a.ok("POST", "/execute", {"sandbox_id": sid, "command": "env A", "env": {"A": "B"}})
    assert out["stdout"] == "B", out
    out = a.ok("POST", "/execute", {"sandbox_id": sid, "command": "backend-error"})
    assert out["stderr"] == "RuntimeError: boom", out
    # files
    assert a.ok("POST", "/write_file", {"sandbox_id": sid, "path": "/f", "content": "hé\n"}) == \
        {"success": True, "message": ""}
    assert a.ok("POST", "/read_file", {"sandbox_id": sid, "path": "/f"}) == {"content": "hé\n"}
    st, js = a.api("POST", "/read_file", {"sandbox_id": sid, "path": "/nope"})
    # a missing file is a backend failure (5000) with {"content": ""} (§5.9)
    assert js["status"] == "Failed" and js["result"]["content"] == "" and \
        js["result"]["code"] == 5000, js
    # sessions
    assert a.ok("POST", "/create_session", {"sandbox_id": sid, "session": "w"}) == \
        {"output": "", "session_type": "bash"}
    st, js = a.api("POST", "/create_session", {"sandbox_id": sid, "session": "w"})
    assert js["error"] == "session 'w' already exists" and js["result"] is None, js
    r = a.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "w",
                                          "command": "echo hi"})
    assert r == {"session_type": "bash", "output": "hi\n", "exit_code": 0,
                 "failure_reason": "", "expect_string": ""}, r
    st, js = a.api("POST", "/run_in_session", {"sandbox_id": sid, "session": "w",
                                                "command": "fail 2"})
    assert js["error"] == "Command 'fail 2' failed with exit code 2. Here is the output:\n'failing'"
    r = a.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "w",
                                          "command": "fail 2", "check": "ignore"})
    assert "exit_code" not in r and r["output"] == "failing", r
    st, js = a.api("POST", "/run_in_session", {"sandbox_id": sid, "session": "nope",
                                                "command": "x"})
    assert js["error"] == "session 'nope' does not exist" and js["result"] is None
    st, js = a.api("POST", "/run_in_session", {"sandbox_id": sid, "session": "w",
                                                "command": "x", "expect": ["$"]})
    # testop declares RK_CAP_SESSION_INTERACTIVE (ABI 1.1): the expect strings
    # reach it ("x" contains none); refusals are covered by test_abi.py.
    assert js["status"] == "Success" and js["result"]["expect_string"] == "", js
    assert a.ok("POST", "/close_session", {"sandbox_id": sid, "session": "w"}) == \
        {"session_type": "bash"}
    # stop/restart/archive/commit/statistics with a capable plugin
    assert a.ok("POST", "/stop", {"sandbox_id": sid}) == sid + " stopped"
    assert a.ok("POST", "/restart", {"sandbox_id": sid})["sandbox_id"] == sid
    stats = a.ok("GET", "/get_sandbox_statistics", query={"sandbox_id": sid})
    assert stats["cpu_percent"] == 1.5


@test
def refusals_and_stop_as_delete():
    a = Admin(operator="testop_min")
    sid = a.start_sandbox()
    st, js = a.api("POST", "/stop", {"sandbox_id": sid})
    assert st == 200 and js["result"]["code"] == 4000, js
    st, js = a.api("POST", "/sandboxes/%s/restart" % sid, None)
    assert js["error"] == "Testop backend does not support restart" and \
        js["result"]["sandbox_id"] is None, js
    st, js = a.api("GET", "/commit/%s" % sid)
    assert js["error"] == "Testop backend does not support commit", js
    st, js = a.api("POST", "/host/proxy/x", None)
    assert js["status"] == "Failed" and js["result"]["code"] == 4000
    b = Admin(operator="testop_min", config={"runtime": {"stop_as_delete": True}})
    sid = b.start_sandbox()
    assert b.ok("POST", "/stop", {"sandbox_id": sid}) == sid + " stopped"
    gone = b.ok("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": "true"})
    assert gone["state"] == "deleted", gone


@test
def failed_create_is_reported_and_cleaned():
    a = Admin(config={"runtime": {"sweep_interval": 1}})
    res = a.ok("POST", "/start_async", {"image": "createfail:1"})
    sid = res["sandbox_id"]

    def failed():
        st, js = a.api("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": 1})
        phases = js["result"]["status"] if js["status"] == "Success" else {}
        return phases
    phases = wait_until(failed, 10, 0.1, "a failed phase")
    (phase,) = phases.values()
    assert phase["status"] == "failed" and "submission failed" in phase["message"], phases
    # marked for immediate deletion: the idle sweep removes it
    wait_until(lambda: a.ok("GET", "/get_status", query={
        "sandbox_id": sid, "include_all_states": "true"})["state"] == "deleted", 10, 0.2,
        "sweep of the failed sandbox")


@test
def body_limit_gives_413():
    a = Admin(config={"server": {"max_body_bytes": 1024}})
    st, js = a.api("POST", "/execute", {"sandbox_id": "x", "command": "y" * 5000})
    assert st == 413 and "max_body_bytes" in js["detail"], (st, js)
    st, js = a.request("GET", "/")
    assert st == 200


if __name__ == "__main__":
    run()
