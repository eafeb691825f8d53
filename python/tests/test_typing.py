"""The stub under `mypy --strict` and pyright's strict mode: documented uses pass, wrong key and
value types fail.

mypy checks the installed package (its `_segcache.pyi` and `py.typed`), as a user's project would."""

import importlib.util
import json
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy", reason="mypy is in python/tests/requirements.txt")

GOOD = """
    from collections.abc import Mapping, MutableMapping
    from datetime import timedelta
    from typing import Optional, Tuple, Union

    from typing_extensions import Buffer

    import segcache

    c = segcache.Cache(heap_size="64MiB", ttl=timedelta(minutes=5))
    c.set("user:1", b"alice")
    c.set(b"user:2", bytearray(b"bob"), ttl=60, flags=3)
    c.set(memoryview(b"k"), memoryview(b"v"))
    c["x"] = b"1"
    v: bytes = c["x"]
    g: Optional[bytes] = c.get("x")
    d: Union[bytes, int] = c.get("x", 0)
    p: bytes = c.pop("x", b"")
    q: Optional[bytes] = c.pop("x", None)
    kv: Tuple[bytes, bytes] = c.popitem()
    s: bytes = c.setdefault("y", b"2")
    c.update({b"a": b"1"})
    c.update({"a": b"1"})
    c.update([("a", b"1"), (b"b", bytearray(b"2"))], c=b"3")
    c.update(z=b"4")
    for k in c:
        kb: bytes = k
    for k2, v2 in c.items():
        both: Tuple[bytes, bytes] = (k2, v2)
    keys = set(c.keys()) | {b"other"}
    values = list(c.values())
    present: bool = b"zz" in c
    many = c.get_many(["a", "b"])
    first: Optional[bytes] = many.get("a")
    c.set_many({"a": b"1", "b": b"2"}, ttl=10)
    n: int = len(c)
    c.clear()
    m: MutableMapping[Union[str, Buffer], bytes] = c
    ro: Mapping[Union[str, Buffer], bytes] = c

    @segcache.memoize(c, ttl=60)
    def profile(user_id: int) -> dict[str, int]:
        return {"id": user_id}

    r: dict[str, int] = profile(1)
    gone: bool = profile.invalidate(1)
    ck: bytes = profile.cache_key(1)
    cache_of: segcache.Cache = profile.cache
    info: segcache.CacheInfo = profile.cache_info()
    hits: int = info.hits + info.misses + info.currsize
    profile.cache_clear()
    got: bytes = c.get_or_set("k", lambda: b"v", ttl=5)
    got2: bytes = c.get_or_set(b"k", lambda: bytearray(b"v"), ttl=timedelta(seconds=5))

    @segcache.memoize(c, lock=False)
    def unlocked(x: str) -> bytes:
        return x.encode()

    u: bytes = unlocked("a")

    class Service:
        @segcache.memoize(c)
        def balance(self, day: int) -> int:
            return day

    svc = Service()
    bal: int = svc.balance(3)
    via_class: int = Service.balance(svc, 3)
    dropped: bool = Service.balance.invalidate(svc, 3)
    shared = segcache.Cache(path="cache.dat", heap_size="64MiB", multi_process=True)
    is_shared: bool = shared.multi_process

    import asyncio
    import json
    from typing import Any

    class Point:
        def __init__(self, x: int) -> None:
            self.x = x

    class PointCodec:
        def dumps(self, obj: Point, /) -> bytes:
            return str(obj.x).encode()

        def loads(self, data: bytes, /) -> Point:
            return Point(int(data))

    pc = segcache.Cache(heap_size="64MiB", serializer=PointCodec())
    pc["p"] = Point(1)
    pc.set("q", Point(2), ttl=5)
    pt: Point = pc["p"]
    opt: Optional[Point] = pc.get("p")
    pv: Tuple[Point, int] = pc.gets("p", (Point(0), 0))
    pm: dict[str, Point] = pc.get_many(["p", "q"])
    pc.set_many({"r": Point(3)})
    pc.update({"s": Point(4)})
    pl: list[Point] = list(pc.values())
    pi: list[Tuple[bytes, Point]] = list(pc.items())
    pd: Point = pc.setdefault("t", Point(5))
    pg: Point = pc.get_or_set("u", lambda: Point(6))
    typed: segcache.Cache[Point] = pc
    st = pc.get_state("p")
    stv: Optional[Point] = st.value if st is not None else None
    bare: segcache.Cache = segcache.Cache()
    explicit: segcache.Cache[bytes] = c
    pk = segcache.Cache(serializer="pickle")
    pk["x"] = {"any": ["thing"]}
    anything: Any = pk["x"]
    js = segcache.Cache(serializer=json)
    js["x"] = [1, 2]

    async def load_point() -> Point:
        return Point(7)

    async def load_bytes() -> bytes:
        return b"v"

    async def use_async() -> Tuple[Point, bytes]:
        return (await pc.aget_or_set("v", load_point, ttl=5), await c.aget_or_set("w", load_bytes))

    @c.memoize(ttl=60)
    async def fetch(n: int) -> dict[str, int]:
        return {"n": n}

    async def use_memo() -> dict[str, int]:
        return await fetch(1)

    got_memo: dict[str, int] = asyncio.run(use_memo())
"""

