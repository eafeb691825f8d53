"""Full heaps: eviction makes room; with eviction off, writes fail cleanly with NoMemory."""

import pytest

import segcache



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
