# SPDX-License-Identifier: Apache-2.0
"""The whole ROCK lifecycle on OpenSandbox, end to end through
rock-admin + the OpenSandbox simulator + a real redis-server, in every
opensandbox.stop_mode:

  refuse (default)  stop/restart/archive refused byte for byte as documented
  delete            /stop kills; an unknown id is still "not found"
  pause             /stop pauses (SIGSTOP in the simulator), /restart resumes
  + archive_enabled /archive snapshots, restart restores under the same ROCK id

Every assertion is about what a ROCK client sees (rock-admin-api.md §4.2,
§4.5, §5.12-§5.15) plus what really happened in the simulator (its lifecycle
API and fault switches, /_sim/faults).
"""
import json
import os
import signal
import sys
import time

import harness
from harness import PREFIX, Admin, Redis, Sim, free_port, os_api_key, run, test, wait_until

os.environ.pop("OPEN_SANDBOX_API_KEY", None)

API_KEY = os_api_key("sim-key-1")
STOP_TEXT = ("OpenSandbox backend does not support stop by default. OpenSandbox pause requires "
             "creating the sandbox with persistence enabled; use delete instead.")
RESTART_TEXT = ("OpenSandbox backend does not support restart by default. OpenSandbox resume "
                "requires creating the sandbox with persistence enabled; create a new sandbox "
                "instead.")
ARCHIVE_TEXT = "archive not supported on OpenSandboxOperator"
START = {"image": "python:3.11", "memory": "2g", "cpus": 1, "auto_clear_time_minutes": 5,
         "startup_timeout": 180}


# ---- helpers --------------------------------------------------------------------

def setup(redis=None, sim=None, admin_cfg=None, **os_over):
    redis = redis or Redis()
    sim = sim or Sim(api_key=API_KEY)
    c = {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY}
    c.update(os_over)
    cfg = {"opensandbox": c}
    cfg.update(admin_cfg or {})
    return Admin(operator="opensandbox", config=cfg, redis=redis), sim, redis


def status(admin, sid, all_states=True):
    return admin.api("GET", "/get_status", query={
        "sandbox_id": sid, "include_all_states": "True" if all_states else "False"})[1]


def state_of(admin, sid):
    js = status(admin, sid)
    assert js["status"] == "Success", js
    return js["result"]


def start_alive(admin, **over):
    b = dict(START)
    b.update(over)
    sid = admin.ok("POST", "/start_async", b)["sandbox_id"]
    admin.wait_alive(sid, timeout=30)
    return sid


def run_ok(admin, sid, command):
    st, js = admin.api("POST", "/execute", {"sandbox_id": sid, "command": command,
                                            "timeout": 60})
    assert st == 200 and js["status"] == "Success", js
    return js["result"]


def sim_state(sim, osid):
    st, js = sim.request("GET", "/v1/sandboxes/" + osid)
    return js["status"]["state"] if st == 200 else st


def faults(sim, cfg=None):
    st, _ = (sim.request("DELETE", "/_sim/faults") if cfg is None
             else sim.request("POST", "/_sim/faults", cfg))
    assert st in (200, 204), st


def events(rec):
    return [(h["from_state"], h["to_state"], h["event"]) for h in rec["state_history"]]


def wait_state(admin, sid, want, timeout=60):
    return wait_until(lambda: (lambda r: r if r["state"] == want else None)(
        state_of(admin, sid)), timeout, 0.2, "state %s of %s" % (want, sid))


def wait_alive_all_states(admin, sid, timeout=60):
    """How the SDKs wait after restart: get_status(include_all_states=True)
    until is_alive, failing fast on a failed phase."""
    def alive():
        r = state_of(admin, sid)
        for ph in r["status"].values():
            assert ph["status"] not in ("failed", "timeout"), r
        return r if r["is_alive"] else None
    return wait_until(alive, timeout, 0.2, "sandbox %s alive again" % sid)


def redis_record(redis, sid):
    raw = redis.cli("GET", "rock:sandbox:" + sid)
    return json.loads(raw) if raw else None


# ---- refuse (default) --------------------------------------------------------------

