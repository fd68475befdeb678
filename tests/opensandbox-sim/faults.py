"""One check per fault switch of opensandbox-sim's control API (/_sim/faults, /_sim/sandboxes)."""

import http.client
import json
import socket
import sys
import threading
import time

from simtest import (check, create, execd, faults, finish, lc, raw_stream, request, wait_running)


def timed(fn):
    """Run fn, return (result, seconds)."""
    t0 = time.monotonic()
    r = fn()
    return r, time.monotonic() - t0


def fails_at_transport(fn):
    """True if fn raises a connection-level error (no HTTP response)."""
    try:
        fn()
    except (http.client.HTTPException, ConnectionError, socket.timeout, OSError):
        return True
    return False


def events_of(raw):
    """JSON objects found on lines of a raw HTTP response (chunk framing lines are skipped)."""
    out = []
    for line in raw.split(b"\n"):
        line = line.strip()
        if line.startswith(b"{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def main():
    sb = create()
    sid = sb["id"]
    wait_running(sid)

    # Control API basics.
    st, _, data = request("GET", "/_sim/faults")
    check(st == 200 and json.loads(data)["execd_status"] == 0, "GET /_sim/faults shows defaults")
    st, _, _ = request("POST", "/_sim/faults", body={"no_such_switch": 1})
    check(st == 400, "unknown fault switch -> 400")
    st, _, _ = request("POST", "/_sim/faults", body={"execd_status": "500"})
    check(st == 400, "fault switch with wrong type -> 400")

    # 1. Latency on lifecycle calls only.
    faults(lifecycle_latency_ms=500)
    (st, _), t = timed(lambda: lc("GET", "/sandboxes"))
    check(st == 200 and t >= 0.5, f"lifecycle_latency_ms delays lifecycle calls ({t:.2f}s)")
    (st, _, _), t = timed(lambda: execd(sid, "GET", "/ping"))
    check(st == 200 and t < 0.4, f"lifecycle latency does not delay execd ({t:.2f}s)")

    # 2. Latency on execd calls only.
    faults(execd_latency_ms=500)
    (st, _, _), t = timed(lambda: execd(sid, "GET", "/ping"))
    check(st == 200 and t >= 0.5, f"execd_latency_ms delays execd calls ({t:.2f}s)")
    (st, _), t = timed(lambda: lc("GET", f"/sandboxes/{sid}"))
    check(st == 200 and t < 0.4, f"execd latency does not delay lifecycle ({t:.2f}s)")

    # 3. Lifecycle answers 503 for the next two calls, then recovers.
    faults(lifecycle_status=503, status_count=2)
    s1, j1 = lc("GET", f"/sandboxes/{sid}")
    s2, _ = lc("GET", "/sandboxes")
    s3, _ = lc("GET", f"/sandboxes/{sid}")
    check(s1 == 503 and j1.get("code") == "SIM::INJECTED_FAULT" and s2 == 503 and s3 == 200,
          f"lifecycle_status=503 status_count=2 -> 503, 503, 200 (got {s1}, {s2}, {s3})")
    st, _, _ = execd(sid, "GET", "/ping")
    check(st == 200, "lifecycle status fault leaves execd alone")

    # 4. execd answers 500 until cleared.
    faults(execd_status=500)
    s1, _, b1 = execd(sid, "GET", "/ping")
    s2, _, _ = execd(sid, "POST", "/command", body={"command": "true"})
    s3, _ = lc("GET", f"/sandboxes/{sid}")
    check(s1 == 500 and s2 == 500 and s3 == 200,
          f"execd_status=500 fails execd only (got {s1}, {s2}, lifecycle {s3})")
    faults()
    st, _, _ = execd(sid, "GET", "/ping")
    check(st == 200, "clearing faults restores execd")

    # 5. Drop lifecycle connections (once).
    faults(drop_lifecycle=True, drop_count=1)
    check(fails_at_transport(lambda: lc("GET", "/sandboxes")),
          "drop_lifecycle closes the connection without a response")
    st, _ = lc("GET", "/sandboxes")
    check(st == 200, "drop_count=1 only drops one request")

    # 6. Drop execd connections (until cleared); lifecycle unaffected.
    faults(drop_execd=True)
    check(fails_at_transport(lambda: execd(sid, "GET", "/ping")), "drop_execd drops execd calls")
    st, _ = lc("GET", f"/sandboxes/{sid}")
    check(st == 200, "drop_execd leaves lifecycle alone")
    faults()

    # 7. Refuse new connections for a while (closed right after accept).
    faults(refuse_ms=700)
    check(fails_at_transport(lambda: request("GET", "/_sim/health", timeout=3)),
          "refuse_ms: new connections are closed immediately")
    time.sleep(0.9)
    st, _, _ = request("GET", "/_sim/health")
    check(st == 200, "refuse_ms expires by itself")

    # 8. Cut a /command stream after N events (no terminal event, no final chunk).
    faults(cut_stream_after=2)
    raw, eof = raw_stream(f"/sandboxes/{sid}/execd/command",
                          {"command": "for i in 1 2 3 4 5; do echo $i; sleep 0.1; done"})
    evs = events_of(raw)
    types = [e.get("type") for e in evs]
    check(raw.startswith(b"HTTP/1.1 200") and eof and types == ["init", "stdout"]
          and not raw.endswith(b"0\r\n\r\n"),
          f"cut_stream_after=2 ends the stream abruptly after 2 events (got {types})")
    faults()
    raw, eof = raw_stream(f"/sandboxes/{sid}/execd/command", {"command": "echo whole"})
    types = [e.get("type") for e in events_of(raw)]
    check(types == ["init", "stdout", "execution_complete"] and raw.endswith(b"0\r\n\r\n"),
          f"without the fault the stream is complete (got {types})")

    # 9. Stall a stream after N events; it resumes when the fault is cleared.
    faults(stall_stream_after=1)
    result = {}

    def reader():
        result["raw"], result["eof"] = raw_stream(f"/sandboxes/{sid}/execd/command",
                                                  {"command": "echo a; echo b"},
                                                  read_timeout=20)

    th = threading.Thread(target=reader)
    th.start()
    time.sleep(1.5)
    check(th.is_alive(), "stall_stream_after=1 keeps the stream open without progress")
    faults()
    th.join(20)
    types = [e.get("type") for e in events_of(result.get("raw", b""))]
    check(not th.is_alive() and types == ["init", "stdout", "stdout", "execution_complete"],
          f"stalled stream resumes after clearing (got {types})")

    # Stall also holds session streams.
    st, _, data = execd(sid, "POST", "/session", body={})
    sess = json.loads(data)["session_id"]
    faults(stall_stream_after=0)
    raw, eof = raw_stream(f"/sandboxes/{sid}/execd/session/{sess}/run", {"command": "echo s"},
                          read_timeout=1.0)
    check(not eof and events_of(raw) == [], "stall_stream_after=0 stalls session runs before init")
    faults()

    # 10. Create a sandbox but drop the reply.
    _, before = lc("GET", "/sandboxes?pageSize=200")
    faults(drop_create_reply=1)
    dropped = fails_at_transport(lambda: lc("POST", "/sandboxes", body={
        "image": {"uri": "x"}, "entrypoint": ["x"], "resourceLimits": {}}))
    _, after = lc("GET", "/sandboxes?pageSize=200")
    new_ids = {s["id"] for s in after["items"]} - {s["id"] for s in before["items"]}
    check(dropped and len(new_ids) == 1,
          "drop_create_reply: no reply, but the sandbox exists (leak for the client to find)")
    st, _ = lc("POST", "/sandboxes", body={"image": {"uri": "x"}, "entrypoint": ["x"],
                                           "resourceLimits": {}})
    check(st == 202, "drop_create_reply=1 applies once")

    # 11. Make a sandbox fail.
    victim = create()["id"]
    wait_running(victim)
    st, _, _ = request("POST", f"/_sim/sandboxes/{victim}/fail")
    s1, js = lc("GET", f"/sandboxes/{victim}")
    check(st == 204 and s1 == 200 and js["status"]["state"] == "Failed",
          "fail: state becomes Failed")
    st, _, _ = execd(victim, "GET", "/ping")
    check(st == 502, "fail: execd no longer reachable (502)")

    # 12. Make a sandbox vanish.
    st, _, _ = request("POST", f"/_sim/sandboxes/{victim}/vanish")
    s1, js = lc("GET", f"/sandboxes/{victim}")
    check(st == 204 and s1 == 404 and js["code"] == "DOCKER::SANDBOX_NOT_FOUND",
          "vanish: the sandbox 404s")
    s2, _ = lc("DELETE", f"/sandboxes/{victim}")
    check(s2 == 404, "vanish: delete 404s too")
    st, _, _ = request("POST", "/_sim/sandboxes/nope/vanish")
    check(st == 404, "vanish of an unknown sandbox -> 404")

    st, _, data = request("DELETE", "/_sim/faults")
    check(st == 200, "DELETE /_sim/faults resets everything")
    finish()


if __name__ == "__main__":
    sys.exit(main())
