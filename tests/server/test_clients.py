"""Real memcache clients against the real server: pymemcache (pure Python) and pylibmc
(libmemcached)."""

import os

import pylibmc
import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError


@pytest.fixture
def pm(server):
    c = Client(("127.0.0.1", server.port), timeout=5, connect_timeout=5, default_noreply=False)
    c.flush_all()
    yield c
    c.close()


@pytest.fixture
def lm(server):
    c = pylibmc.Client([f"127.0.0.1:{server.port}"], behaviors={"tcp_nodelay": True})
    c.flush_all()
    yield c
    c.disconnect_all()


def test_pymemcache_storage_commands(pm):
    assert pm.set("a", b"1", expire=0)
    assert pm.get("a") == b"1"
    assert pm.add("a", b"2") is False
    assert pm.add("b", b"2") is True
    assert pm.replace("c", b"3") is False
    assert pm.replace("b", b"22") is True
    assert pm.append("b", b"33") is True
    assert pm.prepend("b", b"11") is True
    assert pm.get("b") == b"112233"
    assert pm.append("missing", b"x") is False
    assert pm.get_many(["a", "b", "nope"]) == {"a": b"1", "b": b"112233"}


def test_pymemcache_flags_are_kept(pm):
    # pymemcache stores the client flags and returns them with the value.
    pm.raw_command(b"set fl 123456 0 1\r\nx", b"STORED")
    assert pm.get("fl") == b"x"
    reply = pm.raw_command(b"get fl", b"END")
    assert reply.startswith(b"VALUE fl 123456 1\r\nx")


def test_pymemcache_cas(pm):
    pm.set("k", b"v1")
    value, cas = pm.gets("k")
    assert value == b"v1"
    assert pm.cas("k", b"v2", cas) is True
    assert pm.cas("k", b"v3", cas) is False  # EXISTS: the CAS changed
    assert pm.cas("missing", b"v", cas) is None  # NOT_FOUND
    assert pm.get("k") == b"v2"
    many = pm.gets_many(["k", "missing"])
    assert list(many) == ["k"] and many["k"][0] == b"v2"


def test_pymemcache_incr_decr(pm):
    pm.set("n", b"10")
    assert pm.incr("n", 5) == 15
    assert pm.decr("n", 20) == 0  # never below zero
    assert pm.incr("n", 2**64 - 1) == 2**64 - 1
    assert pm.incr("n", 1) == 0  # wraps at 64 bits, as memcached
    assert pm.incr("missing", 1) is None
    pm.set("s", b"abc")
    with pytest.raises(MemcacheClientError):
        pm.incr("s", 1)


def test_pymemcache_delete_touch_gat(pm):
    pm.set("d", b"x")
    assert pm.delete("d") is True
    assert pm.delete("d") is False
    pm.set("t", b"x", expire=100)
    assert pm.touch("t", 200) is True
    assert pm.touch("missing", 10) is False
    # pymemcache has no gat/gats helpers: send them raw through its connection.
    # (raw_command strips the END terminator.)
    assert pm.raw_command(b"gat 300 t", b"END\r\n") == b"VALUE t 0 1\r\nx\r\n"
    reply = pm.raw_command(b"gats 300 t missing", b"END\r\n")
    assert reply.startswith(b"VALUE t 0 1 ") and reply.endswith(b"\r\nx\r\n")
    assert pm.raw_command(b"gat 300 missing", b"END\r\n") == b""
    # A negative exptime expires at once.
    assert pm.touch("t", -1) is True
    assert pm.get("t") is None


def test_pymemcache_noreply(server):
    c = Client(("127.0.0.1", server.port), timeout=5, default_noreply=True)
    for i in range(100):
        c.set(f"nr{i}", str(i).encode())
    c.delete("nr0")
    c.incr("nr1", 10)
    assert c.get("nr0") is None
    assert c.get("nr1") == b"11"
    assert c.get("nr99") == b"99"
    c.close()


def test_pymemcache_binary_and_unicode_values(pm):
    blob = bytes(range(256)) * 40 + b"\r\nEND\r\nVALUE x 0 1\r\n"
    pm.set("bin", blob)
    assert pm.get("bin") == blob
    pm.set("empty", b"")
    assert pm.get("empty") == b""
    key = "utf8-kéy".encode()  # UTF-8 bytes are fine in keys; only controls and spaces are not
    pm.set(key, "välue ✓".encode())
    assert pm.get(key) == "välue ✓".encode()


