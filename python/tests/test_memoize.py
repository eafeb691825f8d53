"""segcache.memoize: sync and async functions, lru_cache-like keys."""

import asyncio
import json
import pickle

import pytest

import segcache


@pytest.fixture
def c():
    cache = segcache.Cache(heap_size="8MiB", segment_size="64KiB", eviction="none")
    yield cache
    cache.close()


def test_sync_results_are_cached(c):
    calls = []

    @segcache.memoize(c)
    def f(a, b=2, *, scale=1):
        calls.append((a, b, scale))
        return {"sum": (a + b) * scale, "list": [a, b]}

    assert f(1) == {"sum": 3, "list": [1, 2]}
    assert f(1) == {"sum": 3, "list": [1, 2]}
    assert len(calls) == 1
    assert f(1, 3) == {"sum": 4, "list": [1, 3]}
    assert f(1, scale=10) == {"sum": 30, "list": [1, 2]}
    assert len(calls) == 3
    assert f.__name__ == "f"
    assert f.__wrapped__ is not None
    assert len(c) == 3


def test_kwargs_order_and_int_float_equivalence(c):
    calls = []

    @segcache.memoize(c)
    def f(**kw):
        calls.append(kw)
        return sorted(kw.items())

    f(a=1, b=2)
    f(b=2, a=1)
    assert len(calls) == 1
    f(a=1.0, b=2)  # 1 == 1.0, as lru_cache(typed=False)
    assert len(calls) == 1
    f(a=True, b=2)  # True == 1, as lru_cache
    assert len(calls) == 1


def test_typed(c):
    calls = []

    @segcache.memoize(c, typed=True)
    def f(x):
        calls.append(x)
        return x

    f(1)
    f(1.0)
    f(True)
    assert len(calls) == 3
    f(1)
    assert len(calls) == 3


def test_keys_of_many_argument_types(c):
    calls = []

    @segcache.memoize(c)
    def f(*args):
        calls.append(args)
        return len(calls)

    args = [None, "s", b"b", 1.5, (1, (2, "x")), frozenset({"a", "b", "c"}), 2**100, complex(1, 2)]
    first = [f(a) for a in args]
    again = [f(a) for a in args]
    assert first == again
    assert len(calls) == len(args)
    assert f(frozenset({"c", "b", "a"})) == first[5]  # same set, any order


def test_unhashable_arguments_raise_like_lru_cache(c):
    @segcache.memoize(c)
    def f(x):
        return x

    with pytest.raises(TypeError):
        f([1, 2])
    with pytest.raises(TypeError):
        f(x={"a": 1})


def test_keys_are_stable_and_short():
    k1 = segcache.make_key(b"mod.f", (1, "a"), {"z": 1, "y": 2})
    k2 = segcache.make_key(b"mod.f", (1, "a"), {"y": 2, "z": 1})
    assert k1 == k2
    assert k1.startswith(b"mod.f:")
    assert len(k1) <= segcache.MAX_KEY_LEN
    assert segcache.make_key(b"mod.f", (1,), {}) != segcache.make_key(b"mod.g", (1,), {})
    assert segcache.make_key(b"p", ("ab", "c"), {}) != segcache.make_key(b"p", ("a", "bc"), {})


def test_none_result_is_cached(c):
    calls = []

    @segcache.memoize(c)
    def f():
        calls.append(1)

    assert f() is None
    assert f() is None
    assert len(calls) == 1


def test_exceptions_are_not_cached(c):
    calls = []

    @segcache.memoize(c)
    def f():
        calls.append(1)
        raise RuntimeError("boom")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            f()
    assert len(calls) == 2


def test_async(c):
    calls = []

    @segcache.memoize(c, ttl=60)
    async def fetch(x):
        calls.append(x)
        await asyncio.sleep(0)
        return x * 2

    async def main():
        return [await fetch(3), await fetch(3), await fetch(4)]

    assert asyncio.run(main()) == [6, 6, 8]
    assert calls == [3, 4]
    assert asyncio.iscoroutinefunction(fetch)


def test_ttl_applies(c):
    clock = segcache.ManualClock(1000)
    cache = segcache.Cache(heap_size="8MiB", clock=clock)
    calls = []

    @segcache.memoize(cache, ttl=10)
    def f():
        calls.append(1)
        return 1

    f()
    clock.advance(9)
    f()
    assert len(calls) == 1
    clock.advance(1)
    f()
    assert len(calls) == 2


def test_json_serializer(c):
    @segcache.memoize(c, serializer=json)
    def f(x):
        return {"x": x}

    assert f(1) == {"x": 1}
    assert f(1) == {"x": 1}
    raw = c.get(f.cache_key(1))
    assert json.loads(raw) == {"x": 1}


def test_too_large_result_is_returned_uncached(c):
    @segcache.memoize(c)
    def f():
        return b"x" * (200 << 10)  # larger than a 64 KiB segment

    assert len(f()) == 200 << 10
    assert c.get(f.cache_key()) is None


def test_corrupt_entry_is_a_miss(c):
    calls = []

    @segcache.memoize(c)
    def f():
        calls.append(1)
        return "fresh"

    c.set(f.cache_key(), b"not a pickle")
    assert f() == "fresh"
    assert pickle.loads(c.get(f.cache_key())) == "fresh"


def test_invalidate(c):
    calls = []

    @segcache.memoize(c)
    def f(x):
        calls.append(x)
        return x

    f(1)
    assert f.invalidate(1) is True
    assert f.invalidate(1) is False
    f(1)
    assert calls == [1, 1]


def test_bad_arguments():
    with pytest.raises(TypeError, match="cache"):
        segcache.memoize({})
    c = segcache.Cache(heap_size="8MiB")
    with pytest.raises(TypeError, match="serializer"):
        segcache.memoize(c, serializer=object())


class Thing:
    """A user class with its own equality: keyed by its pickle."""

    def __init__(self, n):
        self.n = n

    def __hash__(self):
        return self.n

    def __eq__(self, other):
        return self.n == other.n


def test_user_class_arguments(c):
    calls = []

    @segcache.memoize(c)
    def f(thing):
        calls.append(thing.n)
        return thing.n

    assert f(Thing(5)) == 5
    assert f(Thing(5)) == 5
    assert f(Thing(6)) == 6
    assert calls == [5, 6]


def test_unpicklable_argument_is_a_clear_type_error(c):
    class Local:
        pass

    @segcache.memoize(c)
    def f(x):
        return 1

    with pytest.raises(TypeError, match="cannot build a cache key"):
        f(Local())
