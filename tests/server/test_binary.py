"""memcached's binary protocol: the same requests to segcache-server and to memcached 1.6
(`/usr/bin/memcached`, the oracle), responses compared field by field with only the CAS values
masked (they differ between servers; whether one is 0 is compared, and CAS semantics are
checked on each server with its own values). A small client written with `struct` here; a real
one (pylibmc in binary mode) at the end."""

from __future__ import annotations

import os
import shutil
import socket
import struct

import pytest

from diffkit import MEMCACHED, default_binary, start_memcached, start_segcache

pytestmark = pytest.mark.skipif(shutil.which(MEMCACHED) is None and not os.path.exists(MEMCACHED),
                                reason="memcached 1.6 is the oracle: not installed")

# Opcodes (memcached's protocol_binary.h).
GET, SET, ADD, REPLACE, DELETE, INCR, DECR, QUIT, FLUSH, GETQ, NOOP, VERSION = range(0x0C)
GETK, GETKQ, APPEND, PREPEND, STAT = 0x0C, 0x0D, 0x0E, 0x0F, 0x10
SETQ, ADDQ, REPLACEQ, DELETEQ, INCRQ, DECRQ, QUITQ, FLUSHQ, APPENDQ, PREPENDQ = range(0x11, 0x1B)
VERBOSITY, TOUCH, GAT, GATQ = 0x1B, 0x1C, 0x1D, 0x1E
SASL_LIST, SASL_AUTH, SASL_STEP, GATK, GATKQ = 0x20, 0x21, 0x22, 0x23, 0x24

# Statuses.
OK, ENOENT, EEXISTS, E2BIG, EINVAL, NOT_STORED, DELTA_BADVAL = range(7)
UNKNOWN = 0x81

NO_CREATE = 0xFFFFFFFF
HEADER = struct.Struct(">BBHBBHIIQ")


def packet(op, key=b"", extras=b"", value=b"", opaque=0, cas=0, magic=0x80, bodylen=None):
    body = len(key) + len(extras) + len(value) if bodylen is None else bodylen
    return HEADER.pack(magic, op, len(key), len(extras), 0, 0, body, opaque, cas) + extras + key + value


def set_extras(flags=0, exptime=0):
    return struct.pack(">II", flags, exptime)


def incr_extras(delta, initial=0, exptime=NO_CREATE):
    return struct.pack(">QQI", delta, initial, exptime)


class Resp:
    __slots__ = ("magic", "op", "status", "opaque", "cas", "extras", "key", "value")

    def __init__(self, magic, op, status, opaque, cas, extras, key, value):
        self.magic, self.op, self.status, self.opaque = magic, op, status, opaque
        self.cas, self.extras, self.key, self.value = cas, extras, key, value

    def masked(self):
        """Everything but the CAS number (only whether it is set)."""
        value = b"<version>" if self.op == VERSION and self.status == OK else self.value
        return (self.magic, self.op, self.status, self.opaque, self.cas != 0, self.extras, self.key, value)

    def __repr__(self):
        return f"Resp(op={self.op:#x} status={self.status:#x} opaque={self.opaque:#x} cas={self.cas} " \
               f"extras={self.extras!r} key={self.key!r} value={self.value[:60]!r})"


class Bin:
    """One binary-protocol connection."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError(f"closed with {self.buf!r} pending")
            self.buf += chunk

    def read(self):
        self._need(24)
        magic, op, klen, elen, _dt, status, blen, opaque, cas = HEADER.unpack(self.buf[:24])
        self._need(24 + blen)
        body, self.buf = self.buf[24:24 + blen], self.buf[24 + blen:]
        return Resp(magic, op, status, opaque, cas, body[:elen], body[elen:elen + klen], body[elen + klen:])

    def until_noop(self, opaque):
        """Responses up to and including the NOOP with this opaque."""
        out = []
        while True:
            r = self.read()
            out.append(r)
            if r.op == NOOP and r.opaque == opaque:
                return out

    def call(self, data, opaque=0xF00D):
        """Sends `data` and a NOOP; returns the responses before the NOOP's."""
        self.send(data + packet(NOOP, opaque=opaque))
        return self.until_noop(opaque)[:-1]

    def one(self, *args, **kw):
        rs = self.call(packet(*args, **kw))
        assert len(rs) == 1, rs
        return rs[0]

    def closed(self, wait=5.0):
        """True when the server closes the connection (after whatever it still sends)."""
        self.sock.settimeout(wait)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


