#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The README's quickstart example (between the <!-- quickstart-example --> markers), run as a
# new user would, against a real OpenSandbox server instead of the simulator.
#   quickstart.sh BUILD_DIR OPENSANDBOX_ENDPOINT API_KEY
# Starts rock-admin (in-process store) on a free loopback port, extracts the example from
# README.md, points its API= line at that port, runs it and checks that step 3 printed "hello".
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$1 endpoint=$2 key=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/rock-real-qs.XXXXXX")
ra_pid=""
cleanup() {
    [ -n "$ra_pid" ] && kill -TERM "$ra_pid" 2>/dev/null && wait "$ra_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/rock-admin.yml" <<YML
server:
  host: 127.0.0.1
  port: $port
runtime:
  operator_type: opensandbox
  plugin_dir: $build/plugins/opensandbox/.libs
redis:
  host: ""
opensandbox:
  endpoint: $endpoint
  protocol: http
  api_key: "$key"
log:
  level: debug
YML
"$build/core/rock-admin" -c "$work/rock-admin.yml" >"$work/rock-admin.log" 2>&1 &
ra_pid=$!
i=0
until grep -q "rock-admin ready on" "$work/rock-admin.log"; do
    i=$((i + 1))
    [ $i -lt 100 ] || { cat "$work/rock-admin.log"; exit 1; }
    sleep 0.1
done
# the example, as the README shows it, with the API base on our port
sed -n '/<!-- quickstart-example:begin -->/,/<!-- quickstart-example:end -->/p' "$top/README.md" |
    sed -e '/^<!--/d' -e '/^```/d' -e "s#http://127.0.0.1:8080/#http://127.0.0.1:$port/#" \
        >"$work/example.sh"
grep -q "127.0.0.1:$port" "$work/example.sh" || { echo "quickstart: no API= line in the README example"; exit 1; }
t0=$(date +%s)
sh "$work/example.sh" >"$work/out.txt" 2>&1 || true
cat "$work/out.txt"
if grep -qx hello "$work/out.txt"; then
    echo "quickstart: ok, printed hello ($(($(date +%s) - t0)) s)"
else
    echo "quickstart: FAILED (no 'hello'); rock-admin log without the access lines:"
    grep -v ' info: access ' "$work/rock-admin.log" | tail -n 40
    echo "quickstart: the last requests:"
    grep ' info: access ' "$work/rock-admin.log" | tail -n 5
    exit 1
fi
