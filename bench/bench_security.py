# SPDX-License-Identifier: Apache-2.0
"""Cost of the security features with the in-memory test operator:

  auth  /execute round trips on one keep-alive connection, authentication off
        vs on (XRL-Authorization: Bearer, 100 tokens in the file, the match last)
  tls   the same over https:// (keep-alive), and one new connection per request
        over http:// vs https:// (TLS handshake cost, RSA-2048 certificate)

Run from a configured build directory:
  python3 ../../bench/bench_security.py auth|tls [N]
with ROCK_ADMIN_BIN and ROCK_TEST_PLUGIN_DIR set (see bench/bench_core.py).
Not part of `make check`: numbers depend on the machine.
"""
import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
from harness import Admin, cleanup, tmpdir  # noqa: E402
import secutil  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


def admin(server=None):
    a = Admin(config={"log": {"level": "warning"}, "server": server or {}}, wait=False)
    m = a.wait_for_line(r"rock-admin ready on https?://[0-9.:]+:(\d+)")
    a.port = int(m.group(1))
    return a


def rounds(make_conn, headers, n, reuse=True):
    """p50/p99 in ms of n /execute calls (after one to create the sandbox)."""
    conn = make_conn()
    h = dict(headers, **{"Content-Type": "application/json"})
    conn.request("POST", "/apis/envs/sandbox/v1/start_async", json.dumps({"image": "x"}), h)
    sid = json.loads(conn.getresponse().read())["result"]["sandbox_id"]
    body = json.dumps({"sandbox_id": sid, "command": "echo hi"})
    samples = []
    for _ in range(n):
        if not reuse:
            conn.close()
        t0 = time.perf_counter()
        if not reuse:
            conn = make_conn()
        conn.request("POST", "/apis/envs/sandbox/v1/execute", body, h)
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        samples.append((time.perf_counter() - t0) * 1000)
    conn.close()
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


def auth(n=3000):
    d = tmpdir()
    lines = ["filler-token-%04d-0123456789 f%d" % (i, i) for i in range(99)] + [TOKEN + " bench"]
    tokens = secutil.write_tokens(os.path.join(d, "tokens"), lines)
    off = admin()
    on = admin({"auth_tokens_file": tokens})
    for name, a, h in (("auth off", off, {}), ("auth on", on, {"XRL-Authorization":
                                                              "Bearer " + TOKEN})):
        p50, p99 = rounds(lambda a=a: http.client.HTTPConnection("127.0.0.1", a.port), h, n)
        print("%-9s /execute keep-alive over %d: p50 %.3f ms, p99 %.3f ms" % (name, n, p50, p99))


def tls(n=1000):
    d = tmpdir()
    ca = secutil.make_ca(d)
    cert, key = secutil.make_server_cert(d, "srv")
    ctx = secutil.client_context(ca)
    plain = admin()
    sec = admin({"tls_cert_file": cert, "tls_key_file": key})
    mk_plain = lambda: http.client.HTTPConnection("127.0.0.1", plain.port)  # noqa: E731
    mk_tls = lambda: http.client.HTTPSConnection("127.0.0.1", sec.port, context=ctx)  # noqa
    for name, mk, reuse in (("http keep-alive", mk_plain, True), ("https keep-alive", mk_tls, True),
                            ("http new conn", mk_plain, False), ("https new conn", mk_tls, False)):
        p50, p99 = rounds(mk, {}, n if reuse else max(n // 5, 50), reuse)
        print("%-17s /execute: p50 %.3f ms, p99 %.3f ms" % (name, p50, p99))


if __name__ == "__main__":
    try:
        {"auth": auth, "tls": tls}[sys.argv[1]](*[int(x) for x in sys.argv[2:3]])
    finally:
        cleanup()