@pytest.fixture(scope="module")
def servers():
    mc = start_memcached()
    try:
        sc = start_segcache(default_binary(), ["-t", "2"])
    except Exception:
        mc.stop()
        raise
    yield {"memcached": mc.port, "segcache": sc.port}
    assert sc.stop() == 0
    mc.stop()


@pytest.fixture
def both(servers):
    """Fresh (flushed) servers; `run(script)` calls `script(Bin)` on each and returns both results."""
    conns = []

    def connect(name):
        c = Bin(servers[name])
        conns.append(c)
        return c

    for name in servers:
        c = connect(name)
        assert c.one(FLUSH).status == OK

    def run(script):
        return {name: script(connect(name), name) for name in servers}

    yield run
    for c in conns:
        c.close()


def same(results, unpad=False):
    """Asserts that both servers answered alike (CAS numbers masked) and returns segcache's.
    `unpad`: compare values without trailing spaces (see test_random_stream_as_memcached)."""
    norm = {}

    def key(r):
        m = r.masked()
        return m[:-1] + (m[-1].rstrip(b" "),) if unpad else m

    for name, rs in results.items():
        norm[name] = [[key(r) for r in step] if isinstance(step, list) else key(step) for step in rs]
    mc, sc = norm["memcached"], norm["segcache"]
    assert len(mc) == len(sc)
    for i, (a, b) in enumerate(zip(mc, sc)):
        assert a == b, f"step {i}: memcached {results['memcached'][i]} != segcache {results['segcache'][i]}"
    return results["segcache"]


