#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Run rock-admin with a shared library preloaded, for benchmarks of another malloc: point
# ROCK_ADMIN_BIN at this script, BENCH_ADMIN at the real binary and BENCH_PRELOAD at the library:
#   BENCH_ADMIN=$PWD/core/rock-admin BENCH_PRELOAD=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 \
#   ROCK_ADMIN_BIN=$PWD/../../bench/preload.sh python3 ../../bench/bench_create_burst.py redis
# See docs/operations.md ("Another malloc") for what it changes.
set -eu
: "${BENCH_ADMIN:?set BENCH_ADMIN to the rock-admin binary}"
: "${BENCH_PRELOAD:?set BENCH_PRELOAD to the library to preload}"
LD_PRELOAD=$BENCH_PRELOAD exec "$BENCH_ADMIN" "$@"
