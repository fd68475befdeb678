#!/bin/sh
# Machine check of the operator ABI (include/rock-admin/operator.h) against
# EVERY checked-in baseline abi/operator-<major>.<minor>.abi, one per released
# minor (abidw of abi/abi-types.c, a tiny .so that uses every public type;
# Debian package abigail-tools). Against each baseline:
#
#   abidiff with abi/appends.suppr finds nothing  and without it nothing -> same ABI: pass
#   abidiff with the suppressions finds nothing, without them something
#       -> only appended struct members: pass if the header's minor is newer
#          than the baseline's, fail ("append without a minor bump") otherwise
#   abidiff with the suppressions still finds something, or abi/prefix_check.py
#   finds a struct whose old members are not an exact prefix of the new one
#   (or an enumerator whose value changed) -> incompatible change:
#       fail unless the header's major differs from the baseline's (a new major
#       then needs a new baseline: scripts/abi-check.sh --record)
#   a baseline of the same major with a newer minor than the header -> fail
#
# So the header must equal the baseline of its own version (once recorded) and
# only append to each older one: reordering two 1.1 members passes against the
# 1.0 baseline (it only sees members appended after 1.0) but fails against the
# 1.1 one. The check passes only if it passes against every baseline.
#
# Usage: scripts/abi-check.sh [--self-test | --record] [include-dir]
#   --self-test  also prove the check: a removed field, a member inserted in
#                the middle, a changed type and an append without a minor bump
#                must fail, an append with a minor bump must pass; and against
#                the checked-in baselines, two reordered 1.1 members (entry
#                points, descriptor fields) must fail although the 1.0
#                baseline alone lets them pass, and so must the two 1.2
#                asynchronous entry points swapped (the 1.1 baseline alone
#                lets that pass) and the 1.2 host function call_done removed,
#                and the 1.3 host function state_report removed (the 1.2
#                baseline alone lets that pass).
#   --record     write the baseline of include-dir's version (a new release:
#                a new minor or major); refuses to overwrite an existing one,
#                since a released ABI never changes.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
mode=check
case "${1:-}" in
--self-test) mode=self-test; shift ;;
--record) mode=record; shift ;;
esac
inc=${1:-$top/include}
for tool in abidw abidiff; do
    command -v $tool >/dev/null 2>&1 || {
        echo "abi-check: $tool not found: install the Debian package abigail-tools" >&2
        exit 2
    }
