"""Cache.compute: read, decide in Python, write, with no other writer of the key in between."""

import pickle
import sys
import threading

import pytest

import segcache


def test_put_keep_remove(cache, clock):
    assert cache.compute(b"n", lambda cur: b"1" if cur is None else segcache.KEEP) == b"1"
    cas = cache.gets(b"n")[1]
    assert cache.compute(b"n", lambda cur: bytes(str(int(cur) + 1), "ascii"), flags=7) == b"2"
    value, new_cas = cache.gets(b"n")
    assert value == b"2" and new_cas != cas  # a write gives a new CAS value
    assert cache.get_item(b"n")[1] == 7  # (value, flags, cas, ttl)
    assert cache.compute(b"n", lambda cur: segcache.KEEP) == b"2"
    assert cache.gets(b"n")[1] == new_cas  # kept: unchanged
    assert cache.compute(b"n", lambda cur: segcache.REMOVE) is None
    assert b"n" not in cache
    assert cache.compute(b"n", lambda cur: segcache.REMOVE) is None
    assert cache.compute(b"n", lambda cur: segcache.KEEP) is None
    assert b"n" not in cache


def test_the_answer_carries_its_ttl(cache, clock):
    cache.compute("a", lambda cur: (bytearray(b"short"), 5))
    cache.compute("b", lambda cur: b"default", ttl=100)
    clock.advance(10)
    assert cache.get("a") is None
    assert cache.get("b") == b"default"
    assert repr(segcache.KEEP) == "segcache.KEEP" and repr(segcache.REMOVE) == "segcache.REMOVE"


def test_an_exception_propagates_and_changes_nothing(cache):
    cache.set(b"k", b"v")

    def boom(cur):
        raise KeyError("no")

    with pytest.raises(KeyError):
        cache.compute(b"k", boom)
    assert cache.get(b"k") == b"v"


@pytest.mark.parametrize(
    "answer, error",
    [(None, TypeError), ("text", TypeError), ((b"v",), TypeError), ((b"v", "x"), TypeError), (12, TypeError)],
)
def test_bad_answers_are_refused_and_change_nothing(cache, answer, error):
    cache.set(b"k", b"v")
    with pytest.raises(error):
        cache.compute(b"k", lambda cur: answer)
    assert cache.get(b"k") == b"v"


def test_bad_arguments(cache):
    with pytest.raises(TypeError):
        cache.compute(b"k", "not callable")
    with pytest.raises(segcache.EmptyKey):
        cache.compute(b"", lambda cur: b"v")
    with pytest.raises(segcache.TooLarge):
        cache.compute(b"k", lambda cur: bytes(cache.segment_size + 1))
    cache.close()
    with pytest.raises(segcache.Closed):
        cache.compute(b"k", lambda cur: b"v")


def test_the_function_may_use_the_cache(cache):
    cache.set(b"other", b"5")
    assert cache.compute(b"k", lambda cur: cache.get(b"other") + b"!") == b"5!"


def test_concurrent_computes_lose_no_update():
    c = segcache.Cache(heap_size="8MiB", shards=1, eviction="none")
    c.set(b"n", b"0")
    threads, each = 8, 500
    # Switch threads often, so that computes interleave between their read and their write.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors = []

    def worker(i):
        try:
            for _ in range(each):
                if i % 4 == 3:
                    c.incr(b"n")  # another writer of the same key
                else:
                    c.compute(b"n", lambda cur: str(int(cur) + 1).encode())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    try:
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
            assert not t.is_alive(), "a thread hung"
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert c.get(b"n") == str(threads * each).encode()


def test_through_a_serializer_the_function_sees_and_answers_objects():
    c = segcache.Cache(heap_size="4MiB", serializer="pickle")
    assert c.compute("cart", lambda cur: {"items": []} if cur is None else segcache.KEEP) == {"items": []}
    got = c.compute("cart", lambda cur: {"items": cur["items"] + ["apple"]})
    assert got == {"items": ["apple"]} and c["cart"] == {"items": ["apple"]}
    assert c.compute("cart", lambda cur: segcache.KEEP) == {"items": ["apple"]}
    # A value the serializer refuses stores nothing and raises its error.
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        c.compute("cart", lambda cur: lambda: None)
    assert c["cart"] == {"items": ["apple"]}
    assert c.compute("cart", lambda cur: segcache.REMOVE) is None and "cart" not in c
