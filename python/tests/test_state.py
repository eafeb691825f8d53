"""Item state of the meta protocol: stale-while-revalidate, caller-chosen CAS values."""

import datetime
import threading

import pytest

import segcache


def test_plain_read_reports_the_item(cache):
    cache.set("k", b"v", ttl=100, flags=7)
    it = cache.get_state("k")
    assert isinstance(it, segcache.Item)
    assert (it.value, it.flags, it.ttl) == (b"v", 7, 100)
    assert it.cas == cache.gets("k")[1]
    assert not (it.fetched or it.stale or it.won or it.token_sent)
    assert cache.get_state("k").fetched
    assert cache.get_state("absent") is None
    assert "won=False" in repr(it) and "<1 bytes>" in repr(it)
    cache.set("forever", b"", ttl=0)
    assert cache.get_state("forever").ttl is None


def test_stale_while_revalidate(cache):
    cache.set("k", b"old", ttl=100, flags=3)
    old_cas = cache.gets("k")[1]
    # A claiming read of a fresh item takes no token.
    it = cache.get_state("k", claim=True)
    assert not (it.stale or it.won or it.token_sent)

    new_cas = cache.invalidate("k")
    assert isinstance(new_cas, int) and new_cas != old_cas
    # A plain read sees it stale, and takes nothing.
    it = cache.get_state("k")
    assert it.stale and not it.won and not it.token_sent
    assert (it.value, it.flags, it.cas, it.ttl) == (b"old", 3, new_cas, 100)
    # The first claiming read wins; the next sees the token sent, and the stale value.
    first = cache.get_state("k", claim=True)
    assert first.stale and first.won and not first.token_sent
    second = cache.get_state("k", claim=True)
    assert second.stale and not second.won and second.token_sent
    assert second.value == b"old"
    # The winner stores the recomputed value: fresh, and the token free again.
    cache.set("k", b"new", ttl=100)
    it = cache.get_state("k", claim=True)
    assert it.value == b"new" and not (it.stale or it.won or it.token_sent)
    # Invalidated again: a new round, one new winner.
    cache.invalidate("k")
    assert cache.get_state("k", claim=True).won
    assert cache.get_state("k", claim=True).token_sent


def test_invalidate_options(cache, clock):
    assert cache.invalidate("absent") is None
    cache.set("k", b"v", ttl=100)
    cas = cache.gets("k")[1]
    assert cache.invalidate("k", cas=cas + 1) is None  # differs: nothing changed
    assert not cache.get_state("k").stale
    assert cache.invalidate("k", cas=cas, new_cas=2**64 - 1, ttl=datetime.timedelta(seconds=30)) == 2**64 - 1
    it = cache.get_state("k")
    assert it.stale and it.cas == 2**64 - 1 and it.ttl == 30
    assert cache.invalidate("k", ttl=0) is not None
    assert cache.get_state("k").ttl is None
    with pytest.raises(ValueError):
        cache.invalidate("k", ttl=-1)
    with pytest.raises(TypeError):
        cache.invalidate("k", cas="1")
    with pytest.raises(ValueError):
        cache.invalidate("k", new_cas=2**64)
    with pytest.raises(TypeError):
        cache.invalidate("k", 10)  # keyword-only


def test_recache_below(cache, clock):
    cache.set("k", b"v", ttl=10)
    assert not cache.get_state("k", claim=True, recache_below=5).won
    clock.advance(6)
    it = cache.get_state("k", claim=True, recache_below=5.0)
    assert it.won and not it.stale and it.ttl == 4
    assert cache.get_state("k", claim=True, recache_below=datetime.timedelta(seconds=5)).token_sent
    # Without claim, nothing is taken and nothing reported.
    cache.set("j", b"v", ttl=2)
    assert not cache.get_state("j", recache_below=5).won


def test_update_false_and_last_access(cache, clock):
    cache.set("k", b"v")
    assert not cache.get_state("k", update=False).fetched
    assert not cache.get_state("k", update=False).fetched
    clock.advance(600)
    it = cache.get_state("k")
    assert not it.fetched and 0 < it.last_access <= 600
    it = cache.get_state("k")
    assert it.fetched and it.last_access < 60


def test_caller_chosen_cas(cache):
    cache.set("k", b"v1", new_cas=0x1234_5678_9ABC)
    assert cache.gets("k") == (b"v1", 0x1234_5678_9ABC)
    assert cache.get_state("k").cas == 0x1234_5678_9ABC
    assert cache.cas("k", b"v2", 0x1234_5678_9ABC, new_cas=7) is True
    assert cache.gets("k") == (b"v2", 7)
    assert cache.cas("k", b"v3", 8, new_cas=9) is False
    assert cache.cas("absent", b"v3", 8, new_cas=9) is None
    assert cache.add("k", b"x", new_cas=11) is False
    assert cache.add("a", b"x", new_cas=11) is True and cache.gets("a") == (b"x", 11)
    assert cache.replace("absent", b"x", new_cas=12) is False
    assert cache.replace("a", b"y", new_cas=12) is True and cache.gets("a") == (b"y", 12)
    cache.set("k", b"v4")  # without new_cas: the cache's counter again
    assert cache.gets("k")[1] not in (7, 9, 11, 12)
    with pytest.raises(ValueError):
        cache.set("k", b"v", new_cas=-1)
    with pytest.raises(TypeError):
        cache.set("k", b"v", new_cas=True)


def test_delete_with_cas(cache):
    cache.set("k", b"v")
    cas = cache.gets("k")[1]
    assert cache.delete("k", cas=cas + 1) is False
    assert cache.get("k") == b"v"
    assert cache.delete("k", cas=cas) is True
    assert cache.get("k") is None
    assert cache.delete("k", cas=cas) is False
    cache.set("k", b"v")
    assert cache.delete("k", cas=None) is True


def test_closed_cache_raises(clock):
    c = segcache.Cache(heap_size="8MiB", clock=clock)
    c.close()
    with pytest.raises(segcache.Closed):
        c.get_state("k")
    with pytest.raises(segcache.Closed):
        c.invalidate("k")


def test_many_threads_claim_one_winner():
    c = segcache.Cache(heap_size="8MiB", eviction="none")
    n = 16
    for _ in range(20):
        c.set("hot", b"v" * 100)
        assert c.invalidate("hot") is not None
        barrier = threading.Barrier(n)
        results = [None] * n

        def worker(i):
            barrier.wait()
            results[i] = c.get_state("hot", claim=True)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive()
        assert all(r is not None and r.stale for r in results)
        assert sum(r.won for r in results) == 1
        assert sum(r.token_sent for r in results) == n - 1
