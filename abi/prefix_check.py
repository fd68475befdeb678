# SPDX-License-Identifier: Apache-2.0
"""Strict append-only check of two abidw dumps (used by scripts/abi-check.sh).

abidiff reports that something changed; this decides whether the change is
an append. For every struct of the baseline, the current struct must start
with exactly the baseline's members (same names, offsets and types); it may
only have more members after them. For every enum, every baseline
enumerator must keep its value. Function types (entry points, host calls)
must keep their return and parameter types. Types are compared by their
spelled-out shape, so structs are compared by name (each struct is checked on
its own).

Usage: python3 prefix_check.py baseline.abi current.abi
Exit 0: identical or append-only; 1: incompatible (reasons on stdout).
"""
import sys
import xml.etree.ElementTree as ET


def load(path):
    root = ET.parse(path).getroot()
    types = {}
    for el in root.iter():
        if el.get("id"):
            types[el.get("id")] = el
    return types


def spell(types, tid, depth=0):
    """A string describing a type's shape (structs/enums by name)."""
    if tid is None:
        return "void"
    el = types.get(tid)
    if el is None or depth > 20:
        return "?" + str(tid)
    tag = el.tag
    if tag in ("type-decl", "class-decl", "enum-decl", "union-decl"):
        return "%s:%s" % (tag.split("-")[0], el.get("name"))
    if tag == "typedef-decl":
        return "typedef:%s=%s" % (el.get("name"), spell(types, el.get("type-id"), depth + 1))
    if tag == "pointer-type-def":
        return spell(types, el.get("type-id"), depth + 1) + "*"
    if tag == "qualified-type-def":
        q = "const " if el.get("const") == "yes" else ""
        q += "volatile " if el.get("volatile") == "yes" else ""
        return q + spell(types, el.get("type-id"), depth + 1)
    if tag == "array-type-def":
        return spell(types, el.get("type-id"), depth + 1) + "[%s]" % el.get("size-in-bits")
    if tag == "function-type":
        params = []
        ret = "void"
        for c in el:
            if c.tag == "parameter":
                params.append("..." if c.get("is-variadic") == "yes"
                              else spell(types, c.get("type-id"), depth + 1))
            elif c.tag == "return":
                ret = spell(types, c.get("type-id"), depth + 1)
        return "fn(%s)->%s" % (",".join(params), ret)
    return tag


def by_name(types, tag):
    out = {}
    for el in types.values():
        if el.tag == tag and el.get("name") and el.get("is-declaration-only") != "yes":
            out[el.get("name")] = el
    return out


def members(types, cls):
    res = []
    for dm in cls.findall("data-member"):
        v = dm.find("var-decl")
        res.append((v.get("name"), dm.get("layout-offset-in-bits"),
                    spell(types, v.get("type-id"))))
    return res


def main(base_path, cur_path):
    bt, ct = load(base_path), load(cur_path)
    problems = []
    bcls, ccls = by_name(bt, "class-decl"), by_name(ct, "class-decl")
    for name, b in sorted(bcls.items()):
        c = ccls.get(name)
        if c is None:
            problems.append("struct %s: removed" % name)
            continue
        bm, cm = members(bt, b), members(ct, c)
        if cm[:len(bm)] != bm:
            for i, m in enumerate(bm):
                got = cm[i] if i < len(cm) else None
                if got != m:
                    problems.append("struct %s: member %d was %s, is now %s" % (name, i, m, got))
                    break
        elif int(c.get("size-in-bits", "0")) < int(b.get("size-in-bits", "0")):
            problems.append("struct %s: shrank" % name)
    benum, cenum = by_name(bt, "enum-decl"), by_name(ct, "enum-decl")
    for name, b in sorted(benum.items()):
        c = cenum.get(name)
        if c is None:
            problems.append("enum %s: removed" % name)
            continue
        cv = {e.get("name"): e.get("value") for e in c.findall("enumerator")}
        for e in b.findall("enumerator"):
            if cv.get(e.get("name")) != e.get("value"):
                problems.append("enum %s: %s was %s, is now %s" %
                                (name, e.get("name"), e.get("value"), cv.get(e.get("name"))))
    for p in problems:
        print("incompatible: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
