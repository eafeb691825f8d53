#!/usr/bin/env python3
"""Fails when a part of segcache-core imports a part above it.

Usage: layers.py [CRATE_SRC_DIR]   (default: segcache-core/src)

The engine's parts stand in layers, bottom first (`LAYERS`): what lies in the heap's file as it is
and the small types everything uses; the hash table, the segments and the TTL buckets; eviction;
the engine; the handles and what opens them. `Builder`'s settings lie at the bottom, the
building of what they describe (`builder::open`) at the top. A module belongs to the layer of the longest module
path in `LAYERS` that it starts with. Imports run down or within a layer; one that runs up is
printed with where it is written, and the exit status is then 1. The edges are those of
`import_cycles.py` (`use` declarations and paths in code, test code left out). With `--show`, the
layers and their modules are printed too.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import import_cycles  # noqa: E402

LAYERS = [
    ("the file's layout and the common types", [
        "error", "hash", "prefetch", "clock", "size", "item", "listener", "record", "fork", "stats",
        "arena", "large",
        "meta", "sync", "layout", "persist", "eviction::policy", "builder",
        "hashtable::bucket", "hashtable::slot", "segments::header",
        "ttl_buckets::bucket", "ttl_buckets::ttl", "ttl_buckets::expire",
    ]),
    ("hash table, segments, TTL buckets, flash tier", ["hashtable", "segments", "ttl_buckets", "tier"]),
    ("eviction", ["eviction"]),
    ("engine", ["engine"]),
    ("handles and opening", ["builder::open", "shared", "future", "typed"]),
    ("crate root", [""]),
]

def layer_of(module, layers):
    """(index, prefix) of the layer whose longest listed prefix starts `module` (a tuple)."""
    best = None
    for i, (_, prefixes) in enumerate(layers):
        for p in prefixes:
            parts = tuple(p.split("::")) if p else ()
            if module[:len(parts)] == parts and (best is None or len(parts) > len(best[1])):
                best = (i, parts)
    return best


def upward(root, layers=LAYERS):
    """[(from module, to module, [(file, line, path)])] for each import that runs up."""
    out = []
    for crate in import_cycles.crates(root):
        if crate.label:
            continue
        edges = crate.edges()
        for a in sorted(edges):
            la = layer_of(a, layers)
            for b in sorted(edges[a]):
                lb = layer_of(b, layers)
                if la is None or lb is None or lb[0] <= la[0]:
                    continue
                out.append((a, b, edges[a][b]))
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--show"]
    root = args[0] if args else "segcache-core/src"
    if "--show" in sys.argv:
        for crate in import_cycles.crates(root):
            if crate.label:
                continue
            by_layer = {}
            for m in crate.files:
                lay = layer_of(m, LAYERS)
                by_layer.setdefault(lay[0] if lay else None, []).append("::".join(m) or "lib")
            for i, (name, _) in reversed(list(enumerate(LAYERS))):
                print(f"{i} {name}: {', '.join(sorted(by_layer.get(i, [])))}")
            if None in by_layer:
                print(f"in no layer: {', '.join(sorted(by_layer[None]))}")
    bad = upward(root)
    for a, b, where in bad:
        name = lambda m: "::".join(m) or "lib"
        print(f"{root}: {name(a)} (layer {layer_of(a, LAYERS)[0]}) imports {name(b)} (layer {layer_of(b, LAYERS)[0]})")
        for fname, line, text in where:
            print(f"    {os.path.join(root, fname)}:{line} {text}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
