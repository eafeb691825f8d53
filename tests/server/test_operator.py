"""memcached's operator commands and the text protocol's corners, against memcached 1.6 itself.

Where memcached's reply is deterministic (error lines, `noreply` on a malformed command,
`flush_all`/`verbosity`/`gat` argument forms, `stats cachedump` of items that never expire,
`stats detail dump`, `cache_memlimit`, `shutdown` without -A) the replies are compared byte for
byte; where it is not (times, connection ids, item sizes, CAS values) the structure is checked:
the same lines, the same fields, the same keys.

memcached runs without its LRU maintainer (so items sit in the class's COLD queue, which
`stats cachedump` walks) and with its LRU crawler (which `lru_crawler metadump` needs).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
import urllib.parse

import pytest

from conftest import ROOT_USER, free_port, server_binary, start_segcache
from diffkit import MEMCACHED, Proc

pytestmark = pytest.mark.skipif(shutil.which(MEMCACHED) is None and not os.path.exists(MEMCACHED),
                                reason="memcached 1.6 is the oracle: not installed")


def talk(port: int, data: bytes, until: bytes = b"VERSION ", sentinel: bytes = b"version\r\n") -> bytes:
    """Sends `data` and a sentinel command; returns what came back before the sentinel's reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data + sentinel)
        buf = b""
        while True:
            i = buf.rfind(until)
            if i >= 0 and buf.endswith(b"\r\n") and (i == 0 or buf[i - 2:i] == b"\r\n" or buf[i - 1:i] == b"\n"):
                return buf[:i]
            chunk = s.recv(65536)
            if not chunk:
                return buf
            buf += chunk


