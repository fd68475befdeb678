# SPDX-License-Identifier: Apache-2.0
"""Service proxy against applications running INSIDE sandboxes of the
OpenSandbox backend: a real redis-server, the OpenSandbox simulator
(tests/opensandbox-sim) and rock-admin with operator_type opensandbox, all on
127.0.0.1. The applications (a python HTTP server, a node `ws` echo server)
are written into the sandbox with /write_file and started with /execute; the
plugin resolves their ports through OpenSandbox endpoint discovery.

Simulator facts these tests rely on (tests/opensandbox-sim/README.md,
sim_lifecycle.c sim_endpoint(), sim_proxy.c):
- use_server_proxy=false: application port P resolves to `127.0.0.1:P`;
  use_server_proxy=true: to `<sim>/sandboxes/<id>/proxy/P`, a buffered
  HTTP/1.0 relay (it sends `HTTP/1.0` + `Connection: close` to the app, which
  is how the app can tell it was reached through the server proxy; rock-admin
  itself relays with HTTP/1.1). A request with `Upgrade: websocket` is relayed
  as raw bytes after the app's 101 instead, and the simulator logs
  `websocket relay <path> -> 127.0.0.1:P<target> open` / `... closed (N bytes
  to the app, M bytes to the client)`, which is how the server-proxy WebSocket
  test proves its traffic went through the simulator.
- `--execd-header NAME:VALUE`: endpoint discovery returns `headers` ONLY for
  the execd port 44772; application ports get no endpoint headers. So "endpoint
  headers reach the app" is checked on port 44772 (execd answers 401 without
  the header, so a 200 through rock-admin's proxy proves the header was sent),
  and for an application port we assert that the plugin got no headers and the
  app sees none of X-Sim-Token / the OpenSandbox API key.
"""
import gzip
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import harness
from harness import PREFIX, Admin, Redis, Sim, free_port, os_api_key, test, tmpdir, wait_until

os.environ.pop("OPEN_SANDBOX_API_KEY", None)

API_KEY = os_api_key("sim-key-proxy")
SIM_HDR = ("X-Sim-Token", "abc")
BIG = 100 * 1024 * 1024
GZ_PLAIN = b"hello gzip from inside the sandbox " * 300
TRAVERSAL_ERR = "invalid proxy path: relative path segments are not allowed"

APP_PY = r'''
import gzip, hashlib, json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, pidfile = int(sys.argv[1]), sys.argv[2]
COUNT = [0]
GZ_PLAIN = b"hello gzip from inside the sandbox " * 300


def pattern(n):
    block = bytes(range(256)) * 4096
    while n > 0:
        k = min(n, len(block))
        yield block[:k]
        n -= k


class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _body(self):
        h, n = hashlib.sha256(), 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                left = size
                while left:
                    b = self.rfile.read(min(left, 1 << 20))
                    h.update(b)
                    n += len(b)
                    left -= len(b)
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                b = self.rfile.read(min(left, 1 << 20))
                if not b:
                    break
                h.update(b)
                n += len(b)
                left -= len(b)
        return n, h.hexdigest()

    def _handle(self):
        path, _, query = self.path.partition("?")
        if path == "/_count":
            body = json.dumps({"count": COUNT[0], "pid": os.getpid()}).encode()
        else:
            COUNT[0] += 1
        n, digest = self._body()
        if path.startswith("/big"):
            size = int(query.split("=")[1])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            for b in pattern(size):
                self.wfile.write(b)
            return
        if path == "/gzip":
            body = gzip.compress(GZ_PLAIN, mtime=0)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if path != "/_count":
            body = json.dumps({
                "method": self.command, "path": path, "query": query,
                "version": self.request_version, "client": self.client_address[0],
                "pid": os.getpid(),
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body_len": n, "body_sha256": digest}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _safe(self):
        try:
            self._handle()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _safe


# argv[3]: the address to listen on (the real server's own proxy reaches a bridge-networking
# container at its IP, so the app listens on all of the container's interfaces there)
# the pid file is whole before the port listens: a test that saw the port open reads it at once
with open(pidfile + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pidfile + ".tmp", pidfile)
srv = ThreadingHTTPServer((sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1", port), App)
srv.daemon_threads = True
srv.serve_forever()
'''

WS_APP_JS = r'''
const WebSocket = require(process.argv[3]);
const port = parseInt(process.argv[2], 10);
const wss = new WebSocket.Server({port, host: '127.0.0.1', maxPayload: 64 << 20});
wss.on('connection', (ws) => {
  ws.on('message', (data, isBinary) => {
    if (!isBinary && data.length === 8 && data.toString() === 'close-me') {
      ws.close(4001, 'bye from inside the sandbox');
      return;
    }
    ws.send(data, {binary: isBinary});
  });
});
'''

