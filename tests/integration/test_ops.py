# SPDX-License-Identifier: Apache-2.0
"""Operations: /livez, /readyz, /metrics, request ids and the access log,
graceful drain on SIGTERM (finish in-flight work, refuse new connections,
abort at the drain deadline)."""
import http.client
import signal
import socket
import threading
import time

from harness import Admin, Redis, run, test, wait_until


@test
def health_endpoints():
    redis = Redis()
    a = Admin(redis=redis)
    st, js = a.request("GET", "/livez")
    assert st == 200 and js == {"status": "alive"}
    st, js = a.request("GET", "/readyz")
    assert st == 200 and js["status"] == "ready", js


@test
def metrics_exposition():
    a = Admin()
    sid = a.start_sandbox()
    a.ok("POST", "/execute", {"sandbox_id": sid, "command": "echo x"})
    a.api("GET", "/get_status", query={"sandbox_id": "nope"})
    # A request is counted when it completes, just after its response was
    # sent: scrape until both earlier requests are in (the observable event).
    done = ('rock_admin_requests_total{route="execute",outcome="success"} 1',
            'rock_admin_requests_total{route="get_status",outcome="failed"}',
            "rock_admin_inflight_requests 1")

    def scrape():
        st, body, headers = a.request("GET", "/metrics", raw=True)
        text = body.decode()
        return (st, text, headers) if all(d in text for d in done) else None
    st, text, headers = wait_until(scrape, 30, 0.05, "both requests counted")
    assert st == 200 and headers["Content-Type"].startswith("text/plain"), headers
    assert 'rock_admin_requests_total{route="execute",outcome="success"} 1' in text, text
    assert 'rock_admin_requests_total{route="get_status",outcome="failed"}' in text
    assert 'rock_admin_request_duration_seconds_bucket{class="command",le="+Inf"} 1' in text
    assert 'rock_admin_upstream_calls_total{op="exec",outcome="ok"} 1' in text
    assert 'rock_admin_upstream_calls_total{op="create",outcome="ok"} 1' in text
    assert 'rock_admin_sandboxes{state="running"} 1' in text
    assert "rock_admin_inflight_requests 1" in text  # the scrape itself
    assert "rock_admin_store_errors_total 0" in text
    assert sid not in text  # no per-sandbox labels


@test
def request_id_and_access_log():
    a = Admin()
    st, body, headers = a.request("GET", "/", headers={"X-Request-ID": "trace-123"}, raw=True)
    assert headers["X-Request-ID"] == "trace-123"
    st, body, headers = a.request("GET", "/", raw=True)
    assert len(headers["X-Request-ID"]) == 32
    st, body, headers = a.request("GET", "/", headers={"X-Request-ID": "bad id\x7f"}, raw=True)
    assert headers["X-Request-ID"] != "bad id\x7f"
    line = wait_until(lambda: [l for l in a.output().splitlines() if "id=trace-123" in l], 5)
    assert "route=root status=200 duration_ms=" in line[0], line


@test
def secrets_stay_out_of_logs():
    secret = "Pa55-w0rd-in-redis"
    redis = Redis(password=secret)
    a = Admin(redis=redis, config={"redis": {"password": secret}},
              env={"TESTOP_TOKEN": "tok-" + secret})
    sid = a.start_sandbox(headers={"X-Key": "key-" + secret})
    a.ok("POST", "/execute", {"sandbox_id": sid, "command": "env A", "env": {"A": "v-" + secret}})
    assert secret not in a.output()


def _inflight(a):
    """In-flight requests as /metrics reports them (the scrape itself included)."""
    st, body, _ = a.request("GET", "/metrics", raw=True)
    for line in body.decode().splitlines():
        if line.startswith("rock_admin_inflight_requests "):
            return int(line.split()[1]) - 1
    return -1


def _slow_execute(a, sid, results, n):
    try:
        st, js = a.api("POST", "/execute", {"sandbox_id": sid, "command": "wait %d" % n})
        results.append((st, js["status"], js.get("error")))
    except Exception as e:  # noqa: BLE001 - recorded for the assertion
        results.append(("exc", repr(e), None))


@test
def drain_finishes_inflight_and_refuses_new():
    a = Admin(config={"server": {"drain_timeout": 20}})
    sid = a.start_sandbox()
    keep = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
    keep.request("GET", "/livez")
    assert keep.getresponse().read()
    results = []
    threads = [threading.Thread(target=_slow_execute, args=(a, sid, results, 20))
               for _ in range(8)]
    for t in threads:
        t.start()
    # SIGTERM only once all eight are really being handled
    wait_until(lambda: _inflight(a) == 8, 20, 0.05, "8 requests in flight")
    a.proc.send_signal(signal.SIGTERM)
    # the daemon logs the signal once it stopped accepting (main.c)
    a.wait_for_line(r"received SIGTERM: draining")
    # readiness flips at once (asked on an already open connection) ...
    keep.request("GET", "/readyz")
    resp = keep.getresponse()
    assert resp.status == 503 and b"draining" in resp.read()
    # ... and new connections are refused
    s = socket.socket()
    s.settimeout(2)
    refused = False
    try:
        s.connect(("127.0.0.1", a.port))
        s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        refused = s.recv(100) == b""
    except OSError:
        refused = True
    finally:
        s.close()
    assert refused, "a new connection was served while draining"
    for t in threads:
        t.join(30)
    assert [r[:2] for r in results] == [(200, "Success")] * 8, results
    assert a.proc.wait(20) == 0
    keep.close()


@test
def drain_deadline_aborts_inflight():
    a = Admin(config={"server": {"drain_timeout": 1}})
    sid = a.start_sandbox()
    results = []
    t = threading.Thread(target=_slow_execute, args=(a, sid, results, 300))
    t.start()
    wait_until(lambda: _inflight(a) == 1, 20, 0.05, "the request in flight")
    t0 = time.time()
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(15) == 0
    assert time.time() - t0 < 6, "exit must follow the drain deadline"
    t.join(10)
    # the aborted request either got a Failed answer or a closed connection
    assert results and results[0][1] != "Success", results
    assert "aborting 1 in-flight request" in a.output()


if __name__ == "__main__":
    run()