def dump(port: int, cmd: bytes, end: bytes) -> bytes:
    """Sends one dump command alone on a connection (memcached refuses it after others in one
    read) and reads up to its last line."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(cmd)
        buf = b""
        while not (buf == end or buf.endswith(b"\n" + end) or buf.startswith((b"BADCLASS", b"ERROR", b"CLIENT_ERROR"))
                   and buf.endswith(b"\r\n")):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf


def both(pair, data: bytes) -> tuple[bytes, bytes]:
    mc, sc = pair
    return talk(mc.port, data), talk(sc.port, data)


# Each case runs on a connection of its own, with its own keys; the reply must be memcached's.
SAME = [
    # The version line: a release number that version parsers take.
    b"",
    # noreply on a malformed command: nothing at all.
    b"incr nrk x noreply\r\n",
    b"decr nrk -1 noreply\r\n",
    b"touch nrk x noreply\r\n",
    b"set nrk 0 0 x noreply\r\n",
    b"set nrk x 0 1 noreply\r\nx\r\n",
    b"verbosity x noreply\r\n",
    b"flush_all foo noreply\r\n",
    b"cache_memlimit 100 noreply\r\n",
    # Error strings clients match on.
    b"incr nrk x\r\n",
    b"touch nrk x\r\n",
    b"get\r\n",
    b"gat\r\n",
    b"gats\r\n",
    b"gat x k\r\n",
    b"gat 99999999999999999999 k\r\n",
    b"delete k noreply extra\r\n",
    b"bogus\r\n",
    # flush_all: negative, malformed, extra words.
    b"flush_all -1\r\n",
    b"flush_all -1 noreply\r\n",
    b"flush_all foo\r\n",
    b"flush_all 0\r\n",
    b"flush_all 1 2\r\nflush_all 0\r\n",
    b"flush_all 1 noreply extra\r\n",
    # verbosity with and without noreply.
    b"verbosity noreply\r\n",
    b"verbosity 1 noreply\r\nverbosity 0 noreply\r\n",
    b"verbosity\r\n",
    b"verbosity x\r\n",
    b"verbosity 0\r\n",
    # Operator commands with bad or missing arguments.
    b"stats detail\r\n",
    b"stats detail foo\r\n",
    b"stats cachedump\r\n",
    b"stats cachedump 1\r\n",
    b"stats cachedump x y\r\n",
    b"stats cachedump 64 0\r\n",
    b"stats cachedump 2 0\r\n",
    b"stats cachedump 63 0\r\n",
    b"stats foo\r\n",
    b"stats sizes\r\n",
    b"watch foo\r\n",
    b"lru_crawler\r\n",
    b"lru_crawler foo\r\n",
    b"lru_crawler metadump\r\n",
    b"lru_crawler metadump all noreply\r\n",
    b"shutdown\r\n",
    b"shutdown graceful\r\n",
    b"shutdown foo\r\n",
    b"cache_memlimit 4\r\n",
    b"cache_memlimit 2000000000\r\n",
    b"cache_memlimit x\r\n",
    b"cache_memlimit\r\n",
    b"cache_memlimit 64\r\n",
    b"cache_memlimit 4294967296\r\n",
    b"cache_memlimit -1\r\n",
    b"verbosity 99999999999\r\nverbosity 0\r\n",
    b"lru_crawler crawl all\r\n",
    b"lru_crawler crawl x\r\n",
    b"lru_crawler tocrawl 10\r\n",
    b"watch fetchers foo\r\n",
    b"stats detail on x\r\nstats detail off\r\n",
    b"stats cachedump -1 0\r\n",
    # Storage and other commands' arities and numbers.
    b"set k 0 0 1 2 3\r\nx\r\n",
    b"set k 0 0\r\n",
    b"set k 0 0 -1\r\n",
    b"set k 0 0 1\r\nxy\r\n",
    b"cas k 0 0 1\r\nx\r\n",
    b"cas k 0 0 1 x noreply\r\nx\r\n",
    b"incr k 1 2 3\r\n",
    b"incr k 18446744073709551616\r\n",
    b"touch k 1 2 3\r\n",
    b"delete k 1\r\n",
    b"delete k x noreply\r\n",
    b"gats 10 a b\r\n",
    b"flush_all 99999999999999999999\r\n",
    # Meta commands: the proxy's hint tokens (P, L) are accepted and ignored, once each.
    b"ms hint 2 T0 P L\r\nab\r\nmg hint v P L\r\nmd hint P L q\r\nmd hint P L\r\nmn\r\n",
    b"ma hintn P L N0 J5\r\nma hintn Pfoo\r\nmn\r\n",
    b"mg hint v P L Pfoo Lbar\r\n",
    # ma's modes and flags, and ms's explicit set mode.
    b"ma hintc N0 J5 T100 O7 v\r\nma hintc MI v O8 k\r\nma hintc M+ D3 v\r\nma hintc M- D2 v\r\nma hintc MD v q\r\nmn\r\n",
    b"ms hintm 2 MS T0 O3 k\r\nab\r\nmg hintm v\r\nmn\r\n",
    # Flags memcached does not have (ms S, mg S): refused, the data line swallowed.
    b"ms hint 1 S1\r\na\r\nmn\r\n",
    b"mg hint s v S\r\n",
]


@pytest.mark.parametrize("data", SAME, ids=lambda d: d.decode(errors="replace").strip() or "version")
def test_same_reply_as_memcached(pair, data):
    mc, sc = both(pair, data)
    assert sc == mc


def test_version_line(pair):
    _, sc = pair
    with socket.create_connection(("127.0.0.1", sc.port), timeout=5) as s:
        s.sendall(b"version\r\n")
        line = s.recv(100)
    assert re.fullmatch(rb"VERSION 1\.6\.\d+\r\n", line), line
    stats = stat_map(talk(sc.port, b"stats\r\n"))
    assert stats["implementation"] == "segcache"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", stats["segcache_version"])


@pytest.mark.parametrize("exptime", ["0", "100", "-1", "2592000", "2592001", "NOW+100", "NOW-100"])
def test_gat_with_every_exptime_form(pair, exptime):
    mc_port, sc_port = pair[0].port, pair[1].port
    for port in (mc_port, sc_port):
        now = int(time.time())
        e = exptime.replace("NOW+100", str(now + 100)).replace("NOW-100", str(now - 100)).encode()
        key = b"gat-" + exptime.encode().replace(b"+", b"p").replace(b"-", b"m")
        got = talk(port, b"set %s 3 0 2\r\nhi\r\ngat %s %s\r\ngats %s %s\r\nget %s\r\n" % (key, e, key, e, key, key))
        # CAS values differ between the servers: compare without them.
        reply = re.sub(rb"(VALUE \S+ \d+ \d+) \d+", rb"\1 <cas>", got)
        if port == mc_port:
            expected = reply
        else:
            assert reply == expected, exptime


def stat_map(reply: bytes) -> dict[str, str]:
    out = {}
    for line in reply.split(b"\r\n"):
        if line.startswith(b"STAT "):
            _, name, value = line.decode().split(" ", 2)
            out[name] = value
    return out


def test_stats_has_the_fields_exporters_read(pair):
    mc, sc = pair
    want = ["get_expired", "get_flushed", "accepting_conns", "listen_disabled_num", "conn_yields",
            "hash_power_level", "hash_bytes", "expired_unfetched", "evicted_unfetched", "curr_connections",
            "limit_maxbytes", "curr_items", "evictions"]
    ours, theirs = stat_map(talk(sc.port, b"stats\r\n")), stat_map(talk(mc.port, b"stats\r\n"))
    for name in want:
        assert name in theirs, name
        assert re.fullmatch(r"\d+", ours.get(name, "")), name
    assert ours["accepting_conns"] == "1"
    assert int(ours["hash_bytes"]) > 0 and int(ours["hash_power_level"]) > 0
    assert "total_malloced" in stat_map(talk(sc.port, b"stats slabs\r\n"))


def test_misses_on_expired_and_flushed_items_count_as_memcached_counts_them(pair):
    """`get_expired` and `get_flushed` move as memcached's do: a read of an expired item, a read
    after a delayed `flush_all` took effect, and never for a key that was not there."""
    def counts(port: int) -> tuple[int, int, int]:
        m = stat_map(talk(port, b"stats\r\n"))
        return int(m["get_misses"]), int(m["get_expired"]), int(m["get_flushed"])

    before = {srv.port: counts(srv.port) for srv in pair}
    for srv in pair:
        talk(srv.port, b"set gx-short 0 1 1\r\na\r\nset gx-long 0 0 1\r\nb\r\n")
    time.sleep(2.2)
    for srv in pair:
        talk(srv.port, b"get gx-short\r\nget gx-never\r\nflush_all 1\r\n")
    time.sleep(2.2)
    for srv in pair:
        talk(srv.port, b"get gx-long\r\n")
    moved = [tuple(a - b for a, b in zip(counts(srv.port), before[srv.port])) for srv in pair]
    assert moved[0] == (3, 1, 1)
    assert moved[1] == moved[0]


def test_cas_values_are_small(pair):
    _, sc = pair
    got = talk(sc.port, b"".join(b"set cas%d 0 0 1\r\nx\r\n" % i for i in range(50)) + b"gets cas49\r\n")
    cas = int(re.search(rb"VALUE cas49 0 1 (\d+)", got).group(1))
    assert 0 < cas < 1_000_000


def load_keys(port: int, prefix: str) -> list[bytes]:
    keys = [f"{prefix}{i}".encode() for i in range(20)] + [f"{prefix}%x:y~z".encode()]
    talk(port, b"".join(b"set %s 1 0 3\r\nabc\r\n" % k for k in keys))
    return keys


def test_cachedump_lists_keys_as_memcached(pair):
    """What php's getAllKeys() does: `stats items` for the classes, then cachedump each."""
    mc, sc = pair
    seen = {}
    for proc in (mc, sc):
        talk(proc.port, b"flush_all\r\n")
        keys = load_keys(proc.port, "dump")
        classes = sorted({int(m) for m in re.findall(rb"STAT items:(\d+):number ", talk(proc.port, b"stats items\r\n"))})
        assert classes, proc.name
        lines = []
        for c in classes:
            lines += talk(proc.port, b"stats cachedump %d 0\r\n" % c).split(b"\r\n")
        items = sorted(line for line in lines if line.startswith(b"ITEM "))
        assert items == sorted(b"ITEM %s [3 b; 0 s]" % k for k in keys), proc.name
        seen[proc.name] = items
        # A limit stops the dump.
        limited = talk(proc.port, b"stats cachedump %d 5\r\n" % classes[0])
        assert limited.count(b"ITEM ") == 5 and limited.endswith(b"END\r\n")
    assert seen["memcached"] == seen["segcache-server"]


