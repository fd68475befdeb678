# SPDX-License-Identifier: Apache-2.0
"""Hostile and careless clients, tried from the outside against a
real rock-admin + redis-server + the OpenSandbox simulator on loopback:

- crafted ids (`&`, `=`, `%26`, NUL, over-long) get a validation error naming
  the field on every route and never match, stop or delete another sandbox;
- slowloris (headers or body trickled from several addresses) with a small
  max_connections: /livez and a normal client still get answers, the slow
  connections are closed;
- many concurrent large JSON bodies stay under server.max_buffered_bytes
  (busy replies instead of growth; VmRSS sampled);
- the /upload spool is bounded and a refused sandbox is refused before any
  byte is spooled;
- proxy paths: NUL and dot-segment spellings refused;
- numbers out of range rejected with a 4000 naming the field and the range.

The 64 MiB early-answer proxy case is in test_proxy.py.
"""
import json
import os
import socket
import threading
import time
import urllib.parse

import harness
from harness import PREFIX, Admin, Redis, Sim, run, test, wait_until

API_KEY = "sim-key-adv"
ID_RULE = "String should match pattern '^[A-Za-z0-9._-]{1,128}$'"


def os_admin(redis=None, server=None, sim=None):
    sim = sim or Sim(api_key=API_KEY)
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
                           "use_server_proxy": False}}
    if server:
        cfg["server"] = server
    admin = Admin(operator="opensandbox", config=cfg, redis=redis)
    return admin, sim


def sim_sandboxes(sim):
    st, js = sim.request("GET", "/v1/sandboxes?pageSize=200")
    assert st == 200, (st, js)
    return {it["id"]: it for it in js["items"]}


