# SPDX-License-Identifier: Apache-2.0
"""rock-admin with operator_type opensandbox, end to end: a real redis-server,
the OpenSandbox simulator (tests/opensandbox-sim) and rock-admin, all on
127.0.0.1 over real sockets. Every assertion is about what a ROCK client sees
(rock-admin-api.md §4-§7, rock-opensandbox-behaviour.md), plus what really
happened in the simulator (lifecycle API, fault switches).

Some tests put a small recording HTTP relay between rock-admin and the
simulator ("Recorder"): the simulator's lifecycle API does not echo
resourceLimits/timeout of a create, and has no request log, so the relay is
how the test sees the exact create body and which execd route (direct
`/sandboxes/<id>/execd` or server proxy `/sandboxes/<id>/proxy/44772`) and
which headers rock-admin used. Endpoint discovery builds execd addresses from
the Host header the client sent, so execd traffic flows through the relay too.
"""
import base64
import hashlib
import http.client
import http.server
import json
import os
import random
import re
import socket
import socketserver
import threading
import time
import urllib.parse

from harness import (Admin, Redis, Sim, bridge_only, os_api_key, real_opensandbox, run,
                     sim_only, test, tmpdir, wait_until)

# The admin must get its key from the config only (tests of the absent key).
os.environ.pop("OPEN_SANDBOX_API_KEY", None)

API_KEY = os_api_key("sim-key-1")
EXECD_HDR = ("X-Execd-Token", "tok-42")
STOP_TEXT = ("OpenSandbox backend does not support stop by default. OpenSandbox pause requires "
             "creating the sandbox with persistence enabled; use delete instead.")
TS_NON_NULL = ("host_name", "host_ip", "status", "port_mapping", "image", "gateway_version",
               "swe_rex_version", "user_id", "experiment_id", "namespace", "cpus", "memory",
               "is_alive", "state_history")
START_BODY = {"image": "python:3.11", "image_os": "linux", "auto_clear_time": 5,
              "auto_clear_time_minutes": 5, "startup_timeout": 180, "memory": "8g", "cpus": 2,
              "num_gpus": None, "accelerator_type": None, "registry_username": None,
              "registry_password": None, "use_kata_runtime": False, "limit_cpus": None,
              "sandbox_id": None, "auto_archive_seconds": None, "auto_delete_seconds": None,
              "disk": "50G"}
CLIENT_HDRS = {"X-Cluster": "vpc-nt-a", "X-User-Id": "alice", "X-Experiment-Id": "exp-7",
               "X-Namespace": "team-a"}


# ---- helpers --------------------------------------------------------------------

def os_config(endpoint, api_key=API_KEY, **over):
    c = {"endpoint": endpoint, "protocol": "http", "use_server_proxy": False}
    if api_key is not None:
        c["api_key"] = api_key
    c.update(over)
    return {"opensandbox": c}


def setup(api_key=API_KEY, sim_extra=None, admin_cfg=None, recorder=False, **os_over):
    """redis + sim (+ recorder) + admin; returns (admin, sim, redis, recorder)."""
    redis = Redis()
    sim = Sim(api_key=API_KEY if api_key is not False else None, extra=sim_extra)
    rec = Recorder(sim.port) if recorder else None
    endpoint = rec.endpoint if rec else sim.endpoint
    cfg = os_config(endpoint, api_key=api_key if api_key else None, **os_over)
    for k, v in (admin_cfg or {}).items():
        cfg[k] = v
    admin = Admin(operator="opensandbox", config=cfg, redis=redis)
    return admin, sim, redis, rec


def status(admin, sid, all_states=False, headers=None):
    return admin.api("GET", "/get_status", query={
        "sandbox_id": sid, "include_all_states": "True" if all_states else "False"},
        headers=headers)


def osid_of(admin, sid):
    js = status(admin, sid, all_states=True)[1]
    return js["result"]["host_name"]


def sim_sandbox(sim, osid):
    return sim.request("GET", "/v1/sandboxes/" + osid)


def sim_list_by_rock_id(sim, sid):
    q = urllib.parse.urlencode({"metadata": "rock_sandbox_id=" + sid, "pageSize": 200})
    st, js = sim.request("GET", "/v1/sandboxes?" + q)
    assert st == 200, (st, js)
    return js["items"]


def faults(sim, cfg=None):
    if cfg is None:
        st, _ = sim.request("DELETE", "/_sim/faults")
    else:
        st, _ = sim.request("POST", "/_sim/faults", cfg)
    assert st == 200, st  # the simulator answers its fault switches with 200


def execute(admin, sid, command, **kw):
    body = {"sandbox_id": sid, "command": command, "timeout": 60, "cwd": None, "env": None}
    body.update(kw)
    return admin.api("POST", "/execute", body)


def run_ok(admin, sid, command, **kw):
    st, js = execute(admin, sid, command, **kw)
    assert st == 200 and js["status"] == "Success", js
    return js["result"]


def start_alive(admin, headers=None, **body):
    b = dict(START_BODY)
    b.update(body)
    st, js = admin.api("POST", "/start_async", b, headers=headers)
    assert st == 200 and js["status"] == "Success", js
    sid = js["result"]["sandbox_id"]
    admin.wait_alive(sid, timeout=30)
    return sid


def sandbox_bytes(admin, sid, path):
    """A file's bytes as the sandbox sees it (the simulator's sandbox is this machine, a real
    one is a container: read through execute)."""
    r = run_ok(admin, sid, ["base64", "-w0", path], timeout=120)
    assert r["exit_code"] == 0, r
    return base64.b64decode(r["stdout"])


