# SPDX-License-Identifier: Apache-2.0
"""The production shape, end to end on loopback: a Redis master with two
replicas (ACL user + password), three Redis Sentinels (password), three
rock-admins (operator opensandbox, the OpenSandbox simulator) behind HAProxy
running conf/haproxy-rock-admin.cfg, and a client talking only to HAProxy.

While the client creates sandboxes, runs session commands and uploads:
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
        super().__init__(["haproxy", "-db", "-f", cfg], name="haproxy")
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
        "redis": {"sentinels": ",".join("127.0.0.1:%d" % s.port for s in sentinels),
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

    # (a) Kill the Redis master; keep working through the balancer.
    t_kill = time.time()
    master.kill()
    first_ok_write = None
    i = 0
    while time.time() - t_kill < 60:
        sid, name = sessions[i % len(sessions)]
        c.status(sid)
        c.session_ok(sid, name)
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
    new_port = sentinels[0].master_port()
    assert new_port in (r.port for r in replicas), new_port
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
    new_master = next(r for r in replicas if r.port == new_port)
    for sid in expired:
        new_master.cli("ZADD", "rock:expire", "1", sid)

    def swept():
        return all(json.loads(new_master.cli("GET", "rock:sandbox:" + s))["state"] == "deleted"
                   for s in expired)
    wait_until(swept, 30, 0.3, "the idle sweep")
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


if __name__ == "__main__":
    run()
