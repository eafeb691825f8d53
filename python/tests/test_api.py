"""Every method of segcache.Cache, its results and its error paths."""

import array
import datetime
import pickle

import pytest

import segcache


def test_set_get_bytes(cache):
    assert cache.set(b"k", b"v") is None
    assert cache.get(b"k") == b"v"
    assert type(cache.get(b"k")) is bytes
    assert cache.get(b"missing") is None
    assert cache.get(b"missing", b"dflt") == b"dflt"
    sentinel = object()
    assert cache.get(b"missing", sentinel) is sentinel


def test_str_and_bytes_keys_are_the_same_key(cache):
    cache.set("clé-ключ-鍵-🔑", b"unicode")
    assert cache.get("clé-ключ-鍵-🔑".encode()) == b"unicode"
    cache.set(b"plain", b"1")
    assert cache.get("plain") == b"1"


def test_bytes_like_keys(cache):
    cache.set(bytearray(b"ba"), b"1")
    assert cache.get(b"ba") == b"1"
    cache.set(memoryview(b"mv"), b"2")
    assert cache.get(b"mv") == b"2"
    assert cache.get(bytearray(b"mv")) == b"2"


@pytest.mark.parametrize("bad", [1, 1.5, None, ("t",), ["l"], object()])
def test_bad_key_type(cache, bad):
    with pytest.raises(TypeError, match="key must be"):
        cache.set(bad, b"v")
    with pytest.raises(TypeError, match="key must be"):
        cache.get(bad)
    assert (bad in cache) is False  # as a dict: what cannot be a key is not in it


def test_key_length_limits(cache):
    cache.set(b"k" * 250, b"v")
    assert cache.get(b"k" * 250) == b"v"
    for op in (lambda k: cache.set(k, b"v"), cache.get, cache.delete):
        with pytest.raises(segcache.KeyTooLong):
            op(b"k" * 251)
        with pytest.raises(segcache.EmptyKey):
            op(b"")
    assert b"k" * 251 not in cache and b"" not in cache  # no such key can be stored
    # the limit is on the UTF-8 bytes of a str key: 84 three-byte characters = 252 bytes
    with pytest.raises(segcache.KeyTooLong):
        cache.set("鍵" * 84, b"v")
    assert issubclass(segcache.KeyTooLong, ValueError)
    assert issubclass(segcache.EmptyKey, segcache.Error)


def test_unpaired_surrogate_key_is_refused(cache):
    with pytest.raises(UnicodeEncodeError):
        cache.set("\ud800", b"v")


def test_values_any_buffer(cache):
    cache.set(b"a", bytearray(b"from bytearray"))
    cache.set(b"b", memoryview(b"xxfrom memoryviewxx")[2:-2])
    cache.set(b"c", array.array("B", [1, 2, 3]))
    cache.set(b"d", memoryview(b"abcdef")[::2])  # non-contiguous view
    assert cache.get(b"a") == b"from bytearray"
    assert cache.get(b"b") == b"from memoryview"
    assert cache.get(b"c") == bytes([1, 2, 3])
    assert cache.get(b"d") == b"ace"
    for k in (b"a", b"b", b"c", b"d"):
        assert type(cache.get(k)) is bytes


def test_numpy_value(cache):
    np = pytest.importorskip("numpy")
    a = np.arange(10, dtype=np.int32)
    cache.set(b"np", a)
    assert np.frombuffer(cache.get(b"np"), dtype=np.int32).tolist() == list(range(10))
    m = np.arange(12, dtype=np.uint8).reshape(3, 4)
    cache.set(b"2d", m)
    cache.set(b"strided", m[:, ::2])  # not contiguous: copied in C order
    assert cache.get(b"2d") == bytes(range(12))
    assert cache.get(b"strided") == bytes([0, 2, 4, 6, 8, 10])
    cache.set(np.frombuffer(b"npkey", dtype=np.uint8), b"v")  # a NumPy buffer as a key
    assert cache.get(b"npkey") == b"v"


@pytest.mark.parametrize("bad", ["text", 5, 1.0, None, [1, 2], object()])
def test_bad_value_type(cache, bad):
    with pytest.raises(TypeError, match="value must be a bytes-like object"):
        cache.set(b"k", bad)
    assert b"k" not in cache