# Every opcode memcached serves, with each outcome it has: one step per entry, each followed by a
# NOOP (so quiet commands are seen to say nothing).
SCRIPT = [
    packet(GET, b"k", opaque=1),
    packet(GETK, b"k", opaque=2),
    packet(GETQ, b"k", opaque=3),
    packet(GETKQ, b"k", opaque=4),
    packet(SET, b"k", set_extras(0xDEADBEEF, 0), b"hello", opaque=5),
    packet(GET, b"k", opaque=6),
    packet(GETK, b"k", opaque=7),
    packet(GETQ, b"k", opaque=8),
    packet(GETKQ, b"k", opaque=9),
    packet(ADD, b"k", set_extras(), b"x", opaque=10),
    packet(ADD, b"a", set_extras(3), b"added", opaque=11),
    packet(ADDQ, b"a", set_extras(), b"x", opaque=12),
    packet(ADDQ, b"aq", set_extras(), b"x", opaque=13),
    packet(REPLACE, b"nope", set_extras(), b"x", opaque=14),
    packet(REPLACE, b"a", set_extras(4), b"replaced", opaque=15),
    packet(REPLACEQ, b"nope", set_extras(), b"x", opaque=16),
    packet(REPLACEQ, b"a", set_extras(5), b"r2", opaque=17),
    packet(GET, b"a", opaque=18),
    packet(SETQ, b"sq", set_extras(1), b"quiet", opaque=19),
    packet(GET, b"sq", opaque=20),
    packet(APPEND, b"k", value=b"-app", opaque=21),
    packet(PREPEND, b"k", value=b"pre-", opaque=22),
    packet(APPENDQ, b"k", value=b"!", opaque=23),
    packet(PREPENDQ, b"k", value=b"<", opaque=24),
    packet(APPEND, b"nope", value=b"x", opaque=25),
    packet(PREPEND, b"nope", value=b"x", opaque=26),
    packet(APPENDQ, b"nope", value=b"x", opaque=27),
    packet(GETK, b"k", opaque=28),
    packet(DELETE, b"a", opaque=29),
    packet(DELETE, b"a", opaque=30),
    packet(DELETEQ, b"sq", opaque=31),
    packet(DELETEQ, b"sq", opaque=32),
    packet(SET, b"n", set_extras(), b"10", opaque=33),
    packet(INCR, b"n", incr_extras(5), opaque=34),
    packet(DECR, b"n", incr_extras(3), opaque=35),
    packet(DECR, b"n", incr_extras(100), opaque=36),
    packet(INCRQ, b"n", incr_extras(7), opaque=37),
    packet(DECRQ, b"n", incr_extras(2), opaque=38),
    packet(GET, b"n", opaque=39),
    packet(INCR, b"k", incr_extras(1), opaque=40),
    packet(INCR, b"nope", incr_extras(1), opaque=41),
    packet(INCRQ, b"nope", incr_extras(1), opaque=42),
    packet(INCR, b"fresh", incr_extras(1, 42, 0), opaque=43),
    packet(DECR, b"fresh2", incr_extras(1, 7, 100), opaque=44),
    packet(INCRQ, b"fresh3", incr_extras(1, 9, 0), opaque=45),
    packet(GET, b"fresh", opaque=46),
    packet(GET, b"fresh3", opaque=47),
    packet(INCR, b"n", incr_extras(2**64 - 1), opaque=48),
    packet(SET, b"big", set_extras(), b"18446744073709551615", opaque=49),
    packet(INCR, b"big", incr_extras(1), opaque=50),
    packet(TOUCH, b"k", struct.pack(">I", 100), opaque=51),
    packet(TOUCH, b"nope", struct.pack(">I", 100), opaque=52),
    packet(GAT, b"k", struct.pack(">I", 100), opaque=53),
    packet(GATK, b"k", struct.pack(">I", 100), opaque=54),
    packet(GATQ, b"k", struct.pack(">I", 100), opaque=55),
    packet(GATKQ, b"k", struct.pack(">I", 100), opaque=56),
    packet(GAT, b"nope", struct.pack(">I", 100), opaque=57),
    packet(GATK, b"nope", struct.pack(">I", 100), opaque=58),
    packet(GATQ, b"nope", struct.pack(">I", 100), opaque=59),
    packet(GATKQ, b"nope", struct.pack(">I", 100), opaque=60),
    packet(VERSION, opaque=61),
    packet(NOOP, opaque=62),
    packet(STAT, b"reset", opaque=63),
    packet(STAT, b"bogus", opaque=64),
    packet(VERBOSITY, opaque=65),
    packet(0x50, opaque=66),
    packet(0x50, value=b"ignored body", opaque=67),
    packet(SASL_LIST, opaque=68),
    packet(SASL_AUTH, b"PLAIN", value=b"\0user\0pass", opaque=69),
    packet(SASL_STEP, b"PLAIN", value=b"more", opaque=70),
    packet(FLUSHQ, opaque=71),
    packet(GET, b"k", opaque=72),
    packet(SET, b"k", set_extras(), b"v", opaque=73),
    packet(FLUSH, extras=struct.pack(">I", 0), opaque=74),
    packet(GET, b"k", opaque=75),
    # A key with bytes the text protocol does not allow: binary keys are any bytes.
    packet(SET, b"sp ace\x01", set_extras(9), b"v", opaque=76),
    packet(GETK, b"sp ace\x01", opaque=77),
    # An expiry in the past: expired on arrival.
    packet(SET, b"old", set_extras(0, 1_000_000_000), b"v", opaque=78),
    packet(GET, b"old", opaque=79),
    # An append whose result would be over -I (1m on both): NOT_STORED, the item unchanged.
    packet(SET, b"half", set_extras(), b"h" * (700 << 10), opaque=83),
    packet(APPEND, b"half", value=b"h" * (700 << 10), opaque=84),
    packet(PREPENDQ, b"half", value=b"h" * (700 << 10), opaque=85),
    packet(DELETE, b"half", opaque=86),
    packet(SET, b"e", set_extras(0, 0), b"v", opaque=80),
    packet(TOUCH, b"e", struct.pack(">I", 1_000_000_000), opaque=81),
    packet(GET, b"e", opaque=82),
]


