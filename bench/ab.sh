#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Side-by-side comparison of two builds: run one benchmark command alternately with each build's
# rock-admin, plugins and simulator (A, B, A, B, ...), so both see the same machine over time.
#
#   sh ../../bench/ab.sh BUILD_A BUILD_B ROUNDS COMMAND...
#
# BUILD_A/BUILD_B: configured build directories (e.g. a worktree of the previous commit and
# _build/dev). COMMAND runs from the current directory with ROCK_ADMIN_BIN,
# ROCK_TEST_PLUGIN_DIR, ROCK_OPENSANDBOX_PLUGIN_DIR and OPENSANDBOX_SIM pointing into the build
# of its turn, e.g.:
#   sh ../../bench/ab.sh /work/wt/base/_build $PWD 3 python3 ../../bench/bench_create_burst.py memory
set -eu
if [ $# -lt 4 ]; then
    echo "usage: $0 BUILD_A BUILD_B ROUNDS COMMAND..." >&2
    exit 2
fi
a=$1
b=$2
rounds=$3
shift 3
i=1
while [ "$i" -le "$rounds" ]; do
    for build in "$a" "$b"; do
        echo "== round $i: $build"
        ROCK_ADMIN_BIN=$build/core/rock-admin \
        ROCK_TEST_PLUGIN_DIR=$build/tests/.libs \
        ROCK_OPENSANDBOX_PLUGIN_DIR=$build/plugins/opensandbox/.libs \
        OPENSANDBOX_SIM=$build/tests/opensandbox-sim/opensandbox-sim \
            "$@"
    done
    i=$((i + 1))
done
