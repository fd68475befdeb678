"""Negative tests: opensandbox-sim rejects what the real server / execd would reject.

Also covers the lifecycle state machine edges (Pending, expiry, delete) that the SDK test cannot
reach deterministically. Expects the simulator to run with --api-key, --execd-header
X-Sim-Token:s3cret and --ready-delay-ms 1500 (see validation.test).
"""

import grp
import json
import os
import pwd
import sys
import time

from simtest import (check, create, execd, finish, lc, request, wait_running)

TOKEN = {"X-Sim-Token": "s3cret"}
VALID = {
    "image": {"uri": "python:3.11"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "resourceLimits": {"cpu": "1", "memory": "2Gi"},
    "timeout": 600,
}


def body(**changes):
    """VALID with changes applied (value None deletes the key)."""
    b = json.loads(json.dumps(VALID))
    for k, v in changes.items():
        if v is None:
            b.pop(k, None)
        else:
            b[k] = v
    return b


def expect_422(what, payload, field=None):
    st, js = lc("POST", "/sandboxes", payload)
    ok = st == 422 and isinstance(js, dict) and isinstance(js.get("detail"), list)
    if ok and field:
        ok = field in js["detail"][0]["loc"]
    check(ok, f"create: {what} -> 422 detail", f"(got {st} {js})")


def expect_error(what, st, js, status, code):
    ok = st == status and isinstance(js, dict) and js.get("code") == code
    check(ok, f"{what} -> {status} {code}", f"(got {st} {js})")


def ex(sid, method, path, payload=None, raw=None, headers=None):
    """execd call with the required header; returns (status, parsed JSON or raw bytes)."""
    hdrs = dict(TOKEN)
    hdrs.update(headers or {})
    st, _, data = request(method, f"/sandboxes/{sid}/execd{path}", body=payload, raw_body=raw,
                          headers=hdrs)
    try:
        return st, json.loads(data) if data else None
    except ValueError:
        return st, data


def lifecycle_checks():
    # Authentication.
    st, _, data = request("GET", "/v1/sandboxes")
    expect_error("no API key", st, json.loads(data), 401, "MISSING_API_KEY")
    st, _, data = request("GET", "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": "wrong"})
    expect_error("wrong API key", st, json.loads(data), 401, "INVALID_API_KEY")

    # Body shape and required fields.
    st, js = lc("POST", "/sandboxes", raw_body=b"{not json",
                headers={"Content-Type": "application/json"})
    check(st == 422 and "detail" in js, "create: invalid JSON -> 422", f"(got {st} {js})")
    expect_422("array body", [VALID])
    expect_422("missing resourceLimits", body(resourceLimits=None), "resourceLimits")
    expect_422("resourceLimits value not a string", body(resourceLimits={"cpu": 1}),
               "resourceLimits")
    expect_422("resourceLimits not an object", body(resourceLimits="1cpu"), "resourceLimits")
    expect_422("neither image nor snapshotId", body(image=None))
    expect_422("both image and snapshotId", body(snapshotId="snap-1"))
    expect_422("image as a string", body(image="python:3.11"), "image")
    expect_422("image without uri", body(image={"url": "python"}), "image")
    expect_422("image uri not a string", body(image={"uri": 3}), "image")
    expect_422("missing entrypoint with image", body(entrypoint=None), "entrypoint")
    expect_422("empty entrypoint", body(entrypoint=[]), "entrypoint")
    expect_422("entrypoint as a string", body(entrypoint="tail -f /dev/null"), "entrypoint")
    expect_422("entrypoint with a number", body(entrypoint=["sleep", 5]), "entrypoint")
    expect_422("env value not a string", body(env={"A": 1}), "env")
    expect_422("metadata not an object", body(metadata=["a"]), "metadata")
    expect_422("secureAccess not a boolean", body(secureAccess="yes"), "secureAccess")
    expect_422("bad platform", body(platform={"os": "macos", "arch": "amd64"}), "platform")

    # Durations: sandbox timeout is whole seconds >= 60.
    expect_422("timeout as a string", body(timeout="600"), "timeout")
    expect_422("timeout with a unit", body(timeout="10m"), "timeout")
    expect_422("timeout with a fraction", body(timeout=600.5), "timeout")
    expect_422("timeout below 60 s", body(timeout=59), "timeout")
    expect_422("timeout 0", body(timeout=0), "timeout")
    st, js = lc("POST", "/sandboxes", body(timeout=600000))
    expect_error("timeout in ms instead of s (above --max-timeout-s)", st, js, 400,
                 "SANDBOX::INVALID_PARAMETER")

    # Metadata label rules.
    for bad in ({"bad key": "v"}, {"k": "has space"}, {"k": "a" * 64}, {"opensandbox.io/x": "v"},
                {"k": "ends-"}):
        st, js = lc("POST", "/sandboxes", body(metadata=bad))
        expect_error(f"metadata {bad}"[:60], st, js, 400, "SANDBOX::INVALID_METADATA_LABEL")

    # Accepted edge cases.
    st, js = lc("POST", "/sandboxes", body(timeout=None))
    check(st == 202 and "expiresAt" not in js, "no timeout -> 202 without expiresAt",
          f"(got {st} {js})")
    st, js = lc("POST", "/sandboxes", body(timeout=60, metadata={"example.com/team": "a.b_c-1"}))
    check(st == 202 and "expiresAt" in js and js["status"]["state"] == "Pending",
          "timeout 60 and prefixed label -> 202 Pending", f"(got {st} {js})")
    pending = js["id"]

    # List parameters.
    for q in ("pageSize=0", "pageSize=201", "page=0", "page=x"):
        st, js = lc("GET", f"/sandboxes?{q}")
        check(st == 422, f"list {q} -> 422", f"(got {st} {js})")
    st, js = lc("GET", "/sandboxes?metadata=novalue")
    expect_error("list metadata=novalue", st, js, 400, "INVALID_METADATA_FORMAT")
    st, js = lc("GET", "/sandboxes?metadata=example.com%2Fteam%3Da.b_c-1&state=pending")
    check(st == 200 and [s["id"] for s in js["items"]] == [pending],
          "list metadata filter + case-insensitive state", f"(got {st} {js})")

    # Pending sandboxes: execd unreachable, pause refused; then Running.
    st, _ = ex(pending, "GET", "/ping")
    check(st == 502, "execd of a Pending sandbox -> 502", f"(got {st})")
    st, js = lc("POST", f"/sandboxes/{pending}/pause")
    expect_error("pause while Pending", st, js, 409, "DOCKER::SANDBOX_NOT_RUNNING")
    st, js = lc("POST", f"/sandboxes/{pending}/resume")
    expect_error("resume while not Paused", st, js, 409, "DOCKER::SANDBOX_NOT_PAUSED")
    wait_running(pending)

    # Endpoint discovery parameters.
    for p in ("0", "70000", "abc"):
        st, js = lc("GET", f"/sandboxes/{pending}/endpoints/{p}")
        check(st == 422, f"endpoint port {p} -> 422", f"(got {st} {js})")
    st, js = lc("GET", f"/sandboxes/{pending}/endpoints/44772?use_server_proxy=maybe")
    check(st == 422, "use_server_proxy=maybe -> 422", f"(got {st} {js})")
    st, js = lc("GET", f"/sandboxes/{pending}/endpoints/44772?use_server_proxy=true&expires=9")
    check(st == 400, "use_server_proxy with expires -> 400", f"(got {st} {js})")
    st, js = lc("GET", "/sandboxes/nope/endpoints/44772")
    expect_error("endpoint of unknown sandbox", st, js, 404, "DOCKER::SANDBOX_NOT_FOUND")
    st, js = lc("GET", f"/sandboxes/{pending}/endpoints/44772?use_server_proxy=false")
    check(st == 200 and js["endpoint"].endswith(f"/sandboxes/{pending}/execd/proxy/44772")
          and js["headers"] == TOKEN, "execd endpoint (bridge shape, ends in the port) carries "
          "the execd header", f"({js})")
    st, js = lc("GET", f"/sandboxes/{pending}/endpoints/18080")
    check(st == 200 and js["endpoint"].endswith(f"/sandboxes/{pending}/execd/proxy/18080")
          and "headers" not in js, "egress endpoint (bridge shape)", f"({js})")

    # Renew expiration.
    st, js = lc("POST", f"/sandboxes/{pending}/renew-expiration", {"expiresAt": "tomorrow"})
    check(st == 422, "renew with a non-RFC3339 time -> 422", f"(got {st} {js})")
    st, js = lc("POST", f"/sandboxes/{pending}/renew-expiration",
                {"expiresAt": "2001-01-01T00:00:00Z"})
    check(st == 400, "renew into the past -> 400", f"(got {st} {js})")
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 7200))
    st, js = lc("POST", f"/sandboxes/{pending}/renew-expiration", {"expiresAt": future})
    check(st == 200 and js["expiresAt"].startswith(future[:19]), "renew -> 200", f"({st} {js})")

    # Expiry (forced through the control API) and delete.
    st, _, _ = request("POST", f"/_sim/sandboxes/{pending}/expire")
    st, js = lc("GET", f"/sandboxes/{pending}")
    check(st == 200 and js["status"]["state"] == "Terminated", "expired sandbox is Terminated",
          f"({st} {js})")
    st, _ = ex(pending, "GET", "/ping")
    check(st == 502, "execd of a Terminated sandbox -> 502")
    st, _, data = request("DELETE", f"/v1/sandboxes/{pending}",
                          headers={"OPEN-SANDBOX-API-KEY": "validation-key"})
    check(st == 204 and data == b"", "delete -> 204 empty")
    st, js = lc("DELETE", f"/sandboxes/{pending}")
    expect_error("delete again", st, js, 404, "DOCKER::SANDBOX_NOT_FOUND")
    st, js = lc("GET", f"/sandboxes/{pending}")
    expect_error("get after delete", st, js, 404, "DOCKER::SANDBOX_NOT_FOUND")

    # Body cap.
    st, _, _ = request("POST", "/v1/sandboxes", raw_body=b"x" * (2 * 1024 * 1024),
                       headers={"OPEN-SANDBOX-API-KEY": "validation-key"})
    check(st == 413, "2 MiB JSON body -> 413", f"(got {st})")