def test_every_opcode_as_memcached(both):
    res = same(both(lambda c, _: [c.call(p) for p in SCRIPT]))
    by_opaque = {r.opaque: r for step in res for r in step}
    # A few of the answers, spelled out.
    assert by_opaque[1].status == ENOENT and by_opaque[1].value == b"Not found"
    assert by_opaque[2].status == ENOENT and by_opaque[2].key == b"k" and by_opaque[2].value == b""
    assert 3 not in by_opaque and 4 not in by_opaque  # quiet misses say nothing
    assert by_opaque[6].extras == struct.pack(">I", 0xDEADBEEF) and by_opaque[6].value == b"hello"
    assert by_opaque[6].cas == by_opaque[5].cas != 0
    assert by_opaque[8].value == b"hello" and by_opaque[9].key == b"k"  # quiet hits are sent
    assert by_opaque[10].status == EEXISTS and by_opaque[14].status == ENOENT
    assert 12 in by_opaque and 13 not in by_opaque  # a quiet failure is sent, a quiet success not
    assert by_opaque[25].status == NOT_STORED
    assert by_opaque[28].value == b"<pre-hello-app!"
    assert by_opaque[36].value == struct.pack(">Q", 0)
    assert by_opaque[39].value.rstrip() == b"5"  # memcached pads a shrunk number in place; so do we
    assert by_opaque[40].status == DELTA_BADVAL
    assert by_opaque[43].value == struct.pack(">Q", 42) and by_opaque[46].value == b"42"
    assert by_opaque[50].value == struct.pack(">Q", 0)  # wraps at 2^64
    assert by_opaque[51].extras == struct.pack(">I", 0xDEADBEEF) and by_opaque[51].value == b""
    assert by_opaque[65].status == UNKNOWN and by_opaque[65].value == b"Unknown command"
    assert by_opaque[69].status == UNKNOWN  # no SASL, as memcached without -S
    assert by_opaque[75].status == ENOENT
    assert by_opaque[79].status == ENOENT and by_opaque[82].status == ENOENT
    assert by_opaque[84].status == NOT_STORED and by_opaque[85].status == NOT_STORED


def test_cas_semantics(both):
    def script(c, _):
        out = []
        r = c.one(SET, b"c", set_extras(), b"v1")
        c1 = r.cas
        assert c1 != 0
        assert c.one(GET, b"c").cas == c1
        out.append(c.one(SET, b"c", set_extras(), b"v2", cas=c1 + 12345))  # stale: EEXISTS
        r = c.one(SET, b"c", set_extras(), b"v2", cas=c1)  # matches
        out.append(r)
        c2 = r.cas
        assert c2 not in (0, c1)
        out.append(c.one(REPLACE, b"c", set_extras(), b"v3", cas=c1))  # stale now
        out.append(c.one(ADD, b"c", set_extras(), b"v3", cas=c2))  # add with a CAS is a cas
        c3 = out[-1].cas
        out.append(c.one(SET, b"missing", set_extras(), b"v", cas=c3))  # ENOENT
        out.append(c.one(APPEND, b"c", value=b"+", cas=c1))  # EEXISTS
        out.append(c.one(APPEND, b"c", value=b"+", cas=c3))
        c4 = out[-1].cas
        out.append(c.one(APPEND, b"missing", value=b"+", cas=c4))  # NOT_STORED
        out.append(c.one(GET, b"c"))
        out.append(c.one(DELETE, b"c", cas=c1))  # EEXISTS
        out.append(c.one(GET, b"c"))
        out.append(c.one(SET, b"num", set_extras(), b"1"))
        c5 = out[-1].cas
        out.append(c.one(INCR, b"num", incr_extras(1), cas=c5 + 999))  # EEXISTS
        out.append(c.one(INCR, b"num", incr_extras(1), cas=c5))
        assert out[-1].cas not in (0, c5)
        assert c.one(GET, b"num").cas == out[-1].cas
        out.append(c.one(DELETE, b"c", cas=c4))
        out.append(c.one(GET, b"c"))
        return out

    res = same(both(script))
    statuses = [r.status for r in res]
    assert statuses == [EEXISTS, OK, EEXISTS, OK, ENOENT, EEXISTS, OK, NOT_STORED, OK, EEXISTS, OK, OK, EEXISTS,
                        OK, OK, ENOENT]
    assert res[8].value == b"v3+"


def test_quiet_gets_batch_until_noop(both):
    keys = [f"q{i}".encode() for i in range(20)]

    def script(c, _):
        c.call(b"".join(packet(SETQ, k, set_extras(i), b"v" * i) for i, k in enumerate(keys) if i % 3 == 0))
        batch = b"".join(packet(GETKQ if i % 2 else GETQ, k, opaque=1000 + i) for i, k in enumerate(keys))
        return [c.call(batch, opaque=0xABCD)]

    [rs] = same(both(script))
    assert [r.opaque for r in rs] == [1000 + i for i in range(20) if i % 3 == 0]
    assert all(r.status == OK for r in rs)


