# SPDX-License-Identifier: Apache-2.0
"""Lifecycle timings on OpenSandbox: rock-admin + the OpenSandbox simulator + Redis
on this machine, opensandbox.stop_mode pause + archive_enabled, N rounds, medians and maxima of

  stop       /stop answered (pause accepted and Paused observed)
  restart    /restart answered -> get_status(include_all_states=True) first shows is_alive
  archive    /archive answered -> get_status shows archived (resume, snapshot, Ready, release)
  restore    /restart of archived answered -> get_status first shows is_alive

Run from a configured build directory with the environment of bench/README.md
(ROCK_ADMIN_BIN, ROCK_OPENSANDBOX_PLUGIN_DIR, OPENSANDBOX_SIM):
  python3 ../../bench/bench_lifecycle.py [rounds]
Polls every 50 ms (the SDKs poll every 3 s, so a client sees these plus up to 3 s).
The simulator's snapshot is a copy of a small directory: on a real Docker host `docker commit`
dominates the archive time. Not part of `make check`: numbers depend on the machine.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
from harness import Admin, Redis, Sim, cleanup, wait_until  # noqa: E402

API_KEY = "bench-key"


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    redis = Redis()
    sim = Sim(api_key=API_KEY)
    admin = Admin(operator="opensandbox", redis=redis, config={"opensandbox": {
        "endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY,
        "stop_mode": "pause", "archive_enabled": True}, "log": {"level": "warning"}})
    times = {"stop": [], "restart": [], "archive": [], "restore": []}

    def status(sid):
        return admin.api("GET", "/get_status", query={"sandbox_id": sid,
                                                      "include_all_states": "True"})[1]["result"]

    def until(sid, pred, what):
        wait_until(lambda: pred(status(sid)), 120, 0.05, what)

    try:
        sid = admin.ok("POST", "/start_async", {"image": "python:3.11", "memory": "2g",
                                                "cpus": 1})["sandbox_id"]
        until(sid, lambda r: r["is_alive"], "alive")
        admin.ok("POST", "/execute", {"sandbox_id": sid, "command": "echo x > /tmp/f"})
        for _ in range(rounds):
            t = time.monotonic()
            admin.ok("POST", "/stop", {"sandbox_id": sid})
            times["stop"].append(time.monotonic() - t)
            t = time.monotonic()
            admin.ok("POST", "/restart", {"sandbox_id": sid})
            until(sid, lambda r: r["is_alive"], "alive after restart")
            times["restart"].append(time.monotonic() - t)
            admin.ok("POST", "/stop", {"sandbox_id": sid})
            t = time.monotonic()
            admin.ok("POST", "/sandboxes/%s/archive" % sid, {})
            until(sid, lambda r: r["state"] == "archived", "archived")
            times["archive"].append(time.monotonic() - t)
            t = time.monotonic()
            admin.ok("POST", "/restart", {"sandbox_id": sid})
            until(sid, lambda r: r["is_alive"], "alive after restore")
            times["restore"].append(time.monotonic() - t)
        admin.ok("POST", "/delete", {"sandbox_id": sid})
    finally:
        admin.check_exit = False
        cleanup()
    print("%-8s %10s %10s  (%d rounds)" % ("step", "median ms", "max ms", rounds))
    for k, v in times.items():
        print("%-8s %10.0f %10.0f" % (k, statistics.median(v) * 1000, max(v) * 1000))


if __name__ == "__main__":
    main()