def lifecycle_issue12_checks():
    """Pause/resume, snapshot and renew status codes, as the real server's code answers them."""
    sid = create()["id"]
    # Pending: not pausable, not snapshotable.
    st, js = lc("POST", f"/sandboxes/{sid}/pause")
    expect_error("pause while Pending", st, js, 409, "DOCKER::SANDBOX_NOT_RUNNING")
    st, js = lc("POST", f"/sandboxes/{sid}/snapshots", {})
    expect_error("snapshot while Pending", st, js, 409, "SNAPSHOT::INVALID_SOURCE_STATE")
    wait_running(sid)
    st, js = lc("POST", f"/sandboxes/{sid}/resume")
    check(st == 409 and js == {"code": "DOCKER::SANDBOX_NOT_PAUSED",
                               "message": "Sandbox is not in a paused state."},
          "resume while Running -> 409 DOCKER::SANDBOX_NOT_PAUSED", f"(got {st} {js})")
    for op in ("pause", "resume", "snapshots"):
        st, js = lc("POST", f"/sandboxes/nope/{op}", {} if op == "snapshots" else None)
        expect_error(f"{op} of an unknown sandbox", st, js, 404, "DOCKER::SANDBOX_NOT_FOUND")
    st, _, data = request("POST", f"/v1/sandboxes/{sid}/pause")
    check(st == 401, "pause needs the API key", f"(got {st})")
    st, _, data = request("POST", f"/v1/sandboxes/{sid}/pause",
                          headers={"OPEN-SANDBOX-API-KEY": "validation-key"})
    check(st == 202 and data == b"", "pause -> 202 empty body", f"(got {st} {data!r})")
    st, js = lc("GET", f"/sandboxes/{sid}")
    check(js["status"]["state"] == "Paused" and js["status"]["reason"] == "CONTAINER_PAUSED",
          "Paused / CONTAINER_PAUSED", f"({js})")
    st, js = lc("POST", f"/sandboxes/{sid}/pause")
    expect_error("pause while Paused (docker: already paused)", st, js, 500,
                 "DOCKER::SANDBOX_PAUSE_FAILED")
    st, js = lc("POST", f"/sandboxes/{sid}/snapshots", {})
    check(st == 409 and js["code"] == "SNAPSHOT::INVALID_SOURCE_STATE" and
          js["message"] == "Snapshot can only be created from a Running sandbox.",
          "snapshot while Paused -> 409 SNAPSHOT::INVALID_SOURCE_STATE", f"(got {st} {js})")
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
    st, js = lc("POST", f"/sandboxes/{sid}/renew-expiration", {"expiresAt": future})
    check(st == 200 and js["expiresAt"].startswith(future),
          "renew a Paused sandbox, time without offset = UTC -> 200", f"(got {st} {js})")
    sooner = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 600))
    st, js = lc("POST", f"/sandboxes/{sid}/renew-expiration", {"expiresAt": sooner})
    check(st == 200 and js["expiresAt"].startswith(sooner[:19]),
          "renew to an earlier (future) time is accepted", f"(got {st} {js})")
    st, js = lc("POST", f"/sandboxes/{sid}/renew-expiration",
                {"expiresAt": "2001-01-01T00:00:00Z"})
    check(st == 400 and js == {"code": "DOCKER::INVALID_EXPIRATION",
                               "message": "New expiration time must be in the future."},
          "renew into the past -> 400 DOCKER::INVALID_EXPIRATION", f"(got {st} {js})")
    st, js = lc("POST", "/sandboxes/nope/renew-expiration", {"expiresAt": sooner})
    expect_error("renew of an unknown sandbox", st, js, 404, "DOCKER::SANDBOX_NOT_FOUND")
    forever = lc("POST", "/sandboxes", body(timeout=None))[1]["id"]
    st, js = lc("POST", f"/sandboxes/{forever}/renew-expiration", {"expiresAt": sooner})
    expect_error("renew of a sandbox without timeout", st, js, 409, "DOCKER::INVALID_EXPIRATION")
    st, js = lc("GET", f"/sandboxes?state=Paused&state=pausing")
    check(st == 200 and [i["id"] for i in js["items"]] == [sid], "list ?state=Paused",
          f"({js})")
    st, _ = lc("POST", f"/sandboxes/{sid}/resume")
    check(st == 202 and lc("GET", f"/sandboxes/{sid}")[1]["status"]["state"] == "Running",
          "resume -> 202, Running")

    # Snapshot request body (CreateSnapshotRequest: optional, only a non-empty "name").
    for what, payload, field in (("an unknown field", {"nam": "x"}, "nam"),
                                 ("an empty name", {"name": ""}, "name"),
                                 ("a non-string name", {"name": 5}, "name")):
        st, js = lc("POST", f"/sandboxes/{sid}/snapshots", payload)
        check(st == 422 and field in js["detail"][0]["loc"], f"snapshot with {what} -> 422",
              f"(got {st} {js})")
    st, hdrs, data = request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "cp"},
                             headers={"OPEN-SANDBOX-API-KEY": "validation-key"})
    snap = json.loads(data)
    check(st == 202 and hdrs.get("Location") == f"/v1/snapshots/{snap['id']}" and
          snap["sandboxId"] == sid and snap["name"] == "cp" and
          snap["status"]["state"] == "Creating" and
          snap["status"]["reason"] == "snapshot_accepted" and "createdAt" in snap,
          "snapshot -> 202 Creating with Location", f"(got {st} {hdrs} {snap})")
    st, js = lc("GET", "/snapshots/nope")
    check(st == 404 and js == {"code": "SNAPSHOT::NOT_FOUND",
                               "message": "Snapshot nope not found"},
          "GET unknown snapshot -> 404 SNAPSHOT::NOT_FOUND", f"(got {st} {js})")
    st, js = lc("DELETE", "/snapshots/nope")
    expect_error("DELETE unknown snapshot", st, js, 404, "SNAPSHOT::NOT_FOUND")
    st, _, _ = request("GET", "/v1/snapshots")
    check(st == 401, "snapshots need the API key")
    for q in ("pageSize=201", "pageSize=0", "page=0", "page=x"):
        st, js = lc("GET", f"/snapshots?{q}")
        check(st == 422, f"list snapshots ?{q} -> 422", f"(got {st})")
    st, js = lc("POST", "/sandboxes", body(image=None, entrypoint=None, snapshotId="nope"))
    expect_error("restore from an unknown snapshot", st, js, 404, "SNAPSHOT::NOT_FOUND")
    lc("DELETE", f"/sandboxes/{forever}")


