#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Check that #include lines in core/ only point down a layer, and that no
two modules include each other (directly or in a longer circle).

The layers, lowest first, are the LAYERS list below; core/README.md says what
each owns. A file in core/<layer>/ may include headers of its own layer and
of the layers below it, <rock-admin/...> (the public ABI) and lib/ (librkutil).
core/main.c is the top and may include everything. Plugins (plugins/) may not
include anything from core/.

A module is a file name without its extension (store_redis.c and
store_redis.h are one module). A header named *_internal.h is private to
its folder (declarations shared by the files of that folder only) and is
not a module of its own. Inside a layer, include circles between
modules are refused as well: a circle means two files share one
responsibility or call each other back.

Usage: layer-check.py [SRCDIR]   (exit 1 and one line per problem on failure)
"""
import os
import re
import sys

LAYERS = ["base", "obs", "config", "store", "host", "domain", "engine", "access", "api", "relay"]
TOP = "main"  # core/main.c
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rank(layer):
    return len(LAYERS) if layer == TOP else LAYERS.index(layer)


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    core = os.path.join(top, "core")
    problems = []
    headers = {}  # "layer/name.h" -> layer
    files = []    # (path relative to core, layer)
    for dirpath, _dirs, names in os.walk(core):
        rel = os.path.relpath(dirpath, core)
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            if rel == ".":
                if n != "main.c":
                    problems.append(f"core/{n}: a source file outside a layer folder")
                    continue
                files.append((n, TOP))
                continue
            layer = rel.split(os.sep)[0]
            if layer not in LAYERS:
                problems.append(f"core/{rel}/{n}: folder '{layer}' is not a layer (scripts/layer-check.py LAYERS)")
                continue
            files.append((os.path.join(rel, n), layer))
            if n.endswith(".h"):
                headers[f"{layer}/{n}"] = layer

    edges = {}  # module -> set of modules it includes
    for path, layer in files:
        text = open(os.path.join(core, path), encoding="utf-8").read()
        mod = os.path.splitext(path)[0]
        for inc in INCLUDE.findall(text):
            target = headers.get(inc)
            if target is None:
                if "/" not in inc and os.path.exists(os.path.join(core, os.path.dirname(path), inc)):
                    problems.append(f"core/{path}: includes \"{inc}\" without its layer folder")
                continue  # generated, lib/ or system header
            if rank(target) > rank(layer):
                problems.append(f"core/{path}: includes \"{inc}\": layer '{layer}' may not include "
                                f"the higher layer '{target}'")
            if inc.endswith("_internal.h"):
                # A folder-private header: only its own folder may include it,
                # and it belongs to the folder, not to one module.
                if os.path.dirname(inc) != os.path.dirname(path):
                    problems.append(f"core/{path}: includes \"{inc}\", private to core/{os.path.dirname(inc)}")
                continue
            tmod = os.path.splitext(inc)[0]
            if tmod != mod and not mod.endswith("_internal"):
                edges.setdefault(mod, set()).add(tmod)

    # Module circles (Tarjan's strongly connected components).
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in sccs:
        problems.append("include circle between modules: " + " <-> ".join(f"core/{c}" for c in comp))

    # Plugins never see the core.
    plugins = os.path.join(top, "plugins")
    core_headers = {os.path.basename(h) for h in headers}
    for dirpath, _dirs, names in os.walk(plugins):
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            p = os.path.join(dirpath, n)
            for inc in INCLUDE.findall(open(p, encoding="utf-8").read()):
                if inc in headers or "core/" in inc:
                    problems.append(f"{os.path.relpath(p, top)}: includes the core header \"{inc}\"")

    for p in problems:
        print("layer-check: " + p)
    if problems:
        return 1
    print(f"layer-check: ok ({len(files)} files in {len(LAYERS)} layers, no upward include, no circle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
