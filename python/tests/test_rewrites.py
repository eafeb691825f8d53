"""Rewrites of one key whose records have the same total length but other header layouts: client
flags take 4 bytes of a record only when they are not 0, so `flags=1 b"a"` and `flags=0
b"bbbbb"` make records of one length. Every read must return exactly the last store, through the
default configuration and with a file (then also after a reopen)."""

import pytest

import segcache

LENS = [0, 1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 60, 100, 200, 500]
KEYS = 40
ROUNDS = 5


def open_cache(path):
    return segcache.Cache() if path is None else segcache.Cache(path=path)


@pytest.fixture(params=[False, True], ids=["default", "file"])
def path(request, tmp_path):
    return tmp_path / "cache.dat" if request.param else None


def item(c, key):
    found = c.get_item(key)
    return None if found is None else found[:2]


def round_flags(i, r):
    return 0 if (i + r) % 2 == 0 else 1 + i + r * 1000


def round_value(i, length, r, flags):
    n = length + 4 if flags == 0 else length
    v = bytes(ord("A") + (i * 7 + r * 5 + b) % 26 for b in range(n))
    return (bytes([ord("0") + r]) + v[1:]) if n else v


def test_the_two_reported_sequences(path):
    with open_cache(path) as c:
        c.set("k", b"a", flags=1)
        c.set("k", b"bbbbb", flags=0)
        assert item(c, "k") == (b"bbbbb", 0)
        c.set("j", b"WXYZy", flags=0)
        c.set("j", b"N", flags=7)
        assert item(c, "j") == (b"N", 7)
        assert c.get("j") == b"N" and c["j"] == b"N" and c.gets("j")[0] == b"N"
        c.set("j", b"QRSTU", flags=0)
        assert item(c, "j") == (b"QRSTU", 0)
        assert item(c, "k") == (b"bbbbb", 0)
        assert c.get_many(["k", "j"]) == {"k": b"bbbbb", "j": b"QRSTU"}
    if path is not None:
        with open_cache(path) as c:
            assert item(c, "k") == (b"bbbbb", 0)
            assert item(c, "j") == (b"QRSTU", 0)


def test_alternating_flags_at_equal_record_length(path):
    wrong = []
    with open_cache(path) as c:
        for i in range(KEYS):
            for length in LENS:
                key = f"rw-{i}-{length}"
                for r in range(ROUNDS):
                    flags = round_flags(i, r)
                    value = round_value(i, length, r, flags)
                    c.set(key, value, flags=flags)
                    if item(c, key) != (value, flags):
                        wrong.append((key, r, item(c, key), (value, flags)))
        last = {}
        for i in range(KEYS):
            for length in LENS:
                flags = round_flags(i, ROUNDS - 1)
                last[f"rw-{i}-{length}"] = (round_value(i, length, ROUNDS - 1, flags), flags)
        wrong += [(k, "end", item(c, k), v) for k, v in last.items() if item(c, k) != v]
    if path is not None:
        with open_cache(path) as c:
            wrong += [(k, "reopened", item(c, k), v) for k, v in last.items() if item(c, k) != v]
    assert not wrong, f"{len(wrong)} wrong reads, first: {wrong[:5]}"


def test_read_modify_writes_on_rewritten_items(path):
    with open_cache(path) as c:
        c.set("ap", b"xy", flags=3)
        c.set("ap", b"abcdef", flags=0)
        assert c.append("ap", b"!") is True
        assert item(c, "ap") == (b"abcdef!", 0)
        assert c.prepend("ap", b"<") is True
        assert item(c, "ap") == (b"<abcdef!", 0)

        c.set("pp", b"abcdef", flags=0)
        c.set("pp", b"xy", flags=9)
        assert c.prepend("pp", b"<") is True
        assert item(c, "pp") == (b"<xy", 9)
        assert c.append("pp", b"!") is True
        assert item(c, "pp") == (b"<xy!", 9)

        c.set("n", b"1", flags=5)
        c.set("n", b"12345", flags=0)
        assert c.incr("n") == 12346
        assert item(c, "n") == (b"12346", 0)
        c.set("m", b"10000", flags=0)
        c.set("m", b"7", flags=2)
        assert c.incr("m", 3) == 10
        assert item(c, "m") == (b"10", 2)
        assert c.decr("m") == 9
        assert item(c, "m") == (b"9", 2)

        c.set("t", b"v", flags=4)
        c.set("t", b"vvvvv", flags=0)
        assert c.touch("t", 1000) is True
        assert item(c, "t") == (b"vvvvv", 0)
        c.set("u", b"wwwww", flags=0)
        c.set("u", b"w", flags=6)
        assert c.touch("u", 1000) is True
        value, flags, _, ttl = c.get_item("u")
        assert (value, flags) == (b"w", 6) and 1 <= ttl <= 1000
        assert c.get_and_touch("u", 0) == b"w"
        assert item(c, "u") == (b"w", 6)
    if path is not None:
        with open_cache(path) as c:
            want = {"ap": (b"<abcdef!", 0), "pp": (b"<xy!", 9), "n": (b"12346", 0),
                    "m": (b"9", 2), "t": (b"vvvvv", 0), "u": (b"w", 6)}
            assert {k: item(c, k) for k in want} == want
