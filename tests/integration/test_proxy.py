# SPDX-License-Identifier: Apache-2.0
"""HTTP and WebSocket service proxy through rock-admin, with the test
operator: its proxy_target maps sandbox port N to http://127.0.0.1:N, so an
application is simply a server on a free loopback port of this machine.
"""
import gzip
import hashlib
import http.client
import json
import os
import signal
import socket
import socketserver
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import harness
from harness import PREFIX, Admin, test

BIG = 100 * 1024 * 1024


def pattern(n):
    """n deterministic bytes, produced in 1 MiB blocks."""
    block = bytes(range(256)) * 4096
    while n > 0:
        k = min(n, len(block))
        yield block[:k]
        n -= k


class App(BaseHTTPRequestHandler):
    """The application 'inside the sandbox'."""

    protocol_version = "HTTP/1.1"
    connections = 0  # TCP connections accepted (one handler per connection)

    def setup(self):
        App.connections += 1
        super().setup()

    def log_message(self, *args):
        pass

    def _body(self):
        h = hashlib.sha256()
        n = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
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
                h.update(b)
                n += len(b)
                left -= len(b)
        return n, h.hexdigest()

    def _send(self, status, body, ctype="application/json", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _early(self):
        """Answer 413 before reading the body, then drain it for a while and close (a lingering
        close, so the answer is not lost to a reset)."""
        self._send(413, b'{"error": "body too large"}')
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(5)
            while self.connection.recv(1 << 20):
                pass
        except OSError:
            pass

    def _handle(self):
        path, _, query = self.path.partition("?")
        if path == "/early":
            self._early()
            return
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
            self._send(200, gzip.compress(b"hello gzip " * 100), "text/plain",
                       {"Content-Encoding": "gzip"})
            return
        if path == "/redirect":
            port = self.server.server_address[1]
            self._send(302, b"", "text/plain",
                       {"Location": "http://127.0.0.1:%d/target?x=1" % port})
            return
        if path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(3):
                data = ("data: %d %f\n\n" % (i, time.time())).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if i == 0:
                    # Event 1 only after the client saw event 0 (a relay that
                    # buffered the response would deliver nothing until here).
                    SSE_FIRST_SEEN.wait(60)
            self.wfile.write(b"0\r\n\r\n")
            return
        if path == "/slow":
            time.sleep(30)  # far beyond proxy.timeout: only the timeout can answer first
        if path in ("/cut", "/late"):
            # A small answer of announced length: its body cut short (the app closes after 10
            # of 1000 bytes), or sent whole only after a pause behind its head.
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.flush()
            if path == "/cut":
                self.wfile.write(b"y" * 10)
                self.wfile.flush()
                self.close_connection = True
                return
            time.sleep(0.5)
            self.wfile.write(b"z" * 1000)
            return
        if path == "/head":
            # An answer head of about n bytes (one header line), or with a folded header line.
            if query == "folded":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-A: a\r\n  b\r\nContent-Length: 0\r\n\r\n")
                return
            if query.startswith("many="):  # many headers: the relay's inline room is 16 and 1 KiB
                n = int(query.split("=")[1])
                self._send(200, b"{}", extra={"X-H-%02d" % i: "v%02d-" % i + "x" * 60
                                              for i in range(n)})
                return
            n = int(query.split("=")[1])
            self._send(200, b"{}", extra={"X-Big": "h" * n})
            return
        if path == "/hop":
            self._send(200, b"{}", extra={"Connection": "x-secret", "X-Secret": "1",
                                          "X-Kept": "2"})
            return
        body = json.dumps({"method": self.command, "path": path, "query": query,
                           "headers": {k.lower(): v for k, v in self.headers.items()},
                           "body_len": n, "body_sha256": digest}).encode()
        self._send(200, body)

    def _safe(self):
        try:
            self._handle()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _safe


SSE_FIRST_SEEN = threading.Event()


def start_app():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), App)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    harness._cleanups.append(srv.shutdown)
    return srv.server_address[1]


_env = {}


