#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The layer check (scripts/layer-check.py) passes on the tree, and fails on a
# planted upward include, a planted include circle inside a layer and a
# plugin that includes a core header: proof that the check can fail.
set -eu
src=${ROCK_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
check="$src/scripts/layer-check.py"
python3 "$check" "$src"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
plant() { # name; then a fresh copy of core/ and plugins/ in $tmp/$1
    mkdir -p "$tmp/$1"
    cp -R "$src/core" "$src/plugins" "$tmp/$1/"
    chmod -R u+w "$tmp/$1"
}
expect_fail() { # name, texts that one line of the refusal must all contain
    name=$1
    shift
    if out=$(python3 "$check" "$tmp/$name" 2>&1); then
        echo "FAIL: the layer check passed on a tree with $name"
        exit 1
    fi
    line=$(echo "$out" | grep -F -- "$1" | head -n 1)
    for want in "$@"; do
        case $line in
        *"$want"*) ;;
        *)
            echo "FAIL: $name refused without naming '$want': $out"
            exit 1
            ;;
        esac
    done
    echo "ok: $name refused: $line"
}

# An upward include: the store (layer 3) reaching into the relay (layer 9).
plant upward
printf '#include "relay/relay.h"\n' >>"$tmp/upward/core/store/store_metrics.c"
expect_fail upward "core/store/store_metrics.c: includes \"relay/relay.h\": layer 'store' may not include the higher layer 'relay'"

# A circle inside one layer: two engine modules including each other (reply.c
# includes envelope.h already).
plant circle
printf '#include "engine/reply.h"\n' >>"$tmp/circle/core/engine/envelope.c"
expect_fail circle "include circle between modules:" "core/engine/envelope <->" "core/engine/reply"

# A plugin that includes a core header.
plant plugin
f=$(ls "$tmp/plugin/plugins/opensandbox/"*.c | head -n 1)
printf '#include "store/store.h"\n' >>"$f"
expect_fail plugin "includes the core header \"store/store.h\""

# A source file outside a layer folder.
plant stray
printf 'int x;\n' >"$tmp/stray/core/stray.c"
expect_fail stray "core/stray.c: a source file outside a layer folder"
