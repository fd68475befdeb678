"""Small stdlib-only HTTP helpers shared by the opensandbox-sim Python tests.

The simulator is started by the calling shell script (sim-lib.sh), which exports SIM_URL,
SIM_HOSTPORT and SIM_ROOT. Everything talks to 127.0.0.1 only.
"""

import http.client
import json
import os
import socket
import time

HOSTPORT = os.environ["SIM_HOSTPORT"]
HOST, PORT = HOSTPORT.rsplit(":", 1)
PORT = int(PORT)
API_KEY = os.environ.get("SIM_API_KEY")

_failures = []


def request(method, path, body=None, headers=None, timeout=10, raw_body=None):
    """One request on a fresh connection; returns (status, headers, bytes)."""
    conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    hdrs = dict(headers or {})
    data = raw_body
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def lc(method, path, body=None, raw_body=None, headers=None):
    """Lifecycle request with the API key; returns (status, parsed JSON or None)."""
    hdrs = dict(headers or {})
    if API_KEY:
        hdrs["OPEN-SANDBOX-API-KEY"] = API_KEY
    st, _, data = request(method, "/v1" + path, body=body, raw_body=raw_body, headers=hdrs)
    try:
        return st, json.loads(data) if data else None
    except ValueError:
        return st, data


def create(**extra):
    """Create a sandbox with a valid body (overridable); returns the response JSON."""
    body = {
        "image": {"uri": "python:3.11"},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "resourceLimits": {"cpu": "1", "memory": "2Gi"},
        "timeout": 600,
    }
    body.update(extra)
    st, js = lc("POST", "/sandboxes", body)
    check(st == 202, "create -> 202", f"(got {st} {js})")
    return js


def wait_running(sid, timeout=10):
    """Poll GET /sandboxes/<id> until Running."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, js = lc("GET", f"/sandboxes/{sid}")
        if st == 200 and js["status"]["state"] == "Running":
            return
        time.sleep(0.05)
    raise AssertionError(f"sandbox {sid} not Running")


def execd(sid, method, path, body=None, headers=None, timeout=10):
    """Direct execd request for a sandbox; returns (status, headers, bytes)."""
    return request(method, f"/sandboxes/{sid}/execd{path}", body=body, headers=headers,
                   timeout=timeout)


def faults(**cfg):
    """Replace the fault configuration (absent switches are off)."""
    st, _, data = request("POST", "/_sim/faults", body=cfg)
    if st != 200:
        check(False, "POST /_sim/faults -> 200", f"(got {st} {data!r})")
    return json.loads(data)


def raw_stream(path, body, read_timeout=10.0, stop_after=None):
    """POST a JSON body with a raw HTTP/1.1 socket; returns (bytes, eof_reached).

    Reads until EOF or read_timeout of silence. stop_after: stop once this byte string appears.
    """
    data = json.dumps(body).encode()
    s = socket.create_connection((HOST, PORT), timeout=read_timeout)
    s.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {HOSTPORT}\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    buf = b""
    eof = False
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                eof = True
                break
            buf += chunk
            if stop_after is not None and stop_after in buf:
                break
    except socket.timeout:
        pass
    except ConnectionResetError:
        eof = True
    finally:
        s.close()
    return buf, eof


def check(cond, what, detail=""):
    """Record a failed assertion (tests continue so all failures are reported)."""
    if cond:
        print(f"ok - {what}")
    else:
        print(f"not ok - {what} {detail}")
        _failures.append(what)


def finish():
    """Exit 1 if any check failed."""
    if _failures:
        print(f"{len(_failures)} check(s) failed")
        raise SystemExit(1)
    print("all checks passed")