@test
def refuse_mode_is_the_documented_refusal():
    admin, sim, redis = setup()
    sid = start_alive(admin)
    st, js = admin.api("POST", "/stop", {"sandbox_id": sid})
    assert st == 200 and js == {"status": "Failed", "message": "stop sandbox failed",
                                "error": STOP_TEXT,
                                "result": {"code": 4000, "exit_code": None,
                                           "failure_reason": STOP_TEXT}}, js
    st, js = admin.api("POST", "/sandboxes/%s/restart" % sid, None)
    assert js["status"] == "Failed" and js["error"] == RESTART_TEXT, js
    st, js = admin.api("POST", "/restart", {"sandbox_id": sid})
    assert js["error"] == RESTART_TEXT and js["result"]["code"] == 4000, js
    st, js = admin.api("POST", "/sandboxes/%s/archive" % sid, {})
    assert js["error"] == ARCHIVE_TEXT and js["result"]["code"] == 4000, js
    # the dispatch order: an unknown id is "not found" before any refusal
    for route, body in (("/stop", {"sandbox_id": "nope"}), ("/restart", {"sandbox_id": "nope"})):
        js = admin.api("POST", route, body)[1]
        assert js["error"] == "Sandbox nope not found", js
    r = state_of(admin, sid)
    assert r["state"] == "running" and r["is_alive"] and r["stop_time"] is None, r
    assert sim_state(sim, r["host_name"]) == "Running"


# ---- delete ---------------------------------------------------------------------------

@test
def delete_mode_kills_and_unknown_is_not_found():
    admin, sim, redis = setup(stop_mode="delete")
    sid = start_alive(admin)
    osid = state_of(admin, sid)["host_name"]
    js = admin.api("POST", "/stop", {"sandbox_id": "never-existed"})[1]
    assert js["status"] == "Failed" and js["error"] == "Sandbox never-existed not found" and \
        js["result"]["code"] == 4000, js
    assert admin.ok("POST", "/stop", {"sandbox_id": sid}) == sid + " stopped"
    r = state_of(admin, sid)
    assert r["state"] == "deleted" and r["delete_time"], r
    assert sim_state(sim, osid) in (404, "Terminated")
    # restart stays refused (there is nothing to resume)
    js = admin.api("POST", "/restart", {"sandbox_id": sid})[1]
    assert js["error"] == RESTART_TEXT, js
    # the deprecated runtime.stop_as_delete still works, with a warning, and
    # also answers "not found" for an unknown id
    b, _, _ = setup(redis=redis, sim=sim, admin_cfg={"runtime": {"stop_as_delete": True}})
    assert "runtime.stop_as_delete is deprecated" in b.output()
    js = b.api("POST", "/stop", {"sandbox_id": "never-existed"})[1]
    assert js["error"] == "Sandbox never-existed not found", js
    sid2 = start_alive(b)
    assert b.ok("POST", "/stop", {"sandbox_id": sid2}) == sid2 + " stopped"
    assert state_of(b, sid2)["state"] == "deleted"


# ---- pause ----------------------------------------------------------------------------