def setup(config=None):
    """A fresh rock-admin with the test operator and one running sandbox."""
    cfg = {"testop": {"proxy_base": "http://127.0.0.1:{port}"}}
    cfg.update(config or {})
    admin = Admin(config=cfg)
    harness._cleanups.append(admin.stop)
    sid = admin.start_sandbox()
    return admin, sid


def proxy_path(sid, sub=""):
    return "%s/sandboxes/%s/proxy%s" % (PREFIX, sid, sub)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@test
def test_port_sources_and_forwarding():
    admin, sid = setup()
    port = start_app()
    hdr = {"X-ROCK-Target-Port": str(port), "X-Key": "k", "X-API-Key": "k2",
           "XRL-Authorization": "a", "Authorization": "app-cred", "X-Trace": "t",
           "X-Testop-Endpoint": "client"}
    st, js = admin.request("GET", proxy_path(sid, "/echo/a?x=1&x=2&y=%2F"), headers=hdr)
    assert st == 200, (st, js)
    assert js["path"] == "/echo/a" and js["query"] == "x=1&x=2&y=%2F", js
    h = js["headers"]
    assert h["x-testop-endpoint"] == "yes", h  # endpoint headers win
    assert "x-key" not in h and "x-api-key" not in h and "xrl-authorization" not in h, h
    assert h["authorization"] == "app-cred" and h["x-trace"] == "t", h
    assert h.get("x-request-id"), h
    # path form, with the rest of the path forwarded
    st, js = admin.request("GET", proxy_path(sid, "/port/%d/echo/b" % port))
    assert st == 200 and js["path"] == "/echo/b", (st, js)
    st, js = admin.request("GET", proxy_path(sid, "/port/%d" % port))
    assert st == 200 and js["path"] == "/", (st, js)
    # query form, passed on upstream too
    st, js = admin.request("GET", proxy_path(sid, "/q?rock_target_port=%d" % port))
    assert st == 200 and js["query"] == "rock_target_port=%d" % port, (st, js)
    # the user-documentation form
    st, js = admin.request("GET", "%s/proxy/%s/port/%d/doc/x" % (PREFIX, sid, port))
    assert st == 200 and js["path"] == "/doc/x", (st, js)
    # bare /proxy
    st, js = admin.request("POST", proxy_path(sid), body=b"abc", headers=hdr)
    assert st == 200 and js["path"] == "/" and js["body_len"] == 3, (st, js)
    # the VNC route: port 8006 (the plugin puts it in the path here), the rest of the path
    # forwarded, no port selection from the client
    vnc_admin, vnc_sid = setup({"testop": {"proxy_base": "http://127.0.0.1:%d/p{port}" % port}})
    st, js = vnc_admin.request("GET", "%s/sandboxes/%s/vnc/x?y=1" % (PREFIX, vnc_sid),
                               headers={"X-ROCK-Target-Port": "9"})
    assert st == 200 and js["path"] == "/p8006/x" and js["query"] == "y=1", (st, js)


@test
def test_port_errors():
    admin, sid = setup()
    st, js = admin.request("GET", proxy_path(sid, "/port/1/x?rock_target_port=2"),
                           headers={"X-ROCK-Target-Port": "3"})
    assert st == 400, (st, js)
    assert js["detail"] == ("Cannot specify target port via multiple sources: path, header "
                            "X-ROCK-Target-Port, query parameter rock_target_port"), js
    st, js = admin.request("GET", proxy_path(sid, "/x"), headers={"X-ROCK-Target-Port": "abc"})
    assert st == 200 and js["status"] == "Failed" and js["message"] == "http proxy failed", js
    assert js["error"] == "invalid literal for int() with base 10: 'abc'" and js["result"] is None
    st, js = admin.request("GET", proxy_path(sid, "/x?rock_target_port=abc"))
    assert st == 200 and js["status"] == "Failed" and js["message"] == "invalid parameter", js
    for bad in ("0", "70000", "-5"):
        st, js = admin.request("GET", proxy_path(sid, "/x"), headers={"X-ROCK-Target-Port": bad})
        assert st == 400 and "between 1 and 65535" in js["detail"], (bad, st, js)


