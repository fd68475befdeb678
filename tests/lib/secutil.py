# SPDX-License-Identifier: Apache-2.0
"""Helpers for the security tests: clients that send headers exactly
as the ROCK SDKs do, over http:// or https://, a hand-written WebSocket client
and echo server (python3 stdlib only), and a test CA made with openssl.

ROCK SDK headers (alibaba/ROCK rock/sdk/sandbox/client.py `_build_headers`,
rock/ts-sdk/src/sandbox/client.ts `buildHeaders`): every call carries
`ROUTE-KEY` (a uuid hex), `X-Cluster`, the configured extra headers merged in,
and with the deprecated `xrl_authorization` / `xrlAuthorization` option
`XRL-Authorization: Bearer <token>`. JSON bodies go out as
`Content-Type: application/json` (httpx `json=`, axios with an object body);
/upload is multipart/form-data.
"""
import base64
import hashlib
import http.client
import json
import os
import socket
import ssl
import struct
import subprocess
import threading
import uuid

import harness
from harness import PREFIX

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def sdk_headers(token=None, header="XRL-Authorization"):
    """The headers a ROCK SDK sends on every call (token as `Bearer <t>`)."""
    h = {"ROUTE-KEY": uuid.uuid4().hex, "X-Cluster": "default"}
    if token is not None:
        h[header] = "Bearer " + token
    return h


class Client:
    """A ROCK SDK stand-in for one base URL (http or https)."""

    def __init__(self, port, headers, ctx=None, host="127.0.0.1"):
        self.port, self.headers, self.ctx, self.host = port, dict(headers), ctx, host

    def conn(self, timeout=120):
        if self.ctx is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self.ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def raw(self, method, path, body=None, headers=None):
        """One request; returns (status, body bytes, headers dict with lowercase names)."""
        h = dict(self.headers)
        h.update(headers or {})
        data = body
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            data = body.encode()
        c = self.conn()
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        payload = r.read()
        c.close()
        # rock-admin's answers (401, 403, 415, ... included) are validated against
        # api/openapi.json like every other test's (ROCK_RECORD_RESPONSES).
        harness._record_response(method, path, r.status, r.headers, payload)
        return r.status, payload, {k.lower(): v for k, v in r.getheaders()}

    def call(self, method, route, body=None, headers=None):
        """A ROCK route; returns (status, parsed JSON or bytes, headers)."""
        st, payload, hdrs = self.raw(method, PREFIX + route, body, headers)
        try:
            return st, json.loads(payload) if payload else None, hdrs
        except ValueError:
            return st, payload, hdrs

    def ok(self, method, route, body=None):
        st, js, _ = self.call(method, route, body)
        assert st == 200 and isinstance(js, dict) and js.get("status") == "Success", \
            (route, st, js)
        return js["result"]

    def upload(self, sid, target, data, boundary="secB0undary42"):
        """POST /upload as multipart/form-data, like the SDKs."""
        body = ("--%s\r\nContent-Disposition: form-data; name=\"sandbox_id\"\r\n\r\n%s\r\n"
                "--%s\r\nContent-Disposition: form-data; name=\"target_path\"\r\n\r\n%s\r\n"
                "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.bin\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n"
                % (boundary, sid, boundary, target, boundary)).encode() + data + \
            ("\r\n--%s--\r\n" % boundary).encode()
        return self.call("POST", "/upload", body,
                         {"Content-Type": "multipart/form-data; boundary=" + boundary})


def start_alive(client):
    """start_async, then poll get_status until alive (as the SDKs' start() does)."""
    sid = client.ok("POST", "/start_async", {"image": "python:3.11"})["sandbox_id"]
    harness.wait_until(lambda: client.ok("GET", "/get_status?sandbox_id=" + sid)["is_alive"],
                       20, 0.1, "sandbox alive")
    return sid


def sdk_flow(client, app_port, tag="flow"):
    """start -> execute -> session -> upload -> read -> proxy -> delete with the
    test operator (testop). Returns the sandbox id."""
    res = client.ok("POST", "/start_async", {"image": "python:3.11", "memory": "2g", "cpus": 1,
                                               "auto_clear_time": 5, "startup_timeout": 60})
    sid = res["sandbox_id"]
    harness.wait_until(lambda: client.ok("GET", "/get_status?sandbox_id=" + sid)["is_alive"],
                       20, 0.1, "sandbox alive")
    out = client.ok("POST", "/execute", {"sandbox_id": sid, "container_name": sid,
                                         "command": "echo " + tag})
    assert out["stdout"].strip() == tag, out
    client.ok("POST", "/create_session", {"sandbox_id": sid, "container_name": sid,
                                          "session_type": "bash", "session": "s1"})
    obs = client.ok("POST", "/run_in_session", {"sandbox_id": sid, "container_name": sid,
                                                "action_type": "bash", "session": "s1",
                                                "command": "echo in-session", "check": "silent"})
    assert "in-session" in obs["output"], obs
    client.ok("POST", "/close_session", {"sandbox_id": sid, "session": "s1",
                                         "session_type": "bash"})
    st, js, _ = client.upload(sid, "/tmp/up.txt", b"uploaded-" + tag.encode())
    assert st == 200 and js["status"] == "Success", (st, js)
    got = client.ok("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/up.txt"})
    assert got["content"] == "uploaded-" + tag, got
    st, payload, _ = client.raw("GET", "%s/sandboxes/%s/proxy/port/%d/hello?x=1"
                                % (PREFIX, sid, app_port))
    assert st == 200, (st, payload)
    seen = json.loads(payload)
    assert seen["path"] == "/hello?x=1", seen
    client.ok("POST", "/delete", {"sandbox_id": sid, "container_name": sid})
    return sid, seen