def test_pymemcache_largest_and_too_large_values(pm):
    # The module's server runs with -I 64k.
    big = os.urandom(64 * 1024 - 200)
    assert pm.set("big", big)
    assert pm.get("big") == big
    with pytest.raises(MemcacheServerError, match="object too large"):
        pm.set("toobig", b"x" * (64 * 1024 + 1))
    # The stream is still in sync after the refused value.
    assert pm.get("big") == big


def test_pymemcache_flush_stats_version(pm):
    pm.set("f", b"x")
    assert pm.flush_all() is True
    assert pm.get("f") is None
    stats = pm.stats()
    for name in [b"curr_items", b"bytes", b"get_hits", b"get_misses", b"evictions", b"curr_connections",
                 b"total_connections", b"cmd_get", b"cmd_set", b"uptime", b"threads", b"limit_maxbytes"]:
        assert name in stats, name
    assert stats[b"threads"] == 2
    settings = pm.stats("settings")
    assert settings[b"item_size_max"] == 64 * 1024
    assert pm.version().startswith(b"1.6")


def test_pymemcache_many_keys_in_one_get(pm):
    keys = [f"multi-{i:04d}-" + "k" * 200 for i in range(400)]  # a ~85 KB get line
    pm.set_many({k: k.encode() for k in keys})
    got = pm.get_many(keys)
    assert len(got) == len(keys)
    assert all(got[k] == k.encode() for k in keys)


def test_pylibmc_basic_commands(lm):
    assert lm.set("a", "hello")
    assert lm.get("a") == "hello"
    assert lm.add("a", "x") is False
    assert lm.replace("a", "world")
    assert lm.append("a", "!")
    assert lm.prepend("a", ">")
    assert lm.get("a") == ">world!"
    assert lm.delete("a")
    assert lm.get("a") is None
    lm.set("n", 5)
    assert lm.incr("n", 3) == 8
    assert lm.decr("n", 10) == 0
    assert lm.touch("n", 100)


def test_pylibmc_multi_and_binary(lm):
    values = {f"key{i}": os.urandom(i * 37) for i in range(100)}
    assert lm.set_multi(values) == []
    assert lm.get_multi(list(values) + ["missing"]) == values
    assert lm.delete_multi(["key1", "key2"])
    assert lm.get("key1") is None


def test_pylibmc_pickled_objects_and_flags(lm):
    obj = {"list": [1, 2, 3], "nested": {"x": 1.5}}
    lm.set("obj", obj)  # pickled, marked by client flags
    assert lm.get("obj") == obj
    lm.set("int", 42)
    assert lm.get("int") == 42


def test_pylibmc_cas(server):
    c = pylibmc.Client([f"127.0.0.1:{server.port}"], behaviors={"cas": True})
    c.set("c", "v1")
    value, cas = c.gets("c")
    assert value == "v1"
    assert c.cas("c", "v2", cas)
    assert not c.cas("c", "v3", cas)
    assert c.get("c") == "v2"
    c.disconnect_all()


def test_concurrent_clients_do_not_interfere(server):
    """Eight clients on both workers at once: per-client keys read back intact, and increments
    of one shared counter are all counted (the engine makes incr atomic)."""
    import threading

    c = Client(("127.0.0.1", server.port), default_noreply=False)
    c.set("shared-counter", b"0")
    c.close()
    errors = []

    def work(n: int) -> None:
        try:
            cl = Client(("127.0.0.1", server.port), timeout=10, default_noreply=False)
            for i in range(200):
                value = f"{n}-{i}-".encode() * (1 + i % 50)
                assert cl.set(f"t{n}-{i}", value)
                assert cl.get(f"t{n}-{i}") == value
                cl.incr("shared-counter", 1)
            cl.close()
        except Exception as e:  # reported below, with the thread's number
            errors.append((n, repr(e)))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    c = Client(("127.0.0.1", server.port), default_noreply=False)
    assert c.get("shared-counter") == b"1600"
    c.close()
