# SPDX-License-Identifier: Apache-2.0
"""Bash sessions on OpenSandbox end to end: a real redis-server, the
OpenSandbox simulator and two rock-admin processes A and B on different ports
sharing the session-name registry in Redis.

Covers: a session created through A used and closed through B; 200 concurrent
creates of one name across A and B; a process killed between reserve and
commit (the reservation expires); the admin's own environment never reaching a
sandbox; explicit env + startup_source applied once; remote_user and `id -un`
failures; env-name validation; init failure / timeout clean-up; run_in_session
check policies, interactive refusal, timeouts (execd's and the admin's own
deadline) and nohup-style background runs; delete of the sandbox clearing every
mapping; a commit that lost its expired reservation (B84); upstream failures
while opening, initialising and closing (B82, B88); the stored sandbox env
overlay (B80); the in-process registry when no Redis is configured.

Counting execd sessions: the simulator keeps sessions only in memory and has
no list route, but it refuses a new session with "too many sessions" once a
sandbox holds SIM_MAX_SESSIONS (64, tests/opensandbox-sim/sim_execd.c). So the
number held = 64 - how many more `POST /session` calls succeed (those probes
are deleted again right away).
"""
import json
import os
import pwd
import re
import shutil
import signal
import threading
import time

from harness import Admin, Redis, Sim, deep_merge, http_request, PREFIX, run, test, \
    bridge_only, os_api_key, sim_only, tmpdir, wait_until

KEY = os_api_key("sessions-test-key")
SIM_MAX_SESSIONS = 64
ME = pwd.getpwuid(os.getuid()).pw_name
CANARY = "rock-canary-9f3c1e7a"


def setup(n_admins=2, config=None, env=None, sim=None):
    """redis + simulator + n rock-admins (opensandbox) sharing the Redis."""
    redis = Redis()
    sim = sim or Sim(api_key=KEY)
    cfg = deep_merge({"opensandbox": {"endpoint": sim.endpoint, "protocol": "http",
                                      "api_key": KEY, "command_timeout_margin": 2},
                      "runtime": {"session_reservation_ttl": 2, "command_timeout_margin": 2}},
                     config or {})
    admins = [Admin(operator="opensandbox", config=cfg, redis=redis, env=env)
              for _ in range(n_admins)]
    return (redis, sim) + tuple(admins)


def upstream_id(redis, sid):
    rec = json.loads(redis.cli("GET", "rock:sandbox:" + sid))
    return rec["extended_params"]["opensandbox_id"]


def execd_session_count(sim, osid):
    """How many execd sessions the simulator holds for sandbox osid (see above)."""
    sim_only("counts execd sessions by filling the simulator's session cap (the real execd has "
             "none and no session list)")
    probes = []
    try:
        while True:
            st, js = sim.request("POST", "/sandboxes/%s/execd/session" % osid, {})
            if st != 200:
                assert st == 500 and "too many sessions" in json.dumps(js), (st, js)
                break
            probes.append(js["session_id"])
            assert len(probes) <= SIM_MAX_SESSIONS, "simulator session cap changed?"
    finally:
        for p in probes:
            st, _ = sim.request("DELETE", "/sandboxes/%s/execd/session/%s" % (osid, p))
            assert st == 200, st
    return SIM_MAX_SESSIONS - len(probes)


def faults(sim, cfg=None):
    if cfg is None:
        st, _ = sim.request("DELETE", "/_sim/faults")
    else:
        st, _ = sim.request("POST", "/_sim/faults", cfg)
    assert st in (200, 204), st


def inflight(admin):
    """Requests the admin is handling, from /metrics (the scrape excluded)."""
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    for line in body.decode().splitlines():
        if line.startswith("rock_admin_inflight_requests "):
            return int(line.split()[1]) - 1
    return -1


def upstream_inflight(admin):
    """Plugin (upstream) calls the admin has in progress, from /metrics."""
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    for line in body.decode().splitlines():
        if line.startswith("rock_admin_upstream_inflight_calls "):
            return int(float(line.split()[1]))
    return -1


def expire_reservation(redis, key, name, value):
    """Make a live reservation "r:<token>:<deadline ms>" expired by moving its
    deadline into the past (what waiting out the TTL would do), atomically."""
    token = value[2:].rsplit(":", 1)[0]
    script = ("if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then "
              "return redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end return -1")
    assert redis.cli("EVAL", script, "1", key, name, value, "r:%s:1" % token) == "0", value


def create(admin, sid, name, **extra):
    body = {"sandbox_id": sid, "session": name}
    body.update(extra)
    return admin.api("POST", "/create_session", body)[1]


def run_cmd(admin, sid, name, command, **extra):
    body = {"action_type": "bash", "sandbox_id": sid, "session": name, "command": command}
    body.update(extra)
    return admin.api("POST", "/run_in_session", body)[1]


