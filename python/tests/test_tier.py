"""A flash tier (`tier_path=`, `tier_size=`): what eviction takes out of the heap is read back from
the tier file with its value; bad settings raise, naming them."""

import signal
import subprocess
import sys

import pytest

import segcache


def value(i: int) -> bytes:
    return b"%d:" % i + bytes([97 + i % 26]) * (150 + i % 100)


@pytest.mark.parametrize("eviction", ["merge", "fifo", "s3fifo"])
def test_items_evicted_from_the_heap_are_read_back_from_the_tier(tmp_path, eviction):
    c = segcache.Cache(
        heap_size="256KiB",
        segment_size="64KiB",
        shards=1,
        eviction=eviction,
        tier_path=tmp_path / "tier.dat",
        tier_size="16MiB",
    )
    n = 3000  # more than twice the heap
    for i in range(n):
        c.set(b"k%d" % i, value(i))
    s = c.stats()
    assert s["flash_demoted"] > n // 2 and s["evicted_items"] == 0, s
    assert [i for i in range(n) if c.get(b"k%d" % i) != value(i)] == []
    assert c.stats()["flash_hits"] > n // 2
    # A write to an item on flash sees it.
    assert not c.add(b"k0", b"other")
    del c[b"k1"]
    assert c.get(b"k1") is None
    c.close()
    # The tier's size, after a few blocks of its metadata.
    assert 16 << 20 < (tmp_path / "tier.dat").stat().st_size <= (16 << 20) + (64 << 10)


def test_without_a_tier_the_same_items_are_evicted():
    c = segcache.Cache(heap_size="256KiB", segment_size="64KiB", shards=1, eviction="fifo")
    for i in range(3000):
        c.set(b"k%d" % i, value(i))
    assert c.get(b"k0") is None
    s = c.stats()
    assert s["evicted_items"] > 1500 and s["flash_demoted"] == 0 and s["flash_items"] == 0
    c.close()


def test_a_long_run_of_reads_is_served_from_the_tier(tmp_path):
    c = segcache.Cache(heap_size="256KiB", segment_size="64KiB", shards=1, eviction="fifo",
                       tier_path=tmp_path / "tier.dat", tier_size="16MiB")
    for i in range(6000):
        c.set(b"k%d" % i, value(i))
    assert [i for i in range(6000) if c.get(b"k%d" % i) != value(i)] == []
    c.close()


def test_tier_settings_are_checked(tmp_path):
    t = tmp_path / "tier.dat"
    with pytest.raises(segcache.InvalidConfig, match="tier_size"):
        segcache.Cache(heap_size="1MiB", segment_size="64KiB", tier_path=t)
    with pytest.raises(segcache.InvalidConfig, match="tier_path"):
        segcache.Cache(heap_size="1MiB", segment_size="64KiB", tier_size="8MiB")
    with pytest.raises(segcache.InvalidConfig, match="tier"):
        segcache.Cache(heap_size="1MiB", segment_size="64KiB", tier_path=t, tier_size=1000)
    with pytest.raises(segcache.InvalidConfig, match="persistence file"):
        segcache.Cache(heap_size="1MiB", segment_size="64KiB", path=t, tier_path=t, tier_size="8MiB")
    with pytest.raises(ValueError, match="tier_path"):
        segcache.Cache(heap_size="1MiB", segment_size="64KiB", tier_path="", tier_size="8MiB")
    with pytest.raises(TypeError, match="tier_path"):
        segcache.Cache(heap_size="1MiB", segment_size="64KiB", tier_path=3, tier_size="8MiB")
    with pytest.raises(ValueError, match="tier_size"):
        segcache.Cache(heap_size="1MiB", segment_size="64KiB", tier_path=t, tier_size="lots")
    assert not t.exists()