@test
def test_traversal_refused():
    admin, sid = setup()
    port = start_app()
    for sub in ("/../admin", "/%2e%2e/admin", "/%252e%252e/admin", "/a/..%5cadmin",
                "/port/%d/./x" % port):
        conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=30)
        conn.putrequest("GET", proxy_path(sid, sub), skip_accept_encoding=True)
        conn.putheader("X-ROCK-Target-Port", str(port)) if "port/" not in sub else None
        conn.endheaders()
        resp = conn.getresponse()
        js = json.loads(resp.read())
        conn.close()
        assert resp.status == 200 and js["status"] == "Failed", (sub, js)
        assert js["error"] == "invalid proxy path: relative path segments are not allowed", js
        assert js["result"]["code"] == 4000, js


@test
def test_bodies_headers_redirects():
    admin, sid = setup()
    port = start_app()
    hp = {"X-ROCK-Target-Port": str(port)}
    body = os.urandom(100000)
    st, js = admin.request("DELETE", proxy_path(sid, "/del?a=%2F&a=2"), body=body, headers=hp)
    assert st == 200 and js["method"] == "DELETE" and js["query"] == "a=%2F&a=2", js
    assert js["body_sha256"] == hashlib.sha256(body).hexdigest(), js
    for m in ("PUT", "PATCH", "OPTIONS"):
        st, js = admin.request(m, proxy_path(sid, "/m"), body=b"xyz", headers=hp)
        assert st == 200 and js["method"] == m and js["body_len"] == 3, (m, js)
    st, raw, headers = admin.request("GET", proxy_path(sid, "/gzip"), headers=hp, raw=True)
    assert st == 200 and headers.get("Content-Encoding") == "gzip", headers
    # the app's bytes exactly, still encoded (the gzip header carries the app's mtime)
    mtime = int.from_bytes(raw[4:8], "little")
    assert raw == gzip.compress(b"hello gzip " * 100, mtime=mtime), raw[:16]
    st, raw, headers = admin.request("HEAD", proxy_path(sid, "/echo"), headers=hp, raw=True)
    assert st == 200 and raw == b"", (st, raw)
    st, raw, headers = admin.request("GET", proxy_path(sid, "/port/%d/redirect" % port), raw=True)
    assert st == 302, st
    assert headers["Location"] == proxy_path(sid, "/port/%d/target?x=1" % port), headers
    st, raw, headers = admin.request("GET", proxy_path(sid, "/hop"), headers=hp, raw=True)
    assert "X-Secret" not in headers and headers.get("X-Kept") == "2", headers


@test
def test_small_answers_complete_or_cut():
    admin, sid = setup()
    port = start_app()
    # A body that follows its head after a pause arrives whole, with its length.
    st, raw, headers = admin.request("GET", proxy_path(sid, "/port/%d/late" % port), raw=True)
    assert st == 200 and raw == b"z" * 1000 and headers.get("Content-Length") == "1000", (
        st, len(raw), headers)
    # A body cut short upstream is never passed off as complete: the client gets the head and
    # what arrived, then the connection ends before the announced length.
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=30)
    conn.request("GET", proxy_path(sid, "/port/%d/cut" % port))
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Length") == "1000", resp.status
    try:
        got = resp.read()
        raise AssertionError("a cut body was relayed as complete: %d bytes" % len(got))
    except http.client.IncompleteRead as e:
        assert e.partial == b"y" * len(e.partial) and len(e.partial) <= 10, e.partial
    conn.close()
    # The relay still serves the next request.
    st, js = admin.request("GET", proxy_path(sid, "/port/%d/after" % port))
    assert st == 200 and js["path"] == "/after", (st, js)