def test_empty_value(cache):
    cache.set(b"e", b"")
    assert cache.get(b"e") == b""
    assert b"e" in cache
    assert cache[b"e"] == b""


def test_big_values_and_too_large(cache):
    seg = 256 << 10
    big = bytes(range(256)) * (seg // 256 // 2)  # half a segment: crosses the GIL-release size
    cache.set(b"big", big)
    assert cache.get(b"big") == big
    assert cache[b"big"] == big
    assert cache.gets(b"big")[0] == big
    assert cache.get_many([b"big"]) == {b"big": big}
    with pytest.raises(segcache.TooLarge) as e:
        cache.set(b"huge", b"x" * seg)
    assert isinstance(e.value, ValueError)
    assert "too large" in str(e.value)
    assert cache.get(b"huge") is None


def test_big_value_changes_size_between_reads(cache):
    # a big value replaced by one of another size, read after: the fresh size must be used
    cache.set(b"v", b"a" * 100_000)
    assert len(cache.get(b"v")) == 100_000
    cache.set(b"v", b"b" * 70_000)
    assert cache.get(b"v") == b"b" * 70_000
    cache.set(b"v", b"c" * 10)
    assert cache.get(b"v") == b"c" * 10


def test_add_replace(cache):
    assert cache.add(b"k", b"1") is True
    assert cache.add(b"k", b"2") is False
    assert cache.get(b"k") == b"1"
    assert cache.replace(b"k", b"3") is True
    assert cache.get(b"k") == b"3"
    assert cache.replace(b"absent", b"x") is False
    assert b"absent" not in cache


def test_flags_and_get_item(cache):
    cache.set(b"k", b"v", flags=0xDEADBEEF)
    value, flags, cas, ttl = cache.get_item(b"k")
    assert (value, flags, ttl) == (b"v", 0xDEADBEEF, None)
    assert isinstance(cas, int)
    assert cache.get_item(b"nope") is None
    assert cache.get_item(b"nope", 7) == 7
    for bad in (-1, 2**32):
        with pytest.raises(ValueError, match="flags"):
            cache.set(b"k", b"v", flags=bad)
    with pytest.raises(TypeError, match="flags"):
        cache.set(b"k", b"v", flags="1")
    with pytest.raises(TypeError, match="flags"):
        cache.set(b"k", b"v", flags=True)


def test_gets_and_cas(cache):
    cache.set(b"k", b"v1")
    value, cas = cache.gets(b"k")
    assert value == b"v1"
    assert cache.cas(b"k", b"v2", cas) is True
    assert cache.get(b"k") == b"v2"
    # the CAS value changed with the write: the old one no longer works
    assert cache.cas(b"k", b"v3", cas) is False
    assert cache.get(b"k") == b"v2"
    assert cache.cas(b"absent", b"v", 1) is None
    assert cache.gets(b"absent") is None
    assert cache.gets(b"absent", ()) == ()
    with pytest.raises(ValueError, match="cas"):
        cache.cas(b"k", b"v", -1)
    with pytest.raises(TypeError, match="cas"):
        cache.cas(b"k", b"v", "1")


def test_append_prepend(cache):
    assert cache.append(b"k", b"x") is False
    assert cache.prepend(b"k", b"x") is False
    cache.set(b"k", b"mid", flags=3)
    assert cache.append(b"k", b"-end") is True
    assert cache.prepend(b"k", b"start-") is True
    assert cache.get(b"k") == b"start-mid-end"
    assert cache.get_item(b"k")[1] == 3  # flags kept
    assert cache.append(b"k", bytearray(b"!")) is True
    assert cache.get(b"k") == b"start-mid-end!"


def test_incr_decr(cache):
    assert cache.incr(b"n") is None
    assert cache.decr(b"n") is None
    cache.set(b"n", b"10")
    assert cache.incr(b"n") == 11
    assert cache.incr(b"n", 5) == 16
    assert cache.decr(b"n", 6) == 10
    assert cache.decr(b"n", 100) == 0  # stops at zero, as memcached
    assert cache.get(b"n") == b"0"
    cache.set(b"n", str(2**64 - 1).encode())
    assert cache.incr(b"n", 2) == 1  # wraps at 2**64, as memcached
    cache.set(b"s", b"abc")
    with pytest.raises(segcache.NotNumeric):
        cache.incr(b"s")
    with pytest.raises(ValueError, match="delta"):
        cache.incr(b"n", -1)
    with pytest.raises(ValueError, match="delta"):
        cache.incr(b"n", 2**64)
    with pytest.raises(TypeError, match="delta"):
        cache.incr(b"n", 1.5)


def test_delete(cache):
    cache.set(b"k", b"v")
    assert cache.delete(b"k") is True
    assert cache.delete(b"k") is False
    assert cache.get(b"k") is None


def test_many(cache):
    cache.set_many({b"a": b"1", "b": b"2", b"c": bytearray(b"3")})
    cache.set_many([(b"d", b"4"), ("e", b"5")])
    got = cache.get_many([b"a", "b", b"c", b"d", "e", b"zz"])
    assert got == {b"a": b"1", "b": b"2", b"c": b"3", b"d": b"4", "e": b"5"}
    assert cache.get_many([]) == {}
    assert cache.get_many(iter([b"a"])) == {b"a": b"1"}
    assert cache.delete_many([b"a", b"b", b"zz"]) == 2
    assert cache.get_many([b"a", b"b", b"c"]) == {b"c": b"3"}
    with pytest.raises(TypeError, match="pairs"):
        cache.set_many([b"not-a-pair"])
    with pytest.raises(TypeError, match="value must be"):
        cache.set_many({b"x": "str"})
    with pytest.raises(TypeError, match="key must be"):
        cache.get_many([b"a", 3])
    with pytest.raises(TypeError):
        cache.get_many(5)


def test_get_many_many_keys(cache):
    keys = [b"key-%d" % i for i in range(2000)]
    cache.set_many({k: k[::-1] for k in keys[::2]})
    got = cache.get_many(keys)
    assert got == {k: k[::-1] for k in keys[::2]}


def test_mapping_protocol(cache):
    cache[b"k"] = b"v"
    assert cache[b"k"] == b"v"
    assert b"k" in cache
    assert "k" in cache
    assert len(cache) == 1
    del cache[b"k"]
    assert b"k" not in cache
    assert len(cache) == 0
    with pytest.raises(KeyError) as e:
        cache[b"k"]
    assert e.value.args == (b"k",)
    with pytest.raises(KeyError):
        del cache[b"k"]
    assert list(cache) == []  # iterable, like a dict (tests/test_mapping.py)
    assert not cache  # empty, like a dict
    cache["x"] = b"1"
    assert cache


def test_len_and_flush(cache):
    for i in range(100):
        cache.set(b"k%d" % i, b"v")
    assert len(cache) == 100
    cache.flush()
    assert len(cache) == 0
    assert cache.get(b"k1") is None


def test_stats(cache):
    cache.set(b"k", b"v")
    cache.get(b"k")
    cache.get(b"k")
    s = cache.stats()
    assert s["items"] == 1
    assert s["get_hits"] >= 2
    for name in ("bytes", "heap_bytes", "segment_size", "get_misses", "sets", "deletes",
                 "evicted_items", "expired_items", "flushes", "shards"):
        assert isinstance(s[name], int)


def test_stats_of_the_engine(cache):
    for i in range(100):
        cache.set(b"k%d" % i, b"v" * 100)
    s = cache.stats()
    assert s["policy"] == "none"
    assert s["sets"] == 100
    assert s["bytes"] >= 100 * 100
    assert s["heap_bytes"] <= 16 << 20
    assert s["segment_size"] == 256 << 10
    assert s["segments_total"] > s["segments_free"]


def test_close_and_context_manager(clock):
    with segcache.Cache(heap_size="8MiB", clock=clock) as c:
        c[b"k"] = b"v"
        assert not c.closed
    assert c.closed
    c.close()  # idempotent
    for op in (lambda: c.get(b"k"), lambda: c.set(b"k", b"v"), lambda: len(c),
               lambda: b"k" in c, c.stats, c.flush, lambda: c.get_many([b"k"])):
        with pytest.raises(segcache.Closed, match="closed"):
            op()
    assert isinstance(segcache.Closed("x"), ValueError)
    assert "closed" in repr(c)


def test_repr_and_properties(clock):
    c = segcache.Cache(heap_size="8MiB", segment_size="64KiB", eviction="fifo", ttl=30, clock=clock)
    assert c.heap_size == 8 << 20
    assert c.segment_size == 64 << 10
    assert c.eviction == "fifo"
    assert c.ttl == 30
    assert c.path is None
    assert "segcache.Cache" in repr(c)
    assert c.now() == clock.now


def test_defaults_are_the_engines():
    # The engine's DEFAULT_HEAP_SIZE and DEFAULT_SEGMENT_SIZE, as the C library's.
    with segcache.Cache() as c:
        assert (c.heap_size, c.segment_size, c.eviction) == (64 << 20, 1 << 20, "merge")


def test_constructor_sizes():
    for spec, expect in [(8 << 20, 8 << 20), ("8MiB", 8 << 20), ("8 mib", 8 << 20), ("8M", 8 << 20),
                         ("8192KiB", 8 << 20), ("0.0625GiB", 64 << 20), ("8_388_608", 8 << 20),
                         # One meaning per unit, the server's and memcached's: MB is MiB.
                         ("8MB", 8 << 20), ("8 mb", 8 << 20), ("8192kB", 8 << 20), ("8388608b", 8 << 20)]:
        c = segcache.Cache(heap_size=spec, segment_size="64KiB")
        assert c.heap_size == expect
        c.close()


@pytest.mark.parametrize(
    "kwargs, exc, word",
    [
        ({"heap_size": "lots"}, ValueError, "heap_size"),
        ({"heap_size": -1}, ValueError, "heap_size"),
        ({"heap_size": 1.5}, TypeError, "heap_size"),
        ({"heap_size": True}, TypeError, "heap_size"),
        ({"segment_size": "3KiB"}, ValueError, "segment_size"),
        ({"segment_size": [1]}, TypeError, "segment_size"),
        ({"eviction": "lru"}, ValueError, "eviction"),
        ({"eviction": 3}, TypeError, "eviction"),
        ({"ttl": -1}, ValueError, "ttl"),
        ({"ttl": "1h"}, TypeError, "ttl"),
        ({"hash_power": 99}, ValueError, "hash_power"),
        ({"hash_power": "x"}, TypeError, "hash_power"),
        ({"shards": 3}, ValueError, "shards"),
        ({"shards": 0}, ValueError, "shards"),
        ({"clock": 5}, TypeError, "clock"),
        ({"path": 5}, TypeError, "path"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        segcache.Cache(**kwargs)


def test_constructor_config_error_is_segcache_error():
    with pytest.raises(segcache.InvalidConfig, match="segment_size"):
        segcache.Cache(segment_size=3000)


def test_eviction_names():
    for name in ("none", "random", "random-fifo", "fifo", "cte", "util", "merge", "s3fifo", "S3_FIFO"):
        c = segcache.Cache(heap_size="8MiB", segment_size="64KiB", eviction=name)
        c[b"k"] = b"v"
        assert c[b"k"] == b"v"
        c.close()


def test_ttl_argument_errors(cache):
    for bad in (-1, -0.5, float("nan"), float("inf"), segcache.MAX_TTL + 1, datetime.timedelta(seconds=-1)):
        with pytest.raises(ValueError, match="ttl"):
            cache.set(b"k", b"v", ttl=bad)
    for bad in ("10", True, [1]):
        with pytest.raises(TypeError, match="ttl"):
            cache.set(b"k", b"v", ttl=bad)
    with pytest.raises(ValueError, match="delay"):
        cache.flush(delay=-1)


def test_exception_hierarchy():
    for name in ("Closed", "NotFound", "Exists", "NotStored", "TooLarge", "KeyTooLong", "EmptyKey",
                 "NoMemory", "NotNumeric", "InvalidConfig", "PersistenceError", "BadFile", "Locked",
                 "MapError"):
        cls = getattr(segcache, name)
        assert issubclass(cls, segcache.Error), name
    assert issubclass(segcache.BadFile, OSError)
    assert issubclass(segcache.NoMemory, MemoryError)
    assert issubclass(segcache.NotFound, KeyError)


def test_cache_is_not_picklable(cache):
    with pytest.raises(TypeError):
        pickle.dumps(cache)


def test_module_constants():
    assert segcache.MAX_KEY_LEN == 250
    assert segcache.MIN_SEGMENT_SIZE <= segcache.MAX_SEGMENT_SIZE
    assert isinstance(segcache.__version__, str)
