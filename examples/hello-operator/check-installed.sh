#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Check the installed plugin SDK end to end, the way a third party uses it:
#   1. build hello.so OUT OF TREE with the installed header, found through the
#      installed rock-admin-plugin.pc;
#   2. have the installed daemon accept it with `rock-admin -t`;
#   3. run the installed daemon with it on a free port and drive start_async,
#      get_status, execute and delete with curl.
#
# Usage: check-installed.sh PREFIX
#   PREFIX is where the install tree is on disk: $(DESTDIR)$(prefix).
# Environment: ROCK_ADMIN (daemon, default: PREFIX/sbin/rock-admin),
#   ROCK_PKGCONFIG_DIR (directory holding rock-admin-plugin.pc, default: found under PREFIX).
set -eu
[ $# = 1 ] || {
    echo "usage: $0 PREFIX" >&2
    exit 2
}
prefix=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
daemon=${ROCK_ADMIN:-$prefix/sbin/rock-admin}
pcdir=${ROCK_PKGCONFIG_DIR:-$(dirname "$(find "$prefix" -name rock-admin-plugin.pc | head -n 1)")}
[ -x "$daemon" ] || {
    echo "check-installed: no daemon at $daemon" >&2
    exit 1
}
[ -f "$pcdir/rock-admin-plugin.pc" ] || {
    echo "check-installed: no rock-admin-plugin.pc under $prefix" >&2
    exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/rock-hello.XXXXXX")
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
    echo "check-installed: FAIL: $*" >&2
    [ -f "$work/daemon.log" ] && sed 's/^/  daemon: /' "$work/daemon.log" >&2
    exit 1
}

# 1. Out-of-tree build. The .pc's prefix is redefined to PREFIX so that a
#    DESTDIR staging tree works too; nothing from the source tree is used.
cp "$here/hello.c" "$here/Makefile" "$work/"
PKG_CONFIG_PATH="$pcdir" PKG_CONFIG="pkg-config --define-variable=prefix=$prefix" \
    make -s -C "$work" >"$work/build.log" 2>&1 || {
    cat "$work/build.log" >&2
    fail "building hello.so against the installed SDK"
}
cflags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$prefix" --cflags rock-admin-plugin)
case "$cflags" in
*"$prefix"*) ;;
*) fail "pkg-config --cflags ($cflags) does not point into $prefix" ;;
esac
# The .pc's ABI numbers are generated from the installed header (one source).
hdr=$(find "$prefix" -path '*/rock-admin/operator.h' | head -n 1)
for part in MAJOR MINOR; do
    want=$(sed -n "s/^#define RK_OPERATOR_ABI_$part  *//p" "$hdr")
    var=$(echo "abi_$part" | tr 'A-Z' 'a-z')
    got=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable="$var" rock-admin-plugin)
    [ -n "$want" ] && [ "$got" = "$want" ] ||
        fail "rock-admin-plugin.pc has $var=$got but $hdr says $want"
done
plugindir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=plugindir rock-admin-plugin)
[ -n "$plugindir" ] || fail "rock-admin-plugin.pc has no plugindir variable"
echo "check-installed: built hello.so with $cflags (plugindir $plugindir)"

# 2. The installed daemon validates config + plugin without serving.
cat >"$work/rock-admin.yml" <<EOF
server:
  host: 127.0.0.1
  port: 0
  drain_timeout: 5
runtime:
  operator_type: hello
hello:
  max_sandboxes: 10
EOF
export ROCK_PLUGIN_DIR="$work"
unset ROCK_CONFIG || true
"$daemon" -t -c "$work/rock-admin.yml" >"$work/t.out" 2>&1 || {
    cat "$work/t.out" >&2
    fail "rock-admin -t refused the example plugin"
}
grep -q 'operator hello' "$work/t.out" || fail "rock-admin -t did not report the hello operator"
echo "check-installed: rock-admin -t accepts hello.so"

# 3. Serve on a free port and drive the API.
"$daemon" -c "$work/rock-admin.yml" >"$work/daemon.log" 2>&1 &
pid=$!
port=""
i=0
while [ -z "$port" ]; do
    port=$(sed -n 's/.*rock-admin ready on http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' "$work/daemon.log")
    kill -0 "$pid" 2>/dev/null || fail "the daemon exited"
    i=$((i + 1))
    [ $i -lt 100 ] || fail "the daemon did not become ready"
    [ -n "$port" ] || sleep 0.1
done
api="http://127.0.0.1:$port/apis/envs/sandbox/v1"
post() { curl -sS -X POST "$api/$1" -H 'Content-Type: application/json' -d "$2"; }
field() { python3 -c 'import json, sys; r = json.load(sys.stdin)["result"]; print(r[sys.argv[1]] if r else "")' "$1"; }

id=$(post start_async '{"image": "hello:latest"}' | field sandbox_id)
[ -n "$id" ] || fail "start_async returned no sandbox_id"
alive=""
i=0
while [ "$alive" != True ]; do
    alive=$(curl -sS "$api/get_status?sandbox_id=$id" | field is_alive)
    i=$((i + 1))
    [ $i -lt 50 ] || fail "sandbox $id never became alive"
    [ "$alive" = True ] || sleep 0.1
done
out=$(post execute "{\"sandbox_id\": \"$id\", \"command\": \"echo hello\"}" | field stdout)
[ "$out" = hello ] || fail "execute printed '$out', expected 'hello'"
status=$(post delete "{\"sandbox_id\": \"$id\"}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["status"])')
[ "$status" = Success ] || fail "delete answered $status"
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || fail "/readyz is not 200"

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ $rc = 0 ] || fail "the daemon exited with $rc after SIGTERM"
echo "check-installed: PASS (out-of-tree hello.so loaded by the installed daemon; start_async, get_status, execute, delete)"
