"""Values larger than a segment with `max_item_size`: stored as chunks by the engine, read back
whole through every read, replaced and deleted as one item; past `max_item_size`, refused."""

import pytest

import segcache


def pattern(version: int, n: int) -> bytes:
    block = bytes((i * 31 + version * 97) % 251 for i in range(4093))
    return (block * (n // len(block) + 1))[:n]


def test_values_of_several_segments_round_trip():
    c = segcache.Cache(heap_size="32MiB", segment_size="256KiB", shards=2, max_item_size="4MiB")
    for version, n in enumerate([(256 << 10) - 1, 256 << 10, (256 << 10) + 1, 3 << 20]):
        value = pattern(version, n)
        c.set("k", value, flags=version)
        assert c.get("k") == value
        assert c.get_item("k")[:2] == (value, version)
    c.set("k", bytearray(pattern(9, 1 << 20)))
    assert c.get("k") == pattern(9, 1 << 20)
    c.append("k", b"tail")
    assert c.get("k") == pattern(9, 1 << 20) + b"tail"
    assert list(c.keys()) == [b"k"]
    del c["k"]
    assert "k" not in c
    with pytest.raises(segcache.TooLarge):
        c.set("k", bytes((4 << 20) + 1))
    with pytest.raises(segcache.TooLarge):
        c.set("k", memoryview(bytearray((4 << 20) + 1)))


def test_without_max_item_size_a_value_must_fit_a_segment():
    c = segcache.Cache(heap_size="4MiB", segment_size="256KiB")
    with pytest.raises(segcache.TooLarge):
        c.set("k", bytes(256 << 10))
