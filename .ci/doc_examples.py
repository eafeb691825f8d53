#!/usr/bin/env python3
"""Every public item of a crate has a code example in its documentation.

Reads the crate's rustdoc JSON (nightly: `cargo +nightly rustdoc -p CRATE --lib -- -Z unstable-options
--output-format json`) and walks what the crate root exports: modules, types, traits and their
items, functions, constants, and the inherent methods and associated constants of the exported
types. Enum variants and struct fields are left out (their type's example shows them), and so are
trait implementations (their docs are the trait's). An item passes when its docs hold a fenced
code block (which `cargo test --doc` runs). rustdoc's own `missing_doc_code_examples` lint only
looks at items whose path is public, so it misses everything re-exported from private modules,
which is this crate's whole API.

Usage: doc_examples.py path/to/crate.json
"""

import json
import sys


def main(path: str) -> int:
    doc = json.load(open(path))
    index = doc["index"]
    missing, checked, seen = [], 0, set()

    def item(iid):
        return index.get(str(iid))

    def check(it, name):
        nonlocal checked
        checked += 1
        if "```" not in (it.get("docs") or ""):
            span = it.get("span") or {}
            where = f"{span.get('filename', '?')}:{(span.get('begin') or ['?'])[0]}"
            missing.append(f"{where}: {name}")

    def walk(iid, prefix):
        it = item(iid)
        if it is None or iid in seen:
            return
        seen.add(iid)
        kind = next(iter(it["inner"]))
        body = it["inner"][kind]
        if kind == "use":
            if body.get("id") is not None and not body.get("is_glob"):
                target = item(body["id"])
                if target is not None:
                    walk(body["id"], prefix)
            return
        if it.get("visibility") != "public" or it.get("attrs") and "#[doc(hidden)]" in str(it["attrs"]):
            return
        name = f"{prefix}::{it['name']}" if prefix else it["name"]
        check(it, name)
        if kind == "module":
            for child in body["items"]:
                walk(child, name)
        elif kind == "trait":
            for child in body["items"]:
                c = item(child)
                if c is not None:
                    check(c, f"{name}::{c['name']}")
        elif kind in ("struct", "enum", "union"):
            for impl_id in body.get("impls", []):
                imp = item(impl_id)["inner"]["impl"]
                if imp.get("trait") is not None or imp.get("is_synthetic") or imp.get("blanket_impl"):
                    continue
                for child in imp["items"]:
                    c = item(child)
                    if c is None or c.get("visibility") != "public":
                        continue
                    if "#[doc(hidden)]" in str(c.get("attrs")):
                        continue
                    check(c, f"{name}::{c['name']}")

    walk(doc["root"], "")
    for m in missing:
        print(f"no example: {m}")
    print(f"doc examples: {checked - len(missing)} of {checked} public items have one")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
