#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Debian packages end to end, on a throwaway machine (CI) as root:
#   1. build the three binary packages with `dpkg-buildpackage -us -uc -b` in a
#      scratch copy of the tree (tracked files only), without running their
#      `make check` (scripts/test.sh already runs it twice);
#   2. lintian: no error or warning (overrides are justified in debian/);
#   3. `apt-get install ./*.deb`; check the system user, the conffile's owner
#      and mode, the unit enabled but not started, `rock-admin -t` on the
#      shipped config with the packaged plugin, and the daemon serving with
#      the plugin loaded from the packaged path (through the simulator when
#      ROCK_SIM names it: start_async, get_status, execute, delete);
#   4. the SDK: the packaged example builds against the packaged header and
#      .pc, and the packaged daemon loads it (examples/.../check-installed.sh);
#   5. `apt-get purge`; nothing the packages installed is left behind.
#
# It installs and removes packages on this machine: it refuses to run unless
# root and CI=true or ROCK_TEST_DEB=1, and refuses if rock-admin is installed.
# Usage: deb-roundtrip.sh [SRCDIR]   Environment: ROCK_SIM (simulator binary).
set -eu
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
if [ "$(id -u)" != 0 ] || { [ "${CI:-}" != true ] && [ "${ROCK_TEST_DEB:-0}" != 1 ]; }; then
    echo "deb-roundtrip: needs root and CI=true or ROCK_TEST_DEB=1 (it installs packages)" >&2
    exit 77
fi
if dpkg-query -W -f '${Status}' rock-admin 2>/dev/null | grep -q installed; then
    echo "deb-roundtrip: rock-admin is already installed here; not touching it" >&2
    exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/rock-deb.XXXXXX")
