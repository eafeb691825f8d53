"""A bytes-like argument longer than a segment is refused (TooLarge, KeyTooLong) before it is
copied: nothing of its size is allocated, and the stored value stays."""

import tracemalloc

import pytest

import segcache

BIG = 64 << 20


def peak_while(calls):
    """The peak of Python's traced memory while running `calls`, each expected to raise."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        for exc, call in calls:
            with pytest.raises(exc) as e:
                call()
            assert "too large" in str(e.value) or "too long" in str(e.value)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_oversized_buffers_are_refused_before_a_copy():
    c = segcache.Cache(heap_size="4MiB", segment_size="256KiB")
    c.set("k", b"old", flags=5)
    big = bytearray(BIG)
    view = memoryview(big)
    wide = memoryview(big).cast("I")  # nbytes, not len(), is the length in bytes
    too_large = segcache.TooLarge
    calls = [
        (too_large, lambda: c.append("k", big)),
        (too_large, lambda: c.prepend("k", view)),
        (too_large, lambda: c.append("absent", wide)),
        (too_large, lambda: c.set("k", big)),
        (too_large, lambda: c.add("new", view)),
        (too_large, lambda: c.replace("k", wide)),
        (too_large, lambda: c.cas("k", big, 1)),
        (too_large, lambda: c.set_many([("k", view)])),
        (segcache.KeyTooLong, lambda: c.set(big, b"v")),
        (segcache.KeyTooLong, lambda: c.get(view)),
    ]
    assert peak_while(calls) < 1 << 20
    assert c.get_item("k")[:2] == (b"old", 5)
    assert "new" not in c and "absent" not in c


def test_oversized_numpy_array_is_refused_before_a_copy():
    np = pytest.importorskip("numpy")
    c = segcache.Cache(heap_size="4MiB", segment_size="256KiB")
    c.set("k", b"old")
    arr = np.zeros((BIG // 8 // 1024, 1024), dtype=np.uint64)
    assert peak_while([(segcache.TooLarge, lambda: c.append("k", arr)),
                       (segcache.TooLarge, lambda: c.set("k", arr))]) < 1 << 20
    assert c.get("k") == b"old"


def test_joined_value_over_the_limit_keeps_the_old_one():
    seg = 256 << 10
    c = segcache.Cache(heap_size="4MiB", segment_size="256KiB")
    c.set("k", b"12345", flags=3)
    half = bytearray(b"y" * (seg - 100))  # fits alone, not joined with the old value
    c.set("alone", half)
    assert c.append("k", b"z" * (seg // 2)) is True
    with pytest.raises(segcache.TooLarge):
        c.append("k", half)
    with pytest.raises(segcache.TooLarge):
        c.prepend("k", memoryview(half))
    value, flags, _, _ = c.get_item("k")
    assert value == b"12345" + b"z" * (seg // 2) and flags == 3