def test_opaque_is_echoed(both):
    def script(c, _):
        out = []
        for p in [packet(SET, b"o", set_extras(), b"v", opaque=0xFFFFFFFF),
                  packet(GET, b"o", opaque=0x80000000),
                  packet(GET, b"missing", opaque=0x12345678),
                  packet(INCR, b"o", incr_extras(1), opaque=0x01020304),
                  packet(0x42, opaque=0xCAFEBABE)]:
            out.append(c.call(p)[0])
        return out

    res = same(both(script))
    assert [r.opaque for r in res] == [0xFFFFFFFF, 0x80000000, 0x12345678, 0x01020304, 0xCAFEBABE]


def test_too_large_is_refused_and_swallowed(both):
    big = b"x" * (2 << 20)  # over -I 1m on both

    def script(c, _):
        out = [c.one(SET, b"tl", set_extras(), b"old")]
        out.append(c.call(packet(SET, b"tl", set_extras(), big, opaque=7)))
        out.append(c.call(packet(GET, b"tl")))  # a refused set removes the old value
        out.append(c.call(packet(APPENDQ, b"tl", value=big, opaque=8)))
        out.append(c.call(packet(ADD, b"tl", set_extras(), big) + packet(GET, b"tl")))
        return out

    res = same(both(script))
    assert res[1][0].status == E2BIG and res[1][0].value == b"Too large." and res[1][0].opaque == 7
    assert res[2][0].status == ENOENT


def test_too_large_is_answered_once_the_value_is_swallowed(servers):
    # As memcached: the refusal waits for the value, which is dropped as it arrives (the server
    # never buffers the 64 MiB); test_framing.py checks the timing against memcached.
    c = Bin(servers["segcache"])
    try:
        value_len = 64 << 20
        head = packet(SET, b"huge", set_extras(), bodylen=8 + 4 + value_len)
        c.send(head)
        chunk = b"y" * (1 << 20)
        for _ in range(64):
            c.send(chunk)
        r = c.read()
        assert (r.status, r.value) == (E2BIG, b"Too large.")
        assert c.one(NOOP).status == OK  # swallowed exactly: in sync again
    finally:
        c.close()


def test_protocol_errors_close_as_memcached(both):
    cases = {
        "get with extras": packet(GET, b"k", extras=b"1234"),
        "key over 250 bytes": packet(GET, b"x" * 251),
        "key longer than the body": packet(GET, b"abc", bodylen=1),
        "noop with a body": packet(NOOP, value=b"x"),
        "incr without its extras": packet(INCR, b"k"),
        "sasl list with a body": packet(SASL_LIST, value=b"x"),
    }
    for name, p in cases.items():
        def script(c, _):
            c.send(packet(NOOP, opaque=1) + p + packet(NOOP, opaque=2))
            rs = [c.read(), c.read()]
            return [rs, [Resp(0, 0, int(c.closed()), 0, 0, b"", b"", b"")]]

        res = same(both(script))
        assert res[1][0].status == 1, f"{name}: not closed"
        assert res[0][1].status in (EINVAL, UNKNOWN), name


def test_bad_magic_and_garbage_close_without_reply(both):
    def script(c, _):
        # A valid NOOP, then 30 bytes that are no binary header: the NOOP is answered, the rest
        # closes the connection without a word.
        c.send(packet(NOOP, opaque=5) + b"get foo\r\nGARBAGE GARBAGE GARBAGE")
        r = c.read()
        closed = c.closed()
        return [r, Resp(0, 0, int(closed), 0, 0, b"", b"", c.buf)]

    res = same(both(script))
    assert res[0].op == NOOP and res[1].status == 1 and res[1].value == b""

    def response_magic(c, _):
        c.send(packet(NOOP, opaque=1) + packet(NOOP, magic=0x81))
        r = c.read()
        return [r, Resp(0, 0, int(c.closed()), 0, 0, b"", b"", c.buf)]

    res = same(both(response_magic))
    assert res[1].status == 1


def test_quit_and_quitq(both):
    def script(c, name):
        port = c.sock.getpeername()[1]
        c.send(packet(SETQ, b"qq", set_extras(), b"v") + packet(QUIT, opaque=3) + packet(NOOP))
        r = c.read()
        closed_after_quit = c.closed()
        c2 = Bin(port)
        c2.send(packet(QUITQ) + packet(NOOP))
        closed_after_quitq = c2.closed()
        buf = c2.buf
        c2.close()
        return [r, Resp(0, 0, int(closed_after_quit), 0, 0, b"", b"", c.buf),
                Resp(0, 0, int(closed_after_quitq), 0, 0, b"", b"", buf)]

    res = same(both(script))
    assert res[0].op == QUIT and res[0].opaque == 3
    assert res[1].status == 1 and res[1].value == b""
    assert res[2].status == 1 and res[2].value == b""


