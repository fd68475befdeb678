#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The real-OpenSandbox stage of scripts/test.sh: the README quickstart and the opensandbox
# plugin's integration tests against the REAL OpenSandbox lifecycle server + execd (docker
# runtime), first in host networking, then in bridge networking inside a private network
# namespace (rock-admin, redis and the test clients run inside it too; nothing leaves it).
#   stage.sh BUILD_DIR STAND_DIR
# STAND_DIR holds setup.sh / up.sh / up-netns.sh and the OpenSandbox source (../shared/opensandbox).
# Its work dir $OSR (default /tmp/osreal) is the cache between runs on one machine: the
# extracted Go toolchain, the built execd, the images and the root filesystems; setup.sh
# re-does only what is missing, so a fresh machine builds everything (about 10 min on 2 cores).
# Needs root (dockerd, network namespaces); the E2B test needs node and tests/js/node_modules
# (ROCK_TEST_NODE_MODULES, as scripts/test.sh installs them). After the bridge-mode run it checks
# that every route of rock-admin's route tables was served through a bridge-mode endpoint
# (routes.py, from the access logs of every rock-admin the tests started) and prints
#   real-opensandbox bridge routes: <N>/<M> exercised
# failing with the list of the routes no request reached. Last, one summary line:
#   real-opensandbox: <passed> passed, <failed> failed, <skipped> skipped (<seconds> s)
# ROCK_REAL_OS_TESTS and ROCK_REAL_OS_MODES ("host bridge") narrow a run by hand; the two modes
# run at the same time (ROCK_REAL_OS_SEQUENTIAL=1: one after the other).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
stand=$2
here="$top/tests/real-opensandbox"
export OSR="${OSR:-/tmp/osreal}"
log="$build/real-opensandbox"
rm -rf "$log"
mkdir -p "$log"
t0=$(date +%s)
pass=0 fail=0 skip=0 early=0
# The plugin's integration tests, one at a time (host networking: one live sandbox at a time).
TESTS="${ROCK_REAL_OS_TESTS:-test_opensandbox.py test_lifecycle_opensandbox.py test_sessions.py test_proxy_opensandbox.py test_routes_opensandbox.py test_e2b.py}"
MODES="${ROCK_REAL_OS_MODES:-host bridge}"
node_modules="${ROCK_TEST_NODE_MODULES:-$top/tests/js/node_modules}"

stop_all() {
    bash "$stand/up-netns.sh" stop >/dev/null 2>&1
    bash "$stand/up.sh" stop >/dev/null 2>&1
}
trap 'stop_all' EXIT INT TERM

note() { # result name detail
    case $1 in
    ok) pass=$((pass + 1)) ;;
    skip) skip=$((skip + 1)) ;;
    *) fail=$((fail + 1)) ;;
    esac
    echo "real-opensandbox [$2]: $1${3:+ ($3)}"
    echo "real-opensandbox [$2]: $1${3:+ ($3)}" >>"$log/notes.txt" # for scripts/failure-digest.py
}

qs_why() { # quickstart log -> its last warning or error line (for the failure digest)
    grep -E ' (warning|error): ' "$1" | tail -n 1 | cut -c1-240
}

run_tests() { # mode, prefix command (empty or "up-netns.sh exec")
    mode=$1
    shift
    for t in $TESTS; do
        out="$log/$mode-${t%.py}.log"
        ts=$(date +%s)
        env ROCK_ADMIN_BIN="$build/core/rock-admin" \
            ROCK_TEST_PLUGIN_DIR="$build/tests/.libs" \
            ROCK_OPENSANDBOX_PLUGIN_DIR="$build/plugins/opensandbox/.libs" \
            OPENSANDBOX_SIM="$build/tests/opensandbox-sim/opensandbox-sim" \
            ROCK_SRCDIR="$top" PYTHONPATH="$top/tests/lib" PYTHONDONTWRITEBYTECODE=1 \
            ROCK_TEST_OPENSANDBOX_URL=http://127.0.0.1:18080 \
            ROCK_TEST_OPENSANDBOX_API_KEY=test-api-key \
            ROCK_TEST_OPENSANDBOX_NETWORK="$mode" \
            ROCK_TEST_NODE_MODULES="$node_modules" \
            ROCK_TEST_ROUTES_FILE="$log/$mode-routes.txt" \
            "$@" timeout 1500 python3 "$top/tests/integration/$t" >"$out" 2>&1
        rc=$?
        grep -E '^(ok|not ok) - |^# upstream stream ended early' "$out" | sed "s/^/  $mode $t: /"
        early=$((early + $(grep -c '^# upstream stream ended early' "$out")))
        p=$(grep -c '^ok - ' "$out")
        s=$(grep -c '^ok - .* # SKIP ' "$out")
        f=$(grep -c '^not ok - ' "$out")
        pass=$((pass + p - s))
        skip=$((skip + s))
        fail=$((fail + f))
        if [ $rc != 0 ] && [ "$f" = 0 ]; then
            fail=$((fail + 1))
            echo "  $mode $t: exited $rc"
        fi
        [ $rc = 0 ] || tail -n 60 "$out"
        echo "real-opensandbox [$mode $t]: $((p - s)) passed, $f failed, $s skipped ($(($(date +%s) - ts)) s)"
    done
}

