#!/usr/bin/env python3
"""Fails when a crate's source files import each other in a cycle.

Usage: import_cycles.py CRATE_SRC_DIR...

Each `.rs` file is a module; an edge runs from a file to every module its `use crate::…` /
`use super::…` lines and `crate::a::b::item` paths name (through `pub use` re-exports). Comments
and `#[cfg(test)] mod tests` blocks are ignored. A cycle is printed with its edges.
"""
import os
import re
import sys


def modules(root):
    found = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(".rs"):
                rel = os.path.relpath(os.path.join(d, n), root)[:-3]
                mod = rel.replace("/mod", "").replace("/", "::")
                found["" if mod == "lib" else mod] = open(os.path.join(d, n)).read()
    return found


def reexports(files):
    names = {}
    for mod, src in files.items():
        here = mod + "::" if mod else ""
        for m in re.finditer(r"pub use ([\w:]+)::\{([^}]*)\}", src):
            for name in m.group(2).split(","):
                name = name.strip().split(" as ")[-1].strip()
                if name:
                    names[(mod, name)] = here + m.group(1).replace("self::", "").replace("crate::", "")
        for m in re.finditer(r"pub use ([\w:]+)::(\w+);", src):
            names[(mod, m.group(2))] = here + m.group(1)
    return names


def split_top(inner):
    depth, cur, out = 0, "", []
    for ch in inner:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def expand(prefix, body):
    body = body.strip()
    m = re.match(r"^([\w:]*?)(?:::)?\{(.*)\}$", body, flags=re.S)
    if not m:
        return [(prefix + "::" + body).strip(":")]
    inner_prefix = (prefix + "::" + m.group(1)).strip(":") if m.group(1) else prefix
    return [p for part in split_top(m.group(2)) if part.strip() for p in expand(inner_prefix, part)]


def graph(root):
    files = modules(root)
    names = reexports(files)

    def resolve(path):
        parts = path.split("::")
        for i in range(len(parts), 0, -1):
            cand = "::".join(parts[:i])
            if cand in files:
                if i < len(parts) and (cand, parts[i]) in names:
                    return resolve(names[(cand, parts[i])].strip(":"))
                return cand
        if parts and ("", parts[0]) in names:
            return resolve(names[("", parts[0])])
        return None

    edges = {m: set() for m in files}
    for mod, src in files.items():
        src = re.sub(r"//[^\n]*", "", src)
        src = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", src, flags=re.S)
        targets = []
        for m in re.finditer(r"use (crate|super)::([^;]+);", src, flags=re.S):
            prefix = "" if m.group(1) == "crate" else "::".join(mod.split("::")[:-1])
            targets += [p.replace("::self", "") for p in expand(prefix, m.group(2))]
        targets += [m.group(1).strip(":") for m in re.finditer(r"\bcrate::((?:\w+::)+)\w+", src)]
        for p in targets:
            t = resolve(p)
            if t and t != mod:
                edges[mod].add(t)
    return edges


def cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def main():
    bad = False
    for root in sys.argv[1:]:
        edges = graph(root)
        for comp in cycles(edges):
            bad = True
            print(f"{root}: import cycle among {', '.join(comp)}")
            for a in comp:
                print(f"  {a} -> {', '.join(sorted(b for b in edges[a] if b in comp))}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
