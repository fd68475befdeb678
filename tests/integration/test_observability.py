# SPDX-License-Identifier: Apache-2.0
"""Observability: a live /metrics passes `promtool check metrics`
and carries the documented families; log.format: json writes one JSON object
per line with the access fields; /openapi.json serves api/openapi.json and
/docs is a self-contained page."""
import json
import os
import re
import shutil
import subprocess

from harness import ADMIN_BIN, PREFIX, Admin, run, test, tmpdir, wait_until

SRC = os.environ.get("ROCK_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def _traffic(a):
    """A little of everything: lifecycle, command, session, files, failures."""
    sid = a.start_sandbox()
    a.ok("POST", "/execute", {"sandbox_id": sid, "command": "echo x"})
    a.ok("POST", "/write_file", {"sandbox_id": sid, "path": "/tmp/o.txt", "content": "hi"})
    a.ok("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/o.txt"})
    a.ok("POST", "/create_session", {"sandbox_id": sid, "session": "s1"})
    a.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "s1", "command": "true"})
    a.api("GET", "/get_status", query={"sandbox_id": "nope"})
    a.request("GET", "/no/such/path")
    return sid


@test
def promtool_accepts_live_metrics():
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: scripts/install-deps.sh installs Debian's prometheus"
    a = Admin()
    sid = _traffic(a)
    # A request is counted when it completes, just after its response was sent
    # (on its connection's event loop): scrape until the last request of the
    # traffic is in and only the scrape itself is in flight.
    settled = ('rock_admin_requests_total{route="unrouted",outcome="client_error"} 1',
               'rock_admin_inflight_requests 1')

    def scrape():
        st, body, headers = a.request("GET", "/metrics", raw=True)
        return (st, body, headers) if all(d in body.decode() for d in settled) else None
    st, body, headers = wait_until(scrape, 30, 0.05, "the traffic counted")
    assert st == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    p = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                       timeout=60)
    out = (p.stdout + p.stderr).decode()
    assert p.returncode == 0 and not out.strip(), "promtool check metrics:\n%s\n%s" % (out, text)
    for needle in (
            'rock_admin_build_info{version="',
            'rock_admin_request_duration_seconds_bucket{class="command",le="+Inf"} ',
            'rock_admin_request_duration_seconds_count{class="lifecycle"} ',
            'rock_admin_upstream_call_duration_seconds_count{op="exec"} 1',
            'rock_admin_upstream_call_duration_seconds_count{op="create"} 1',
            'rock_admin_upstream_calls_total{op="exec",outcome="ok"} 1',
            'rock_admin_upstream_inflight_calls 0',
            'rock_admin_store_duration_seconds_count{op="get"} ',
            'rock_admin_inflight_requests 1',
            'rock_admin_requests_total{route="unrouted",outcome="client_error"} 1',
            'rock_admin_process_start_time_seconds '):
        assert needle in text, "%r missing from:\n%s" % (needle, text)
    assert sid not in text  # no per-sandbox labels
    # Every family is documented in docs/operations.md.
    with open(os.path.join(SRC, "docs", "operations.md")) as f:
        ops_doc = f.read()
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    missing = [f for f in families if "`%s`" % f not in ops_doc]
    assert not missing, "metrics not listed in docs/operations.md: %s" % missing


@test
def every_plugin_call_is_timed():
    """Each rk_metrics_upstream() (after a plugin call) has its
    rk_metrics_upstream_begin() shortly before, or the call's latency and the
    in-flight gauge would silently miss it."""
    import glob
    missing = []
    for path in sorted(glob.glob(os.path.join(SRC, "core", "*.c"))):
        if path.endswith("metrics.c"):
            continue
        with open(path) as f:
            lines = f.read().split("\n")
        for i, line in enumerate(lines):
            if "rk_metrics_upstream(" in line:
                if not any("rk_metrics_upstream_begin()" in l for l in lines[max(0, i - 12):i]):
                    missing.append("%s:%d" % (os.path.relpath(path, SRC), i + 1))
    assert not missing, "plugin calls without rk_metrics_upstream_begin(): %s" % missing