WS_CLIENT_JS = r'''
const path = require('path');
const WebSocket = require(path.join(process.env.NODE_MODULES, 'ws'));
const crypto = require('crypto');
const mode = process.argv[2], url = process.argv[3];
function out(o) { process.stdout.write(JSON.stringify(o) + '\n'); }
function sha(b) { return crypto.createHash('sha256').update(b).digest('hex'); }
const ws = new WebSocket(url, {maxPayload: 64 << 20});
const res = {open: false, sent: 0, echoed: 0, mismatch: 0, text: 0, binary: 0, big: 0,
             bytes: 0};
const expect = [];
ws.on('open', () => {
  res.open = true;
  if (mode === 'close') { ws.send('close-me'); return; }
  // optional argv: frame count and big-frame size (big frames at 10%, 50%, 90%)
  const N = process.argv[4] ? parseInt(process.argv[4], 10) : 1000;
  const BIG = process.argv[5] ? parseInt(process.argv[5], 10) : (4 << 20);
  const bigAt = process.argv[4] ? new Set([Math.floor(N / 10), Math.floor(N / 2),
                                           Math.floor(N * 9 / 10)])
                                : new Set([100, 300, 500, 700, 900]);
  for (let i = 0; i < N; i++) {
    let n = bigAt.has(i) ? BIG : Math.floor(Math.random() * 65537);
    const bin = Math.random() < 0.5;
    let m;
    if (bin) {
      m = crypto.randomBytes(n);
    } else {
      // random text of exactly n bytes (ASCII), never the control word
      m = crypto.randomBytes(Math.ceil(n * 3 / 4) + 3).toString('base64').slice(0, n);
      if (m === 'close-me') m = 'close-mf';
    }
    if (n === BIG) res.big++;
    res.bytes += n;
    if (bin) res.binary++; else res.text++;
    expect.push({bin, sha: sha(m), len: n});
    ws.send(m, {binary: bin});
    res.sent++;
  }
});
ws.on('message', (data, isBinary) => {
  if (mode !== 'echo') return;
  const e = expect.shift();
  if (e && e.bin === isBinary && e.len === data.length && e.sha === sha(data)) res.echoed++;
  else res.mismatch++;
  if (expect.length === 0 && res.echoed + res.mismatch === res.sent) ws.close(1000, 'done');
});
ws.on('unexpected-response', (req, r) => { res.http = r.statusCode; out(res); process.exit(0); });
ws.on('error', (e) => { res.error = String(e); });
ws.on('close', (code, reason) => {
  res.code = code; res.reason = reason.toString(); out(res); process.exit(0);
});
'''


# ---- helpers --------------------------------------------------------------------

def setup(use_server_proxy=False, redis=None, sim=None):
    """redis + simulator (execd header on) + rock-admin(opensandbox)."""
    redis = redis or Redis()
    sim = sim or Sim(api_key=API_KEY, extra=["--execd-header", "%s:%s" % SIM_HDR])
    # allow_reserved_ports: these tests reach execd (44772) through the proxy to see that routing
    # headers arrive; the default refusal is tested in test_security.py.
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                           "use_server_proxy": use_server_proxy, "allow_reserved_ports": True}}
    admin = Admin(operator="opensandbox", config=cfg, redis=redis)
    return admin, sim, redis


def proxy_path(sid, sub=""):
    return "%s/sandboxes/%s/proxy%s" % (PREFIX, sid, sub)


def run_ok(admin, sid, command):
    st, js = admin.api("POST", "/execute", {"sandbox_id": sid, "command": command,
                                            "timeout": 60, "cwd": None, "env": None})
    assert st == 200 and js["status"] == "Success", js
    assert js["result"]["exit_code"] == 0, js
    return js["result"]


def put_file(admin, sid, path, content):
    admin.ok("POST", "/write_file", {"sandbox_id": sid, "path": path, "content": content})


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def start_http_app(admin, sid):
    """Write the python app into the sandbox and start it in the background via /execute.
    Against the real OpenSandbox the app runs in the container and is waited for through
    rock-admin's proxy (its pid file is in the container: None is returned for it)."""
    if harness.real_opensandbox():
        d = "/tmp/rock-os-app-%s" % sid
        port = free_port()  # free here: host networking
        run_ok(admin, sid, "mkdir -p %s" % d)
        put_file(admin, sid, d + "/app.py", APP_PY)
        run_ok(admin, sid, "nohup python3 %s/app.py %d %s/app.pid > %s/app.log 2>&1 &"
               % (d, port, d, d))
        wait_until(lambda: admin.request("GET", proxy_path(sid, "/port/%d/_count" % port),
                                         raw=True)[0] == 200,
                   30, 0.2, "the app in the sandbox through the proxy")
        return port, None
    d = tmpdir("rock-os-app-")
    script, pidfile, log = (os.path.join(d, n) for n in ("app.py", "app.pid", "app.log"))
    put_file(admin, sid, script, APP_PY)
    port = free_port()
    run_ok(admin, sid, "nohup %s %s %d %s > %s 2>&1 &" % (sys.executable, script, port, pidfile,
                                                          log))
    wait_until(lambda: port_open(port), 15, 0.1, "the app in the sandbox to listen on %d" % port)
    with open(pidfile) as f:  # the simulator's sandbox paths are host paths
        pid = int(f.read())
    harness._cleanups.append(lambda: _kill(pid))
    return port, pidfile


def _kill(pid):
    try:
        os.kill(pid, 9)
    except OSError:
        pass


def app_count(port):
    st, js = harness.http_request("127.0.0.1", port, "GET", "/_count")
    return js["count"]


