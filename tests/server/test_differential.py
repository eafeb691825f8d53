"""Differential test: the same random command stream to segcache-server and to memcached 1.6,
replies compared exactly (after the normalisations listed in diffkit.normalise: CAS numbers,
TTL seconds, `me` details, the version string, memcached's `Z` flag and base64 key bit; and
two memcached bugs stepped around after checking them, see diffkit). The generator is in
diffkit.py; a divergence is reduced with `diffkit.py replay` (see there).

Knobs (environment):
- SEGCACHE_DIFF_SEED: run this seed only (replay a reported divergence);
- SEGCACHE_DIFF_OPS: operations per seed and configuration (default 20000; a soak takes a big
  value, e.g. 500000);
- SEGCACHE_DIFF_TRACE=FILE: write each op's wire bytes and replies (last run wins);
- SEGCACHE_DIFF_MIX=all|text|meta: every command (default), or one protocol's only.
"""

import os
import random
import shutil
import tempfile

import pytest

from diffkit import MEMCACHED, default_binary, run_stream

OPS = int(os.environ.get("SEGCACHE_DIFF_OPS", "20000"))
MIX = os.environ.get("SEGCACHE_DIFF_MIX", "all")
FIXED_SEED = 20240611

pytestmark = pytest.mark.skipif(shutil.which(MEMCACHED) is None and not os.path.exists(MEMCACHED),
                                reason="memcached 1.6 is the oracle: not installed")


def seeds():
    env = os.environ.get("SEGCACHE_DIFF_SEED")
    if env:
        return [int(env)]
    # A fixed seed (the same stream every run) and a fresh one (printed, to replay).
    return [FIXED_SEED, random.randrange(1 << 32)]


CONFIGS = {
    "default-t2": ["-t", "2"],
    "t1": ["-t", "1"],
    # With a file, rewrites in place are off: every write takes the append path.
    "persist": ["-t", "2", "--persist", "{tmp}/cache.seg"],
    # Small segments (so the item limit shrinks too: memcached gets the same -I).
    "small-segments-fifo": ["-t", "2", "--segment-size", "128k", "-I", "64k", "--eviction", "fifo"],
    # A heap of 16 segments over a flash tier (memcached gets extstore), filled at the start with
    # twice what it holds: the stream's reads and writes meet items on flash.
    "tier": ["-t", "2", "-m", "1", "--shards", "1", "--segment-size", "64k", "-I", "32k", "--eviction", "fifo",
             "-o", "ext_path={tmp}/cache.tier:64m"],
}


# The stream's keys and their first values, where a configuration needs other than the default.
STREAMS = {"tier": {"keys": 200, "prefill": 8000}}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", seeds())
def test_same_replies_as_memcached(config, seed, capsys):
    binary = default_binary()
    assert binary.exists(), f"{binary} missing: cargo build --release -p segcache-server"
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.format(tmp=tmp) for a in CONFIGS[config]]
        res = run_stream(binary, args, seed, OPS, mix=MIX, **STREAMS.get(config, {}))
    with capsys.disabled():
        print(f"\n[differential] {config} seed {seed}: replies identical: {res}")
    assert res["ops"] >= OPS
    if "ext_path" in " ".join(args):
        # The prefill went partly to flash; what the stream read of it had to match memcached.
        figures = dict(f.split("=") for f in res["engine"].split())
        assert int(figures["extstore_objects_written"]) > 0, figures


