# SPDX-License-Identifier: Apache-2.0
"""HTTPS: rock-admin with server.tls_cert_file / tls_key_file,
a test CA generated at test time with openssl, Python's ssl module as the
client. The SDK flow over https://, the WebSocket proxy over wss://, the
certificate reloaded on SIGHUP, and `-t` refusing broken pairs.
"""
import os
import signal
import socket
import ssl
import subprocess
import threading

import harness
from harness import ADMIN_BIN, PREFIX, Admin, test, tmpdir, wait_until
from secutil import (Client, client_context, make_ca, make_server_cert, sdk_flow, sdk_headers,
                     start_echo_app, start_tcp_echo, write_tokens, ws_connect,
                     ws_echo_roundtrip)

TOKEN = "tls-token-5b2d4c6e8f0a7f3c9a"


def tls_admin(d, cert, key, extra=None):
    server = {"tls_cert_file": cert, "tls_key_file": key}
    server.update(extra or {})
    admin = Admin(config={"server": server, "testop": {"proxy_base": "http://127.0.0.1:{port}"}},
                  wait=False)
    m = admin.wait_for_line(r"rock-admin ready on https://[0-9.:]+:(\d+)")
    admin.port = int(m.group(1))
    return admin


def peer_subject(port, ctx):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            return subject.get("commonName")


@test
def sdk_flow_and_websocket_over_tls():
    d = tmpdir("rock-tls-")
    ca = make_ca(d)
    cert, key = make_server_cert(d, "srv")
    tokens = write_tokens(os.path.join(d, "tokens"), ["%s sdk" % TOKEN])
    admin = tls_admin(d, cert, key, {"auth_tokens_file": tokens})
    ctx = client_context(ca)
    app = start_echo_app()
    # https:// with the token: the whole SDK flow
    sdk_flow(Client(admin.port, sdk_headers(TOKEN), ctx), app, tag="tls")
    # ... and without it: 401 over TLS too
    st, payload, hdrs = Client(admin.port, sdk_headers(None), ctx).raw(
        "GET", PREFIX + "/sandboxes")
    assert st == 401 and hdrs["www-authenticate"].startswith("Bearer"), (st, payload)
    # wss:// through the WebSocket proxy (handshake by hand over an ssl socket)
    c = Client(admin.port, sdk_headers(TOKEN), ctx)
    sid = c.ok("POST", "/start_async", {"image": "python:3.11"})["sandbox_id"]
    wait_until(lambda: c.ok("GET", "/get_status?sandbox_id=" + sid)["is_alive"], 20, 0.1)
    path = "%s/sandboxes/%s/proxy/port/%d/ws" % (PREFIX, sid, app)
    st, text, sock, buf = ws_connect(admin.port, path, sdk_headers(TOKEN), ctx)
    assert st == 101, text
    for payload in (b"hello over wss", os.urandom(70000).hex().encode()):
        assert ws_echo_roundtrip(sock, buf, payload) == payload
    sock.close()
    st, text, _, _ = ws_connect(admin.port, path, sdk_headers("wrong-token-000000000"), ctx)
    assert st == 401, text
    # port forwarding (WebSocket frames <-> TCP) over wss:// too
    tcp = start_tcp_echo()
    st, text, sock, buf = ws_connect(admin.port, "%s/sandboxes/%s/portforward?port=%d"
                                     % (PREFIX, sid, tcp), sdk_headers(TOKEN), ctx)
    assert st == 101, text
    blob = os.urandom(100000)
    assert ws_echo_roundtrip(sock, buf, blob, op=2) == blob
    sock.close()
    # plain HTTP on the TLS port gets no answer in clear text
    with socket.create_connection(("127.0.0.1", admin.port), timeout=30) as s:
        s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            data = b""
        assert b"alive" not in data, data
    # TLS 1.2 clients are served too (1.0 and 1.1 are disabled in the GnuTLS priorities)
    ctx12 = client_context(ca)
    ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", admin.port), timeout=30) as raw:
        with ctx12.wrap_socket(raw, server_hostname="127.0.0.1") as s12:
            assert s12.version() == "TLSv1.2", s12.version()
    # a client that does not trust the CA refuses the server
    try:
        Client(admin.port, {}, ssl.create_default_context()).raw("GET", "/livez")
        raise AssertionError("an untrusted certificate was accepted")
    except ssl.SSLCertVerificationError:
        pass
    # drain: an open wss:// session is closed with 1001, then the process exits 0
    st, text, sock, buf = ws_connect(admin.port, path, sdk_headers(TOKEN), ctx)
    assert st == 101, text
    assert ws_echo_roundtrip(sock, buf, b"before drain") == b"before drain"
    admin.proc.send_signal(signal.SIGTERM)
    op, data = buf.read_frame()
    assert op == 8 and data[:2] == b"\x03\xe9", (op, data)  # 1001 going away
    sock.close()
    assert admin.stop() == 0, admin.output()[-2000:]