@test
def pause_stop_restart_keeps_files_and_processes():
    redis = Redis()
    admin, sim, _ = setup(redis=redis, stop_mode="pause")
    other, _, _ = setup(redis=redis, sim=sim, stop_mode="pause")  # a second admin process
    sid = start_alive(admin)
    osid = state_of(admin, sid)["host_name"]
    run_ok(admin, sid, "echo kept > /tmp/kept.txt")
    # a background process that keeps counting
    run_ok(admin, sid, "nohup sh -c 'while true; do echo x >> /tmp/ticks; sleep 0.1; done' "
                       ">/dev/null 2>&1 & echo $! > /tmp/ticker.pid")
    assert redis.cli("ZSCORE", "rock:expire", sid) != ""

    assert admin.ok("POST", "/stop", {"sandbox_id": sid}) == sid + " stopped"
    assert sim_state(sim, osid) == "Paused"
    for a in (admin, other):  # both processes see the same record
        r = state_of(a, sid)
        assert r["state"] == "stopped" and not r["is_alive"] and r["stop_time"], r
        assert ("running", "stopped", "stop") in events(r), r
    # stopped is not active: plain get_status, list and the idle timer drop it
    js = status(admin, sid, all_states=False)
    assert js["error"] == "Sandbox %s not found" % sid, js
    assert redis.cli("ZSCORE", "rock:expire", sid) == ""
    js = admin.api("POST", "/execute", {"sandbox_id": sid, "command": "true"})[1]
    assert js["error"] == "Sandbox %s is not running (state=stopped)" % sid, js
    # the processes are really stopped: the tick file does not grow
    # (checked after resume: the count right after resume is the count at pause)
    assert admin.ok("POST", "/stop", {"sandbox_id": sid}) == sid + " stopped"  # idempotent
    js = admin.api("POST", "/sandboxes/%s/archive" % sid, {})[1]
    assert js["error"] == ARCHIVE_TEXT, js  # archive stays off unless enabled

    # restart through the other admin, path form; the SDK polls get_status
    res = other.ok("POST", "/sandboxes/%s/restart" % sid, None)
    assert res["sandbox_id"] == sid, res
    r = wait_alive_all_states(admin, sid)
    assert r["state"] == "running" and r["host_name"] == osid, r
    ev = events(r)
    assert ("stopped", "pending", "restart") in ev and ev[-1] == ("pending", "running", "alive"), ev
    assert redis.cli("ZSCORE", "rock:expire", sid) != ""  # the idle timer runs again
    assert run_ok(admin, sid, "cat /tmp/kept.txt")["stdout"] == "kept\n"
    assert run_ok(admin, sid, "kill -0 $(cat /tmp/ticker.pid) && echo alive")["stdout"] == \
        "alive\n"
    n0 = int(run_ok(admin, sid, "wc -l < /tmp/ticks")["stdout"])
    wait_until(lambda: int(run_ok(admin, sid, "wc -l < /tmp/ticks")["stdout"]) > n0 + 3, 20, 0.2,
               "the background process to keep counting after resume")
    # body form of restart on a running sandbox: the state machine refuses it
    js = admin.api("POST", "/restart", {"sandbox_id": sid})[1]
    assert js["error"] == "Sandbox %s cannot be restarted: current state is 'running'" % sid, js
    # stop again, then delete a stopped sandbox
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    assert admin.ok("POST", "/delete", {"sandbox_id": sid}) == sid + " deleted"
    r = state_of(other, sid)
    assert r["state"] == "deleted" and ("stopped", "deleted", "delete") in events(r), r
    assert sim_state(sim, osid) in (404, "Terminated")
    js = admin.api("POST", "/stop", {"sandbox_id": sid})[1]
    assert js["error"] == "Sandbox %s cannot be stopped: current state is 'deleted'" % sid, js


def session_api(admin, route, sid, name, **extra):
    body = {"sandbox_id": sid, "session": name}
    body.update(extra)
    return admin.api("POST", route, body)[1]


@test
def pause_restart_gives_fresh_sessions():
    """ROCK clients re-create their sessions after a restart (a restart gives a fresh
    process tree in ROCK). After /stop + /restart in pause mode the old sessions are
    closed upstream and their names are free, so "create session, run" works again;
    files and processes started outside sessions survive."""
    redis = Redis()
    admin, sim, _ = setup(redis=redis, stop_mode="pause")
    other, _, _ = setup(redis=redis, sim=sim, stop_mode="pause")
    sid = start_alive(admin)
    osid = state_of(admin, sid)["host_name"]
    for name in ("default", "second"):
        js = session_api(admin, "/create_session", sid, name)
        assert js["status"] == "Success", js
    js = session_api(admin, "/run_in_session", sid, "default", action_type="bash",
                     command="export OLD=1; cd /tmp; echo kept > /tmp/sess-file")
    assert js["status"] == "Success", js
    old_sid = redis.cli("HGET", "rock:sessions:" + sid, "default")[2:]
    assert admin.ok("POST", "/stop", {"sandbox_id": sid}) == sid + " stopped"
    other.ok("POST", "/restart", {"sandbox_id": sid})  # through the other process
    wait_alive_all_states(admin, sid)
    assert redis.cli("HLEN", "rock:sessions:" + sid) == "0"  # names free at once
    # the old execd session is gone upstream (not just forgotten)
    st, js = sim.execd_request(osid, "POST", "/session/%s/run" % old_sid,
                               {"command": "echo still-there"})
    assert st == 500 and "context not found" in js["message"], (st, js)  # execd: unknown session
    for a, name in ((admin, "default"), (other, "second")):
        js = session_api(a, "/create_session", sid, name)
        assert js["status"] == "Success", js  # was: "session 'default' already exists"
    js = session_api(admin, "/run_in_session", sid, "default", action_type="bash",
                     command="echo \"[$OLD]\" $(pwd); cat /tmp/sess-file")
    assert js["status"] == "Success", js
    out = js["result"]["output"].split("\n")
    assert out[0].startswith("[] ") and out[0] != "[] /tmp" and out[1] == "kept", js  # fresh
    # shell (no old variables or cwd), files kept
    assert session_api(other, "/close_session", sid, "second")["status"] == "Success"
    admin.ok("POST", "/delete", {"sandbox_id": sid})