def stat_packets(c, group=b""):
    c.send(packet(STAT, group, opaque=77))
    out = []
    while True:
        r = c.read()
        assert (r.op, r.status, r.opaque) == (STAT, OK, 77)
        if not r.key:
            assert r.value == b""
            return out
        out.append((r.key.decode(), r.value.decode()))


def text_stats(port, group=""):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"stats {group}\r\n".encode())
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    rows = [line.split(" ", 2) for line in buf.decode().split("\r\n") if line.startswith("STAT ")]
    return {k: v for _, k, v in rows}


def test_stat_groups_are_the_text_protocols(servers):
    sc = servers["segcache"]
    c = Bin(sc)
    try:
        settings = stat_packets(c, b"settings")
        assert dict(settings) == text_stats(sc, "settings")
        names = [k for k, _ in settings]
        for name in ("maxbytes", "maxconns", "tcpport", "item_size_max"):
            assert name in names
        general = dict(stat_packets(c))
        for name in ("pid", "uptime", "version", "curr_connections", "cmd_get", "get_hits", "curr_items"):
            assert name in general
        assert dict(stat_packets(c, b"items")).keys() == text_stats(sc, "items").keys()
    finally:
        c.close()
    # memcached answers the same groups the same way (names it has in common).
    m = Bin(servers["memcached"])
    try:
        mc_settings = dict(stat_packets(m, b"settings"))
        for name in ("maxbytes", "maxconns", "tcpport", "item_size_max"):
            assert name in mc_settings
    finally:
        m.close()


def test_counters_are_the_text_protocols(servers):
    port = servers["segcache"]
    before = text_stats(port)
    c = Bin(port)
    try:
        c.call(packet(SET, b"cnt", set_extras(), b"1") + packet(GET, b"cnt") + packet(GETQ, b"cnt-miss")
               + packet(GETK, b"cnt-miss") + packet(INCR, b"cnt", incr_extras(2)) + packet(DELETE, b"cnt")
               + packet(DELETE, b"cnt") + packet(TOUCH, b"cnt", struct.pack(">I", 5)))
    finally:
        c.close()
    after = text_stats(port)

    def delta(name):
        return int(after[name]) - int(before[name])

    assert delta("cmd_set") == 1
    assert (delta("cmd_get"), delta("get_hits"), delta("get_misses")) == (3, 1, 2)
    assert (delta("incr_hits"), delta("delete_hits"), delta("delete_misses")) == (1, 1, 1)
    assert (delta("cmd_touch"), delta("touch_misses")) == (1, 1)


