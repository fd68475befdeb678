#!/bin/sh
# Run every libFuzzer target of a build configured with --enable-fuzzing.
#   tests/fuzz/run-fuzzers.sh BUILD_DIR [RUNS] [extra libFuzzer flags...]
# RUNS (default 20000) executions per target, starting from the checked-in
# seed corpus (read-only: new inputs go to a scratch directory). Exits non-zero
# on the first crash, leak, sanitizer report or timeout; the reproducer is
# left in BUILD_DIR/tests/fuzz/artifacts/.
set -eu
src=$(cd "$(dirname "$0")" && pwd)
build=$1
runs=${2:-20000}
shift
[ $# -gt 0 ] && shift
out="$build/tests/fuzz"
mkdir -p "$out/artifacts"
for t in fuzz_decode fuzz_proxy_path fuzz_ws_frames fuzz_execd_stream fuzz_config fuzz_multipart fuzz_h1_resp; do
    scratch=$(mktemp -d)
    echo "==> $t ($runs runs)"
    if ! "$out/$t" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$out/artifacts/$t-" -print_final_stats=1 "$@" \
        "$scratch" "$src/corpus/$t" >"$out/$t.out" 2>&1; then
        tail -n 60 "$out/$t.out"
        rm -rf "$scratch"
        echo "FAIL: $t"
        exit 1
    fi
    grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$out/$t.out" || true
    rm -rf "$scratch"
    echo "PASS: $t"
done