def test_cachedump_prints_absolute_expiry(pair):
    _, sc = pair
    now = int(time.time())
    got = talk(sc.port, b"flush_all\r\nset ttl1 0 100 2\r\nhi\r\nstats cachedump 1 0\r\n")
    m = re.search(rb"ITEM ttl1 \[2 b; (\d+) s\]\r\n", got)
    # The TTL bucket's expiry: up to a bucket's width (8 s for short TTLs) early.
    assert m and -16 <= int(m.group(1)) - (now + 100) <= 2, got


METADUMP = re.compile(rb"key=(\S+) exp=(-1|\d+) la=\d+ cas=\d+ fetch=(yes|no) cls=\d+ size=\d+\n")


@pytest.mark.parametrize("classes", [b"all", b"hash", b"1"])
def test_metadump(pair, classes):
    mc, sc = pair
    for proc in (mc, sc):
        talk(proc.port, b"flush_all\r\n")
        keys = load_keys(proc.port, "meta")
        talk(proc.port, b"set metattl 0 1000 1\r\nx\r\n")
        out = dump(proc.port, b"lru_crawler metadump %s\r\n" % classes, b"END\r\n")
        assert out.endswith(b"END\r\n"), (proc.name, out)
        body = out[: -len(b"END\r\n")]
        lines = re.findall(rb"[^\n]*\n", body)
        assert b"".join(lines) == body
        found = {}
        for line in lines:
            m = METADUMP.fullmatch(line)
            assert m, (proc.name, line)
            found[urllib.parse.unquote_to_bytes(m.group(1))] = m.group(2)
        assert set(found) == set(keys) | {b"metattl"}, proc.name
        assert all(found[k] == b"-1" for k in keys)
        # Against the server's own clock (memcached's runs a few seconds apart from the wall
        # clock); segcache's expiry is its TTL bucket's (a segment's items expire together),
        # which may be a bucket's width (8 s at this TTL) early.
        now = int(stat_map(talk(proc.port, b"stats\r\n"))["time"])
        slack = 2 if proc is mc else 16
        assert -slack <= int(found[b"metattl"]) - (now + 1000) <= 2
        # Keys are URL-encoded.
        assert b"key=meta%25x%3Ay~z " in body


