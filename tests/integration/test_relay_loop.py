# SPDX-License-Identifier: Apache-2.0
"""WebSocket and port-forward relays on the relay loops (core/relay/relay_loop.c):
many open relays cost no thread each, and a slow peer holds the other side back
(backpressure) instead of growing the daemon's memory. Real processes over real
sockets: rock-admin with the test operator (sandbox port N is 127.0.0.1:N), a
node `ws` echo application and clients.
"""
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time

import harness
from harness import PREFIX, Admin, test
from secutil import WsBuffer, ws_connect

RELAYS = 1000
THREAD_BOUND = 60

WS_SCRIPT = r"""
const path = require('path');
const crypto = require('crypto');
const readline = require('readline');
const WebSocket = require(path.join(process.env.NODE_MODULES, 'ws'));
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const mode = process.argv[2];
if (mode === 'server') {
  const wss = new WebSocket.Server({port: 0, host: '127.0.0.1', backlog: 4096});
  wss.on('listening', () => out({port: wss.address().port}));
  wss.on('connection', (ws) => ws.on('message', (d, bin) => ws.send(d, {binary: bin})));
} else {
  // many: open N relays at once, then on "echo" one message each, on "close" close them all
  const url = process.argv[3], n = parseInt(process.argv[4], 10);
  const socks = [];
  let opened = 0, failed = 0, settled = 0;
  const errors = {};
  for (let i = 0; i < n; i++) {
    const ws = new WebSocket(url, {handshakeTimeout: 120000});
    socks.push(ws);
    ws.on('open', () => { opened++; if (++settled === n) out({opened, failed, errors}); });
    ws.on('error', (e) => {
      errors[String(e)] = (errors[String(e)] || 0) + 1;
      if (ws.readyState !== WebSocket.OPEN && !ws._counted) {
        ws._counted = true; failed++; if (++settled === n) out({opened, failed, errors});
      }
    });
  }
  const rl = readline.createInterface({input: process.stdin});
  rl.on('line', (cmd) => {
    if (cmd === 'echo') {
      let echoed = 0, mismatch = 0, done = 0;
      socks.forEach((ws, i) => {
        // text and binary, 1 byte to 96 KiB, each unique
        const size = 1 + (i * 7919) % (96 * 1024);
        const bin = i % 2 === 0;
        const buf = crypto.randomBytes(size);
        const m = bin ? buf : buf.toString('hex').slice(0, size);
        ws.once('message', (data, isBin) => {
          const same = bin ? (isBin && Buffer.compare(buf, data) === 0)
                           : (!isBin && data.toString() === m);
          if (same) echoed++; else mismatch++;
          if (++done === socks.length) out({echoed, mismatch});
        });
        ws.send(m, {binary: bin});
      });
    } else if (cmd === 'close') {
      const codes = {};
      let closed = 0;
      socks.forEach((ws) => {
        ws.on('close', (code) => {
          codes[code] = (codes[code] || 0) + 1;
          if (++closed === socks.length) { out({closed, codes}); process.exit(0); }
        });
        ws.close(1000, 'done');
      });
    }
  });
}
"""


def node_script():
    p = os.path.join(harness.tmpdir(), "many.js")
    with open(p, "w") as f:
        f.write(WS_SCRIPT)
    return p


def node_env():
    env = dict(os.environ)
    env["NODE_MODULES"] = harness.NODE_MODULES
    return env


