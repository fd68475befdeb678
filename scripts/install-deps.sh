#!/bin/sh
# Install what building and testing rock-admin needs on Debian 12 (apt), and
# the JavaScript test clients (npm, into tests/js/node_modules).
set -eu
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    build-essential autoconf automake libtool libtool-bin pkg-config \
    libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libjson-c-dev libyaml-dev \
    libltdl-dev libcmocka-dev libgnutls28-dev redis-server redis-tools redis-sentinel haproxy \
    python3 curl ca-certificates openssl abigail-tools clang >/dev/null
# Debian packaging (debian/, tests/packaging) and promtool (Debian's prometheus
# package ships it) for the metrics check.
$SUDO apt-get install -y -qq --no-install-recommends \
    debhelper dh-autoreconf dpkg-dev lintian prometheus >/dev/null
# The real-OpenSandbox stage (tests/real-opensandbox): network namespaces (ip),
# nsenter/unshare/setarch, timeout. Its stand's setup.sh installs docker.io and
# debootstrap itself.
$SUDO apt-get install -y -qq --no-install-recommends iproute2 util-linux coreutils >/dev/null
# Node.js >= 20 runs the OpenSandbox SDK conformance test; keep a newer one if present.
if ! command -v node >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if [ "${ROCK_SKIP_NPM:-0}" != 1 ]; then
    # The OpenSandbox SDK needs Node.js >= 20; Debian 12 ships 18. Then take a
    # Node 20 runtime from the npm registry (scripts/test.sh puts it on PATH).
    major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
    if [ "$major" -lt 20 ]; then
        npm install --no-audit --no-fund --loglevel=error --prefix tests/js/.node-runtime node@20
    fi
    (cd tests/js && (npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error))
fi