@test
def pause_not_supported_reaches_the_client():
    admin, sim, redis = setup(stop_mode="pause")
    sid = start_alive(admin)
    osid = state_of(admin, sid)["host_name"]
    faults(sim, {"pause_unsupported": True})
    st, js = admin.api("POST", "/stop", {"sandbox_id": sid})
    assert st == 200 and js["status"] == "Failed" and js["result"]["code"] == 4000, js
    assert js["error"].startswith("opensandbox pause failed for %s: " % osid), js
    r = state_of(admin, sid)
    assert r["state"] == "running" and r["is_alive"] and r["stop_time"] is None, r
    faults(sim, {"pause_fail": True})
    js = admin.api("POST", "/stop", {"sandbox_id": sid})[1]
    assert js["status"] == "Failed", js
    r = state_of(admin, sid)
    assert r["state"] == "running" and r["is_alive"], r
    faults(sim)  # a retry works once OpenSandbox can pause again
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    assert state_of(admin, sid)["state"] == "stopped"
    assert sim_state(sim, osid) == "Paused"
    # the paused sandbox disappears upstream (e.g. its lifetime ran out): a
    # restart reports it and the record becomes deleted
    st, _ = sim.request("DELETE", "/v1/sandboxes/" + osid)
    assert st == 204, st
    js = admin.api("POST", "/restart", {"sandbox_id": sid})[1]
    assert js["status"] == "Failed" and js["result"]["code"] == 4000, js
    r = state_of(admin, sid)
    assert r["state"] == "deleted" and ("stopped", "deleted", "vanished") in events(r), r


# ---- archive / restore ------------------------------------------------------------------

def sim_snapshot(sim, snap):
    st, js = sim.request("GET", "/v1/snapshots/" + snap)
    return js["status"]["state"] if st == 200 else st


