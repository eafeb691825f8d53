"""TTLs, driven by segcache.ManualClock: no sleeps."""

import datetime

import pytest

import segcache


def test_manual_clock(clock):
    start = clock.now
    clock.advance(5)
    assert clock.now == start + 5
    clock.set(42)
    assert clock.now == 42
    assert "ManualClock" in repr(clock)
    with pytest.raises(ValueError, match="seconds"):
        clock.advance(-1)
    with pytest.raises(TypeError, match="seconds"):
        clock.advance(1.5)
    with pytest.raises(ValueError, match="now"):
        segcache.ManualClock(-5)
    clock.set(2**32 - 2)
    with pytest.raises(ValueError, match="seconds"):
        clock.advance(10)
    assert abs(segcache.ManualClock().now - segcache.Cache(heap_size="8MiB").now()) <= 2


def test_int_ttl(cache, clock):
    cache.set(b"k", b"v", ttl=10)
    clock.advance(9)
    assert cache.get(b"k") == b"v"
    clock.advance(1)
    assert cache.get(b"k") is None
    assert b"k" not in cache
    with pytest.raises(KeyError):
        cache[b"k"]


def test_float_ttl_rounds_up(cache, clock):
    cache.set(b"k", b"v", ttl=0.2)
    assert cache.get(b"k") == b"v"  # 0.2 s is one whole second, not "never" nor "now"
    clock.advance(1)
    assert cache.get(b"k") is None
    cache.set(b"k2", b"v", ttl=2.5)
    clock.advance(2)
    assert cache.get(b"k2") == b"v"
    clock.advance(1)
    assert cache.get(b"k2") is None


def test_timedelta_ttl(cache, clock):
    cache.set(b"k", b"v", ttl=datetime.timedelta(minutes=1))
    clock.advance(59)
    assert cache.get(b"k") == b"v"
    clock.advance(1)
    assert cache.get(b"k") is None


def test_zero_means_never(cache, clock):
    cache.set(b"k", b"v", ttl=0)
    cache.set(b"k2", b"v")  # the fixture's cache has no default TTL
    clock.advance(9 * 365 * 24 * 3600)
    assert cache.get(b"k") == b"v"
    assert cache.get(b"k2") == b"v"
    assert cache.get_item(b"k")[3] is None


def test_default_ttl(clock):
    c = segcache.Cache(heap_size="8MiB", ttl=5, clock=clock)
    c.set(b"default", b"v")
    c[b"mapping"] = b"v"
    c.set(b"never", b"v", ttl=0)
    c.set(b"longer", b"v", ttl=100)
    clock.advance(5)
    assert c.get(b"default") is None
    assert c.get(b"mapping") is None
    assert c.get(b"never") == b"v"
    assert c.get(b"longer") == b"v"


def test_ttl_left_in_get_item(cache, clock):
    cache.set(b"k", b"v", ttl=100)
    clock.advance(30)
    assert cache.get_item(b"k")[3] == 70


def test_touch(cache, clock):
    cache.set(b"k", b"v", ttl=10)
    clock.advance(5)
    assert cache.touch(b"k", 10) is True
    clock.advance(9)
    assert cache.get(b"k") == b"v"
    assert cache.touch(b"k", 0) is True  # now it never expires
    clock.advance(1000)
    assert cache.get(b"k") == b"v"
    assert cache.touch(b"absent", 5) is False
    with pytest.raises(ValueError, match="ttl"):
        cache.touch(b"k", -3)


def test_get_and_touch(cache, clock):
    cache.set(b"k", b"v", ttl=10)
    clock.advance(5)
    assert cache.get_and_touch(b"k", 100) == b"v"
    clock.advance(50)
    assert cache.get(b"k") == b"v"
    assert cache.get_and_touch(b"absent", 5) is None
    assert cache.get_and_touch(b"absent", 5, b"d") == b"d"


def test_expired_items_do_not_come_back_through_any_path(cache, clock):
    cache.set(b"k", b"1", ttl=1)
    clock.advance(1)
    assert cache.gets(b"k") is None
    assert cache.get_many([b"k"]) == {}
    assert cache.incr(b"k") is None
    assert cache.append(b"k", b"x") is False
    assert cache.replace(b"k", b"x") is False
    assert cache.add(b"k", b"new") is True
    assert cache.get(b"k") == b"new"


def test_flush_after_delay(cache, clock):
    cache.set(b"k", b"v")
    cache.flush(delay=5)
    clock.advance(5)
    assert cache.get(b"k") is None


def test_flush_delay_keeps_items_until_then(cache, clock):
    cache.set(b"k", b"v")
    cache.flush(delay=datetime.timedelta(seconds=5))
    clock.advance(4)
    assert cache.get(b"k") == b"v"
    clock.advance(1)
    assert cache.get(b"k") is None


def test_expire_frees_expired_items(cache, clock):
    for i in range(1000):
        cache.set(b"short%d" % i, b"v" * 50, ttl=10)
    for i in range(10):
        cache.set(b"long%d" % i, b"v", ttl=0)
    clock.advance(11)
    removed = cache.expire()
    assert removed >= 1000
    assert len(cache) == 10
    assert cache.stats()["expired_items"] >= 1000