def test_metadump_bad_and_empty_classes(pair):
    mc, sc = pair
    for cmd in [b"lru_crawler metadump x\r\n", b"lru_crawler metadump 0\r\n", b"lru_crawler metadump 2\r\n"]:
        end = b"END\r\n"
        assert dump(sc.port, cmd, end) == dump(mc.port, cmd, end), cmd


def test_mgdump(pair):
    """The newest memcached's `lru_crawler mgdump` (not in the oracle): `OK`, `mg <key>` lines, `EN`."""
    _, sc = pair
    talk(sc.port, b"flush_all\r\n")
    keys = load_keys(sc.port, "mg")
    out = dump(sc.port, b"lru_crawler mgdump hash\r\n", b"EN\r\n")
    assert out.startswith(b"OK\r\n") and out.endswith(b"EN\r\n")
    lines = out.split(b"\r\n")[1:-2]
    assert sorted(lines) == sorted(b"mg " + k for k in keys)
    # Each line is a command that works as it is.
    got = talk(sc.port, lines[0] + b" v\r\n")
    assert got == b"VA 3\r\nabc\r\n"


def test_stats_detail_dump_as_memcached(pair):
    script = (b"stats detail on\r\nset a:1 0 0 1\r\nx\r\nget a:1 a:2 b:1 plain\r\ndelete a:1\r\n"
              b"set b:2 0 0 1\r\ny\r\nstats detail off\r\nget a:1\r\nstats detail dump\r\n")
    mc, sc = both(pair, script)
    # memcached lists the prefixes in its hash table's order.
    assert sorted(sc.split(b"\r\n")) == sorted(mc.split(b"\r\n"))
    assert sc.endswith(b"END\r\n")


def test_stats_sizes_when_enabled(pair):
    _, sc = pair
    got = talk(sc.port, b"flush_all\r\nset sz 0 0 10\r\n0123456789\r\nstats sizes_enable\r\nstats sizes\r\n"
                        b"stats sizes_disable\r\nstats sizes\r\n")
    assert b"STAT sizes_status enabled\r\n" in got
    sizes = re.findall(rb"STAT (\d+) (\d+)\r\n", got)
    assert sizes and all(int(s) % 32 == 0 for s, _ in sizes)
    assert got.endswith(b"STAT sizes_status disabled\r\nSTAT sizes_status disabled\r\nEND\r\n")


def test_stats_conns(pair):
    _, sc = pair
    other = socket.create_connection(("127.0.0.1", sc.port), timeout=5)
    try:
        other.sendall(b"version\r\n")
        other.recv(100)
        got = talk(sc.port, b"stats conns\r\n")
    finally:
        other.close()
    lines = got.split(b"\r\n")
    assert lines[-2:] == [b"END", b""]
    for line in lines[:-2]:
        assert re.fullmatch(rb"STAT \d+:(addr|listen_addr) tcp:[\d.]+:\d+|STAT \d+:state conn_\w+"
                            rb"|STAT \d+:secs_since_last_cmd \d+", line), line
    assert got.count(b":state conn_listening") == 1
    assert got.count(b":state conn_parse_cmd") == 1
    assert got.count(b":listen_addr tcp:127.0.0.1:%d" % sc.port) >= 2


