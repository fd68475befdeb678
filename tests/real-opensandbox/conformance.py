#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Differential conformance: the same execd requests to the simulator's execd and to the REAL
execd (the OpenSandbox stand's build, $OSR/bin/execd, run alone on a free loopback port), then
status codes, error codes and normalised SSE event sequences compared for what the opensandbox
plugin relies on: command events and exit codes, stderr, timeouts, request errors, background
commands, sessions (variables, cwd, exit codes, background jobs with disown and wait, an unknown
session, delete), files (info of a missing file, upload/download round trip, permissions).

  conformance.py BUILD_DIR [EXECD_BINARY [SERVER_URL API_KEY]]

With SERVER_URL (the real lifecycle server, e.g. http://127.0.0.1:18080) the lifecycle API is
compared too, against the simulator's server: an unknown sandbox, a bad create, create with
metadata, list paging with metadata filters, endpoint discovery, pause/resume states,
renew-expiration, delete and what follows it (host networking: one sandbox at a time, so run it
while no other sandbox lives there).

Prints one line per case ("same", "DIFFERENT", or "explained: <why>") and exits 1 when any
difference is not in EXPLAINED (the simulator's deliberate differences, see
tests/opensandbox-sim/README.md). Both run commands on this machine (the real execd as the
stand's own tests do): keep it on 127.0.0.1.
"""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

# case name -> why the simulator answers differently on purpose
EXPLAINED = {}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(base, method, path, body=None, headers=None, raw=None, timeout=30):
    host, port, prefix = base
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    h = dict(headers or {})
    data = None
    if raw is not None:
        data = raw
    elif body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c.request(method, prefix + path, body=data, headers=h)
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, r.getheader("Content-Type") or "", payload


def events(payload):
    """SSE/NDJSON events without pings, timestamps, ids and durations."""
    out = []
    for line in payload.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if line.startswith("data:"):
            line = line[5:].strip()
        if not line.startswith("{"):
            continue
        ev = json.loads(line)
        t = ev.get("type")
        if t == "ping":
            continue
        e = {"type": t}
        if t in ("stdout", "stderr"):
            e["text"] = ev.get("text")
        if t == "error":
            err = ev.get("error") or {}
            e["ename"], e["evalue"] = err.get("ename"), err.get("evalue")
        out.append(e)
    # execd sends one event per output line, stdout and stderr from two pipes: the order
    # within a stream is the contract, the interleaving of the two is not. Output is kept per
    # stream (lines joined), in the place of its stream's first event.
    merged, at = [], {}
    for e in out:
        t = e["type"]
        if t in ("stdout", "stderr"):
            if t in at:
                merged[at[t]]["text"] += "\n" + e["text"]
                continue
            at[t] = len(merged)
            if "stdout" in at and "stderr" in at and t == "stdout":
                pass
        merged.append(dict(e))
    # the stream that spoke first is not part of the contract either
    outs = sorted((e for e in merged if e["type"] in ("stdout", "stderr")),
                  key=lambda e: e["type"])
    rest = [e for e in merged if e["type"] not in ("stdout", "stderr")]
    return rest[:1] + outs + rest[1:] if rest and rest[0]["type"] == "init" else outs + rest


def norm(status, ctype, payload, fields=("code",)):
    if "event-stream" in ctype or payload.lstrip().startswith(b'{"type"'):
        return {"status": status, "events": events(payload)}
    try:
        js = json.loads(payload) if payload else None
    except ValueError:
        return {"status": status, "body": payload[:200].decode("utf-8", "replace")}
    if isinstance(js, dict) and fields:
        js = {k: js.get(k) for k in fields if k in js}
    return {"status": status, "json": js}


class Both:
    def __init__(self, sim_base, real_base):
        self.bases = {"sim": sim_base, "real": real_base}
        self.results = []

    def each(self, fn):
        return {k: fn(k, b) for k, b in self.bases.items()}

    def case(self, name, got):
        same = got["sim"] == got["real"]
        why = EXPLAINED.get(name)
        verdict = "same" if same else ("explained: " + why if why else "DIFFERENT")
        self.results.append((name, verdict, got))
        print("%-44s %s" % (name, verdict))
        if not same:
            print("    sim : %s\n    real: %s" % (json.dumps(got["sim"])[:600],
                                                 json.dumps(got["real"])[:600]))


def main():
    build = sys.argv[1]
    execd = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.environ.get("OSR", "/tmp/osreal"), "bin", "execd")
    work = tempfile.mkdtemp(prefix="rock-conf-")
    procs = []
    try:
        # the simulator and one sandbox; its execd at the endpoint the server names
        sim = subprocess.Popen([os.path.join(build, "tests/opensandbox-sim/opensandbox-sim"),
                                "--listen", "127.0.0.1:0", "--root", work,
                                "--ready-delay-ms", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(sim)
        m = None
        while not m:
            line = sim.stdout.readline()
            if not line:
                raise SystemExit("simulator did not start")
            m = re.search(r"ready on http://([0-9.]+):(\d+)", line)
        sport = int(m.group(2))
        st, _, p = request(("127.0.0.1", sport, ""), "POST", "/v1/sandboxes", {
            "image": {"uri": "python:3.11"}, "entrypoint": ["sleep", "infinity"],
            "timeout": 600, "resourceLimits": {"cpu": "1", "memory": "1Gi"}, "metadata": {}})
        osid = json.loads(p)["id"]
        time.sleep(0.2)
        st, _, p = request(("127.0.0.1", sport, ""), "GET",
                           "/v1/sandboxes/%s/endpoints/44772" % osid)
        hostport, _, prefix = json.loads(p)["endpoint"].partition("/")
        sim_base = ("127.0.0.1", int(hostport.rpartition(":")[2]),
                    ("/" + prefix) if prefix else "")
        # the real execd, alone
        rport = free_port()
        real = subprocess.Popen([execd, "--port=%d" % rport], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=work)
        procs.append(real)
        real_base = ("127.0.0.1", rport, "")
        for _ in range(100):
            try:
                request(real_base, "GET", "/ping")
                break
            except OSError:
                time.sleep(0.1)
        b = Both(sim_base, real_base)
        run(b, work)
        if len(sys.argv) > 4:
            u = sys.argv[3].split("//", 1)[1].rstrip("/")
            server = Both(("127.0.0.1", sport, "/v1"),
                          (u.rpartition(":")[0], int(u.rpartition(":")[2]), "/v1"))
            server.keys = {"sim": None, "real": sys.argv[4]}
            run_server(server)
            b.results += server.results
        report(b)
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["rm", "-rf", work])


def run(b, work):
    cmd = lambda k, base, body, **kw: norm(*request(base, "POST", "/command", body, **kw))
    b.case("ping", b.each(lambda k, base: request(base, "GET", "/ping")[0]))
    b.case("command: stdout, exit 0",
           b.each(lambda k, base: cmd(k, base, {"command": "echo hi; echo there"})))
    b.case("command: stdout+stderr, exit 3",
           b.each(lambda k, base: cmd(k, base, {"command": "echo out; echo err >&2; exit 3"})))
    b.case("command: output without newline",
           b.each(lambda k, base: cmd(k, base, {"command": "printf x"})))
    b.case("command: cwd", b.each(lambda k, base: cmd(k, base, {"command": "pwd",
                                                              "cwd": "/tmp"})))
    b.case("command: missing cwd", b.each(lambda k, base: cmd(
        k, base, {"command": "pwd", "cwd": "/nonexistent-rock-dir"})))
    b.case("command: empty command", b.each(lambda k, base: cmd(k, base, {"command": ""})))
    b.case("command: timeout", b.each(lambda k, base: cmd(
        k, base, {"command": "echo a; sleep 5", "timeout": 1000})))
    b.case("command: env", b.each(lambda k, base: cmd(
        k, base, {"command": "echo $ROCK_X", "envs": {"ROCK_X": "va lue"}})))
    # sessions
    sess = b.each(lambda k, base: json.loads(request(base, "POST", "/session", {})[2]))
    b.case("session: create keys", {k: sorted(v) for k, v in sess.items()})

    def srun(command, **extra):
        body = {"command": command}
        body.update(extra)
        return b.each(lambda k, base: norm(*request(
            base, "POST", "/session/%s/run" % sess[k]["session_id"], body)))
    b.case("session: export", srun("export ROCK_S=1; cd /tmp"))
    b.case("session: variables and cwd carry over", srun("echo $ROCK_S; pwd"))
    b.case("session: exit code", srun("echo x; false"))
    b.case("session: background job redirected",
           srun("nohup sleep 0.3 < /dev/null > /dev/null 2>&1 & echo started"))
    b.case("session: background job + wait", srun("(sleep 0.2; echo inner) & wait; echo waited"))
    b.case("session: disown of a running job",
           srun("nohup sleep 1 < /dev/null > /dev/null 2>&1 & echo started; disown"))
    b.case("session: run with timeout", srun("echo a; sleep 5", timeout=1000))
    b.case("session: unknown session", b.each(lambda k, base: norm(*request(
        base, "POST", "/session/no-such-session/run", {"command": "true"}))))
    b.case("session: delete", b.each(lambda k, base: request(
        base, "DELETE", "/session/%s" % sess[k]["session_id"])[0]))
    b.case("session: delete again", b.each(lambda k, base: norm(*request(
        base, "DELETE", "/session/%s" % sess[k]["session_id"]))))
    # files
    b.case("files: info of a missing file", b.each(lambda k, base: norm(*request(
        base, "GET", "/files/info?path=%s/nope" % work), fields=("code", "message"))))
    path = {k: "%s/up-%s.txt" % (work, k) for k in ("sim", "real")}
    boundary = "confB0undary"

    def upload(k, base):
        meta = json.dumps({"path": path[k], "mode": 640})  # model.FileMetadata
        body = ("--%s\r\nContent-Disposition: form-data; name=\"metadata\"; "
                "filename=\"metadata\"\r\n"
                "Content-Type: application/json\r\n\r\n%s\r\n--%s\r\nContent-Disposition: "
                "form-data; name=\"file\"; filename=\"f\"\r\nContent-Type: "
                "application/octet-stream\r\n\r\nhello file\n\r\n--%s--\r\n"
                % (boundary, meta, boundary, boundary)).encode()
        return request(base, "POST", "/files/upload", raw=body, headers={
            "Content-Type": "multipart/form-data; boundary=" + boundary})[0]
    b.case("files: upload", b.each(upload))
    b.case("files: download", b.each(lambda k, base: request(
        base, "GET", "/files/download?path=" + path[k])[2].decode()))

    def info(k, base):
        st, _, p = request(base, "GET", "/files/info?path=" + path[k])
        js = json.loads(p)
        one = list(js.values())[0] if isinstance(js, dict) and js and \
            isinstance(list(js.values())[0], dict) else js
        return {"status": st, "info": {kk: one.get(kk) for kk in ("mode", "size")}
                if isinstance(one, dict) else one}
    b.case("files: info mode and size", b.each(info))
    b.case("files: download of a missing file", b.each(lambda k, base: norm(*request(
        base, "GET", "/files/download?path=%s/nope-x" % work), fields=("code", "message"))))


def run_server(b):
    def req(k, base, method, path, body=None):
        h = {"OPEN-SANDBOX-API-KEY": b.keys[k]} if b.keys[k] else {}
        return request(base, method, path, body, headers=h, timeout=120)

    def err(k, base, method, path, body=None):
        st, ct, p = req(k, base, method, path, body)
        try:
            js = json.loads(p)
        except ValueError:
            js = None
        return {"status": st, "code": js.get("code") if isinstance(js, dict) else None}
    b.case("lifecycle: unknown sandbox", b.each(lambda k, base: err(
        k, base, "GET", "/sandboxes/00000000-0000-4000-8000-000000000000")))
    b.case("lifecycle: create without image", b.each(lambda k, base: err(
        k, base, "POST", "/sandboxes", {"entrypoint": ["sleep", "1"], "timeout": 60,
                                        "resourceLimits": {"cpu": "1", "memory": "1Gi"}})["status"]))
    tag = "conf%d" % os.getpid()
    ids = {}

    def create(k, base):
        st, _, p = req(k, base, "POST", "/sandboxes", {
            "image": {"uri": "python:3.11"}, "entrypoint": ["sleep", "infinity"], "timeout": 300,
            "resourceLimits": {"cpu": "1", "memory": "1Gi"},
            "metadata": {"rock_conf": tag, "second": "x"}})
        js = json.loads(p)
        ids[k] = js.get("id")
        return {"status": st, "keys": sorted(js), "metadata": js.get("metadata"),
                "state": js.get("status", {}).get("state") in ("Pending", "Running")}
    b.case("lifecycle: create with metadata", b.each(create))

    def running(k, base):
        for _ in range(120):
            js = json.loads(req(k, base, "GET", "/sandboxes/" + ids[k])[2])
            if js["status"]["state"] == "Running":
                return {"keys": sorted(js), "status_keys": sorted(js["status"])}
            time.sleep(0.5)
        return "never Running"
    b.case("lifecycle: get (Running)", b.each(running))

    def listing(k, base, q):
        js = json.loads(req(k, base, "GET", "/sandboxes?" + q % tag)[2])
        return {"ids": [i["id"] == ids[k] for i in js.get("items", [])],
                "pagination": {kk: js.get("pagination", {}).get(kk)
                               for kk in ("page", "pageSize", "totalItems", "totalPages",
                                          "hasNextPage")}}
    b.case("lifecycle: list by metadata", b.each(
        lambda k, base: listing(k, base, "metadata=rock_conf%%3D%s&pageSize=1")))
    b.case("lifecycle: list by two metadata keys", b.each(
        lambda k, base: listing(k, base, "metadata=rock_conf%%3D%s%%26second%%3Dx")))
    b.case("lifecycle: list, no match", b.each(
        lambda k, base: listing(k, base, "metadata=rock_conf%%3D%s-none")))
    b.case("lifecycle: list page 2 of 1", b.each(
        lambda k, base: listing(k, base, "metadata=rock_conf%%3D%s&pageSize=1&page=2")))

    def endpoint(k, base):
        js = json.loads(req(k, base, "GET", "/sandboxes/%s/endpoints/44772" % ids[k])[2])
        ep = js.get("endpoint", "")
        return {"keys": sorted(js), "shape": bool(re.match(r"^[^/]+:\d+(/.*)?$", ep))}
    b.case("lifecycle: endpoint of execd", b.each(endpoint))

    def pause_resume(k, base):
        seen = []
        st = req(k, base, "POST", "/sandboxes/%s/pause" % ids[k])[0]
        for _ in range(120):
            s = json.loads(req(k, base, "GET", "/sandboxes/" + ids[k])[2])["status"]["state"]
            if not seen or seen[-1] != s:
                seen.append(s)
            if s == "Paused":
                break
            time.sleep(0.25)
        st2 = req(k, base, "POST", "/sandboxes/%s/resume" % ids[k])[0]
        for _ in range(120):
            s = json.loads(req(k, base, "GET", "/sandboxes/" + ids[k])[2])["status"]["state"]
            if seen[-1] != s:
                seen.append(s)
            if s == "Running":
                break
            time.sleep(0.25)
        # Pausing/Resuming are transient: whether a poll sees them is timing
        return {"pause": st, "resume": st2,
                "states": [s for s in seen if s not in ("Pausing", "Resuming")]}
    b.case("lifecycle: pause then resume", b.each(pause_resume))

    def renew(k, base):
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 900))
        st, _, p = req(k, base, "POST", "/sandboxes/%s/renew-expiration" % ids[k],
                       {"expiresAt": when})
        js = json.loads(p) if p else {}
        return {"status": st, "keys": sorted(js), "same": js.get("expiresAt", "")[:19] ==
                when[:19]}
    b.case("lifecycle: renew-expiration", b.each(renew))
    b.case("lifecycle: delete", b.each(lambda k, base: req(
        k, base, "DELETE", "/sandboxes/" + ids[k])[0]))

    def after(k, base):
        for _ in range(60):
            r = err(k, base, "GET", "/sandboxes/" + ids[k])
            if r["status"] == 404:
                return r
            time.sleep(0.5)
        return r
    b.case("lifecycle: get after delete", b.each(after))


def report(b):
    unexplained = [r for r in b.results if r[1] == "DIFFERENT"]
    explained = [r for r in b.results if r[1].startswith("explained")]
    print("conformance: %d cases, %d same, %d explained differences, %d unexplained"
          % (len(b.results), len(b.results) - len(unexplained) - len(explained), len(explained),
             len(unexplained)))
    if unexplained:
        sys.exit(1)


if __name__ == "__main__":
    main()
