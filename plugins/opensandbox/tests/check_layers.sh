#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Layer check of the OpenSandbox plugin: every call between the plugin's files
# goes down the order written at the top of os_internal.h (lowest first), so
# the files form no circle. Read from the built objects (nm), not from the
# sources: a symbol a file leaves undefined must be defined by a file listed
# before it. Also fails when a source file is missing from the list.
#
# Environment: srcdir (the plugin's source directory, set by `make check`),
# OS_LAYER_OBJDIR (where the objects are, default .), OS_LAYER_PREFIX (their
# name prefix, default test_os_config-: that test links every source).
set -eu

src="${srcdir:-.}"
objdir="${OS_LAYER_OBJDIR:-.}"
prefix="${OS_LAYER_PREFIX:-test_os_config-}"
hdr="$src/os_internal.h"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# "rank stem" from lines like " *    4. os_http.c       ..." (two files may share a rank).
sed -n 's/^ \*  *\([0-9][0-9]*\)\. \([a-z_][a-z0-9_]*\)\.c .*/\1 \2/p' "$hdr" >"$tmp/order"
if [ ! -s "$tmp/order" ]; then
    echo "check_layers: no layer list found in $hdr" >&2
    exit 1
fi

bad=0
for f in "$src"/*.c; do
    stem="$(basename "$f" .c)"
    if ! awk -v s="$stem" '$2 == s { found = 1 } END { exit !found }' "$tmp/order"; then
        echo "check_layers: $stem.c is not in the layer list of os_internal.h" >&2
        bad=1
    fi
done

: >"$tmp/defs"
: >"$tmp/uses"
while read -r rank stem; do
    obj="$objdir/$prefix$stem.o"
    if [ ! -f "$obj" ]; then
        echo "check_layers: $obj not built" >&2
        exit 1
    fi
    nm -P -g --defined-only "$obj" | awk -v r="$rank" -v s="$stem" '{ print $1, r, s }' \
        >>"$tmp/defs"
    nm -P -u "$obj" | awk -v r="$rank" -v s="$stem" '{ print $1, r, s }' >>"$tmp/uses"
done <"$tmp/order"

# A use of a symbol defined in the plugin must point to a lower rank.
if ! awk 'NR == FNR { rank[$1] = $2; file[$1] = $3; next }
          ($1 in rank) && rank[$1] >= $2 {
              printf "check_layers: %s.c (layer %d) calls %s of %s.c (layer %d)\n",
                     $3, $2, $1, file[$1], rank[$1]
              bad = 1
          }
          END { exit bad }' "$tmp/defs" "$tmp/uses" >&2; then
    bad=1
fi

if [ "$bad" -ne 0 ]; then
    echo "check_layers: calls must go down the list at the top of os_internal.h" >&2
    exit 1
fi
echo "check_layers: $(wc -l <"$tmp/order") files, every call goes down"