# memcached prints the microseconds of `ts=` without their leading zeros (so `.05` reads as half
# a second); this server pads them to six digits.
WATCH_LINE = {
    "fetchers": re.compile(rb"ts=\d+\.\d{1,6} gid=\d+ type=item_get key=\S+ status=(found|not_found) clsid=\d+ "
                           rb"cfd=\d+ size=\d+"),
    "mutations": re.compile(rb"ts=\d+\.\d{1,6} gid=\d+ type=item_store key=\S+ status=\w+ cmd=\w+ ttl=\d+ "
                            rb"clsid=\d+ cfd=\d+ size=\d+"),
    "connevents": re.compile(rb"ts=\d+\.\d{1,6} gid=\d+ type=conn_(new|close) rip=[\d.]+ rport=\d+ transport=tcp"
                             rb"( reason=\w+)? cfd=\d+"),
}


def watch(port: int, streams: str, expect: list[bytes]) -> list[bytes]:
    """Watches `streams` while another client stores and reads; returns the log lines once every
    `expect` substring arrived (memcached's logger thread sends them in its own time)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as w:
        w.sendall(b"watch %s\r\n" % streams.encode())
        assert w.recv(4) == b"OK\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"set wk 0 0 2\r\nhi\r\nget wk\r\nget wmiss\r\n")
            want = b"STORED\r\nVALUE wk 0 2\r\nhi\r\nEND\r\nEND\r\n"
            got = b""
            while len(got) < len(want):
                got += c.recv(1000)
        buf, deadline = b"", time.monotonic() + 10
        w.settimeout(0.2)
        while time.monotonic() < deadline:
            if buf.endswith(b"\n") and all(e in buf for e in expect):
                break
            try:
                chunk = w.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            buf += chunk
    return [line for line in buf.split(b"\n") if line]


EXPECT = {
    "fetchers": [b"key=wk status=found", b"key=wmiss status=not_found"],
    "mutations": [b"key=wk status=stored cmd=set ttl=0"],
    "connevents": [b"type=conn_new", b"type=conn_close"],
}


@pytest.mark.parametrize("stream", ["fetchers", "mutations", "connevents"])
def test_watch_streams(pair, stream):
    mc, sc = pair
    for proc in (mc, sc):
        lines = watch(proc.port, stream, EXPECT[stream])
        for line in lines:
            assert WATCH_LINE[stream].fullmatch(line), (proc.name, line)
        text = b"\n".join(lines)
        for e in EXPECT[stream]:
            assert e in text, (proc.name, e, text)


def test_shutdown_with_A():
    sc = start_segcache("-A")
    try:
        assert talk(sc.port, b"shutdown foo\r\n") == b"CLIENT_ERROR invalid shutdown mode\r\n"
        with socket.create_connection(("127.0.0.1", sc.port), timeout=5) as s:
            s.sendall(b"shutdown\r\n")
            assert s.recv(100) == b""
        assert sc.proc.wait(15) == 0
    finally:
        sc.stop()


@pytest.mark.parametrize("mg", [False, True])
def test_a_large_dump_streams_in_order(pair, mg):
    """A dump far larger than one reply buffer comes whole, each key once, and the request
    after it in the same read is answered after its last line (memcached refuses that pipeline;
    this server keeps the order)."""
    _, sc = pair
    n = 40_000
    talk(sc.port, b"flush_all\r\n" + b"".join(b"set big:%06d 0 0 1 noreply\r\nx\r\n" % i for i in range(n)))
    cmd = b"lru_crawler mgdump all\r\n" if mg else b"lru_crawler metadump all\r\n"
    with socket.create_connection(("127.0.0.1", sc.port), timeout=20) as s:
        s.sendall(cmd + b"version\r\n")
        buf = b""
        while not buf.endswith(b"VERSION 1.6.18\r\n"):
            chunk = s.recv(1 << 16)
            assert chunk, buf[-200:]
            buf += chunk
            # A slow reader: the server waits for it rather than buffering the whole dump.
            if len(buf) < 300_000:
                time.sleep(0.001)
    body, tail = buf[: -len(b"VERSION 1.6.18\r\n")], b"VERSION 1.6.18\r\n"
    assert tail
    if mg:
        assert body.startswith(b"OK\r\n") and body.endswith(b"EN\r\n")
        keys = [line[3:] for line in body[4:-4].split(b"\r\n") if line]
    else:
        assert body.endswith(b"END\r\n")
        keys = [urllib.parse.unquote_to_bytes(m.group(1)) for m in METADUMP.finditer(body[:-5])]
        assert len(keys) == body.count(b"\n") - 1
    assert len(keys) == n
    assert sorted(keys) == [b"big:%06d" % i for i in range(n)]


def test_a_watcher_that_does_not_read_costs_bounded_memory(pair):
    """Log lines for a watcher that stopped reading are dropped (counted in
    `log_watcher_skipped`) once its queue and a reply buffer are full, as memcached's are."""
    _, sc = pair
    w = socket.socket()
    w.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    w.connect(("127.0.0.1", sc.port))
    try:
        w.sendall(b"watch fetchers\r\n")
        time.sleep(0.2)
        before = int(stat_map(talk(sc.port, b"stats\r\n"))["log_watcher_skipped"])
        # About 20 MB of log lines: far more than the watcher's queue (256 KiB), the reply
        # buffer and the socket buffers together.
        batch = b"get not-there-with-a-long-key-name\r\n" * 2000
        for _ in range(100):
            talk(sc.port, batch)
        stats = stat_map(talk(sc.port, b"stats\r\n"))
        assert int(stats["log_watcher_skipped"]) > before
        assert int(stats["log_watchers"]) == 1
    finally:
        w.close()


