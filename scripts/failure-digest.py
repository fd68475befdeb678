#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Print a short digest of every failed test under the given stage
directories, so the end of a long CI log says what failed and why.

  failure-digest.py LABEL=DIR [LABEL=DIR ...]

For each DIR: every automake test (*.trs with FAIL/ERROR/XPASS) and every
stage log (*.log that has a "not ok - " line, as the harness prints them), plus
the "FAILED" notes of the real-OpenSandbox stage (notes.txt) and the routes no request
reached (bridge-routes.log).
Per failing test: its name and the exception line of each "not ok" with the
deepest test-file frame; without a "not ok" (a C unit test, a crash), the
log's last lines. At most MAX_LINES lines in all, each at most WIDTH
characters. Prints nothing when nothing failed.
"""
import glob
import os
import re
import sys

MAX_LINES = 48
WIDTH = 300
TAIL = 4


def clip(s):
    s = s.rstrip()
    return s if len(s) <= WIDTH else s[:WIDTH - 3] + "..."


def not_ok_blocks(lines):
    """[(test name, [detail lines])] for every 'not ok - ' in a harness log."""
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^not ok - (\S+)", line)
        if not m:
            continue
        frame, exc = None, None
        for j in range(i + 1, min(len(lines), i + 400)):
            s = lines[j]
            if s.startswith(("ok - ", "not ok - ", "---- output of")):
                break
            if s.startswith('  File "') and "/tests/" in s:
                frame = s.strip()
            elif s and not s.startswith(" ") and not s.startswith("Traceback"):
                exc = s  # the exception line (the last unindented one)
        detail = [d for d in (frame, exc) if d]
        out.append((m.group(1), detail or ["(no traceback)"]))
    return out


def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def failed_trs(d):
    for trs in sorted(glob.glob(os.path.join(d, "**", "*.trs"), recursive=True)):
        text = "\n".join(read_lines(trs))
        if re.search(r"^:test-result: (FAIL|ERROR|XPASS)", text, re.M):
            yield trs[:-4] + ".log"


def digest(label, d):
    rows = []
    logs = list(failed_trs(d))
    seen = set(logs)
    for log in sorted(glob.glob(os.path.join(d, "*.log"))):  # stage logs without .trs
        if os.path.basename(log) == "test-suite.log":  # automake's copy of the failing logs
            continue
        if log not in seen and any(line.startswith("not ok - ") for line in read_lines(log)):
            logs.append(log)
    for log in logs:
        lines = read_lines(log)
        name = os.path.relpath(log, d)
        blocks = not_ok_blocks(lines)
        if blocks:
            for test, detail in blocks:
                rows.append("%s %s: not ok - %s" % (label, name, test))
                rows.extend("    " + d_ for d_ in detail)
        else:
            rows.append("%s %s: failed; its last lines:" % (label, name))
            rows.extend("    " + s for s in [x for x in lines if x.strip()][-TAIL:])
    for line in read_lines(os.path.join(d, "notes.txt")):  # the real-OpenSandbox stage's notes
        if re.match(r"^real-opensandbox \[.*\]: FAILED", line):
            rows.append("%s %s" % (label, line))
    for line in read_lines(os.path.join(d, "bridge-routes.log")):
        if "NOT EXERCISED" in line:
            rows.append("%s %s" % (label, line))
    return rows


def main(argv):
    rows = []
    for arg in argv[1:]:
        label, _, d = arg.partition("=")
        if os.path.isdir(d):
            rows.extend(digest(label, d))
    if not rows:
        return 0
    print("==> failures (digest; the full logs are above)")
    for r in rows[:MAX_LINES]:
        print(clip(r))
    if len(rows) > MAX_LINES:
        print("... %d more lines" % (len(rows) - MAX_LINES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
