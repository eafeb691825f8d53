"""`Cache(serializer=...)`: every operation that takes or returns a value encodes and decodes it;
operations on the stored bytes refuse; bad serializers get clear errors."""

import json
import pickle
import sys
from dataclasses import dataclass

import pytest

import segcache


@dataclass
class User:
    id: int
    name: str
    tags: list


def user(i):
    return User(i, f"user{i}", ["a", i])


@pytest.fixture
def pc(clock):
    c = segcache.Cache(heap_size="16MiB", segment_size="256KiB", eviction="none", clock=clock, serializer="pickle")
    yield c
    c.close()


class Codec:
    """A user serializer that counts its calls and tags its bytes, so a test sees it was used."""

    def __init__(self):
        self.dumped = self.loaded = 0

    def dumps(self, obj):
        self.dumped += 1
        return b"codec:" + json.dumps(obj).encode()

    def loads(self, data):
        self.loaded += 1
        assert data.startswith(b"codec:")
        return json.loads(data[len(b"codec:"):])


def test_default_is_bytes_in_and_out(cache):
    assert cache.serializer is None
    cache["k"] = bytearray(b"v")
    assert cache["k"] == b"v" and type(cache["k"]) is bytes
    with pytest.raises(TypeError, match="value must be a bytes-like object"):
        cache["k"] = {"a": 1}


def test_pickle_round_trips_every_read(pc):
    assert pc.serializer == "pickle"
    u = user(1)
    pc["u"] = u
    assert pc["u"] == u and pc["u"] is not u
    assert pc.get("u") == u and pc.get("absent", "dflt") == "dflt"
    value, cas = pc.gets("u")
    assert value == u
    assert pc.get_item("u")[0] == u
    assert pc.get_and_touch("u", 10) == u
    assert pc.get_state("u").value == u
    assert pc.get_many(["u", "absent"]) == {"u": u}
    assert list(pc.values()) == [u] and list(pc.items()) == [(b"u", u)]
    assert u in pc.values() and (b"u", u) in pc.items()
    # the engine holds pickle's bytes, at the highest protocol
    raw = pc._store_loaded("raw", u)
    assert raw == pickle.dumps(u, protocol=pickle.HIGHEST_PROTOCOL) and pc["raw"] == u


def test_pickle_round_trips_every_write(pc):
    pc.set("a", {"n": 1}, ttl=5)
    assert pc.add("a", [1]) is False and pc.add("b", [1]) is True and pc["b"] == [1]
    assert pc.replace("b", (2, 3)) is True and pc["b"] == (2, 3)
    assert pc.replace("absent", 1) is False
    _, cas = pc.gets("b")
    assert pc.cas("b", {"v": 4}, cas) is True and pc["b"] == {"v": 4}
    assert pc.cas("b", "stale", cas) is False and pc["b"] == {"v": 4}
    pc.set_many({"c": None, "d": 1.5})
    assert pc["c"] is None and pc["d"] == 1.5
    pc.update({"e": {1, 2}}, f=b"bytes are values too")
    assert pc["e"] == {1, 2} and pc["f"] == b"bytes are values too"
    assert pc.setdefault("g", [7]) == [7] and pc.setdefault("g", [8]) == [7]
    assert pc.get_or_set("h", lambda: user(2)) == user(2)
    assert pc.get_or_set("h", lambda: 1 / 0) == user(2)
    assert pc.pop("h") == user(2) and "h" not in pc
    assert pc.pop("h", "gone") == "gone"
    k, v = pc.popitem()
    assert pc.get(k) is None and v is not None


def test_none_is_a_value_not_a_miss(pc):
    pc["n"] = None
    assert "n" in pc and pc["n"] is None
    assert pc.get("n", "default") is None
    assert pc.get("missing", "default") == "default"


