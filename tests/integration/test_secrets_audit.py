# SPDX-License-Identifier: Apache-2.0
"""Secrets audit: rock-admin runs with a token file, an OpenSandbox
API key, the egress sidecar's token handed out by the backend and a canary in
its own environment, at log level debug. Every route is driven with the right
token, a wrong one and none, along its failure paths (bad bodies, unknown
sandboxes, wrong content types, oversized bodies, upstream faults, the
backend gone). No response body or header, log line, /metrics line or `-t`
output may contain any of the secrets.
"""
import json
import os
import subprocess

import harness
from harness import ADMIN_BIN, PREFIX, Admin, Redis, Sim, test, tmpdir
from secutil import (Client, sdk_headers, sha256_hex, start_alive, start_echo_app, write_tokens,
                     ws_connect)

os.environ.pop("OPEN_SANDBOX_API_KEY", None)

TOKEN = "audit-token-9d1e7b3f5a2c4e6a8b0d"
HASHED = "audit-hashed-1f3e5d7c9b0a2e4c6d8f"
API_KEY = "audit-osb-key-6c8e0a2b4d7f9e1c3a5b"
EGRESS = "audit-egress-0b2d4f6a8c1e3a5c7e9d"
CANARY = "audit-canary-3a5c7e9b1d0f2e4a6c8b"
SECRETS = [TOKEN, HASHED, API_KEY, EGRESS, CANARY, sha256_hex(HASHED)]


class Recorder:
    """Everything a client saw."""

    def __init__(self):
        self.items = []

    def add(self, what, data):
        if isinstance(data, bytes):
            data = data.decode("utf-8", "replace")
        self.items.append((what, str(data)))

    def check(self, where):
        for what, text in self.items:
            for s in SECRETS:
                assert s not in text, "secret %s...%s in %s: %s (%s)" % (
                    s[:8], s[-4:], where, what, text[:300])


def drive(rec, port, headers, sid, app, osid_hint="", authorized=True):
    """Call every route once with these headers, plus its failure paths. Without
    a valid token, everything but /livez, /readyz and CORS preflights is 401."""
    c = Client(port, headers)

    def call(method, path, body=None, extra=None):
        try:
            st, payload, hdrs = c.raw(method, path, body, extra)
        except (BrokenPipeError, ConnectionResetError):
            return 0, b""  # answered (and closed) before the whole body was sent
        rec.add("%s %s -> %d headers" % (method, path, st), json.dumps(hdrs))
        rec.add("%s %s -> %d body" % (method, path, st), payload)
        public = path in ("/livez", "/readyz") or method == "OPTIONS"
        if not authorized and not public:
            assert st == 401 and "www-authenticate" in hdrs, (method, path, st, payload)
        return st, payload

    P = PREFIX
    junk = "nosuch-" + osid_hint
    for sb in (sid, junk):
        bodies = {
            "/start_async": {"image": "python:3.11", "memory": "1g", "cpus": 1},
            "/start": {"image": "python:3.11", "memory": "lots"},
            "/execute": {"sandbox_id": sb, "command": "echo audit; env | head -50"},
            "/create_session": {"sandbox_id": sb, "session": "a1"},
            "/run_in_session": {"sandbox_id": sb, "session": "a1", "command": "env"},
            "/close_session": {"sandbox_id": sb, "session": "a1"},
            "/read_file": {"sandbox_id": sb, "path": "/etc/hostname"},
            "/write_file": {"sandbox_id": sb, "path": "/tmp/audit.txt", "content": "x"},
            "/commit": {"sandbox_id": sb, "image_tag": "t", "username": "u", "password": "p"},
            "/sandboxes/batch": {"sandbox_ids": [sb]},
            "/restart": {"sandbox_id": sb},
        }
        for route, body in bodies.items():
            call("POST", P + route, body)
            call("POST", P + route, "{not json", {"Content-Type": "application/json"})
            call("POST", P + route, json.dumps(body), {"Content-Type": "text/plain"})
            call("POST", P + route, body, {"Origin": "https://evil.example"})
            call("GET", P + route)  # wrong method
        for route in ("/get_status?sandbox_id=%s" % sb, "/is_alive?sandbox_id=%s" % sb,
                      "/get_sandbox_statistics?sandbox_id=%s" % sb, "/sandboxes?limit=5",
                      "/sandboxes?limit=-1", "/commit/%s" % sb, "/get_token",
                      "/get_status?sandbox_id="):
            call("GET", P + route)
        for route in ("/sandboxes/%s/restart" % sb, "/sandboxes/%s/archive" % sb,
                      "/host/proxy/x", "/proxy/%s/anything" % sb):
            call("POST", P + route, {})
        st, js, hdrs = c.upload(sb, "/tmp/audit-up.txt", b"upload")
        rec.add("upload", json.dumps([st, js, hdrs]))
        assert authorized or st == 401, (st, js)
        for path in ("/sandboxes/%s/proxy/port/%d/echo" % (sb, app),
                     "/proxy/%s/port/%d/echo" % (sb, app),
                     "/sandboxes/%s/proxy/port/44772/ping" % sb,
                     "/sandboxes/%s/proxy/port/18080/policy" % sb,
                     "/sandboxes/%s/proxy/port/1/x" % sb,
                     "/sandboxes/%s/proxy/port/%d/../x" % (sb, app),
                     "/sandboxes/%s/vnc/" % sb):
            call("GET", P + path)
            call("POST", P + path, b"payload", {"Content-Type": "application/octet-stream"})
        for path in ("/sandboxes/%s/proxy/port/%d/ws" % (sb, app),
                     "/sandboxes/%s/proxy/port/18080/ws" % sb,
                     "/sandboxes/%s/vnc/websockify" % sb,
                     "/sandboxes/%s/portforward?port=22" % sb):
            st, text, sock, buf = ws_connect(port, P + path, headers)
            rec.add("ws %s -> %d" % (path, st), text)
            assert authorized or st == 401, (path, st, text)
            if sock is not None:
                try:
                    sock.settimeout(30)
                    sock.sendall(b"\x81\x85\x00\x00\x00\x00hello")
                    op, data = buf.read_frame()
                    rec.add("ws frame", repr((op, data)))
                except OSError:
                    pass
                sock.close()
    call("POST", P + "/execute", b"x" * (2 * 1024 * 1024), {"Content-Type": "application/json"})
    for path in ("/", "/livez", "/readyz", "/metrics", "/nope", P + "/nope", P + "/execute/"):
        call("GET", path)
    call("OPTIONS", P + "/execute", None, {"Origin": "https://ui.example",
                                           "Access-Control-Request-Method": "POST"})
    call("OPTIONS", P + "/execute", None, {"Origin": "https://evil.example",
                                           "Access-Control-Request-Method": "POST"})


