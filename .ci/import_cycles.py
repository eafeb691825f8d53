#!/usr/bin/env python3
"""Fails when a crate's source files import each other in a cycle.

Usage: import_cycles.py CRATE_SRC_DIR...

Each `.rs` file is a module (a node). The crates of a source directory are its roots: `lib.rs`,
`main.rs` and `bin/*.rs` (`bin/NAME/main.rs`), each with the files its `mod x;` declarations reach
(`x.rs` or `x/mod.rs`; `#[path]` is not followed); a file no root reaches is named by its path in
the library crate. An edge runs from a file to every other file of its crate that it names:

* `use` declarations, `pub use` included, with nested groups (`use crate::a::{b, c::{d, e}}`),
  `self`, globs and renames, starting with `crate::`, `$crate::`, `super::` (`super::super::`),
  `self::`, or a name the module has in scope (a child module declared with `mod x;`, a name an
  earlier `use` brought in: `use crate::a; use a::b::f;`);
* paths in code (expressions, types, patterns, attributes, macro arguments) starting the same
  ways: `crate::a::f()`, `super::x::Y`, `self::x::y`, `x::f()` where `x` is a child module or an
  imported module.

`super` and `self` count from the module the path is written in: `super` in `a/b/c.rs` (module
`a::b::c`) is `a::b`, in `a/b/mod.rs` (module `a::b`) it is `a`; `self` in `a/b/mod.rs` is `a::b`;
inside an inline `mod m { ... }` they count from that inline module. A path ends at the longest
prefix that is a module: `a::b::Item` names `a::b`, unless `a::b` imports or re-exports `Item`
(`use`, `pub use`, globs whose module has the name), which is then followed through to where the
name comes from.

Not edges: a parent's `mod x;` declaring a child, and a `pub use` by which a module re-exports an
item of its own descendants (`pub use x::Item;` in `a/mod.rs`, a facade like the `mod`
declaration itself; who imports `a::Item` gets the edge to `a::x`). Comments, doc comments,
string and char literals, and items under `#[cfg(test)]` (or `#[cfg(all(test, ...))]`: `mod
tests { ... }` blocks, test-only `mod x;`, `use`, functions) are ignored. Paths produced by macro
expansion are not seen.

A cycle (a strongly connected set of files) is printed with its edges, and under each edge where
it is written (file:line and the path); the exit status is then 1.
"""
import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RAW_STR = re.compile(r'(?:b|c)?r(#*)"')
STR = re.compile(r'(?:b|c)?"')
NUMBER = re.compile(r"[0-9][A-Za-z0-9_]*(?:\.[0-9][A-Za-z0-9_]*)?")
# An item under #[cfg(test)] ends at its first `;` (these) or else at its first `{...}` block.
SEMI_ITEMS = {"use", "const", "static", "type", "let"}
ITEM_KWS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union", "impl", "mod",
            "use", "extern", "macro_rules", "let"}
DEF_KWS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}
KEYWORDS = {"as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
            "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod",
            "move", "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super",
            "trait", "true", "type", "unsafe", "use", "where", "while", "union"}
STR_TOKEN, CHAR_TOKEN, EOF = '""', "''", "<eof>"