def osid_of(admin, sid):
    st, js = admin.api("GET", "/get_status", query={"sandbox_id": sid,
                                                    "include_all_states": "True"})
    return js["result"]["host_name"]


def pattern(n):
    block = bytes(range(256)) * 4096
    while n > 0:
        k = min(n, len(block))
        yield block[:k]
        n -= k


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def raw_get(admin, path, headers=None):
    """GET with the path sent exactly as given (no client-side normalisation)."""
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=30)
    conn.putrequest("GET", path, skip_accept_encoding=True)
    for k, v in (headers or {}).items():
        conn.putheader(k, v)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, json.loads(body)


# ---- tests --------------------------------------------------------------------

@test
def test_http_app_in_sandbox_port_sources_and_requests():
    admin, sim, _ = setup(use_server_proxy=False)
    sid = admin.start_sandbox()
    port, _ = start_http_app(admin, sid)

    # the plugin's view: endpoint discovery for an application port (what os_proxy_target relays to)
    osid = osid_of(admin, sid)
    st, ep = sim.request("GET", "/v1/sandboxes/%s/endpoints/%d?use_server_proxy=false"
                         % (osid, port))
    assert st == 200 and ep["endpoint"] == "127.0.0.1:%d" % port, (st, ep)
    assert "headers" not in ep, ep  # the sim returns endpoint headers for 44772 only
    st, ep = sim.request("GET", "/v1/sandboxes/%s/endpoints/44772?use_server_proxy=false" % osid)
    assert ep.get("headers") == {SIM_HDR[0]: SIM_HDR[1]}, ep

    client = {"X-Trace": "t-1", "X-Key": "rock-cred", "X-API-Key": "rock-cred-2"}
    # 1. path form
    st, js = admin.request("GET", proxy_path(sid, "/port/%d/echo/a?x=1" % port), headers=client)
    assert st == 200, (st, js)
    assert js["path"] == "/echo/a" and js["query"] == "x=1" and js["method"] == "GET", js
    assert js["version"] == "HTTP/1.1" and js["client"] == "127.0.0.1", js  # direct, not the sim
    h = js["headers"]
    assert h["x-trace"] == "t-1" and "x-key" not in h and "x-api-key" not in h, h
    # rock-admin's own OpenSandbox API key never reaches the app; app ports get no endpoint headers
    assert "open-sandbox-api-key" not in h and API_KEY not in h.values(), h
    assert SIM_HDR[0].lower() not in h, h
    # 2. header form
    st, js = admin.request("GET", proxy_path(sid, "/echo/h"),
                           headers={"X-ROCK-Target-Port": str(port)})
    assert st == 200 and js["path"] == "/echo/h", (st, js)
    # 3. query form (the raw query goes upstream as it is)
    st, js = admin.request("GET", proxy_path(sid, "/echo/q?rock_target_port=%d&z=9" % port))
    assert st == 200 and js["path"] == "/echo/q", (st, js)
    assert js["query"] == "rock_target_port=%d&z=9" % port, js
    # 4. the user-documentation form
    st, js = admin.request("GET", "%s/proxy/%s/port/%d/doc/x" % (PREFIX, sid, port))
    assert st == 200 and js["path"] == "/doc/x", (st, js)
    st, js = admin.request("GET", proxy_path(sid, "/port/%d" % port))
    assert st == 200 and js["path"] == "/", (st, js)

    # endpoint headers reach the target: execd (port 44772) answers 401 without X-Sim-Token
    st, js = harness.http_request("127.0.0.1", sim.port, "GET",
                                  "/sandboxes/%s/execd/ping" % osid)
    assert st == 401, (st, js)
    st, js = admin.request("GET", proxy_path(sid, "/port/44772/ping"))
    assert st == 200, (st, js)

    # two mechanisms at once -> 400 naming exactly those two
    before = app_count(port)
    st, js = admin.request("GET", proxy_path(sid, "/x?rock_target_port=%d" % port),
                           headers={"X-ROCK-Target-Port": str(port)})
    assert st == 400, (st, js)
    assert js["detail"] == ("Cannot specify target port via multiple sources: header "
                            "X-ROCK-Target-Port, query parameter rock_target_port"), js
    st, js = admin.request("GET", proxy_path(sid, "/port/%d/x?rock_target_port=%d"
                                             % (port, port)))
    assert st == 400, (st, js)
    assert js["detail"] == ("Cannot specify target port via multiple sources: path, query "
                            "parameter rock_target_port"), js
    st, js = admin.request("GET", "%s/proxy/%s/port/%d/x" % (PREFIX, sid, port),
                           headers={"X-ROCK-Target-Port": str(port)})
    assert st == 400 and js["detail"] == ("Cannot specify target port via multiple sources: "
                                          "path, header X-ROCK-Target-Port"), (st, js)

    # traversal attempts are refused before anything reaches the app
    for sub in ("/../admin", "/a/../../admin", "/%2e%2e/admin", "/%2E%2e/admin",
                "/%252e%252e/admin", "/a/..\\admin", "/a/..%5cadmin", "/a/%252e%252e%255cadmin",
                "/port/%d/../x" % port, "/port/%d/%%2e%%2e/x" % port, "/port/%d/./x" % port):
        hdr = {} if sub.startswith("/port/") else {"X-ROCK-Target-Port": str(port)}
        st, js = raw_get(admin, proxy_path(sid, sub), hdr)
        assert st == 200 and js["status"] == "Failed", (sub, st, js)
        assert js["error"] == TRAVERSAL_ERR and js["result"]["code"] == 4000, (sub, js)
    st, js = raw_get(admin, "%s/proxy/%s/port/%d/%%252e%%252e/x" % (PREFIX, sid, port))
    assert js["error"] == TRAVERSAL_ERR and js["result"]["code"] == 4000, js
    assert app_count(port) == before, "a refused request reached the app"

    # gzip: byte-identical, Content-Encoding kept, no decompression
    st, raw, headers = admin.request("GET", proxy_path(sid, "/port/%d/gzip" % port),
                                     headers={"Accept-Encoding": "gzip"}, raw=True)
    assert st == 200 and headers.get("Content-Encoding") == "gzip", (st, headers)
    assert raw == gzip.compress(GZ_PLAIN, mtime=0), raw[:40]
    assert gzip.decompress(raw) == GZ_PLAIN

    # DELETE with a body and repeated query keys
    body = os.urandom(200000)
    st, js = admin.request("DELETE", proxy_path(sid, "/port/%d/del?a=1&a=2&b=%%2F" % port),
                           body=body)
    assert st == 200 and js["method"] == "DELETE", (st, js)
    assert js["query"] == "a=1&a=2&b=%2F" and js["path"] == "/del", js
    assert js["body_len"] == len(body) and js["body_sha256"] == hashlib.sha256(body).hexdigest()