def proc_status(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def setup(config=None):
    cfg = {"testop": {"proxy_base": "http://127.0.0.1:{port}"},
           # every client of this test comes from 127.0.0.1
           "server": {"host": "127.0.0.1", "port": 0, "drain_timeout": 10,
                      "per_ip_connections": 4000}}
    cfg.update(config or {})
    admin = Admin(config=cfg)
    harness._cleanups.append(admin.stop)
    return admin, admin.start_sandbox()


@test
def thousand_websocket_relays_run_on_a_few_threads():
    """1,000 WebSocket relays open at once through the proxy: each echoes its own
    message intact, and the daemon's thread count (from /proc) stays bounded."""
    assert harness.node_available(), \
        "node and tests/js/node_modules are required (scripts/install-deps.sh installs them)"
    admin, sid = setup()
    script = node_script()
    srv = subprocess.Popen(["node", script, "server"], stdout=subprocess.PIPE, env=node_env(),
                           text=True)
    harness._cleanups.append(srv.kill)
    port = json.loads(srv.stdout.readline())["port"]
    url = "ws://127.0.0.1:%d%s/sandboxes/%s/proxy/port/%d/echo" % (admin.port, PREFIX, sid, port)
    threads_idle = proc_status(admin.proc.pid, "Threads")
    cli = subprocess.Popen(["node", script, "many", url, str(RELAYS)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, env=node_env(), text=True)
    harness._cleanups.append(cli.kill)

    def command(cmd):
        cli.stdin.write(cmd + "\n")
        cli.stdin.flush()
        line = cli.stdout.readline()
        assert line, "the client ended early"
        return json.loads(line)

    res = json.loads(cli.stdout.readline())
    assert res["opened"] == RELAYS and res["failed"] == 0, res
    # every relay is open now: the connection threads of the handshakes are gone
    harness.wait_until(lambda: proc_status(admin.proc.pid, "Threads") < THREAD_BOUND, 30, 0.2,
                       "thread count below %d" % THREAD_BOUND)
    threads_open = proc_status(admin.proc.pid, "Threads")
    res = command("echo")
    assert res["echoed"] == RELAYS and res["mismatch"] == 0, res
    threads_echo = proc_status(admin.proc.pid, "Threads")
    assert threads_echo < THREAD_BOUND, (threads_idle, threads_open, threads_echo)
    res = command("close")
    assert res["closed"] == RELAYS and res["codes"] == {"1000": RELAYS}, res
    # the relays are gone and the daemon still answers
    st, _ = admin.request("GET", "/livez")
    assert st == 200
    print("# threads: idle %d, %d relays open %d, after the echoes %d"
          % (threads_idle, RELAYS, threads_open, threads_echo))


MIB = 1 << 20
FORWARD = 50 * MIB


def block(i):
    """The i-th MiB of the stream: distinct per i."""
    return hashlib.sha256(b"block %d" % i).digest() * (MIB // 32)


def stream_hash(n_mib):
    h = hashlib.sha256()
    for i in range(n_mib):
        h.update(block(i))
    return h.hexdigest()


def frame_zero_mask(op, data):
    """A client frame masked with the key 0 (valid: RFC 6455 only asks for a key)."""
    n = len(data)
    if n < 126:
        head = struct.pack("!BB", 0x80 | op, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | op, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | op, 0x80 | 127, n)
    return head + b"\0\0\0\0" + data


def forward_app():
    """The forwarded application: on a connection it sends FORWARD bytes and reads
    FORWARD bytes at the same time; it reports the hash of what it read."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    result = {}

    def serve(c):
        def send():
            for i in range(FORWARD // MIB):
                c.sendall(block(i))
        t = threading.Thread(target=send, daemon=True)
        t.start()
        h, got = hashlib.sha256(), 0
        while got < FORWARD:
            b = c.recv(1 << 18)
            if not b:
                break
            h.update(b)
            got += len(b)
        result["got"], result["hash"] = got, h.hexdigest()
        t.join(120)
        result["sent"] = not t.is_alive()

    def accept():
        c, _ = lsock.accept()
        serve(c)
        c.close()
    threading.Thread(target=accept, daemon=True).start()
    harness._cleanups.append(lsock.close)
    return lsock.getsockname()[1], result


@test
def portforward_moves_50_mib_each_way_with_a_slow_reader():
    """50 MiB each way through a port-forward relay while the client reads slowly
    (first not at all for 3 s): both streams arrive intact and the daemon's RSS
    stays flat, because a side is not read while the other cannot take more."""
    admin, sid = setup()
    port, result = forward_app()
    pid = admin.proc.pid
    st, text, sock, buf = ws_connect(admin.port, "%s/sandboxes/%s/portforward?port=%d"
                                     % (PREFIX, sid, port), {})
    assert st == 101, text
    sock.settimeout(120)
    rss_base = proc_status(pid, "VmRSS")
    rss_peak = [rss_base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            rss_peak[0] = max(rss_peak[0], proc_status(pid, "VmRSS"))
            time.sleep(0.05)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def writer():
        for i in range(FORWARD // MIB):
            b = block(i)
            for off in range(0, MIB, 64 * 1024):
                sock.sendall(frame_zero_mask(2, b[off:off + 64 * 1024]))
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    time.sleep(3)  # the slow reader: nothing read yet, the daemon must hold back
    rss_stalled = proc_status(pid, "VmRSS")
    h, got, frames = hashlib.sha256(), 0, 0
    while got < FORWARD:
        op, data = buf.read_frame()
        assert op == 2, (op, data[:40] if data else data, got)
        h.update(data)
        got += len(data)
        frames += 1
        if frames % 64 == 0:
            time.sleep(0.01)  # still slow: at most ~64 frames per 10 ms
    w.join(120)
    assert not w.is_alive(), "the client could not send its 50 MiB"
    harness.wait_until(lambda: "hash" in result, 60, 0.1, "the app read the client's stream")
    stop.set()
    sampler.join()
    sock.sendall(frame_zero_mask(8, struct.pack("!H", 1000)))
    op, data = buf.read_frame()
    assert op == 8 and data[:2] == struct.pack("!H", 1000), (op, data)
    sock.close()
    want = stream_hash(FORWARD // MIB)
    assert got == FORWARD and h.hexdigest() == want, (got, "app->client stream differs")
    assert result["got"] == FORWARD and result["hash"] == want, result
    assert result["sent"], result
    growth = rss_peak[0] - rss_base
    print("# RSS KiB: base %d, stalled %d, peak %d" % (rss_base, rss_stalled, rss_peak[0]))
    assert growth < 16 * 1024, "RSS grew by %d KiB while relaying 2 x 50 MiB" % growth


@test
def relay_traffic_keeps_the_sandbox_from_idling():
    """Bytes through a relay are activity: the idle deadline in the store moves
    while a port-forward carries traffic (a touch at most every half idle
    timeout, made by the touch worker, not the loop)."""
    redis = harness.Redis()
    admin = Admin(config={"testop": {"proxy_base": "http://127.0.0.1:{port}"}}, redis=redis)
    harness._cleanups.append(admin.stop)
    sid = admin.start_sandbox(auto_clear_time_minutes=1)
    first = float(redis.cli("ZSCORE", "rock:expire", sid))
    port = harness_tcp_echo()
    st, text, sock, buf = ws_connect(admin.port, "%s/sandboxes/%s/portforward?port=%d"
                                     % (PREFIX, sid, port), {})
    assert st == 101, text
    sock.settimeout(30)
    t0 = time.time()
    while time.time() - t0 < 34:  # past half the idle timeout (30 s)
        sock.sendall(frame_zero_mask(2, b"ping %f" % time.time()))
        op, data = buf.read_frame()
        assert op == 2, (op, data)
        time.sleep(1)
    later = float(redis.cli("ZSCORE", "rock:expire", sid))
    sock.close()
    assert later >= first + 25, (first, later)


def harness_tcp_echo():
    """A TCP echo application on a loopback port."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)

    def serve(c):
        with c:
            while True:
                b = c.recv(65536)
                if not b:
                    return
                c.sendall(b)

    def accept():
        while True:
            try:
                c = lsock.accept()[0]
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    harness._cleanups.append(lsock.close)
    return lsock.getsockname()[1]


def holding_app():
    """A forwarded application that accepts connections and keeps them open."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    held = []

    def accept():
        while True:
            try:
                held.append(lsock.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    harness._cleanups.append(lsock.close)
    return lsock.getsockname()[1]


@test
def a_relay_whose_application_stops_reading_ends_after_proxy_timeout():
    """Bytes that wait proxy.timeout seconds for an application that takes none end the
    relay (no thread or buffer is held forever); an idle relay is never cut."""
    admin, sid = setup({"proxy": {"timeout": 1}})
    port = holding_app()  # accepts and never reads
    path = "%s/sandboxes/%s/portforward?port=%d" % (PREFIX, sid, port)
    st, text, idle, _ = ws_connect(admin.port, path, {})
    assert st == 101, text
    st, text, sock, buf = ws_connect(admin.port, path, {})
    assert st == 101, text
    sock.settimeout(30)
    sent = [0]

    def writer():
        try:
            while True:
                sock.sendall(frame_zero_mask(2, b"y" * 65536))
                sent[0] += 65536
        except OSError:
            return
    threading.Thread(target=writer, daemon=True).start()
    t0 = time.time()
    op, data = buf.read_frame()  # nothing comes back: the connection ends
    assert op is None, (op, data)
    took = time.time() - t0
    assert sent[0] > 0 and took < 20, (sent[0], took)
    admin.wait_for_line(r"portforward to sandbox %s: the application took no bytes for 1 s" % sid)
    # the idle relay opened first is still there after more than proxy.timeout
    time.sleep(1.5)
    idle.sendall(frame_zero_mask(9, b"still here?"))
    idle.settimeout(10)
    op, data = WsBuffer(idle).read_frame()
    assert op == 10 and data == b"still here?", (op, data)
    idle.close()
    sock.close()


@test
def relays_still_open_at_exit_are_closed_and_freed():
    """Clients that never answer the drain's 1001 outlast a 1 s drain: the relay
    loops close their relays when the daemon stops, it exits 0 at once, and the
    sanitizer builds find nothing leaked."""
    admin, sid = setup({"server": {"host": "127.0.0.1", "port": 0, "drain_timeout": 1}})
    port = holding_app()
    clients = []
    for _ in range(3):
        st, text, sock, buf = ws_connect(admin.port, "%s/sandboxes/%s/portforward?port=%d"
                                         % (PREFIX, sid, port), {})
        assert st == 101, text
        clients.append((sock, buf))
    # one of them has sent half a frame: the daemon is inside its parser
    clients[0][0].sendall(frame_zero_mask(2, b"x" * 1000)[:500])
    t0 = time.time()
    admin.proc.send_signal(signal.SIGTERM)
    for sock, buf in clients:
        sock.settimeout(30)
        op, data = buf.read_frame()
        assert op == 8 and data[:2] == struct.pack("!H", 1001), (op, data)
    # nobody answers: the daemon still exits, within the drain and its stop
    assert admin.proc.wait(timeout=30) == 0, admin.output()[-2000:]
    assert time.time() - t0 < 10, "the exit waited %.1f s" % (time.time() - t0)
    for sock, buf in clients:
        op, data = buf.read_frame()
        assert op is None, (op, data)  # then the connection ends
        sock.close()


if __name__ == "__main__":
    harness.run()