def test_item_size_limit_counts_what_memcached_counts(pair):
    """`-I` bounds memcached's whole item (header, CAS, key, flags, CRLF), not the value alone:
    the largest value stored depends on the key and on whether flags are set; an append or
    prepend that would outgrow it is NOT_STORED."""
    limit = 1 << 20
    script = b""
    for key, flags in ((b"k", 0), (b"k", 1), (b"kkkkkkkkkk", 0), (b"kkkkkkkkkk", 7)):
        largest = limit - (48 + 8 + 1 + 2) - len(key) - (4 if flags else 0)
        for n in (largest, largest + 1):
            script += b"set %s %d 0 %d\r\n" % (key, flags, n) + b"v" * n + b"\r\n"
            script += b"mg %s s f\r\n" % key
    script += b"set big 0 0 512000\r\n" + b"a" * 512000 + b"\r\n"
    for cmd in (b"append", b"prepend"):
        script += b"%s big 0 0 614400\r\n" % cmd + b"b" * 614400 + b"\r\n"
    script += b"append big 0 0 3\r\nabc\r\nmg big s\r\n"
    replies = [talk(p, script) for p in (pair[0].port, pair[1].port)]
    assert replies[0].count(b"STORED\r\n") >= 5 and b"HD s512003" in replies[0]
    assert replies[1] == replies[0]


def test_client_flags_are_kept_modulo_2_32(pair):
    """memcached reads flags with strtoul into 64 bits and keeps 32: 2^32+1 is stored as 1, and
    2^64 or a negative number is a bad command line (then the data line is an unknown command)."""
    script = (b"set fo 4294967297 0 1\r\nx\r\nget fo\r\nset fa 18446744073709551615 0 1\r\nx\r\nget fa\r\n"
              b"set fb 18446744073709551616 0 1\r\nx\r\nset fc -1 0 1\r\nx\r\n")
    replies = [talk(p, script) for p in (pair[0].port, pair[1].port)]
    assert b"VALUE fo 1 1\r\n" in replies[0] and b"VALUE fa 4294967295 1\r\n" in replies[0]
    assert replies[1] == replies[0]


def test_counters_move_as_memcacheds(pair):
    """gat/gats count as touches only; an incr counts as a new item (`total_items`) only when its
    result outgrows the old value; stores count whether they land or expire on arrival."""
    names = ("cmd_get", "get_hits", "get_misses", "cmd_touch", "touch_hits", "touch_misses", "total_items",
             "cmd_set", "incr_hits", "decr_hits")

    def counters(port):
        text = talk(port, b"stats\r\n").decode()
        stats = dict(line.split()[1:3] for line in text.splitlines() if line.startswith("STAT "))
        return {n: int(stats[n]) for n in names}

    steps = [b"set ctr 0 0 1\r\n9\r\n", b"incr ctr 1\r\n", b"incr ctr 5\r\n", b"decr ctr 10\r\n", b"incr ctr 1\r\n",
             b"incr ctr 100\r\n", b"append ctr 0 0 1\r\n1\r\n", b"set gone 0 -1 1\r\nx\r\n", b"gat 100 ctr\r\n",
             b"gats 100 ctr nothere\r\n", b"touch ctr 10\r\n", b"get ctr nothere\r\n", b"mg ctr v\r\n",
             b"ma ctr\r\n", b"ma ctr MD D100000\r\n"]
    for step in steps:
        deltas = []
        for port in (pair[0].port, pair[1].port):
            before = counters(port)
            talk(port, step)
            after = counters(port)
            deltas.append({n: after[n] - before[n] for n in names})
        assert deltas[1] == deltas[0], step