@test
def test_big_upload_and_download_flat_memory():
    # the execd header is beside the point here: none against the real OpenSandbox
    sim = Sim(api_key=API_KEY) if harness.real_opensandbox() else None
    admin, sim, _ = setup(use_server_proxy=False, sim=sim)
    sid = admin.start_sandbox(wait_alive=False)
    admin.wait_alive(sid, 60)
    port, _ = start_http_app(admin, sid)
    want = hashlib.sha256()
    for b in pattern(BIG):
        want.update(b)
    # warm up the relay once, then take the baseline
    st, js = admin.request("POST", proxy_path(sid, "/port/%d/warm" % port), body=b"x" * 65536)
    assert st == 200 and js["body_len"] == 65536, (st, js)
    base = rss_kib(admin.proc.pid)
    peak = [base]

    def sample():
        peak[0] = max(peak[0], rss_kib(admin.proc.pid))

    # upload: 100 MiB, streamed from a generator (chunked)
    def gen():
        for i, b in enumerate(pattern(BIG)):
            if i % 8 == 0:
                sample()
            yield b
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=120)
    conn.request("POST", proxy_path(sid, "/port/%d/up" % port), body=gen(), encode_chunked=True,
                 headers={"Transfer-Encoding": "chunked"})
    resp = conn.getresponse()
    js = json.loads(resp.read())
    conn.close()
    assert resp.status == 200, (resp.status, js)
    assert js["body_len"] == BIG and js["body_sha256"] == want.hexdigest(), js
    sample()
    # download: 100 MiB
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=120)
    conn.request("GET", proxy_path(sid, "/port/%d/big?n=%d" % (port, BIG)))
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Length") == str(BIG)
    got, total, i = hashlib.sha256(), 0, 0
    while True:
        b = resp.read(1 << 20)
        if not b:
            break
        got.update(b)
        total += len(b)
        i += 1
        if i % 8 == 0:
            sample()
    conn.close()
    sample()
    assert total == BIG and got.hexdigest() == want.hexdigest(), total
    grown = peak[0] - base
    print("# rock-admin VmRSS: base %d KiB, peak growth %d KiB" % (base, grown))
    assert grown < 64 * 1024, "rock-admin RSS grew by %d KiB" % grown


