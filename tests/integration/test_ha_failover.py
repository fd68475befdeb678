# SPDX-License-Identifier: Apache-2.0
"""The production shape, end to end on loopback: a Redis master with two
replicas (ACL user + password), three Redis Sentinels (password), three
rock-admins (operator opensandbox, the OpenSandbox simulator) behind HAProxy
running conf/haproxy-rock-admin.cfg, and a client talking only to HAProxy.

While the client creates sandboxes, runs session commands and uploads:
  (0) a sentinel is SIGKILLed (the one the admins ask first);
  (a) the Redis master is SIGKILLed and the sentinels promote a replica;
  (b) one rock-admin is SIGKILLed;
  (c) it is restarted on the same port.
Asserted: every sandbox and session acknowledged before a failure is still
there afterwards and usable through every admin; requests during a failover
window either succeed with the right answer or fail with a clear error (an
HAProxy 502/503/504, or a ROCK 5000 naming the store) and succeed on retry;
no ROCK sandbox has two simulator sandboxes; the idle sweep of three admins
deletes each expired sandbox once. The measured windows are printed ("figure:")
for docs/deployment.md.

min_replicas_ack is 1 with two replicas: after the master dies the new master
still has one replica to confirm each write (docs/deployment.md explains why
min_replicas_ack must stay below the number of replicas).
"""
import http.client
import json
import os
import shutil
import subprocess
import time
import urllib.parse

from harness import (PREFIX, Admin, Process, Sim, free_port, http_request, run, test, tmpdir,
                     wait_until)

os.environ.pop("OPEN_SANDBOX_API_KEY", None)

API_KEY = "sim-key-ha"
REDIS_USER = "rock"
REDIS_PW = "redis-pw-Q3z"
SENTINEL_PW = "sentinel-pw-K8w"
MASTER = "rockmaster"
SRCDIR = os.environ.get("ROCK_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
START_BODY = {"image": "python:3.11", "memory": "2g", "cpus": 1, "auto_clear_time_minutes": 30}


# ---- the Redis side ---------------------------------------------------------------

class RedisNode(Process):
    """redis-server from a config file: ACL user rock, default user off."""

    def __init__(self, port=None, replica_of=None):
        self.port = port or free_port()
        d = tmpdir("rock-ha-redis-")
        conf = os.path.join(d, "redis.conf")
        lines = ["port %d" % self.port, "bind 127.0.0.1", "save \"\"", "appendonly no",
                 "dir %s" % d, "user default off",
                 "user %s on >%s ~* &* +@all" % (REDIS_USER, REDIS_PW),
                 "masteruser %s" % REDIS_USER, "masterauth %s" % REDIS_PW]
        if replica_of:
            lines.append("replicaof 127.0.0.1 %d" % replica_of)
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        super().__init__(["redis-server", conf], name="redis-%d" % self.port)
        self.wait_for_line(r"Ready to accept connections")

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "--no-auth-warning", "-p", str(self.port), "--user",
                              REDIS_USER, "--pass", REDIS_PW] + list(args),
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()


class SentinelNode(Process):
    """redis-server --sentinel watching MASTER (password-protected)."""

    def __init__(self, master_port):
        self.port = free_port()
        d = tmpdir("rock-ha-sentinel-")
        conf = os.path.join(d, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("\n".join([
                "port %d" % self.port, "bind 127.0.0.1", "dir %s" % d,
                "requirepass %s" % SENTINEL_PW, "sentinel sentinel-pass %s" % SENTINEL_PW,
                "sentinel monitor %s 127.0.0.1 %d 2" % (MASTER, master_port),
                "sentinel down-after-milliseconds %s 1000" % MASTER,
                "sentinel failover-timeout %s 10000" % MASTER,
                "sentinel parallel-syncs %s 2" % MASTER,
                "sentinel auth-user %s %s" % (MASTER, REDIS_USER),
                "sentinel auth-pass %s %s" % (MASTER, REDIS_PW)]) + "\n")
        super().__init__(["redis-server", conf, "--sentinel"], name="sentinel-%d" % self.port)
        self.wait_for_line(r"Sentinel ID is")

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "--no-auth-warning", "-p", str(self.port), "-a",
                              SENTINEL_PW] + list(args), capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip()

    def master_info(self):
        """SENTINEL master MASTER as a dict."""
        words = self.cli("SENTINEL", "master", MASTER).split("\n")
        return dict(zip(words[0::2], words[1::2]))

    def master_port(self):
        out = self.cli("SENTINEL", "get-master-addr-by-name", MASTER).split("\n")
        return int(out[1]) if len(out) == 2 else None