@test
def archive_restore_same_rock_id():
    admin, sim, redis = setup(stop_mode="pause", archive_enabled=True)
    sid = start_alive(admin)
    osid = state_of(admin, sid)["host_name"]
    run_ok(admin, sid, "mkdir -p /tmp/w && echo before-archive > /tmp/w/data.txt")
    js = admin.api("POST", "/sandboxes/%s/archive" % sid, {})[1]
    assert js["error"] == "Sandbox %s cannot be archived: current state is 'running'" % sid, js
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    assert admin.ok("POST", "/sandboxes/%s/archive" % sid, {}) == sid + " archiving"
    r = wait_state(admin, sid, "archived")
    ev = events(r)
    assert ("stopped", "archiving", "archive") in ev and \
        ("archiving", "archived", "archive_done") in ev, ev
    assert r["archive_time"] and not r["is_alive"], r
    snap = redis_record(redis, sid)["snapshot_id"]
    assert sim_snapshot(sim, snap) == "Ready"
    # status reads during the archive never start a second job: one snapshot
    st, js = sim.request("GET", "/v1/snapshots?sandboxId=" + osid)
    assert st == 200 and [i["id"] for i in js["items"]] == [snap], js
    assert sim_state(sim, osid) in (404, "Terminated")  # the source was released
    js = admin.api("POST", "/execute", {"sandbox_id": sid, "command": "true"})[1]
    assert js["status"] == "Failed", js

    res = admin.ok("POST", "/restart", {"sandbox_id": sid})
    assert res["sandbox_id"] == sid
    r = wait_alive_all_states(admin, sid)
    assert r["sandbox_id"] == sid and r["state"] == "running", r
    assert r["host_name"] != osid, r  # a new OpenSandbox sandbox under the same ROCK id
    ev = events(r)
    assert ("archived", "pending", "restore") in ev and ev[-1] == ("pending", "running", "alive")
    assert run_ok(admin, sid, "cat /tmp/w/data.txt")["stdout"] == "before-archive\n"
    # archive the restored one again, then delete in archived state: the
    # snapshot goes too
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    admin.ok("POST", "/sandboxes/%s/archive" % sid, {})
    wait_state(admin, sid, "archived")
    snap2 = redis_record(redis, sid)["snapshot_id"]
    assert snap2 != snap and sim_snapshot(sim, snap) == 404  # the old one is gone
    # start_async with the id of an archived sandbox restores it too (as ROCK)
    b = dict(START)
    b["sandbox_id"] = sid
    assert admin.ok("POST", "/start_async", b)["sandbox_id"] == sid
    wait_alive_all_states(admin, sid)
    assert run_ok(admin, sid, "cat /tmp/w/data.txt")["stdout"] == "before-archive\n"
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    admin.ok("POST", "/sandboxes/%s/archive" % sid, {})
    wait_state(admin, sid, "archived")
    snap2 = redis_record(redis, sid)["snapshot_id"]
    assert admin.ok("POST", "/delete", {"sandbox_id": sid}) == sid + " deleted"
    r = state_of(admin, sid)
    assert r["state"] == "deleted" and ("archived", "deleted", "delete") in events(r), r
    assert sim_snapshot(sim, snap2) == 404


@test
def archive_faults_leave_a_consistent_record():
    admin, sim, redis = setup(stop_mode="pause", archive_enabled=True)
    sid = start_alive(admin)
    osid = state_of(admin, sid)["host_name"]
    run_ok(admin, sid, "echo v1 > /tmp/v.txt")
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    # the snapshot fails: back to stopped, the sandbox paused again
    faults(sim, {"snapshot_fail": True})
    admin.ok("POST", "/sandboxes/%s/archive" % sid, {})
    r = wait_state(admin, sid, "stopped")
    assert ("archiving", "stopped", "archive_failed") in events(r), r
    assert sim_state(sim, osid) == "Paused"
    assert "snapshot_id" not in redis_record(redis, sid)
    # a retry succeeds once the snapshot works
    faults(sim)
    admin.ok("POST", "/sandboxes/%s/archive" % sid, {})
    wait_state(admin, sid, "archived")
    # a failed restore goes back to archived; a retry restores
    faults(sim, {"restore_fail": True})
    admin.ok("POST", "/restart", {"sandbox_id": sid})
    r = wait_state(admin, sid, "archived")
    assert ("pending", "archived", "restore_failed") in events(r), r
    faults(sim)
    admin.ok("POST", "/restart", {"sandbox_id": sid})
    wait_alive_all_states(admin, sid)
    assert run_ok(admin, sid, "cat /tmp/v.txt")["stdout"] == "v1\n"
    # delete in archiving state is refused by the state machine
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    faults(sim, {"snapshot_delay_ms": 3000})
    admin.ok("POST", "/sandboxes/%s/archive" % sid, {})
    js = admin.api("POST", "/delete", {"sandbox_id": sid})[1]
    assert js["error"] == ("Sandbox %s cannot be deleted: current state is 'archiving', must be "
                           "stopped or archived first" % sid), js
    wait_state(admin, sid, "archived")
    admin.ok("POST", "/delete", {"sandbox_id": sid})


