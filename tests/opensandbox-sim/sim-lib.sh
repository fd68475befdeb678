# Shared helpers for the opensandbox-sim tests (sourced by the *.test scripts).
# start_sim [options...] starts the simulator on 127.0.0.1:0 in a fresh temp --root and exports
# SIM_URL (http://127.0.0.1:PORT), SIM_HOSTPORT, SIM_ROOT and SIM_PID. The EXIT trap stops it
# with SIGTERM and fails the test if it does not exit 0 (so ASan leak reports fail the test).
set -eu

: "${OPENSANDBOX_SIM:?OPENSANDBOX_SIM must point to the opensandbox-sim binary}"
: "${srcdir:=$(dirname "$0")}"
SIM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/opensandbox-sim-test.XXXXXX")
SIM_PID=

# Stop the simulator (SIGTERM), check its exit status, remove the temp dir.
sim_cleanup() {
    rc=$?
    if [ -n "$SIM_PID" ] && kill -0 "$SIM_PID" 2>/dev/null; then
        kill -TERM "$SIM_PID" 2>/dev/null || true
        sim_rc=0
        wait "$SIM_PID" || sim_rc=$?
        if [ "$sim_rc" -ne 0 ]; then
            echo "FAIL: opensandbox-sim exited with status $sim_rc after SIGTERM" >&2
            [ "$rc" -ne 0 ] || rc=1
        fi
    fi
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ -s "$SIM_TMP/err" ]; then
        echo "--- opensandbox-sim stderr ---" >&2
        tail -n 50 "$SIM_TMP/err" >&2
    fi
    rm -rf "$SIM_TMP"
    exit "$rc"
}
trap sim_cleanup EXIT
trap 'exit 1' INT TERM

# Skip (exit 77) when the npm packages are not installed.
need_node_modules() {
    if ! command -v node >/dev/null 2>&1; then
        echo "ERROR: node not found (scripts/install-deps.sh installs it)" >&2
        exit 99
    fi
    if [ ! -d "${ROCK_TEST_NODE_MODULES:-}/@alibaba-group/opensandbox" ]; then
        echo "ERROR: @alibaba-group/opensandbox not found under ROCK_TEST_NODE_MODULES=${ROCK_TEST_NODE_MODULES:-}" >&2
        echo "       run: (cd tests/js && npm ci)" >&2
        exit 99
    fi
}

# Skip (exit 77) without python3.
need_python3() {
    if ! command -v python3 >/dev/null 2>&1; then
        echo "SKIP: python3 not found" >&2
        exit 77
    fi
}

# Start the simulator and wait (max 10 s) for its ready line.
start_sim() {
    "$OPENSANDBOX_SIM" --listen 127.0.0.1:0 --root "$SIM_TMP/root" "$@" \
        >"$SIM_TMP/out" 2>"$SIM_TMP/err" &
    SIM_PID=$!
    i=0
    while ! grep -q '^opensandbox-sim ready on http://' "$SIM_TMP/out" 2>/dev/null; do
        if ! kill -0 "$SIM_PID" 2>/dev/null; then
            echo "FAIL: opensandbox-sim died before becoming ready" >&2
            SIM_PID=
            exit 1
        fi
        i=$((i + 1))
        if [ "$i" -gt 200 ]; then
            echo "FAIL: opensandbox-sim not ready after 10 s" >&2
            exit 1
        fi
        sleep 0.05
    done
    SIM_URL=$(sed -n 's/^opensandbox-sim ready on //p' "$SIM_TMP/out")
    SIM_HOSTPORT=${SIM_URL#http://}
    SIM_ROOT=$SIM_TMP/root
    export SIM_URL SIM_HOSTPORT SIM_ROOT SIM_PID
}
