# SPDX-License-Identifier: Apache-2.0
"""Commands through the operator ABI 1.2 asynchronous forms (exec_start,
session_run_start), end to end over real sockets:

- 2,000 concurrent /execute through opensandbox.so against the simulator all
  succeed while every one of them is held by the plugin's event loop
  (rock_admin_upstream_async_calls) and the daemon has no thread per command
  or per connection;
- testop's own loop completes commands, timeouts, cancellations (client gone)
  and session commands from its thread, and a command that ends inside
  exec_start;
- plugins built for ABI 1.0 and 1.1 keep serving /execute on the blocking path.

Thread accounting: the engine runs its connections on a few event loops and
a deferred request holds no thread while it waits (its connection is
suspended). The assertions count the daemon's threads from /proc: the whole
process must fit a constant, whatever the number of commands in flight.
"""
import json
import os
import re
import resource
import socket
import time

from harness import (PREFIX, Admin, Redis, Sim, read_responses_releasing, run, test, tmpdir,
                     wait_until)

# The daemon's threads with the configuration below (WORKERS): main, the event
# loops, the worker pool, the watchdog, the relay loops, background jobs
# (sweeper, reconciler, create workers), the plugin's loop and helper.
# Independent of the load.
WORKERS = {"server": {"workers": 16, "event_threads": 2}, "proxy": {"relay_threads": 2}}
THREADS_MAX = 48


def threads(pid):
    """(all threads, libmicrohttpd per-connection threads) of pid."""
    names = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                names.append(f.read().strip())
        except OSError:
            pass  # ended meanwhile
    return len(names), sum(1 for n in names if n.startswith("MHD-connection"))