def test_keys_with_control_characters_and_nul(pair):
    """memcached splits a command line on spaces only, so tabs and other control characters are
    key bytes; it reads the line as a C string, so a NUL ends it early."""
    script = (b"set a\tb 0 0 1\r\nx\r\nget a\tb\r\nset c\x01d 0 0 1\r\ny\r\nget c\x01d\r\n"
              b"set e\x7ff 0 0 1\r\nz\r\nmg e\x7ff v\r\nset g\x00h 0 0 1\r\nq\r\nget g\x00h\r\nget  a\tb   c\x01d\r\n")
    replies = [talk(p, script) for p in (pair[0].port, pair[1].port)]
    assert replies[0].count(b"STORED\r\n") == 3 and b"VALUE a\tb 0 1\r\n" in replies[0]
    assert replies[1] == replies[0]


def test_metadump_reports_fetch_and_last_access(pair):
    """`fetch` is yes for an item read since it was stored and no otherwise (a store resets it);
    `la` is the Unix time of the last store or read, within the server's clock."""
    seen = []
    for proc in pair:
        talk(proc.port, b"flush_all\r\nset fa 0 0 1\r\na\r\nset fb 0 0 1\r\nb\r\nset fc 0 0 1\r\nc\r\n"
                        b"get fa\r\nget fc\r\nset fc 0 0 1\r\nC\r\n")
        now = int(stat_map(talk(proc.port, b"stats\r\n"))["time"])
        out = dump(proc.port, b"lru_crawler metadump all\r\n", b"END\r\n")
        fields = {}
        for line in out.split(b"\n")[:-2]:
            parts = dict(p.split(b"=", 1) for p in line.strip().split(b" "))
            fields[parts[b"key"]] = parts
        assert all(abs(int(f[b"la"]) - now) <= 2 for f in fields.values()), (proc.name, out)
        seen.append({k: f[b"fetch"] for k, f in fields.items()})
    assert seen[0] == {b"fa": b"yes", b"fb": b"no", b"fc": b"no"}
    assert seen[1] == seen[0]


def test_bad_base64_keys_get_memcacheds_words(pair):
    script = b"mg k2 b v\r\nmd k2 b\r\nma k2 b\r\nms k2 1 b\r\nx\r\nmg a=== b v\r\nmg !!!! b\r\n"
    replies = [talk(p, script) for p in (pair[0].port, pair[1].port)]
    assert replies[0].count(b"CLIENT_ERROR error decoding key\r\n") == 4
    assert replies[1] == replies[0]


def test_watch_logs_meta_commands_as_memcached(pair):
    """Meta commands in `watch fetchers mutations`: memcached looks the item up before an `ms`
    or `md` (an `item_get` line), then logs the store; `mg` logs its fetch. Lines compared
    without their time, id and connection."""
    script = (b"ms wm 2\r\nab\r\nmg wm v\r\nmg wmnope v\r\nms wm 1 MA\r\nc\r\nms wm2 1 q ME\r\nz\r\n"
              b"ms wm 1 ME\r\nd\r\nmd wm\r\nmd wm q\r\nmn\r\n")
    streams = []
    for proc in pair:
        with socket.create_connection(("127.0.0.1", proc.port), timeout=5) as w:
            w.sendall(b"watch fetchers mutations\r\n")
            assert w.recv(100) == b"OK\r\n"
            with socket.create_connection(("127.0.0.1", proc.port), timeout=5) as c:
                c.sendall(script)
                got = b""
                while not got.endswith(b"MN\r\n"):
                    got += c.recv(1000)
            buf, deadline = b"", time.monotonic() + 10
            w.settimeout(0.2)
            while time.monotonic() < deadline and buf.count(b"\n") < 12:
                try:
                    buf += w.recv(65536)
                except socket.timeout:
                    continue
        lines = [re.sub(rb"^ts=\S+ gid=\d+ | cfd=\d+", b"", line) for line in buf.split(b"\n") if line]
        streams.append(lines)
    assert len(streams[0]) == 12 and b"type=item_store key=wm status=stored cmd=append" in b"\n".join(streams[0])
    assert streams[1] == streams[0]


