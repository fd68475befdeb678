# SPDX-License-Identifier: Apache-2.0
"""Who may drive sandboxes: bearer-token authentication on every
route, token reload on SIGHUP, `-t` checks, CORS allow-list, the JSON
content-type policy, and the OpenSandbox egress credential. Real rock-admin
processes over loopback sockets; clients send headers exactly as the ROCK SDKs
do (see tests/lib/secutil.py).
"""
import json
import os
import signal
import subprocess
import threading

import harness
from harness import ADMIN_BIN, PREFIX, Admin, Redis, Sim, test, tmpdir, wait_until
from secutil import (Client, sdk_flow, sdk_headers, sha256_hex, start_alive, start_echo_app,
                     write_tokens, ws_connect)

os.environ.pop("OPEN_SANDBOX_API_KEY", None)

ALICE = "alice-7f3c9a1e5b2d4c6e8f0a"   # plain entry, named
BOB = "bob-2d4c6e8f0a7f3c9a1e5b"       # stored hashed, named
CAROL = "carol-0a7f3c9a1e5b2d4c6e8f"   # plain entry, unnamed (logged as line<N>)
WRONG = "mallory-0000000000000000000"


def token_file(lines=None):
    d = tmpdir("rock-sec-")
    return write_tokens(os.path.join(d, "tokens"), lines or [
        "# rock-admin tokens",
        "%s alice" % ALICE,
        "sha256:%s bob" % sha256_hex(BOB),
        "",
        CAROL,
    ])


def secured_admin(extra_server=None, path=None):
    server = {"auth_tokens_file": path or token_file()}
    server.update(extra_server or {})
    return Admin(config={"server": server,
                         "testop": {"proxy_base": "http://127.0.0.1:{port}"}})


def assert_401(st, js, hdrs, presented=False):
    assert st == 401, (st, js)
    assert hdrs.get("www-authenticate", "").startswith("Bearer"), hdrs
    assert ('error="invalid_token"' in hdrs["www-authenticate"]) == presented, hdrs
    assert js["status"] == "Failed" and js["message"] == "unauthorized", js
    assert js["result"] is None, js