@test
def test_server_proxy_and_direct_each_without_fallback():
    redis = Redis()
    sim = Sim(api_key=API_KEY, extra=["--execd-header", "%s:%s" % SIM_HDR])
    direct, _, _ = setup(False, redis=redis, sim=sim)
    viaproxy, _, _ = setup(True, redis=redis, sim=sim)
    sid = direct.start_sandbox()
    viaproxy.wait_alive(sid)  # the same sandbox, seen by the second rock-admin (shared redis)
    port, pidfile = start_http_app(direct, sid)
    osid = osid_of(direct, sid)
    st, ep = sim.request("GET", "/v1/sandboxes/%s/endpoints/%d?use_server_proxy=true"
                         % (osid, port))
    assert ep["endpoint"] == "%s/sandboxes/%s/proxy/%d" % (sim.endpoint, osid, port), ep

    # both reach the same app; only the server-proxy one went through the simulator's
    # HTTP/1.0 relay (which also drops Authorization on its way)
    hdr = {"Authorization": "Bearer app-cred"}
    st, a = direct.request("GET", proxy_path(sid, "/port/%d/same?k=v" % port), headers=hdr)
    st2, b = viaproxy.request("GET", proxy_path(sid, "/port/%d/same?k=v" % port), headers=hdr)
    assert st == 200 and st2 == 200, (st, a, st2, b)
    assert a["pid"] == b["pid"] and a["path"] == b["path"] == "/same", (a, b)
    assert a["query"] == b["query"] == "k=v", (a, b)
    assert a["version"] == "HTTP/1.1" and a["headers"].get("authorization") == "Bearer app-cred"
    assert b["version"] == "HTTP/1.0" and b["headers"].get("connection") == "close", b
    assert "authorization" not in b["headers"], b
    for js in (a, b):
        assert "open-sandbox-api-key" not in js["headers"], js
        assert API_KEY not in js["headers"].values(), js
        assert SIM_HDR[0].lower() not in js["headers"], js
    # a body through the server proxy
    body = os.urandom(300000)
    st, js = viaproxy.request("PUT", proxy_path(sid, "/port/%d/put" % port), body=body)
    assert st == 200 and js["body_sha256"] == hashlib.sha256(body).hexdigest(), (st, js)
    # execd endpoint headers also reach port 44772 through the server proxy route
    st, js = viaproxy.request("GET", proxy_path(sid, "/port/44772/ping"))
    assert st == 200, (st, js)

    # no fallback, server-proxy mode: the simulator's proxy route fails while the app itself is
    # fine (directly reachable) -> the client sees the proxy route's failure
    st, _ = sim.request("POST", "/_sim/faults", {"execd_status": 503, "status_count": 1})
    assert st in (200, 204), st
    n = app_count(port)
    st, js = viaproxy.request("GET", proxy_path(sid, "/port/%d/nofallback" % port))
    assert st == 503 and js.get("code") == "SIM::INJECTED_FAULT", (st, js)
    assert app_count(port) == n, "the request reached the app by another route"
    # no fallback, direct mode: the proxy route failing does not matter to it
    st, _ = sim.request("POST", "/_sim/faults", {"execd_status": 503})
    st, js = direct.request("GET", proxy_path(sid, "/port/%d/direct-ok" % port))
    assert st == 200 and js["version"] == "HTTP/1.1", (st, js)
    sim.request("DELETE", "/_sim/faults")

    # the app stops: direct mode answers rock-admin's own 502, not a retry through the sim
    with open(pidfile) as f:
        run_ok(direct, sid, "kill %s" % f.read().strip())
    wait_until(lambda: not port_open(port), 10, 0.1, "the app to stop")
    st, js = direct.request("GET", proxy_path(sid, "/port/%d/gone" % port))
    assert st == 502 and "cannot reach the application" in js["detail"], (st, js)
    assert "code" not in js, js  # not the simulator's GENERAL::UNKNOWN_ERROR body
    # server-proxy mode: the simulator's 502 (it is what was asked), not rock-admin's direct try
    st, js = viaproxy.request("GET", proxy_path(sid, "/port/%d/gone" % port))
    assert st == 502 and js.get("code") == "GENERAL::UNKNOWN_ERROR", (st, js)
    assert "Could not connect to the backend sandbox" in js["message"], js


def ws_env():
    env = dict(os.environ)
    env["NODE_MODULES"] = harness.NODE_MODULES
    return env


def ws_client(script, mode, url, *extra):
    out = subprocess.run(["node", script, mode, url] + [str(x) for x in extra],
                         capture_output=True, text=True,
                         env=ws_env(), timeout=120)
    lines = out.stdout.strip().splitlines()
    assert lines, (out.returncode, out.stderr[-2000:])
    return json.loads(lines[-1])


def start_ws_app(admin, sid):
    """Write the node `ws` echo app into the sandbox and start it there on a free
    port (via /execute); returns (path of the local client script, port)."""
    d = tmpdir("rock-os-ws-")
    server, client = os.path.join(d, "ws_app.js"), os.path.join(d, "ws_client.js")
    put_file(admin, sid, server, WS_APP_JS)
    with open(client, "w") as f:
        f.write(WS_CLIENT_JS)
    port = free_port()
    ws_mod = os.path.join(harness.NODE_MODULES, "ws")
    run_ok(admin, sid, "nohup %s %s %d %s > %s 2>&1 &" % (shutil.which("node"), server, port,
                                                          ws_mod, os.path.join(d, "ws.log")))
    wait_until(lambda: port_open(port), 15, 0.1, "the WebSocket app to listen on %d" % port)
    return client, port


@test
def test_websocket_app_in_sandbox():
    assert harness.node_available(), \
        "node and tests/js/node_modules are required (scripts/install-deps.sh installs them)"
    admin, sim, _ = setup(use_server_proxy=False)  # direct (server proxy: see below)
    sid = admin.start_sandbox()
    client, port = start_ws_app(admin, sid)
    base = "ws://127.0.0.1:%d%s" % (admin.port, proxy_path(sid))

    t0 = time.time()
    res = ws_client(client, "echo", "%s/port/%d/echo" % (base, port))
    assert res["open"] and res["sent"] == 1000, res
    assert res["echoed"] == 1000 and res["mismatch"] == 0, res
    assert res["text"] > 0 and res["binary"] > 0 and res["big"] == 5, res
    assert res["code"] == 1000 and res["reason"] == "done", res
    print("# 1000 frames echoed in %.1fs" % (time.time() - t0))
    # a close code and reason sent by the app reach the client (query port source this time)
    res = ws_client(client, "close", "%s/x?rock_target_port=%d" % (base, port))
    assert res["code"] == 4001 and res["reason"] == "bye from inside the sandbox", res
    # nothing listens on that port in the sandbox -> 1011 with a reason
    res = ws_client(client, "close", "%s/port/%d/x" % (base, free_port()))
    assert res["code"] == 1011 and res["reason"].startswith("Proxy error: "), res
    print("# unreachable app port: close %d %r" % (res["code"], res["reason"]))