# ---- HAProxy running the shipped example -------------------------------------------

class HAProxy(Process):
    """haproxy -db with conf/haproxy-rock-admin.cfg, addresses rewritten."""

    def __init__(self, admin_ports):
        self.port = free_port()
        with open(os.path.join(SRCDIR, "conf", "haproxy-rock-admin.cfg")) as f:
            text = f.read()
        out = []
        for line in text.split("\n"):
            if "# test: listen" in line:
                line = "    bind 127.0.0.1:%d" % self.port
            for i, p in enumerate(admin_ports, 1):
                if "# test: admin%d" % i in line:
                    line = "    server admin%d 127.0.0.1:%d check" % (i, p)
            out.append(line)
        cfg = os.path.join(tmpdir("rock-ha-lb-"), "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("\n".join(out))
        exe = shutil.which("haproxy") or "/usr/sbin/haproxy"  # /usr/sbin may be off PATH
        super().__init__([exe, "-db", "-f", cfg], name="haproxy")
        wait_until(lambda: self.get_ok("/readyz"), 20, 0.2, "haproxy to serve /readyz")

    def get_ok(self, path):
        try:
            st, _ = http_request("127.0.0.1", self.port, "GET", path, timeout=5)
            return st == 200
        except OSError:
            return False


# ---- the client --------------------------------------------------------------------

class Client:
    """Calls ROCK routes through one endpoint and classifies every answer as
    success or a clear failure; anything else fails the test."""

    def __init__(self, port):
        self.port = port
        self.failures = []  # (route, description) of clear failures

    def call(self, method, route, body=None, query=None):
        """(True, result) on success, (False, why) on a clear failure."""
        path = PREFIX + route + ("?" + urllib.parse.urlencode(query) if query else "")
        try:
            st, js = http_request("127.0.0.1", self.port, method, path, body, timeout=60)
        except (OSError, http.client.HTTPException) as e:
            self.failures.append((route, "connection: %s" % e))
            return False, "connection: %s" % e
        if st in (502, 503, 504):  # HAProxy: no instance could answer
            self.failures.append((route, "http %d" % st))
            return False, "http %d" % st
        assert st == 200 and isinstance(js, dict), (route, st, js)
        if js.get("status") == "Success":
            return True, js["result"]
        res = js.get("result") or {}
        err = (js.get("error") or "").lower()
        clear = res.get("code") == 5000 and ("store" in err or "redis" in err)
        assert clear, ("not a clear failure", route, js)
        self.failures.append((route, js["error"]))
        return False, js["error"]

    def retry(self, method, route, body=None, query=None, timeout=45.0):
        """Call until it succeeds; returns the result."""
        box = {}

        def attempt():
            ok, res = self.call(method, route, body, query)
            if ok:
                box["r"] = res
            return ok
        wait_until(attempt, timeout, 0.25, "%s to succeed" % route)
        return box["r"]

    def status(self, sid):
        ok, res = self.call("GET", "/get_status", query={"sandbox_id": sid})
        if ok:  # never a wrong answer: an acknowledged sandbox is there, alive
            assert res["sandbox_id"] == sid and res["is_alive"] is True, res
        return ok

    def start(self):
        res = self.retry("POST", "/start_async", dict(START_BODY))
        sid = res["sandbox_id"]
        wait_until(lambda: self.alive(sid), 45, 0.25, "sandbox %s alive" % sid)
        return sid

    def alive(self, sid):
        ok, res = self.call("GET", "/get_status", query={"sandbox_id": sid})
        return ok and res["is_alive"]

    def new_session(self, sid, name):
        self.retry("POST", "/create_session", {"sandbox_id": sid, "session_type": "bash",
                                               "session": name, "startup_source": []})
        self.retry("POST", "/run_in_session", {"action_type": "bash", "session": name,
                                               "sandbox_id": sid, "check": "raise",
                                               "command": "export MARK=%s" % name})

    def session_ok(self, sid, name):
        """One command in an existing session: the shell still has its state."""
        ok, res = self.call("POST", "/run_in_session", {
            "action_type": "bash", "session": name, "sandbox_id": sid, "check": "raise",
            "command": "echo $MARK"})
        if ok:
            assert res["output"] == name + "\n", res
        return ok

    def upload(self, sid, target, data):
        """Multipart upload streamed through the balancer; True on success."""
        b = "haB0undary7"
        pre = ("--%s\r\nContent-Disposition: form-data; name=\"sandbox_id\"\r\n\r\n%s\r\n"
               "--%s\r\nContent-Disposition: form-data; name=\"target_path\"\r\n\r\n%s\r\n"
               "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.bin\"\r\n"
               "Content-Type: application/octet-stream\r\n\r\n"
               % (b, sid, b, target, b)).encode()
        body = pre + data + ("\r\n--%s--\r\n" % b).encode()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            conn.request("POST", PREFIX + "/upload", body=body, headers={
                "Content-Type": "multipart/form-data; boundary=" + b})
            resp = conn.getresponse()
            payload = resp.read()
            conn.close()
        except (OSError, http.client.HTTPException) as e:
            self.failures.append(("/upload", str(e)))
            return False
        if resp.status in (502, 503, 504):
            self.failures.append(("/upload", "http %d" % resp.status))
            return False
        js = json.loads(payload)
        if js["status"] == "Success":
            with open(target, "rb") as f:  # the simulator's sandbox paths are host paths
                assert f.read() == data
            return True
        assert js["result"]["code"] == 5000, js
        self.failures.append(("/upload", js["error"]))
        return False


def sim_items(sim):
    st, js = sim.request("GET", "/v1/sandboxes?pageSize=200")
    assert st == 200, (st, js)
    return js["items"]


def assert_no_duplicates(sim):
    seen = {}
    for it in sim_items(sim):
        if it["status"]["state"] == "Terminated":
            continue
        rid = (it.get("metadata") or {}).get("rock_sandbox_id")
        assert rid not in seen, ("two simulator sandboxes for", rid, seen.get(rid), it["id"])
        seen[rid] = it["id"]
    return seen


def admin_config(sim, sentinels, port, pwfile, spwfile):
    return {
        "server": {"port": port},
        "runtime": {"sweep_interval": 1},
        "opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                        "use_server_proxy": False},
        "redis": {"sentinels": ["127.0.0.1:%d" % s.port for s in sentinels],
                  "master_name": MASTER, "username": REDIS_USER, "password_file": pwfile,
                  "sentinel_password_file": spwfile, "min_replicas_ack": 1,
                  "wait_timeout_ms": 1000, "timeout_ms": 2500, "connect_timeout_ms": 500},
    }


@test
def failover_of_redis_master_and_of_an_admin_loses_nothing():
    t_test = time.time()
    # Redis master + 2 replicas + 3 sentinels.
    master = RedisNode()
    replicas = [RedisNode(replica_of=master.port) for _ in range(2)]
    wait_until(lambda: master.cli("INFO", "replication").count("state=online") == 2, 30, 0.2,
               "both replicas in sync")
    sentinels = [SentinelNode(master.port) for _ in range(3)]

    def sentinels_ready():
        for s in sentinels:
            info = s.master_info()
            if info.get("num-slaves") != "2" or info.get("num-other-sentinels") != "2":
                return False
        return True
    wait_until(sentinels_ready, 40, 0.3, "sentinels to know the replicas and each other")

    d = tmpdir("rock-ha-secrets-")
    pwfile, spwfile = os.path.join(d, "redis.pw"), os.path.join(d, "sentinel.pw")
    with open(pwfile, "w") as f:
        f.write(REDIS_PW + "\n")
    with open(spwfile, "w") as f:
        f.write(SENTINEL_PW + "\n")

    sim = Sim(api_key=API_KEY)
    ports = [free_port() for _ in range(3)]
    admins = [Admin(operator="opensandbox",
                    config=admin_config(sim, sentinels, p, pwfile, spwfile)) for p in ports]
    for a in admins:
        out = a.output()
        assert REDIS_PW not in out and SENTINEL_PW not in out, "a secret reached the log"
    lb = HAProxy(ports)
    c = Client(lb.port)

    # Before any failure: sandboxes, sessions and an upload, all acknowledged.
    acked = []      # sandbox ids
    sessions = []   # (sandbox id, session name)
    for i in range(3):
        sid = c.start()
        acked.append(sid)
        name = "bash-pre-%d" % i
        c.new_session(sid, name)
        sessions.append((sid, name))
    files = tmpdir("rock-ha-files-")
    assert c.upload(acked[0], os.path.join(files, "before.bin"), os.urandom(256 * 1024))
    assert c.failures == [], c.failures
    print("setup done in %.1fs" % (time.time() - t_test), flush=True)

    # A sentinel dies first (the one every admin asks first): nothing changes,
    # the quorum (2 of 3) remains and the admins ask the next one.
    sentinels[0].kill()
    assert c.status(acked[0]) and c.session_ok(*sessions[0]), c.failures

    # (a) Kill the Redis master (the one the sentinels name now, in case a
    # loaded machine made them fail over already); keep working through the balancer.
    nodes = [master] + replicas
    old_port = sentinels[1].master_port()
    old_master = next(r for r in nodes if r.port == old_port)
    t_kill = time.time()
    old_master.kill()
    first_ok_write = None
    i = 0
    while time.time() - t_kill < 60:
        sid, name = sessions[i % len(sessions)]
        c.status(sid)
        c.session_ok(sid, name)
        c.upload(sid, os.path.join(files, "during-%d.bin" % i), os.urandom(64 * 1024))
        ok, res = c.call("POST", "/create_session", {
            "sandbox_id": sid, "session_type": "bash", "session": "bash-during-%d" % i,
            "startup_source": []})
        if ok:
            sessions.append((sid, "bash-during-%d" % i))
            c.retry("POST", "/run_in_session", {"action_type": "bash",
                                                 "session": "bash-during-%d" % i,
                                                 "sandbox_id": sid, "check": "raise",
                                                 "command": "export MARK=bash-during-%d" % i})
            first_ok_write = time.time()
            break
        i += 1
        time.sleep(0.1)
    assert first_ok_write, "writes never recovered after the master was killed"
    new_port = sentinels[1].master_port()
    assert new_port != old_port and new_port in (r.port for r in nodes), new_port
    during = len(c.failures)
    print("figure: redis master failover: first acknowledged write %.1fs after SIGKILL, "
          "%d clear failures meanwhile" % (first_ok_write - t_kill, during), flush=True)

    # Everything acknowledged before is there and usable through every admin.
    sid = c.start()
    acked.append(sid)
    c.new_session(sid, "bash-after-a")
    sessions.append((sid, "bash-after-a"))
    assert c.upload(sid, os.path.join(files, "after-a.bin"), os.urandom(128 * 1024)) or \
        c.upload(sid, os.path.join(files, "after-a.bin"), os.urandom(128 * 1024))
    for a in admins:
        direct = Client(a.port)
        for sid in acked:
            assert direct.status(sid), direct.failures
        for sid, name in sessions:
            assert direct.session_ok(sid, name), direct.failures

    # (b) SIGKILL one admin while the client keeps going through the balancer.
    victim = admins[1]
    victim.check_exit = False
    t_kill = time.time()
    victim.kill()
    recovered = None
    for k in range(200):
        sid, name = sessions[k % len(sessions)]
        if c.status(sid) and c.session_ok(sid, name):
            recovered = recovered or time.time()
            if time.time() - t_kill > 3:  # past HAProxy's check interval
                break
        time.sleep(0.05)
    assert recovered
    sid = c.start()
    acked.append(sid)
    print("figure: admin SIGKILL: requests answered again %.2fs after the kill" %
          (recovered - t_kill), flush=True)

    # (c) Restart it on the same port; HAProxy takes it back; it serves everything.
    admins[1] = Admin(operator="opensandbox",
                      config=admin_config(sim, sentinels, ports[1], pwfile, spwfile))
    direct = Client(ports[1])
    for sid in acked:
        assert direct.status(sid), direct.failures
    for sid, name in sessions:
        assert direct.session_ok(sid, name), direct.failures
    for k in range(6):  # the balancer spreads new work over all three again
        sid = c.start()
        acked.append(sid)

    # No ROCK sandbox has two simulator sandboxes; every acknowledged one has one.
    live = assert_no_duplicates(sim)
    for sid in acked:
        assert sid in live, (sid, live)

    # The idle sweep of three admins deletes each expired sandbox exactly once.
    expired = acked[:3]

    def current_master():
        """The node the living sentinels name now: on a loaded machine they may fail over
        once more (down-after-milliseconds 1000), and the admins follow them."""
        port = sentinels[1].master_port() or sentinels[2].master_port()
        return next(r for r in nodes if r.port == port)

    def swept():
        m = current_master()
        done = True
        for s in expired:
            raw = m.cli("GET", "rock:sandbox:" + s)
            if raw.startswith("{") and json.loads(raw)["state"] == "deleted":
                continue
            done = False
            if not raw.startswith("{"):
                continue  # a node in the middle of a failover: ask again
            # (again when a failover since lost the asynchronously replicated ZADD)
            m.cli("ZADD", "rock:expire", "1", s)
        return done
    wait_until(swept, 30, 0.3, "the idle sweep")
    new_master = current_master()
    for sid in expired:
        hist = c.retry("GET", "/get_status", query={"sandbox_id": sid,
                                                      "include_all_states": "true"})
        deletes = [h for h in hist["state_history"] if h["to_state"] == "deleted"]
        assert len(deletes) == 1 and deletes[0]["event"] == "idle_timeout", hist
        ttl = int(new_master.cli("TTL", "rock:sandbox:" + sid))
        assert 0 < ttl <= 7 * 24 * 3600, ttl  # kept for the retention, then gone
    live = assert_no_duplicates(sim)
    for sid in expired:
        assert sid not in live
    kinds = {}
    for _, why in c.failures:
        k = why if why.startswith("http") else why.split(":")[0] + ": " + why.split(":")[1][:40]
        kinds[k] = kinds.get(k, 0) + 1
    print("clear failures seen by the client: %d %r; test wall time %.1fs"
          % (len(c.failures), kinds, time.time() - t_test), flush=True)


WS_APP_JS = r"""
const WebSocket = require(process.argv[3]);
const wss = new WebSocket.Server({port: parseInt(process.argv[2], 10), host: '127.0.0.1'});
wss.on('connection', (ws) => ws.on('message', (d, bin) => ws.send(d, {binary: bin})));
"""

WS_CLIENT_JS = r"""
const path = require('path');
const WebSocket = require(path.join(process.env.NODE_MODULES, 'ws'));
const crypto = require('crypto');
const ws = new WebSocket(process.argv[2]);
const sent = [];
let echoed = 0, mismatch = 0;
ws.on('open', () => {
  for (let i = 0; i < 200; i++) {
    const m = crypto.randomBytes(i === 100 ? (1 << 20) : Math.floor(Math.random() * 4096));
    sent.push(m);
    ws.send(m, {binary: true});
  }
});
ws.on('message', (d) => {
  if (Buffer.compare(d, sent.shift()) === 0) echoed++; else mismatch++;
  if (sent.length === 0) ws.close(1000, 'done');
});
ws.on('unexpected-response', (q, r) => { console.log(JSON.stringify({http: r.statusCode})); process.exit(0); });
ws.on('close', (code) => { console.log(JSON.stringify({code, echoed, mismatch})); process.exit(0); });
"""


def duration_s(text):
    """HAProxy duration ("25m", "1h", "30s", "500ms") in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    for u in ("ms", "s", "m", "h", "d"):
        if text.endswith(u) and text[:-len(u)].isdigit():
            return int(text[:-len(u)]) * units[u]
    return int(text) / 1000.0


@test
def balancer_config_carries_long_execute_streamed_upload_and_websocket():
    """conf/haproxy-rock-admin.cfg in front of two rock-admins: its timeouts
    allow 20-minute commands, an /execute and a 48 MiB upload (streamed from a
    generator, never joined) go through it, and a WebSocket to an app inside the
    sandbox echoes through it."""
    with open(os.path.join(SRCDIR, "conf", "haproxy-rock-admin.cfg")) as f:
        timeouts = {}
        for line in f:
            w = line.split("#")[0].split()
            if len(w) == 3 and w[0] == "timeout":
                timeouts[w[1]] = duration_s(w[2])
    assert timeouts["server"] >= 20 * 60 and timeouts["client"] >= 20 * 60, timeouts
    assert timeouts["tunnel"] >= 20 * 60, timeouts

    from harness import Redis, node_available, NODE_MODULES
    import hashlib
    redis = Redis()
    sim = Sim(api_key=API_KEY)
    ports = [free_port(), free_port()]
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                           "use_server_proxy": False}}
    for p in ports:
        Admin(operator="opensandbox", redis=redis, config=dict(cfg, server={"port": p}))
    lb = HAProxy(ports + [free_port()])  # a third, never started: checked down, never used
    c = Client(lb.port)
    sid = c.start()
    ok, res = c.call("POST", "/execute", {"sandbox_id": sid, "command": "sleep 2; echo slow",
                                          "timeout": 60})
    assert ok and res["stdout"] == "slow\n", res

    # 48 MiB streamed through HAProxy and rock-admin into the sandbox.
    files = tmpdir("rock-ha-lbfiles-")
    target = os.path.join(files, "big.bin")
    b = "lbB0undary"
    pre = ("--%s\r\nContent-Disposition: form-data; name=\"sandbox_id\"\r\n\r\n%s\r\n"
           "--%s\r\nContent-Disposition: form-data; name=\"target_path\"\r\n\r\n%s\r\n"
           "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n"
           "Content-Type: application/octet-stream\r\n\r\n" % (b, sid, b, target, b)).encode()
    post = ("\r\n--%s--\r\n" % b).encode()
    chunk = os.urandom(1 << 20)
    digest = hashlib.sha256()

    def body():
        yield pre
        for i in range(48):
            piece = bytes([i]) + chunk[1:]
            digest.update(piece)
            yield piece
        yield post
    conn = http.client.HTTPConnection("127.0.0.1", lb.port, timeout=300)
    conn.request("POST", PREFIX + "/upload", body=body(), headers={
        "Content-Type": "multipart/form-data; boundary=" + b,
        "Content-Length": str(len(pre) + (48 << 20) + len(post))})
    resp = conn.getresponse()
    js = json.loads(resp.read())
    conn.close()
    assert resp.status == 200 and js["status"] == "Success", js
    h = hashlib.sha256()
    with open(target, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    assert h.hexdigest() == digest.hexdigest()

    # WebSocket through HAProxy -> rock-admin -> the app inside the sandbox.
    assert node_available(), "node and tests/js/node_modules are required"
    d = tmpdir("rock-ha-ws-")
    app, client = os.path.join(d, "app.js"), os.path.join(d, "client.js")
    ok, _ = c.call("POST", "/write_file", {"sandbox_id": sid, "path": app,
                                           "content": WS_APP_JS})
    assert ok
    with open(client, "w") as f:
        f.write(WS_CLIENT_JS)
    port = free_port()
    ok, res = c.call("POST", "/execute", {
        "sandbox_id": sid, "timeout": 30,
        "command": "nohup %s %s %d %s > %s 2>&1 & echo $!" % (
            shutil.which("node"), app, port, os.path.join(NODE_MODULES, "ws"),
            os.path.join(d, "app.log"))})
    assert ok, res
    app_pid = int(res["stdout"].strip())

    def listening():
        try:
            with __import__("socket").create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False
    wait_until(listening, 15, 0.1, "the WebSocket app")
    env = dict(os.environ, NODE_MODULES=NODE_MODULES)
    url = "ws://127.0.0.1:%d%s/sandboxes/%s/proxy/port/%d/echo" % (lb.port, PREFIX, sid, port)
    out = subprocess.run(["node", client, url], capture_output=True, text=True, env=env,
                         timeout=120)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res == {"code": 1000, "echoed": 200, "mismatch": 0}, (res, out.stderr[-2000:])
    try:
        os.kill(app_pid, 9)  # the simulator's sandbox processes are host processes
    except OSError:
        pass


if __name__ == "__main__":
    run()
