# SPDX-License-Identifier: Apache-2.0
"""Test harness for rock-admin integration tests (python3 standard library only).

Starts real processes (redis-server, opensandbox-sim, rock-admin) on free
loopback ports, talks to them over real sockets, and stops them afterwards.
Every server binds to 127.0.0.1; nothing leaves the machine.
"""
import http.client
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

PREFIX = "/apis/envs/sandbox/v1"
ADMIN_BIN = os.environ.get("ROCK_ADMIN_BIN", "rock-admin")
TEST_PLUGIN_DIR = os.environ.get("ROCK_TEST_PLUGIN_DIR", "")
OS_PLUGIN_DIR = os.environ.get("ROCK_OPENSANDBOX_PLUGIN_DIR", "")
SIM_BIN = os.environ.get("OPENSANDBOX_SIM", "opensandbox-sim")
NODE_MODULES = os.environ.get("ROCK_TEST_NODE_MODULES", "")
# A real OpenSandbox lifecycle server instead of the simulator (the real-OpenSandbox CI stage,
# tests/real-opensandbox/): its URL and API key. Tests that need the simulator's fault switches,
# options or direct execd routes skip themselves (Skip) with the reason.
REAL_OS_URL = os.environ.get("ROCK_TEST_OPENSANDBOX_URL", "")
REAL_OS_KEY = os.environ.get("ROCK_TEST_OPENSANDBOX_API_KEY", "")
# "host": the server's docker host networking, one live sandbox at a time (execd on port 44772
# of the machine); "bridge": endpoints "127.0.0.1:<mapped>/proxy/<port>", several at once.
REAL_OS_NETWORK = os.environ.get("ROCK_TEST_OPENSANDBOX_NETWORK", "host")

_cleanups = []


class Skip(Exception):
    """Raised by a test that cannot run here; run() reports it as skipped with the reason."""


def real_opensandbox():
    """True when the tests talk to a real OpenSandbox server (ROCK_TEST_OPENSANDBOX_URL)."""
    return bool(REAL_OS_URL)


def sim_only(reason):
    """Skip the calling test against a real OpenSandbox: it needs the simulator (reason)."""
    if REAL_OS_URL:
        raise Skip("needs the simulator: " + reason)


def bridge_only(reason="it needs several live sandboxes at once (host networking: one)"):
    """Skip against a real OpenSandbox in host networking (reason: why bridge is needed)."""
    if REAL_OS_URL and REAL_OS_NETWORK == "host":
        raise Skip("not in host networking: " + reason)


def os_api_key(default):
    """The API key the tests give rock-admin: the real server's in that mode, else default."""
    return REAL_OS_KEY if REAL_OS_URL else default
_admins = []
_procs = []