def multipart(parts, boundary="XyZ"):
    """Build a multipart body from (name, filename or None, bytes)."""
    out = b""
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), {
        "Content-Type": f"multipart/form-data; boundary={boundary}"}


def execd_checks():
    sid = create()["id"]
    wait_running(sid)
    st, _, data = execd(sid, "GET", "/ping")
    check(st == 401 and "error" in json.loads(data), "execd without the endpoint header -> 401",
          f"(got {st} {data!r})")
    st, _, _ = execd(sid, "GET", "/ping", headers={"X-Sim-Token": "wrong"})
    check(st == 401, "execd with a wrong endpoint header value -> 401")
    st, _ = ex(sid, "GET", "/ping")
    check(st == 200, "execd with the header -> 200")

    bad_commands = [
        ("missing command", {}),
        ("empty command", {"command": ""}),
        ("command not a string", {"command": 5}),
        ("timeout as float", {"command": "true", "timeout": 30000.0}),
        ("timeout as string", {"command": "true", "timeout": "30s"}),
        ("negative timeout", {"command": "true", "timeout": -1}),
        ("gid without uid", {"command": "true", "gid": 0}),
        ("envs value not a string", {"command": "true", "envs": {"A": 1}}),
        ("background not a boolean", {"command": "true", "background": "yes"}),
        ("cwd does not exist", {"command": "true", "cwd": "/nonexistent/x"}),
    ]
    for what, payload in bad_commands:
        st, js = ex(sid, "POST", "/command", payload)
        expect_error(f"/command {what}", st, js, 400, "INVALID_REQUEST_BODY")
    st, js = ex(sid, "POST", "/command", raw=b"{oops", headers={"Content-Type": "application/json"})
    expect_error("/command invalid JSON", st, js, 400, "INVALID_REQUEST_BODY")

    st, js = ex(sid, "POST", "/session", {"cwd": 5})
    expect_error("/session cwd not a string", st, js, 400, "INVALID_REQUEST_BODY")
    st, js = ex(sid, "POST", "/session")
    sess = js["session_id"]
    for what, payload in (("timeout as string", {"command": "true", "timeout": "1s"}),
                          ("timeout as float", {"command": "true", "timeout": 1.5}),
                          ("missing command", {"timeout": 1000}),
                          ("cwd does not exist", {"command": "true", "cwd": "/nonexistent/x"})):
        st, js = ex(sid, "POST", f"/session/{sess}/run", payload)
        expect_error(f"session run {what}", st, js, 400, "INVALID_REQUEST_BODY")
    st, js = ex(sid, "POST", "/session/unknown/run", {"command": "true"})
    check(st == 500 and js == {"code": "RUNTIME_ERROR",
                               "message": "error running in session. context not found"},
          "run in unknown session -> 500 RUNTIME_ERROR context not found", f"({st} {js})")
    st, js = ex(sid, "DELETE", "/session/unknown")
    expect_error("delete unknown session", st, js, 404, "CONTEXT_NOT_FOUND")
    st, js = ex(sid, "DELETE", "/command?id=ffffffffffffffffffffffffffffffff")
    expect_error("interrupt unknown command", st, js, 500, "RUNTIME_ERROR")

    # Files.
    st, js = ex(sid, "GET", "/files/download")
    expect_error("download without path", st, js, 400, "MISSING_QUERY")
    st, js = ex(sid, "GET", "/files/download?path=/nonexistent/file")
    expect_error("download of a missing file", st, js, 404, "FILE_NOT_FOUND")
    st, js = ex(sid, "GET", "/files/info?path=/&path=/nonexistent/file")
    expect_error("info with one missing path", st, js, 404, "FILE_NOT_FOUND")
    st, js = ex(sid, "GET", "/files/info")
    check(st == 200 and js == {}, "info without paths -> 200 {}", f"({st} {js})")

    meta = json.dumps({"path": "up/a.txt", "mode": 644}).encode()
    raw, hdr = multipart([("metadata", None, meta), ("file", "a.txt", b"x")])
    st, js = ex(sid, "POST", "/files/upload", raw=raw, headers=hdr)
    expect_error("upload with metadata as a plain field", st, js, 400, "INVALID_FILE_METADATA")
    st, js = ex(sid, "POST", "/files/upload", raw=b"plain", headers={"Content-Type": "text/plain"})
    expect_error("upload that is not multipart", st, js, 400, "INVALID_FILE")
    raw, hdr = multipart([("metadata", "metadata", meta)])
    st, js = ex(sid, "POST", "/files/upload", raw=raw, headers=hdr)
    expect_error("upload without a file part", st, js, 400, "INVALID_FILE_CONTENT")
    raw, hdr = multipart([("metadata", "metadata", json.dumps({"path": "a", "mode": "644"}).encode()),
                          ("file", "a", b"x")])
    st, js = ex(sid, "POST", "/files/upload", raw=raw, headers=hdr)
    expect_error("upload with mode as a string", st, js, 400, "INVALID_FILE_METADATA")
    raw, hdr = multipart([("metadata", "metadata", json.dumps({"path": "m.txt", "mode": 648}).encode()),
                          ("file", "m.txt", b"x")])
    st, js = ex(sid, "POST", "/files/upload", raw=raw, headers=hdr)
    expect_error("upload with mode digit 8", st, js, 500, "RUNTIME_ERROR")
    raw, hdr = multipart([("metadata", "metadata", meta), ("file", "a.txt", b"0123456789")])
    st, js = ex(sid, "POST", "/files/upload", raw=raw, headers=hdr)
    check(st == 200 and js is None, "valid upload (relative path) -> 200 empty", f"({st} {js})")
    st, js = ex(sid, "GET", "/files/info?path=up/a.txt")
    check(st == 200 and js["up/a.txt"]["mode"] == 644 and js["up/a.txt"]["size"] == 10,
          "info keyed by the path as sent, mode as decimal digits", f"({js})")
    st, js = ex(sid, "GET", "/files/download?path=up/a.txt", headers={"Range": "bytes=abc"})
    check(st == 416 and js == {"code": "UNKNOWN"}, "malformed Range -> 416 {code: UNKNOWN}",
          f"({st} {js})")
    st, _ = ex(sid, "GET", "/files/download?path=up/a.txt", headers={"Range": "bytes=100-"})
    check(st == 416, "Range past EOF -> 416")
    st, _, data = request("GET", f"/sandboxes/{sid}/execd/files/download?path=up/a.txt",
                          headers=dict(TOKEN, Range="bytes=2-4"))
    check(st == 206 and data == b"234", "Range bytes=2-4 -> 206 '234'", f"({st} {data!r})")

    st, _, data = request("GET", f"/sandboxes/{sid}/execd/nope", headers=TOKEN)
    check(st == 404 and data == b"404 page not found", "unknown execd route -> 404 plain text")
    lc("DELETE", f"/sandboxes/{sid}")


