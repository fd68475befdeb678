#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Try rock-admin on one Debian 12 machine, without Docker or Kubernetes:
#   1. install the build dependencies (apt; no npm);
#   2. build into _build/quickstart;
#   3. start the OpenSandbox simulator on 127.0.0.1:8090;
#   4. run rock-admin in the foreground on 127.0.0.1:8080 with the OpenSandbox
#      plugin and the in-process store. Ctrl-C stops both.
# Then run the curl example from README.md in another terminal.
#
# Environment: ROCK_QUICKSTART_PORT (8080), ROCK_QUICKSTART_SIM_PORT (8090),
# ROCK_SKIP_DEPS=1 skips step 1.
#
# The simulator runs commands as YOU, on this machine: it is a stand-in for
# OpenSandbox, not an isolation boundary. Keep it on 127.0.0.1.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
port=${ROCK_QUICKSTART_PORT:-8080}
sim_port=${ROCK_QUICKSTART_SIM_PORT:-8090}
run="${XDG_RUNTIME_DIR:-/tmp}/rock-quickstart"
build="$top/_build/quickstart"

if [ "${ROCK_SKIP_DEPS:-0}" != 1 ]; then
    echo "==> installing dependencies (apt)"
    ROCK_SKIP_NPM=1 sh scripts/install-deps.sh
fi

echo "==> building into $build"
[ -x configure ] || autoreconf -fi
mkdir -p "$build"
if [ ! -f "$build/Makefile" ]; then
    (cd "$build" && "$top/configure" >configure.out 2>&1) || {
        cat "$build/configure.out"
        exit 1
    }
fi
make -C "$build" -j"$(nproc 2>/dev/null || echo 2)" >"$build/build.out" 2>&1 || {
    tail -n 40 "$build/build.out"
    exit 1
}
daemon="$build/core/rock-admin"
sim="$build/tests/opensandbox-sim/opensandbox-sim"
plugin_dir="$build/plugins/opensandbox/.libs"
[ -f "$plugin_dir/opensandbox.so" ] || {
    echo "quickstart: $plugin_dir/opensandbox.so was not built" >&2
    exit 1
}

mkdir -p "$run"
chmod 700 "$run"
cfg="$run/rock-admin.yml"
cat >"$cfg" <<EOF
# Written by scripts/quickstart.sh: local simulator, in-process store.
server:
  host: 127.0.0.1
  port: $port
runtime:
  operator_type: opensandbox
  plugin_dir: $plugin_dir
redis:
  host: ""
opensandbox:
  endpoint: 127.0.0.1:$sim_port
  protocol: http
EOF

sim_pid=""
ra_pid=""
cleanup() {
    trap - EXIT INT TERM
    if [ -n "$ra_pid" ]; then
        kill -TERM "$ra_pid" 2>/dev/null || true
        wait "$ra_pid" 2>/dev/null || true
    fi
    if [ -n "$sim_pid" ]; then
        kill -TERM "$sim_pid" 2>/dev/null || true
        wait "$sim_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

echo "==> starting opensandbox-sim on 127.0.0.1:$sim_port (log: $run/sim.log)"
"$sim" --listen "127.0.0.1:$sim_port" --root "$run/sandboxes" >"$run/sim.log" 2>&1 &
sim_pid=$!
i=0
until grep -q 'opensandbox-sim ready on' "$run/sim.log" 2>/dev/null; do
    if ! kill -0 "$sim_pid" 2>/dev/null || [ $i -ge 100 ]; then
        echo "quickstart: the simulator did not start:" >&2
        cat "$run/sim.log" >&2
        exit 1
    fi
    i=$((i + 1))
    sleep 0.1
done

echo "==> checking the configuration ($cfg)"
"$daemon" -t -c "$cfg" >/dev/null
echo "==> starting rock-admin on http://127.0.0.1:$port (Ctrl-C stops it and the simulator)"
echo "    API prefix: http://127.0.0.1:$port/apis/envs/sandbox/v1 - try the curl example in README.md"
# Started in the background so that the traps above can forward signals to it.
"$daemon" -c "$cfg" &
ra_pid=$!
rc=0
wait "$ra_pid" || rc=$?
ra_pid=""
exit $rc