@test
def sdk_flow_needs_a_valid_token():
    admin = secured_admin()
    app = start_echo_app()
    # The Python SDK's deprecated xrl_authorization and both SDKs' extra headers.
    for tok, hdr in ((ALICE, "XRL-Authorization"), (BOB, "XRL-Authorization"),
                     (CAROL, "Authorization")):
        sid, seen = sdk_flow(Client(admin.port, sdk_headers(tok, hdr)), app, tag="t" + tok[:3])
        # rock-admin's credential never reaches the application in the sandbox
        assert "xrl-authorization" not in seen["headers"], seen
        assert "authorization" not in seen["headers"], seen
        assert seen["headers"].get("route-key"), seen  # the SDK's other headers do
    # an application's own Authorization passes when rock-admin's token came as XRL
    c = Client(admin.port, sdk_headers(ALICE))
    sid = start_alive(c)
    st, payload, _ = c.raw("GET", "%s/sandboxes/%s/proxy/port/%d/x" % (PREFIX, sid, app),
                           headers={"Authorization": "Basic YXBwOmFwcA=="})
    assert st == 200 and json.loads(payload)["headers"]["authorization"] == "Basic YXBwOmFwcA==", \
        payload

    # Without a token and with a wrong one: 401 on every step of the flow.
    for h, presented in ((sdk_headers(None), False), (sdk_headers(WRONG), True),
                         (sdk_headers(WRONG, "Authorization"), True),
                         ({"XRL-Authorization": ALICE}, False),          # no "Bearer "
                         ({"Authorization": "Basic " + ALICE}, False)):
        bad = Client(admin.port, h)
        calls = [("POST", "/start_async", {"image": "python:3.11"}),
                 ("GET", "/get_status?sandbox_id=" + sid, None),
                 ("POST", "/execute", {"sandbox_id": sid, "command": "echo x"}),
                 ("POST", "/create_session", {"sandbox_id": sid, "session": "s"}),
                 ("POST", "/run_in_session", {"sandbox_id": sid, "session": "s",
                                              "command": "echo"}),
                 ("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/up.txt"}),
                 ("GET", "/sandboxes", None),
                 ("GET", "/sandboxes/%s/proxy/port/%d/x" % (sid, app), None),
                 ("GET", "/sandboxes/%s/vnc/" % sid, None),
                 ("GET", "/no/such/route", None),
                 ("POST", "/delete", {"sandbox_id": sid})]
        for method, route, body in calls:
            st, js, hdrs = bad.call(method, route, body)
            assert_401(st, js, hdrs, presented)
        # a 5 MiB upload still reads its 401 (the body is drained first, not reset)
        st, js, hdrs = bad.upload(sid, "/tmp/evil", b"x" * (5 * 1024 * 1024))
        assert_401(st, js, hdrs, presented)
        for path in ("/", "/metrics", "/nope"):
            st, payload, hdrs = bad.raw("GET", path)
            assert st == 401, (path, st, payload)
        # WebSocket proxy and VNC WebSocket
        for path in ("%s/sandboxes/%s/proxy/port/%d/ws" % (PREFIX, sid, app),
                     "%s/sandboxes/%s/vnc/websockify" % (PREFIX, sid)):
            st, text, sock, _ = ws_connect(admin.port, path, h)
            assert st == 401 and "WWW-Authenticate: Bearer" in text, text
    # the sandbox is still there: nothing above touched it
    assert c.ok("GET", "/get_status?sandbox_id=" + sid)["is_alive"]
    # the WebSocket proxy works with the token
    st, text, sock, buf = ws_connect(admin.port, "%s/sandboxes/%s/proxy/port/%d/ws"
                                     % (PREFIX, sid, app), sdk_headers(BOB))
    assert st == 101, text
    sock.close()

    # /livez and /readyz answer without a token; /metrics does not by default
    anon = Client(admin.port, {})
    assert anon.raw("GET", "/livez")[0] == 200
    assert anon.raw("GET", "/readyz")[0] == 200
    assert anon.raw("POST", "/livez")[0] == 401
    assert anon.raw("GET", "/metrics")[0] == 401
    st, metrics, _ = Client(admin.port, sdk_headers(ALICE)).raw("GET", "/metrics")
    assert st == 200, st
    counts = {}
    for line in metrics.decode().splitlines():
        if line.startswith("rock_admin_auth_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            counts[labels[len("rock_admin_auth_requests_total"):]] = int(value)
    for name in ("alice", "bob", "line5"):
        assert counts.get('{result="accepted",token="%s"}' % name, 0) > 0, counts
    assert counts['{result="missing",token=""}'] > 0, counts
    assert counts['{result="invalid",token=""}'] > 0, counts

    # the access log names the token, never shows it
    log = admin.output()
    assert "token=alice" in log and "token=bob" in log and "token=line5" in log, log[-3000:]
    for secret in (ALICE, BOB, CAROL, WRONG, sha256_hex(BOB)):
        assert secret not in log, secret


@test
def metrics_public_and_auth_off():
    admin = secured_admin({"metrics_public": True})
    st, payload, _ = Client(admin.port, {}).raw("GET", "/metrics")
    assert st == 200 and b"rock_" in payload, (st, payload[:200])
    assert Client(admin.port, {}).raw("GET", "/")[0] == 401
    # authentication is off by default: no header needed, tokens ignored
    plain = Admin(config={"testop": {"proxy_base": "http://127.0.0.1:{port}"}})
    sdk_flow(Client(plain.port, sdk_headers(None)), start_echo_app())
    assert "bearer-token authentication on" not in plain.output()
    assert "bearer-token authentication on" in admin.output()


@test
def tokens_reload_on_sighup():
    path = token_file()
    admin = secured_admin(path=path)
    new = "dave-5b2d4c6e8f0a7f3c9a1e"
    write_tokens(path, ["%s dave" % new])
    admin.proc.send_signal(signal.SIGHUP)
    admin.wait_for_line(r"SIGHUP: 1 authentication token\(s\) loaded")
    st, js, hdrs = Client(admin.port, sdk_headers(ALICE)).call("GET", "/sandboxes")
    assert_401(st, js, hdrs, presented=True)
    assert Client(admin.port, sdk_headers(new)).call("GET", "/sandboxes")[0] == 200
    # a broken file is refused and the tokens in force stay
    write_tokens(path, ["short bad-entry", "%s dave" % new])
    admin.proc.send_signal(signal.SIGHUP)
    admin.wait_for_line(r"keeping the previous authentication tokens")
    assert Client(admin.port, sdk_headers(new)).call("GET", "/sandboxes")[0] == 200
    assert new not in admin.output()

    # reloads while requests flow: a token kept in every version never sees a 401
    statuses, stop = [], threading.Event()

    def hammer():
        c = Client(admin.port, sdk_headers(new))
        while not stop.is_set():
            statuses.append(c.call("GET", "/sandboxes")[0])
    workers = [threading.Thread(target=hammer) for _ in range(4)]
    for w in workers:
        w.start()
    for i in range(5):
        write_tokens(path, ["%s dave" % new, "extra-token-%02d-0123456789 x%d" % (i, i)])
        admin.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: admin.output().count("SIGHUP: 2 authentication token(s) loaded") > i,
                   30, 0.05, "reload %d" % i)
    stop.set()
    for w in workers:
        w.join()
    assert statuses and set(statuses) == {200}, sorted(set(statuses))


