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
expect_fail() { # name, expected text
    if out=$(python3 "$check" "$tmp/$1" 2>&1); then
        echo "FAIL: the layer check passed on a tree with $1"
        exit 1
    fi
    case $out in
    *"$2"*) echo "ok: $1 refused: $(echo "$out" | grep -F "$2" | head -n 1)" ;;
    *)
        echo "FAIL: $1 refused without naming it: $out"
        exit 1
        ;;
    esac
}

# An upward include: the store (layer 3) reaching into the relay (layer 9).
plant upward
printf '#include "relay/relay.h"\n' >>"$tmp/upward/core/store/store_metrics.c"
expect_fail upward "core/store/store_metrics.c: includes \"relay/relay.h\": layer 'store' may not include the higher layer 'relay'"

# A circle inside one layer: two engine modules including each other.
plant circle
printf '#include "engine/http_server.h"\n' >>"$tmp/circle/core/engine/router.c"
expect_fail circle "include circle between modules: core/engine/http_server <-> core/engine/router"

# A plugin that includes a core header.
plant plugin
f=$(ls "$tmp/plugin/plugins/opensandbox/"*.c | head -n 1)
printf '#include "store/store.h"\n' >>"$f"
expect_fail plugin "includes the core header \"store/store.h\""

# A source file outside a layer folder.
plant stray
printf 'int x;\n' >"$tmp/stray/core/stray.c"
expect_fail stray "core/stray.c: a source file outside a layer folder"