@test
def no_secret_leaves_rock_admin():
    d = tmpdir("rock-audit-")
    tokens = write_tokens(os.path.join(d, "tokens"), [
        "%s audit" % TOKEN, "sha256:%s hashed" % sha256_hex(HASHED)])
    redis = Redis()
    sim = Sim(api_key=API_KEY, extra=["--egress-token", EGRESS])
    cfg = {"server": {"auth_tokens_file": tokens, "max_body_bytes": 1024 * 1024,
                      "cors_origins": ["https://ui.example"]},
           "log": {"level": "debug"},
           "opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY}}
    admin = Admin(operator="opensandbox", config=cfg, redis=redis,
                  env={"ROCK_AUDIT_CANARY": CANARY})
    # a second daemon with the reserved ports opened: the egress route reaches the sidecar
    open_cfg = dict(cfg, opensandbox=dict(cfg["opensandbox"], allow_reserved_ports=True))
    opened = Admin(operator="opensandbox", config=open_cfg, redis=redis,
                   env={"ROCK_AUDIT_CANARY": CANARY})
    app = start_echo_app()
    rec = Recorder()
    good = Client(admin.port, sdk_headers(TOKEN))
    sid = start_alive(good)
    st, js = admin.api("GET", "/get_status", query={"sandbox_id": sid},
                       headers=sdk_headers(HASHED, "Authorization"))
    osid = js["result"]["host_name"]

    for port in (admin.port, opened.port):
        for h, ok in ((sdk_headers(TOKEN), True), (sdk_headers(HASHED, "Authorization"), True),
                      (sdk_headers(None), False), (sdk_headers(TOKEN[:-1] + "x"), False),
                      ({"Authorization": TOKEN}, False),
                      ({"XRL-Authorization": "Bearer " + sha256_hex(HASHED)}, False)):
            drive(rec, port, h, sid, app, osid, authorized=ok)
    # upstream failures: execd and the lifecycle API fail, then the backend is gone
    sim.request("POST", "/_sim/faults", {"execd_status": 503, "lifecycle_status": 500})
    drive(rec, admin.port, sdk_headers(TOKEN), sid, app, osid)
    sim.request("DELETE", "/_sim/faults")
    sim.stop()
    drive(rec, admin.port, sdk_headers(TOKEN), sid, app, osid)
    # the audit really went through the routes (successes and failures alike)
    statuses = [w.split(" -> ")[1].split()[0] for w, _ in rec.items if " -> " in w]
    for code in ("200", "401", "403", "404", "405", "415", "101"):
        assert code in statuses, (code, sorted(set(statuses)))
    assert any('"stdout":"audit' in t for _, t in rec.items), "no command ran"
    if os.environ.get("ROCK_AUDIT_VERBOSE"):
        print("%d responses, statuses %s" % (len(statuses), sorted(set(statuses))))
    rec.check("responses")

    for a in (admin, opened):
        st, payload, _ = Client(a.port, sdk_headers(TOKEN)).raw("GET", "/metrics")
        assert st == 200 and b"rock_" in payload, st
        rec.add("metrics", payload)
    rec.check("/metrics")
    # -t: the effective configuration, and a configuration with problems
    for extra in ({}, {"server": {"auth_tokens_file": write_tokens(
            os.path.join(d, "bad"), ["%s ok" % TOKEN, CANARY[:10] + " short", API_KEY + " a b"])}},
                  {"opensandbox": {"api_key": 12345}}):
        c = harness.deep_merge(cfg, extra)
        c["runtime"] = {"operator_type": "opensandbox", "plugin_dir": harness.OS_PLUGIN_DIR}
        path = os.path.join(d, "t.yml")
        with open(path, "w") as f:
            f.write(harness.yaml_dump(c) + "\n")
        p = subprocess.run([ADMIN_BIN, "-t", "-c", path], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, ROCK_AUDIT_CANARY=CANARY))
        rec.add("-t %r rc=%d" % (list(extra), p.returncode), p.stdout + p.stderr)
    rec.check("-t output")
    harness.stop_admins()
    for a in (admin, opened):
        log = a.output()
        assert "access id=" in log and "token=audit" in log, log[-2000:]
        rec.add("log", log)
    rec.check("the log")


if __name__ == "__main__":
    harness.run()