def test_incr_of_odd_values_matches_fresh_memcached():
    """incr/decr of values at the edge of "a number", each under a key of its own on fresh
    servers, so that memcached's item memory holds no stale bytes after the value (where its
    strtoull would read on, see `diffkit.blank_quirk`): replies and values as memcached's."""
    from diffkit import Conn, start_memcached, start_segcache
    values = [b" ", b"\n", b"\x0b", b"\t \r", b" 12", b"\t7", b"12 ", b"+5", b"-5", b"0x10", b"007",
              b"1 2", b"18446744073709551615", b"18446744073709551616", b"12a", b""]
    procs = [start_memcached(), start_segcache(default_binary(), ["-t", "1"])]
    try:
        seen = []
        for p in procs:
            c = Conn(p.port)
            out = []
            for i, v in enumerate(values):
                for op in (b"incr", b"decr"):
                    k = b"odd%d%s" % (i, op)
                    c.send(b"set %s 0 0 %d\r\n%s\r\n%s %s 3\r\nmg %s v\r\nmn\r\n" % (k, len(v), v, op, k, k))
                    out.append(c.segment())
            c.close()
            seen.append(out)
        for v, mc, sc in zip([v for v in values for _ in (0, 1)], *seen):
            assert sc == mc, f"value {v!r}: memcached {mc!r}, segcache {sc!r}"
    finally:
        for p in procs:
            p.stop()


def test_blank_quirk_claims_only_a_number_found_in_stale_bytes():
    """The classifier of memcached's stale read on a value of whitespace alone: memcached's
    number (or `ma`'s HD/VA, or a quiet success) against this server's "non-numeric" for the one
    such op of a segment is memcached's quirk; any other difference is a divergence."""
    from diffkit import NON_NUMERIC, blank_quirk, blanks
    op, other = object(), object()
    blank = blanks({op: b" \n\x0b", other: b" 12"})
    assert list(blank) == [op]
    assert blanks({op: b""}) == {}

    def claims(mc, sc, seg=(op,)):
        return blank_quirk({"memcached": mc, "segcache": sc}, list(seg), blank)

    assert claims([b"73709551621"], [NON_NUMERIC])
    assert claims([b"HD"], [NON_NUMERIC])
    assert claims([], [NON_NUMERIC])  # `ma ... q`: memcached's success says nothing
    assert not claims([b"12"], [b"13"])
    assert not claims([NON_NUMERIC], [b"12"])  # the other way round is a divergence
    assert not claims([b"12", b"END"], [NON_NUMERIC, b"VALUE"])
    assert not claims([b"12"], [NON_NUMERIC], seg=(other,))


def test_big_number_quirk_claims_only_memcached_refusing():
    """The mirror image, for a big number: memcached's "non-numeric" against this server's
    result is memcached's quirk, not the other way round."""
    from diffkit import NON_NUMERIC, big_number_quirk
    op = object()
    exposed = {op: (b"18446744073709551615", b"18446744073709551615")}

    def claims(mc, sc):
        return big_number_quirk({"memcached": mc, "segcache": sc}, [op], exposed)

    assert claims([NON_NUMERIC], [b"0"])
    assert claims([NON_NUMERIC], [b"VA 1"])
    assert claims([NON_NUMERIC], [])
    assert not claims([b"0"], [NON_NUMERIC])
    assert not claims([NON_NUMERIC], [b"EX"])


def test_big_numbers_are_what_memcached_reads_as_one():
    """The values whose incr/decr 1.6.18's strchr for '-' can refuse: a number from 2^63 on, as
    safe_strtoull reads it (leading whitespace, '+', trailing whitespace and bytes after it)."""
    from diffkit import big_numbers, strtoull_number
    assert strtoull_number(b"18446744073709551615\x0c\x8e4-J") == b"18446744073709551615"
    assert strtoull_number(b" +0012 ") == b"0012"
    assert strtoull_number(b"12") == b"12"
    for v in (b"12a", b"-5", b"", b" ", b"0x10"):
        assert strtoull_number(v) is None, v
    a, b, c = object(), object(), object()
    got = big_numbers({a: b"9223372036854775808  ", b: b"9223372036854775807", c: b"18446744073709551615\t-"})
    assert got == {a: (b"9223372036854775808  ", b"9223372036854775808"),
                   c: (b"18446744073709551615\t-", b"18446744073709551615")}
    assert big_numbers({a: b"18446744073709551616"}) == {}
