"""memcached's extstore options map to the flash tier: `-o ext_path=FILE:SIZE` gives a small heap
a tier file, items that eviction takes out of memory are served from it with their values, and
`stats` shows the tier's figures under extstore's names. The extstore options that only tune
extstore's own file are accepted; those that change which items go to flash are refused."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from pymemcache.client.base import Client

from conftest import free_port, server_binary, spawn
from conftest import stop_logged as stop
from conftest import as_user


def value(i: int) -> bytes:
    return b"%d:" % i + bytes([97 + i % 26]) * (3000 + i % 500)


def stats(client: Client) -> dict[str, int]:
    return {k.decode(): v for k, v in client.stats().items() if isinstance(v, int)}


def test_items_evicted_from_memory_come_back_from_the_tier(tmp_path):
    tier = tmp_path / "extstore"
    # 4 MiB of memory (four 1 MiB segments), a 64 MiB tier: 3000 items of about 3 KiB are
    # more than twice the memory, all of them within the tier.
    proc, port = spawn("-m", "4", "-o", f"ext_page_size=8,ext_threads=4,ext_path={tier}:64m")
    client = Client(("127.0.0.1", port), timeout=10)
    n = 3000
    for i in range(n):
        assert client.set(b"k%d" % i, value(i), noreply=False, flags=i % 7)
    s = stats(client)
    assert s["extstore_objects_written"] > n // 2, s
    assert s["extstore_objects_used"] == s["engine_flash_items"] > n // 2, s
    assert s["evictions"] == 0 and s["extstore_page_reclaims"] == 0, s
    assert s["extstore_bytes_written"] > 3000 * s["extstore_objects_written"], s
    assert s["extstore_limit_maxbytes"] == 64 << 20, s
    wrong = [i for i in range(n) if client.get(b"k%d" % i) != value(i)]
    assert wrong == []
    got = client.get_many([b"k0", b"k1", b"k2"])
    assert got == {b"k0": value(0), b"k1": value(1), b"k2": value(2)}
    s = stats(client)
    assert s["get_extstore"] >= s["extstore_objects_written"] and s["badcrc_from_extstore"] == 0, s
    assert s["extstore_objects_read"] == s["engine_flash_hits"] >= s["extstore_objects_written"], s
    assert s["extstore_bytes_read"] > 3000 * s["extstore_objects_read"], s
    # A write to an item on flash sees it there.
    assert not client.add(b"k0", b"other", noreply=False)
    assert client.gets(b"k1")[0] == value(1)
    client.delete(b"k1", noreply=False)
    assert client.get(b"k1") is None
    client.close()
    stop(proc)
    # The tier's size, after a few blocks of its metadata.
    assert 64 << 20 < tier.stat().st_size <= (64 << 20) + (64 << 10)


def test_with_a_persistence_file_the_tier_comes_back_warm_after_a_stop_and_a_kill(tmp_path):
    """A restart with the same persistence file and tier file serves the items that were on the
    tier, read from it: after a graceful stop, and after the process was killed (then each key
    serves its latest value or nothing, never an older one)."""
    tier, heap = tmp_path / "extstore", tmp_path / "cache.seg"
    args = ("-m", "4", "--persist", str(heap), "-o", f"ext_path={tier}:64m")
    proc, port = spawn(*args)
    client = Client(("127.0.0.1", port), timeout=10)
    n = 3000
    for i in range(n):
        assert client.set(b"k%d" % i, value(i), noreply=False)
    for i in range(0, n, 10):
        client.delete(b"k%d" % i, noreply=False)
    on_flash = stats(client)["engine_flash_items"]
    assert on_flash > n // 2
    client.close()
    stop(proc)

    proc, port = spawn(*args)
    client = Client(("127.0.0.1", port), timeout=10)
    assert stats(client)["engine_flash_items"] == on_flash
    wrong = [i for i in range(n) if client.get(b"k%d" % i) != (None if i % 10 == 0 else value(i))]
    assert wrong == []
    s = stats(client)
    assert s["get_extstore"] >= on_flash and s["badcrc_from_extstore"] == 0, s
    # New versions of some keys, acknowledged, then a kill in the middle of more writes.
    latest = {i: value(i) for i in range(n) if i % 10 != 0}
    for i in range(1, n, 7):
        v = b"new" + value(i)
        assert client.set(b"k%d" % i, v, noreply=False)
        latest[i] = v
    for i in range(n, n + 500):
        assert client.set(b"k%d" % i, value(i), noreply=False)
        latest[i] = value(i)
    client.close()
    proc.kill()
    proc.wait()

    proc, port = spawn(*args)
    client = Client(("127.0.0.1", port), timeout=10)
    assert stats(client)["engine_flash_items"] > n // 2
    got = {i: client.get(b"k%d" % i) for i in range(n + 500)}
    wrong = [i for i, v in got.items() if v is not None and v != latest.get(i)]
    assert wrong == []
    assert sum(v is not None for v in got.values()) > n // 2
    assert stats(client)["get_extstore"] > n // 2
    client.close()
    stop(proc)



def test_without_a_write_queue_a_kill_loses_no_acknowledged_item(tmp_path):
    """With `-o tier_write_queue=0` each eviction writes what it sends to the tier before the
    write that caused it is answered: a kill right after the last acknowledged write loses
    nothing, every key serves its latest value, most of them from the tier."""
    tier, heap = tmp_path / "extstore", tmp_path / "cache.seg"
    args = ("-m", "4", "--persist", str(heap), "-o", f"ext_path={tier}:64m,tier_write_queue=0")
    proc, port = spawn(*args)
    client = Client(("127.0.0.1", port), timeout=10)
    n = 3000
    latest = {}
    for i in range(n):
        latest[i] = value(i)
        assert client.set(b"k%d" % i, latest[i], noreply=False)
    for i in range(1, n, 7):
        latest[i] = b"new" + value(i)
        assert client.set(b"k%d" % i, latest[i], noreply=False)
    s = stats(client)
    assert s["engine_flash_items"] > n // 2 and s["evictions"] == 0, s
    client.close()
    proc.kill()
    proc.wait()

    proc, port = spawn(*args)
    client = Client(("127.0.0.1", port), timeout=10)
    wrong = [i for i in range(n) if client.get(b"k%d" % i) != latest[i]]
    assert wrong == []
    assert stats(client)["get_extstore"] > n // 2
    client.close()
    stop(proc)


def test_resize_file_moves_the_items_on_the_tier_too(tmp_path):
    """`--resize-file` with a tier: a larger heap and tier keep every item, those that were on
    flash included; a smaller tier then keeps the newest, each served with its own value."""
    tier, heap = tmp_path / "extstore", tmp_path / "cache.seg"
    proc, port = spawn("-m", "4", "--persist", str(heap), "-o", f"ext_path={tier}:64m")
    client = Client(("127.0.0.1", port), timeout=10)
    n = 3000
    for i in range(n):
        assert client.set(b"k%d" % i, value(i), noreply=False, flags=i % 7)
    assert stats(client)["engine_flash_items"] > n // 2
    client.close()
    stop(proc)

    proc, port = spawn("-m", "8", "--persist", str(heap), "-o", f"ext_path={tier}:128m", "--resize-file")
    client = Client(("127.0.0.1", port), timeout=10)
    assert stats(client)["engine_flash_items"] > n // 5
    wrong = [i for i in range(n) if client.get(b"k%d" % i) != value(i)]
    assert wrong == []
    assert client.gets(b"k5")[0] == value(5)
    client.close()
    stop(proc)
    assert not Path(f"{heap}.resizing").exists() and not Path(f"{tier}.resizing").exists()
    assert 128 << 20 < tier.stat().st_size

    proc, port = spawn("-m", "4", "--persist", str(heap), "-o", f"ext_path={tier}:8m", "--resize-file")
    client = Client(("127.0.0.1", port), timeout=10)
    got = {i: client.get(b"k%d" % i) for i in range(n)}
    assert [i for i, v in got.items() if v is not None and v != value(i)] == []
    assert all(got[i] == value(i) for i in range(n - 300, n)), "the newest are kept"
    assert sum(v is not None for v in got.values()) < n
    client.close()
    stop(proc)


MEMCACHED = os.environ.get("SEGCACHE_MEMCACHED_BIN", "/usr/bin/memcached")


def test_the_command_line_and_the_stats_names_are_memcacheds(tmp_path):
    """memcached (built with extstore) starts with the same options, and its `stats` has every
    extstore name this server shows."""
    if not Path(MEMCACHED).exists():
        pytest.skip("memcached is not installed")
    opts = f"ext_page_size=8,ext_threads=2,ext_path={tmp_path / 'mc'}:64m"
    port = free_port()
    proc = subprocess.Popen([MEMCACHED, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-o", opts,
                             *as_user([])], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            try:
                theirs = set(stats(Client(("127.0.0.1", port), timeout=5)))
                break
            except OSError:
                assert proc.poll() is None, f"memcached refused -o {opts}: {proc.stderr.read()}"
                time.sleep(0.05)
        else:
            pytest.fail("memcached did not answer")
    finally:
        proc.kill()
        proc.wait()
    ours_proc, ours_port = spawn("-m", "4", "-o", opts.replace("/mc:", "/ours:"))
    ours = {k for k in stats(Client(("127.0.0.1", ours_port), timeout=5)) if "extstore" in k}
    stop(ours_proc)
    assert len(ours) == 10 and ours <= theirs, ours - theirs


def test_without_a_tier_no_extstore_figures_and_the_items_are_evicted():
    proc, port = spawn("-m", "4")
    client = Client(("127.0.0.1", port), timeout=10)
    for i in range(3000):
        client.set(b"k%d" % i, value(i), noreply=False)
    s = stats(client)
    assert not [k for k in s if "extstore" in k], s
    assert s["evictions"] > 1000 and client.get(b"k0") is None, s
    client.close()
    stop(proc)


@pytest.mark.parametrize("opts,message", [
    ("ext_path=/tmp/x:64", "the size needs a unit"),
    ("ext_path=/tmp/x:1G:compact", "page bucket"),
    ("ext_path=/tmp/x:1G,ext_path=/tmp/y:1G", "one file"),
    ("ext_item_size=512", "whatever its size"),
    ("ext_recache_rate=2000", "brings it back to memory"),
    ("ext_drop_unread", "oldest segment"),
])
def test_extstore_options_that_do_not_apply_are_refused_saying_why(opts, message):
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), "-o", opts, *as_user([])],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_a_tier_too_small_for_the_shards_is_refused(tmp_path):
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), "-m", "64", "--shards", "4",
                        "-o", f"ext_path={tmp_path / 'x'}:4m", *as_user([])],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0
    assert "tier" in r.stderr and "at least 2" in r.stderr, r.stderr


def test_tier_promote_after_brings_an_item_read_on_the_tier_back_to_memory(tmp_path):
    """With `-o tier_promote_after=2`, the second read of an item on the tier brings it back to
    memory at the next write to its shard (memcached's `recache_from_extstore` counts it), and it is read
    from memory after that; without it, reads leave items on the tier."""
    for promote, promoted in ((None, 0), (2, 1)):
        opts = f"ext_path={tmp_path / 'extstore'}:64m"
        if promote is not None:
            opts += f",tier_promote_after={promote}"
        proc, port = spawn("-m", "4", "-o", opts)
        client = Client(("127.0.0.1", port), timeout=10)
        for i in range(3000):
            assert client.set(b"k%d" % i, value(i), noreply=False)
        for _ in range(2):
            assert client.get(b"k0") == value(0)
        # The next write to the key's shard brings it back: one to every shard.
        for j in range(256):
            assert client.set(b"unrelated-%d" % j, b"x", noreply=False)
        s = stats(client)
        assert (s["recache_from_extstore"], s["engine_flash_promoted"]) == (promoted, promoted), s
        read = s["extstore_objects_read"]
        assert client.get(b"k0") == value(0)
        assert stats(client)["extstore_objects_read"] == read + 1 - promoted
        client.close()
        stop(proc)