done
CC=${ABI_CC:-$(command -v gcc || command -v cc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

version_of() { # include-dir -> "major minor"
    h="$1/rock-admin/operator.h"
    ma=$(sed -n 's/^#define RK_OPERATOR_ABI_MAJOR  *//p' "$h")
    mi=$(sed -n 's/^#define RK_OPERATOR_ABI_MINOR  *//p' "$h")
    echo "$ma $mi"
}

dump() { # include-dir out.abi
    "$CC" -std=c11 -g -O0 -fPIC -shared -I"$1" -o "$work/types.so" "$top/abi/abi-types.c"
    abidw --no-corpus-path --no-show-locs --out-file "$work/raw.abi" "$work/types.so"
    # No build paths in the (checked-in) dump.
    sed -e "s|$top/||g" -e "s|$top|.|g" "$work/raw.abi" >"$2"
}

# The checked-in baselines, oldest first (one per line).
baselines() {
    ls "$top"/abi/operator-*.abi 2>/dev/null | sort -V
}

use_baseline() { # file.abi named operator-<major>.<minor>.abi
    baseline=$1
    bver=$(basename "$baseline" .abi)
    bver=${bver#operator-}
    bmajor=${bver%%.*}
    bminor=${bver#*.}
}

check() { # include-dir -> 0 pass, 1 fail; prints one verdict line
    set -- "$1" $(version_of "$1")
    dump "$1" "$work/current.abi"
    if [ "$2" = "$bmajor" ] && [ "$3" -lt "$bminor" ]; then
        echo "abi-check: FAIL: the header is ABI $2.$3, older than the $bver baseline"
        return 1
    fi
    rc_sup=0
    abidiff --suppressions "$top/abi/appends.suppr" "$baseline" "$work/current.abi" \
        >"$work/incompatible.txt" 2>&1 || rc_sup=$?
    rc_all=0
    abidiff "$baseline" "$work/current.abi" >"$work/all.txt" 2>&1 || rc_all=$?
    if [ $((rc_sup & 3)) != 0 ] || [ $((rc_all & 3)) != 0 ]; then
        cat "$work/incompatible.txt"
        echo "abi-check: FAIL: abidiff could not compare (exit $rc_sup/$rc_all)"
        return 1
    fi
    if [ "$2" != "$bmajor" ]; then
        echo "abi-check: ok: ABI major $2 differs from the baseline's $bmajor: record a new" \
            "baseline with scripts/abi-check.sh --record"
        return 0
    fi
    # abidiff's suppression hides every change of a struct that also has an
    # appended member, so a strict prefix check of each struct decides too.
    rc_prefix=0
    python3 "$top/abi/prefix_check.py" "$baseline" "$work/current.abi" \
        >>"$work/incompatible.txt" 2>&1 || rc_prefix=$?
    if [ "$rc_sup" != 0 ] || [ "$rc_prefix" != 0 ]; then
        cat "$work/incompatible.txt"
        echo "abi-check: FAIL: incompatible change to operator ABI $bver without a major bump"
        return 1
    fi
    if [ "$rc_all" != 0 ]; then
        if [ "$3" -gt "$bminor" ]; then
            echo "abi-check: ok: ABI $2.$3 only appends to the $bver baseline"
            return 0
        fi
        cat "$work/all.txt"
        echo "abi-check: FAIL: members were appended but RK_OPERATOR_ABI_MINOR is still $3" \
            "(baseline $bver): bump the minor and add a changelog entry"
        return 1
    fi
    echo "abi-check: ok: ABI $2.$3 has the same types as the $bver baseline"
    return 0
}

check_all() { # include-dir -> 0 if it passes against every checked-in baseline
    list=$(baselines)
    if [ -z "$list" ]; then
        echo "abi-check: FAIL: no baseline in abi/ (record one with --record)"
        return 1
    fi
    rc_each=0
    for b in $list; do
        use_baseline "$b"
        check "$1" || rc_each=1
    done
    return $rc_each
}

case $mode in
record)
    set -- "$inc" $(version_of "$inc")
    out="$top/abi/operator-$2.$3.abi"
    if [ -e "$out" ]; then
        echo "abi-check: abi/operator-$2.$3.abi exists; a released baseline is never" \
            "rewritten (bump the minor, or delete it by hand if $2.$3 was never released)" >&2
        exit 1
    fi
    dump "$inc" "$out"
    echo "abi-check: recorded abi/operator-$2.$3.abi"
    exit 0
    ;;
check)
    check_all "$inc"
    exit $?
    ;;
esac

# --self-test: the real header against every checked-in baseline first; then
# variants of the header against a baseline recorded from the header itself,
# and variants against the checked-in baselines.
status=0
check_all "$inc" || status=1
set -- $(version_of "$inc")
dump "$inc" "$work/operator-$1.$2.abi"
self_baseline="$work/operator-$1.$2.abi"
variant() { # name python-edit expected(pass|fail) [against: self (default) | all | file.abi]
    name=$1 expect=$3 against=${4:-self}
    mkdir -p "$work/$name/rock-admin"
    python3 -c "$2" <"$inc/rock-admin/operator.h" >"$work/$name/rock-admin/operator.h"
    case $against in
    self)
        use_baseline "$self_baseline"
        if check "$work/$name" >"$work/$name.out" 2>&1; then got=pass; else got=fail; fi
        what="against its own baseline"
        ;;
    all)
        if check_all "$work/$name" >"$work/$name.out" 2>&1; then got=pass; else got=fail; fi
        what="against every baseline in abi/"
        ;;
    *)
        use_baseline "$against"
        if check "$work/$name" >"$work/$name.out" 2>&1; then got=pass; else got=fail; fi
        what="against abi/$(basename "$against") alone"
        ;;
    esac
    if [ "$got" = "$expect" ]; then
        echo "abi-check self-test: $name $what: $got as expected"
    else
        cat "$work/$name.out"
        echo "abi-check self-test: $name $what: $got, expected $expect"
        status=1
    fi
}
variant removed-field "import sys
s = sys.stdin.read()
sys.stdout.write(s.replace('    const char *version; ', '    /* removed */ ', 1))" fail
variant inserted-in-middle "import sys
s = sys.stdin.read()
sys.stdout.write(s.replace('    const char *error_text;', '    int inserted;\n    const char *error_text;', 1))" fail
variant changed-type "import sys
s = sys.stdin.read()
sys.stdout.write(s.replace('    int has_exit_code; ', '    long has_exit_code; ', 1))" fail
minor=$(version_of "$inc" | cut -d' ' -f2)
append='import sys
s = sys.stdin.read()
s = s.replace("    uint32_t cap_msg_size; ", "    uint32_t cap_msg_size;\n    uint64_t appended_for_test;\n    uint32_t unused_tail; ", 1)'
variant append-without-bump "$append
sys.stdout.write(s)" fail
variant append-with-bump "$append
s = s.replace('#define RK_OPERATOR_ABI_MINOR $minor', '#define RK_OPERATOR_ABI_MINOR $((minor + 1))', 1)
sys.stdout.write(s)" pass