def sim_ws_relays(sim, osid, port):
    """The simulator's log lines for WebSocket relays of sandbox osid to port (sim_proxy.c):
    [(client path, app target, state, bytes to the app, bytes to the client)]."""
    rx = re.compile(r"opensandbox-sim: websocket relay (/sandboxes/%s/proxy/%d\S*) -> "
                    r"127\.0\.0\.1:%d(\S*) (open|closed \((\d+) bytes to the app, (\d+) bytes "
                    r"to the client\))" % (re.escape(osid), port, port))
    return [(m.group(1), m.group(2), m.group(3).split(" ")[0],
             int(m.group(4) or 0), int(m.group(5) or 0)) for m in rx.finditer(sim.output())]


@test
def test_websocket_through_the_server_proxy():
    assert harness.node_available(), \
        "node and tests/js/node_modules are required (scripts/install-deps.sh installs them)"
    admin, sim, _ = setup(use_server_proxy=True)
    sid = admin.start_sandbox()
    osid = osid_of(admin, sid)
    client, port = start_ws_app(admin, sid)
    st, ep = sim.request("GET", "/v1/sandboxes/%s/endpoints/%d?use_server_proxy=true"
                         % (osid, port))
    assert ep["endpoint"] == "%s/sandboxes/%s/proxy/%d" % (sim.endpoint, osid, port), ep
    base = "ws://127.0.0.1:%d%s" % (admin.port, proxy_path(sid))
    assert sim_ws_relays(sim, osid, port) == []

    # 200 random text and binary frames, three of 1 MiB, come back identical
    t0 = time.time()
    res = ws_client(client, "echo", "%s/port/%d/echo" % (base, port), 200, 1 << 20)
    assert res["open"] and res["sent"] == 200, res
    assert res["echoed"] == 200 and res["mismatch"] == 0, res
    assert res["text"] > 0 and res["binary"] > 0 and res["big"] == 3, res
    assert res["code"] == 1000 and res["reason"] == "done", res
    print("# 200 frames (%d bytes) echoed through the simulator's proxy in %.1fs"
          % (res["bytes"], time.time() - t0))
    # ...and really went through the simulator's server-proxy route: it logged the relay of
    # /sandboxes/<id>/proxy/<port>/echo to the app, and at least every payload byte both ways
    done = wait_until(lambda: [r for r in sim_ws_relays(sim, osid, port) if r[2] == "closed"],
                      10, 0.1, "the simulator to log the closed relay")
    assert len(done) == 1, sim_ws_relays(sim, osid, port)
    path, target, _, to_app, to_client = done[0]
    assert path == "/sandboxes/%s/proxy/%d/echo" % (osid, port), done
    assert target == "/echo", done
    assert to_app >= res["bytes"] and to_client >= res["bytes"], (done, res["bytes"])

    # a close code and reason sent by the app reach the client through both proxies
    res = ws_client(client, "close", "%s/port/%d/bye" % (base, port))
    assert res["open"] and res["code"] == 4001, res
    assert res["reason"] == "bye from inside the sandbox", res
    paths = [r[0] for r in sim_ws_relays(sim, osid, port) if r[2] == "open"]
    assert paths[-1] == "/sandboxes/%s/proxy/%d/bye" % (osid, port), paths

    # no fallback to the direct endpoint: when the simulator's proxy route fails, the handshake
    # fails (rock-admin's 1011 carrying the simulator's 503) and no relay is opened (counted once
    # the simulator has logged the end of the "bye" relay, which it does after the client saw it)
    def relays_ended():
        rs = sim_ws_relays(sim, osid, port)
        return rs if sum(r[2] == "open" for r in rs) == sum(r[2] == "closed" for r in rs) else None
    n = len(wait_until(relays_ended, 10, 0.05, "the simulator's relays logged closed"))
    st, _ = sim.request("POST", "/_sim/faults", {"execd_status": 503, "status_count": 1})
    assert st in (200, 204), st
    res = ws_client(client, "close", "%s/port/%d/fault" % (base, port))
    assert res["code"] == 1011, res
    assert res["reason"] == "Proxy error: the application refused the WebSocket handshake " \
        "(HTTP 503)", res
    assert len(sim_ws_relays(sim, osid, port)) == n, sim_ws_relays(sim, osid, port)
    sim.request("DELETE", "/_sim/faults")

    # nothing listens on the port: the simulator's 502 makes rock-admin close with 1011
    dead = free_port()
    res = ws_client(client, "close", "%s/port/%d/x" % (base, dead))
    assert res["code"] == 1011 and res["reason"].endswith("(HTTP 502)"), res
    assert len(sim_ws_relays(sim, osid, port)) == n, sim_ws_relays(sim, osid, port)

    # SIGTERM with a relay open: the simulator ends it and exits 0 without sanitizer reports
    sock = socket.create_connection(("127.0.0.1", admin.port), timeout=10)
    sock.sendall(("GET %s/port/%d/idle HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n" % (proxy_path(sid), port)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    wait_until(lambda: any(r[0].endswith("/idle") and r[2] == "open"
                           for r in sim_ws_relays(sim, osid, port)), 10, 0.1, "the idle relay")
    rc = sim.stop()
    out = sim.output()
    assert rc == 0, (rc, out[-3000:])
    for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:", '"upgraded" connection'):
        assert bad not in out, out[-3000:]
    assert "/idle simulator shutting down" in out, out[-3000:]
    sock.settimeout(10)
    got = sock.recv(4096)  # rock-admin's close frame (or EOF) once the upstream went away
    assert got == b"" or got[0] == 0x88, got
    sock.close()




# ---- the same routes against any OpenSandbox (also the real one) ---------------------

# A WebSocket echo app in the Python standard library only (the real python:3.11 image
# has no node): echoes text/binary frames, answers "close-me" with close 4001.
WS_PY = r"""
import base64, hashlib, socket, struct, sys, threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_exact(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b


def send(c, op, payload):
    n = len(payload)
    hdr = bytes([0x80 | op]) + (bytes([n]) if n < 126 else
                               bytes([126]) + struct.pack(">H", n) if n < 65536 else
                               bytes([127]) + struct.pack(">Q", n))
    c.sendall(hdr + payload)


def serve(c):
    req = b""
    while b"\r\n\r\n" not in req:
        d = c.recv(4096)
        if not d:
            return
        req += d
    key = [l.split(b":", 1)[1].strip() for l in req.split(b"\r\n")
           if l.lower().startswith(b"sec-websocket-key:")][0]
    acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    try:
        while True:
            b0, b1 = read_exact(c, 2)
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", read_exact(c, 2))[0]
            elif n == 127:
                n = struct.unpack(">Q", read_exact(c, 8))[0]
            mask = read_exact(c, 4) if b1 & 0x80 else b"\0\0\0\0"
            data = bytes(x ^ mask[i % 4] for i, x in enumerate(read_exact(c, n)))
            if op == 8:
                send(c, 8, data or struct.pack(">H", 1000))
                return
            if op == 1 and data == b"close-me":
                send(c, 8, struct.pack(">H", 4001) + b"bye from inside the sandbox")
                return
            if op in (1, 2):
                send(c, op, data)
            elif op == 9:
                send(c, 10, data)
    except (EOFError, OSError):
        pass
    finally:
        c.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""


@test
def test_http_and_websocket_proxy_to_apps_in_any_sandbox():
    """The proxy routes to apps started inside the sandbox with /execute, checked only
    through rock-admin (so also against the real OpenSandbox, where the sandbox is a
    container): HTTP GET/POST with a body, a gzip body passed through, a streamed 8 MiB
    download, and a WebSocket echo (text, binary, a 1 MiB frame) with the app's own close
    code; nothing listening answers an error, never a hang. Also the /proxy/{id}/port/{port}
    form, port forwarding's refusal and (real bridge networking) VNC."""
    proxy_to_apps_in_any_sandbox(use_server_proxy=False)


@test
def test_http_and_websocket_through_the_server_proxy_in_any_sandbox():
    """The same through the OpenSandbox server's own proxy (use_server_proxy: true): every
    execd call and every app request goes through the lifecycle server's
    /sandboxes/{id}/proxy/{port} route (the real server's HTTP and WebSocket proxy)."""
    proxy_to_apps_in_any_sandbox(use_server_proxy=True)


def proxy_to_apps_in_any_sandbox(use_server_proxy):
    assert harness.node_available(), \
        "node and tests/js/node_modules are required (scripts/install-deps.sh installs them)"
    redis = Redis()
    sim = Sim(api_key=API_KEY)
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                           "use_server_proxy": use_server_proxy}}
    admin = Admin(operator="opensandbox", config=cfg, redis=redis)
    sid = admin.start_sandbox(wait_alive=False)
    admin.wait_alive(sid, 60)
    py = "python3" if harness.real_opensandbox() else sys.executable
    d = "/tmp/rock-px-%s" % sid
    run_ok(admin, sid, "mkdir -p %s" % d)
    put_file(admin, sid, d + "/app.py", APP_PY)
    put_file(admin, sid, d + "/ws.py", WS_PY)
    hport, wport = free_port(), free_port()  # free here: the simulator / host networking
    # the real server's proxy reaches a bridge-networking container at its IP, not loopback
    bind = "0.0.0.0" if harness.real_opensandbox() and harness.REAL_OS_NETWORK == "bridge" \
        else "127.0.0.1"
    run_ok(admin, sid, "nohup %s %s/app.py %d %s/app.pid %s > %s/app.log 2>&1 &"
           % (py, d, hport, d, bind, d))
    run_ok(admin, sid, "nohup %s %s/ws.py %d > %s/ws.log 2>&1 & echo $! > %s/ws.pid"
           % (py, d, wport, d, d))
    if not harness.real_opensandbox():
        for f in ("app.pid", "ws.pid"):
            pidf = d + "/" + f
            harness._cleanups.append(
                lambda pidf=pidf: os.path.exists(pidf) and _kill(int(open(pidf).read() or 0)))
        harness._cleanups.append(lambda: shutil.rmtree(d, ignore_errors=True))

    def get(sub, method="GET", body=None, headers=None):
        return admin.request(method, proxy_path(sid, "/port/%d%s" % (hport, sub)), body,
                             headers, raw=True)
    wait_until(lambda: get("/_count")[0] == 200, 30, 0.2, "the HTTP app through the proxy")
    st, body, hdrs = get("/hello?x=1", "POST", b"a" * 1000)
    assert st == 200, (st, body[:300])
    st, body, hdrs = get("/gzip", headers={"Accept-Encoding": "gzip"})
    assert st == 200 and gzip.decompress(body) == GZ_PLAIN, (st, hdrs)
    size = 8 << 20
    st, body, hdrs = get("/big?n=%d" % size)
    assert st == 200 and len(body) == size and body == b"".join(pattern(size)), (st, len(body))
    # WebSocket through the same route
    client = os.path.join(tmpdir("rock-px-ws-"), "ws_client.js")
    with open(client, "w") as f:
        f.write(WS_CLIENT_JS)
    base = "ws://127.0.0.1:%d%s" % (admin.port, proxy_path(sid))
    res = wait_until(lambda: (lambda r: r if r.get("open") else None)(
        ws_client(client, "echo", "%s/port/%d/echo" % (base, wport), 40, 1 << 20)),
        30, 0.5, "the WebSocket app through the proxy")
    assert res["sent"] == 40 and res["echoed"] == 40 and res["mismatch"] == 0, res
    assert res["big"] == 3 and res["code"] == 1000 and res["reason"] == "done", res
    res = ws_client(client, "close", "%s/port/%d/bye" % (base, wport))
    assert res["open"] and res["code"] == 4001, res
    assert res["reason"] == "bye from inside the sandbox", res
    # nothing listens there: an error, not a hang
    dead = free_port()
    st, body, _ = admin.request("GET", proxy_path(sid, "/port/%d/x" % dead), raw=True)
    assert st >= 400 or b"Failed" in body, (st, body[:300])
    res = ws_client(client, "close", "%s/port/%d/x" % (base, dead))
    if use_server_proxy and harness.real_opensandbox():
        # the real server accepts the WebSocket before it connects to the app, then closes it
        # with 1011 and no reason: relayed as it is
        assert res["code"] == 1011, res
    else:
        assert res["code"] == 1011 and res["reason"].startswith("Proxy error: "), res
    if use_server_proxy:
        admin.ok("POST", "/delete", {"sandbox_id": sid})
        return
    # the user-doc form /proxy/{id}/port/{port}/{path}
    st, body, _ = admin.request("GET", "%s/proxy/%s/port/%d/doc?y=2" % (PREFIX, sid, hport),
                                raw=True)
    assert st == 200 and json.loads(body)["path"] == "/doc", (st, body[:300])
    # raw TCP port forwarding is not offered by OpenSandbox: a clear close, never a hang
    res = ws_client(client, "close", "ws://127.0.0.1:%d%s/sandboxes/%s/portforward?port=%d"
                    % (admin.port, PREFIX, sid, hport))
    assert res["code"] == 1011 and res["reason"] == "Proxy error: OpenSandbox backend does " \
        "not support portforward in this release", res
    if harness.real_opensandbox() and harness.REAL_OS_NETWORK == "bridge":
        # VNC (the sandbox's port 8006, fixed): only in a container of its own network
        # namespace (host networking or the simulator would take the machine's port 8006)
        vnc = "%s/sandboxes/%s/vnc" % (PREFIX, sid)
        run_ok(admin, sid, "nohup %s %s/app.py 8006 %s/vnc.pid > %s/vnc.log 2>&1 &"
               % (py, d, d, d))
        wait_until(lambda: admin.request("GET", vnc + "/_count", raw=True)[0] == 200, 30, 0.2,
                   "the app on the VNC port")
        st, body, _ = admin.request("GET", vnc + "/vnc.html", raw=True)
        assert st == 200 and json.loads(body)["path"] == "/vnc.html", (st, body[:300])
        run_ok(admin, sid, "kill $(cat %s/vnc.pid); sleep 0.5; "
               "nohup %s %s/ws.py 8006 > %s/vnc-ws.log 2>&1 &" % (d, py, d, d))
        res = wait_until(lambda: (lambda r: r if r.get("open") else None)(
            ws_client(client, "close", "ws://127.0.0.1:%d%s/websockify" % (admin.port, vnc))),
            30, 0.5, "the WebSocket app on the VNC port")
        assert res["code"] == 4001 and res["reason"] == "bye from inside the sandbox", res
    admin.ok("POST", "/delete", {"sandbox_id": sid})

if __name__ == "__main__":
    harness.run()
