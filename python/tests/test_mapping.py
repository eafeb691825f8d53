"""`Cache` as a `collections.abc.MutableMapping`: iteration over the engine's key scan, the dict
methods (compared with a real dict over random operations), and iteration while another thread
writes."""

import random
import threading
from collections import Counter
from collections.abc import ItemsView, KeysView, Mapping, MutableMapping, ValuesView

import pytest

import segcache


def test_is_a_mutable_mapping(cache):
    assert isinstance(cache, MutableMapping)
    assert isinstance(cache, Mapping)
    assert issubclass(segcache.Cache, MutableMapping)


def test_contains_is_false_for_what_cannot_be_a_key(cache):
    cache[b"k"] = b"v"
    for k in (1, None, 1.5, ("a",), [], {}, object(), "", b"", b"k" * 251, "k" * 251):
        assert (k in cache) is False, k
    assert b"k" in cache and "k" in cache and bytearray(b"k") in cache and memoryview(b"k") in cache
    cache.close()
    with pytest.raises(segcache.Closed):
        1 in cache


def test_iteration_yields_every_key_once_as_bytes(cache):
    assert list(cache) == []
    cache["str-key"] = b"1"
    cache["\u00e9t\u00e9"] = b"2"
    cache[b"\x00\xff"] = b"3"
    cache[bytearray(b"ba")] = b"4"
    keys = list(cache)
    assert all(type(k) is bytes for k in keys)
    assert sorted(keys) == sorted([b"str-key", "\u00e9t\u00e9".encode(), b"\x00\xff", b"ba"])
    for i in range(1000):
        cache[f"k{i}"] = b"v"
    keys = list(cache)
    assert len(keys) == len(set(keys)) == 1004 == len(cache)
    it = iter(cache)
    assert iter(it) is it
    assert next(it) in keys


def test_iterating_and_deleting_in_the_same_loop(cache):
    for i in range(500):
        cache[f"k{i}"] = b"v"
    seen = []
    for k in cache:
        seen.append(k)
        del cache[k]
    assert sorted(seen) == sorted(f"k{i}".encode() for i in range(500))
    assert len(cache) == 0


def test_iteration_after_close_raises_closed(cache):
    cache[b"a"] = b"1"
    it = iter(cache)
    cache.close()
    with pytest.raises(segcache.Closed):
        next(it)
    with pytest.raises(segcache.Closed):
        iter(cache)
    for call in (lambda: list(cache.items()), lambda: cache.pop(b"a"), cache.popitem, cache.clear,
                 lambda: cache.setdefault(b"a", b"1"), lambda: cache.update()):
        with pytest.raises(segcache.Closed):
            call()


@pytest.mark.parametrize("view", ["items", "values"])
def test_values_and_items_skip_keys_removed_while_iterating(cache, view):
    for i in range(500):
        cache[b"k%d" % i] = b"v%d" % i
    got = []
    for x in getattr(cache, view)():
        if not got:
            for i in range(500):
                cache.delete(b"k%d" % i)  # the keys listed with it in the same batch included
        got.append(x)
    assert len(got) == 1  # a plain ItemsView would raise KeyError on the next listed key


def test_views(cache):
    cache.update({b"a": b"1", "b": b"2"})
    keys, values, items = cache.keys(), cache.values(), cache.items()
    assert isinstance(keys, KeysView) and isinstance(values, ValuesView) and isinstance(items, ItemsView)
    assert set(keys) == {b"a", b"b"} and len(keys) == 2
    assert b"a" in keys and "a" in keys and 1 not in keys
    assert sorted(values) == [b"1", b"2"] and b"1" in values and b"3" not in values
    assert set(items) == {(b"a", b"1"), (b"b", b"2")}
    assert (b"a", b"1") in items and ("a", b"1") in items
    assert (b"a", b"2") not in items and (1, b"1") not in items and "a" not in items
    assert keys & {b"a", b"z"} == {b"a"}
    cache["c"] = b"3"  # views are live
    assert len(keys) == 3 and (b"c", b"3") in items
    assert dict(cache) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    assert dict(items) == dict(cache)


