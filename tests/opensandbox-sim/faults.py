"""One check per fault switch of opensandbox-sim's control API (/_sim/faults, /_sim/sandboxes)."""

import http.client
import json
import os
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


def state_of(sid):
    """Current status.state of a sandbox."""
    st, js = lc("GET", f"/sandboxes/{sid}")
    return js["status"]["state"] if st == 200 else None


def wait_for(pred, timeout=10.0):
    """Poll pred() until it is true; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.05)


def snap_state(snap_id):
    """status.state of a snapshot (None if it does not answer 200)."""
    st, js = lc("GET", f"/snapshots/{snap_id}")
    return js["status"]["state"] if st == 200 else None


def pause_and_snapshot_switches():
    """One check per pause/resume and snapshot fault switch."""
    sid = create()["id"]
    wait_running(sid)

    # 13. A deployment without pause (Kubernetes runtime): 501 for pause and resume.
    faults(pause_unsupported=True)
    s1, j1 = lc("POST", f"/sandboxes/{sid}/pause")
    s2, j2 = lc("POST", f"/sandboxes/{sid}/resume")
    check(s1 == 501 and j1["code"] == "SANDBOX::API_NOT_SUPPORTED" and "not supported" in
          j1["message"] and s2 == 501 and state_of(sid) == "Running",
          f"pause_unsupported: 501 SANDBOX::API_NOT_SUPPORTED, still Running ({s1} {j1}, {s2})")

    # 14. Pause failing in the runtime.
    faults(pause_fail=True)
    st, js = lc("POST", f"/sandboxes/{sid}/pause")
    check(st == 500 and js["code"] == "DOCKER::SANDBOX_PAUSE_FAILED" and
          state_of(sid) == "Running", f"pause_fail: 500 DOCKER::SANDBOX_PAUSE_FAILED ({st} {js})")
    st, _, _ = execd(sid, "GET", "/ping")
    check(st == 200, "pause_fail: execd still answers")

    # 15. Slow pause / resume show Pausing / Resuming.
    faults(pause_delay_ms=800, resume_delay_ms=800)
    st, _ = lc("POST", f"/sandboxes/{sid}/pause")
    check(st == 202 and state_of(sid) == "Pausing", "pause_delay_ms: Pausing first")
    st, js = lc("POST", f"/sandboxes/{sid}/resume")
    check(st == 409 and js["code"] == "DOCKER::SANDBOX_NOT_PAUSED",
          f"resume while Pausing -> 409 ({st} {js})")
    check(wait_for(lambda: state_of(sid) == "Paused"), "pause_delay_ms: then Paused")
    st, _ = lc("POST", f"/sandboxes/{sid}/resume")
    check(st == 202 and state_of(sid) == "Resuming", "resume_delay_ms: Resuming first")
    check(wait_for(lambda: state_of(sid) == "Running"), "resume_delay_ms: then Running")

    # 16. Resume failing in the runtime: stays Paused.
    faults(resume_fail=True)
    lc("POST", f"/sandboxes/{sid}/pause")
    st, js = lc("POST", f"/sandboxes/{sid}/resume")
    check(st == 500 and js["code"] == "DOCKER::SANDBOX_RESUME_FAILED" and
          state_of(sid) == "Paused", f"resume_fail: 500, still Paused ({st} {js})")

    # 17. execd of a paused sandbox: hangs (frozen), or 502 at once with paused_execd_refuse.
    faults(paused_execd_refuse=True)
    st, _, data = execd(sid, "GET", "/ping")
    check(st == 502 and json.loads(data)["code"] == "GENERAL::UNKNOWN_ERROR",
          "paused_execd_refuse: execd of a paused sandbox -> 502")
    st, _, _ = request("GET", f"/sandboxes/{sid}/proxy/44772/ping")
    check(st == 502, "paused_execd_refuse: server proxy -> 502 too")
    faults()
    check(fails_at_transport(lambda: execd(sid, "GET", "/ping", timeout=1)),
          "paused sandbox: execd does not answer (the request hangs)")
    held = {}

    def held_ping():
        held["st"] = execd(sid, "GET", "/ping", timeout=20)[0]

    th = threading.Thread(target=held_ping)
    th.start()
    wait_for(lambda: th.is_alive(), 2)
    st, _ = lc("POST", f"/sandboxes/{sid}/resume")
    th.join(20)
    check(st == 202 and held.get("st") == 200, f"a held execd request completes after resume "
          f"({st} {held})")

    # 18. Snapshots not supported by the runtime.
    faults(snapshot_unsupported=True)
    st, js = lc("POST", f"/sandboxes/{sid}/snapshots", body={})
    check(st == 501 and js["code"] == "SNAPSHOT::NOT_IMPLEMENTED",
          f"snapshot_unsupported: 501 SNAPSHOT::NOT_IMPLEMENTED ({st} {js})")

    # 19. Snapshot capture failing: Failed with snapshot_runtime_failed; not restorable.
    faults(snapshot_fail=True)
    st, snap = lc("POST", f"/sandboxes/{sid}/snapshots", body={"name": "bad"})
    check(st == 202 and wait_for(lambda: snap_state(snap["id"]) == "Failed"),
          "snapshot_fail: the snapshot ends Failed")
    _, js = lc("GET", f"/snapshots/{snap['id']}")
    check(js["status"]["reason"] == "snapshot_runtime_failed", f"snapshot_fail reason ({js})")
    st, js = lc("POST", "/sandboxes", body={"snapshotId": snap["id"], "resourceLimits": {}})
    check(st == 409 and js["code"] == "SNAPSHOT::NOT_READY", f"restore of a Failed snapshot "
          f"-> 409 SNAPSHOT::NOT_READY ({st} {js})")
    st, _ = lc("DELETE", f"/snapshots/{snap['id']}")
    check(st == 204, "a Failed snapshot can be deleted")

    # 20. Slow snapshot: Creating for a while; not deletable or restorable meanwhile.
    faults(snapshot_delay_ms=1500)
    st, snap = lc("POST", f"/sandboxes/{sid}/snapshots")
    check(st == 202 and snap_state(snap["id"]) == "Creating", "snapshot_delay_ms: Creating")
    st, js = lc("DELETE", f"/snapshots/{snap['id']}")
    check(st == 409 and js["code"] == "SNAPSHOT::INVALID_STATE",
          f"delete while Creating -> 409 SNAPSHOT::INVALID_STATE ({st} {js})")
    st, js = lc("POST", "/sandboxes", body={"snapshotId": snap["id"], "resourceLimits": {}})
    check(st == 409 and js["code"] == "SNAPSHOT::NOT_READY", "restore while Creating -> 409")
    check(wait_for(lambda: snap_state(snap["id"]) == "Ready"), "snapshot_delay_ms: then Ready")

    # 21. Restore failing: 500, no sandbox left behind.
    faults(restore_fail=True)
    _, before = lc("GET", "/sandboxes?pageSize=200")
    st, js = lc("POST", "/sandboxes", body={"snapshotId": snap["id"], "resourceLimits": {}})
    _, after = lc("GET", "/sandboxes?pageSize=200")
    check(st == 500 and js["code"] == "DOCKER::SANDBOX_START_FAILED" and
          after["pagination"]["totalItems"] == before["pagination"]["totalItems"],
          f"restore_fail: 500 DOCKER::SANDBOX_START_FAILED, nothing created ({st} {js})")
    faults()
    st, js = lc("POST", "/sandboxes", body={"snapshotId": snap["id"], "resourceLimits": {}})
    check(st == 202 and js.get("snapshotId") == snap["id"], "restore works once cleared")
    lc("DELETE", f"/sandboxes/{js['id']}")
    lc("DELETE", f"/sandboxes/{sid}")

    # A stream of a command in a paused sandbox ends when the sandbox is deleted.
    victim = create()["id"]
    wait_running(victim)
    out = {}

    def streamer():
        out["raw"], out["eof"] = raw_stream(f"/sandboxes/{victim}/execd/command",
                                            {"command": "touch started; sleep 60"},
                                            read_timeout=30)

    th = threading.Thread(target=streamer)
    th.start()
    root = os.environ["SIM_ROOT"]
    wait_for(lambda: os.path.exists(f"{root}/{victim}/started"))
    lc("POST", f"/sandboxes/{victim}/pause")
    lc("DELETE", f"/sandboxes/{victim}")
    th.join(20)
    types = [e.get("type") for e in events_of(out.get("raw", b""))]
    check(not th.is_alive() and out.get("eof") and types[-1:] == ["error"],
          f"deleting a paused sandbox ends its open command streams (got {types})")

    st, _, data = request("GET", "/_sim/faults")
    keys = set(json.loads(data))
    check({"pause_unsupported", "pause_fail", "resume_fail", "pause_delay_ms", "resume_delay_ms",
           "paused_execd_refuse", "snapshot_unsupported", "snapshot_fail", "snapshot_delay_ms",
           "restore_fail"} <= keys, "GET /_sim/faults lists the pause/snapshot switches")


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

    # 2b. A later list page waits (page 1 does not), and is read after the wait: a sandbox
    # created meanwhile moves the pages as the server's offset slices do.
    faults(list_later_pages_latency_ms=600)
    (st, js), t = timed(lambda: lc("GET", "/sandboxes?page=1&pageSize=1"))
    check(st == 200 and t < 0.4 and js["items"][0]["id"] == sid,
          f"list_later_pages_latency_ms leaves page 1 alone ({t:.2f}s)")
    got = {}

    def page2():
        got["r"] = timed(lambda: lc("GET", "/sandboxes?page=2&pageSize=1"))
    th = threading.Thread(target=page2)
    th.start()
    waiting = wait_for(lambda: json.loads(request("GET", "/_sim/stats")[2])
                       ["list_pages_waiting"] == 1, 0.5)
    newer = create()["id"]
    th.join()
    (st, js), t = got["r"]
    check(waiting and st == 200 and t >= 0.6 and [i["id"] for i in js["items"]] == [sid],
          f"list_later_pages_latency_ms holds page 2, read after the wait ({t:.2f}s, "
          f"{[i['id'] for i in js.get('items', [])]})")
    st, _, data = request("GET", "/_sim/stats")
    check(st == 200 and json.loads(data)["list_pages_waiting"] == 0,
          "list_pages_waiting back to 0")
    faults()
    lc("DELETE", f"/sandboxes/{newer}")

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

    pause_and_snapshot_switches()

    st, _, data = request("DELETE", "/_sim/faults")
    check(st == 200, "DELETE /_sim/faults resets everything")
    finish()


if __name__ == "__main__":
    sys.exit(main())