# Against the checked-in baselines: every release is checked against every
# baseline, so the 1.1 members are pinned by the 1.1 baseline.
variant append-without-bump "$append
sys.stdout.write(s)" fail all
variant append-with-bump "$append
s = s.replace('#define RK_OPERATOR_ABI_MINOR $minor', '#define RK_OPERATOR_ABI_MINOR $((minor + 1))', 1)
sys.stdout.write(s)" pass all
first=$(baselines | head -n 1)
major=$(version_of "$inc" | cut -d' ' -f1)
if [ "$major" != 1 ]; then
    echo "abi-check self-test: reordered 1.1 members: skipped (the header is ABI $major.x)"
elif [ -e "$top/abi/operator-1.1.abi" ] && [ -n "$first" ]; then
    # Two 1.1 entry points swapped (snapshot_get <-> snapshot_delete).
    swap_ops='import re, sys
s = sys.stdin.read()
get = re.search(r"\n    /\*\* RK_CAP_SNAPSHOT \(since 1\.1\)\. Current state.*?\);\n", s, re.S).group(0)
dele = re.search(r"\n    /\*\* RK_CAP_SNAPSHOT \(since 1\.1\)\. Delete a snapshot.*?\);\n", s, re.S).group(0)
assert s.index(get) + len(get) - 1 == s.index(dele), "snapshot_get no longer precedes snapshot_delete"
s = s.replace(get + dele[1:], dele + get[1:], 1)
sys.stdout.write(s)'
    # Two 1.1 descriptor fields of the same type swapped (names only).
    swap_desc='import sys
s = sys.stdin.read()
a = "    uint32_t config_key_size; "
b = "    uint32_t cap_msg_size; "
assert a in s and b in s
s = s.replace(a, "@A@", 1).replace(b, a, 1).replace("@A@", b, 1)
sys.stdout.write(s)'
    variant reordered-1.1-ops "$swap_ops" pass "$first"
    variant reordered-1.1-ops "$swap_ops" fail all
    variant reordered-1.1-descriptor "$swap_desc" pass "$first"
    variant reordered-1.1-descriptor "$swap_desc" fail all
else
    echo "abi-check self-test: FAIL: abi/operator-1.1.abi is missing"
    status=1
fi
if [ "$major" = 1 ] && [ -e "$top/abi/operator-1.2.abi" ]; then
    # The two 1.2 asynchronous entry points swapped: only appends for the 1.1
    # baseline, a reordering for the 1.2 one.
    swap_async='import re, sys
s = sys.stdin.read()
a = re.search(r"\n    /\*\* Optional, needs RK_CAP_EXEC \(since 1\.2\).*?\);\n", s, re.S).group(0)
b = re.search(r"\n    /\*\* Optional, needs RK_CAP_SESSION \(since 1\.2\).*?\);\n", s, re.S).group(0)
assert s.index(a) + len(a) - 1 == s.index(b), "exec_start no longer precedes session_run_start"
s = s.replace(a + b[1:], b + a[1:], 1)
sys.stdout.write(s)'
    # The 1.2 host function removed again (a released member must stay).
    drop_done='import re, sys
s = sys.stdin.read()
s2 = re.sub(r"\n    void \(\*call_done\)\(struct rk_call \*call, rk_status st\);", "", s, 1)
assert s2 != s, "call_done not found"
sys.stdout.write(s2)'
    variant reordered-1.2-ops "$swap_async" pass "$top/abi/operator-1.1.abi"
    variant reordered-1.2-ops "$swap_async" fail all
    variant removed-1.2-host-function "$drop_done" fail all
elif [ "$major" = 1 ]; then
    echo "abi-check self-test: FAIL: abi/operator-1.2.abi is missing"
    status=1
fi
if [ "$major" = 1 ] && [ -e "$top/abi/operator-1.3.abi" ]; then
    # The 1.3 host function removed again: only the 1.3 baseline sees it, and it must.
    drop_report='import re, sys
s = sys.stdin.read()
s2 = re.sub(r"\n    void \(\*state_report\)\(const char \*sandbox_id, const struct rk_status_info \*info\);",
            "", s, 1)
assert s2 != s, "state_report not found"
sys.stdout.write(s2)'
    variant removed-1.3-host-function "$drop_report" pass "$top/abi/operator-1.2.abi"
    variant removed-1.3-host-function "$drop_report" fail all
elif [ "$major" = 1 ]; then
    echo "abi-check self-test: FAIL: abi/operator-1.3.abi is missing"
    status=1
fi
exit $status