@test
def test_sse_streams_chunks_as_produced():
    admin, sid = setup()
    port = start_app()
    SSE_FIRST_SEEN.clear()
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=120)
    conn.request("GET", proxy_path(sid, "/port/%d/sse" % port))
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    # The app sends event 1 only once we saw event 0: receiving event 0 alone
    # proves the relay streams (a buffering relay would deadlock until the
    # app's 60 s wait ran out, then deliver everything at once).
    first = resp.read1(65536)
    while b"\n\n" not in first:
        more = resp.read1(65536)
        assert more, first
        first += more
    assert first.startswith(b"data: 0") and b"data: 1" not in first, first
    SSE_FIRST_SEEN.set()
    rest = resp.read()
    assert b"data: 2" in first + rest, first + rest
    conn.close()


@test
def test_upstream_errors():
    admin, sid = setup({"proxy": {"timeout": 2}})
    port = start_app()
    closed = harness.free_port()
    st, js = admin.request("GET", proxy_path(sid, "/port/%d/x" % closed))
    assert st == 502 and "cannot reach" in js["detail"], (st, js)
    t0 = time.time()
    st, js = admin.request("GET", proxy_path(sid, "/port/%d/slow" % port))
    assert st == 504 and "did not answer" in js["detail"], (st, js)
    # The app answers only after 30 s; a generous bound that cannot flake.
    assert time.time() - t0 < 25, "timeout not applied"
    # The VNC route relays to sandbox port 8006 without port selection. Where the plugin sends
    # port 8006 is the test's choice (a closed loopback port, the port in the path), so this
    # machine's own port 8006 cannot decide the outcome: an unreachable application is a 502
    # naming the route, the sandbox and port 8006.
    vnc_admin, vnc_sid = setup({"proxy": {"timeout": 2},
                                "testop": {"proxy_base": "http://127.0.0.1:%d/p{port}" % closed}})
    st, js = vnc_admin.request("GET", "%s/sandboxes/%s/vnc/x" % (PREFIX, vnc_sid))
    assert st == 502, (st, js)
    assert js["detail"].startswith("vnc http proxy failed: cannot reach the application in "
                                   "sandbox %s (port 8006): " % vnc_sid), js
    st, js = admin.request("GET", proxy_path("nope", "/x"))
    assert st == 200 and js["status"] == "Failed" and "not found" in js["error"], js


@test
def test_big_bodies_stream_with_flat_memory():
    admin, sid = setup()
    port = start_app()
    base = rss_kib(admin.proc.pid)
    # upload, chunked, 100 MiB
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=120)
    conn.request("POST", proxy_path(sid, "/port/%d/up" % port), body=pattern(BIG),
                 encode_chunked=True, headers={"Transfer-Encoding": "chunked"})
    resp = conn.getresponse()
    js = json.loads(resp.read())
    conn.close()
    want = hashlib.sha256()
    for b in pattern(BIG):
        want.update(b)
    assert js["body_len"] == BIG and js["body_sha256"] == want.hexdigest(), js
    # download, 100 MiB
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=120)
    conn.request("GET", proxy_path(sid, "/port/%d/big?n=%d" % (port, BIG)))
    resp = conn.getresponse()
    got = hashlib.sha256()
    total = 0
    while True:
        b = resp.read(1 << 20)
        if not b:
            break
        got.update(b)
        total += len(b)
    conn.close()
    assert total == BIG and got.hexdigest() == want.hexdigest(), total
    grown = rss_kib(admin.proc.pid) - base
    assert grown < 64 * 1024, "rock-admin RSS grew by %d KiB" % grown


@test
def test_early_answer_to_a_large_body_is_relayed():
    """The application answers 413 before reading a 64 MiB body: the client gets that answer
    (rock-admin drops the rest of the body, as nginx does), and the proxy keeps working."""
    admin, sid = setup()
    port = start_app()
    size = 64 * 1024 * 1024
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=120)
    conn.request("POST", proxy_path(sid, "/port/%d/early" % port), body=pattern(size),
                 headers={"Content-Length": str(size)})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    assert resp.status == 413, (resp.status, body)
    assert json.loads(body) == {"error": "body too large"}, body
    st, js = admin.request("POST", proxy_path(sid, "/port/%d/echo" % port), body=b"after")
    assert st == 200 and js["body_len"] == 5, js