chmod 755 "$work" # the daemon runs as the rock-admin user and reads its config here
pid=""
sim_pid=""
installed=0
cleanup() {
    if [ $installed = 1 ]; then
        apt-get purge -y -q rock-admin rock-admin-opensandbox rock-admin-dev >/dev/null 2>&1 || true
    fi
    for p in $pid $sim_pid; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
step() { echo "==> deb-roundtrip: $*"; }
fail() {
    echo "deb-roundtrip: FAIL: $*" >&2
    for f in "$work"/*.log; do
        [ -f "$f" ] && { echo "---- $f" >&2; tail -n 40 "$f" >&2; }
    done
    exit 1
}
export DEBIAN_FRONTEND=noninteractive

# What exists before, to compare after the purge (package databases, caches
# and logs change by design; so do the passwd/group files, see below).
snapshot() {
    find /etc /lib /usr /var/lib /opt /srv -xdev \
        \( -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/cache -o -path /var/log \
        -o -path /var/lib/systemd/deb-systemd-helper-masked -o -path '/usr/lib/python3*' \
        -o -path /etc/ld.so.cache -o -path /var/lib/ucf -o -name '__pycache__' \) -prune -o -print |
        grep -v -E '^/etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$' | sort
}

step "scratch copy of $src"
mkdir -p "$work/src"
if [ -d "$src/.git" ] || [ -f "$src/.git" ]; then
    (cd "$src" && git ls-files -z) | (cd "$src" && xargs -0 cp --parents -t "$work/src")
else
    (cd "$src" && tar --exclude=./_build --exclude=node_modules --exclude=.node-runtime -cf - .) |
        (cd "$work/src" && tar -xf -)
fi
[ -x "$work/src/debian/rules" ] || fail "no debian/rules in the copy"

step "dpkg-buildpackage -us -uc -b"
(cd "$work/src" && DEB_BUILD_OPTIONS="nocheck noddebs parallel=$(nproc 2>/dev/null || echo 2)" \
    dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1) || fail "dpkg-buildpackage"
ls "$work"/*.deb
for p in rock-admin rock-admin-opensandbox rock-admin-dev; do
    ls "$work/${p}_"*.deb >/dev/null 2>&1 || fail "no $p package built"
done
dpkg-deb -f "$work"/rock-admin_*.deb Provides | grep -q 'rock-admin-abi-1' ||
    fail "rock-admin does not provide rock-admin-abi-1"
dpkg-deb -f "$work"/rock-admin-opensandbox_*.deb Depends | grep -q 'rock-admin-abi-1' ||
    fail "rock-admin-opensandbox does not depend on rock-admin-abi-1"

step "lintian"
lintian --fail-on error,warning "$work"/*.changes >"$work/lintian.log" 2>&1 || {
    cat "$work/lintian.log"
    fail "lintian"
}
cat "$work/lintian.log"

snapshot >"$work/before.txt"
step "apt-get install ./*.deb"
(cd "$work" && apt-get install -y -q --no-install-recommends ./*.deb >"$work/install.log" 2>&1) ||
    fail "apt-get install"
installed=1
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
plugindir=/usr/lib/$triplet/rock-admin
[ -f "$plugindir/opensandbox.so" ] || fail "no plugin at $plugindir/opensandbox.so"
getent passwd rock-admin >/dev/null || fail "no rock-admin system user"
[ "$(stat -c '%U:%G %a' /etc/rock-admin/rock-admin.yml)" = "root:rock-admin 640" ] ||
    fail "conffile is $(stat -c '%U:%G %a' /etc/rock-admin/rock-admin.yml), want root:rock-admin 640"
dpkg-query -W -f '${Conffiles}\n' rock-admin | grep -q /etc/rock-admin/rock-admin.yml ||
    fail "/etc/rock-admin/rock-admin.yml is not a conffile"
[ -L /etc/systemd/system/multi-user.target.wants/rock-admin.service ] ||
    fail "the unit is not enabled"
for p in $(pgrep -x rock-admin || true); do
    [ "$(readlink "/proc/$p/exe" 2>/dev/null)" != /usr/sbin/rock-admin ] ||
        fail "the daemon was started at installation (pid $p)"
done
[ "$(pkg-config --variable=plugindir rock-admin-plugin)" = "$plugindir" ] ||
    fail "pkg-config plugindir is not $plugindir"

step "rock-admin -t on the shipped config (as the service user)"
runuser -u rock-admin -- /usr/sbin/rock-admin -t -c /etc/rock-admin/rock-admin.yml \
    >"$work/t.log" 2>&1 || fail "rock-admin -t on /etc/rock-admin/rock-admin.yml"
grep -q 'operator opensandbox' "$work/t.log" || fail "-t did not report the opensandbox operator"
cat "$work/t.log"

step "serve with the packaged plugin"
sim_port=""
if [ -n "${ROCK_SIM:-}" ] && [ -x "$ROCK_SIM" ]; then
    "$ROCK_SIM" --listen 127.0.0.1:0 --root "$work/sandboxes" >"$work/sim.log" 2>&1 &
    sim_pid=$!
    i=0
    while [ -z "$sim_port" ]; do
        sim_port=$(sed -n 's/.*opensandbox-sim ready on http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' "$work/sim.log")
        kill -0 "$sim_pid" 2>/dev/null || fail "the simulator exited"
        i=$((i + 1))
        [ $i -lt 200 ] || fail "the simulator did not become ready"
        [ -n "$sim_port" ] || sleep 0.1
    done
fi
# No plugin_dir: the daemon's compiled-in default must be the packaged path.
cat >"$work/serve.yml" <<EOF
server: { host: 127.0.0.1, port: 0, drain_timeout: 5 }
runtime: { operator_type: opensandbox }
opensandbox: { endpoint: "127.0.0.1:${sim_port:-9}", protocol: http, default_timeout: 30 }
EOF
chmod 644 "$work/serve.yml"
# setpriv execs the daemon itself (runuser would stay in between and turn
# SIGTERM into a non-zero exit).
setpriv --reuid=rock-admin --regid=rock-admin --init-groups \
    /usr/sbin/rock-admin -c "$work/serve.yml" >"$work/daemon.log" 2>&1 &
pid=$!
port=""
i=0
while [ -z "$port" ]; do
    port=$(sed -n 's/.*rock-admin ready on http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' "$work/daemon.log")
    kill -0 "$pid" 2>/dev/null || fail "the daemon exited"
    i=$((i + 1))
    [ $i -lt 200 ] || fail "the daemon did not become ready"
    [ -n "$port" ] || sleep 0.1
done
grep -q "from $plugindir/opensandbox.so" "$work/daemon.log" ||
    fail "the daemon log does not show the plugin loaded from $plugindir"
base="http://127.0.0.1:$port"
curl -sf "$base/readyz" >/dev/null || fail "/readyz"
if [ -n "$sim_port" ]; then
    api="$base/apis/envs/sandbox/v1"
    field() { python3 -c 'import json, sys; r = json.load(sys.stdin)["result"]; print(r[sys.argv[1]] if r else "")' "$1"; }
    id=$(curl -sS -X POST "$api/start_async" -H 'Content-Type: application/json' \
        -d '{"image": "python:3.11"}' | field sandbox_id)
    [ -n "$id" ] || fail "start_async returned no sandbox_id"
    alive=""
    i=0
    while [ "$alive" != True ]; do
        alive=$(curl -sS "$api/get_status?sandbox_id=$id" | field is_alive)
        i=$((i + 1))
        [ $i -lt 300 ] || fail "sandbox $id never became alive"
        [ "$alive" = True ] || sleep 0.1
    done
    out=$(curl -sS -X POST "$api/execute" -H 'Content-Type: application/json' \
        -d "{\"sandbox_id\": \"$id\", \"command\": \"echo packaged\"}" | field stdout)
    [ "$out" = packaged ] || fail "execute printed '$out'"
    curl -sS -X POST "$api/delete" -H 'Content-Type: application/json' \
        -d "{\"sandbox_id\": \"$id\"}" | grep -q '"Success"' || fail "delete"
    echo "deb-roundtrip: start_async, get_status, execute, delete through the packaged plugin"
fi
kill -TERM "$pid"
wait "$pid" || fail "the daemon exited non-zero after SIGTERM"
pid=""

step "SDK: the packaged example against the packaged header and .pc"
# pkg-config hides -I/usr/include unless asked; the example checks where it points.
PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 ROCK_ADMIN=/usr/sbin/rock-admin ROCK_PKGCONFIG_DIR="/usr/lib/$triplet/pkgconfig" \
    sh /usr/share/doc/rock-admin-dev/examples/hello-operator/check-installed.sh /usr ||
    fail "the packaged hello-operator example"

step "apt-get purge"
apt-get purge -y -q rock-admin rock-admin-opensandbox rock-admin-dev >"$work/purge.log" 2>&1 ||
    fail "apt-get purge"
installed=0
for p in rock-admin rock-admin-opensandbox rock-admin-dev; do
    if dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'installed\|config-files'; then
        fail "$p is still known to dpkg after purge"
    fi
done
snapshot >"$work/after.txt"
left=$(comm -13 "$work/before.txt" "$work/after.txt")
[ -z "$left" ] || {
    echo "$left"
    fail "files left behind after purge (listed above)"
}
gone=$(find /etc /lib /usr /var/lib -xdev -name '*rock-admin*' 2>/dev/null || true)
[ -z "$gone" ] || {
    echo "$gone"
    fail "rock-admin paths left after purge (listed above)"
}
# The system user stays on purge, as Debian keeps system users (debian/rock-admin.postrm).
echo "deb-roundtrip: PASS (built, lintian-clean, installed, checked, purged; nothing left behind)"
