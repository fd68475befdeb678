# SPDX-License-Identifier: Apache-2.0
"""Which of rock-admin's routes a test run exercised.

    routes.py SRCDIR ROUTES_FILE LABEL

SRCDIR is the source tree: the route names are read from every route table rock-admin serves
(core/api/route_table.c: the ROCK API and operational endpoints; core/relay/relay_http.c: the
HTTP/WebSocket/VNC proxies and port forwarding; core/api/e2b_routes.c + core/api/e2b_envd.h:
the E2B API and its envd emulation). ROUTES_FILE holds "route status" lines, one per request a
rock-admin served (tests/lib/harness.py writes it from the access logs when
ROCK_TEST_ROUTES_FILE is set). Prints

    real-opensandbox LABEL routes: N/M exercised

and exits 1 listing every route no request reached (ALLOWED below excepted, with its reason).
"""
import re
import sys

# (file, the array whose entries are routes, or None for a whole #define)
TABLES = (
    ("core/api/route_table.c", "rk_api_routes"),
    ("core/relay/relay_http.c", "rk_relay_routes"),
    ("core/api/e2b_routes.c", "rk_e2b_routes"),
    ("core/api/e2b_envd.h", "RK_E2B_ENVD_ROUTES"),
)

# Routes that cannot be exercised against a docker-runtime OpenSandbox, each with the reason.
# Keep this short: a route that can run belongs in a test, not here.
ALLOWED = {
    # "route_name": "why it cannot run against a docker-runtime OpenSandbox",
    # (empty: every route runs in the stage)
}

# A route name: a lower-case identifier among a table entry's string literals (methods are
# upper case, patterns start with '/', messages hold spaces, select headers hold capitals).
NAME = re.compile(r'"([a-z][a-z0-9_]*)"')


def table_names(path, array):
    text = open(path).read()
    if array.startswith("RK_"):  # a #define spliced into another table: up to its last line
        start = text.index("#define " + array)
        end = text.index("\n\n", start)
    else:
        start = text.index(array + "[] = {")
        end = text.index("{.pattern = NULL}", start)
    body = re.sub(r"/\*.*?\*/", "", text[start:end], flags=re.S)
    return NAME.findall(body)


def main():
    src, served_file, label = sys.argv[1:4]
    names = []
    for path, array in TABLES:
        for n in table_names("%s/%s" % (src, path), array):
            if n not in names:
                names.append(n)
    served = {}
    try:
        with open(served_file) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    served.setdefault(parts[0], set()).add(parts[1])
    except FileNotFoundError:
        pass
    missing = [n for n in names if n not in served and n not in ALLOWED]
    done = [n for n in names if n in served]
    for n in names:
        if n in served:
            print("  %s: %s" % (n, " ".join(sorted(served[n]))))
        elif n in ALLOWED:
            print("  %s: allowed unexercised (%s)" % (n, ALLOWED[n]))
    for n in missing:
        print("  %s: NOT EXERCISED" % n)
    print("real-opensandbox %s routes: %d/%d exercised%s" % (
        label, len(done), len(names),
        "" if not missing else "; not exercised: " + ", ".join(missing)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