def check_config(server, expect_rc):
    d = tmpdir("rock-sec-t-")
    cfg = os.path.join(d, "c.yml")
    with open(cfg, "w") as f:
        f.write(harness.yaml_dump({"server": server, "runtime": {
            "operator_type": "testop", "plugin_dir": harness.TEST_PLUGIN_DIR}}) + "\n")
    p = subprocess.run([ADMIN_BIN, "-t", "-c", cfg], capture_output=True, text=True, timeout=60)
    assert p.returncode == expect_rc, (p.returncode, p.stdout, p.stderr)
    return p.stdout + p.stderr


@test
def config_check_refuses_bad_security_settings():
    d = tmpdir("rock-sec-f-")
    secret = "tiny-secret"
    bad = write_tokens(os.path.join(d, "bad"), [
        "%s" % secret,                                  # too short
        "%s bad/name" % ALICE,                          # name not loggable
        "sha256:abcd shortdigest",                      # not 64 hex digits
        "%s x y" % BOB,                                 # too many fields
    ])
    out = check_config({"auth_tokens_file": bad}, 1)
    for n in (1, 2, 3, 4):
        assert "%s:%d: server.auth_tokens_file" % (bad, n) in out, out
    for s in (secret, ALICE, BOB):
        assert s not in out, out
    empty = write_tokens(os.path.join(d, "empty"), ["# nothing"])
    assert "holds no token" in check_config({"auth_tokens_file": empty}, 1)
    assert "cannot open" in check_config({"auth_tokens_file": os.path.join(d, "missing")}, 1)
    out = check_config({"cors_origins": ["*", "https://ok.example", "https://x/path"]}, 1)
    assert '"*" is not an origin' in out and "https://x/path" in out, out
    assert "https://ok.example\" is not" not in out, out
    good = token_file()
    out = check_config({"auth_tokens_file": good, "cors_origins": ["https://ui.example"]}, 0)
    assert "server.auth_tokens_file: " + good in out, out
    for s in (ALICE, BOB, CAROL, sha256_hex(BOB)):
        assert s not in out, out