@test
def archive_checks_in_rocks_order():
    admin, sim, redis = setup(stop_mode="pause", archive_enabled=True,
                              admin_cfg={"runtime": {"archive_keys": "key-a, key-b"}})
    assert "key-a" not in admin.output()  # the allow-list is secret
    sid = start_alive(admin)
    path = "/sandboxes/%s/archive" % sid
    # key allow-list before the id and the state
    for hdrs in (None, {"X-Key": "key-c"}):
        js = admin.api("POST", "/sandboxes/nope/archive", {}, headers=hdrs)[1]
        assert js["error"] == "archive not allowed for this authorization key" and \
            js["result"]["code"] == 4000, js
    js = admin.api("POST", "/sandboxes/nope/archive", {}, headers={"X-Key": "key-b"})[1]
    assert js["error"] == "Sandbox nope not found", js
    js = admin.api("POST", path, {}, headers={"X-Key": "key-b"})[1]
    assert js["error"] == "Sandbox %s cannot be archived: current state is 'running'" % sid, js
    admin.ok("POST", "/stop", {"sandbox_id": sid})
    assert admin.ok("POST", path, {}, headers={"X-Key": "key-a"}) == sid + " archiving"
    wait_state(admin, sid, "archived")
    admin.ok("POST", "/delete", {"sandbox_id": sid})


@test
def admin_killed_mid_archive_is_taken_over():
    redis = Redis()
    a, sim, _ = setup(redis=redis, stop_mode="pause", archive_enabled=True)
    b, _, _ = setup(redis=redis, sim=sim, stop_mode="pause", archive_enabled=True)
    sid = start_alive(a)
    run_ok(a, sid, "echo survived > /tmp/s.txt")
    a.ok("POST", "/stop", {"sandbox_id": sid})
    faults(sim, {"snapshot_delay_ms": 4000})
    a.ok("POST", "/sandboxes/%s/archive" % sid, {})
    wait_until(lambda: (redis_record(redis, sid) or {}).get("snapshot_id"), 30, 0.1,
               "the snapshot id recorded")
    a.check_exit = False
    a.kill()  # SIGKILL mid-archive
    assert state_of(b, sid)["state"] == "archiving"
    # reads by the surviving admin take the job over once its lease ran out
    r = wait_state(b, sid, "archived", timeout=90)
    assert ("archiving", "archived", "archive_done") in events(r), r
    assert "taking it over" in b.output()
    faults(sim)
    b.ok("POST", "/restart", {"sandbox_id": sid})
    wait_alive_all_states(b, sid)
    assert run_ok(b, sid, "cat /tmp/s.txt")["stdout"] == "survived\n"
    b.ok("POST", "/delete", {"sandbox_id": sid})


@test
def dead_jobs_are_taken_over_without_the_reconciler():
    # With the reconciler off (or a plugin that cannot list), the background
    # pass of every admin still takes over the archive and restore jobs of an
    # admin that died.
    redis = Redis()
    off = {"runtime": {"reconcile_interval_ms": 0}}
    a, sim, _ = setup(redis=redis, stop_mode="pause", archive_enabled=True, admin_cfg=off)
    b, _, _ = setup(redis=redis, sim=sim, stop_mode="pause", archive_enabled=True, admin_cfg=off)
    sid = start_alive(a)
    run_ok(a, sid, "echo kept > /tmp/k.txt")
    a.ok("POST", "/stop", {"sandbox_id": sid})
    faults(sim, {"snapshot_delay_ms": 4000})
    a.ok("POST", "/sandboxes/%s/archive" % sid, {})
    wait_until(lambda: (redis_record(redis, sid) or {}).get("snapshot_id"), 30, 0.1,
               "the snapshot id recorded")
    a.check_exit = False
    a.stop(signal.SIGKILL)  # dies mid-archive
    r = wait_state(b, sid, "archived", timeout=60)
    assert ("archiving", "archived", "archive_done") in events(r), r
    assert "archive job lost its admin; taking it over" in b.output()
    faults(sim)

    # An admin that dies mid-restore: its lease covers the one long backend
    # call (15 minutes); once it ran out, the restore goes back to archived.
    c, _, _ = setup(redis=redis, sim=sim, stop_mode="pause", archive_enabled=True, admin_cfg=off)
    faults(sim, {"lifecycle_latency_ms": 30000})
    c.ok("POST", "/restart", {"sandbox_id": sid})
    wait_until(lambda: (redis_record(redis, sid) or {}).get("restoring"), 10, 0.1,
               "the restore under way")
    time.sleep(0.5)  # the restore's create is in flight (held 30 s by the simulator)
    c.check_exit = False
    c.stop(signal.SIGKILL)  # dies mid-restore
    faults(sim)
    time.sleep(6)  # more than one background pass of b: the lease is still valid
    r = state_of(b, sid)
    assert r["state"] == "pending", r
    assert "restore job lost its admin" not in b.output()
    # 15 minutes pass for the lease: written to the past as they would
    rec = redis_record(redis, sid)
    rec["job_lease"] = int(time.time()) - 1
    redis.cli("SET", "rock:sandbox:" + sid, json.dumps(rec))
    r = wait_state(b, sid, "archived", timeout=30)
    assert ("pending", "archived", "restore_failed") in events(r), r
    assert "restore job lost its admin; back to archived" in b.output()
    # and the sandbox restores again through the surviving admin
    b.ok("POST", "/restart", {"sandbox_id": sid})
    wait_alive_all_states(b, sid)
    assert run_ok(b, sid, "cat /tmp/k.txt")["stdout"] == "kept\n"
    b.ok("POST", "/delete", {"sandbox_id": sid})