WS_SCRIPT = r"""
const path = require('path');
const WebSocket = require(path.join(process.env.NODE_MODULES, 'ws'));
const crypto = require('crypto');
const mode = process.argv[2];
function out(o) { process.stdout.write(JSON.stringify(o) + '\n'); }
if (mode === 'server') {
  const wss = new WebSocket.Server({port: 0, host: '127.0.0.1',
    handleProtocols: (ps) => ps.has('chat') ? 'chat' : false, maxPayload: 64 << 20});
  wss.on('listening', () => out({port: wss.address().port}));
  wss.on('connection', (ws, req) => {
    ws.on('message', (data, isBinary) => {
      const s = isBinary ? null : data.toString();
      if (s === 'close-me') { ws.close(4001, 'bye'); return; }
      if (s === 'headers') { ws.send(JSON.stringify(req.headers)); return; }
      ws.send(data, {binary: isBinary});
    });
  });
} else {
  const url = process.argv[3];
  const protos = process.argv[4] ? process.argv[4].split(',') : undefined;
  const ws = new WebSocket(url, protos, {maxPayload: 64 << 20, headers: {'X-Trace': 'tr', 'X-Key': 'secret'}});
  const res = {open: false, echoed: 0, mismatch: 0};
  const sent = [];
  ws.on('open', () => {
    res.open = true; res.protocol = ws.protocol;
    if (mode === 'hold') out({opened: true});
    if (mode === 'echo') {
      for (let i = 0; i < 200; i++) {
        const n = i % 50 === 0 ? (4 << 20) : Math.floor(Math.random() * 5000);
        const bin = i % 2 === 0;
        const buf = crypto.randomBytes(n);
        const m = bin ? buf : buf.toString('base64');
        sent.push({bin, m});
        ws.send(m, {binary: bin});
      }
      ws.send('headers');
    } else if (mode === 'close') {
      ws.send('close-me');
    } else if (mode === 'tcp') {
      // Port forwarding: a byte stream, so compare the concatenation.
      const parts = [];
      for (let i = 0; i < 40; i++) parts.push(crypto.randomBytes(i % 10 === 0 ? 200000 : 3000));
      const all = Buffer.concat(parts);
      res.want = crypto.createHash('sha256').update(all).digest('hex');
      res.total = all.length;
      res.got = 0; res.hash = crypto.createHash('sha256');
      for (const p of parts) ws.send(p, {binary: true});
    }
  });
  ws.on('message', (data, isBinary) => {
    if (mode !== 'tcp') return;
    res.binary = isBinary;
    res.got += data.length; res.hash.update(data);
    if (res.got >= res.total) {
      res.same = res.hash.digest('hex') === res.want; delete res.hash; ws.close(1000, 'done');
    }
  });
  ws.on('message', (data, isBinary) => {
    if (mode !== 'echo') return;
    if (sent.length === 0) { res.headers = JSON.parse(data.toString()); ws.close(1000, 'done'); return; }
    const exp = sent.shift();
    const same = exp.bin ? (isBinary && Buffer.compare(exp.m, data) === 0)
                         : (!isBinary && data.toString() === exp.m);
    if (same) res.echoed++; else res.mismatch++;
  });
  ws.on('unexpected-response', (req, r) => { res.http = r.statusCode; out(res); process.exit(0); });
  ws.on('error', (e) => { res.error = String(e); });
  ws.on('close', (code, reason) => { res.code = code; res.reason = reason.toString(); out(res); process.exit(0); });
}
"""


def node_script():
    p = os.path.join(harness.tmpdir(), "ws.js")
    with open(p, "w") as f:
        f.write(WS_SCRIPT)
    return p


def ws_env():
    env = dict(os.environ)
    env["NODE_MODULES"] = harness.NODE_MODULES
    return env


def ws_server(script):
    proc = subprocess.Popen(["node", script, "server"], stdout=subprocess.PIPE, env=ws_env(),
                            text=True)
    harness._cleanups.append(proc.kill)
    return json.loads(proc.stdout.readline())["port"]


