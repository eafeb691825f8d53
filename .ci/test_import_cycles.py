#!/usr/bin/env python3
"""Tests of import_cycles.py: small crates in a temporary directory, each with an import cycle
written one way (which the script must report) or without one (which it must pass).

Run: python3 .ci/test_import_cycles.py (or python3 -m unittest discover -s .ci -p 'test_*.py').
"""
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "import_cycles.py")


def run(files):
    """Writes `files` (path -> source) under a fresh src/ and runs the script on it."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        for path, text in files.items():
            full = os.path.join(src, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(textwrap.dedent(text))
        p = subprocess.run([sys.executable, SCRIPT, src], capture_output=True, text=True)
        return p.returncode, p.stdout.replace(src, "src") + p.stderr


class Case(unittest.TestCase):
    def assertCycle(self, files, *modules):
        rc, out = run(files)
        self.assertNotEqual(rc, 0, out)
        cycle = re.findall(r"^src: import cycle among (.*)$", out, flags=re.M)
        self.assertEqual(cycle, [", ".join(modules)], out)
        for m in modules:
            self.assertRegex(out, rf"(?m)^  {re.escape(m)} -> ", out)

    def assertAcyclic(self, files):
        rc, out = run(files)
        self.assertEqual((rc, out), (0, ""))


class Cycles(Case):
    def test_use_crate(self):
        self.assertCycle({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::g;\npub fn f() { g() }\n",
            "b.rs": "use crate::a::f;\npub fn g() { f() }\n",
        }, "a", "b")

    def test_use_super(self):
        self.assertCycle({
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod x;\nmod y;\n",
            "m/x.rs": "use super::y::Y;\npub struct X(Y);\n",
            "m/y.rs": "use super::x::X;\npub struct Y(Box<X>);\n",
        }, "m::x", "m::y")

    def test_nested_use_group(self):
        self.assertCycle({
            "lib.rs": "mod a;\nmod d;\n",
            "a/mod.rs": "pub mod b;\n",
            "a/b/mod.rs": "pub mod c;\n",
            "a/b/c.rs": "use crate::d::D;\npub fn f(_: D) {}\n",
            "d.rs": """\
                use crate::{
                    a::{b::{c::{self as cc, f}}},
                };
                pub struct D;
                """,
        }, "a::b::c", "d")

    def test_inline_crate_path(self):
        self.assertCycle({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub fn f() -> u8 { crate::b::g() }\n",
            "b.rs": "pub fn g() -> u8 { 1 }\npub fn h() { let _: fn() -> u8 = crate::a::f; }\n",
        }, "a", "b")

    def test_inline_super_path(self):
        # The shape of segcache-server/src/exec: no `use`, only paths in expressions.
        self.assertCycle({
            "lib.rs": "mod exec;\n",
            "exec/mod.rs": "mod meta;\nmod text;\npub use text::run;\n",
            "exec/text.rs": """\
                pub const VERSION: &str = "1";
                pub fn run() {
                    super::meta::execute(1)
                }
                """,
            "exec/meta.rs": "pub fn execute(n: usize) { let _ = super::text::VERSION.len() + n; }\n",
        }, "exec::meta", "exec::text")

    def test_inline_paths_in_types_and_attributes(self):
        self.assertCycle({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub struct A { pub b: Option<Box<crate::b::B>> }\n",
            "b.rs": "#[derive(Clone)]\n#[crate::a::marker]\npub struct B;\n",
        }, "a", "b")

    def test_self_path_in_mod_rs(self):
        self.assertCycle({
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod x;\npub struct Ctx;\npub fn run(c: &Ctx) { self::x::go(c) }\n",
            "m/x.rs": "use super::Ctx;\npub fn go(_: &Ctx) {}\n",
        }, "m", "m::x")

    def test_use_self_in_file_with_children(self):
        # a.rs (not a mod.rs) with a child module in a/x.rs.
        self.assertCycle({
            "lib.rs": "mod a;\n",
            "a.rs": "mod x;\nuse self::x::go;\npub struct Ctx;\npub fn run() { go() }\n",
            "a/x.rs": "pub fn go() { let _ = crate::a::Ctx; }\n",
        }, "a", "a::x")

    def test_super_super(self):
        self.assertCycle({
            "lib.rs": "mod a;\n",
            "a/mod.rs": "pub mod b;\npub mod helper;\n",
            "a/b/mod.rs": "pub mod c;\n",
            "a/b/c.rs": "use super::super::helper::H;\npub fn f(_: H) {}\n",
            "a/helper.rs": "pub struct H;\npub fn g() { crate::a::b::c::f(H) }\n",
        }, "a::b::c", "a::helper")

    def test_super_super_from_mod_rs(self):
        # From a/b/mod.rs (module a::b), super::super is the crate root.
        self.assertCycle({
            "lib.rs": "mod a;\nmod top;\n",
            "a/mod.rs": "pub mod b;\n",
            "a/b/mod.rs": "pub fn g() { super::super::top::t() }\n",
            "top.rs": "pub fn t() {}\npub fn u() { crate::a::b::g() }\n",
        }, "a::b", "top")

    def test_through_pub_use_reexport(self):
        # a names crate::Thing, which lib.rs re-exports from b: the edge runs to b, not to lib.rs.
        self.assertCycle({
            "lib.rs": "mod a;\nmod b;\npub use b::Thing as Other;\n",
            "a.rs": "use crate::Other;\npub fn f(_: Other) {}\n",
            "b.rs": "pub struct Thing;\nfn g() { crate::a::f(Thing) }\n",
        }, "a", "b")

    def test_through_reexport_in_mod_rs(self):
        self.assertCycle({
            "lib.rs": "mod a;\nmod m;\n",
            "a.rs": "pub fn f() -> crate::m::X { crate::m::X }\n",
            "m/mod.rs": "mod inner;\npub use self::inner::X;\n",
            "m/inner.rs": "pub struct X;\nfn g() { crate::a::f(); }\n",
        }, "a", "m::inner")

    def test_through_imported_module(self):
        # `use crate::m;` then `m::x::go()`: the edge runs to m::x.
        self.assertCycle({
            "lib.rs": "mod a;\nmod m;\n",
            "a.rs": "use crate::m;\npub fn f() { m::x::go() }\n",
            "m/mod.rs": "pub mod x;\n",
            "m/x.rs": "pub fn go() {}\nfn h() { crate::a::f() }\n",
        }, "a", "m::x")

    def test_glob_import(self):
        self.assertCycle({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::*;\npub fn f() { g() }\n",
            "b.rs": "pub fn g() {}\npub fn h() { crate::a::f() }\n",
        }, "a", "b")

    def test_binary_crate_root(self):
        # A crate with main.rs only (as benches/restart).
        self.assertCycle({
            "main.rs": "mod a;\nmod b;\nfn main() { a::f() }\n",
            "a.rs": "pub fn f() { crate::b::g() }\n",
            "b.rs": "pub fn g() {}\npub fn h() { super::a::f() }\n",
        }, "a", "b")

    def test_code_after_test_module_counts(self):
        self.assertCycle({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": """\
                pub fn f() {}
                #[cfg(test)]
                mod tests {
                    use super::*;
                    #[test]
                    fn t() { f() }
                }
                pub fn later() { crate::b::g() }
                """,
            "b.rs": "pub fn g() {}\nfn h() { crate::a::f() }\n",
        }, "a", "b")

    def test_output_names_where(self):
        rc, out = run({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "\n\npub fn f() { crate::b::g() }\n",
            "b.rs": "use crate::a::f;\npub fn g() {}\n",
        })
        self.assertEqual(rc, 1)
        self.assertEqual(out, textwrap.dedent("""\
            src: import cycle among a, b
              a -> b
                  b: src/a.rs:3 crate::b::g
              b -> a
                  a: src/b.rs:1 crate::a::f
            """))


class Acyclic(Case):
    def test_parent_declares_children(self):
        self.assertAcyclic({
            "lib.rs": "mod a;\npub mod b;\npub fn top() {}\n",
            "a/mod.rs": "mod x;\npub(crate) mod y;\npub struct Ctx;\n",
            "a/x.rs": "use super::Ctx;\nfn f(_: &Ctx) {}\n",
            "a/y.rs": "use crate::a::Ctx;\nfn f(_: &super::Ctx) { crate::top() }\n",
            "b.rs": "pub fn g() { super::top() }\n",
        })

    def test_facade_reexports_its_children(self):
        # mod.rs re-exports its children's items (pub use x::X, pub use self::y::Y) while the
        # children use mod.rs's own items: a facade, like the `mod` declarations.
        self.assertAcyclic({
            "lib.rs": "mod m;\npub use m::{X, Y};\n",
            "m/mod.rs": "mod x;\nmod y;\npub use x::X;\npub use self::y::Y;\npub struct Ctx;\n",
            "m/x.rs": "use super::Ctx;\npub struct X(Ctx);\n",
            "m/y.rs": "pub struct Y(super::Ctx);\nfn f() -> crate::X { todo!() }\n",
        })

    def test_comments_and_strings(self):
        self.assertAcyclic({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": r'''
                //! Module docs: see crate::b::g.
                // use crate::b::g;
                /* crate::b::g(); /* nested */ super::b::g() */
                /// Calls crate::b::g, like `super::b::g()`.
                pub const S: &str = "crate::b::g() \" super::b::g";
                pub const R: &str = r#"crate::b::g "quoted" "#;
                pub const B: &[u8] = b"crate::b::g";
                pub fn f<'a>(x: &'a str) -> (&'a str, char, char) { (x, '"', '\'') }
                ''',
            "b.rs": "use crate::a::{f, S};\npub fn g() { f(S); }\n",
        })

    def test_cfg_test_blocks(self):
        self.assertAcyclic({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": """\
                pub fn f() {}
                #[cfg(test)]
                mod tests {
                    use super::*;
                    use crate::b::g;
                    #[test]
                    fn t() { f(); g(); crate::b::g() }
                }
                #[cfg(all(test, not(loom)))]
                mod more_tests;
                #[cfg(test)]
                fn helper() { crate::b::g() }
                """,
            "a/more_tests.rs": "use crate::b::g;\n",
            "b.rs": "use crate::a::f;\npub fn g() { f() }\n",
        })

    def test_inline_module_scope(self):
        # super inside an inline `mod inner` is the file's module, not its parent.
        self.assertAcyclic({
            "lib.rs": "mod a;\npub struct Root;\npub fn top() { a::f() }\n",
            "a.rs": """\
                pub fn f() {}
                mod inner {
                    use super::f as ff;
                    pub fn g() { super::f(); self::h(); ff() }
                    fn h() {}
                }
                """,
        })

    def test_other_crates_paths(self):
        # `b::g()` in a.rs names another crate `b`, not crate::b (a's scope has no `b`).
        self.assertAcyclic({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use std::collections::HashMap;\npub fn f() { let _ = b::g(); let _: HashMap<u8, u8> = std::collections::HashMap::new(); }\n",
            "b.rs": "pub fn g() { crate::a::f() }\n",
        })

    def test_child_using_parent_items(self):
        self.assertAcyclic({
            "lib.rs": "mod m;\npub use m::run;\n",
            "m/mod.rs": "mod x;\npub struct Ctx;\npub fn run() {}\n",
            "m/x.rs": "use super::*;\nfn f(_: Ctx) { run(); super::run(); crate::run() }\n",
        })


if __name__ == "__main__":
    unittest.main()