def out_of(admin, sid, name, command, **extra):
    js = run_cmd(admin, sid, name, command, **extra)
    assert js["status"] == "Success", js
    return js["result"]["output"]


def assert_plain_failure(js, message, error):
    """A failure without a code (§2.2 'any other exception'): result null."""
    assert js["status"] == "Failed", js
    assert js["message"] == message, js
    assert js["error"] == error, (js["error"], error)
    assert js["result"] is None, js


def assert_bad_request(js, message, error):
    assert js["status"] == "Failed", js
    assert js["message"] == message, js
    assert js["error"] == error, (js["error"], error)
    assert js["result"]["code"] == 4000, js


@test
def session_created_on_a_is_used_and_closed_on_b():
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    osid = upstream_id(redis, sid)
    js = create(a, sid, "x")
    assert js == {"status": "Success", "message": None, "error": None,
                  "result": {"output": "", "session_type": "bash"}}, js
    assert redis.cli("HGET", "rock:sessions:" + sid, "x").startswith("s:")
    res = b.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "x",
                                           "command": "export X=1"})
    assert res["output"] == "" and res["exit_code"] == 0, res
    assert res["failure_reason"] == "" and res["expect_string"] == "", res
    assert out_of(b, sid, "x", "echo $X") == "1\n"
    assert out_of(a, sid, "x", "cd /tmp") == ""
    assert out_of(b, sid, "x", "pwd") == "/tmp\n"
    assert out_of(a, sid, "x", "echo $X; pwd") == "1\n/tmp\n"
    assert execd_session_count(sim, osid) == 1
    assert b.ok("POST", "/close_session", {"sandbox_id": sid, "session": "x"}) == \
        {"session_type": "bash"}
    assert redis.cli("HEXISTS", "rock:sessions:" + sid, "x") == "0"
    assert execd_session_count(sim, osid) == 0
    for admin in (a, b):
        assert_plain_failure(run_cmd(admin, sid, "x", "echo $X"), "run in session failed",
                             "session 'x' does not exist")
    st, js = a.api("POST", "/close_session", {"sandbox_id": sid, "session": "x"})
    assert_plain_failure(js, "close session failed", "session 'x' does not exist")
    # The name can be used again after the close.
    assert create(b, sid, "x")["status"] == "Success"
    assert out_of(a, sid, "x", "echo ${X:-unset}") == "unset\n"
    # Any string is a name: spaces, colons, slashes, non-ASCII.
    odd = "w\u00e9ird: name/1"
    assert create(a, sid, odd)["status"] == "Success"
    assert out_of(b, sid, odd, "echo odd") == "odd\n"
    assert_plain_failure(create(b, sid, odd), "create session failed",
                         "session '%s' already exists" % odd)
    b.ok("POST", "/close_session", {"sandbox_id": sid, "session": odd})
    assert_plain_failure(run_cmd(a, sid, odd, "true"), "run in session failed",
                         "session '%s' does not exist" % odd)