@test
def json_log_format():
    a = Admin(config={"log": {"format": "json"}})
    sid = a.start_sandbox()
    st, body, headers = a.request(
        "POST", PREFIX + "/execute", {"sandbox_id": sid, "command": "echo x"},
        headers={"X-Request-ID": "trace-json-1"}, raw=True)
    assert st == 200
    a.request("GET", PREFIX + "/get_status?sandbox_id=" + sid)

    def access_lines():
        recs = []
        for line in a.output().splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if rec.get("msg") == "access":
                recs.append(rec)
        # each line is written when its request completes, just after its
        # response was sent: wait for both requests' lines
        routes = {r.get("route") for r in recs}
        return recs if {"get_status", "execute"} <= routes else None

    recs = wait_until(access_lines, 10, what="JSON access lines")
    # Every line is one JSON object with time, level and msg.
    for line in a.output().splitlines():
        rec = json.loads(line)
        assert {"time", "level", "msg"} <= set(rec), rec
    execute = [r for r in recs if r["request_id"] == "trace-json-1"]
    assert len(execute) == 1, recs
    e = execute[0]
    assert e["route"] == "execute" and e["status"] == 200 and e["method"] == "POST", e
    assert e["sandbox_id"] == sid and e["outcome"] == "success", e
    assert isinstance(e["duration_ms"], int) and e["duration_ms"] >= 0, e
    status = [r for r in recs if r["route"] == "get_status"][0]
    assert status["sandbox_id"] == sid, status  # from the query string
    start = [r for r in recs if r["route"] == "start_async"][0]
    assert start["sandbox_id"] is None, start  # the request names no sandbox yet


def _access_lines(a):
    """The JSON access lines the admin wrote so far."""
    out = []
    for line in a.output().splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("msg") == "access":
                out.append(rec)
    return out


@test
def access_log_names_only_checked_sandboxes():
    # The access log's sandbox_id is the id the router or the validator
    # checked against the identifier rule; a refused request's text is the
    # client's and is not logged as a sandbox.
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("tok-0123456789abcdef0123 ops\n")
    os.chmod(tokens, 0o600)
    a = Admin(config={"log": {"format": "json"}, "server": {"auth_tokens_file": tokens}})
    auth = {"Authorization": "Bearer tok-0123456789abcdef0123"}
    sid = a.start_sandbox(headers=auth, wait_alive=False)
    cases = [
        # refused before validation (no token): the body is never read
        ("unauth", "POST", PREFIX + "/execute", {"sandbox_id": sid, "command": "true"}, {}, None),
        # refused by the identifier rule: query and body
        ("badq", "GET", PREFIX + "/get_status?sandbox_id=a%20b", None, auth, None),
        ("badbody", "POST", PREFIX + "/execute", {"sandbox_id": "x\"y", "command": "true"}, auth,
         None),
        # accepted: the checked id, from the query, the body and the path
        ("okq", "GET", PREFIX + "/get_status?sandbox_id=" + sid, None, auth, sid),
        ("okbody", "POST", PREFIX + "/execute", {"sandbox_id": sid, "command": "true"}, auth, sid),
    ]
    for rid, method, path, body, hdrs, _ in cases:
        h = dict(hdrs)
        h["X-Request-ID"] = "acc-" + rid
        a.request(method, path, body, headers=h)

    def lines():
        got = {r["request_id"]: r for r in _access_lines(a)}
        return got if all("acc-" + c[0] in got for c in cases) else None

    got = wait_until(lines, 10, what="the access lines")
    for rid, _, _, _, _, want in cases:
        assert got["acc-" + rid]["sandbox_id"] == want, (rid, got["acc-" + rid])
    assert got["acc-unauth"]["status"] == 401, got["acc-unauth"]
    assert got["acc-badq"]["status"] == 200 and got["acc-okbody"]["status"] == 200, got


@test
def log_format_is_checked():
    d = tmpdir()
    path = os.path.join(d, "bad.yml")
    with open(path, "w") as f:
        f.write("runtime: {operator_type: testop, plugin_dir: %s}\nlog: {format: xml}\n"
                % os.environ.get("ROCK_TEST_PLUGIN_DIR", ""))
    p = subprocess.run([ADMIN_BIN, "-t", "-c", path], capture_output=True, timeout=60)
    out = (p.stdout + p.stderr).decode()
    assert p.returncode != 0, out
    assert "log.format" in out and "must be one of: text, json" in out, out


@test
def openapi_and_docs_served():
    a = Admin()
    st, body, headers = a.request("GET", "/openapi.json", raw=True)
    assert st == 200 and headers["Content-Type"] == "application/json", headers
    with open(os.path.join(SRC, "api", "openapi.json"), "rb") as f:
        assert body == f.read(), "/openapi.json differs from api/openapi.json"
    doc = json.loads(body)
    assert doc["openapi"].startswith("3.1")
    st, body, headers = a.request("GET", "/docs", raw=True)
    assert st == 200 and headers["Content-Type"].startswith("text/html"), headers
    page = body.decode()
    assert 'fetch("openapi.json")' in page
    # Self-contained: no external scripts, styles or fonts.
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    assert "connect-src 'self'" in headers["Content-Security-Policy"]


run()