def sandbox_has(admin, sid, path):
    return run_ok(admin, sid, ["test", "-e", path])["exit_code"] == 0


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Recorder:
    """A recording HTTP relay in front of the simulator (buffers each response)."""

    def __init__(self, sim_port):
        self.sim_port = sim_port
        self.log = []  # (method, path, headers(lower-case dict), body bytes)
        self.lock = threading.Lock()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _relay(self):
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    parts = []
                    while True:
                        ln = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if ln == 0:
                            while self.rfile.readline().strip():
                                pass
                            break
                        parts.append(self.rfile.read(ln))
                        self.rfile.readline()
                    body = b"".join(parts)
                else:
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                n = len(body)
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                with outer.lock:
                    outer.log.append((self.command, self.path, hdrs, body))
                conn = http.client.HTTPConnection("127.0.0.1", outer.sim_port, timeout=120)
                fwd = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("connection", "content-length", "transfer-encoding",
                                            "expect")}
                conn.request(self.command, self.path, body=body if n else None, headers=fwd)
                try:
                    r = conn.getresponse()
                    data = r.read()
                except (http.client.HTTPException, OSError):
                    self.close_connection = True  # mirror a dropped upstream connection
                    conn.close()
                    return
                conn.close()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("connection", "content-length", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_HEAD = _relay

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = S(("127.0.0.1", 0), H)
        self.endpoint = "127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        from harness import _cleanups
        _cleanups.append(self.server.shutdown)

    def requests(self, pred=lambda m, p: True):
        with self.lock:
            return [e for e in self.log if pred(e[0], e[1])]


# ---- tests ----------------------------------------------------------------------

@test
def client_sequence_and_create_mapping():
    """§7: start_async → poll → execute → arun → files → stop → delete → status;
    the create body really sent; the id rule; execd reached directly with the
    endpoint headers and without the API key."""
    admin, sim, redis, rec = setup(
        sim_extra=["--execd-header", "%s:%s" % EXECD_HDR], recorder=True,
        image_registry_prefix="registry.example.com/library")
    bodies = []  # every client-visible response, for the id check

    def api(method, route, body=None, query=None):
        st, js = admin.api(method, route, body, query, headers=CLIENT_HDRS)
        bodies.append(js)
        return st, js

    # 1. start_async answers pending at once; the record already exists (Pitfall 8)
    st, js = api("POST", "/start_async", START_BODY)
    assert st == 200 and js["status"] == "Success", js
    sid = js["result"]["sandbox_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", sid), sid
    st, js = api("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": "False"})
    assert st == 200 and js["status"] == "Success", js
    assert js["result"]["sandbox_id"] == sid

    # 2. poll until alive (P polls every 3 s; faster here)
    def alive():
        st, js = api("GET", "/get_status", query={"sandbox_id": sid,
                                                  "include_all_states": "False"})
        assert js["status"] == "Success", js
        for k in TS_NON_NULL:  # TS zod rejects null in these, also while pending
            assert js["result"].get(k) is not None, (k, js["result"])
        return js["result"] if js["result"]["is_alive"] else None
    s = wait_until(alive, 30, 0.2, "sandbox alive")
    assert s["state"] == "running", s
    assert s["image"] == "registry.example.com/library/python:3.11", s
    assert s["cpus"] == 2.0 and s["memory"] == "8.00g", s
    assert (s["user_id"], s["experiment_id"], s["namespace"]) == ("alice", "exp-7", "team-a"), s
    assert s["start_time"] and s["create_time"] and s["auto_stop_time"], s
    assert isinstance(s["status"], dict) and isinstance(s["port_mapping"], dict), s
    assert [(h["from_state"], h["to_state"], h["event"]) for h in s["state_history"]] == \
        [("pending", "running", "alive")], s
    osid = s["host_name"]  # host_name is the OpenSandbox id by design (a non-empty string)
    assert osid and osid != sid, s

    # the sandbox really exists in OpenSandbox with the mapped fields
    st, sb = sim_sandbox(sim, osid)
    assert st == 200, (st, sb)
    assert sb["status"]["state"] == "Running", sb
    assert sb["image"]["uri"] == "registry.example.com/library/python:3.11", sb
    assert sb["metadata"] == {"rock_sandbox_id": sid, "user_id": "alice",
                              "experiment_id": "exp-7", "namespace": "team-a"}, sb
    creates = rec.requests(lambda m, p: m == "POST" and p.rstrip("/") in ("/v1/sandboxes",
                                                                           "/sandboxes"))
    assert len(creates) == 1, creates
    cb = json.loads(creates[0][3])
    assert cb["resourceLimits"] == {"cpu": "2", "memory": "8Gi"}, cb
    assert cb["image"] == {"uri": "registry.example.com/library/python:3.11"}, cb
    assert cb["metadata"] == sb["metadata"], cb
    assert cb["timeout"] == 86400, cb  # sandbox_timeout default, not startup_timeout (180)
    assert cb["entrypoint"], cb
    assert creates[0][2].get("open-sandbox-api-key") == API_KEY
    # the lifetime the simulator applied: expiresAt - createdAt == sandbox_timeout
    def ts(x):
        return time.mktime(time.strptime(x[:19], "%Y-%m-%dT%H:%M:%S"))
    assert abs(ts(sb["expiresAt"]) - ts(sb["createdAt"]) - 86400) <= 2, sb

    # 3. execute
    st, js = api("POST", "/execute", {"command": "echo hello; echo oops >&2", "sandbox_id": sid,
                                      "timeout": 1200, "cwd": None, "env": None})
    assert js == {"status": "Success", "message": None, "error": None,
                  "result": {"stdout": "hello\n", "stderr": "oops\n", "exit_code": 0}}, js
    st, js = api("POST", "/execute", {"command": ["ls", "-d", "/tmp"], "sandbox_id": sid})
    assert js["result"] == {"stdout": "/tmp\n", "stderr": "", "exit_code": 0}, js

    # 4. sessions, arun style: create bash-<ns> then run (never closed by the SDK)
    name = "bash-%d" % time.time_ns()
    st, js = api("POST", "/create_session", {
        "sandbox_id": sid, "session_type": "bash", "session": name, "startup_source": [],
        "env_enable": False, "env": None, "remote_user": None})
    assert js == {"status": "Success", "message": None, "error": None,
                  "result": {"output": "", "session_type": "bash"}}, js
    st, js = api("POST", "/run_in_session", {"action_type": "bash", "session": name,
                                             "command": "echo hi", "sandbox_id": sid,
                                             "check": "raise", "timeout": None})
    assert js["status"] == "Success", js
    assert js["result"] == {"session_type": "bash", "output": "hi\n", "exit_code": 0,
                            "failure_reason": "", "expect_string": ""}, js
    st, js = api("POST", "/run_in_session", {"action_type": "bash", "session": name,
                                             "command": "false", "sandbox_id": sid,
                                             "check": "raise", "timeout": None})
    assert js == {"status": "Failed", "message": "run in session failed",
                  "error": "Command 'false' failed with exit code 1. Here is the output:\n''",
                  "result": None}, js
    st, js = api("POST", "/close_session", {"sandbox_id": sid, "session_type": "bash",
                                            "session": name})
    assert js["status"] == "Success" and js["result"] == {"session_type": "bash"}, js

    # 5. files
    d = tmpdir("rock-os-files-")
    path = os.path.join(d, "a.txt")
    st, js = api("POST", "/write_file", {"content": "hello\n", "path": path, "sandbox_id": sid})
    assert js == {"status": "Success", "message": None, "error": None,
                  "result": {"success": True, "message": ""}}, js
    st, js = api("POST", "/read_file", {"path": path, "encoding": None, "errors": None,
                                        "sandbox_id": sid})
    assert js == {"status": "Success", "message": None, "error": None,
                  "result": {"content": "hello\n"}}, js
    blob = bytes(range(256)) * 64 + b"\r\n\x00--boundary\r\n"  # binary-safe
    target = os.path.join(d, "data", "input.bin")
    st, js = upload(admin, sid, target, [blob], len(blob), headers=CLIENT_HDRS)
    bodies.append(js)
    assert js == {"status": "Success", "message": None, "error": None,
                  "result": {"success": True, "message": "", "file_name": "input.bin"}}, js
    with open(target, "rb") as f:  # the sim's sandbox paths are host paths
        assert f.read() == blob
    st, js = api("GET", "/get_token", query={"account": "primary"})
    assert js == {"status": "Success", "message": None, "error": None, "result": None}, js

    # 6. stop is refused (HTTP 200, exact B25 text), then delete frees it
    st, js = api("POST", "/stop", {"sandbox_id": sid})
    assert st == 200, st
    assert js == {"status": "Failed", "message": "stop sandbox failed", "error": STOP_TEXT,
                  "result": {"code": 4000, "exit_code": None, "failure_reason": STOP_TEXT}}, js
    st, js = sim_sandbox(sim, osid)
    assert st == 200 and js["status"]["state"] == "Running", js  # stop did not touch it
    st, js = api("POST", "/delete", {"sandbox_id": sid})
    assert js == {"status": "Success", "message": None, "error": None,
                  "result": "%s deleted" % sid}, js
    st, js = sim_sandbox(sim, osid)
    assert st == 404, (st, js)  # the simulator forgets a deleted sandbox
    st, js = api("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": "False"})
    nf = "Sandbox %s not found" % sid
    assert js == {"status": "Failed", "message": "get sandbox status failed", "error": nf,
                  "result": {"code": 4000, "exit_code": None, "failure_reason": nf}}, js
    st, js = api("GET", "/get_status", query={"sandbox_id": sid, "include_all_states": "true"})
    assert js["status"] == "Success", js
    r = js["result"]
    assert r["state"] == "deleted" and r["is_alive"] is False and r["delete_time"], r

    # the OpenSandbox id appears in client responses only as host_name
    for b in bodies:
        b2 = json.loads(json.dumps(b))
        if isinstance(b2, dict) and isinstance(b2.get("result"), dict):
            b2["result"].pop("host_name", None)
        assert osid not in json.dumps(b2), b

    # execd was reached directly, with the endpoint headers and never the API key
    execd = rec.requests(lambda m, p: "/execd/" in p or "/proxy/" in p)
    assert execd, rec.log
    for m, p, h, _ in execd:
        assert p.startswith("/sandboxes/%s/execd/" % osid), p
        assert h.get(EXECD_HDR[0].lower()) == EXECD_HDR[1], (p, h)
        assert "open-sandbox-api-key" not in h, (p, h)
    cmds = [json.loads(b) for m, p, _, b in execd if m == "POST" and p.endswith("/command")]
    assert cmds[0]["command"] == "echo hello; echo oops >&2", cmds
    assert cmds[0]["timeout"] == 1200000, cmds  # seconds from ROCK -> milliseconds to execd
    assert cmds[1]["command"] == "ls -d /tmp", cmds
    assert not cmds[0].get("background"), cmds


@test
def server_proxy_route():
    """use_server_proxy true: every execd call goes through the server proxy
    route /sandboxes/<id>/proxy/44772 (with the endpoint headers, no API key);
    never through the direct route."""
    admin, sim, redis, rec = setup(sim_extra=["--execd-header", "%s:%s" % EXECD_HDR],
                                   recorder=True, use_server_proxy=True)
    sid = start_alive(admin)
    osid = osid_of(admin, sid)
    assert run_ok(admin, sid, "echo via-proxy")["stdout"] == "via-proxy\n"
    d = tmpdir("rock-os-px-")
    p = os.path.join(d, "f.txt")
    assert admin.ok("POST", "/write_file", {"sandbox_id": sid, "path": p, "content": "x"})
    assert admin.ok("POST", "/read_file", {"sandbox_id": sid, "path": p}) == {"content": "x"}
    eps = rec.requests(lambda m, p: "/endpoints/" in p)
    assert eps and all("use_server_proxy=true" in p.lower() for _, p, _, _ in eps), eps
    execd = rec.requests(lambda m, p: "/execd/" in p or "/proxy/" in p)
    assert execd
    for m, path, h, _ in execd:
        assert path.startswith("/sandboxes/%s/proxy/44772/" % osid), path
        assert h.get(EXECD_HDR[0].lower()) == EXECD_HDR[1], (path, h)
        assert "open-sandbox-api-key" not in h, (path, h)
    assert any(p.endswith("/command") for _, p, _, _ in execd)
    assert any("/files/" in p for _, p, _, _ in execd)