def test_dict_methods(cache):
    with pytest.raises(KeyError):
        cache.pop(b"a")
    assert cache.pop(b"a", None) is None
    assert cache.pop("a", b"d") == b"d"
    with pytest.raises(TypeError):
        cache.pop(b"a", 1, 2)
    with pytest.raises(KeyError):
        cache.popitem()
    assert cache.setdefault("a", b"1") == b"1"
    assert cache.setdefault(b"a", b"2") == b"1"
    with pytest.raises(TypeError):
        cache.setdefault(b"absent")  # a dict would store None; a cache stores bytes only
    assert b"absent" not in cache
    assert cache.setdefault(b"a") == b"1"
    assert cache.pop("a") == b"1" and b"a" not in cache
    cache.update([(b"x", b"1"), [b"y", b"2"]], z=b"3")
    assert dict(cache.items()) == {b"x": b"1", b"y": b"2", b"z": b"3"}
    cache.update(x=b"9")
    assert cache[b"x"] == b"9"
    cache.update(other=b"o")  # as dict.update: a keyword is a key, whatever its name
    assert cache.pop(b"other") == b"o"
    with pytest.raises(TypeError):
        cache.pop(b"x", default=b"")  # as dict.pop: no keywords
    with pytest.raises(ValueError):
        cache.update([(b"k",)])
    with pytest.raises(TypeError):
        cache.update([1])
    with pytest.raises(TypeError):
        cache.update({b"k": "not bytes"})
    k, v = cache.popitem()
    assert type(k) is bytes and (k, v) in {(b"x", b"9"), (b"y", b"2"), (b"z", b"3")}
    assert k not in cache and len(cache) == 2
    cache.clear()
    assert len(cache) == 0 and list(cache) == []
    assert cache.get(b"x") is None and cache.get(b"x", b"d") == b"d"


def test_popitem_empties_a_cache(cache):
    for i in range(300):
        cache[f"k{i}"] = b"%d" % i
    got = {}
    while True:
        try:
            k, v = cache.popitem()
        except KeyError:
            break
        assert k not in got
        got[k] = v
    assert got == {f"k{i}".encode(): b"%d" % i for i in range(300)}
    assert len(cache) == 0
    cache[b"again"] = b"1"  # found again after the hint moved past it
    assert cache.popitem() == (b"again", b"1")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_operations_match_a_dict(cache, seed):
    rng = random.Random(seed)
    model = {}
    keys = [b"k%d" % i for i in range(40)] + ["s%d" % i for i in range(10)]

    def b(k):
        return k.encode() if isinstance(k, str) else k

    for step in range(3000):
        k = rng.choice(keys)
        v = b"v%d" % rng.randrange(1000)
        op = rng.randrange(12)
        if op == 0:
            cache[k] = v
            model[b(k)] = v
        elif op == 1:
            if b(k) in model:
                del cache[k]
                del model[b(k)]
            else:
                with pytest.raises(KeyError):
                    del cache[k]
        elif op == 2:
            assert cache.pop(k, None) == model.pop(b(k), None)
        elif op == 3:
            if b(k) in model:
                assert cache.pop(k) == model.pop(b(k))
            else:
                with pytest.raises(KeyError):
                    cache.pop(k)
        elif op == 4:
            assert cache.setdefault(k, v) == model.setdefault(b(k), v)
        elif op == 5:
            other = {rng.choice(keys): b"u%d" % i for i in range(rng.randrange(4))}
            cache.update(other)
            model.update({b(x): y for x, y in other.items()})
        elif op == 6:
            pairs = [(rng.choice(keys), b"p%d" % i) for i in range(rng.randrange(4))]
            cache.update(pairs)
            model.update((b(x), y) for x, y in pairs)
        elif op == 7:
            if model:
                key, val = cache.popitem()
                assert model.pop(key) == val
            else:
                with pytest.raises(KeyError):
                    cache.popitem()
        elif op == 8:
            assert cache.get(k) == model.get(b(k))
            assert (k in cache) == (b(k) in model)
        elif op == 9 and rng.random() < 0.05:
            cache.clear()
            model.clear()
        elif op == 10:
            assert sorted(cache) == sorted(model)
            assert sorted(cache.values()) == sorted(model.values())
        elif op == 11:
            assert dict(cache.items()) == model
        assert len(cache) == len(model), step
    assert dict(cache) == model


def test_iteration_under_a_concurrent_writer():
    c = segcache.Cache(heap_size="64MiB", segment_size="1MiB", eviction="none", shards=4)
    stable = {b"stable-%d" % i for i in range(3000)}
    for k in stable:
        c[k] = b"x" * 20
    stop = threading.Event()
    writes = [0]

    def churn():
        rng = random.Random(7)
        while not stop.is_set() and writes[0] < 200_000:
            k = b"churn-%d" % rng.randrange(500)
            if rng.random() < 0.5:
                c[k] = b"y" * rng.randrange(1, 64)
            else:
                c.delete(k)
            writes[0] += 1

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(5):
            seen = Counter(iter(c))  # Counter(c) would read c as a mapping: c[k] of a churned k
            assert all(n == 1 for n in seen.values()), [k for k, n in seen.items() if n > 1][:5]
            got = set(seen)
            assert stable <= got, sorted(stable - got)[:5]
            assert all(k.startswith(b"churn-") for k in got - stable)
            assert len(list(c.items())) >= len(stable)
    finally:
        stop.set()
        t.join()
    assert writes[0] > 0
    assert c.stats()["evicted_items"] == 0
    c.close()