def test_bytes_operations_refuse_with_a_serializer(pc):
    pc["n"] = 1
    for call in (lambda: pc.append("n", b"x"), lambda: pc.prepend("n", b"x"),
                 lambda: pc.incr("n"), lambda: pc.decr("n", 1)):
        with pytest.raises(TypeError, match=r"works on bytes values.*serializer \(pickle\)"):
            call()
    assert pc["n"] == 1


def test_a_module_as_serializer(clock):
    with segcache.Cache(heap_size="16MiB", clock=clock, serializer=json) as c:
        assert c.serializer is json
        c["k"] = {"a": [1, 2.5, None]}
        assert c["k"] == {"a": [1, 2.5, None]}
        with pytest.raises(TypeError, match="not JSON serializable"):
            c["bad"] = {1, 2}
        assert "bad" not in c


def test_a_user_serializer_is_called_for_each_value(clock):
    codec = Codec()
    with segcache.Cache(heap_size="16MiB", clock=clock, serializer=codec) as c:
        c["k"] = [1, "two"]
        assert codec.dumped == 1
        assert c["k"] == [1, "two"] and codec.loaded == 1
        assert c.get_many(["k"]) == {"k": [1, "two"]} and codec.loaded == 2
        assert c.get("absent") is None and codec.loaded == 2


def test_dumps_and_loads_get_exactly_the_value_and_the_bytes(clock):
    calls = []

    class Recorder:
        def dumps(self, *args, **kwargs):
            calls.append(("dumps", args, kwargs))
            return pickle.dumps(args[0])

        def loads(self, *args, **kwargs):
            calls.append(("loads", args, kwargs))
            return pickle.loads(args[0])

    value = {"id": 7, "name": "bob"}
    with segcache.Cache(heap_size="16MiB", clock=clock, serializer=Recorder()) as c:
        c["k"] = value
        assert c["k"] == value
    assert calls == [("dumps", (value,), {}), ("loads", (pickle.dumps(value),), {})]
    assert calls[0][1][0] is value and type(calls[1][1][0]) is bytes


def test_pickle_stores_the_highest_protocol(tmp_path):
    path = tmp_path / "pickled.dat"
    value = {"id": 1, "name": "alice", "score": 0.25, "active": True}
    with segcache.Cache(heap_size="16MiB", path=path, serializer="pickle") as c:
        c["k"] = value
    with segcache.Cache(heap_size="16MiB", path=path) as raw:
        assert raw["k"] == pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def test_serializer_calls_hold_no_reference_to_their_arguments_or_results(clock):
    class Identity:
        def dumps(self, obj):
            return obj

        def loads(self, data):
            return data

    value = b"v" * 100
    alone = bytes(bytearray(100))
    held_by_a_local = sys.getrefcount(alone)
    with segcache.Cache(heap_size="16MiB", clock=clock, serializer=Identity()) as c:
        before = sys.getrefcount(value)
        for _ in range(100):
            c["k"] = value
        assert sys.getrefcount(value) == before
        got = c["k"]
        # held by the local only, as `alone` is: neither the call nor the cache kept the `bytes`
        # that went through loads
        assert got == value and sys.getrefcount(got) == held_by_a_local
    with segcache.Cache(heap_size="16MiB", clock=clock, serializer="pickle") as pc:
        pc["k"] = value
        got = pc["k"]
        assert got == value and sys.getrefcount(got) == held_by_a_local


def test_a_value_that_does_not_decode_raises_and_stays(tmp_path):
    path = tmp_path / "mixed.dat"
    with segcache.Cache(heap_size="16MiB", path=path) as raw:
        raw["k"] = b"written without pickle"
    with segcache.Cache(heap_size="16MiB", path=path, serializer="pickle") as c:
        with pytest.raises(pickle.UnpicklingError):
            c["k"]
        with pytest.raises(pickle.UnpicklingError):
            c.pop("k")
        assert "k" in c


