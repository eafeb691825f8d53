"""Many threads on one cache: no lost update, no crash, no deadlock with GIL-released work."""

import threading

import pytest

import segcache


def run_threads(n, target):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a thread hung"
    assert not errors, errors


def test_incr_from_many_threads_loses_nothing():
    c = segcache.Cache(heap_size="8MiB", eviction="none")
    c.set(b"n", b"0")
    run_threads(8, lambda i: [c.incr(b"n") for _ in range(2000)])
    assert c.get(b"n") == b"16000"


def test_cas_loop_from_many_threads():
    c = segcache.Cache(heap_size="8MiB", eviction="none")
    c.set(b"list", b"")

    def worker(i):
        for j in range(200):
            while True:
                value, cas = c.gets(b"list")
                if c.cas(b"list", value + b"%d.%d," % (i, j), cas):
                    break

    run_threads(4, worker)
    parts = c.get(b"list").split(b",")[:-1]
    assert len(parts) == 800
    assert len(set(parts)) == 800


def test_mixed_hammering_with_big_values():
    c = segcache.Cache(heap_size="64MiB", segment_size="1MiB", eviction="none")
    big = {i: bytes([i]) * (100_000 + i) for i in range(8)}  # big: copied with the GIL released

    def worker(i):
        mine = b"t%d-" % i
        for j in range(3000):
            k = mine + b"%d" % (j % 100)
            c.set(k, k * 2)
            assert c.get(k) == k * 2
            c[b"shared%d" % (j % 10)] = b"x%d" % i
            assert c.get(b"shared%d" % (j % 10)) is not None
            if j % 300 == 0:
                c.set(b"big%d" % i, big[i])
                assert c.get(b"big%d" % i) == big[i]
                got = c.get(b"big%d" % ((i + 1) % 8))
                assert got is None or got == big[(i + 1) % 8]
            if j % 500 == 0:
                c.get_many([mine + b"%d" % x for x in range(100)])
                c.stats()

    run_threads(8, worker)
    for i in range(8):
        for j in range(100):
            k = b"t%d-%d" % (i, j)
            assert c.get(k) == k * 2


def test_close_while_other_threads_work():
    c = segcache.Cache(heap_size="32MiB", eviction="merge")
    started = threading.Barrier(5)
    payload = b"z" * 80_000

    def worker(i):
        started.wait()
        try:
            while True:
                c.set(b"k%d" % i, payload)
                c.get(b"k%d" % i)
        except segcache.Closed:
            pass

    def closer(_):
        started.wait()
        for _ in range(200):
            c.get(b"k0")
        c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=closer, args=(0,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    assert c.closed
    with pytest.raises(segcache.Closed):
        c.get(b"k0")