@test
def concurrent_creates_of_one_name_across_two_processes():
    redis, sim, a, b = setup(config={"redis": {"pool_size": 128}})
    sid = a.start_sandbox()
    osid = upstream_id(redis, sid)
    n = 200
    barrier = threading.Barrier(n)
    results = [None] * n

    def worker(i):
        admin = a if i % 2 == 0 else b
        body = {"sandbox_id": sid, "session": "n"}
        barrier.wait()
        try:
            results[i] = http_request("127.0.0.1", admin.port, "POST",
                                      PREFIX + "/create_session", body)
        except Exception as e:  # noqa: BLE001 - reported below
            results[i] = ("exception", repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(r is not None for r in results), "a create_session call did not return"
    bad = [r for r in results if r[0] != 200]
    assert not bad, bad[:5]
    ok = [js for _, js in results if js["status"] == "Success"]
    failed = [js for _, js in results if js["status"] != "Success"]
    assert len(ok) == 1, (len(ok), ok[:3], failed[:3])
    assert len(failed) == n - 1
    for js in failed:
        assert_plain_failure(js, "create session failed", "session 'n' already exists")
    assert execd_session_count(sim, osid) == 1
    assert redis.cli("HLEN", "rock:sessions:" + sid) == "1"
    assert out_of(a, sid, "n", "echo via-a") == "via-a\n"
    assert out_of(b, sid, "n", "echo via-b") == "via-b\n"


@test
def killed_between_reserve_and_commit_reservation_expires():
    # A long reservation TTL: the "still taken" checks below always run while
    # it is live; its expiry is then brought forward in the store (the
    # deadline is the only clock the reservation has).
    redis, sim, a, b = setup(config={"runtime": {"session_reservation_ttl": 600}})
    sid = a.start_sandbox()
    osid = upstream_id(redis, sid)
    key = "rock:sessions:" + sid
    faults(sim, {"execd_latency_ms": 5000})
    box = {}

    def in_flight():
        try:
            box["reply"] = a.api("POST", "/create_session", {"sandbox_id": sid, "session": "k"})
        except Exception as e:  # noqa: BLE001 - the process is killed under it
            box["error"] = repr(e)

    th = threading.Thread(target=in_flight)
    th.start()
    value = wait_until(lambda: redis.cli("HGET", key, "k"), 10, 0.01, "reservation of 'k'")
    assert value.startswith("r:"), value
    deadline_ms = int(value.rsplit(":", 1)[1])
    a.check_exit = False
    a.stop(signal.SIGKILL)
    th.join(10)
    assert "reply" not in box, box
    faults(sim)
    # While the reservation is live the name stays taken, for every process.
    st, js = b.api("POST", "/create_session", {"sandbox_id": sid, "session": "k"})
    js2 = run_cmd(b, sid, "k", "true")
    assert time.time() * 1000 < deadline_ms, "the 600 s reservation expired during the test"
    assert_plain_failure(js, "create session failed", "session 'k' already exists")
    # A lookup never returns a reservation.
    assert_plain_failure(js2, "run in session failed", "session 'k' does not exist")
    expire_reservation(redis, key, "k", value)
    js = create(b, sid, "k")
    assert js["status"] == "Success", js
    assert redis.cli("HGET", key, "k").startswith("s:")
    assert out_of(b, sid, "k", "echo reclaimed") == "reclaimed\n"
    # (The simulator may still have opened A's execd session after A died:
    # nothing is left to close it but the sandbox delete.)
    assert execd_session_count(sim, osid) in (1, 2)
    b.ok("POST", "/delete", {"sandbox_id": sid})


@test
def reservation_reclaimed_before_commit_closes_the_late_session():
    """B84 end to end: A's create outlives its reservation, B reclaims the name;
    A's commit then fails, A closes its execd session and B's mapping stays."""
    redis, sim, a, b = setup(config={"runtime": {"session_reservation_ttl": 600}})
    sid = a.start_sandbox()
    osid = upstream_id(redis, sid)
    key = "rock:sessions:" + sid
    # A's execd call is held back until B has reclaimed the name (generous:
    # B only needs one fast create in that window).
    faults(sim, {"execd_latency_ms": 8000})
    box = {}
    th = threading.Thread(target=lambda: box.update(
        reply=a.api("POST", "/create_session", {"sandbox_id": sid, "session": "late"})[1]))
    th.start()
    value = wait_until(lambda: redis.cli("HGET", key, "late"), 10, 0.01, "reservation")
    # A's reservation outlives its TTL (brought forward in the store).
    expire_reservation(redis, key, "late", value)
    faults(sim)
    js = create(b, sid, "late")  # reclaims the expired reservation
    assert js["status"] == "Success", js
    mapping = redis.cli("HGET", key, "late")
    assert mapping.startswith("s:"), mapping
    th.join(20)
    assert_plain_failure(box["reply"], "create session failed",
                         "OpenSandbox session reservation expired before commit")
    assert redis.cli("HGET", key, "late") == mapping
    assert execd_session_count(sim, osid) == 1
    assert out_of(a, sid, "late", "echo b-owns-it") == "b-owns-it\n"


@test
def admin_environment_never_reaches_the_sandbox():
    redis, sim, a, b = setup(env={"ROCK_SECRET_CANARY": CANARY})
    sid = a.start_sandbox()
    profile = os.path.join(tmpdir(), "canary-profile.sh")
    a.ok("POST", "/write_file", {"sandbox_id": sid, "path": profile,
                                 "content": "echo \"init:[$ROCK_SECRET_CANARY]\"\nenv\n"})
    for name, extra in (("plain", {}), ("enabled", {"env_enable": True}),
                        ("init", {"env_enable": True, "startup_source": [profile],
                                  "env": {"OTHER": "1"}})):
        js = create(a, sid, name, **extra)
        assert js["status"] == "Success", js
        assert CANARY not in json.dumps(js) and "ROCK_SECRET_CANARY" not in json.dumps(js), js
        if name == "init":
            assert js["result"]["output"].startswith("init:[]\n"), js
            assert "OTHER=1" in js["result"]["output"], js
        for admin in (a, b):
            assert out_of(admin, sid, name, "echo \"[$ROCK_SECRET_CANARY]\"") == "[]\n"
            envout = out_of(admin, sid, name, "env")
            assert CANARY not in envout and "ROCK_SECRET_CANARY" not in envout, envout
            assert "PATH=" in envout, envout
    for admin in (a, b):
        res = admin.ok("POST", "/execute", {"sandbox_id": sid,
                                            "command": "echo \"[$ROCK_SECRET_CANARY]\""})
        assert res["stdout"] == "[]\n" and res["exit_code"] == 0, res
        res = admin.ok("POST", "/execute", {"sandbox_id": sid, "command": "env"})
        assert CANARY not in res["stdout"] and "ROCK_SECRET_CANARY" not in res["stdout"], res
        assert "PATH=" in res["stdout"], res


@test
def explicit_env_and_startup_source_applied_once():
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    d = tmpdir()
    counter = os.path.join(d, "sourced.count")
    profile = os.path.join(d, "profile with spaces.sh")
    second = os.path.join(d, "it's second.sh")
    a.ok("POST", "/write_file", {
        "sandbox_id": sid, "path": profile,
        "content": "echo run >> '%s'\nexport FROM_PROFILE=\"$GREETING!\"\necho ready\n" % counter})
    a.ok("POST", "/write_file", {"sandbox_id": sid, "path": second,
                                 "content": "echo \"second:$FROM_PROFILE\" >&2\n"})
    js = create(a, sid, "p", env={"GREETING": "hello world", "QUOTE": "it's"},
                startup_source=[profile, second], startup_timeout=3)
    assert js["status"] == "Success", js
    assert js["result"] == {"output": "ready\nsecond:hello world!\n", "session_type": "bash"}, js
    assert out_of(b, sid, "p", 'echo "$GREETING|$QUOTE|$FROM_PROFILE"') == \
        "hello world|it's|hello world!\n"
    assert out_of(a, sid, "p", "cd /tmp && echo $FROM_PROFILE") == "hello world!\n"
    got = out_of(b, sid, "p", "pwd; echo $GREETING")
    assert got == "/tmp\nhello world\n", got
    counted = a.ok("POST", "/read_file", {"sandbox_id": sid, "path": counter})["content"]
    assert counted == "run\n", "startup_source must run exactly once"  # (as the sandbox sees it)
    # A session without env does not see another session's variables.
    assert create(b, sid, "q")["status"] == "Success"
    assert out_of(a, sid, "q", 'echo "[$GREETING]"') == "[]\n"


@test
def stored_sandbox_env_default_name_and_upstream_failures():
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    osid = upstream_id(redis, sid)
    key = "rock:sessions:" + sid
    # B80: the request env is overlaid on the sandbox's stored env.
    rec = json.loads(redis.cli("GET", "rock:sandbox:" + sid))
    rec["env"] = {"WORKSPACE": "/workspace", "SHARED": "sandbox"}
    redis.cli("SET", "rock:sandbox:" + sid, json.dumps(rec))
    js = create(b, sid, "merged", env={"SHARED": "request", "SESSION_ONLY": "value"})
    assert js["status"] == "Success", js
    assert out_of(a, sid, "merged", 'echo "$WORKSPACE|$SHARED|$SESSION_ONLY"') == \
        "/workspace|request|value\n"
    # The session name defaults to "default" on every route.
    assert a.ok("POST", "/create_session", {"sandbox_id": sid}) == \
        {"output": "", "session_type": "bash"}
    assert redis.cli("HGET", key, "default").startswith("s:")
    assert b.ok("POST", "/run_in_session", {"sandbox_id": sid, "command": "echo d"})["output"] \
        == "d\n"
    assert b.ok("POST", "/close_session", {"sandbox_id": sid}) == {"session_type": "bash"}
    assert redis.cli("HEXISTS", key, "default") == "0"
    # B82: POST /session fails upstream -> the error is reported, the name is free.
    faults(sim, {"execd_status": 500})
    js = create(a, sid, "up")
    faults(sim)
    assert js["status"] == "Failed" and js["result"]["code"] == 5000, js
    assert "injected failure" in js["error"], js
    assert redis.cli("HEXISTS", key, "up") == "0"
    assert create(b, sid, "up")["status"] == "Success"
    # B88: a failing remote delete keeps the mapping; a retry closes it.
    mapping = redis.cli("HGET", key, "up")
    faults(sim, {"execd_status": 500})
    st, js = a.api("POST", "/close_session", {"sandbox_id": sid, "session": "up"})
    faults(sim)
    assert js["status"] == "Failed" and js["result"]["code"] == 5000, js
    assert js["message"] == "close session failed", js
    assert redis.cli("HGET", key, "up") == mapping
    assert out_of(b, sid, "up", "echo alive") == "alive\n"
    assert b.ok("POST", "/close_session", {"sandbox_id": sid, "session": "up"}) == \
        {"session_type": "bash"}
    assert redis.cli("HEXISTS", key, "up") == "0"
    # An execd session that vanished upstream: runs fail (5000), close treats
    # the 404 as already gone and frees the name.
    assert create(a, sid, "gone")["status"] == "Success"
    esid = redis.cli("HGET", key, "gone")[2:]
    st, _ = sim.request("DELETE", "/sandboxes/%s/execd/session/%s" % (osid, esid))
    assert st == 200, st
    js = run_cmd(b, sid, "gone", "echo hi")
    assert js["status"] == "Failed" and js["result"]["code"] == 5000, js
    assert js["message"] == "run in session failed", js
    assert b.ok("POST", "/close_session", {"sandbox_id": sid, "session": "gone"}) == \
        {"session_type": "bash"}
    assert redis.cli("HEXISTS", key, "gone") == "0"
    assert execd_session_count(sim, osid) == 1  # "merged"


def id_sim():
    """A simulator whose PATH starts with a fake `id`: it behaves like the real
    one unless the returned mode file says fail / silent / empty."""
    d = tmpdir()
    mode = os.path.join(d, "id.mode")
    real = shutil.which("id")
    with open(os.path.join(d, "id"), "w") as f:
        f.write("#!/bin/sh\n"
                "case \"$(cat '%s' 2>/dev/null)\" in\n"
                "fail) echo 'id: cannot find name for user ID 4242' >&2; exit 1;;\n"
                "silent) exit 3;;\n"
                "empty) exit 0;;\n"
                "esac\n"
                "exec %s \"$@\"\n" % (mode, real))
    os.chmod(os.path.join(d, "id"), 0o755)
    old = os.environ["PATH"]
    os.environ["PATH"] = d + ":" + old
    try:
        sim = Sim(api_key=KEY)
    finally:
        os.environ["PATH"] = old
    return sim, mode


@test
def remote_user_and_env_name_rules():
    sim_only("a fake 'id' in the simulator's sandbox, switched by a file on this machine")
    sim, mode = id_sim()
    redis, sim, a, b = setup(sim=sim)
    sid = a.start_sandbox()
    osid = upstream_id(redis, sid)
    key = "rock:sessions:" + sid
    js = create(a, sid, "u", remote_user=ME)
    assert js["status"] == "Success", js
    assert out_of(b, sid, "u", "id -un") == ME + "\n"
    other = "nobody" if ME != "nobody" else "root"
    js = create(b, sid, "v", remote_user=other)
    assert_bad_request(js, "create session failed",
                       "OpenSandbox does not support remote_user=%s; the sandbox effective user "
                       "is %s" % (other, ME))
    assert js["result"]["output"] == "" and js["result"]["session_type"] == "bash", js
    assert redis.cli("HEXISTS", key, "v") == "0"
    for m, detail in (("fail", "id: cannot find name for user ID 4242"),
                      ("silent", "exit code 3"), ("empty", "exit code 0")):
        with open(mode, "w") as f:
            f.write(m)
        js = create(a, sid, "v", remote_user=ME)
        assert_bad_request(js, "create session failed",
                           "Cannot determine OpenSandbox effective user: " + detail)
        assert redis.cli("HEXISTS", key, "v") == "0"
    os.unlink(mode)
    js = create(b, sid, "v", env={"OK_NAME": "1", "BAD-NAME": "x"})
    assert_bad_request(js, "create session failed", "Invalid environment variable name: 'BAD-NAME'")
    for bad in ("1ABC", "A B", ""):
        js = create(a, sid, "v", env={bad: "x"})
        assert_bad_request(js, "create session failed",
                           "Invalid environment variable name: %s" % repr(bad))
    assert redis.cli("HEXISTS", key, "v") == "0"
    assert execd_session_count(sim, osid) == 1  # only "u"
    js = create(b, sid, "v", env={"_ok9": "y"}, remote_user=ME)
    assert js["status"] == "Success", js
    assert out_of(a, sid, "v", "echo $_ok9") == "y\n"


@test
def init_failure_and_timeout_clean_up():
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    osid = upstream_id(redis, sid)
    key = "rock:sessions:" + sid
    missing = os.path.join(tmpdir(), "missing-profile.sh")
    js = create(a, sid, "i", startup_source=[missing], env={"A": "1"})
    assert js["status"] == "Failed" and js["result"] is None, js
    assert js["message"] == "create session failed", js
    assert js["error"].startswith("Failed to initialize OpenSandbox session with exit code 1: '"), js
    assert missing + ": No such file or directory'" in js["error"], js
    assert redis.cli("HEXISTS", key, "i") == "0"
    assert execd_session_count(sim, osid) == 0
    js = create(b, sid, "i")
    assert js["status"] == "Success", js
    b.ok("POST", "/close_session", {"sandbox_id": sid, "session": "i"})

    slow = os.path.join(tmpdir(), "slow-profile.sh")
    a.ok("POST", "/write_file", {"sandbox_id": sid, "path": slow,
                                 "content": "echo starting\nsleep 60\necho done\n"})
    t0 = time.time()
    js = create(b, sid, "t", startup_source=[slow], startup_timeout=1)
    took = time.time() - t0
    assert_plain_failure(js, "create session failed",
                         "Timeout (1.0s) exceeded while initializing OpenSandbox session")
    assert took < 45, took  # the init would take 60 s without the startup timeout
    assert redis.cli("HEXISTS", key, "t") == "0"
    assert execd_session_count(sim, osid) == 0
    js = create(a, sid, "t")
    assert js["status"] == "Success", js
    assert execd_session_count(sim, osid) == 1
    # U27: startup_timeout defaults to 1.0 s.
    js = create(a, sid, "d", startup_source=[slow])
    assert_plain_failure(js, "create session failed",
                         "Timeout (1.0s) exceeded while initializing OpenSandbox session")
    assert redis.cli("HEXISTS", key, "d") == "0"
    assert execd_session_count(sim, osid) == 1


@test
def init_upstream_failures_clean_up():
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    osid = upstream_id(redis, sid)
    key = "rock:sessions:" + sid
    profile = os.path.join(tmpdir(), "profile.sh")
    a.ok("POST", "/write_file", {"sandbox_id": sid, "path": profile,
                                 "content": "echo one\necho two\nsleep 60\n"})
    # The init stream is cut (no terminal event): upstream error, session closed.
    faults(sim, {"cut_stream_after": 2})
    js = create(a, sid, "cut", startup_source=[profile], startup_timeout=5)
    faults(sim)
    assert js["status"] == "Failed" and js["result"]["code"] == 5000, js
    assert js["message"] == "create session failed", js
    assert redis.cli("HEXISTS", key, "cut") == "0"
    assert execd_session_count(sim, osid) == 0
    # The init stream stalls: execd never answers, the admin's own deadline
    # (startup_timeout + command_timeout_margin) gives the init timeout text.
    faults(sim, {"stall_stream_after": 1})
    t0 = time.time()
    js = create(b, sid, "stall", startup_source=[profile], startup_timeout=1)
    took = time.time() - t0
    faults(sim)
    assert_plain_failure(js, "create session failed",
                         "Timeout (1.0s) exceeded while initializing OpenSandbox session")
    assert took < 45, took  # the stalled init would never end without the deadline
    assert redis.cli("HEXISTS", key, "stall") == "0"
    assert execd_session_count(sim, osid) == 0
    assert create(a, sid, "stall")["status"] == "Success"


@test
def run_stream_ended_early_is_a_clear_error():
    """execd closes a session run's event stream without its completion event (the real
    execd behind its /proxy path did, ~1 in 200): the client gets a clear 5000 saying the
    upstream stream ended early and that the command may have run (it is never re-sent:
    running it again could repeat its effects), and the session stays usable."""
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    assert create(a, sid, "bg")["status"] == "Success"
    marker = "/tmp/rock-early-%s" % sid
    faults(sim, {"cut_stream_after": 2})
    # The marker first: the simulator ends a session run whose client left (the cut), so a
    # marker written after the first output line could lose that race on a loaded machine.
    js = run_cmd(b, sid, "bg", "echo ran >> %s; echo one; echo two; echo three" % marker)
    faults(sim)
    assert js["status"] == "Failed" and js["message"] == "run in session failed", js
    assert js["result"]["code"] == 5000, js
    assert "upstream stream ended early" in js["error"], js
    assert "the command may have run, so it was not retried" in js["error"], js
    wait_until(lambda: out_of(a, sid, "bg", "cat %s 2>/dev/null || true" % marker) == "ran\n",
               10, 0.2, "the command ran exactly once")
    assert out_of(b, sid, "bg", "rm -f %s; echo fine" % marker) == "fine\n"


@test
def background_job_then_disown_of_an_ended_job():
    """The ROCK SDK's nohup pattern `nohup cmd < /dev/null > out 2>&1 & echo PID...; disown`:
    when the job has already ended (and bash reaped it) before `disown` runs, bash fails with
    "disown: current: no such job", exit 1 - at random on the real execd with a quick job, and
    every time here (the sleep lets the job end first). The run is reported as it is when the
    job still runs: output without that line, exit code 0. Other failures keep their code."""
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    assert create(a, sid, "bg")["status"] == "Success"
    js = run_cmd(b, sid, "bg", "nohup true < /dev/null > /dev/null 2>&1 & "
                               "echo PIDSTART${!}PIDEND; sleep 0.5;disown")
    assert js["status"] == "Success", js
    r = js["result"]
    assert r["exit_code"] == 0 and re.fullmatch(r"PIDSTART\d+PIDEND\n", r["output"]), r
    # a job still running: the same answer
    js = run_cmd(a, sid, "bg", "nohup sleep 2 < /dev/null > /dev/null 2>&1 & "
                               "echo PIDSTART${!}PIDEND;disown")
    assert js["status"] == "Success" and js["result"]["exit_code"] == 0, js
    # a disown that fails for another reason, or a command that does not end with disown,
    # keeps its exit code and output
    # (a failed run: Failed, the exit code and output in the error, as for any command)
    js = run_cmd(a, sid, "bg", "echo x; disown %9")
    assert js["status"] == "Failed" and "exit code 1" in js["error"], js
    assert "no such job" in js["error"], js
    # (whether bash prints the disown message here depends on when it cleaned its job table:
    # the simulator's `bash -c` does, the real execd's script did not; the exit code is false's)
    js = run_cmd(a, sid, "bg", "true & sleep 0.5; disown; echo after; false")
    assert js["status"] == "Failed" and "exit code 1" in js["error"], js
    assert "after" in js["error"], js


@test
def run_in_session_check_policies_interactive_and_timeouts():
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    assert create(a, sid, "r")["status"] == "Success"
    cmd = "echo oops && false"
    assert_plain_failure(run_cmd(b, sid, "r", cmd), "run in session failed",
                         "Command 'echo oops && false' failed with exit code 1. "
                         "Here is the output:\n'oops\\n'")
    assert_plain_failure(run_cmd(a, sid, "r", cmd, check="raise", error_msg="prefix"),
                         "run in session failed",
                         "prefix: Command 'echo oops && false' failed with exit code 1. "
                         "Here is the output:\n'oops\\n'")
    js = run_cmd(b, sid, "r", "echo out; echo err >&2; exit 2", check="silent")
    assert js["status"] == "Success", js
    assert js["result"] == {"session_type": "bash", "output": "out\nerr\n", "exit_code": 2,
                            "failure_reason": "", "expect_string": ""}, js
    js = run_cmd(a, sid, "r", cmd, check="ignore")
    assert js["status"] == "Success", js
    assert "exit_code" not in js["result"] and js["result"]["output"] == "oops\n", js
    js = run_cmd(a, sid, "r", "echo fine", check="ignore")
    assert "exit_code" not in js["result"] and js["result"]["output"] == "fine\n", js

    for extra in ({"is_interactive_command": True}, {"is_interactive_quit": True},
                  {"expect": ["$ "]}):
        js = run_cmd(b, sid, "r", "python3", **extra)
        assert_bad_request(js, "run in session failed",
                           "OpenSandbox sessions do not support interactive commands")
        # U30: an unknown name is reported before the interactive check.
        assert_plain_failure(run_cmd(a, sid, "nope", "python3", **extra),
                             "run in session failed", "session 'nope' does not exist")

    t0 = time.time()
    js = run_cmd(a, sid, "r", "sleep 60", timeout=1)
    took = time.time() - t0
    assert_plain_failure(js, "run in session failed",
                         "Timeout (1.0s) exceeded while running session command")
    assert took < 45, took  # the command itself would take 60 s
    assert out_of(b, sid, "r", "echo after-timeout") == "after-timeout\n"
    assert_plain_failure(run_cmd(b, sid, "r", "sleep 5", timeout=0.5), "run in session failed",
                         "Timeout (0.5s) exceeded while running session command")

    # execd hangs (stream stalls after its init event): the admin's own
    # deadline (timeout + margin) still answers.
    assert create(a, sid, "stall")["status"] == "Success"
    faults(sim, {"stall_stream_after": 1})
    t0 = time.time()
    js = run_cmd(b, sid, "stall", "sleep 60", timeout=1)
    took = time.time() - t0
    faults(sim)
    assert_plain_failure(js, "run in session failed",
                         "Timeout (1.0s) exceeded while running session command")
    assert 2.5 <= took < 45, took  # not before timeout + margin; long before the sleep
    a.ok("POST", "/close_session", {"sandbox_id": sid, "session": "stall"})

    # nohup-mode style: the run returns at once, the background pid dies later.
    outfile = os.path.join(tmpdir(), "x.out")
    t0 = time.time()
    out = out_of(a, sid, "r", "nohup sleep 8 < /dev/null > %s 2>&1 & echo PIDSTART${!}PIDEND;"
                 "disown" % outfile)
    assert time.time() - t0 < 8, "the run waited for its background process"
    assert out.startswith("PIDSTART") and out.rstrip("\n").endswith("PIDEND"), out
    pid = int(out.strip()[len("PIDSTART"):-len("PIDEND")])
    # The background process outlives the run that started it...
    res = b.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "r",
                                           "command": "kill -0 %d" % pid})
    assert res["exit_code"] == 0 and os.path.exists(outfile), res
    # ...and is gone eventually.

    def gone():
        js = run_cmd(b, sid, "r", "kill -0 %d" % pid)
        return js if js["status"] == "Failed" else None
    js = wait_until(gone, 60, 0.2, "background pid %d to exit" % pid)
    assert js["error"].startswith("Command 'kill -0 %d' failed with exit code 1." % pid), js
    assert js["result"] is None, js


