"""Cache(eviction_listener=fn): fn(key, value, cause) for each item that leaves, run with no
engine lock held (it may use the cache), its exceptions reported to sys.unraisablehook."""

import gc
import sys
import threading
import weakref

import pytest

import segcache


def listening(clock, heard, **kw):
    return segcache.Cache(
        heap_size="4MiB", segment_size="64KiB", clock=clock,
        eviction_listener=lambda k, v, cause: heard.append((k, v, cause)), **kw
    )


def test_each_cause_is_heard(clock):
    heard = []
    c = listening(clock, heard)
    c.set(b"k", b"one")
    c.set(b"k", b"two")  # same length: rewritten in place
    c.set(b"k", b"three")
    del c[b"k"]
    c.set(b"short", b"v", ttl=5)
    clock.advance(10)
    c.expire()
    c.compute(b"c", lambda cur: b"x")
    c.compute(b"c", lambda cur: segcache.REMOVE)
    assert heard == [
        (b"k", b"one", "replaced"),
        (b"k", b"two", "replaced"),
        (b"k", b"three", "removed"),
        (b"short", b"v", "expired"),
        (b"c", b"x", "removed"),
    ]
    heard.clear()
    c.flush()  # a flush is not told of
    for i in range(5000):
        c.set(f"fill{i}", bytes(1000))
    evicted = [h for h in heard if h[2] == "evicted"]
    assert evicted and len(evicted) == c.stats()["evicted_items"]
    assert all(k.startswith(b"fill") and v == bytes(1000) for k, v, _ in evicted)


def test_the_listener_may_use_the_cache(clock):
    c = None
    seen = []

    def listener(key, value, cause):
        # Back into the cache, the same key: no engine lock is held now.
        seen.append(c.get(key))
        if cause == "removed":
            c.set(key, b"back:" + value)

    c = segcache.Cache(heap_size="4MiB", clock=clock, eviction_listener=listener)
    c.set(b"k", b"v")
    c.delete(b"k")
    assert seen == [None]
    assert c.get(b"k") == b"back:v"


def test_exceptions_go_to_unraisablehook(clock, monkeypatch):
    caught = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: caught.append((u.exc_type, u.object)))

    def listener(key, value, cause):
        raise ValueError(key)

    c = segcache.Cache(heap_size="4MiB", clock=clock, eviction_listener=listener)
    c.set(b"a", b"1")
    c.set(b"b", b"1")
    c.delete(b"a")
    c.delete(b"b")  # the first exception stops nothing
    assert [t for t, _ in caught] == [ValueError, ValueError]
    assert caught[0][1] is listener
    assert c.get(b"a") is None and c.get(b"b") is None


def test_not_callable_is_refused():
    with pytest.raises(TypeError, match="eviction_listener must be callable"):
        segcache.Cache(heap_size="4MiB", eviction_listener=42)
    segcache.Cache(heap_size="4MiB", eviction_listener=None).close()


def test_listener_runs_on_the_thread_that_removed(clock):
    heard = []
    c = segcache.Cache(
        heap_size="4MiB", clock=clock,
        eviction_listener=lambda k, v, cause: heard.append((threading.get_ident(), k)) if cause == "removed" else None,
    )

    together = threading.Barrier(4)  # all alive at once: no thread id is reused

    def worker(i):
        together.wait()
        c.set(f"t{i}", b"v")
        c.delete(f"t{i}")
        together.wait()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(k for _, k in heard) == [b"t0", b"t1", b"t2", b"t3"]
    assert len({tid for tid, _ in heard}) == 4


def test_a_large_value_replaced_without_the_gil_is_heard(clock):
    heard = []
    c = segcache.Cache(heap_size="8MiB", clock=clock, eviction_listener=lambda k, v, cause: heard.append((k, v, cause)))
    big = bytes(100_000)  # stored with the GIL released
    c.set(b"big", big)
    c.set(b"big", b"small")
    c.set(b"big", big)
    assert heard == [(b"big", big, "replaced"), (b"big", b"small", "replaced")]


def test_a_listener_that_refers_to_its_cache_is_collected_with_it(clock):
    def make():
        c = None

        def listener(key, value, cause):
            c.get(key)

        c = segcache.Cache(heap_size="4MiB", clock=clock, eviction_listener=listener)
        c.set(b"k", b"v")
        return weakref.ref(listener)

    gone = make()
    gc.collect()
    assert gone() is None
