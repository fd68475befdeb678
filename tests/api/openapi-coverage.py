# SPDX-License-Identifier: Apache-2.0
"""api/openapi.json describes every route in the daemon's route tables
(core/api/route_table.c, core/relay/relay_http.c, core/api/e2b_routes.c,
core/api/e2b_envd.h), and documents no path the daemon does
not serve. Route patterns are read from the C sources: "{id}" is documented
as {sandbox_id} and a trailing "{*}" as {path}."""
import json
import os
import re
import sys

SRC = os.environ.get("ROCK_SRCDIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PREFIX = "/apis/envs/sandbox/v1"


def route_patterns():
    found = set()
    for name in ("core/api/route_table.c", "core/relay/relay_http.c", "core/api/e2b_routes.c",
                 "core/api/e2b_envd.h"):
        with open(os.path.join(SRC, name)) as f:
            text = f.read()
        for m in re.finditer(r'\bP\s+"(/[^"]*)"', text):
            found.add(PREFIX + m.group(1))
        for m in re.finditer(r'_ROUTE\(\s*"(/[^"]*)"', text):
            found.add(m.group(1))
        for m in re.finditer(r'(?:E2B|ENVD)_ROUTE\(\s*"[A-Z*]+",\s*"(/[^"]*)"', text):
            found.add(m.group(1))
        for m in re.finditer(r'\.pattern\s*=\s*"(/[^"]*)"', text):
            found.add(m.group(1))
    return found


# The E2B sandbox-port relay (core/relay/relay_http.c) is chosen by the E2b-Sandbox-Port header
# on any path: OpenAPI has no header-selected paths, so the "e2b-envd" tag describes it.
HEADER_SELECTED = {"/{*}"}


def documented(pattern):
    return pattern.replace("{id}", "{sandbox_id}").replace("{*}", "{path}")


def main():
    with open(os.path.join(SRC, "api", "openapi.json")) as f:
        doc = json.load(f)
    paths = set(doc["paths"])
    routes = {documented(p) for p in route_patterns() - HEADER_SELECTED}
    problems = []
    if len(routes) < 20:
        problems.append("only %d route patterns found in the C sources: the parser is out of date"
                        % len(routes))
    for r in sorted(routes - paths):
        problems.append("route %s is not in api/openapi.json" % r)
    for p in sorted(paths - routes):
        problems.append("api/openapi.json documents %s, which no route serves" % p)
    for p in problems:
        print("not ok - " + p)
    print("openapi-coverage: %d routes, %d documented paths" % (len(routes), len(paths)))
    print("%d passed, %d failed" % (0 if problems else 1, 1 if problems else 0))
    sys.exit(1 if problems else 0)


main()
