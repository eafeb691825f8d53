"""path=: the heap lives in a file and comes back after close() and reopen."""

import gc

import pytest

import segcache



def open_cache(path, **kw):
    kw.setdefault("heap_size", "8MiB")
    kw.setdefault("segment_size", "64KiB")
    return segcache.Cache(path=path, **kw)


def test_round_trip(tmp_path):
    path = tmp_path / "heap"
    c = open_cache(path)
    assert c.path == path
    items = {b"key-%d" % i: b"value-%d" % i * 3 for i in range(2000)}
    c.set_many(items)
    c.set(b"flagged", b"v", flags=77, ttl=3600)
    c.set("ключ", b"unicode")
    c.close()
    c = open_cache(path)
    assert c.get_many(list(items)) == items
    value, flags, _cas, ttl = c.get_item(b"flagged")
    assert (value, flags) == (b"v", 77)
    assert 3500 < ttl <= 3600
    assert c.get("ключ") == b"unicode"
    assert len(c) == len(items) + 2
    # the reopened cache is fully usable
    c[b"new"] = b"after restart"
    c.close()
    with open_cache(path) as c:
        assert c[b"new"] == b"after restart"


def test_lazy_verify_reopens_everything(tmp_path):
    path = tmp_path / "heap"
    items = {b"key-%d" % i: b"value-%d" % i for i in range(2000)}
    with open_cache(path) as c:
        c.set_many(items)
    with open_cache(path, lazy_verify=True) as c:
        assert c.get_many(list(items)) == items
        c[b"new"] = b"v"
    with open_cache(path) as c:
        assert len(c) == len(items) + 1
    with pytest.raises(TypeError):
        open_cache(path, lazy_verify="yes")


def test_dropping_without_close_persists(tmp_path):
    path = tmp_path / "heap"
    c = open_cache(path)
    c[b"k"] = b"v"
    del c
    gc.collect()
    with open_cache(path) as c:
        assert c.get(b"k") == b"v"


def test_second_open_is_locked(tmp_path):
    path = tmp_path / "heap"
    with open_cache(path):
        with pytest.raises(segcache.Locked) as e:
            open_cache(path)
        assert isinstance(e.value, OSError)


def test_bad_file(tmp_path):
    path = tmp_path / "heap"
    path.write_bytes(b"this is not a segcache heap" * 1000)
    with pytest.raises(segcache.BadFile):
        open_cache(path)
    with open_cache(path, reset_bad_file=True) as c:
        assert len(c) == 0
        c[b"k"] = b"v"
    with open_cache(path) as c:
        assert c[b"k"] == b"v"


def test_other_configuration_is_refused(tmp_path):
    path = tmp_path / "heap"
    with open_cache(path) as c:
        c[b"k"] = b"v"
    with pytest.raises(segcache.BadFile):
        open_cache(path, segment_size="128KiB")


def test_path_accepts_str(tmp_path):
    with open_cache(str(tmp_path / "heap")) as c:
        c[b"k"] = b"v"
    with open_cache(str(tmp_path / "heap")) as c:
        assert c[b"k"] == b"v"


def test_resize_file_moves_the_items_into_a_heap_of_other_sizes(tmp_path):
    path = tmp_path / "heap"
    c = open_cache(path)
    items = {b"key-%d" % i: b"value-%d" % i * 3 for i in range(2000)}
    c.set_many(items)
    c.set(b"flagged", b"v", flags=77, ttl=3600)
    c.close()
    with pytest.raises(segcache.BadFile):
        open_cache(path, heap_size="16MiB")
    with open_cache(path, heap_size="16MiB", segment_size="128KiB", resize_file=True) as c:
        assert c.heap_size == 16 << 20
        assert c.get_many(list(items)) == items
        value, flags, _cas, ttl = c.get_item(b"flagged")
        assert (value, flags) == (b"v", 77) and 3500 < ttl <= 3600
    assert not (tmp_path / "heap.resizing").exists()
    with pytest.raises(segcache.InvalidConfig):
        open_cache(path, multi_process=True, resize_file=True)
    with pytest.raises(TypeError):
        open_cache(path, resize_file="yes")