def free_port():
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tmpdir(prefix="rock-test-", parent=None):
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    _cleanups.append(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


def rss_means_something(pid):
    """False when the daemon runs under AddressSanitizer or ThreadSanitizer: ASan keeps freed
    memory in its quarantine (up to 256 MiB) and pads every allocation, TSan adds shadow memory,
    so RSS grows with what the run allocated whatever the code holds; the normal build's run
    checks memory bounds."""
    with open("/proc/%d/maps" % pid) as f:
        maps = f.read()
    return "libasan" not in maps and "libtsan" not in maps


def wait_until(pred, timeout=10.0, interval=0.05, what="condition"):
    """Poll pred() until it returns a truthy value or fail after timeout."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s (last=%r)" % (what, last))


# Each server starts in a session of its own (its process group is killed whole). A benchmark
# may turn it off to run servers in its own session (bench_cheap.py --shared-session).
NEW_SESSION = True


class Process:
    """A child process with its output captured in a file."""

    def __init__(self, argv, env=None, name="proc"):
        self.name = name
        self.logpath = os.path.join(tmpdir(), name + ".log")
        self.log = open(self.logpath, "wb")
        full_env = dict(os.environ)
        if env is not None:
            full_env = env
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=full_env, start_new_session=NEW_SESSION)
        _cleanups.append(self.kill)
        _procs.append(self)

    def output(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_for_line(self, pattern, timeout=15.0):
        rx = re.compile(pattern)

        def find():
            if self.proc.poll() is not None:
                raise AssertionError("%s exited with %s:\n%s" % (self.name, self.proc.returncode,
                                                                 self.output()[-4000:]))
            m = rx.search(self.output())
            return m
        return wait_until(find, timeout, what="%s to print %s" % (self.name, pattern))

    def stop(self, sig=signal.SIGTERM, timeout=20.0):
        """Send sig and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("%s did not stop within %ss" % (self.name, timeout))
        return self.proc.returncode

    def kill(self):
        """Clean-up: SIGTERM first, so a simulator can end the processes it started in
        their own process groups (sandbox commands, background apps), then SIGKILL
        the whole group if it has not exited within a few seconds."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        self.log.close()


class Redis(Process):
    """redis-server on a free loopback port, no persistence."""

    def __init__(self, port=None, password=None):
        self.port = port or free_port()
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", tmpdir()]
        if password:
            argv += ["--requirepass", password]
        super().__init__(argv, name="redis-%d" % self.port)
        self.wait_for_line(r"Ready to accept connections")

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "-p", str(self.port)] + list(args),
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()


class RealOpenSandbox:
    """A real OpenSandbox lifecycle server (ROCK_TEST_OPENSANDBOX_URL) in place of the
    simulator: lifecycle routes (/v1/...) go to it, the simulator's direct execd routes
    (/sandboxes/<id>/execd/...) to the sandbox's real execd at the endpoint the server names,
    and the simulator's control routes (/_sim/) skip the test. At the end of each test every sandbox this
    server holds for rock-admin (metadata rock_sandbox_id) is deleted, so the next test
    starts empty (host networking: one live sandbox at a time)."""

    name = "real-opensandbox"

    # Simulator options that only bound the simulator itself (the real components have
    # no such limits): dropped, with their value.
    HARMLESS = ("--max-upload-mb",)

    def __init__(self, api_key=None, extra=None):
        extra = list(extra or [])
        for opt in self.HARMLESS:
            while opt in extra:
                i = extra.index(opt)
                del extra[i:i + 2]
        if extra:
            raise Skip("needs the simulator's options %s" % " ".join(extra))
        if not api_key:
            raise Skip("needs a keyless OpenSandbox (the real server has an API key)")
        u = urllib.parse.urlsplit(REAL_OS_URL)
        self.host, self.port = u.hostname, u.port or 80
        self.endpoint = "%s:%d" % (self.host, self.port)
        self.api_key = REAL_OS_KEY
        self.root = None
        _cleanups.append(self.delete_all)

    def output(self):
        return ""

    def request(self, method, path, body=None, headers=None):
        if path.startswith("/_sim/"):
            raise Skip("needs the simulator's control API (%s %s)" % (method, path))
        m = re.match(r"^/sandboxes/([^/]+)/execd(/.*)$", path)
        if m:  # the simulator's direct execd route: the real execd at its endpoint
            return self.execd_request(m.group(1), method, m.group(2), body)
        h = dict(headers or {})
        h.setdefault("OPEN-SANDBOX-API-KEY", self.api_key)
        return http_request(self.host, self.port, method, path, body, h)

    def execd_request(self, osid, method, path, body=None):
        """A request to the sandbox's execd at the endpoint the server names for port 44772
        ("host:port" or "host:port/proxy/44772" in bridge networking)."""
        st, js = self.request("GET", "/v1/sandboxes/%s/endpoints/44772" % osid)
        assert st == 200, (st, js)
        hostport, _, prefix = js["endpoint"].partition("/")
        host, _, port = hostport.rpartition(":")
        return http_request(host, int(port), method, (("/" + prefix) if prefix else "") + path,
                            body, js.get("headers") or {})

    def rock_sandboxes(self):
        st, js = self.request("GET", "/v1/sandboxes?pageSize=200")
        assert st == 200, (st, js)
        return [i for i in js.get("items") or []
                if (i.get("metadata") or {}).get("rock_sandbox_id")
                and i["status"]["state"] != "Terminated"]

    def delete_all(self):
        for it in self.rock_sandboxes():
            self.request("DELETE", "/v1/sandboxes/" + it["id"])
        wait_until(lambda: not self.rock_sandboxes(), 60, 0.5, "real sandboxes deleted")
        if REAL_OS_NETWORK == "host":  # the next sandbox's execd must be able to bind 44772
            def port_free():
                try:
                    socket.create_connection(("127.0.0.1", 44772), 0.5).close()
                    return False
                except OSError:
                    return True
            wait_until(port_free, 60, 0.2, "execd port 44772 free")


class Sim(Process):
    """The OpenSandbox simulator (a RealOpenSandbox in the real-OpenSandbox mode)."""

    def __new__(cls, *a, **kw):
        if REAL_OS_URL:
            return RealOpenSandbox(*a, **{k: v for k, v in kw.items()
                                          if k not in ("ready_delay_ms", "root_parent")})
        return super().__new__(cls)

    def __init__(self, api_key=None, extra=None, ready_delay_ms=200, root_parent=None):
        self.root = tmpdir("rock-sim-", root_parent)  # its sandboxes' directories
        argv = [SIM_BIN, "--listen", "127.0.0.1:0", "--root", self.root,
                "--ready-delay-ms", str(ready_delay_ms)]
        if api_key:
            argv += ["--api-key", api_key]
        argv += extra or []
        super().__init__(argv, name="opensandbox-sim")
        m = self.wait_for_line(r"opensandbox-sim ready on http://([0-9.]+):(\d+)")
        self.port = int(m.group(2))
        self.endpoint = "127.0.0.1:%d" % self.port
        self.api_key = api_key

    def request(self, method, path, body=None, headers=None):
        h = dict(headers or {})
        if self.api_key:
            h.setdefault("OPEN-SANDBOX-API-KEY", self.api_key)
        return http_request("127.0.0.1", self.port, method, path, body, h)

    def execd_request(self, osid, method, path, body=None):
        """A request to the sandbox's execd (the simulator's direct execd route)."""
        return self.request(method, "/sandboxes/%s/execd%s" % (osid, path), body)


def yaml_dump(cfg, indent=0):
    """Tiny YAML writer for nested dicts of scalars (enough for our configs)."""
    lines = []
    for k, v in cfg.items():
        pad = "  " * indent
        if isinstance(v, dict):
            lines.append("%s%s:" % (pad, k))
            lines.append(yaml_dump(v, indent + 1))
        elif isinstance(v, bool):
            lines.append("%s%s: %s" % (pad, k, "true" if v else "false"))
        elif v is None:
            lines.append("%s%s: null" % (pad, k))
        elif isinstance(v, (int, float)):
            lines.append("%s%s: %s" % (pad, k, v))
        elif isinstance(v, list):  # a flow sequence (JSON is valid YAML)
            lines.append("%s%s: %s" % (pad, k, json.dumps([str(x) for x in v])))
        else:
            lines.append("%s%s: %s" % (pad, k, json.dumps(str(v))))
    return "\n".join(l for l in lines if l != "")


def deep_merge(base, over):
    out = dict(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


class Admin(Process):
    """A rock-admin process with a generated config."""

    def __init__(self, operator="testop", config=None, redis=None, env=None, wait=True):
        plugin_dir = OS_PLUGIN_DIR if operator == "opensandbox" else TEST_PLUGIN_DIR
        base = {
            "server": {"host": "127.0.0.1", "port": 0, "drain_timeout": 10},
            "runtime": {"operator_type": operator, "plugin_dir": plugin_dir},
            "log": {"level": "info"},
        }
        if redis is not None:
            base["redis"] = {"host": "127.0.0.1", "port": redis.port}
        cfg = deep_merge(base, config or {})
        self.config_path = os.path.join(tmpdir(), "rock-admin.yml")
        with open(self.config_path, "w") as f:
            f.write(yaml_dump(cfg) + "\n")
        full_env = dict(os.environ)
        full_env.update(env or {})
        super().__init__([ADMIN_BIN, "-c", self.config_path], env=full_env, name="rock-admin")
        self.check_exit = True  # a clean SIGTERM exit (0, no sanitizer report) is asserted
        _admins.append(self)
        self.port = None
        if wait:
            m = self.wait_for_line(r"rock-admin ready on http://[0-9.:]+:(\d+)")
            self.port = int(m.group(1))

    def kill(self):
        super().kill()
        if not getattr(self, "routes_recorded", False):
            self.routes_recorded = True
            record_routes(self.output())

    # HTTP helpers -------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, raw=False):
        return http_request("127.0.0.1", self.port, method, path, body, headers, raw=raw,
                            record=True)

    def api(self, method, route, body=None, query=None, headers=None):
        """Call a ROCK route; returns (http_status, parsed JSON).
        Against a real OpenSandbox, a command whose execd event stream ended without its
        completion event (a known upstream fault of execd behind its /proxy path, about 1 run
        in 100-200 in bridge networking; rock-admin answers it with a clear 5000, tested with
        the simulator's cut_stream_after) is sent once more, at most twice (it was seen twice in
        a row on one session's quick commands), and a "# upstream stream ended early" line says
        so each time; the stage counts these lines."""
        path = PREFIX + route
        if query:
            path += "?" + urllib.parse.urlencode(query)
        st, js = self.request(method, path, body, headers)
        for _ in range(2):
            if not (REAL_OS_URL and route in ("/execute", "/run_in_session", "/create_session")
                    and isinstance(js, dict)
                    and "upstream stream ended early" in (js.get("error") or "")):
                break
            print("# upstream stream ended early on %s; sent once more (real OpenSandbox)"
                  % route, flush=True)
            st, js = self.request(method, path, body, headers)
        return st, js

    def ok(self, method, route, body=None, query=None, headers=None):
        """Call a route and assert HTTP 200 + Success; returns result."""
        st, js = self.api(method, route, body, query, headers)
        assert st == 200, (st, js)
        assert js.get("status") == "Success", js
        return js["result"]

    def start_sandbox(self, image="python:3.11", wait_alive=True, headers=None, **extra):
        body = {"image": image, "memory": "2g", "cpus": 1}
        body.update(extra)
        res = self.ok("POST", "/start_async", body, headers=headers)
        sid = res["sandbox_id"]
        if wait_alive:
            self.wait_alive(sid)
        return sid

    def wait_alive(self, sid, timeout=20.0):
        if REAL_OS_URL:  # a real container starts in seconds, many more on a loaded machine
            timeout = max(timeout, 90.0)
        def alive():
            st, js = self.api("GET", "/get_status", query={"sandbox_id": sid,
                                                           "include_all_states": "false"})
            return js.get("status") == "Success" and js["result"]["is_alive"]
        wait_until(alive, timeout, 0.1, "sandbox %s alive" % sid)


# ---- routes served (opt-in) ----------------------------------------
# With ROCK_TEST_ROUTES_FILE=PATH the route name and HTTP status of every access-log line of
# every rock-admin a test started ("route status", one a line) is appended to PATH when that
# rock-admin is cleaned up; tests/real-opensandbox/routes.py compares them with the route tables.
ROUTES_FILE = os.environ.get("ROCK_TEST_ROUTES_FILE", "")
_ACCESS_TEXT = re.compile(r"\baccess id=\S+ method=\S+ path=\S* route=(\S+) status=(\d+)")
_ACCESS_JSON = re.compile(r'"msg":"access".*"route":"([^"]+)","status":(\d+)')


def record_routes(log):
    """Append the routes an admin's log shows it served to ROCK_TEST_ROUTES_FILE (if set)."""
    if not ROUTES_FILE:
        return
    lines = []
    for line in log.splitlines():
        m = _ACCESS_TEXT.search(line) or _ACCESS_JSON.search(line)
        if m:
            lines.append("%s %s\n" % m.groups())
    with open(ROUTES_FILE, "a") as f:
        f.writelines(lines)


# ---- response recording (opt-in) ----------------------------------
# With ROCK_RECORD_RESPONSES=DIR every response rock-admin gives to
# Admin.request() is appended to DIR/<test>.jsonl; tests/api/openapi-responses.js
# later validates them all against api/openapi.json.
RECORD_DIR = os.environ.get("ROCK_RECORD_RESPONSES", "")
RECORD_MAX_BODY = 1 << 20
_record_file = None


def _record_response(method, path, status, headers, payload):
    global _record_file
    if not RECORD_DIR:
        return
    if _record_file is None:
        os.makedirs(RECORD_DIR, exist_ok=True)
        name = os.path.splitext(os.path.basename(sys.argv[0] or "test"))[0]
        _record_file = open(os.path.join(RECORD_DIR, name + ".jsonl"), "w")
    rec = {"method": method, "path": path, "status": status,
           "content_type": headers.get("Content-Type", ""),
           "truncated": len(payload) > RECORD_MAX_BODY}
    try:
        rec["body"] = payload[:RECORD_MAX_BODY].decode("utf-8")
    except UnicodeDecodeError:
        rec["body"] = None  # binary (relayed) bodies are not validated
    _record_file.write(json.dumps(rec) + "\n")
    _record_file.flush()


def http_request(host, port, method, path, body=None, headers=None, raw=False, timeout=120,
                 record=False):
    """One HTTP request on a fresh connection; returns (status, json|bytes).
    record=True: a rock-admin response, recorded when ROCK_RECORD_RESPONSES is set."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    h = dict(headers or {})
    data = None
    if body is not None:
        if isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=data, headers=h)
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    if record:
        _record_response(method, path, resp.status, dict(resp.getheaders()), payload)
    if raw:
        return resp.status, payload, dict(resp.getheaders())
    try:
        return resp.status, json.loads(payload) if payload else None
    except ValueError:
        return resp.status, payload


# ---- a tiny test runner --------------------------------------------------------

_tests = []


def test(fn):
    """Register a test function."""
    _tests.append(fn)
    return fn


def cleanup():
    while _cleanups:
        f = _cleanups.pop()
        try:
            f()
        except Exception:  # noqa: BLE001 - cleanup must go on
            pass


def stop_admins():
    """Stop every rock-admin of the test with SIGTERM and assert a clean exit:
    status 0 and no sanitizer report (leaks, memory errors, UB, data races)."""
    problems = []
    while _admins:
        a = _admins.pop()
        if not a.check_exit:
            continue
        rc = a.stop()
        out = a.output()
        bad = [m for m in ("AddressSanitizer", "LeakSanitizer", "ThreadSanitizer",
                           "runtime error:") if m in out]
        if rc != 0 or bad:
            problems.append("rock-admin exited with %s %s:\n%s" % (rc, bad, out[-6000:]))
    if problems:
        raise AssertionError("\n".join(problems))


def run():
    """Run the registered tests; exit 0 if all passed, 1 otherwise."""
    only = os.environ.get("ROCK_TEST_ONLY")
    passed = failed = skipped = 0
    for fn in _tests:
        if only and only not in fn.__name__:
            continue
        t0 = time.time()
        try:
            fn()
            stop_admins()
            passed += 1
            print("ok - %s (%.1fs)" % (fn.__name__, time.time() - t0), flush=True)
        except Skip as why:
            try:
                stop_admins()
            except AssertionError:
                pass  # the test did not get to its own checks
            skipped += 1
            print("ok - %s # SKIP %s" % (fn.__name__, why), flush=True)
        except Exception:  # noqa: BLE001 - report every failure
            failed += 1
            print("not ok - %s" % fn.__name__, flush=True)
            traceback.print_exc()
            for p in _procs:
                print("---- output of %s (last 3000 chars):\n%s" % (p.name, p.output()[-3000:]))
        finally:
            _admins.clear()
            cleanup()
            _procs.clear()
    print("%d passed, %d failed%s" % (passed, failed,
                                      ", %d skipped" % skipped if skipped else ""), flush=True)
    sys.exit(0 if failed == 0 else 1)


def node_available():
    return bool(NODE_MODULES) and os.path.isdir(NODE_MODULES) and shutil.which("node")


def read_responses_releasing(socks, timeout, fifo):
    """read_responses while commands that wait on the named pipe fifo (`cat fifo`) are let go:
    its write end is opened every 0.2 s until every answer is in, so commands that start
    reading late are released too. fifo None: read_responses alone."""
    stop = threading.Event()

    def release():
        while fifo and not stop.is_set():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass  # no reader at the moment
            stop.wait(0.2)
    t = threading.Thread(target=release, daemon=True)
    t.start()
    try:
        return read_responses(socks, timeout)
    finally:
        stop.set()
        t.join()


def read_responses(socks, timeout):
    """Read many raw HTTP/1.1 answers at once (one per socket, Connection: close) to EOF:
    [(http status, body bytes)] in socket order, chunked bodies decoded."""
    sel = selectors.DefaultSelector()
    bufs = {}
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        bufs[i] = b""
    left, deadline = len(socks), time.time() + timeout
    while left and time.time() < deadline:
        for key, _ in sel.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            if chunk:
                bufs[key.data] += chunk
            else:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                left -= 1
    assert left == 0, "%d streams unfinished after %ds" % (left, timeout)
    out = []
    for i in range(len(socks)):
        head, _, body = bufs[i].partition(b"\r\n\r\n")
        if b"transfer-encoding: chunked" in head.lower():
            plain = b""
            while body:
                size, _, rest = body.partition(b"\r\n")
                n = int(size.split(b";")[0], 16)
                if n == 0:
                    break
                plain += rest[:n]
                body = rest[n + 2:]
            body = plain
        out.append((int(head.split(b" ", 2)[1]), body))
    return out