def ws_client(script, mode, url, protos=""):
    out = subprocess.run(["node", script, mode, url, protos], capture_output=True, text=True,
                         env=ws_env(), timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@test
def test_websocket_relay():
    assert harness.node_available(), \
        "node and tests/js/node_modules are required (scripts/install-deps.sh installs them)"
    admin, sid = setup()
    script = node_script()
    port = ws_server(script)
    base = "ws://127.0.0.1:%d%s" % (admin.port, proxy_path(sid))
    res = ws_client(script, "echo", "%s/port/%d/echo" % (base, port))
    assert res["open"] and res["echoed"] == 200 and res["mismatch"] == 0, res
    assert res["code"] == 1000 and res["protocol"] == "", res
    assert res["headers"].get("x-trace") == "tr" and "x-key" not in res["headers"], res
    assert res["headers"].get("x-testop-endpoint") == "yes", res
    res = ws_client(script, "close", "%s/port/%d/x" % (base, port), "chat,other")
    assert res["code"] == 4001 and res["reason"] == "bye" and res["protocol"] == "chat", res
    res = ws_client(script, "close", "%s/port/80/x" % base)
    assert res["code"] == 1008 and res["reason"] == "Port 80 is below minimum allowed port 1024"
    res = ws_client(script, "close", "%s/port/%d/x" % (base, harness.free_port()))
    assert res["code"] == 1011 and res["reason"].startswith("Proxy error: "), res
    res = ws_client(script, "close", "%s/port/%d/x" % (base, start_app()))  # plain HTTP app
    assert res["code"] == 1011 and "refused the WebSocket handshake (HTTP 200)" in res["reason"]
    res = ws_client(script, "close", "ws://127.0.0.1:%d%s/sandboxes/nope/proxy/x"
                    % (admin.port, PREFIX))
    assert res["code"] == 1011 and "not found" in res["reason"], res
    pf = "ws://127.0.0.1:%d%s/sandboxes/%s/portforward" % (admin.port, PREFIX, sid)
    res = ws_client(script, "close", pf + "?port=22")
    assert res["code"] == 1008 and res["reason"] == "Port 22 is not allowed for port forwarding"
    closed = harness.free_port()
    res = ws_client(script, "close", pf + "?port=%d" % closed)
    assert res["code"] == 1011, res
    assert res["reason"].startswith("Proxy error: cannot connect to 127.0.0.1:%d" % closed), res
    res = ws_client(script, "close", pf)
    assert res.get("http") == 400, res


def tcp_echo_server():
    """A TCP echo server on a loopback port (the forwarded application)."""
    class Echo(socketserver.BaseRequestHandler):
        def handle(self):
            while True:
                data = self.request.recv(65536)
                if not data:
                    return
                self.request.sendall(data)
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    harness._cleanups.append(srv.shutdown)
    return srv.server_address[1]


@test
def test_portforward_tunnels_tcp():
    """RK_CAP_PORT_FORWARD: binary frames reach the TCP port and its bytes come
    back as binary frames; a plugin without the bit is refused by the gate."""
    assert harness.node_available(), \
        "node and tests/js/node_modules are required (scripts/install-deps.sh installs them)"
    admin, sid = setup()
    script = node_script()
    port = tcp_echo_server()
    pf = "ws://127.0.0.1:%d%s/sandboxes/%s/portforward?port=%d" % (admin.port, PREFIX, sid, port)
    res = ws_client(script, "tcp", pf)
    assert res["open"] and res["same"] and res["binary"], res
    assert res["got"] == res["total"] and res["code"] == 1000, res
    mini = Admin(operator="testop_min")
    harness._cleanups.append(mini.stop)
    msid = mini.start_sandbox()
    res = ws_client(script, "close", "ws://127.0.0.1:%d%s/sandboxes/%s/portforward?port=%d"
                    % (mini.port, PREFIX, msid, port))
    assert res["code"] == 1011, res
    assert res["reason"] == "Proxy error: Testop backend does not support portforward", res


@test
def test_websocket_closed_with_1001_on_drain():
    assert harness.node_available(), \
        "node and tests/js/node_modules are required (scripts/install-deps.sh installs them)"
    # A long drain deadline: waiting for the WebSocket would take 60 s.
    admin, sid = setup({"server": {"host": "127.0.0.1", "port": 0, "drain_timeout": 60}})
    script = node_script()
    port = ws_server(script)
    url = "ws://127.0.0.1:%d%s/port/%d/x" % (admin.port, proxy_path(sid), port)
    proc = subprocess.Popen(["node", script, "hold", url], stdout=subprocess.PIPE, env=ws_env(),
                            text=True)
    harness._cleanups.append(proc.kill)
    assert json.loads(proc.stdout.readline()).get("opened")
    t0 = time.time()
    admin.proc.send_signal(signal.SIGTERM)
    res = json.loads(proc.stdout.readline())
    assert res["code"] == 1001, res
    assert admin.proc.wait(timeout=120) == 0
    assert time.time() - t0 < 40, "drain waited for the WebSocket session"


@test
def test_upstream_heads_and_kept_connections():
    admin, sid = setup()
    port = start_app()
    # A large answer head passes whole, one over the relay's 64 KiB is an upstream error; a
    # folded header line is refused (RFC 9112 5.2), as nginx does, never passed on with a line
    # break in it.
    st, raw, headers = admin.request("GET", proxy_path(sid, "/port/%d/head?n=12000" % port),
                                     raw=True)
    assert st == 200 and headers.get("X-Big") == "h" * 12000, (st, len(headers.get("X-Big", "")))
    st, js = admin.request("GET", proxy_path(sid, "/port/%d/head?n=70000" % port))
    assert st == 502 and "cannot reach the application" in js["detail"], (st, js)
    st, js = admin.request("GET", proxy_path(sid, "/port/%d/head?folded" % port))
    assert st == 502 and "cannot reach the application" in js["detail"], (st, js)
    # 40 headers (some 2.7 KB of them) pass whole, in order, through both clients.
    for method, body in (("GET", None), ("POST", b"x")):
        st, raw, headers = admin.request(method, proxy_path(sid, "/port/%d/head?many=40" % port),
                                         body=body, raw=True)
        got = [(k, v) for k, v in headers.items() if k.startswith("X-H-")]
        assert st == 200 and got == [("X-H-%02d" % i, "v%02d-" % i + "x" * 60)
                                     for i in range(40)], (method, st, got[:3], len(got))
    # Header values pass as they are, an empty one and one ending in a colon included, with a
    # body (libcurl carries it) and without (the loop's HTTP/1.1 client).
    odd = {"X-Colon": "a:", "X-Empty": "", "X-Port": str(port)}
    for method, body in (("POST", b"x"), ("GET", None)):
        st, js = admin.request(method, proxy_path(sid, "/echo"),
                               body=body, headers=dict(odd, **{"X-ROCK-Target-Port": str(port)}))
        assert st == 200 and js["headers"].get("x-colon") == "a:", (method, js)
        assert js["headers"].get("x-empty") == "", (method, js)
    # Sequential requests on one client connection reuse one kept upstream connection.
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=30)
    conn.request("GET", proxy_path(sid, "/port/%d/warm" % port))
    conn.getresponse().read()
    before = App.connections
    for i in range(20):
        conn.request("HEAD" if i % 2 else "GET", proxy_path(sid, "/port/%d/k%d" % (port, i)))
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200 and (body == b"" if i % 2 else json.loads(body)["path"] ==
                                       "/k%d" % i), (i, resp.status, body[:80])
    conn.close()
    assert App.connections - before <= 1, App.connections - before


@test
def test_client_disconnect_aborts_upstream():
    admin, sid = setup()
    port = start_app()
    before = threading.active_count()
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=30)
    conn.request("GET", proxy_path(sid, "/port/%d/big?n=%d" % (port, BIG)))
    resp = conn.getresponse()
    assert resp.status == 200
    resp.read(1 << 20)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    # the app's sending thread ends once rock-admin drops the upstream connection
    harness.wait_until(lambda: threading.active_count() <= before, 10, 0.1,
                       "upstream transfer aborted")


if __name__ == "__main__":
    harness.run()