@test
def execute_semantics():
    """Exit codes, timeouts, check=true, env overlay, cwd, list quoting,
    shell=false warning without the command text."""
    admin, sim, redis, _ = setup()
    sid = start_alive(admin)

    r = run_ok(admin, sid, "echo out; echo err >&2; exit 7")
    assert r == {"stdout": "out\n", "stderr": "err\n", "exit_code": 7}, r
    r = run_ok(admin, sid, ["sh", "-c", "exit 3"])
    assert r["exit_code"] == 3, r

    t0 = time.time()
    st, js = execute(admin, sid, "sleep 5", timeout=1)
    assert st == 200 and js == {"status": "Failed", "message": "execute command failed",
                                "error": "Timeout (1.0s) exceeded while running command",
                                "result": None}, js
    assert time.time() - t0 < 4.5, time.time() - t0
    st, js = execute(admin, sid, "sleep 3", timeout=1.5)
    assert js["error"] == "Timeout (1.5s) exceeded while running command", js

    st, js = execute(admin, sid, "echo out; echo err >&2; exit 2", check=True, error_msg="prefix")
    assert js == {"status": "Failed", "message": "execute command failed",
                  "error": "prefix: Command failed with exit code 2. Stdout:\n'out\\n'\n"
                           "Stderr:\n'err\\n'", "result": None}, js
    st, js = execute(admin, sid, "exit 1", check=True)
    assert js["error"] == "Command failed with exit code 1. Stdout:\n''\nStderr:\n''", js
    r = run_ok(admin, sid, "echo fine", check=True)
    assert r["exit_code"] == 0

    # env: the sandbox's stored env overlaid by the request's (B54)
    rec = json.loads(redis.cli("GET", "rock:sandbox:" + sid))
    rec["env"] = {"WORKSPACE": "/workspace", "SHARED": "sandbox"}
    redis.cli("SET", "rock:sandbox:" + sid, json.dumps(rec))
    r = run_ok(admin, sid, 'echo "$WORKSPACE|$SHARED|$COMMAND_ONLY"',
               env={"SHARED": "request", "COMMAND_ONLY": "va lue"})
    assert r["stdout"] == "/workspace|request|va lue\n", r
    r = run_ok(admin, sid, 'echo "$WORKSPACE|$SHARED|$COMMAND_ONLY"')
    assert r["stdout"] == "/workspace|sandbox|\n", r

    # cwd (a directory inside the sandbox; the simulator's sandbox is this machine)
    d = tmpdir("rock-os-cwd-") if not real_opensandbox() else "/tmp/rock-os-cwd"
    run_ok(admin, sid, ["mkdir", "-p", d])
    assert run_ok(admin, sid, "pwd", cwd=d)["stdout"] == d + "\n"
    assert run_ok(admin, sid, ["pwd"], cwd=d)["stdout"] == d + "\n"

    # list: argument boundaries kept, no shell interpretation
    r = run_ok(admin, sid, ["printf", "%s|", "a b", "it's"])
    # execd sends output line by line; the plugin terminates each line (README: printf x → x\n)
    assert r["stdout"] == "a b|it's|\n", r
    r = run_ok(admin, sid, ["echo", "$HOME; `id` \"q\" \\ *"])
    assert r["stdout"] == "$HOME; `id` \"q\" \\ *\n", r

    # a string with shell=false runs through the shell; the warning never shows the command
    r = run_ok(admin, sid, "echo secret-command-text | tr a-z A-Z", shell=False)
    assert r["stdout"] == "SECRET-COMMAND-TEXT\n", r
    out = admin.output()
    assert "executes string commands with shell semantics although shell=False" in out, \
        out[-2000:]
    assert "secret-command-text" not in out


@test
def client_leaving_interrupts_command():
    """A client that hangs up during a long /execute ends the command upstream: the plugin's
    transfer loop checks every open stream about twice a second (not only streams with
    traffic), aborts the stream and interrupts the command (execd DELETE /command)."""
    admin, sim, redis, _ = setup()
    sid = start_alive(admin)
    marker = os.path.join(tmpdir("rock-os-leave-"), "beat")
    run_ok(admin, sid, ["mkdir", "-p", os.path.dirname(marker)])  # inside the sandbox too

    def beat():  # the marker as the sandbox sees it
        st, js = execute(admin, sid, ["cat", marker])
        return js["result"]["stdout"] if js["status"] == "Success" and \
            js["result"]["exit_code"] == 0 else None
    body = json.dumps({"sandbox_id": sid, "timeout": 60,
                       "command": "while true; do date +%%s%%N > '%s'; sleep 0.2; done" % marker})
    s = socket.create_connection(("127.0.0.1", admin.port))
    s.sendall(("POST /apis/envs/sandbox/v1/execute HTTP/1.1\r\nHost: t\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body)).encode())
    wait_until(beat, 10, 0.1, "the command running")
    time.sleep(1)
    s.close()
    left = time.time()

    def stopped():
        a = beat()
        time.sleep(0.7)
        return a == beat()
    wait_until(stopped, 10, 0.1, "the command stopped after its client left")
    assert time.time() - left < 6, time.time() - left
    # the daemon is fine and serves the next command
    assert run_ok(admin, sid, "echo next")["stdout"] == "next\n"


@test
def file_semantics():
    """read_file with invalid UTF-8 under strict/replace, write_file keeps the
    mode of an existing file, new files get 644, missing parents, missing file."""
    # The simulator has no upload cap by default (like execd); the 413 case below needs one.
    admin, sim, redis, _ = setup(sim_extra=["--max-upload-mb", "64"])
    sid = start_alive(admin)
    d = tmpdir("rock-os-rw-")
    bad = os.path.join(d, "bad.bin")
    run_ok(admin, sid, "mkdir -p '%s' && printf 'hello\\377world' > '%s'" % (d, bad))
    assert sandbox_bytes(admin, sid, bad) == b"hello\xffworld"

    st, js = admin.api("POST", "/read_file", {"sandbox_id": sid, "path": bad, "encoding": None,
                                              "errors": None})
    assert st == 200 and js["status"] == "Failed", js
    assert js["message"] == "read file failed", js
    # never the bytes: result null and Python's own decode error
    assert js == {"status": "Failed", "message": "read file failed",
                  "error": "'utf-8' codec can't decode byte 0xff in position 5: invalid start "
                           "byte", "result": None}, js
    st, js = admin.api("POST", "/read_file", {"sandbox_id": sid, "path": bad,
                                              "encoding": "utf-8", "errors": "replace"})
    assert js["status"] == "Success" and js["result"] == {"content": "hello\ufffdworld"}, js

    # existing file: mode kept
    p = os.path.join(d, "script.sh")
    run_ok(admin, sid, "echo old > '%s' && chmod 755 '%s'" % (p, p))
    assert admin.ok("POST", "/write_file", {"sandbox_id": sid, "path": p,
                                            "content": "#!/bin/sh\necho new\n"}) == \
        {"success": True, "message": ""}
    assert run_ok(admin, sid, "stat -c %a '" + p + "'")["stdout"] == "755\n"
    assert run_ok(admin, sid, ["cat", p])["stdout"] == "#!/bin/sh\necho new\n"
    # new file: 644 (also in a directory that does not exist yet)
    n = os.path.join(d, "new", "sub", "n.txt")
    assert admin.ok("POST", "/write_file", {"sandbox_id": sid, "path": n,
                                            "content": "caf\u00e9 \u2603\n"})["success"] is True
    assert run_ok(admin, sid, ["stat", "-c", "%a", n])["stdout"] == "644\n"
    assert sandbox_bytes(admin, sid, n) == "caf\u00e9 \u2603\n".encode()
    assert admin.ok("POST", "/read_file", {"sandbox_id": sid, "path": n}) == \
        {"content": "caf\u00e9 \u2603\n"}

    # upload over an existing 755 file keeps the mode; the file part may come
    # before the text fields (spooled by the admin until sandbox_id is known)
    data = os.urandom(3 << 20)
    st, js = upload_file_first(admin, sid, p, data)
    assert js["status"] == "Success" and js["result"]["file_name"] == "script.sh", js
    assert run_ok(admin, sid, ["stat", "-c", "%a %s", p])["stdout"] == "755 %d\n" % len(data)
    assert run_ok(admin, sid, ["sha256sum", p])["stdout"].split()[0] == \
        hashlib.sha256(data).hexdigest()
    # upload to an unknown sandbox: a clean 4000, the body is drained
    st, js = upload(admin, "no-such-sandbox", os.path.join(d, "x"), [data], len(data))
    assert st == 200 and js["status"] == "Failed" and js["result"]["code"] == 4000, js
    assert js["message"] == "upload file failed" and js["result"]["success"] is False, js
    assert not sandbox_has(admin, sid, os.path.join(d, "x"))
    if not real_opensandbox():  # (the simulator's fault switch and upload cap)
        # execd failing during an upload: a clean 5000, nothing written
        faults(sim, {"execd_status": 503})
        st, js = upload(admin, sid, os.path.join(d, "y"), [data], len(data))
        faults(sim)
        assert js["status"] == "Failed" and js["result"]["code"] == 5000, js
        assert "503" in js["error"] and js["result"]["file_name"] == "", js
        # execd refusing the body mid-stream (the simulator's 64 MiB upload cap): clean 5000
        big = 70 << 20
        st, js = upload(admin, sid, os.path.join(d, "z"),
                        (b"\0" * (1 << 20) for _ in range(70)), big)
        assert st == 200 and js["status"] == "Failed" and js["result"]["code"] == 5000, js
        assert "413" in js["error"], js
    # the client going away mid-upload: no partial file, the admin carries on
    s = socket.create_connection(("127.0.0.1", admin.port))
    b = "cutB"
    pre = ("--%s\r\nContent-Disposition: form-data; name=\"sandbox_id\"\r\n\r\n%s\r\n"
           "--%s\r\nContent-Disposition: form-data; name=\"target_path\"\r\n\r\n%s\r\n"
           "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"g\"\r\n\r\n"
           % (b, sid, b, os.path.join(d, "g.bin"), b)).encode()
    s.sendall(("POST /apis/envs/sandbox/v1/upload HTTP/1.1\r\nHost: x\r\nContent-Type: "
               "multipart/form-data; boundary=%s\r\nContent-Length: %d\r\n\r\n"
               % (b, len(pre) + (100 << 20))).encode() + pre + data)
    time.sleep(0.3)
    s.close()
    wait_until(lambda: not sandbox_has(admin, sid, os.path.join(d, "g.bin")), 5, 0.1,
               "no partial file")
    assert run_ok(admin, sid, "echo alive")["stdout"] == "alive\n"

    # missing file: 5000 with {"content":""} (P returns "" without raising)
    st, js = admin.api("POST", "/read_file", {"sandbox_id": sid,
                                              "path": os.path.join(d, "nope")})
    assert js["status"] == "Failed" and js["message"] == "read file failed", js
    assert js["result"]["content"] == "" and js["result"]["code"] == 5000, js


def upload(admin, sid, target, chunks, size, headers=None, boundary="rockBoundaryQ7x9"):
    """POST /upload with hand-written multipart framing; chunks is an iterable
    of bytes (never joined), size its total length."""
    pre = ("--%s\r\nContent-Disposition: form-data; name=\"sandbox_id\"\r\n\r\n%s\r\n"
           "--%s\r\nContent-Disposition: form-data; name=\"target_path\"\r\n\r\n%s\r\n"
           "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
           "Content-Type: application/octet-stream\r\n\r\n"
           % (boundary, sid, boundary, target, boundary, os.path.basename(target))).encode()
    post = ("\r\n--%s--\r\n" % boundary).encode()

    def body():
        yield pre
        yield from chunks
        yield post
    h = dict(headers or {})
    h["Content-Type"] = "multipart/form-data; boundary=" + boundary
    h["Content-Length"] = str(len(pre) + size + len(post))
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=300)
    conn.request("POST", "/apis/envs/sandbox/v1/upload", body=body(), headers=h)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data)