def execd_issue12_checks():
    """execd details: bridge-shaped endpoint route, /metrics, permissions owner/group, session
    state between back-to-back runs."""
    sid = create()["id"]
    wait_running(sid)
    _, ep = lc("GET", f"/sandboxes/{sid}/endpoints/44772")
    prefix = ep["endpoint"].split("/", 1)[1]
    st, _, _ = request("GET", f"/{prefix}/ping", headers=TOKEN)
    check(st == 200, f"the direct execd endpoint /{prefix} answers /ping", f"(got {st})")
    _, ep = lc("GET", f"/sandboxes/{sid}/endpoints/18080")
    st, _, data = request("GET", "/" + ep["endpoint"].split("/", 1)[1] + "/policy")
    check(st == 200 and json.loads(data)["status"] == "ok", "the egress endpoint answers /policy")

    st, m = ex(sid, "GET", "/metrics")
    check(st == 200 and set(m) == {"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib",
                                   "timestamp"} and m["cpu_count"] >= 1 and
          0 <= m["cpu_used_pct"] <= 100 and 0 < m["mem_used_mib"] <= m["mem_total_mib"] and
          isinstance(m["timestamp"], int), "GET /metrics: execd's Metrics", f"(got {st} {m})")

    me = pwd.getpwuid(os.getuid()).pw_name
    mygroup = grp.getgrgid(os.getgid()).gr_name
    path = f"{sid}-perm.txt"
    ex(sid, "POST", "/command", {"command": f"echo x > {path}"})
    st, _ = ex(sid, "POST", "/files/permissions",
               {path: {"mode": 640, "owner": me, "group": mygroup}})
    st2, info = ex(sid, "GET", f"/files/info?path={path}")
    fi = info[path] if st2 == 200 else {}
    check(st == 200 and fi.get("mode") == 640 and fi.get("owner") == me and
          fi.get("group") == mygroup, "permissions: mode, owner and group applied",
          f"(got {st} {fi})")
    st, js = ex(sid, "POST", "/files/permissions", {path: {"mode": 600, "owner": "no-such-u"}})
    check(st == 500 and js["code"] == "RUNTIME_ERROR" and "unknown user no-such-u" in
          js["message"], "permissions with an unknown owner -> 500 RUNTIME_ERROR",
          f"(got {st} {js})")
    st, js = ex(sid, "POST", "/files/permissions", {path: {"mode": 600, "group": "no-such-g"}})
    check(st == 500 and "unknown group no-such-g" in js["message"],
          "permissions with an unknown group -> 500", f"(got {st} {js})")
    st, js = ex(sid, "POST", "/files/permissions", {path: {"owner": 5}})
    check(st == 400 and js["code"] == "INVALID_REQUEST_BODY",
          "permissions with a non-string owner -> 400", f"(got {st} {js})")

    # A session keeps cd/export between runs sent right after the previous run's end event.
    st, js = ex(sid, "POST", "/session", {})
    sess = js["session_id"]
    lost = []
    ex(sid, "POST", f"/session/{sess}/run", {"command": "mkdir -p d1 && cd d1 && export N=1"})
    for i in range(1, 60):
        st, raw = ex(sid, "POST", f"/session/{sess}/run",
                     {"command": f'[ "$N" = "{i}" ] && [ "${{PWD##*/}}" = "d{i}" ] || echo LOST; '
                                 f'mkdir -p ../d{i + 1} && cd ../d{i + 1} && export N={i + 1}'})
        if st != 200 or b"LOST" in (raw if isinstance(raw, bytes) else json.dumps(raw).encode()):
            lost.append(i)
    check(not lost, "60 back-to-back session runs keep cd and export", f"(lost at {lost})")


