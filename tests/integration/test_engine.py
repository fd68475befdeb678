# SPDX-License-Identifier: Apache-2.0
"""The event-driven engine: a bounded worker pool with a bounded queue (a full
queue answers 5000 "busy" and changes nothing), routes that answer from memory
stay answered while every worker is busy, idle keep-alive connections and
queued requests and held proxy relays cost no thread, and streamed uploads
work with a single worker (the upload's consumer and its handler share the
pool)."""
import json
import resource
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import harness
from harness import PREFIX, Admin, run, test, wait_until

BUSY = ("admin is busy: all workers are busy and their queue is full "
        "(server.worker_queue); retry later")


def proc_status(pid, key):
    """One number from /proc/<pid>/status (Threads, VmRSS in KiB)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def threads_of(pid):
    return proc_status(pid, "Threads")


def metric(a, name):
    st, body, _ = a.request("GET", "/metrics", raw=True)
    assert st == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("metric %s missing" % name)


def execute_in_thread(a, sid, command, out):
    def go():
        try:
            out.append(a.api("POST", "/execute", {"sandbox_id": sid, "command": command}))
        except Exception as e:  # noqa: BLE001 - recorded for the assertion
            out.append(("exc", repr(e)))
    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th


@test
def full_queue_answers_busy_and_changes_nothing():
    # testop_v11 is built for ABI 1.1: its commands are blocking calls that
    # hold a worker (the 1.2 testop runs them on its own loop, holding none).
    a = Admin(operator="testop_v11", config={"server": {"workers": 1, "worker_queue": 1}})
    sid = a.start_sandbox()
    first, second = [], []
    # one command holds the only worker, a second one waits in the queue
    t1 = execute_in_thread(a, sid, "wait 30", first)
    wait_until(lambda: metric(a, "rock_admin_workers_busy") == 1, 10, 0.05, "worker busy")
    t2 = execute_in_thread(a, sid, "wait 1", second)
    wait_until(lambda: metric(a, "rock_admin_worker_queue_depth") == 1, 10, 0.05, "one queued")
    # the queue is full: answered at once, busy, naming the key
    t0 = time.time()
    st, js = a.api("POST", "/write_file",
                   {"sandbox_id": sid, "path": "/tmp/busy.txt", "content": "nope"})
    assert time.time() - t0 < 2, "the busy answer waited"
    assert st == 503, (st, js)
    assert js["status"] == "Failed" and js["error"] == BUSY, js
    assert js["result"]["code"] == 5000, js
    # routes that answer from memory still answer on the event loop
    st, js = a.request("GET", "/")
    assert st == 200 and js["message"] == "hello, ROCK!", js
    st, js = a.request("GET", "/livez")
    assert st == 200 and js == {"status": "alive"}, js
    assert metric(a, "rock_admin_worker_queue_full_total") >= 1
    t1.join(30)
    t2.join(30)
    for res in (first, second):
        assert len(res) == 1 and res[0][0] == 200 and res[0][1]["status"] == "Success", res
    # the refused write did nothing
    st, js = a.api("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/busy.txt"})
    assert js["status"] == "Failed", js
    # and the same write goes through now that the pool is free
    a.ok("POST", "/write_file", {"sandbox_id": sid, "path": "/tmp/busy.txt", "content": "yes"})
    res = a.ok("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/busy.txt"})
    assert res["content"] == "yes", res


def raise_fd_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def read_response(s):
    """One whole HTTP/1.1 response (Content-Length) from socket s: (status, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("connection closed: %r" % data[:200])
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("connection closed mid-body")
        body += chunk
    return int(head.split()[1]), body[:length]


@test
def idle_connections_and_queued_requests_cost_no_thread():
    limit = raise_fd_limit(4096)
    assert limit >= 1700, "the test needs 1,700 descriptors (have %d)" % limit
    a = Admin(operator="testop_v11",  # blocking commands: they queue for the pool
              config={"server": {"workers": 32, "max_connections": 3000,
                                 "per_ip_connections": 0}})
    pid = a.proc.pid
    sid = a.start_sandbox()
    base = threads_of(pid)
    rss_base = proc_status(pid, "VmRSS")
    # 1,000 keep-alive connections, each served once, then left idle
    idle = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", a.port), timeout=30)
            s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            idle.append(s)
        for s in idle:
            st, body = read_response(s)
            assert st == 200 and json.loads(body) == {"status": "alive"}
        with_idle = threads_of(pid)
        per_conn = (proc_status(pid, "VmRSS") - rss_base) / 1000
        print("# threads: %d at rest, %d with 1,000 idle keep-alive connections, +%.1f KiB each"
              % (base, with_idle, per_conn))
        assert with_idle < 100, with_idle
        # an idle keep-alive connection keeps its libmicrohttpd pool (server.max_header_bytes,
        # 16 KiB by default, zeroed after every request) and about 1 KiB besides: nothing more
        if harness.rss_means_something(pid):
            assert per_conn < 24, "an idle keep-alive connection costs %.1f KiB" % per_conn
        # 500 slow commands at once: 32 run, the rest wait in the queue
        req = json.dumps({"sandbox_id": sid, "command": "wait 5"}).encode()
        head = ("POST %s/execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % (PREFIX, len(req))).encode()
        slow = []
        for _ in range(500):
            s = socket.create_connection(("127.0.0.1", a.port), timeout=120)
            s.sendall(head + req)
            slow.append(s)
        wait_until(lambda: metric(a, "rock_admin_worker_queue_depth") > 100, 20, 0.05,
                   "requests queued")
        peak = threads_of(pid)
        print("# threads: %d with 500 commands in flight (32 workers)" % peak)
        assert peak < 100, peak
        # every one of them is answered, in the end
        for s in slow:
            st, body = read_response(s)
            js = json.loads(body)
            assert st == 200 and js["status"] == "Success", js
            s.close()
        # the idle connections are still usable
        for s in idle[:10]:
            s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(s)[0] == 200
    finally:
        for s in idle:
            s.close()


def multipart(parts, boundary="engineboundary"):
    out = b""
    for name, value in parts:
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"" % (boundary, name)).encode()
        if name == "file":
            out += b"; filename=\"f.bin\"\r\nContent-Type: application/octet-stream"
        out += b"\r\n\r\n" + value + b"\r\n"
    out += ("--%s--\r\n" % boundary).encode()
    return out, "multipart/form-data; boundary=%s" % boundary


@test
def streamed_upload_works_with_one_worker():
    """The upload's consumer runs on the pool while the body streams in (with
    backpressure), and its handler needs the pool too: one worker is enough."""
    a = Admin(config={"server": {"workers": 1, "worker_queue": 4}})
    sid = a.start_sandbox()
    data = (b"0123456789abcdef" * 64) * (8 * 1024)  # 8 MiB: several times the pipe
    body, ctype = multipart([("sandbox_id", sid.encode()), ("target_path", b"/tmp/up.bin"),
                             ("file", data)])
    st, js = a.api("POST", "/upload", body, headers={"Content-Type": ctype})
    assert st == 200 and js["status"] == "Success", js
    assert js["result"]["file_name"] == "up.bin", js
    # file first (spooled), then the fields: also one worker
    body, ctype = multipart([("file", data[:100000]), ("target_path", b"/tmp/up2.bin"),
                             ("sandbox_id", sid.encode())])
    st, js = a.api("POST", "/upload", body, headers={"Content-Type": ctype})
    assert st == 200 and js["status"] == "Success", js
    res = a.ok("POST", "/read_file", {"sandbox_id": sid, "path": "/tmp/up2.bin"})
    assert len(res["content"]) == 100000, len(res["content"])


class SlowApp(BaseHTTPRequestHandler):
    """An application that answers after a while (held requests pile up)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        time.sleep(2)
        body = b"slow ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class BigBacklogServer(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


@test
def held_proxy_requests_cost_no_thread():
    """300 relayed requests waiting on a slow application: one relay transfer
    loop carries them all, no thread per relay."""
    limit = raise_fd_limit(4096)
    assert limit >= 1000, limit
    srv = BigBacklogServer(("127.0.0.1", 0), SlowApp)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    harness._cleanups.append(srv.shutdown)
    port = srv.server_address[1]
    a = Admin(config={"testop": {"proxy_base": "http://127.0.0.1:{port}"},
                      "server": {"per_ip_connections": 0}})
    sid = a.start_sandbox()
    head = ("GET %s/sandboxes/%s/proxy/slow HTTP/1.1\r\nHost: x\r\n"
            "X-ROCK-Target-Port: %d\r\n\r\n" % (PREFIX, sid, port)).encode()
    socks = []
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", a.port), timeout=60)
            s.sendall(head)
            socks.append(s)
        wait_until(lambda: metric(a, "rock_admin_inflight_requests") >= 250, 20, 0.05,
                   "relays in flight")
        held = threads_of(a.proc.pid)
        print("# threads: %d with 300 relayed requests in flight" % held)
        assert held < 100, held
        for s in socks:
            st, body = read_response(s)
            assert st == 200 and body == b"slow ok", (st, body)
    finally:
        for s in socks:
            s.close()


@test
def request_heads_are_bounded_by_max_header_bytes():
    """The default pool (16 KiB) takes a head of 16,000 bytes; a larger head is refused with
    431 and a longer request line with 414; the admin serves on."""
    a = Admin(operator="testop")

    def exchange(request):
        """The status of the answer to request, on a fresh connection."""
        with socket.create_connection(("127.0.0.1", a.port), timeout=30) as s:
            s.sendall(request)
            return read_response(s)[0]

    def head(size):
        """A request head of exactly size bytes."""
        start, end = b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Pad: ", b"\r\n\r\n"
        return exchange(start + b"a" * (size - len(start) - len(end)) + end)

    assert head(16000) == 200
    assert head(17000) == 431
    assert exchange(b"GET /livez?x=" + b"a" * 17000 + b" HTTP/1.1\r\nHost: x\r\n\r\n") == 414
    assert a.request("GET", "/livez")[0] == 200


@test
def deprecated_thread_stack_is_accepted_with_a_warning():
    a = Admin(config={"server": {"thread_stack_kib": 512}})
    st, _ = a.request("GET", "/livez")
    assert st == 200
    assert "server.thread_stack_kib is deprecated and ignored" in a.output()


if __name__ == "__main__":
    run()