def test_pop_of_an_undecodable_value_keeps_it():
    class Fussy:
        def dumps(self, obj):
            return obj

        def loads(self, data):
            if data == b"bad":
                raise ValueError("cannot read this")
            return data

    with segcache.Cache(heap_size="16MiB", serializer=Fussy()) as c:
        c["k"] = b"bad"
        with pytest.raises(ValueError, match="cannot read this"):
            c.pop("k")
        assert "k" in c


@pytest.mark.parametrize("bad, err, match", [
    ("json", ValueError, 'unknown name "json"'),
    (5, TypeError, "int has no callable dumps"),
    (type("OnlyDumps", (), {"dumps": lambda self, o: b""})(), TypeError, "OnlyDumps has no callable loads"),
    (type("NotCallable", (), {"dumps": 1, "loads": 2})(), TypeError, "no callable dumps"),
])
def test_bad_serializers_are_refused(bad, err, match):
    with pytest.raises(err, match=match):
        segcache.Cache(heap_size="16MiB", serializer=bad)


def test_dumps_must_return_bytes_or_str():
    class Wrong:
        def dumps(self, obj):
            return 42

        def loads(self, data):
            return data

    with segcache.Cache(heap_size="16MiB", serializer=Wrong()) as c:
        with pytest.raises(TypeError, match=r"dumps\(\) returned int; it must return bytes or str"):
            c["k"] = "v"
        assert "k" not in c


def test_unpicklable_values_raise_and_store_nothing(pc):
    with pytest.raises((pickle.PicklingError, TypeError, AttributeError)):
        pc["f"] = lambda: 1
    assert "f" not in pc


def test_oversized_encoded_values_are_refused(pc):
    with pytest.raises(segcache.TooLarge):
        pc["big"] = "x" * (1 << 20)
    assert "big" not in pc


def test_keys_stay_bytes_or_str(pc):
    pc["k"] = 1
    assert pc[b"k"] == 1 and list(pc) == [b"k"]
    with pytest.raises(TypeError, match="key must be"):
        pc[1] = 1


def test_serializer_is_per_handle(tmp_path):
    path = tmp_path / "shared.dat"
    with segcache.Cache(heap_size="16MiB", path=path, serializer="pickle") as c:
        c["k"] = {"a": 1}
    with segcache.Cache(heap_size="16MiB", path=path) as raw:
        assert pickle.loads(raw["k"]) == {"a": 1}
    with segcache.Cache(heap_size="16MiB", path=path, serializer="pickle") as c:
        assert c["k"] == {"a": 1}


def test_memoize_uses_the_caches_serializer(pc):
    calls = []

    @pc.memoize(ttl=60)
    def profile(i):
        calls.append(i)
        return user(i)

    assert profile(1) == user(1) and profile(1) == user(1) and calls == [1]
    # stored as a value of the cache: readable through it as an object
    assert pc[profile.cache_key(1)] == user(1)

    @pc.memoize()
    def nothing():
        calls.append("none")

    assert nothing() is None and nothing() is None and calls == [1, "none"]
    with pytest.raises(TypeError, match="already has a serializer"):
        segcache.memoize(pc, serializer=json)


def test_memoize_of_an_unserializable_result_warns(clock):
    with segcache.Cache(heap_size="16MiB", clock=clock, serializer=json) as c:
        @c.memoize()
        def odd():
            return {1, 2}

        with pytest.warns(segcache.UncacheableResultWarning):
            assert odd() == {1, 2}
        assert odd.cache_info().currsize == 0


def test_generic_alias_at_run_time():
    alias = segcache.Cache[dict]
    assert alias.__origin__ is segcache.Cache and alias.__args__ == (dict,)


def test_a_serializer_that_holds_its_cache_is_collected():
    import gc
    import weakref

    class Holder:
        def dumps(self, obj):
            return pickle.dumps(obj)

        def loads(self, data):
            return pickle.loads(data)

    holder = Holder()
    holder.cache = segcache.Cache(heap_size="16MiB", serializer=holder)
    holder.cache["k"] = [1]
    gone = weakref.ref(holder)
    del holder
    gc.collect()
    assert gone() is None