# ---- an application "inside the sandbox" (testop maps port N to 127.0.0.1:N) ----

def start_echo_app():
    """An HTTP app echoing method, path and request headers as JSON, that also
    speaks WebSocket (echoes every text/binary frame). Returns its port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def serve(conn):
        try:
            conn.settimeout(60)
            head = b""
            while b"\r\n\r\n" not in head:
                b = conn.recv(4096)
                if not b:
                    return
                head += b
            text, rest = head.split(b"\r\n\r\n", 1)
            lines = text.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            hdrs = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                hdrs[k.strip().lower()] = v.strip()
            if hdrs.get("upgrade", "").lower() == "websocket":
                accept = base64.b64encode(hashlib.sha1(
                    (hdrs["sec-websocket-key"] + WS_GUID).encode()).digest()).decode()
                proto = hdrs.get("sec-websocket-protocol", "").split(",")[0].strip()
                resp = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n" % accept)
                if proto:
                    resp += "Sec-WebSocket-Protocol: %s\r\n" % proto
                conn.sendall((resp + "\r\n").encode())
                buf = WsBuffer(conn, rest)
                while True:
                    op, data = buf.read_frame()
                    if op is None or op == 8:
                        return
                    conn.sendall(ws_frame(op, data, mask=False))
            length = int(hdrs.get("content-length") or 0)
            while len(rest) < length:
                b = conn.recv(65536)
                if not b:
                    break
                rest += b
            body = json.dumps({"method": method, "path": path, "headers": hdrs}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass
        finally:
            conn.close()

    def accept_loop():
        srv.settimeout(0.5)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()

    def shutdown():
        stop.set()
        srv.close()
    harness._cleanups.append(shutdown)
    return port


# ---- WebSocket by hand ------------------------------------------------------------

def ws_frame(op, data, mask=True):
    """One final frame; client frames are masked (RFC 6455 5.3)."""
    n = len(data)
    head = bytes([0x80 | op])
    mbit = 0x80 if mask else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + data
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(data))


class WsBuffer:
    """Reads frames from a socket with some bytes already received."""

    def __init__(self, sock, initial=b""):
        self.sock, self.buf = sock, initial

    def need(self, n):
        while len(self.buf) < n:
            b = self.sock.recv(65536)
            if not b:
                return False
            self.buf += b
        return True

    def take(self, n):
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self):
        if not self.need(2):
            return None, None
        b0, b1 = self.take(2)
        n = b1 & 0x7F
        if n == 126:
            self.need(2)
            n = struct.unpack("!H", self.take(2))[0]
        elif n == 127:
            self.need(8)
            n = struct.unpack("!Q", self.take(8))[0]
        key = None
        if b1 & 0x80:
            self.need(4)
            key = self.take(4)
        if not self.need(n):
            return None, None
        data = self.take(n)
        if key:
            data = bytes(b ^ key[i % 4] for i, b in enumerate(data))
        return b0 & 0x0F, data


def ws_connect(port, path, headers, ctx=None, host="127.0.0.1", timeout=60):
    """Open a WebSocket through rock-admin (ws:// or, with ctx, wss://). Returns
    (status, response head text, socket-or-None, WsBuffer-or-None)."""
    raw = socket.create_connection((host, port), timeout=timeout)
    sock = ctx.wrap_socket(raw, server_hostname=host) if ctx is not None else raw
    key = base64.b64encode(os.urandom(16)).decode()
    req = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n" % (path, host, port, key))
    for k, v in headers.items():
        req += "%s: %s\r\n" % (k, v)
    sock.sendall((req + "\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = sock.recv(4096)
        if not b:
            break
        head += b
    text, _, rest = head.partition(b"\r\n\r\n")
    text = text.decode("latin-1")
    status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/") else 0
    if status != 101:
        sock.close()
        return status, text + "\r\n\r\n" + rest.decode("latin-1", "replace"), None, None
    want = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    assert want in text, text
    return status, text, sock, WsBuffer(sock, rest)


def ws_echo_roundtrip(sock, buf, payload, op=1):
    """Send one masked frame (text by default); return the payload of the data
    frames that come back until as many bytes arrived."""
    sock.sendall(ws_frame(op, payload))
    got = b""
    while len(got) < len(payload):
        rop, data = buf.read_frame()
        assert rop is not None, "connection closed before the echo"
        if rop in (1, 2):
            got += data
    return got


def start_tcp_echo():
    """A TCP echo server on a loopback port (a port-forwarded application)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.5)
    stop = threading.Event()

    def serve(c):
        with c:
            while True:
                data = c.recv(65536)
                if not data:
                    return
                c.sendall(data)

    def loop():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()

    def shutdown():
        stop.set()
        srv.close()
    harness._cleanups.append(shutdown)
    return srv.getsockname()[1]


# ---- TLS material -----------------------------------------------------------------

def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True,
                   timeout=120)


def make_ca(d):
    """A throw-away CA in directory d; returns the CA certificate path."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", "/CN=rock-admin test CA", cwd=d)
    return os.path.join(d, "ca.pem")


def make_server_cert(d, name, cn="127.0.0.1"):
    """A server certificate for 127.0.0.1/localhost signed by the CA in d.
    Returns (cert path, key path)."""
    with open(os.path.join(d, "ext-" + name), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
            name + ".csr", "-subj", "/CN=" + cn, cwd=d)
    openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", "ext-" + name,
            cwd=d)
    os.chmod(os.path.join(d, name + ".key"), 0o600)
    return os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")


def client_context(ca_path):
    ctx = ssl.create_default_context(cafile=ca_path)
    ctx.check_hostname = True
    return ctx


def write_tokens(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


def sha256_hex(s):
    return hashlib.sha256(s.encode()).hexdigest()