def upload_file_first(admin, sid, target, data, boundary="fileFirstB0undary"):
    """A multipart body with the file part before sandbox_id/target_path."""
    body = (("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.bin\"\r\n"
             "Content-Type: application/octet-stream\r\n\r\n" % boundary).encode() + data +
            ("\r\n--%s\r\nContent-Disposition: form-data; name=\"target_path\"\r\n\r\n%s\r\n"
             "--%s\r\nContent-Disposition: form-data; name=\"sandbox_id\"\r\n\r\n%s\r\n--%s--\r\n"
             % (boundary, target, boundary, sid, boundary)).encode())
    return admin.request("POST", "/apis/envs/sandbox/v1/upload", body,
                         {"Content-Type": "multipart/form-data; boundary=" + boundary})


@test
def upload_1gib_streamed():
    """A 1 GiB deterministic pseudo-random file streamed through /upload: the
    sha256 inside the sandbox matches, and rock-admin's RSS stays flat."""
    admin, sim, redis, _ = setup(sim_extra=["--max-upload-mb", "2048"])
    sid = start_alive(admin)
    d = tmpdir("rock-os-big-")
    src = os.path.join(d, "src.bin")
    size = 1 << 30
    block = 1 << 20
    rng = random.Random(20260121)
    h = hashlib.sha256()
    with open(src, "wb") as f:
        for _ in range(size // block):
            b = rng.randbytes(block)
            h.update(b)
            f.write(b)
    want = h.hexdigest()

    def chunks():
        with open(src, "rb") as f:
            while True:
                b = f.read(block)
                if not b:
                    return
                yield b

    pid = admin.proc.pid
    base = vm_rss_kib(pid)
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                peak[0] = max(peak[0], vm_rss_kib(pid))
            except (OSError, AssertionError):
                pass
            time.sleep(0.05)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    target = os.path.join(d, "dst", "big.bin")
    t0 = time.time()
    try:
        st, js = upload(admin, sid, target, chunks(), size)
    finally:
        done.set()
        th.join()
    secs = time.time() - t0
    growth_mib = (peak[0] - base) / 1024.0
    print("# 1 GiB upload: %.1fs (%.0f MiB/s), rock-admin VmRSS %d KiB -> peak %d KiB "
          "(+%.1f MiB)" % (secs, 1024 / secs, base, peak[0], growth_mib), flush=True)
    assert st == 200 and js == {"status": "Success", "message": None, "error": None,
                                "result": {"success": True, "message": "",
                                           "file_name": "big.bin"}}, js
    r = run_ok(admin, sid, ["sha256sum", target], timeout=120)
    assert r["stdout"].split()[0] == want, (r, want)
    assert run_ok(admin, sid, ["stat", "-c", "%a %s", target])["stdout"] == "644 %d\n" % size
    run_ok(admin, sid, ["rm", "-f", target])
    os.unlink(src)
    assert growth_mib < 64, "rock-admin RSS grew by %.1f MiB" % growth_mib


@test
def api_key_absent_fails_visibly():
    """Simulator requires a key, rock-admin has none: the start fails visibly
    (a failed phase or an error naming 401), never pending forever."""
    redis = Redis()
    sim = Sim(api_key=API_KEY)
    admin = Admin(operator="opensandbox", config=os_config(sim.endpoint, api_key=None),
                  redis=redis)
    st, js = admin.api("POST", "/start_async", dict(START_BODY))
    assert st == 200 and js["status"] == "Success", js  # the create runs in the background
    sid = js["result"]["sandbox_id"]

    def failed():
        st, js = status(admin, sid, all_states=True)
        if js["status"] == "Failed":  # while the create is in flight: the lookup's 401
            assert js["result"]["code"] == 5000 and "HTTP 401" in js["error"], js
            return None
        r = js["result"]
        assert r["is_alive"] is False and r["state"] in ("pending", "deleted"), r
        for k in TS_NON_NULL:
            assert r.get(k) is not None, (k, r)
        bad = [p for p in r["status"].values() if p.get("status") == "failed"]
        return bad and (r["state"], bad[0]["message"])
    state, msg = wait_until(failed, 15, 0.2, "start failure visible with 401")
    # P's start() fails at once on a failed phase (Pitfall 7), with the reason; the
    # failed create left pending at once (immediate deletion)
    assert state == "deleted", state
    assert msg.startswith("Sandbox %s submission failed and has been marked for immediate "
                          "deletion: opensandbox create failed: HTTP 401" % sid), msg
    assert sim_list_by_rock_id(sim, sid) == []  # nothing was created upstream
    # The clean-up after the failed create must make sure nothing upstream carries
    # the ROCK id (a create whose reply was lost may have made one); without
    # credentials it cannot look, and says so in the log instead of pretending.
    wait_until(lambda: "clean-up after the failed create could not check the backend"
               in admin.output(), 10, 0.1, "the clean-up's warning")
    st, js = admin.api("POST", "/delete", {"sandbox_id": sid})
    assert js["status"] == "Success", js  # already deleted
    assert API_KEY not in admin.output()


@test
def failed_create_leaves_pending_at_once():
    """The real docker runtime answers a create whose image it cannot pull with 500
    IMAGE_PULL_FAILED. The record leaves pending at once, as ROCK's immediate clean-up
    removes it: the client's next get_status poll answers 4000 not found (P raises at
    once), with include_all_states the state is deleted with the reason as a failed
    phase, and POST /start fails with the reason instead of waiting 85 s."""
    # The real server fails the pull by itself (no registry behind its docker); a pull
    # attempt is traffic, so only where none can leave (bridge stand in its namespace).
    bridge_only("a pull attempt by the host-networking docker could leave the machine")
    admin, sim, redis, _ = setup()
    if not real_opensandbox():
        faults(sim, {"image_pull_fail": True})
    st, js = admin.api("POST", "/start_async", dict(START_BODY, image="no-such-image:1"))
    assert st == 200 and js["status"] == "Success", js  # the create runs in the background
    sid = js["result"]["sandbox_id"]
    t0 = time.time()

    def gone():
        st, js = status(admin, sid)
        if js["status"] == "Success":
            assert js["result"]["state"] == "pending" and not js["result"]["is_alive"], js
            return None
        return js
    js = wait_until(gone, 5, 0.05, "the failed create to leave pending")
    assert time.time() - t0 < 5
    assert js["result"]["code"] == 4000 and js["error"] == "Sandbox %s not found" % sid, js
    st, js = status(admin, sid, all_states=True)
    r = js["result"]
    assert js["status"] == "Success" and r["state"] == "deleted" and r["is_alive"] is False, js
    (phase,) = r["status"].values()
    assert phase["status"] == "failed", r
    assert phase["message"].startswith(
        "Sandbox %s submission failed and has been marked for immediate deletion: "
        "opensandbox create failed: HTTP 500 DOCKER::SANDBOX_IMAGE_PULL_FAILED" % sid), phase
    hist = [(h["from_state"], h["to_state"], h["event"]) for h in r["state_history"]]
    assert hist[-1] == ("pending", "deleted", "create_failed"), hist
    # is_alive (never fails) and a command say "gone", not "pending"
    assert admin.ok("GET", "/is_alive", query={"sandbox_id": sid})["is_alive"] is False
    st, js = execute(admin, sid, "echo x")
    assert js["status"] == "Failed" and js["result"]["code"] == 4000, js
    # The id is free again (only an active sandbox holds it)
    assert sim_list_by_rock_id(sim, sid) == []
    # POST /start waits for alive: it fails with the reason at once
    t0 = time.time()
    st, js = admin.api("POST", "/start", dict(START_BODY, image="no-such-image:2"))
    assert js["status"] == "Failed" and "IMAGE_PULL_FAILED" in js["error"], js
    assert time.time() - t0 < 10, time.time() - t0
    if not real_opensandbox():
        faults(sim)
    sid2 = start_alive(admin, sandbox_id=sid)
    assert sid2 == sid
    assert run_ok(admin, sid, "echo again")["stdout"] == "again\n"


@test
def alive_means_execd_answers():
    """OpenSandbox reports Running when the container started; execd listens a moment later
    (the real stand refused the first command after Running). is_alive turns true only once
    execd answers, so a client's first command right after alive works."""
    admin, sim, redis, _ = setup(sim_extra=None if real_opensandbox()
                                 else ["--execd-start-ms", "1500"])
    for i in range(1 if real_opensandbox() else 2):
        sid = start_alive(admin)
        r = run_ok(admin, sid, "echo first")
        assert r["stdout"] == "first\n", r
        admin.ok("POST", "/delete", {"sandbox_id": sid})


@test
def readiness_checked_many_at_once():
    """The readiness of the sandboxes that turned Running (endpoint lookup, then execd's
    /ping) is checked many at once in the background, not by a list pass waiting for each: with
    a lifecycle server that takes 200 ms per request, 64 new sandboxes all turn alive within a
    few passes. One at a time, a pass (700 ms of checks) covered three of them and the last
    waited some twenty passes."""
    admin, sim, redis, _ = setup(sim_extra=["--max-sandboxes", "100"])
    faults(sim, {"lifecycle_latency_ms": 200})
    sids = []
    for _ in range(64):
        st, js = admin.api("POST", "/start_async", dict(START_BODY))
        assert st == 200 and js["status"] == "Success", js
        sids.append(js["result"]["sandbox_id"])
    t0 = time.time()
    left = set(sids)

    def all_alive():
        for sid in list(left):
            st, js = status(admin, sid)
            if js.get("status") == "Success" and js["result"]["is_alive"]:
                left.discard(sid)
        return not left
    wait_until(all_alive, 12, 0.2, "64 sandboxes alive (left: %d)" % len(left))
    took = time.time() - t0
    faults(sim)
    assert run_ok(admin, sids[-1], "echo ready")["stdout"] == "ready\n"
    print("64 sandboxes alive %.1f s after the last start_async" % took)


@test
def lifecycle_down():
    """Lifecycle API answering 503 / dropping connections: get_status gives a
    clear 5000 error (not a silent pending), a start fails visibly, and
    everything recovers when the fault clears."""
    admin, sim, redis, _ = setup(default_timeout=5, connect_timeout=2)
    sid = start_alive(admin)
    for fault in ({"lifecycle_status": 503}, {"drop_lifecycle": True}):
        faults(sim, fault)
        # Status comes from the reconciler's store while its passes succeed; once no
        # pass succeeded for the staleness bound (3 intervals, >= 3 s) reads ask the
        # backend again and report its failure.
        def failing():
            st, js = status(admin, sid)
            assert st == 200, js
            return js if js["status"] == "Failed" else None
        js = wait_until(failing, 30, 0.2, "status failure under %s" % fault)
        assert js["message"] == "get sandbox status failed", js
        assert js["result"]["code"] == 5000, js
        assert "opensandbox" in js["error"], js
        if "lifecycle_status" in fault:
            assert "503" in js["error"], js

        st, js = admin.api("POST", "/start_async", dict(START_BODY))
        if js["status"] == "Failed":
            assert js["result"]["code"] == 5000 and "opensandbox create failed" in js["error"], js
        else:
            sid2 = js["result"]["sandbox_id"]

            def visible():
                st, js = status(admin, sid2)
                if js["status"] == "Failed" and (js["result"] or {}).get("code") == 4000:
                    # the create failed: the record left pending at once (not found), the
                    # reason is a failed phase of the deleted record
                    assert js["error"] == "Sandbox %s not found" % sid2, js
                    st, js = status(admin, sid2, all_states=True)
                    assert js["result"]["state"] == "deleted", js
                if js["status"] == "Failed":
                    return js["result"] and js["result"].get("code") == 5000 and js
                phases = js["result"]["status"] or {}
                assert js["result"]["is_alive"] is False, js
                return any(p.get("status") == "failed" for p in phases.values()) and js
            wait_until(visible, 20, 0.2, "start failure visible under %s" % fault)
        faults(sim)

        def recovered():
            st, js = status(admin, sid)
            return js if js["status"] == "Success" else None
        js = wait_until(recovered, 30, 0.2, "status recovered after %s" % fault)
        assert js["result"]["is_alive"] is True, js
    assert run_ok(admin, sid, "echo back")["stdout"] == "back\n"


@test
def stream_cut():
    """execd closes the command stream without a terminal event: execute is
    Failed 5000 "... stream ended ...", and the next command works; a stalled
    stream ends at the admin's deadline as a timeout."""
    admin, sim, redis, _ = setup(admin_cfg={"runtime": {"command_timeout_margin": 2}})
    sid = start_alive(admin)
    faults(sim, {"cut_stream_after": 2})
    st, js = execute(admin, sid, "echo a; echo b; echo c; sleep 0.3; echo d")
    assert st == 200 and js["status"] == "Failed", js
    assert js["message"] == "execute command failed", js
    assert js["result"]["code"] == 5000, js
    assert "stream ended" in js["error"], js
    assert js["result"]["failure_reason"] == js["error"], js
    faults(sim)
    assert run_ok(admin, sid, "echo ok")["stdout"] == "ok\n"
    # a stalled stream (no events, no pings): the admin's own deadline (timeout +
    # runtime.command_timeout_margin) ends it as the ROCK timeout failure
    faults(sim, {"stall_stream_after": 1})
    t0 = time.time()
    st, js = execute(admin, sid, "echo a; sleep 1; echo b; sleep 10", timeout=2)
    took = time.time() - t0
    faults(sim)
    assert js == {"status": "Failed", "message": "execute command failed",
                  "error": "Timeout (2.0s) exceeded while running command", "result": None}, js
    assert 3.5 < took < 8, took
    assert run_ok(admin, sid, "echo ok")["stdout"] == "ok\n"


@test
def vanished_sandbox():
    """The sandbox disappears from OpenSandbox: runtime ops fail cleanly,
    get_status marks the record deleted, delete still succeeds."""
    admin, sim, redis, _ = setup()
    sid = start_alive(admin)
    osid = osid_of(admin, sid)
    # Until the reconciler's next pass the record is still running: the gate lets a command
    # through and the backend answers 404 (endpoint lookup or execd), an upstream error, ROCK
    # code 5000. A pass between the vanish and the command would make it "not running"
    # (4000, asserted below), so another owner holds the reconciler's lease meanwhile: once
    # this admin logged that it lost the lease, no pass of it runs until the lease is free.
    wait_until(lambda: "this admin is now the reconciler" in admin.output(), 20, 0.1,
               "admin is the reconciler")
    redis.cli("SET", "rock:lease:reconciler", "another-admin", "PX", "120000")
    wait_until(lambda: "this admin is no longer the reconciler" in admin.output(), 20, 0.1,
               "admin lost the reconciler lease")
    st, _ = sim.request("POST", "/_sim/sandboxes/%s/vanish" % osid)
    assert st == 204, st
    st, js = execute(admin, sid, "echo x")
    assert st == 200 and js["status"] == "Failed", js
    assert js["message"] == "execute command failed" and js["result"]["code"] == 5000, js
    # (404 from the endpoint lookup, or 502 from the server's execd route when the endpoint
    # was cached by the readiness ping of the status polls)
    assert js["error"].startswith((
        "opensandbox execute failed for %s: HTTP 404 DOCKER::SANDBOX_NOT_FOUND: " % osid,
        "opensandbox execute failed for %s: HTTP 502 GENERAL::UNKNOWN_ERROR: Could not connect "
        "to the backend sandbox: no such sandbox" % osid)), js
    assert js["result"]["failure_reason"] == js["error"], js
    assert redis.cli("DEL", "rock:lease:reconciler") == "1"

    # the reconciler notices within its staleness bound (a plain get_status then
    # answers "not found", as for any deleted sandbox)
    def gone():
        st, js = status(admin, sid, all_states=True)
        assert st == 200 and js["status"] == "Success", js
        return js["result"] if js["result"]["state"] != "running" else None
    r = wait_until(gone, 30, 0.2, "vanished sandbox reconciled")
    assert r["state"] == "deleted" and r["is_alive"] is False and r["delete_time"], r
    assert [(h["from_state"], h["to_state"]) for h in r["state_history"]] == \
        [("pending", "running"), ("running", "deleted")], r
    st, js = status(admin, sid, all_states=True)
    assert js["status"] == "Success", js
    assert js["result"]["state"] == "deleted" and js["result"]["is_alive"] is False, js
    assert js["result"]["delete_time"], js
    st, js = status(admin, sid)  # persisted: now plainly not found
    assert js["status"] == "Failed" and js["result"]["code"] == 4000, js
    assert redis.cli("SISMEMBER", "rock:active", sid) == "0"

    st, js = execute(admin, sid, "echo x")
    assert js["status"] == "Failed" and js["result"]["code"] == 4000, js
    st, js = admin.api("POST", "/read_file", {"sandbox_id": sid, "path": "/etc/hostname"})
    assert js["status"] == "Failed" and js["result"]["content"] == "", js  # §2.4 shape
    assert js["result"]["code"] == 4000 and js["result"]["failure_reason"] == js["error"], js
    assert js["error"] == "Sandbox %s is not running (state=deleted)" % sid, js
    st, js = admin.api("POST", "/delete", {"sandbox_id": sid})
    assert js["status"] == "Success", js


def redis_calls(redis):
    """{command: calls} from INFO commandstats."""
    calls = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        m = re.match(r"cmdstat_(\S+):calls=(\d+)", line)
        if m:
            calls[m.group(1)] = int(m.group(2))
    return calls


@test
def get_status_is_one_store_round_trip():
    """With the reconciler keeping the store current, get_status makes one
    Redis round trip of plain commands (record, idle deadline, reconciler mark),
    plus one ZADD that raises the idle deadline at most once per second, and no
    OpenSandbox call. No script runs for it: scripts cost Redis, which every
    admin shares, several times the CPU of these commands. The interval is long
    so no pass runs in between."""
    admin, sim, redis, rec = setup(recorder=True,
                                   admin_cfg={"runtime": {"reconcile_interval_ms": 60000}})
    st, js = admin.api("POST", "/start", dict(START_BODY))
    assert js["status"] == "Success", js
    sid = js["result"]["sandbox_id"]
    deadline0 = float(redis.cli("ZSCORE", "rock:expire", sid))
    before = redis_calls(redis)
    seen = len(rec.requests())
    t0 = time.time()
    time.sleep(1.1)  # the start's own touch is in an earlier second
    for _ in range(20):
        st, js = status(admin, sid)
        assert js["status"] == "Success" and js["result"]["is_alive"] is True, js
    seconds = int(time.time()) - int(t0) + 1
    after = redis_calls(redis)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    # every read is MGET + ZSCORE pipelined; the touches are ZADDs (XX GT), at most one per
    # second per sandbox and process (the idle deadline has one-second resolution). The create
    # queue's feeder and the reconciler's lease run scripts of their own in the background
    # (EVALSHA): their commands are counted too, but none is an MGET, a ZSCORE or, with an
    # idle queue, a ZADD.
    assert delta.get("mget", 0) == 20, delta
    assert delta.get("zscore", 0) == 20, delta
    assert 1 <= delta.get("zadd", 0) <= seconds, (delta, seconds)
    for cmd in ("eval", "multi", "exec", "watch"):
        assert delta.get(cmd, 0) == 0, delta
    # the touch moved the deadline forward (auto_clear_time minutes from the last read)
    assert float(redis.cli("ZSCORE", "rock:expire", sid)) > deadline0, deadline0
    assert len(rec.requests()) == seen, rec.requests()[seen:]
    # a running sandbox that lost its deadline gets one back from the next touching read,
    # without a failed store read along the way (the script path of the touch)
    errors = store_errors(admin)
    assert redis.cli("ZREM", "rock:expire", sid) == "1"
    time.sleep(1.1)
    t1 = int(time.time())
    st, js = status(admin, sid)
    assert js["status"] == "Success" and js["result"]["is_alive"] is True, js
    got = float(redis.cli("ZSCORE", "rock:expire", sid))
    assert t1 + 5 * 60 <= got <= int(time.time()) + 5 * 60, (got, t1)
    assert store_errors(admin) == errors


def store_errors(admin):
    """rock_admin_store_errors_total of admin."""
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    for line in body.decode().splitlines():
        if line.startswith("rock_admin_store_errors_total "):
            return float(line.split()[1])
    raise AssertionError("no rock_admin_store_errors_total")


@test
def reconciler_elected_once():
    """Two admins on one Redis: exactly one holds the reconciler lease and lists
    OpenSandbox; a sandbox that vanishes upstream reads as deleted through both
    (status comes from the store), and the other admin takes over when the
    holder stops."""
    admin, sim, redis, _ = setup()
    admin2 = Admin(operator="opensandbox", redis=redis, config=os_config(sim.endpoint))
    sid = start_alive(admin)
    osid = osid_of(admin, sid)
    holder = redis.cli("GET", "rock:lease:reconciler")
    assert holder, holder
    wait_until(lambda: "this admin is now the reconciler" in admin.output() + admin2.output(),
               20, 0.2, "an elected reconciler")
    both = [a for a in (admin, admin2) if "is now the reconciler" in a.output()]
    assert len(both) == 1, [a.output()[-2000:] for a in (admin, admin2)]
    st, _ = sim.request("POST", "/_sim/sandboxes/%s/vanish" % osid)
    assert st == 204, st
    for a in (admin, admin2):
        def deleted():
            st, js = status(a, sid, all_states=True)
            assert js["status"] == "Success", js
            return js["result"]["state"] == "deleted" and js
        wait_until(deleted, 30, 0.2, "vanished sandbox deleted through every admin")
    # the holder stops: the other one takes the lease over within its TTL
    leader, other = (admin, admin2) if both[0] is admin else (admin2, admin)
    leader.stop()
    wait_until(lambda: "is now the reconciler" in other.output(), 30, 0.2, "lease taken over")


@test
def a_pending_sandbox_missing_from_one_listing_waits_for_the_next():
    """A pending sandbox with a backend id that one complete listing did not show is left to the
    next pass (in a create burst, sandboxes created while the listing's pages are served push
    older ones past the pages read): the reconciler asks the backend about it only when the next
    pass misses it too. One that really vanished while pending is still recorded deleted."""
    sim_only("the simulator's vanish switch on a pending sandbox")
    admin, sim, redis, _ = setup(sim_extra=["--ready-delay-ms", "600000"],
                                 admin_cfg={"runtime": {"reconcile_interval_ms": 300}})
    st, js = admin.api("POST", "/start_async", START_BODY)
    assert st == 200 and js["status"] == "Success", js
    sid = js["result"]["sandbox_id"]

    def created():
        osid = osid_of(admin, sid)
        return osid and sim_sandbox(sim, osid)[0] == 200 and osid
    osid = wait_until(created, 20, 0.1, "the sandbox created upstream")

    def metric(name):
        st, body, _ = admin.request("GET", "/metrics", raw=True)
        assert st == 200, st
        m = re.search(r"^%s (\d+)$" % re.escape(name), body.decode(), re.M)
        return int(m.group(1)) if m else None
    assert metric("rock_admin_reconciler_unlisted_deferred_total") == 0
    st, _ = sim.request("POST", "/_sim/sandboxes/%s/vanish" % osid)
    assert st == 204, st

    def deleted():
        st, js = status(admin, sid, all_states=True)
        assert st == 200 and js["status"] == "Success", js
        return js["result"]["state"] == "deleted" and js["result"]
    r = wait_until(deleted, 20, 0.1, "the sandbox that vanished while pending reconciled")
    assert r["is_alive"] is False, r
    # left to the next pass once (a pass that did not complete forgets, and leaves it once more)
    assert metric("rock_admin_reconciler_unlisted_deferred_total") >= 1
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    checks = dict(re.findall(r'^rock_admin_reconciler_unlisted_checks_total\{result="(\w+)"\} (\d+)$',
                             body.decode(), re.M))
    assert int(checks["exists"]) == 0, checks


@test
def a_sandbox_moved_between_list_pages_is_not_taken_for_vanished():
    """OpenSandbox's list is paged by offset over a newest-first list, so a sandbox deleted
    from a page the reconciler has already read moves the next page forward by one during
    its pass, and one sandbox that still exists is on no page the pass reads. That sandbox
    stays running (the reconciler asks the backend about a sandbox it did not see listed
    before it records it gone); the deleted one reads deleted."""
    sim_only("a fault switch that holds the later pages of a listing")
    admin, sim, redis, _ = setup(sim_extra=["--max-sandboxes", "256"],
                                 admin_cfg={"runtime": {"reconcile_interval_ms": 300}})
    # 201 sandboxes: the plugin reads pages of 200, so the oldest is alone on page 2
    sids = []
    for _ in range(201):
        st, js = admin.api("POST", "/start_async", START_BODY)
        assert st == 200 and js["status"] == "Success", js
        sids.append(js["result"]["sandbox_id"])
    for sid in sids:
        admin.wait_alive(sid, timeout=60)

    def page(n):
        st, js = sim.request("GET", "/v1/sandboxes?page=%d&pageSize=200" % n)
        assert st == 200, (st, js)
        return js["items"]
    first, second = page(1), page(2)
    assert len(first) == 200 and len(second) == 1, (len(first), len(second))
    oldest = second[0]["metadata"]["rock_sandbox_id"]
    newest_osid = first[0]["id"]
    newest = first[0]["metadata"]["rock_sandbox_id"]
    assert oldest in sids and newest in sids and oldest != newest

    # hold the reconciler's pass between its two pages, then delete the newest sandbox
    # upstream (as another client of OpenSandbox would): page 2 is then empty
    faults(sim, {"list_later_pages_latency_ms": 1500})

    def waiting():
        st, js = sim.request("GET", "/_sim/stats")
        assert st == 200, st
        return js["list_pages_waiting"] >= 1
    wait_until(waiting, 20, 0.02, "a reconciler pass between its list pages")
    st, _ = sim.request("DELETE", "/v1/sandboxes/" + newest_osid)
    assert st == 204, st
    assert len(page(1)) == 200 and page(2) == [], "the pages did not move"

    def deleted():
        st, js = status(admin, newest, all_states=True)
        assert st == 200 and js["status"] == "Success", js
        return js["result"]["state"] == "deleted" and js["result"]
    wait_until(deleted, 30, 0.2, "the deleted sandbox reconciled")
    faults(sim)
    time.sleep(1.0)  # a few more passes, now without the held page
    st, js = status(admin, oldest, all_states=True)
    assert st == 200 and js["status"] == "Success", js
    r = js["result"]
    assert r["state"] == "running" and r["is_alive"] is True, r
    assert [(h["from_state"], h["to_state"]) for h in r["state_history"]] == \
        [("pending", "running")], r
    assert "sandbox %s: running -> deleted" % oldest not in admin.output()
    assert "sandbox %s: running -> deleted" % newest in admin.output()
    assert run_ok(admin, oldest, "echo still-here")["stdout"] == "still-here\n"
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    assert st == 200, st
    checks = dict(re.findall(r'^rock_admin_reconciler_unlisted_checks_total\{result="(\w+)"\} (\d+)$',
                             body.decode(), re.M))
    assert int(checks["exists"]) >= 1 and int(checks["gone"]) >= 1, checks


def metric_values(admin, family):
    """{labels or "": value} of one metric family in the admin's /metrics."""
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    assert st == 200, st
    return {m.group(1) or "": float(m.group(2)) for m in re.finditer(
        r"^%s(\{[^}]*\})? (\S+)$" % re.escape(family), body.decode(), re.M)}


@test
def a_sandbox_is_alive_as_soon_as_its_execd_answers():
    """A list pass that sees a sandbox freshly Running reports it pending until its execd has
    answered a readiness check (alive means commands work); the check runs in the background.
    When it answers, the plugin reports it (operator ABI 1.3 host->state_report) and the sandbox
    turns alive at once, not one reconciler interval later at the next pass (in a burst of
    16,000 creates that was a pass of a second or more for every sandbox)."""
    sim_only("reads the simulator's sandbox state between the admin's passes")
    interval_s = 4.0
    admin, sim, redis, _ = setup(
        admin_cfg={"runtime": {"reconcile_interval_ms": int(interval_s * 1000)}})
    # execd answers 500 ms late, so the check answers after the pass that queued it (a pass
    # over one sandbox takes milliseconds): that pass reports the sandbox pending, the report
    # turns it alive (without the delay the check may answer within the pass, which then
    # records it running itself)
    faults(sim, {"execd_latency_ms": 500})

    def passes():
        return metric_values(admin, "rock_admin_reconciler_passes_total").get("", 0)
    st, js = admin.api("POST", "/start_async", START_BODY)
    assert st == 200 and js["status"] == "Success", js
    sid = js["result"]["sandbox_id"]
    # the number of complete passes when the backend first shows the sandbox Running: the next
    # pass to complete is the one whose listing sees it Running and queues its check
    p_run = None
    deadline = time.time() + 30
    while p_run is None:
        assert time.time() < deadline, "the simulator never showed the sandbox Running"
        p = passes()
        items = sim_list_by_rock_id(sim, sid)
        if items and items[0]["status"]["state"] == "Running":
            p_run = p
        else:
            time.sleep(0.01)
    listed_at = alive_at = None
    while alive_at is None:
        assert time.time() < deadline, "the sandbox never turned alive"
        if listed_at is None and passes() > p_run:
            listed_at = time.time()
        st, js = status(admin, sid)
        assert st == 200 and js["status"] == "Success", js
        if js["result"]["is_alive"]:
            alive_at = time.time()
        else:
            time.sleep(0.01)
    assert listed_at is not None, "alive before a pass listed it Running"
    after = alive_at - listed_at
    # one interval later (the next pass) without the report; a few ms with it
    assert after < interval_s / 2, "alive %.2f s after the pass that listed it Running" % after
    reports = metric_values(admin, "rock_admin_state_reports_total")
    assert reports['{outcome="applied"}'] == 1, reports
    line = "sandbox %s: pending -> running (reported by the plugin)" % sid
    wait_until(lambda: line in admin.output(), 10, 0.05, line)  # logged just after the write
    assert run_ok(admin, sid, "echo ready")["stdout"] == "ready\n"
    starts = metric_values(admin, "rock_admin_sandbox_start_seconds_count")
    assert starts[""] == 1, starts


@test
def many_reports_turn_sandboxes_alive_once_each():
    """200 sandboxes turn Running together and one list pass sees them all: their readiness
    checks answer and the plugin's reports are applied a chunk at a time by several threads
    (Redis store). Each sandbox turns alive before the next pass (not one interval later), its
    record turns running exactly once (one log line, one running entry in its state history,
    one start observed), and no report fails or is dropped."""
    sim_only("reads the simulator's sandbox state between the admin's passes")
    n, interval_s = 200, 4.0
    admin, sim, redis, _ = setup(
        sim_extra=["--max-sandboxes", str(n)],
        admin_cfg={"runtime": {"reconcile_interval_ms": int(interval_s * 1000)}})
    # execd answers 150 ms late: the checks (64 at a time) answer after the pass, by reports
    faults(sim, {"execd_latency_ms": 150})

    def passes():
        return metric_values(admin, "rock_admin_reconciler_passes_total").get("", 0)
    sids = []
    for _ in range(n):
        st, js = admin.api("POST", "/start_async", START_BODY)
        assert st == 200 and js["status"] == "Success", js
        sids.append(js["result"]["sandbox_id"])
    deadline = time.time() + 60
    while True:  # every sandbox Running in the backend; then the next pass lists them all
        assert time.time() < deadline, "the simulator never showed them all Running"
        p_run = passes()
        st, js = sim.request("GET", "/v1/sandboxes?pageSize=%d&state=Running" % n)
        assert st == 200, js
        if len(js["items"]) == n:
            break
        time.sleep(0.05)
    while passes() <= p_run:
        assert time.time() < deadline, "no pass after the sandboxes ran"
        time.sleep(0.01)
    listed_at = time.time()
    left = set(sids)
    while left:
        assert time.time() - listed_at < interval_s / 2, \
            "%d sandboxes not alive %.1f s after the pass that listed them Running" % (
                len(left), time.time() - listed_at)
        for sid in sorted(left):
            st, js = status(admin, sid)
            assert st == 200 and js["status"] == "Success", js
            if js["result"]["is_alive"]:
                left.discard(sid)
    # each applier logs its change just after writing it: wait for the last lines
    wait_until(lambda: admin.output().count(": pending -> running") >= n, 10, 0.05,
               "a log line for every sandbox that turned running")
    out = admin.output()
    for sid in sids:
        lines = [ln for ln in out.splitlines() if "sandbox %s: pending -> running" % sid in ln]
        assert len(lines) == 1, lines
        rec = json.loads(redis.cli("GET", "rock:sandbox:" + sid))
        hist = [h for h in rec["state_history"] if h.get("to_state") == "running"]
        assert len(hist) == 1, rec["state_history"]
    reports = metric_values(admin, "rock_admin_state_reports_total")
    assert reports['{outcome="failed"}'] == 0 and reports['{outcome="dropped"}'] == 0, reports
    assert reports['{outcome="applied"}'] == n, reports  # each by a report, none twice
    assert metric_values(admin, "rock_admin_sandbox_start_seconds_count")[""] == n


@test
def upstream_lifetime_lapsed():
    """OpenSandbox ends the sandbox itself (its timeout lapses → Terminated):
    get_status shows deleted, the record is persisted as deleted."""
    admin, sim, redis, _ = setup()
    sid = start_alive(admin)
    osid = osid_of(admin, sid)
    st, _ = sim.request("POST", "/_sim/sandboxes/%s/expire" % osid)
    assert st == 204, st
    st, js = sim_sandbox(sim, osid)
    assert js["status"]["state"] == "Terminated", js

    def lapsed():
        st, js = status(admin, sid, all_states=True)
        assert js["status"] == "Success", js
        return js if js["result"]["state"] != "running" else None
    js = wait_until(lapsed, 30, 0.2, "terminated sandbox reconciled")
    assert js["result"]["state"] == "deleted" and js["result"]["is_alive"] is False, js
    st, js = status(admin, sid, all_states=True)
    assert js["result"]["state"] == "deleted" and js["result"]["delete_time"], js
    assert json.loads(redis.cli("GET", "rock:sandbox:" + sid))["state"] == "deleted"
    st, js = execute(admin, sid, "echo x")
    assert js["status"] == "Failed" and js["result"]["code"] == 4000, js
    assert admin.ok("POST", "/delete", {"sandbox_id": sid}) == "%s deleted" % sid


@test
def lost_create_reply():
    """The simulator makes the sandbox but drops the 202: the sandbox still
    becomes alive and exactly one upstream sandbox carries the ROCK id."""
    admin, sim, redis, _ = setup()
    faults(sim, {"drop_create_reply": 1})
    sid = start_alive(admin)
    items = sim_list_by_rock_id(sim, sid)
    assert len(items) == 1, items
    assert items[0]["id"] == osid_of(admin, sid)
    assert run_ok(admin, sid, "echo adopted")["stdout"] == "adopted\n"
    admin.ok("POST", "/delete", {"sandbox_id": sid})
    assert [i for i in sim_list_by_rock_id(sim, sid)
            if i["status"]["state"] not in ("Terminated",)] == []


@test
def creates_share_a_connection_and_a_lost_reply_is_not_resent():
    """Creates one after another (runtime.create_concurrency 1) go out on the connection the
    create before kept open, and the fifth one's reply is lost on that kept connection (the
    simulator makes the sandbox, then closes the connection unanswered): rock-admin must not
    send it again — a second POST would make a second sandbox — but find the one it made. All
    ten become alive, each backed by exactly one upstream sandbox, ten creates in all, on two
    connections (the one that lost the reply, then a new one)."""
    sim_only("counts the connections creates arrive on; a fault switch drops one reply")
    admin, sim, redis, _ = setup(admin_cfg={"runtime": {"create_concurrency": 1}})
    faults(sim, {"drop_create_reply": 1, "drop_create_reply_skip": 4})
    sids = []
    for _ in range(10):
        st, js = admin.api("POST", "/start_async", dict(START_BODY))
        assert st == 200 and js["status"] == "Success", js
        sids.append(js["result"]["sandbox_id"])
    for sid in sids:
        admin.wait_alive(sid, timeout=30)
        assert len(sim_list_by_rock_id(sim, sid)) == 1, sid
    st, stats = sim.request("GET", "/_sim/stats")
    assert st == 200, stats
    assert stats["creates_total"] == 10, stats  # the lost one was not sent twice
    assert stats["create_connections"] == 2, stats
    assert run_ok(admin, sids[4], "echo adopted")["stdout"] == "adopted\n"


@test
def slow_create_status_pending():
    """A slow lifecycle API: get_status right after start_async (what P does)
    answers Success/pending with every TS field, and one sandbox results."""
    admin, sim, redis, _ = setup()
    faults(sim, {"lifecycle_latency_ms": 700})
    st, js = admin.api("POST", "/start_async", dict(START_BODY))
    assert js["status"] == "Success", js
    sid = js["result"]["sandbox_id"]
    st, js = status(admin, sid)
    assert js["status"] == "Success", js
    r = js["result"]
    assert r["state"] == "pending" and r["is_alive"] is False and r["status"] == {}, r
    for k in TS_NON_NULL:
        assert r.get(k) is not None, (k, r)
    admin.wait_alive(sid, timeout=30)
    faults(sim)
    assert len(sim_list_by_rock_id(sim, sid)) == 1


@test
def failed_sandbox():
    """OpenSandbox reports Failed: is_alive false, a failed phase with the reason."""
    admin, sim, redis, _ = setup()
    sid = start_alive(admin)
    osid = osid_of(admin, sid)
    st, _ = sim.request("POST", "/_sim/sandboxes/%s/fail" % osid)
    assert st == 204, st

    def failed():
        st, js = status(admin, sid)
        assert js["status"] == "Success", js
        return js["result"] if not js["result"]["is_alive"] else None
    r = wait_until(failed, 10, 0.2, "failed sandbox not alive")
    assert r["state"] == "stopped", r
    bad = [p for p in r["status"].values() if p.get("status") == "failed"]
    assert bad and "CONTAINER_EXITED_ERROR" in bad[0]["message"], r
    # The stored state stays running (the backend's failed state is shown, not stored), so
    # the gate lets the command through; execd of a sandbox that is not running answers 502:
    # an upstream error, ROCK code 5000.
    st, js = execute(admin, sid, "echo x")
    assert st == 200 and js["status"] == "Failed", js
    assert js["message"] == "execute command failed" and js["result"]["code"] == 5000, js
    assert js["error"] == ("opensandbox execute failed for %s: HTTP 502 GENERAL::UNKNOWN_ERROR: "
                           "Could not connect to the backend sandbox: not running" % osid), js
    admin.ok("POST", "/delete", {"sandbox_id": sid})
    st, js = sim_sandbox(sim, osid)
    assert st == 404, (st, js)  # the simulator forgets a deleted sandbox


@test
def idle_expiry_kills_and_deletes():
    """auto_clear_time_minutes with the deadline forced into the past: the
    sweep kills the OpenSandbox sandbox and marks the record deleted."""
    admin, sim, redis, _ = setup(admin_cfg={"runtime": {"sweep_interval": 1}})
    # a second admin process on the same store sweeps too (must be safe)
    admin2 = Admin(operator="opensandbox", redis=redis, config=dict(
        os_config(sim.endpoint), runtime={"sweep_interval": 1}))
    sid = start_alive(admin, auto_clear_time_minutes=1)
    osid = osid_of(admin, sid)
    exp = float(redis.cli("ZSCORE", "rock:expire", sid))
    assert 0 < exp - time.time() <= 61, exp
    redis.cli("ZADD", "rock:expire", "1", sid)

    def gone():
        raw = redis.cli("GET", "rock:sandbox:" + sid)
        if not raw:
            return "missing"
        return json.loads(raw).get("state") == "deleted" and raw
    wait_until(gone, 10, 0.1, "record deleted by the idle sweep")
    st, js = sim_sandbox(sim, osid)
    assert st == 404, (st, js)  # the simulator forgets a deleted sandbox
    assert redis.cli("SISMEMBER", "rock:active", sid) == "0"
    assert redis.cli("ZSCORE", "rock:expire", sid) == ""
    out = admin.output() + admin2.output()
    assert out.count("idle deadline passed; deleted") == 1, out[-3000:]
    assert "idle delete failed" not in out, out[-3000:]
    st, js = status(admin2, sid, all_states=True)
    assert js["result"]["state"] == "deleted" and js["result"]["delete_time"], js


if __name__ == "__main__":
    run()