@test
def certificate_reloads_on_sighup():
    d = tmpdir("rock-tls-")
    ca = make_ca(d)
    cert, key = make_server_cert(d, "srv", cn="first.rock.test")
    admin = tls_admin(d, cert, key)
    ctx = client_context(ca)
    assert peer_subject(admin.port, ctx) == "first.rock.test"
    # keep a connection open across the reload: it keeps working
    keep = Client(admin.port, {}, ctx).conn()
    keep.request("GET", "/livez")
    assert keep.getresponse().read() == b'{"status":"alive"}'
    cert2, key2 = make_server_cert(d, "srv2", cn="second.rock.test")
    os.replace(cert2, cert)
    os.replace(key2, key)
    admin.proc.send_signal(signal.SIGHUP)
    admin.wait_for_line(r"SIGHUP: TLS certificate reloaded")
    assert peer_subject(admin.port, ctx) == "second.rock.test"
    keep.request("GET", "/livez")
    assert keep.getresponse().read() == b'{"status":"alive"}'
    keep.close()
    # a mismatched pair is refused; the server keeps the pair it has
    cert3, _ = make_server_cert(d, "srv3", cn="third.rock.test")
    os.replace(cert3, cert)
    admin.proc.send_signal(signal.SIGHUP)
    admin.wait_for_line(r"keeping the previous TLS certificate")
    assert peer_subject(admin.port, ctx) == "second.rock.test"
    assert Client(admin.port, {}, ctx).raw("GET", "/livez")[0] == 200

    # renewals while clients connect: every handshake gets one valid certificate
    pairs = [make_server_cert(d, "gen%d" % i, cn="gen%d.rock.test" % i) for i in range(4)]
    results, stop = [], threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                results.append(Client(admin.port, {}, ctx).raw("GET", "/livez")[0])
            except (OSError, ssl.SSLError) as e:
                results.append(repr(e))
    workers = [threading.Thread(target=hammer) for _ in range(4)]
    for w in workers:
        w.start()
    for i, (c, k) in enumerate(pairs):
        os.replace(c, cert)
        os.replace(k, key)
        admin.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: admin.output().count("SIGHUP: TLS certificate reloaded") > i + 1,
                   30, 0.05, "reload %d" % i)
    stop.set()
    for w in workers:
        w.join()
    assert results and set(results) == {200}, sorted(set(map(str, results)))[:5]
    assert peer_subject(admin.port, ctx) == "gen3.rock.test"


def check(server):
    d = tmpdir("rock-tls-t-")
    cfg = os.path.join(d, "c.yml")
    with open(cfg, "w") as f:
        f.write(harness.yaml_dump({"server": server, "runtime": {
            "operator_type": "testop", "plugin_dir": harness.TEST_PLUGIN_DIR}}) + "\n")
    p = subprocess.run([ADMIN_BIN, "-t", "-c", cfg], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


@test
def config_check_validates_tls_files():
    d = tmpdir("rock-tls-")
    make_ca(d)
    cert, key = make_server_cert(d, "srv")
    other_cert, other_key = make_server_cert(d, "other")
    with open(key) as f:
        key_text = f.read()
    key_body = key_text.splitlines()[1]
    rc, out = check({"tls_cert_file": cert, "tls_key_file": key})
    assert rc == 0 and "server.tls_cert_file: " + cert in out, out
    cases = [
        ({"tls_cert_file": cert}, "must be set together"),
        ({"tls_cert_file": cert, "tls_key_file": os.path.join(d, "nope.key")}, "cannot open"),
        ({"tls_cert_file": cert, "tls_key_file": other_key}, "do not match"),
        ({"tls_cert_file": key, "tls_key_file": key}, "server.tls_cert_file"),
        ({"tls_cert_file": cert, "tls_key_file": other_cert}, "server.tls"),
    ]
    empty = os.path.join(d, "empty.pem")
    open(empty, "w").close()
    cases.append(({"tls_cert_file": empty, "tls_key_file": key}, "the file is empty"))
    for server, want in cases:
        rc, out = check(server)
        assert rc == 1 and want in out, (server, rc, out)
        assert key_body not in out, out  # never the key material


if __name__ == "__main__":
    harness.run()