def gauge(admin, name):
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    assert st == 200, st
    m = re.search(r"^%s (\d+)$" % name, body.decode(), re.M)
    assert m, name
    return int(m.group(1))


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def send_many(port, bodies):
    """Open one connection per body and send POST /execute on each (Connection:
    close); returns the sockets."""
    socks = []
    for b in bodies:
        data = json.dumps(b)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(("POST %s/execute HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                   % (PREFIX, len(data), data)).encode())
        socks.append(s)
    return socks


def read_all(socks, timeout, fifo=None):
    """Read every socket to EOF (releasing the commands waiting on fifo, if given); returns
    [(http status, parsed body)] in order."""
    return [(status, json.loads(body))
            for status, body in read_responses_releasing(socks, timeout, fifo)]


@test
def two_thousand_in_flight_execute_through_opensandbox():
    n = 2000
    raise_nofile()
    redis = Redis()
    sim = Sim(extra=["--max-connections", str(n + 300)])
    admin = Admin(operator="opensandbox", redis=redis, config={
        "server": dict(WORKERS["server"], max_connections=n + 300, per_ip_connections=n + 300),
        "proxy": WORKERS["proxy"],
        "opensandbox": {"endpoint": sim.endpoint, "protocol": "http"}})
    sid = admin.start_sandbox()
    assert admin.ok("POST", "/execute", {"sandbox_id": sid, "command": "echo warm"}) == \
        {"stdout": "warm\n", "stderr": "", "exit_code": 0}
    pid = admin.proc.pid
    # Each command waits until the test releases it (opening and closing the
    # FIFO's write end ends every `cat` blocked on it), so all n are in flight
    # at once however slow the build (sanitizers) is.
    fifo = os.path.join(tmpdir("rock-async-"), "release")
    os.mkfifo(fifo)
    socks = send_many(admin.port, [{"sandbox_id": sid, "timeout": 600,
                                    "command": "cat '%s' >/dev/null; echo done %d" % (fifo, i)}
                                   for i in range(n)])
    # Every command is in flight at once, held by the plugin's loop: no
    # thread waits for any of them in the plugin.
    wait_until(lambda: gauge(admin, "rock_admin_upstream_async_calls") == n, 300, 0.2,
               "%d commands held by the plugin's loop" % n)
    total, conn_threads = threads(pid)
    with open("/proc/%d/status" % pid) as f:
        rss = [l.split()[1] for l in f if l.startswith("VmRSS:")][0]
    print("with %d commands in flight: %d threads (%d connection threads), RSS %s KiB"
          % (n, total, conn_threads, rss))
    assert conn_threads == 0 and total <= THREADS_MAX, (total, conn_threads)
    replies = read_all(socks, 300, fifo)
    for i, (status, js) in enumerate(replies):
        assert status == 200 and js["status"] == "Success", (i, status, js)
        assert js["result"] == {"stdout": "done %d\n" % i, "stderr": "", "exit_code": 0}, js
    assert gauge(admin, "rock_admin_upstream_async_calls") == 0
    # the threads that served the connections are gone again
    assert threads(pid)[0] <= THREADS_MAX


@test
def testop_commands_end_on_the_plugin_loop():
    admin = Admin(config=WORKERS)
    sid = admin.start_sandbox()
    pid = admin.proc.pid
    n = 200
    socks = send_many(admin.port, [{"sandbox_id": sid, "command": "wait 30"}] * n)
    wait_until(lambda: gauge(admin, "rock_admin_upstream_async_calls") == n, 30, 0.1,
               "%d commands on testop's loop" % n)
    total, conn_threads = threads(pid)
    assert conn_threads == 0 and total <= THREADS_MAX, (total, conn_threads)
    for status, js in read_all(socks, 60):
        assert status == 200 and js["result"]["stdout"] == "waited\n", js
    # the end reported from inside exec_start (before it returned)
    assert admin.ok("POST", "/execute", {"sandbox_id": sid, "command": "inline echo now"}) == \
        {"stdout": "now\n", "stderr": "", "exit_code": 0}
    # a command killed for its timeout, mapped by the core on the plugin's thread
    st, js = admin.api("POST", "/execute", {"sandbox_id": sid, "command": "sleep", "timeout": 9})
    assert st == 200 and js["status"] == "Failed", js
    assert js["error"] == "Timeout (9.0s) exceeded while running command", js
    # check=True's failure text
    st, js = admin.api("POST", "/execute", {"sandbox_id": sid, "command": "fail 3",
                                            "check": True})
    assert js["status"] == "Failed" and "Command failed with exit code 3." in js["error"], js
    # session commands take the same path
    assert admin.ok("POST", "/create_session", {"sandbox_id": sid, "session": "s"}) == \
        {"output": "", "session_type": "bash"}
    r = admin.ok("POST", "/run_in_session", {"sandbox_id": sid, "session": "s",
                                              "command": "echo hi"})
    assert r["output"] == "hi\n" and r["exit_code"] == 0, r
    # a client that leaves: the loop sees cancelled() and ends the command long
    # before its 100 s would have run out
    s = send_many(admin.port, [{"sandbox_id": sid, "command": "wait 1000"}])[0]
    wait_until(lambda: gauge(admin, "rock_admin_upstream_async_calls") == 1, 10, 0.05, "running")
    s.close()
    left = time.time()
    wait_until(lambda: gauge(admin, "rock_admin_upstream_async_calls") == 0, 10, 0.05,
               "the command ended after its client left")
    assert time.time() - left < 3, time.time() - left
    st, body, _ = admin.request("GET", "/metrics", raw=True)
    assert 'rock_admin_upstream_calls_total{op="exec",outcome="cancelled"} 1' in body.decode()


@test
def abi_10_and_11_plugins_run_commands_on_the_blocking_path():
    for op in ("testop_v10", "testop_v11"):
        admin = Admin(operator=op)
        sid = admin.start_sandbox()
        s = send_many(admin.port, [{"sandbox_id": sid, "command": "wait 20"}])[0]
        wait_until(lambda: gauge(admin, "rock_admin_upstream_inflight_calls") == 1, 10, 0.05,
                   "the command running")
        assert gauge(admin, "rock_admin_upstream_async_calls") == 0
        r = admin.ok("POST", "/execute", {"sandbox_id": sid, "command": "echo %s" % op})
        assert r == {"stdout": op + "\n", "stderr": "", "exit_code": 0}, r
        status, js = read_all([s], 30)[0]
        assert status == 200 and js["result"]["stdout"] == "waited\n", js


if __name__ == "__main__":
    run()
