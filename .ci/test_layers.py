#!/usr/bin/env python3
"""Tests of layers.py: small crates in a temporary directory, with imports that run down (which
pass) or up, written each way import_cycles.py sees them (which must be reported).

Run: python3 .ci/test_layers.py
"""
import os
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layers  # noqa: E402

LAYERS = [("bottom", ["low", "mid::data"]), ("middle", ["mid"]), ("top", ["high", ""])]


def upward(files):
    """The upward imports of a crate made of `files` (path -> source), as (from, to) names."""
    with tempfile.TemporaryDirectory() as tmp:
        for path, text in files.items():
            full = os.path.join(tmp, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(textwrap.dedent(text))
        found = layers.upward(tmp, LAYERS)
        return [("::".join(a), "::".join(b)) for a, b, _ in found]


LIB = "mod low;\nmod mid;\nmod high;\n"
MID = "pub mod data;\npub fn f() {}\n"


class Layers(unittest.TestCase):
    def test_imports_down_pass(self):
        self.assertEqual(upward({
            "lib.rs": LIB,
            "low.rs": "pub struct L;\n",
            "mid/mod.rs": MID,
            "mid/data.rs": "pub struct D(pub crate::low::L);\n",
            "high.rs": "use crate::mid::f;\npub fn h() { f() }\n",
        }), [])

    def test_use_crate_up_is_reported(self):
        self.assertEqual(upward({
            "lib.rs": LIB,
            "low.rs": "use crate::high::h;\npub fn l() { h() }\n",
            "mid/mod.rs": MID,
            "mid/data.rs": "",
            "high.rs": "pub fn h() {}\n",
        }), [("low", "high")])

    def test_super_path_up_is_reported(self):
        self.assertEqual(upward({
            "lib.rs": LIB,
            "low.rs": "",
            "mid/mod.rs": MID,
            "mid/data.rs": "pub fn d() { super::f() }\n",
            "high.rs": "",
        }), [("mid::data", "mid")])

    def test_inline_path_up_is_reported(self):
        self.assertEqual(upward({
            "lib.rs": LIB,
            "low.rs": "pub fn l() { crate::mid::f() }\n",
            "mid/mod.rs": MID,
            "mid/data.rs": "",
            "high.rs": "",
        }), [("low", "mid")])

    def test_a_path_through_the_crate_root_is_up(self):
        self.assertEqual(upward({
            "lib.rs": LIB + "pub use high::H;\n",
            "low.rs": "use crate::H;\npub fn l(_: H) {}\n",
            "mid/mod.rs": MID,
            "mid/data.rs": "",
            "high.rs": "pub struct H;\n",
        }), [("low", "high")])

    def test_test_code_is_left_out(self):
        self.assertEqual(upward({
            "lib.rs": LIB,
            "low.rs": "#[cfg(test)]\nmod tests {\n    use crate::high::h;\n}\n",
            "mid/mod.rs": MID,
            "mid/data.rs": "",
            "high.rs": "pub fn h() {}\n",
        }), [])


if __name__ == "__main__":
    unittest.main()