@test
def delete_removes_all_mappings_and_later_calls_fail_cleanly():
    bridge_only()
    redis, sim, a, b = setup()
    sid = a.start_sandbox()
    other = a.start_sandbox()
    key = "rock:sessions:" + sid
    for name in ("s1", "s2", "s3"):
        assert create(a if name != "s2" else b, sid, name)["status"] == "Success"
    assert create(b, other, "s1")["status"] == "Success"
    assert redis.cli("HLEN", key) == "3"
    b.ok("POST", "/delete", {"sandbox_id": sid})
    assert redis.cli("EXISTS", key) == "0"
    for admin in (a, b):
        for route, body, message in (
                ("/run_in_session", {"sandbox_id": sid, "session": "s1", "command": "echo"},
                 "run in session failed"),
                ("/create_session", {"sandbox_id": sid, "session": "s1"},
                 "create session failed"),
                ("/close_session", {"sandbox_id": sid, "session": "s2"},
                 "close session failed")):
            st, js = admin.api("POST", route, body)
            assert st == 200 and js["status"] == "Failed", js
            assert js["message"] == message, js
            assert js["error"] in ("Sandbox %s not found" % sid,
                                   "Sandbox %s is not running (state=deleted)" % sid), js
            assert js["result"]["code"] == 4000, js
    assert redis.cli("EXISTS", key) == "0"
    # The other sandbox's mapping is untouched.
    assert redis.cli("HLEN", "rock:sessions:" + other) == "1"
    assert out_of(a, other, "s1", "echo still") == "still\n"
    # A new sandbox under the same id starts with no names.
    assert b.start_sandbox(sandbox_id=sid) == sid
    assert_plain_failure(run_cmd(a, sid, "s1", "true"), "run in session failed",
                         "session 's1' does not exist")
    assert create(a, sid, "s1")["status"] == "Success"