def tokenize(src):
    """(token, line) pairs; comments dropped, literals reduced to STR_TOKEN / CHAR_TOKEN."""
    toks, i, n, line = [], 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth = 0
            while i < n:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                    if depth == 0:
                        break
                else:
                    line += src[i] == "\n"
                    i += 1
        elif RAW_STR.match(src, i):
            m = RAW_STR.match(src, i)
            end = src.find('"' + m.group(1), m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            toks.append((STR_TOKEN, line))
            line += src.count("\n", i, end)
            i = end
        elif STR.match(src, i):
            j = STR.match(src, i).end()
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            toks.append((STR_TOKEN, line))
            line += src.count("\n", i, j)
            i = j + 1
        elif c == "'" or src.startswith("b'", i):
            k = i + 1 if c == "'" else i + 2
            if src[k:k + 1] == "\\":  # '\n', '\'', '\u{..}'
                j = src.find("'", k + 2)
                i = n if j < 0 else j + 1
                toks.append((CHAR_TOKEN, line))
            elif src[k + 1:k + 2] == "'":  # 'x'
                i = k + 2
                toks.append((CHAR_TOKEN, line))
            else:  # a lifetime or a label: its name follows as an identifier
                i = k
        elif src.startswith("r#", i) and IDENT.match(src, i + 2):
            m = IDENT.match(src, i + 2)
            toks.append((m.group(0), line))
            i = m.end()
        elif IDENT.match(src, i):
            m = IDENT.match(src, i)
            toks.append((m.group(0), line))
            i = m.end()
        elif src.startswith("$crate", i) and not IDENT.match(src, i + 6):
            toks.append(("$crate", line))
            i += 6
        elif src.startswith("::", i):
            toks.append(("::", line))
            i += 2
        elif NUMBER.match(src, i):
            toks.append(("0", line))
            i = NUMBER.match(src, i).end()
        else:
            toks.append((c, line))
            i += 1
    return toks + [(EOF, line)] * 4


def is_name(tok):
    return bool(IDENT.fullmatch(tok)) and tok not in KEYWORDS


def closing(t, i):
    """Index of the bracket closing the one at t[i] (or of EOF)."""
    pairs, depth = {"(": ")", "[": "]", "{": "}"}, 0
    opener = t[i]
    if opener not in pairs:
        return i
    for k in range(i, len(t)):
        if t[k] == opener:
            depth += 1
        elif t[k] == pairs[opener]:
            depth -= 1
            if depth == 0:
                return k
    return len(t) - 1


def requires_test(t):
    """Whether a cfg predicate's tokens (`test`, `all(test, not(loom))`, ...) only hold under test."""
    def pred(i):  # -> (requires test, next index)
        name = t[i]
        i += 1
        if i < len(t) and t[i] == "=":
            return False, i + 2
        if i < len(t) and t[i] == "(":
            args, i = [], i + 1
            while i < len(t) and t[i] != ")":
                req, i = pred(i)
                args.append(req)
                if i < len(t) and t[i] == ",":
                    i += 1
            return name == "all" and any(args), i + 1
        return name == "test", i
    try:
        return pred(0)[0]
    except IndexError:
        return False


def is_attribute(t, i):
    return t[i] == "#" and (t[i + 1] == "[" or (t[i + 1] == "!" and t[i + 2] == "["))


def attribute_end(t, i):
    """t[i] is `#`: the index after its `]`, and whether it is a test-only cfg."""
    j = i + 1 + (t[i + 1] == "!")
    end = closing(t, j)
    body = t[j + 1:end]
    return end + 1, len(body) > 3 and body[0] == "cfg" and body[1] == "(" and requires_test(body[2:-1])


def item_end(t, i):
    """The index after the item (or field, variant, statement) starting at t[i]."""
    while is_attribute(t, i):
        i = attribute_end(t, i)[0]
    kw = next((x for x in t[i:i + 8] if x in ITEM_KWS), None)
    if kw == "const" and t[t.index("const", i) + 1] in ("fn", "unsafe", "async", "extern"):
        kw = "fn"
    depth = 0
    for k in range(i, len(t)):
        x = t[k]
        if x in "([{":
            depth += 1
        elif x in ")]}":
            depth -= 1
            if depth < 0:
                return k
            if depth == 0 and x == "}" and kw not in SEMI_ITEMS:
                return k + 1
        elif depth == 0 and (x == ";" or (x == "," and kw is None)):
            return k + 1
    return len(t) - 1


class Use:
    def __init__(self, scope, segs, alias, public, line):
        self.scope, self.segs, self.alias, self.public, self.line = scope, segs, alias, public, line


def parse_use(t, i, scope, public, line):
    """The leaves of the use tree starting at t[i] (after `use`) and the index after its `;`."""
    leaves = []

    def tree(i, prefix):
        segs = list(prefix)
        if t[i] == "::":
            segs, i = ["::"], i + 1
        while True:
            x = t[i]
            if x == "{":
                i += 1
                while t[i] not in ("}", EOF, ";"):
                    i = tree(i, segs)
                    if t[i] == ",":
                        i += 1
                return i + 1
            if x == "*":
                leaves.append(Use(scope, segs, "*", public, line))
                return i + 1
            if IDENT.fullmatch(x) or x == "$crate":
                segs.append(x)
                i += 1
                if t[i] == "::":
                    i += 1
                    continue
                alias = x
                if x == "self" and len(segs) > 1:
                    segs.pop()
                    alias = segs[-1]
                if t[i] == "as":
                    alias, i = t[i + 1], i + 2
                leaves.append(Use(scope, segs, alias, public, line))
                return i
            return i + 1

    while t[i] not in (";", EOF):
        i = tree(i, [])
    return leaves, i + 1


class Scan:
    """What one file declares and names. Scopes are module paths (tuples): the file's own, or an
    inline `mod m { ... }` inside it."""

    def __init__(self, src, path):
        self.decls = []  # (scope, child name, line): `mod x;`
        self.test_decls = []  # (scope, child name): `mod x;` under #[cfg(test)]
        self.inline = {path}  # the file's module and its inline modules
        self.uses = []  # Use
        self.items = {}  # scope -> names defined there
        self.paths = []  # (scope, segments, line)
        self.scan(tokenize(src), path)

    def scan(self, tl, path):
        t = [x for x, _ in tl]
        lines = [ln for _, ln in tl]
        scopes, depth, i = [(path, -1)], 0, 0
        while t[i] != EOF:
            x, scope = t[i], scopes[-1][0]
            prev = t[i - 1] if i else ""
            if is_attribute(t, i):
                end, test_only = attribute_end(t, i)
                if test_only and t[i + 1] == "!":  # #![cfg(test)]: the rest of this module
                    if len(scopes) == 1:
                        return
                    i = self.scope_end(t, i, depth)
                    continue
                if test_only:
                    k = end
                    while is_attribute(t, k):
                        k = attribute_end(t, k)[0]
                    while t[k] in ("pub", "(", "crate", "super", "self", "in", ")") and t[k] != "mod":
                        k += 1
                    if t[k] == "mod" and is_name(t[k + 1]) and t[k + 2] == ";":
                        self.test_decls.append((scope, t[k + 1]))
                    i = item_end(t, i)
                    continue
                i += 1
            elif x == "{":
                depth += 1
                i += 1
            elif x == "}":
                if scopes[-1][1] == depth:
                    scopes.pop()
                depth -= 1
                i += 1
            elif x == "mod" and is_name(t[i + 1]) and t[i + 2] in (";", "{"):
                if t[i + 2] == ";":
                    self.decls.append((scope, t[i + 1], lines[i]))
                else:
                    depth += 1
                    scopes.append((scope + (t[i + 1],), depth))
                    self.inline.add(scope + (t[i + 1],))
                i += 3
            elif x == "use" and prev != "::":
                public = prev == "pub" or (prev == ")" and t[self.opening(t, i - 1) - 1] == "pub")
                leaves, i = parse_use(t, i + 1, scope, public, lines[i])
                self.uses += leaves
            elif x == "pub" and t[i + 1] == "(" and t[i + 2] == "in":
                i = closing(t, i + 1) + 1
            elif x in DEF_KWS and is_name(t[i + 1]):
                self.items.setdefault(scope, set()).add(t[i + 1])
                i += 1
            elif x == "macro_rules" and t[i + 1] == "!" and is_name(t[i + 2]):
                self.items.setdefault(scope, set()).add(t[i + 2])
                i += 3
            elif (IDENT.fullmatch(x) or x == "$crate") and t[i + 1] == "::" and prev not in ("::", "$"):
                segs, k = [x], i + 1
                while t[k] == "::" and IDENT.fullmatch(t[k + 1]):
                    segs.append(t[k + 1])
                    k += 2
                if len(segs) > 1:
                    self.paths.append((scope, segs, lines[i]))
                i = max(k, i + 1)
            else:
                i += 1

    @staticmethod
    def opening(t, k):
        depth = 0
        for j in range(k, -1, -1):
            depth += t[j] == ")"
            depth -= t[j] == "("
            if depth == 0:
                return j
        return 0

    @staticmethod
    def scope_end(t, i, depth):
        """The index of the `}` closing the block open at brace depth `depth`."""
        d = depth
        for k in range(i, len(t)):
            if t[k] == "{":
                d += 1
            elif t[k] == "}":
                if d == depth:
                    return k
                d -= 1
        return len(t) - 1


class Module:
    def __init__(self, node):
        self.node = node  # the file's module path
        self.children = {}  # name -> module path
        self.bindings = {}  # name -> Use
        self.globs = []  # Use
        self.items = set()


class Crate:
    def __init__(self, label):
        self.label = label
        self.mods = {}  # module path -> Module
        self.files = {}  # file's module path -> (file name, Scan)

    def mod(self, path, node):
        if path not in self.mods:
            self.mods[path] = Module(node)
        return self.mods[path]

    def add_file(self, path, fname, src):
        scan = Scan(src, path)
        self.files[path] = (fname, scan)
        for scope in scan.inline:
            self.mod(scope, path)
        for scope, names in scan.items.items():
            self.mod(scope, path).items |= names
        for u in scan.uses:
            if u.alias == "*":
                self.mods[u.scope].globs.append(u)
            elif u.alias != "_":
                self.mods[u.scope].bindings[u.alias] = u
        for scope, name, _ in scan.decls:
            self.mods[scope].children[name] = scope + (name,)
        return scan

    def name(self, path):
        base = "::".join(path) if path else "crate"
        return f"{self.label}:{base}" if self.label else base

    def absolute(self, segs, scope):
        """The path from the crate root that `segs`, written in `scope`, names; None if another
        crate's."""
        head = segs[0]
        if head in ("crate", "$crate"):
            return list(segs[1:])
        if head in ("super", "self"):
            cur, k = list(scope), 0
            while k < len(segs) and segs[k] in ("super", "self"):
                if segs[k] == "super":
                    cur = cur[:-1]
                k += 1
            return cur + list(segs[k:])
        m = self.mods.get(scope)
        if m and (head in m.children or head in m.bindings or head in m.items):
            return list(scope) + list(segs)
        return None

    def resolve(self, segs, seen=frozenset()):
        """The module a crate-root path ends in, through imports and re-exports."""
        cur = ()
        for i, name in enumerate(segs):
            m = self.mods.get(cur)
            if m is None:
                return cur
            if name in m.children and m.children[name] in self.mods:
                cur = m.children[name]
                continue
            if name in m.bindings and (cur, name) not in seen:
                u = m.bindings[name]
                target = self.absolute(u.segs, u.scope)
                if target is None:
                    return cur
                return self.resolve(target + list(segs[i + 1:]), seen | {(cur, name)})
            if name in m.items:
                return cur
            for g in m.globs:
                if (cur, "*", id(g)) in seen:
                    continue
                target = self.absolute(g.segs, g.scope)
                if target is None:
                    continue
                gmod = self.mods.get(self.resolve(target, seen | {(cur, "*", id(g))}))
                if gmod and (name in gmod.children or name in gmod.bindings or name in gmod.items):
                    return self.resolve(target + list(segs[i:]), seen | {(cur, "*", id(g))})
            return cur
        return cur

    def edges(self):
        """file -> {file: [(file name, line, path text)]}"""
        out = {node: {} for node in self.files}
        for node, (fname, scan) in self.files.items():
            named = [(u.segs, u.scope, u.line, u.public) for u in scan.uses]
            named += [(segs, scope, line, False) for scope, segs, line in scan.paths]
            for segs, scope, line, public in named:
                target = self.absolute(segs, scope)
                if target is None:
                    continue
                to = self.mods[self.resolve(target)].node
                if to == node or to not in self.files:
                    continue
                if public and len(to) > len(node) and to[:len(node)] == node:
                    continue  # a facade re-exporting its own descendants' items
                out[node].setdefault(to, []).append((fname, line, "::".join(segs)))
        return out


def crate_roots(root):
    """(label, root file relative to `root`) for each crate whose sources lie in `root`."""
    roots = []
    has_lib = os.path.isfile(os.path.join(root, "lib.rs"))
    if has_lib:
        roots.append(("", "lib.rs"))
    if os.path.isfile(os.path.join(root, "main.rs")):
        roots.append(("main" if has_lib else "", "main.rs"))
    bindir = os.path.join(root, "bin")
    if os.path.isdir(bindir):
        for n in sorted(os.listdir(bindir)):
            if n.endswith(".rs"):
                roots.append((f"bin/{n[:-3]}", f"bin/{n}"))
            elif os.path.isfile(os.path.join(bindir, n, "main.rs")):
                roots.append((f"bin/{n}", f"bin/{n}/main.rs"))
    return roots


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def crates(root):
    found, seen, skipped = [], set(), set()
    for label, rootfile in crate_roots(root):
        crate = Crate(label)
        queue = [((), rootfile, os.path.dirname(rootfile))]
        while queue:
            path, rel, childdir = queue.pop(0)
            seen.add(rel)
            scan = crate.add_file(path, rel, read(os.path.join(root, rel)))
            for scope, name in scan.test_decls:
                sub = os.path.join(childdir, *scope[len(path):])
                skipped.update({os.path.join(sub, name + ".rs"), os.path.join(sub, name, "mod.rs")})
            for scope, name, _ in scan.decls:
                sub = os.path.join(childdir, *scope[len(path):])
                for cand, cdir in ((os.path.join(sub, name + ".rs"), os.path.join(sub, name)),
                                   (os.path.join(sub, name, "mod.rs"), os.path.join(sub, name))):
                    if os.path.isfile(os.path.join(root, cand)):
                        if scope + (name,) not in crate.files and all(q[0] != scope + (name,) for q in queue):
                            queue.append((scope + (name,), os.path.normpath(cand), cdir))
                        break
        found.append(crate)
    # Files no root reaches: named by their path, in the library crate (or the only one).
    default = found[0] if found else Crate("")
    orphans = []
    for d, dirs, names in os.walk(root):
        dirs.sort()
        for n in sorted(names):
            rel = os.path.normpath(os.path.relpath(os.path.join(d, n), root))
            if not n.endswith(".rs") or rel in seen or rel in skipped or rel.startswith("bin" + os.sep):
                continue
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts.pop()
            if parts in (["lib"], ["main"]):
                parts = []
            if tuple(parts) not in default.files:
                orphans.append((tuple(parts), rel))
    for path, rel in orphans:
        default.add_file(path, rel, read(os.path.join(root, rel)))
    if not found and orphans:
        found.append(default)
    return found


def cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def main():
    bad = False
    for root in sys.argv[1:]:
        for crate in crates(root):
            edges = crate.edges()
            for comp in cycles(edges):
                bad = True
                print(f"{root}: import cycle among {', '.join(crate.name(m) for m in comp)}")
                for a in comp:
                    targets = sorted(b for b in edges[a] if b in comp)
                    print(f"  {crate.name(a)} -> {', '.join(crate.name(b) for b in targets)}")
                    for b in targets:
                        where = edges[a][b]
                        lines = len({(f, ln) for f, ln, _ in where})
                        more = f" (and {lines - 1} more lines)" if lines > 1 else ""
                        fname, line, text = where[0]
                        print(f"      {crate.name(b)}: {os.path.join(root, fname)}:{line} {text}{more}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