def test_a_read_on_the_tier_brings_its_item_back_when_asked(tmp_path):
    c = segcache.Cache(heap_size="256KiB", segment_size="64KiB", shards=1, eviction="fifo",
                       tier_path=tmp_path / "tier.dat", tier_size="16MiB", tier_promote_after=2)
    for i in range(3000):
        c.set(b"k%d" % i, value(i))
    assert c.get(b"k0") == value(0)
    c.set(b"unrelated", b"x")
    assert c.stats()["flash_promoted"] == 0, "one read of two"
    assert c.get(b"k0") == value(0)
    c.set(b"unrelated", b"y")
    assert c.stats()["flash_promoted"] == 1
    hits = c.stats()["flash_hits"]
    assert c.get(b"k0") == value(0)
    assert c.stats()["flash_hits"] == hits, "read from memory now"
    c.close()
    for bad in (-1, 256):
        with pytest.raises(ValueError, match="tier_promote_after"):
            segcache.Cache(heap_size="256KiB", tier_path=tmp_path / "t2.dat", tier_size="16MiB",
                           tier_promote_after=bad)
    with pytest.raises(TypeError):
        segcache.Cache(tier_promote_after="2")


KILLED_WRITER = """
import os, signal, sys
import segcache
c = segcache.Cache(heap_size="256KiB", segment_size="64KiB", shards=1, path=sys.argv[1],
                   tier_path=sys.argv[2], tier_size="16MiB", tier_write_queue=int(sys.argv[3]))
for i in range(3000):
    c.set(b"k%d" % i, b"%d:" % i + bytes([97 + i % 26]) * (150 + i % 100))
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("queue", [0, 8 << 20])
def test_without_a_write_queue_a_killed_process_loses_nothing_it_stored(tmp_path, queue):
    """With `tier_write_queue=0` every item a process killed right after its last `set` stored
    comes back with the heap file, most from the tier; with the default queue the items that
    waited to be written (the segment being filled, at least) are gone."""
    heap, tier = tmp_path / "heap.seg", tmp_path / "tier.dat"
    child = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(heap), str(tier), str(queue)], timeout=120)
    assert child.returncode == -signal.SIGKILL
    c = segcache.Cache(heap_size="256KiB", segment_size="64KiB", shards=1, path=heap,
                       tier_path=tier, tier_size="16MiB", tier_write_queue=queue)
    assert c.stats()["flash_items"] > 1500
    missing = [i for i in range(3000) if c.get(b"k%d" % i) is None]
    assert all(c.get(b"k%d" % i) == value(i) for i in range(3000) if i not in missing)
    assert (missing == []) == (queue == 0), len(missing)
    c.close()
    with pytest.raises(ValueError, match="tier_write_queue"):
        segcache.Cache(tier_path=tmp_path / "t2.dat", tier_size="16MiB", tier_write_queue=-1)


def test_resize_file_moves_the_items_on_the_tier_too(tmp_path):
    heap, tier = tmp_path / "heap", tmp_path / "tier.dat"

    def cache(heap_size, tier_size, **kw):
        return segcache.Cache(heap_size=heap_size, segment_size="64KiB", shards=1, eviction="fifo", path=heap,
                              tier_path=tier, tier_size=tier_size, **kw)

    c = cache("256KiB", "2MiB")
    n = 5000
    for i in range(n):
        c.set(b"k%d" % i, value(i), flags=i % 9)
    s = c.stats()
    assert s["flash_items"] > n // 2 and s["evicted_items"] == 0, s
    c.close()
    # A larger heap and tier: every item, those on flash included, with its flags.
    with cache("512KiB", "4MiB", resize_file=True) as c:
        assert [i for i in range(n) if c.get(b"k%d" % i) != value(i)] == []
        assert c.get_item(b"k10")[1] == 1
        assert c.stats()["flash_items"] > n // 3
    assert not (tmp_path / "heap.resizing").exists() and not (tmp_path / "tier.dat.resizing").exists()
    # A smaller tier: the newest, each with its own value.
    with cache("256KiB", "512KiB", resize_file=True) as c:
        got = {i: c.get(b"k%d" % i) for i in range(n)}
        assert [i for i, v in got.items() if v is not None and v != value(i)] == []
        assert all(got[i] == value(i) for i in range(n - 500, n))
        assert sum(v is not None for v in got.values()) < n