EVICTION_LINE = re.compile(rb"ts=\d+\.\d+ gid=\d+ type=eviction key=(ev\d{6}) fetch=(yes|no) ttl=-1 la=\d+ clsid=\d+ "
                           rb"size=1000")


def test_watch_evictions_names_each_evicted_item(pair):
    """`watch evictions` streams one memcached-shaped line per evicted item; every key named is
    gone, and this server reports as many as its `evictions` count grew by, less the lines its
    watchers missed (`skipped=N`)."""
    value = b"v" * 1000
    for proc in pair:
        stats = stat_map(talk(proc.port, b"stats\r\n"))
        before, skipped_before = int(stats["evictions"]), int(stats["log_watcher_skipped"])
        with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as w:
            w.sendall(b"watch evictions\r\n")
            assert w.recv(100) == b"OK\r\n"
            for chunk in range(10):
                talk(proc.port, b"".join(b"set ev%06d 0 0 1000 noreply\r\n%s\r\n" % (chunk * 10_000 + i, value)
                                         for i in range(10_000)))
            evicted = int(stat_map(talk(proc.port, b"stats\r\n"))["evictions"]) - before
            assert evicted > 0, proc.name
            buf, deadline = b"", time.monotonic() + 10
            w.settimeout(0.2)
            while time.monotonic() < deadline and buf.count(b"\n") < evicted:
                try:
                    buf += w.recv(1 << 20)
                except socket.timeout:
                    continue
        lines = [line for line in buf.split(b"\n") if line]
        assert lines, proc.name
        keys, missed = [], 0
        for line in lines:
            if m := re.fullmatch(rb"skipped=(\d+)", line):  # lines the watcher did not read in time
                missed += int(m.group(1))
                continue
            m = EVICTION_LINE.fullmatch(line)
            assert m, (proc.name, line)
            keys.append(m.group(1))
        if proc.name == "segcache-server":
            # (Other watchers of the module's server may miss lines meanwhile too.)
            skipped = int(stat_map(talk(proc.port, b"stats\r\n"))["log_watcher_skipped"]) - skipped_before
            assert len(keys) + missed <= evicted and missed <= skipped, (len(keys), evicted, skipped, missed)
            assert skipped > 0 or len(keys) == evicted, (len(keys), evicted)
        gone = talk(proc.port, b"".join(b"mg %s v\r\n" % k for k in keys[:50]))
        assert gone == b"EN\r\n" * len(keys[:50]), proc.name


def test_cache_memlimit_grows_into_the_room_laid_out_as_memcacheds_grows():
    """memcached raises its limit online; this server does up to `--max-memory-limit`, the room
    its heap was laid out with, and refuses past it. Both then hold what the new limit holds."""
    mc_port, sc_port = free_port(), free_port()
    mc = Proc("memcached", [MEMCACHED, "-p", str(mc_port), "-U", "0", "-l", "127.0.0.1", "-m", "8", "-t", "2",
                            *ROOT_USER], mc_port)
    sc = Proc("segcache-server", [str(server_binary()), "-p", str(sc_port), "-m", "8", "--max-memory-limit", "32",
                                  "-t", "2", "--no-pin", *ROOT_USER], sc_port)
    try:
        value = b"v" * 8000
        held = {}
        for name, port in (("memcached", mc_port), ("segcache", sc_port)):
            assert talk(port, b"cache_memlimit 32\r\n") == b"OK\r\n", name
            assert stat_map(talk(port, b"stats\r\n"))["limit_maxbytes"] == str(32 << 20), name
            # 24 MB of values: three times what -m 8 holds.
            stores = b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value) for i in range(3000))
            talk(port, stores)
            gets = talk(port, b"".join(b"get k%d\r\n" % i for i in range(3000)))
            held[name] = gets.count(b"VALUE ")
        assert all(n > 2500 for n in held.values()), held
        # Past the room laid out, memcached (which has none to lay out) still says OK.
        assert talk(mc_port, b"cache_memlimit 64\r\n") == b"OK\r\n"
        assert talk(sc_port, b"cache_memlimit 64\r\n") == b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
        assert talk(sc_port, b"cache_memlimit 16\r\n") == b"OK\r\n"
        assert stat_map(talk(sc_port, b"stats\r\n"))["limit_maxbytes"] == str(16 << 20)
    finally:
        mc.stop()
        assert sc.stop() == 0