def test_text_and_binary_connections_at_once(servers):
    port = servers["segcache"]
    b = Bin(port)
    t = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        assert b.one(SET, b"mixed", set_extras(17), b"from-binary").status == OK
        t.sendall(b"get mixed\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += t.recv(4096)
        assert buf == b"VALUE mixed 17 11\r\nfrom-binary\r\nEND\r\n"
        t.sendall(b"set mixed2 5 0 9\r\nfrom-text\r\n")
        assert t.recv(100) == b"STORED\r\n"
        r = b.one(GETK, b"mixed2")
        assert (r.status, r.extras, r.key, r.value) == (OK, struct.pack(">I", 5), b"mixed2", b"from-text")
        # The text connection stays text, the binary one binary.
        t.sendall(b"version\r\n")
        assert t.recv(100).startswith(b"VERSION ")
        assert b.one(VERSION).status == OK
    finally:
        b.close()
        t.close()


def test_a_text_connection_stays_text(servers):
    # The first byte chose text: a binary request later is read as text, as memcached does (its
    # 0x0a ends a line; a NUL ends the next one early), and the connection goes on.
    replies = {}
    for name in ("memcached", "segcache"):
        with socket.create_connection(("127.0.0.1", servers[name]), timeout=10) as t:
            t.sendall(b"version\r\n" + packet(NOOP) + b"\r\nversion\r\n")
            buf = b""
            while buf.count(b"VERSION ") < 2:
                chunk = t.recv(4096)
                assert chunk, buf
                buf += chunk
        replies[name] = buf.split(b"\r\n")[1:-2]
    assert replies["memcached"] == [b"ERROR", b"ERROR"]
    assert replies["segcache"] == replies["memcached"]


def test_pipelined_output_past_the_high_water_mark(servers):
    """400 gets of a 100 KiB value sent at once (40 MiB of responses, far over the 256 KiB
    output high-water mark): the server pauses and resumes, every response comes, in order."""
    c = Bin(servers["segcache"])
    try:
        value = bytes(range(256)) * 400
        assert c.one(SET, b"hw", set_extras(5), value).status == OK
        n = 400
        c.send(b"".join(packet(GETQ if i % 2 else GET, b"hw", opaque=i) for i in range(n)) + packet(NOOP, opaque=n))
        rs = c.until_noop(n)
        assert [r.opaque for r in rs] == list(range(n + 1))
        assert all(r.value == value for r in rs[:-1])
    finally:
        c.close()


def test_requests_split_anywhere(servers):
    """A pipeline sent a few bytes at a time gets the same responses as sent whole."""
    port = servers["segcache"]
    stream = b"".join([
        packet(SET, b"split", set_extras(1), b"v" * 300, opaque=1),
        packet(GETK, b"split", opaque=2),
        packet(TOUCH, b"split", struct.pack(">I", 0), value=b"trailing", opaque=3),
        packet(0x60, value=b"unknown body", opaque=4),
        packet(SET, b"split-big", set_extras(), b"z" * (1100 << 10), opaque=5),
        packet(INCR, b"nope", incr_extras(1, 5, 0), opaque=6),
        packet(STAT, b"reset", opaque=7),
        packet(NOOP, opaque=8),
    ])
    whole = Bin(port)
    whole.send(stream)
    expected = [r.masked() for r in whole.until_noop(8)]
    whole.one(DELETE, b"nope")
    whole.close()
    for step in (1, 7, 100, 4096):
        c = Bin(port)
        try:
            for i in range(0, len(stream), step):
                c.send(stream[i:i + step])
                if step < 100 and i > 2000:
                    # The large value goes faster once the small requests were split finely.
                    c.send(stream[i + step:])
                    break
            got = [r.masked() for r in c.until_noop(8)]
            assert got == expected, f"split every {step} bytes"
            assert c.one(DELETE, b"nope").status == OK
        finally:
            c.close()


def test_pylibmc_binary_mode_sees_what_memcached_gives(servers):
    """A real binary client (libmemcached, as php-memcached's binary mode uses it): what the user
    sees, results and exceptions, is the same on both servers."""
    pylibmc = pytest.importorskip("pylibmc")
    seen = {}
    for name, port in servers.items():
        c = pylibmc.Client([f"127.0.0.1:{port}"], binary=True, behaviors={"tcp_nodelay": True, "cas": True})
        log = []

        def do(f, *args):
            try:
                log.append(f(*args))
            except pylibmc.Error as e:
                log.append(type(e).__name__)

        try:
            c.flush_all()
            do(c.set, "a", "1")
            do(c.get, "a")
            do(c.add, "a", "2")
            do(c.add, "b", b"bytes")
            do(c.replace, "nope", "x")
            do(c.append, "b", b"+end")
            do(c.prepend, "b", b"start+")
            do(c.get, "b")
            do(c.append, "nope", b"x")
            do(c.incr, "a", 5)
            do(c.decr, "a", 2)
            do(c.get, "a")
            do(lambda: sorted(c.get_multi(["a", "b", "missing"]).items()))
            do(c.set_multi, {"m1": 1, "m2": [1, 2, 3], "m3": {"x": "y"}})
            do(lambda: sorted(c.get_multi(["m1", "m2", "m3"]).items(), key=str))
            do(c.delete, "a")
            do(c.delete, "a")
            do(c.get, "a")
            do(c.incr, "a", 1)
            # (No touch: libmemcached's binary touch waits 5 s for a reply on either server.)
            do(c.delete_multi, ["m1", "m2", "nope"])
            value, cas = c.gets("b")
            log.append(value)
            do(c.cas, "b", b"new", cas)
            do(c.cas, "b", b"newer", cas)
            do(c.get, "b")
            do(c.incr, "b", 1)
            do(c.set, "big", b"x" * (2 << 20))
            do(c.get, "big")
            do(lambda: "pid" in c.get_stats()[0][1])
            seen[name] = log
        finally:
            c.disconnect_all()
    assert seen["segcache"] == seen["memcached"]
    assert seen["segcache"][7] == b"start+bytes+end"


RANDOM_OPS = [SET, ADD, REPLACE, APPEND, PREPEND, DELETE, INCR, DECR, GET, GETK, GETQ, GETKQ, TOUCH, GAT, GATK,
              SETQ, ADDQ, REPLACEQ, APPENDQ, PREPENDQ, DELETEQ, INCRQ, DECRQ, GATQ, GATKQ]


def random_batches(seed, n=60):
    """Batches of request specs: (opcode, key, CAS mode, value, flags, exptime, delta, incr's
    expiration)."""
    import random

    rng = random.Random(seed)
    # Counters (incr/decr) and strings (append/prepend) have keys of their own, both taking
    # every other command: a padded incr result appended to would differ (see the test).
    counters, strings = [f"n{i}".encode() for i in range(4)], [f"s{i}".encode() for i in range(4)]
    batches = []
    for _ in range(n):
        batch = []
        for _ in range(rng.randrange(1, 40)):
            op = rng.choice(RANDOM_OPS)
            if op in (INCR, DECR, INCRQ, DECRQ):
                key = rng.choice(counters)
            elif op in (APPEND, PREPEND, APPENDQ, PREPENDQ):
                key = rng.choice(strings)
            else:
                key = rng.choice(counters + strings)
            batch.append((op, key, rng.choice(["none", "none", "current", "stale"]),
                          rng.choice([b"1", b"42", b"abc", b"", b"9" * 5]), rng.randrange(4),
                          rng.choice([0, 0, 1000]), rng.choice([1, 5, 100]), rng.choice([0, 7, NO_CREATE])))
        batches.append(batch)
    return batches


def render(spec, cas_of, opaque):
    """One spec as a packet, with this server's CAS values (`cas_of`: the last seen per key)."""
    op, key, cas_mode, value, flags, exptime, delta, initial_exp = spec
    current = cas_of.get(key, 0)
    # (Stale: far from any CAS either server hands out in this stream; memcached's next one is
    # current + 1, which a quiet store in the same batch may have taken.)
    cas = {"none": 0, "current": current, "stale": current + 1_000_000_007}[cas_mode]
    if op in (SET, ADD, REPLACE, SETQ, ADDQ, REPLACEQ):
        return packet(op, key, set_extras(flags, exptime), value, opaque=opaque, cas=cas)
    if op in (APPEND, PREPEND, APPENDQ, PREPENDQ):
        return packet(op, key, value=value, opaque=opaque, cas=cas)
    if op in (INCR, DECR, INCRQ, DECRQ):
        return packet(op, key, incr_extras(delta, 3, initial_exp), opaque=opaque, cas=cas)
    if op in (TOUCH, GAT, GATK, GATQ, GATKQ):
        return packet(op, key, struct.pack(">I", exptime), opaque=opaque)
    if op in (DELETE, DELETEQ):
        return packet(op, key, opaque=opaque, cas=cas)
    return packet(op, key, opaque=opaque)


def run_batches(c, batches):
    cas_of, out = {}, []
    for batch in batches:
        data = b"".join(render(spec, cas_of, i) for i, spec in enumerate(batch))
        rs = c.call(data, opaque=0xFFFF)
        for r in rs:
            if r.cas and r.status == OK:
                cas_of[batch[r.opaque][1]] = r.cas
        out.append(rs)
    return out


def test_random_stream_as_memcached(both):
    """A random pipelined stream over a few keys (every storage, retrieval, arithmetic and
    delete opcode, quiet forms, CAS none/current/stale), the same on both servers, responses
    compared in batches ending with a NOOP. Each server's own CAS values are sent back to it
    (SEGCACHE_DIFF_SEED picks another stream).

    Values are compared without trailing spaces: an incr/decr whose result is shorter than the
    old value is written in place and space padded by memcached only while nothing else holds
    the item, and a GET's response waiting in the same pipeline does (memcached then writes a
    new, unpadded item); this server always pads. The stream's values hold no spaces."""
    batches = random_batches(int(os.environ.get("SEGCACHE_DIFF_SEED", "20261124")))
    res = same(both(lambda c, _: run_batches(c, batches)), unpad=True)
    assert sum(len(rs) for rs in res) > 500