# ---- lifetime by renewal ------------------------------------------------------------------

def expires_at(sim, osid):
    st, js = sim.request("GET", "/v1/sandboxes/" + osid)
    assert st == 200, (st, js)
    from datetime import datetime
    return datetime.fromisoformat(js["expiresAt"].replace("Z", "+00:00")).timestamp()


@test
def renewal_keeps_a_used_sandbox_and_lets_an_orphan_expire():
    # idle timeout 60 s, margin 10 s: OpenSandbox's expiry is created at
    # +70 s and kept >= idle deadline + 5 s while the sandbox is used.
    admin, sim, redis = setup(renew_margin=10)
    sid = start_alive(admin, auto_clear_time_minutes=1)
    osid = state_of(admin, sid)["host_name"]
    t0 = time.time()
    e0 = expires_at(sim, osid)
    assert 60 <= e0 - t0 <= 75, e0 - t0
    # use it for a while: first commands only, then requests to an app in the
    # sandbox through the HTTP proxy only, then status polls only (as an SDK
    # makes them). Every kind of use keeps the expiry ahead of the idle
    # deadline; each phase outlasts the margin, so a kind of use that did not
    # renew would let the expiry fall behind within it.
    port = free_port()  # free here: the simulator / host networking
    real = harness.real_opensandbox()
    bind = "0.0.0.0" if real and harness.REAL_OS_NETWORK == "bridge" else "127.0.0.1"
    run_ok(admin, sid, "mkdir -p /tmp/rn && cd /tmp/rn && (nohup %s -m http.server %d --bind %s "
           ">/dev/null 2>&1 & echo $! > /tmp/rn.pid)" % ("python3" if real else sys.executable,
                                                        port, bind))

    def proxied():
        st, _, _ = admin.request("GET", "%s/sandboxes/%s/proxy/port/%d/" % (PREFIX, sid, port),
                                 raw=True)
        assert st == 200, st

    def poll():
        assert status(admin, sid, all_states=False)["result"]["is_alive"]

    seen = e0
    wait_until(lambda: admin.request("GET", "%s/sandboxes/%s/proxy/port/%d/"
                                     % (PREFIX, sid, port), raw=True)[0] == 200, 30, 0.2,
               "the app in the sandbox through the proxy")
    for phase, use in (("commands", lambda: run_ok(admin, sid, "true")),
                       ("proxied requests", proxied), ("status polls", poll)):
        p0 = time.time()
        while time.time() - p0 < 10:
            use()
            now = time.time()
            e = expires_at(sim, osid)
            # idle deadline + margin/2 (2 s slack)
            assert e >= now + 60 + 5 - 2, (phase, e - now)
            seen = max(seen, e)
            time.sleep(0.5)
    assert seen > e0, "never renewed"
    run_ok(admin, sid, "kill $(cat /tmp/rn.pid)")
    # abandoned (rock-admin gone too): OpenSandbox removes it within idle
    # timeout + margin of its last use
    last = time.time()
    admin.check_exit = False
    admin.kill()
    assert expires_at(sim, osid) <= last + 60 + 10 + 2
    wait_until(lambda: sim_state(sim, osid) in (404, "Terminated"), 150, 1,
               "the orphan to expire")


if __name__ == "__main__":
    run()
