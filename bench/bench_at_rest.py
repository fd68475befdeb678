# SPDX-License-Identifier: Apache-2.0
"""What a deployment at rest costs: N sandboxes created (start_async from 256 connections against
the OpenSandbox simulator, --ready-delay-ms 0) and alive, then nothing but the admin's own
background work (the reconciler lists the backend and checks every record each
runtime.reconcile_interval_ms) for a measured window. Prints the CPU share of the admin and of the
simulator (which answers the list pages) over the window, from /proc.

Scenarios: "memory" (in-process store) and "redis" (one admin on Redis). Run from a configured
build directory with ROCK_ADMIN_BIN, ROCK_OPENSANDBOX_PLUGIN_DIR and OPENSANDBOX_SIM set:
  python3 ../../bench/bench_at_rest.py [memory|redis] [N] [SECONDS]
Not part of `make check`: numbers depend on the machine.
"""
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
import bench_create_burst as burst  # noqa: E402
from harness import Admin, Redis, Sim, cleanup  # noqa: E402


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "memory"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 16000
    window = float(sys.argv[3]) if len(sys.argv) > 3 else 20.0
    sim = Sim(api_key=burst.API_KEY, ready_delay_ms=0,
              extra=["--max-sandboxes", str(n + 100), "--max-connections", "4096"])
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": burst.API_KEY},
           "server": {"per_ip_connections": 0, "max_connections": 4096},
           "log": {"level": "warning"}}
    admin = None
    try:
        redis = Redis() if which == "redis" else None
        admin = Admin(operator="opensandbox", config=cfg, redis=redis)

        def counters():
            """Reconciler passes so far (the admin's metric, when it has it) and Redis GETs (one
            per record a pass reads)."""
            st, body, _ = admin.request("GET", "/metrics", raw=True)
            passes = None
            for line in body.decode().splitlines() if st == 200 else []:
                if line.startswith("rock_admin_reconciler_passes_total "):
                    passes = float(line.split()[1])
            gets = 0
            for line in (redis.cli("INFO", "commandstats").splitlines() if redis else []):
                if line.startswith("cmdstat_get:"):
                    gets = int(line.split("calls=", 1)[1].split(",", 1)[0])
            return passes, gets

        async def fill():
            cs, sent, accepted, refused, _ = await burst.burst([admin.port], n, 256)
            alive, _ = await burst.poll_alive(cs, sent, 600, not_before=0)  # ready_delay_ms=0
            for c in cs:
                c.close()
            return len(accepted), len(alive)
        accepted, alive = asyncio.run(fill())
        time.sleep(5)  # the last transitions written
        p0, g0 = counters()
        a0, s0, t0 = (burst.cpu_seconds(admin.proc.pid), burst.cpu_seconds(sim.proc.pid),
                      time.monotonic())
        time.sleep(window)
        secs = time.monotonic() - t0
        a1, s1 = burst.cpu_seconds(admin.proc.pid), burst.cpu_seconds(sim.proc.pid)
        p1, g1 = counters()
        print("%-6s at rest with %d sandboxes alive (%d accepted): over %.0f s the admin used "
              "%.1f%% of a core, the simulator %.1f%%"
              % (which, alive, accepted, secs, 100 * (a1 - a0) / secs, 100 * (s1 - s0) / secs))
        if p0 is not None:
            print("       reconciler passes: %.2f per second" % ((p1 - p0) / secs))
        if redis:
            print("       Redis GETs (one per record a pass reads): %.0f per second" % (
                (g1 - g0) / secs))
    finally:
        if admin:
            admin.check_exit = False
        cleanup()


if __name__ == "__main__":
    main()