def assert_invalid(js, field, text=ID_RULE):
    """A validation failure whose error names the field (an id with an encoded
    NUL byte in a query string is refused as such)."""
    assert js["status"] == "Failed", js
    assert field in js["error"], (field, js)
    assert text in js["error"] or "NUL" in js["error"], (field, js)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def uses_asan(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


def raw_exchange(port, data, source="127.0.0.1", timeout=60, half_close=True):
    """Send bytes on a fresh connection; return the whole answer (the request
    should say Connection: close). half_close=False keeps our side open, as a
    client does that waits for a command (a half-closed client counts as gone)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                 source_address=(source, 0))
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    finally:
        s.close()


def body_of(answer):
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else None


# ---- identifiers ------------------------------------------------------------

@test
def crafted_ids_neither_match_nor_kill_another_sandbox():
    redis = Redis()
    admin, sim = os_admin(redis)
    victim = admin.start_sandbox()
    other = admin.start_sandbox()
    before = sim_sandboxes(sim)
    crafted = ["x&rock_sandbox_id=" + victim, victim + "&", "%26rock_sandbox_id%3D" + victim,
               "rock_sandbox_id=" + victim, victim + "%00", victim + "\u0000", "a b", "a/b",
               "../" + victim, "é" + victim, "x" * 129]
    for bad in crafted:
        st, js = admin.api("POST", "/start_async",
                           {"image": "python:3.11", "memory": "2g", "cpus": 1, "sandbox_id": bad})
        assert st == 200, (st, js)
        assert_invalid(js, "body.sandbox_id")
        for route, body in (("/stop", {"sandbox_id": bad}), ("/delete", {"sandbox_id": bad}),
                            ("/execute", {"sandbox_id": bad, "command": "true"}),
                            ("/read_file", {"sandbox_id": bad, "path": "/etc/hostname"}),
                            ("/create_session", {"sandbox_id": bad, "session": "s"})):
            st, js = admin.api("POST", route, body)
            assert st == 200, (route, st, js)
            assert_invalid(js, "body.sandbox_id")
        st, js = admin.api("GET", "/get_status", query={"sandbox_id": bad})
        assert_invalid(js, "query.sandbox_id")
        st, js = admin.api("POST", "/sandboxes/batch", {"sandbox_ids": [bad]})
        assert js["status"] == "Failed" and "sandbox_ids.0" in js["error"], js
        # path parameter (proxy): the dispatch gate applies the same rule (ids
        # holding '/' or a NUL no longer match the route at all: 404)
        quoted = urllib.parse.quote(bad, safe="")
        st, js = admin.request("GET", "%s/sandboxes/%s/proxy/x" % (PREFIX, quoted),
                               headers={"X-ROCK-Target-Port": "8080"})
        if st == 404:
            assert js == {"detail": "Not Found"}, (bad, st, js)
        else:
            assert js["status"] == "Failed" and "sandbox_id" in js["error"], (bad, st, js)
    # nothing else happened to the real sandboxes
    after = sim_sandboxes(sim)
    assert set(after) == set(before), (before.keys(), after.keys())
    for sid in (victim, other):
        res = admin.ok("GET", "/get_status", query={"sandbox_id": sid})
        assert res["is_alive"], res
    # The simulator parses metadata filters like OpenSandbox (parse_qsl): a value
    # escaped on its own, as the plugin now sends it, matches nothing else.
    filt = urllib.parse.quote("rock_sandbox_id=" + urllib.parse.quote("x&rock_sandbox_id=" +
                                                                      victim, safe=""), safe="")
    st, js = sim.request("GET", "/v1/sandboxes?metadata=%s" % filt)
    assert st == 200 and js["items"] == [], js
    filt = urllib.parse.quote("rock_sandbox_id=" + victim, safe="")
    st, js = sim.request("GET", "/v1/sandboxes?metadata=%s" % filt)
    assert st == 200 and len(js["items"]) == 1, js


@test
def over_long_ids_and_session_names_are_validation_errors_not_store_errors():
    redis = Redis()
    admin, sim = os_admin(redis)
    sid = admin.start_sandbox()
    errors_before = metric(admin, "rock_admin_store_errors_total")
    for n in (129, 300, 100000):
        long_id = "a" * n
        st, js = admin.api("GET", "/get_status", query={"sandbox_id": long_id})
        if n > 30000:
            # over server.max_header_bytes: refused by the HTTP layer
            assert st == 414, (st, js)
        else:
            assert_invalid(js, "query.sandbox_id")
        st, js = admin.api("POST", "/execute", {"sandbox_id": long_id, "command": "true"})
        assert_invalid(js, "body.sandbox_id")
        st, js = admin.api("POST", "/create_session", {"sandbox_id": sid, "session": "s" * n})
        assert_invalid(js, "body.session", "1 to 128 bytes")
        st, js = admin.api("POST", "/run_in_session",
                           {"sandbox_id": sid, "session": "s" * n, "command": "true"})
        assert_invalid(js, "body.session", "1 to 128 bytes")
        if n < 30000:
            st, js = admin.api("GET", "/is_alive", query={"sandbox_id": long_id})
            assert js["status"] == "Success" and js["result"]["is_alive"] is False, js
    # 128 bytes is still a valid (unknown) id: a plain "not found"
    st, js = admin.api("GET", "/get_status", query={"sandbox_id": "b" * 128})
    assert js["status"] == "Failed" and "not found" in js["error"], js
    assert metric(admin, "rock_admin_store_errors_total") == errors_before
    # session names may hold any printable text (ROCK accepts it)
    admin.ok("POST", "/create_session", {"sandbox_id": sid, "session": "w\u00e9ird: name/1"})


def metric(admin, name):
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("metric %s missing" % name)


# ---- numbers -------------------------------------------------------------------

@test
def out_of_range_numbers_are_refused_before_arithmetic():
    redis = Redis()
    admin, sim = os_admin(redis)
    base = {"image": "python:3.11", "memory": "2g", "cpus": 1}
    for field, value in (("auto_clear_time_minutes", 10 ** 18),
                         ("auto_clear_time_minutes", 2 ** 63 - 1),
                         ("startup_timeout", 1e308),
                         ("auto_delete_seconds", 10 ** 18),
                         ("auto_archive_seconds", 10 ** 18)):
        body = dict(base, **{field: value})
        st, js = admin.api("POST", "/start_async", body)
        assert st == 200, (st, js)
        assert_invalid(js, "body." + field, "Input should be")
    # sizes and cpus far out of range: the business checks refuse them (no inf/NaN math)
    for over in ({"memory": "1e308t"}, {"disk": "1e308t"}, {"cpus": 1e308},
                 {"limit_cpus": 1e308}):
        st, js = admin.api("POST", "/start_async", dict(base, **over))
        assert st == 200 and js["status"] == "Failed", (over, js)
        assert "exceed the maximum" in js["error"], (over, js)
    # page/page_size on the list route: huge pages are an empty page, not a wrap
    sid = admin.start_sandbox()
    for page in (2 ** 62, 10 ** 18, 2 ** 63 - 1):
        st, js = admin.api("GET", "/sandboxes", query={"page": page, "page_size": 100})
        assert st == 200 and js["status"] == "Success", js
        assert js["result"]["items"] == [], js
    # the sandbox was not swept early by a wrapped idle deadline
    res = admin.ok("GET", "/get_status", query={"sandbox_id": sid})
    assert res["is_alive"], res
    # session/run timeouts: huge floats are clamped, not undefined behaviour
    st, js = admin.api("POST", "/execute", {"sandbox_id": sid, "command": "echo ok",
                                            "timeout": 1e308})
    assert st == 200 and js["status"] in ("Success", "Failed"), js


# ---- time: slowloris ---------------------------------------------------------------

def slow_sender(port, source, payload, stop, closed_at, idx, interval=1.0):
    """Trickle payload one byte per interval; record when the server closed."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    except OSError:
        closed_at[idx] = time.time()
        return
    s.settimeout(interval)
    try:
        for b in payload:
            if stop.is_set():
                return
            try:
                s.sendall(bytes([b]))
            except OSError:
                closed_at[idx] = time.time()
                return
            try:
                if s.recv(4096) == b"":
                    closed_at[idx] = time.time()
                    return
            except socket.timeout:
                pass
            except OSError:
                closed_at[idx] = time.time()
                return
    finally:
        s.close()


@test
def slowloris_does_not_starve_probes_or_clients():
    admin = Admin(config={"server": {"max_connections": 12, "reserved_connections": 3,
                                     "header_timeout": 3, "connection_timeout": 60}})
    head = ("GET %s/get_status?sandbox_id=x HTTP/1.1\r\nHost: a\r\n" % PREFIX).encode() + \
        b"X-Pad: " + b"a" * 4000 + b"\r\n\r\n"
    body_head = ("POST %s/execute HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                 "Content-Length: 1000000\r\n\r\n" % PREFIX).encode() + b"{" + b" " * 4000
    stop = threading.Event()
    n = 40
    closed_at = [None] * n
    threads = []
    t0 = time.time()
    for i in range(n):
        source = "127.0.0.%d" % (2 + i % 10)
        payload = head if i % 2 == 0 else body_head
        # the body variant sends its headers at once, then trickles the body
        th = threading.Thread(target=slow_sender if i % 2 == 0 else slow_body_sender,
                              args=(admin.port, source, payload, stop, closed_at, i), daemon=True)
        th.start()
        threads.append(th)
    try:
        # while the attack runs, probes and a normal client get answers within
        # a generous bound (a refused or reset connection is retried)
        for _ in range(3):
            assert eventually(lambda: admin.request("GET", "/livez", raw=True)[0]) == 200
            st, js = eventually(lambda: admin.api("GET", "/get_status",
                                                  query={"sandbox_id": "nope"}))
            assert st == 200 and js["status"] == "Failed", js
            assert eventually(lambda: admin.request("GET", "/metrics", raw=True)[0]) == 200
        # every slow connection is closed by the server (header_timeout 3 s,
        # min_body_rate 1024 B/s after a 3 s grace), long before the idle timeout
        wait_until(lambda: all(c is not None for c in closed_at), 45, 0.2,
                   "slow connections closed")
        assert max(closed_at) - t0 < 45
    finally:
        stop.set()
        for th in threads:
            th.join(10)


def eventually(call, bound=30.0):
    """call() until it does not fail with a connection error, within bound seconds."""
    deadline = time.time() + bound
    while True:
        try:
            return call()
        except (ConnectionError, OSError):
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def slow_body_sender(port, source, payload, stop, closed_at, idx):
    """Headers at once, then the body one byte per second."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    except OSError:
        closed_at[idx] = time.time()
        return
    s.settimeout(1.0)
    try:
        cut = payload.index(b"\r\n\r\n") + 4
        s.sendall(payload[:cut])
        for b in payload[cut:]:
            if stop.is_set():
                return
            try:
                s.sendall(bytes([b]))
                if s.recv(4096) == b"":
                    closed_at[idx] = time.time()
                    return
            except socket.timeout:
                pass
            except OSError:
                closed_at[idx] = time.time()
                return
    finally:
        s.close()


@test
def data_routes_leave_reserved_slots_for_health():
    """Saturate the data routes with long commands: /livez still answers and
    the next data request gets a 503 busy envelope, not a refused connection."""
    admin, sim = os_admin(Redis(), server={"max_connections": 6, "reserved_connections": 2,
                                           "per_ip_connections": 0})
    sid = admin.start_sandbox()
    results = []

    def long_cmd():
        results.append(admin.api("POST", "/execute", {"sandbox_id": sid, "command": "sleep 6",
                                                      "timeout": 30}))
    threads = [threading.Thread(target=long_cmd, daemon=True) for _ in range(4)]
    for th in threads:
        th.start()
    # in flight: the four commands and the /metrics request itself
    wait_until(lambda: metric(admin, "rock_admin_inflight_requests") >= 5, 20, 0.1,
               "four commands in flight")
    st, js = eventually(lambda: admin.api("GET", "/get_status", query={"sandbox_id": sid}))
    assert st == 503 and js["status"] == "Failed", (st, js)
    assert js["error"].startswith("admin is busy"), js
    assert js["result"]["code"] == 5000, js
    assert eventually(lambda: admin.request("GET", "/livez", raw=True)[0]) == 200
    assert eventually(lambda: admin.request("GET", "/readyz", raw=True)[0]) == 200
    for th in threads:
        th.join(60)
    assert all(js["status"] == "Success" for _, js in results), results
    admin.ok("GET", "/get_status", query={"sandbox_id": sid})


# ---- memory ----------------------------------------------------------------------

@test
def concurrent_large_bodies_stay_under_the_memory_budget():
    budget = 40 * 1024 * 1024
    admin = Admin(config={"server": {"max_buffered_bytes": budget,
                                     "max_body_bytes": 16 * 1024 * 1024,
                                     "per_ip_connections": 0}})
    pid = admin.proc.pid
    base = rss_kib(pid)
    content = "x" * (6 * 1024 * 1024)
    body = json.dumps({"sandbox_id": "nope", "path": "/tmp/big", "content": content}).encode()
    req = ("POST %s/write_file HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
           "Content-Length: %d\r\nConnection: close\r\n\r\n" % (PREFIX, len(body))).encode() + body
    answers = []
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.01)

    def client():
        answers.append(body_of(raw_exchange(admin.port, req)))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    clients = [threading.Thread(target=client, daemon=True) for _ in range(24)]
    for th in clients:
        th.start()
    for th in clients:
        th.join(120)
    done.set()
    sampler.join(5)
    assert len(answers) == 24, answers
    busy = [js for st, js in answers if st == 503]
    normal = [js for st, js in answers if st == 200]
    assert len(busy) + len(normal) == 24, answers
    assert all(js["error"].startswith("admin is busy") and
               "server.max_buffered_bytes" in js["error"] for js in busy), busy
    assert all("not found" in js["error"] for js in normal), normal
    assert busy, "24 x 6 MiB bodies fit in a 40 MiB budget?"
    grown = (peak[0] - base) * 1024
    print("# RSS base %d KiB, peak %d KiB, busy %d/24" % (base, peak[0], len(busy)))
    if not uses_asan(pid):
        # the budget plus the stacks and allocator slack of 24 connection threads
        assert grown < budget + 48 * 1024 * 1024, (base, peak[0])
    # the admin still works
    st, js = admin.api("GET", "/get_status", query={"sandbox_id": "nope"})
    assert st == 200 and "not found" in js["error"], js


@test
def chunked_bodies_and_large_responses_are_charged_too():
    """A body without Content-Length is charged as it arrives; a read_file answer
    larger than the budget is refused instead of being held for the client."""
    admin, sim = os_admin(Redis(), server={"max_buffered_bytes": 4 * 1024 * 1024,
                                           "max_body_bytes": 8 * 1024 * 1024})
    sid = admin.start_sandbox()
    payload = json.dumps({"sandbox_id": "nope", "path": "/tmp/x",
                          "content": "y" * (3 * 1024 * 1024)}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(payload[i:i + 65536]), payload[i:i + 65536])
                      for i in range(0, len(payload), 65536)) + b"0\r\n\r\n"
    req = ("POST %s/write_file HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" % PREFIX).encode() + chunks
    st, js = body_of(raw_exchange(admin.port, req))
    assert st == 503 and "server.max_buffered_bytes" in js["error"], (st, js)
    # a small chunked body still works
    small = json.dumps({"sandbox_id": sid, "path": "/tmp/small", "content": "hi"}).encode()
    req = ("POST %s/write_file HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n" % (PREFIX, len(small))
           ).encode() + small + b"\r\n0\r\n\r\n"
    st, js = body_of(raw_exchange(admin.port, req, half_close=False))
    assert st == 200 and js["status"] == "Success", (st, js)
    # a 6 MiB file read back: its JSON answer does not fit the 4 MiB budget
    admin.ok("POST", "/execute", {"sandbox_id": sid, "command":
                                  "head -c 6291456 /dev/zero | tr '\\0' a > /tmp/big"})
    st, js = admin.api("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/big"})
    assert st == 503 and js["error"].startswith("admin is busy"), (st, str(js)[:300])
    # a small one is served
    res = admin.ok("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/small"})
    assert res["content"] == "hi", res


@test
def concurrent_read_files_are_held_within_the_budget():
    """File bytes collected for read_file count against the budget while they are
    held, so many clients reading large files at once get 503 instead of growing
    the process (each may read up to server.max_read_bytes)."""
    budget = 8 * 1024 * 1024
    admin, sim = os_admin(Redis(), server={"max_buffered_bytes": budget,
                                           "per_ip_connections": 0})
    sid = admin.start_sandbox()
    admin.ok("POST", "/execute", {"sandbox_id": sid, "command":
                                  "head -c 3145728 /dev/zero | tr '\\0' b > /tmp/mid"})
    pid = admin.proc.pid
    base = rss_kib(pid)
    answers = []

    def client():
        answers.append(admin.api("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/mid"}))
    clients = [threading.Thread(target=client, daemon=True) for _ in range(16)]
    for th in clients:
        th.start()
    for th in clients:
        th.join(120)
    assert len(answers) == 16, answers
    served = [js for st, js in answers if st == 200 and js["status"] == "Success"]
    busy = [js for st, js in answers if st == 503]
    assert len(served) + len(busy) == 16, [(st, str(js)[:200]) for st, js in answers]
    assert all(len(js["result"]["content"]) == 3145728 for js in served)
    assert all(js["error"].startswith("admin is busy") and
               "server.max_buffered_bytes" in js["error"] for js in busy), busy
    grown = (rss_kib(pid) - base) * 1024
    print("# read_file x16 of 3 MiB, budget 8 MiB: %d served, %d busy, RSS +%d KiB"
          % (len(served), len(busy), grown // 1024))
    if not uses_asan(pid):
        # 16 x 3 MiB (x2 for the JSON answer) would be ~96 MiB without the budget
        assert grown < budget * 3 + 32 * 1024 * 1024, grown
    # nothing leaked from the budget: a read that fits is served afterwards
    res = admin.ok("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/mid"})
    assert len(res["content"]) == 3145728


# ---- disk ------------------------------------------------------------------------

def multipart(parts):
    boundary = "----adv%d" % os.getpid()
    out = b""
    for name, value in parts:
        if name == "file":
            out += ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.bin\"\r\n"
                    "Content-Type: application/octet-stream\r\n\r\n" % boundary).encode()
        else:
            out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n"
                    % (boundary, name)).encode()
        out += value + b"\r\n"
    out += ("--%s--\r\n" % boundary).encode()
    return out, "multipart/form-data; boundary=%s" % boundary


@test
def upload_spool_is_bounded_and_gated():
    admin, sim = os_admin(Redis(), server={"max_spool_bytes": 1024 * 1024,
                                           "max_upload_bytes": 4 * 1024 * 1024})
    sid = admin.start_sandbox()

    def upload(parts):
        body, ctype = multipart(parts)
        return admin.request("POST", PREFIX + "/upload", body, {"Content-Type": ctype})
    # file first, 2 MiB: more than the spool budget -> 503 busy naming the key
    st, js = upload([("file", b"a" * (2 * 1024 * 1024)), ("target_path", b"/tmp/a"),
                     ("sandbox_id", sid.encode())])
    assert st == 503 and "server.max_spool_bytes" in js["error"], (st, js)
    # file first, small: spooled, then written
    st, js = upload([("file", b"b" * 1000), ("target_path", b"/tmp/b"),
                     ("sandbox_id", sid.encode())])
    assert js["status"] == "Success", js
    # sandbox_id first (unknown), file 3 MiB before target_path: refused by the
    # gate before spooling (were it spooled, the 1 MiB budget would say busy)
    st, js = upload([("sandbox_id", b"nope"), ("file", b"c" * (3 * 1024 * 1024)),
                     ("target_path", b"/tmp/c")])
    assert st == 200 and js["status"] == "Failed" and "not found" in js["error"], (st, js)
    # piped (fields first) but over max_upload_bytes
    st, js = upload([("sandbox_id", sid.encode()), ("target_path", b"/tmp/d"),
                     ("file", b"d" * (5 * 1024 * 1024))])
    assert js["status"] == "Failed" and "server.max_upload_bytes" in js["error"], js
    # crafted id in the form
    st, js = upload([("sandbox_id", b"a&b=c"), ("target_path", b"/tmp/e"), ("file", b"e")])
    assert_invalid(js, "body.sandbox_id")
    # the spool budget was given back: a file-first upload works again
    st, js = upload([("file", b"f" * 900000), ("target_path", b"/tmp/f"),
                     ("sandbox_id", sid.encode())])
    assert js["status"] == "Success", js


# ---- proxy paths ----------------------------------------------------------------------

@test
def proxy_refuses_nul_and_dot_segment_spellings():
    admin = Admin()
    sid = admin.start_sandbox()
    for sub in ("/%00/../..", "/a%00b", "/%2E%2e/x", "/.%2e/x", "/%25252e%25252e/x",
                "/%c0%ae%c0%ae/x", "/%u002e%u002e/x", "/..;x=1/admin", "/a%2f..%2fb",
                "/a/%252e%252e%255cadmin"):
        req = ("GET %s/sandboxes/%s/proxy%s HTTP/1.1\r\nHost: a\r\nX-ROCK-Target-Port: 8080\r\n"
               "Connection: close\r\n\r\n" % (PREFIX, sid, sub)).encode()
        st, js = body_of(raw_exchange(admin.port, req))
        assert st == 200 and js["status"] == "Failed", (sub, st, js)
        assert js["error"] == "invalid proxy path: relative path segments are not allowed", js
        assert js["result"]["code"] == 4000, js


if __name__ == "__main__":
    run()