@test
def in_process_registry_without_redis():
    """Without Redis the registry lives in the process: same rules, and a
    delete clears the sandbox's names (checked by reusing the sandbox id)."""
    sim = Sim(api_key=KEY)
    # No reconciler: its list calls would count as upstream calls in flight below.
    a = Admin(operator="opensandbox", config={
        "opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": KEY},
        "runtime": {"reconcile_interval_ms": 0}})
    sid = a.start_sandbox()
    osid = upstream_id_by_list(sim, sid)
    assert create(a, sid, "m", env={"V": "1"})["status"] == "Success"
    assert_plain_failure(create(a, sid, "m"), "create session failed",
                         "session 'm' already exists")
    assert out_of(a, sid, "m", "echo $V") == "1\n"
    js = create(a, sid, "bad", startup_source=["/nonexistent/rock-profile.sh"])
    assert js["status"] == "Failed" and js["error"].startswith(
        "Failed to initialize OpenSandbox session with exit code 1: "), js
    assert create(a, sid, "bad")["status"] == "Success"
    assert execd_session_count(sim, osid) == 2
    # An in-flight reservation is taken but invisible to lookups.
    faults(sim, {"execd_latency_ms": 5000})
    box = {}
    th = threading.Thread(target=lambda: box.update(reply=create(a, sid, "slow")))
    th.start()
    # Without Redis the reservation cannot be seen from outside: wait until the
    # create is in its 5 s execd call (it reserves the name before that call; a
    # request counts as in flight from its headers on, before it reserves).
    wait_until(lambda: inflight(a) == 1 and upstream_inflight(a) == 1, 20, 0.02,
               "create_session in its execd call")
    assert_plain_failure(create(a, sid, "slow"), "create session failed",
                         "session 'slow' already exists")
    assert_plain_failure(run_cmd(a, sid, "slow", "true"), "run in session failed",
                         "session 'slow' does not exist")
    th.join(20)
    faults(sim)
    assert box["reply"]["status"] == "Success", box
    assert out_of(a, sid, "slow", "echo committed") == "committed\n"
    a.ok("POST", "/delete", {"sandbox_id": sid})
    js = run_cmd(a, sid, "m", "true")
    assert js["status"] == "Failed" and js["result"]["code"] == 4000, js
    assert js["error"] in ("Sandbox %s not found" % sid,
                           "Sandbox %s is not running (state=deleted)" % sid), js
    again = a.start_sandbox(sandbox_id=sid)
    assert again == sid
    assert_plain_failure(run_cmd(a, sid, "m", "true"), "run in session failed",
                         "session 'm' does not exist")
    assert create(a, sid, "m")["status"] == "Success"


def upstream_id_by_list(sim, sid):
    st, js = sim.request("GET", "/v1/sandboxes?metadata=rock_sandbox_id%3D" + sid)
    assert st == 200 and len(js["items"]) == 1, (st, js)
    return js["items"][0]["id"]

if __name__ == "__main__":
    run()