echo "==> [real-opensandbox] setup.sh (cached in $OSR)"
ts=$(date +%s)
if bash "$stand/setup.sh" >"$log/setup.log" 2>&1; then
    note ok setup "$(($(date +%s) - ts)) s"
else
    tail -n 30 "$log/setup.log"
    note FAILED setup "$(grep -v '^[[:space:]]*$' "$log/setup.log" | tail -n 1 | cut -c1-200)"
    echo "real-opensandbox: $pass passed, $fail failed, $skip skipped ($(($(date +%s) - t0)) s)"
    exit 1
fi

host_stage() {
    echo "==> [real-opensandbox] host networking"
    if [ "$(cat "$log/up-host.rc")" = 0 ]; then
        # the simulator held to the real execd and server (before any test sandbox exists)
        if python3 "$here/conformance.py" "$build" "$OSR/bin/execd" http://127.0.0.1:18080 \
            test-api-key >"$log/conformance.log" 2>&1; then
            note ok conformance "$(tail -n 1 "$log/conformance.log")"
        else
            cat "$log/conformance.log"
            note FAILED conformance
        fi
        # host networking: the next sandbox's execd binds 44772 only once the last one is gone
        python3 -c 'import socket, sys, time
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", 44772), 0.5).close()
        time.sleep(0.2)
    except OSError:
        sys.exit(0)
sys.exit(1)' || note FAILED "host: port 44772 still held after the conformance test"
        if sh "$here/quickstart.sh" "$build" 127.0.0.1:18080 test-api-key >"$log/host-quickstart.log" 2>&1; then
            note ok "host quickstart" "$(tail -n 1 "$log/host-quickstart.log")"
        else
            cat "$log/host-quickstart.log"
            note FAILED "host quickstart" "$(qs_why "$log/host-quickstart.log")"
        fi
        run_tests host
    else
        cat "$log/up-host.log"
        note FAILED "host up.sh"
    fi
    bash "$stand/up.sh" stop >/dev/null 2>&1
}

bridge_stage() {
    echo "==> [real-opensandbox] bridge networking in network namespace osb"
    if [ "$(cat "$log/up-bridge.rc")" = 0 ]; then
        ns="bash $stand/up-netns.sh exec"
        if $ns sh "$here/quickstart.sh" "$build" 127.0.0.1:18080 test-api-key >"$log/bridge-quickstart.log" 2>&1; then
            note ok "bridge quickstart" "$(tail -n 1 "$log/bridge-quickstart.log")"
        else
            cat "$log/bridge-quickstart.log"
            note FAILED "bridge quickstart" "$(qs_why "$log/bridge-quickstart.log")"
        fi
        run_tests bridge bash "$stand/up-netns.sh" exec
        # every route served through a bridge-mode endpoint (from the access logs)
        python3 "$here/routes.py" "$top" "$log/bridge-routes.txt" bridge >"$log/bridge-routes.log"
        rc=$?
        tail -n 1 "$log/bridge-routes.log"
        if [ $rc = 0 ]; then
            note ok "bridge routes"
        else
            grep 'NOT EXERCISED' "$log/bridge-routes.log"
            note FAILED "bridge routes"
        fi
    else
        cat "$log/up-bridge.log"
        note FAILED "bridge up-netns.sh"
    fi
}

run_mode() { # mode: its stage with its own counts, written to $log/<mode>.counts
    pass=0 fail=0 skip=0 early=0
    "${1}_stage"
    echo "$pass $fail $skip $early" >"$log/$1.counts"
}

# The two stands share nothing (own dockerd, data root, server and network namespace), so the
# modes run at once unless ROCK_REAL_OS_SEQUENTIAL=1; each mode's output follows when both are
# done (live in BUILD/real-opensandbox/<mode>.out).
# The stands start one after the other: both scripts put the server's source into the one root
# file system they share (rm -rf + cp), so starting them at once races.
for m in $MODES; do
    case $m in
    host) bash "$stand/up.sh" >"$log/up-host.log" 2>&1 ;;
    bridge) bash "$stand/up-netns.sh" start >"$log/up-bridge.log" 2>&1 ;;
    esac
    echo $? >"$log/up-$m.rc"
done
if [ "${ROCK_REAL_OS_SEQUENTIAL:-0}" = 1 ]; then
    for m in $MODES; do
        run_mode "$m" >"$log/$m.out" 2>&1
    done
else
    echo "==> [real-opensandbox] $MODES networking at once (live: $log/<mode>.out)"
    for m in $MODES; do
        run_mode "$m" >"$log/$m.out" 2>&1 &
    done
    wait
fi
for m in $MODES; do
    cat "$log/$m.out"
    if [ -f "$log/$m.counts" ] && read -r p f s e <"$log/$m.counts"; then
        pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s)) early=$((early + e))
    else
        note FAILED "$m: no result"
    fi
done
stop_all
trap - EXIT INT TERM
echo "real-opensandbox: $pass passed, $fail failed, $skip skipped, $early upstream early stream ends sent once more ($(($(date +%s) - t0)) s)"
[ $fail = 0 ]
