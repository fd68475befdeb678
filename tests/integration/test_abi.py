# SPDX-License-Identifier: Apache-2.0
"""The operator ABI's promises, end to end through the daemon:

- a plugin binary built against the exact ABI 1.0 header (testop_v10, see
  tests/plugins/abi-1.0/) loads in the current core and serves requests;
- capability bits have effects: RK_CAP_SESSION_INTERACTIVE passes interactive
  flags and expect strings to a 1.1 plugin (and is refused for a 1.0 plugin,
  which has no fields to receive them); RK_CAP_RESTORE makes a start on an
  archived id restore it;
- host->log_call lines carry the request id of the access log;
- plugins with a newer minor or an unresolved symbol are refused at startup
  with one line naming the reason.
"""
import json
import os
import re
import subprocess

from harness import ADMIN_BIN, Admin, Redis, TEST_PLUGIN_DIR, run, test, tmpdir, wait_until


def session(a, sid, name="s"):
    assert a.ok("POST", "/create_session", {"sandbox_id": sid, "session": name}) == \
        {"output": "", "session_type": "bash"}


@test
def v10_plugin_binary_serves_requests():
    a = Admin(operator="testop_v10")
    sid = a.start_sandbox()
    r = a.ok("POST", "/execute", {"sandbox_id": sid, "command": "echo one-oh"})
    assert r["stdout"] == "one-oh\n" and r["exit_code"] == 0, r
    session(a, sid)
    r = a.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "s",
                                          "command": "echo hi"})
    assert r == {"session_type": "bash", "output": "hi\n", "exit_code": 0,
                 "failure_reason": "", "expect_string": ""}, r
    # The 1.0 plugin sets RK_CAP_SESSION_INTERACTIVE but 1.0 has no fields to
    # carry interactive flags: refused with the plugin's own text.
    st, js = a.api("POST", "/run_in_session", {"sandbox_id": sid, "session": "s",
                                                "command": "x", "expect": ["$"]})
    assert js["status"] == "Failed", js
    assert js["error"] == "testop sessions do not support interactive commands", js
    # Its config schema (walked with the 1.0 element stride) still applies.
    assert a.ok("POST", "/delete", {"sandbox_id": sid}) == sid + " deleted"


@test
def interactive_session_commands_reach_a_capable_plugin():
    a = Admin()
    sid = a.start_sandbox()
    session(a, sid)
    r = a.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "s",
                                          "command": "ready $", "expect": ["#", "$"],
                                          "is_interactive_command": True})
    assert r["output"] == "ready $" and r["expect_string"] == "$", r
    r = a.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "s",
                                          "command": "quit", "is_interactive_quit": True})
    assert r["output"] == "quit" and r["expect_string"] == "", r


@test
def start_on_an_archived_id_restores_it():
    redis = Redis()
    a = Admin(redis=redis)
    sid = "archived-one"
    rec = {"sandbox_id": sid, "state": "archived", "image": "python:3.11", "cpus": 1.0,
           "memory": "2.00g", "user_id": "default", "experiment_id": "default",
           "namespace": "default", "env": {}, "metadata": {}, "state_history": [],
           "create_time": "2026-01-01T00:00:00+08:00", "auto_clear_time": 30,
           "extended_params": {"backend": "testop", "testop_id": "t-" + sid}}
    redis.cli("SET", "rock:sandbox:" + sid, json.dumps(rec))
    res = a.ok("POST", "/start_async", {"image": "python:3.11", "sandbox_id": sid})
    assert res["sandbox_id"] == sid, res
    a.wait_alive(sid)
    stored = json.loads(redis.cli("GET", "rock:sandbox:" + sid))
    hist = [(h["from_state"], h["to_state"], h["event"]) for h in stored["state_history"]]
    assert ("archived", "pending", "restore") in hist, hist
    # The upstream id was kept (no new sandbox was created).
    assert stored["extended_params"]["testop_id"] == "t-" + sid, stored


@test
def log_call_lines_carry_the_request_id():
    a = Admin()
    res = a.ok("POST", "/start_async", {"image": "python:3.11"},
               headers={"X-Request-ID": "abi-test-rid-1"})
    sid = res["sandbox_id"]
    a.wait_alive(sid)
    # The create runs in the background under the same call; its plugin line
    # names the request id that the access log shows.
    m = wait_until(lambda: re.search(r"testop: id=abi-test-rid-1 testop created t-" + sid,
                                     a.output()), 20, 0.1, "log_call line")
    assert m, a.output()
    # The access line is written when the request completes.
    assert wait_until(lambda: re.search(r"access id=abi-test-rid-1 ", a.output()), 20, 0.1,
                      "access log line")


def refused_at_startup(operator):
    """Run rock-admin -t with operator; returns (exit code, output)."""
    cfg = os.path.join(tmpdir(), "rock-admin.yml")
    with open(cfg, "w") as f:
        f.write("runtime:\n  operator_type: %s\n  plugin_dir: %s\n" % (operator, TEST_PLUGIN_DIR))
    p = subprocess.run([ADMIN_BIN, "-t", "-c", cfg], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


@test
def newer_minor_and_unresolved_symbol_are_refused_at_startup():
    rc, out = refused_at_startup("abi_newer_minor")
    assert rc != 0 and "ABI minor check failed" in out, out
    rc, out = refused_at_startup("abi_unresolved")
    assert rc != 0, out
    lines = [l for l in out.splitlines() if "plugin refused" in l]
    assert len(lines) == 1, out
    assert "unresolved symbol check failed: undefined symbol rk_fixture_missing_function" \
        in lines[0], out


if __name__ == "__main__":
    run()