# Every line marked `# E` must be an error, and no other line.
BAD = """
    import segcache

    c = segcache.Cache()
    c.set(5, b"v")  # E
    c.set("x", "a str")  # E
    c["k"] = "str"  # E
    c[1] = b"v"  # E
    n: int = c["k"]  # E
    k: str = next(iter(c))  # E
    c.update({b"a": "str"})  # E
    c.setdefault(b"k")  # E
    c.pop(1)  # E
    c.pop(b"k", default=b"")  # E

    @segcache.memoize(c)
    def profile(user_id: int) -> int:
        return user_id

    profile.invalidate("not an int")  # E
    s: str = profile(1)  # E
    c.get_or_set("k", lambda: "a str")  # E
    c.get_or_set("k", b"not callable")  # E
    t: str = c.get_or_set("k", lambda: b"v")  # E
    profile.cache_info().nope  # E

    class Service:
        @segcache.memoize(c)
        def balance(self, day: int) -> int:
            return day

    Service().balance("monday")  # E
    b: str = Service().balance(1)  # E
    segcache.Cache(path="c.dat", multi_process="yes")  # E
    m: str = c.multi_process  # E

    class Point:
        x = 1

    class PointCodec:
        def dumps(self, obj: Point, /) -> bytes:
            return b"1"

        def loads(self, data: bytes, /) -> Point:
            return Point()

    pc = segcache.Cache(serializer=PointCodec())
    pc["p"] = b"bytes"  # E
    pc.set("p", 5)  # E
    n2: int = pc["p"]  # E
    pc.append("p", b"x")  # E
    pc.incr("p")  # E
    pc.get_or_set("p", lambda: b"v")  # E
    segcache.Cache(serializer="json")  # E
    segcache.Cache(serializer=5)  # E
"""


def mypy(tmp_path, name, source):
    f = tmp_path / name
    f.write_text(textwrap.dedent(source))
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--show-error-codes",
         "--no-error-summary", str(f)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    return r, f.read_text().splitlines()


def test_documented_uses_pass_mypy_strict(tmp_path):
    r, _ = mypy(tmp_path, "good.py", GOOD)
    assert r.returncode == 0, r.stdout + r.stderr


def test_wrong_types_fail_mypy_strict(tmp_path):
    r, lines = mypy(tmp_path, "bad.py", BAD)
    assert r.returncode == 1, r.stdout + r.stderr
    want = {i + 1 for i, line in enumerate(lines) if line.endswith("# E")}
    got = {int(m.group(1)) for m in re.finditer(r"^bad\.py:(\d+): error", r.stdout, re.M)}
    assert got == want, r.stdout


def test_the_package_passes_mypy_strict(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--show-error-codes", "-p", "segcache"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def pyright(tmp_path, name, source):
    """pyright in strict mode over `source`, against this interpreter's installed package."""
    f = tmp_path / name
    f.write_text(textwrap.dedent(source))
    (tmp_path / "pyrightconfig.json").write_text('{"typeCheckingMode": "strict"}')
    r = subprocess.run(
        [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson", str(f)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    errors = [d for d in json.loads(r.stdout)["generalDiagnostics"] if d["severity"] == "error"]
    return errors, f.read_text().splitlines()


@pytest.mark.skipif(importlib.util.find_spec("pyright") is None, reason="pyright is in python/tests/requirements.txt")
def test_documented_uses_pass_pyright_strict(tmp_path):
    errors, _ = pyright(tmp_path, "good.py", GOOD)
    assert errors == [], errors


@pytest.mark.skipif(importlib.util.find_spec("pyright") is None, reason="pyright is in python/tests/requirements.txt")
def test_wrong_types_fail_pyright_strict(tmp_path):
    errors, lines = pyright(tmp_path, "bad.py", BAD)
    want = {i + 1 for i, line in enumerate(lines) if line.endswith("# E")}
    got = {d["range"]["start"]["line"] + 1 for d in errors}
    assert got == want, errors


REVEAL = """
    import json
    import segcache

    class Codec:
        def dumps(self, obj: list[int], /) -> str:
            return json.dumps(obj)

        def loads(self, data: bytes, /) -> list[int]:
            return [int(x) for x in json.loads(data)]

    reveal_type(segcache.Cache())
    reveal_type(segcache.Cache(serializer="pickle"))
    reveal_type(segcache.Cache(serializer=Codec()))
    reveal_type(segcache.Cache(serializer=Codec())["k"])
    reveal_type(segcache.Cache().get("k"))
"""


def test_the_value_type_follows_the_serializer(tmp_path):
    f = tmp_path / "reveal.py"
    f.write_text(textwrap.dedent(REVEAL))
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--no-error-summary", str(f)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    revealed = re.findall(r'Revealed type is "(.*)"', r.stdout)
    assert revealed == [
        "segcache._segcache.Cache[bytes]",
        "segcache._segcache.Cache[Any]",
        "segcache._segcache.Cache[list[int]]",
        "list[int]",
        "bytes | None",
    ], r.stdout