@test
def browser_requests_cors_and_content_type():
    app = start_echo_app()
    # Default: no CORS headers at all, whatever the Origin.
    admin = Admin(config={"testop": {"proxy_base": "http://127.0.0.1:{port}"}})
    c = Client(admin.port, sdk_headers(None))
    sid = start_alive(c)
    evil = {"Origin": "https://evil.example"}
    # the "simple" cross-site request a web page can send without a preflight
    st, js, hdrs = c.call("POST", "/execute",
                          json.dumps({"sandbox_id": sid, "command": "echo pwned"}),
                          dict(evil, **{"Content-Type": "text/plain;charset=UTF-8"}))
    assert st == 403, (st, js)
    assert not any(k.startswith("access-control-") for k in hdrs), hdrs
    st, js, hdrs = c.upload(sid, "/tmp/x", b"x")  # same-site tools send no Origin
    assert st == 200, (st, js)
    for route, body, extra in (
            ("/execute", {"sandbox_id": sid, "command": "echo x"}, {}),
            ("/upload", b"--b\r\n\r\n", {"Content-Type": "multipart/form-data; boundary=b"}),
            ("/sandboxes/%s/proxy/port/%d/x" % (sid, app), b"x", {"Content-Type": "text/plain"})):
        st, js, hdrs = c.call("POST", route, body, dict(evil, **extra))
        assert st == 403, (route, st, js)
    st, text, _, _ = ws_connect(admin.port, "%s/sandboxes/%s/proxy/port/%d/ws"
                                % (PREFIX, sid, app), evil)
    assert st == 403, text
    # no Origin (SDKs, curl): JSON bodies must say they are JSON
    body = json.dumps({"sandbox_id": sid, "command": "echo x"})
    for ct in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=1",
               "application/jsonp", None):
        st, js, _ = c.call("POST", "/execute", body, {"Content-Type": ct} if ct else {})
        assert st == 415 and "application/json" in js["detail"], (ct, st, js)
    for ct in ("application/json", "application/json; charset=utf-8", "Application/JSON",
               "application/vnd.rock+json"):
        st, js, _ = c.call("POST", "/execute", body, {"Content-Type": ct})
        assert st == 200 and js["status"] == "Success", (ct, st, js)
    # same-origin pages (e.g. the VNC viewer rock-admin proxies) are not cross-site
    st, js, _ = c.call("POST", "/execute", {"sandbox_id": sid, "command": "echo x"},
                       {"Origin": "http://127.0.0.1:%d" % admin.port})
    assert st == 200, (st, js)

    # A listed origin gets its preflight answered and CORS headers, never credentials.
    ui = "https://ui.example.com"
    listed = Admin(config={"server": {"cors_origins": [ui, "http://localhost:3000"]},
                           "testop": {"proxy_base": "http://127.0.0.1:{port}"}})
    lc = Client(listed.port, sdk_headers(None))
    sid = start_alive(lc)
    st, payload, hdrs = lc.raw("OPTIONS", PREFIX + "/execute", headers={
        "Origin": ui, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, xrl-authorization, route-key"})
    assert st == 204, (st, payload)
    assert hdrs["access-control-allow-origin"] == ui, hdrs
    assert "POST" in hdrs["access-control-allow-methods"], hdrs
    assert "xrl-authorization" in hdrs["access-control-allow-headers"].lower(), hdrs
    assert "access-control-allow-credentials" not in hdrs, hdrs
    st, js, hdrs = lc.call("POST", "/execute", {"sandbox_id": sid, "command": "echo hi"},
                           {"Origin": ui})
    assert st == 200 and js["result"]["stdout"].strip() == "hi", (st, js)
    assert hdrs["access-control-allow-origin"] == ui and hdrs.get("vary") == "Origin", hdrs
    assert "access-control-allow-credentials" not in hdrs, hdrs
    # even a listed origin cannot post text/plain
    st, js, _ = lc.call("POST", "/execute", body.replace(sid, sid),
                        {"Origin": ui, "Content-Type": "text/plain"})
    assert st == 415, (st, js)
    # an unlisted origin's preflight is refused without CORS headers
    st, payload, hdrs = lc.raw("OPTIONS", PREFIX + "/execute", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert st == 403 and "access-control-allow-origin" not in hdrs, (st, hdrs)
    st, js, hdrs = lc.call("GET", "/sandboxes", None, {"Origin": "https://ui.example.com.evil"})
    assert st == 403 and "access-control-allow-origin" not in hdrs, (st, hdrs)

    # With authentication on, the preflight needs no token (browsers send none) ...
    sec = secured_admin({"cors_origins": [ui]})
    st, _, hdrs = Client(sec.port, {}).raw("OPTIONS", PREFIX + "/execute", headers={
        "Origin": ui, "Access-Control-Request-Method": "POST"})
    assert st == 204 and hdrs["access-control-allow-origin"] == ui, (st, hdrs)
    # ... but the request itself does, and its 401 is readable by the listed origin
    st, js, hdrs = Client(sec.port, {"Origin": ui}).call("GET", "/sandboxes")
    assert st == 401 and hdrs["access-control-allow-origin"] == ui, (st, hdrs)


EGRESS_TOKEN = "egress-tok-3f9a1c7e5b"


@test
def egress_credential_never_reaches_a_client_request():
    """OpenSandbox hands out OPENSANDBOX-EGRESS-AUTH with the endpoint of its
    egress sidecar (18080); the OpenSandbox plugin marks it as a credential
    (ABI 1.1) and the proxy never forwards it. Reserved ports are refused
    unless opensandbox.allow_reserved_ports is set."""
    redis = Redis()
    sim = Sim(extra=["--egress-token", EGRESS_TOKEN])
    base = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http"}}
    admin = Admin(operator="opensandbox", config=base, redis=redis)
    sid = admin.start_sandbox()
    st, js = admin.api("GET", "/get_status", query={"sandbox_id": sid,
                                                    "include_all_states": "True"})
    osid = js["result"]["host_name"]  # the OpenSandbox id
    # the simulator behaves like OpenSandbox: the endpoint carries the token ...
    st, ep = sim.request("GET", "/v1/sandboxes/%s/endpoints/18080" % osid)
    assert ep["headers"] == {"OPENSANDBOX-EGRESS-AUTH": EGRESS_TOKEN}, ep
    # ... and the egress API needs it
    st, _ = harness.http_request("127.0.0.1", sim.port, "GET",
                                 "/sandboxes/%s/egress/policy" % osid)
    assert st == 401, st
    st, js = harness.http_request("127.0.0.1", sim.port, "GET",
                                  "/sandboxes/%s/egress/policy" % osid,
                                  headers={"OPENSANDBOX-EGRESS-AUTH": EGRESS_TOKEN})
    assert st == 200 and js["mode"] == "allow_all", (st, js)

    # default: reserved ports are refused with a clear error, in every proxy form
    for port, what in ((18080, "egress sidecar"), (44772, "execd")):
        for path in ("/sandboxes/%s/proxy/port/%d/policy" % (sid, port),
                     "/proxy/%s/port/%d/policy" % (sid, port)):
            st, js = admin.api("GET", path)
            assert st == 200 and js["status"] == "Failed", (path, st, js)
            assert "port %d is reserved by OpenSandbox (%s)" % (port, what) in js["error"], js
            assert "opensandbox.allow_reserved_ports" in js["error"], js
        st, js = admin.api("GET", "/sandboxes/%s/proxy/policy" % sid,
                           headers={"X-ROCK-Target-Port": str(port)})
        assert st == 200 and "is reserved" in js["error"], (st, js)
    # the WebSocket proxy accepts the upgrade, then closes with the reason (1011)
    st, text, sock, buf = ws_connect(admin.port, "%s/sandboxes/%s/proxy/port/18080/ws"
                                     % (PREFIX, sid), {})
    assert st == 101, text
    op, data = buf.read_frame()
    sock.close()
    assert op == 8 and b"is reserved" in data, (op, data)

    # allowed by the operator: the request reaches the sidecar, without the credential; the
    # first request resolves the endpoint through the plugin, the next ones are served from the
    # core's endpoint cache (proxy.endpoint_cache_ttl_ms), which must keep the credential flag
    allowed = Admin(operator="opensandbox", redis=redis, config={
        "opensandbox": dict(base["opensandbox"], allow_reserved_ports=True)})
    for extra in ({}, {"OPENSANDBOX-EGRESS-AUTH": "client-guess"},
                  {"opensandbox-egress-auth": EGRESS_TOKEN}):
        st, payload = allowed.request("GET", "%s/sandboxes/%s/proxy/port/18080/policy"
                                      % (PREFIX, sid), headers=extra)
        assert st == 401 and payload == b"unauthorized\n", (extra, st, payload)
    for a in (admin, allowed):
        assert EGRESS_TOKEN not in a.output()


if __name__ == "__main__":
    harness.run()
