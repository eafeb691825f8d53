"""The .pyi stub and py.typed ship with the package and describe what the module has."""

import ast
import pathlib

import segcache
from segcache import _segcache

PKG = pathlib.Path(segcache.__file__).parent


def stub_names():
    tree = ast.parse((PKG / "_segcache.pyi").read_text())
    top, classes = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, ast.AnnAssign):
            top.add(node.target.id)
    return top, classes


def test_typed_marker_ships():
    assert (PKG / "py.typed").exists()


def test_stub_matches_the_module():
    top, classes = stub_names()
    runtime_top = {n for n in dir(_segcache) if not n.startswith("_") or n == "__version__"}
    assert runtime_top - {"Cache", "Item", "ManualClock"} == top
    for cls in ("Cache", "Item", "ManualClock"):
        runtime = {n for n in dir(getattr(_segcache, cls)) if not n.startswith("_")}
        declared = {n for n in classes[cls] if not n.startswith("_")}
        assert runtime == declared, cls
    dunders = {"__init__", "__enter__", "__exit__", "__getitem__", "__setitem__", "__delitem__",
               "__contains__", "__len__", "__iter__"}
    assert dunders <= classes["Cache"]
