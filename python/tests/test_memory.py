"""Full heaps: eviction makes room; with eviction off, writes fail cleanly with NoMemory."""

import gc
import threading
import time

import pytest

import segcache
from conftest import threads_named


def test_no_memory_without_eviction():
    c = segcache.Cache(heap_size="1MiB", segment_size="64KiB", eviction="none", shards=1)
    stored = 0
    with pytest.raises(segcache.NoMemory):
        for i in range(100_000):
            c.set(b"k%d" % i, b"v" * 100)
            stored += 1
    assert 0 < stored < 100_000
    assert c.get(b"k0") == b"v" * 100  # what was stored is still there
    assert isinstance(segcache.NoMemory("x"), MemoryError)


@pytest.mark.parametrize("policy", ["random", "random-fifo", "fifo", "cte", "util", "merge", "s3fifo"])
def test_eviction_makes_room(policy):
    c = segcache.Cache(heap_size="2MiB", segment_size="64KiB", eviction=policy, shards=1)
    n = 40_000  # about 5 MB of items into a 2 MiB heap
    for i in range(n):
        c.set(b"k%d" % i, b"v" * 100)
    assert 0 < len(c) < n
    assert c.stats()["evicted_items"] > 0
    # the last item written is always there
    assert c.get(b"k%d" % (n - 1)) == b"v" * 100


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="reads /proc/self/status")
def test_touch_ahead_faults_in_the_next_segments_only():
    """touch_ahead faults in the next free segments (memory grows by those alone), finds nothing
    new on a second call, and returns None once writes have used every segment; it releases
    the GIL, so a thread of its own runs beside the writers. A prefaulted cache has nothing to
    do; a non-int is refused by name."""
    c = segcache.Cache(heap_size="32MiB", segment_size="2MiB", shards=1, touch_ahead=False)
    before = _rss_mib()
    first = c.touch_ahead()
    if first is not None:  # None: a kernel that cannot populate memory (before Linux 5.14)
        assert first == 2
        assert 4 <= _rss_mib() - before < 12
        assert c.touch_ahead(per_shard=2) == 0
    faulted = []
    done = threading.Event()

    def toucher():
        while (n := c.touch_ahead()) is not None:
            faulted.append(n)
            if n == 0:
                done.wait(0.001)

    t = threading.Thread(target=toucher)
    t.start()
    value = b"v" * 100_000
    for i in range(480):  # 48 MiB through a 32 MiB heap: every segment is used
        c[b"ahead-%d" % i] = value
    t.join(timeout=10)
    assert not t.is_alive(), "the toucher ended once every segment was used"
    assert c.touch_ahead() is None
    assert c[b"ahead-479"] == value
    assert segcache.Cache(heap_size="8MiB", shards=1, prefault=True).touch_ahead() is None
    with pytest.raises(TypeError, match="per_shard"):
        c.touch_ahead("2")


def _wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="reads /proc/self")
def test_touch_ahead_thread_faults_in_ahead_of_the_writes():
    """By default a thread faults in the segments that writes take next (two per written
    shard), and nothing before a shard is written, so that a new cache costs no memory; it
    ends by itself once every segment was used, and close() or dropping the cache stops it.
    touch_ahead=False starts none."""
    probe = segcache.Cache(heap_size="8MiB", segment_size="2MiB", shards=1, touch_ahead=False)
    if probe.touch_ahead() is None:
        pytest.skip("this kernel cannot populate memory (Linux before 5.14)")
    probe.close()
    gc.collect()  # earlier tests' caches, and their threads, go now rather than during this one
    before_threads = threads_named("segcache-ahead")

    before = _rss_mib()
    off = segcache.Cache(heap_size="64MiB", segment_size="4MiB", shards=2, touch_ahead=False)
    assert threads_named("segcache-ahead") == before_threads
    assert _rss_mib() - before < 8

    before = _rss_mib()
    c = segcache.Cache(heap_size="64MiB", segment_size="4MiB", shards=2)
    # (a new thread names itself once it runs)
    assert _wait_for(lambda: threads_named("segcache-ahead") == before_threads + 1)
    time.sleep(0.05)
    assert _rss_mib() - before < 8, "nothing faulted in before a write"
    value = b"v" * 100_000
    for i in range(200):  # 20 MB, 3 segments per shard: the thread faults in the 2 after them
        c[b"k%d" % i] = value
    # (3 + 2) x 2 x 4 MiB = 40 MiB in, against 24 MiB where the writes fault in for themselves
    assert _wait_for(lambda: _rss_mib() - before >= 36), _rss_mib() - before
    assert threads_named("segcache-ahead") == before_threads + 1
    for i in range(200, 1000):  # 100 MB through a 64 MiB heap: every segment is used
        c[b"k%d" % i] = value
    assert _wait_for(lambda: threads_named("segcache-ahead") == before_threads), "it ends by itself"
    assert c.touch_ahead() is None and c[b"k999"] == value

    closed = segcache.Cache(heap_size="64MiB", segment_size="4MiB", shards=2)
    dropped = segcache.Cache(heap_size="64MiB", segment_size="4MiB", shards=2)
    assert _wait_for(lambda: threads_named("segcache-ahead") == before_threads + 2)
    closed.close()
    del dropped
    gc.collect()
    assert threads_named("segcache-ahead") == before_threads
    with pytest.raises(TypeError, match="touch_ahead"):
        segcache.Cache(heap_size="1MiB", touch_ahead="yes")


def test_prefault_takes_the_heap_at_once():
    """prefault=True faults the heap in before the constructor returns; by default the heap is
    faulted in as items fill it. A non-bool is refused by name."""
    before = _rss_mib()
    lazy = segcache.Cache(heap_size="96MiB", shards=1)
    assert _rss_mib() - before < 48
    before = _rss_mib()
    taken = segcache.Cache(heap_size="96MiB", shards=1, prefault=True)
    assert _rss_mib() - before >= 96
    taken[b"k"] = b"v"
    assert taken[b"k"] == b"v" and lazy.get(b"k") is None
    with pytest.raises(TypeError, match="prefault"):
        segcache.Cache(heap_size="1MiB", prefault="yes")


def test_the_memory_limit_grows_into_max_heap_size_and_back():
    c = segcache.Cache(heap_size="2MiB", max_heap_size="8MiB", segment_size="64KiB", shards=2)
    assert (c.memory_limit(), c.stats()["heap_bytes"]) == (2 << 20, 8 << 20)

    def fill():
        for i in range(50_000):
            c.set(b"k%d" % i, b"v" * 100)
        return sum(c.get(b"k%d" % i) == b"v" * 100 for i in range(50_000))

    small = fill()
    c.set_memory_limit("8MiB")
    assert c.memory_limit() == 8 << 20
    large = fill()
    assert large > 2 * small, (small, large)
    with pytest.raises(segcache.InvalidConfig):
        c.set_memory_limit(16 << 20)
    with pytest.raises(TypeError):
        c.set_memory_limit(1.5)
    c.set_memory_limit(2 << 20)
    assert c.memory_limit() == 2 << 20


def test_max_heap_size_below_the_heap_or_with_prefault_is_refused():
    with pytest.raises(segcache.InvalidConfig, match="max_heap_size"):
        segcache.Cache(heap_size="4MiB", max_heap_size="2MiB")
    with pytest.raises(segcache.InvalidConfig, match="prefault"):
        segcache.Cache(heap_size="4MiB", max_heap_size="8MiB", prefault=True)