def list_order_checks():
    """Pages list the newest first, as both of the server's runtimes sort them (created_at
    descending: services/docker/docker_service.py, services/k8s/list_helpers.py); the pages
    read one after another equal one full page, also when a sandbox was created or deleted
    between two of them (the positions then move, as the server's slices do)."""
    def ids(q):
        st, js = lc("GET", "/sandboxes?" + q)
        return [s["id"] for s in js["items"]] if st == 200 else None

    def created():
        st, js = lc("POST", "/sandboxes", body(metadata={"test": "order"}))
        return js["id"] if st == 202 else None

    mine = [created() for _ in range(5)]
    full = ids("pageSize=200")
    check(full is not None and [i for i in full if i in mine] == mine[::-1],
          "list: newest first", f"(got {full})")
    paged = []
    for page in range(1, (len(full) + 1) // 2 + 2):
        paged += ids(f"page={page}&pageSize=2") or []
    check(paged == full, "list: pages one after another equal the full list",
          f"(got {paged}, full {full})")
    first = ids("page=1&pageSize=2")
    newest = created()
    full = ids("pageSize=200")
    check(full[0] == newest and ids("page=2&pageSize=2") == full[2:4],
          "list: a sandbox created between pages moves the later ones back", f"(full {full})")
    lc("DELETE", f"/sandboxes/{full[1]}")
    full = ids("pageSize=200")
    check(ids("page=2&pageSize=2") == full[2:4] and first is not None,
          "list: a sandbox deleted between pages moves the later ones forward", f"(full {full})")
    st, js = lc("GET", "/sandboxes?metadata=test%3Dorder&pageSize=2")
    check(st == 200 and [s["id"] for s in js["items"]] == [newest, mine[-2]],  # mine[-1] deleted
          "list with a filter: newest first", f"(got {st} {js})")


def main():
    lifecycle_checks()
    lifecycle_issue12_checks()
    list_order_checks()
    execd_checks()
    execd_issue12_checks()
    finish()


if __name__ == "__main__":
    sys.exit(main())
