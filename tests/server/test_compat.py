"""What real clients send, compared with memcached 1.6 (the oracle) in the same test: exptime
tokens as memcached reads them, the space padding of an arithmetic result, one version for every
protocol, and the smaller differences memcached's own t/ tests show."""

import re
import socket
import struct
import time

import pytest

from conftest import start_memcached, start_segcache

# 2^31 and up wrap to negative (expired at once), 2^32 to 0 (never), 2^63-1 to -1; beyond 2^63-1
# is out of strtol's range (an error); a sign and leading zeros are read as strtol reads them.
TOKENS = ["-1", "0", "100", "2147483647", "2147483648", "4294967295", "4294967296", "4294967396",
          "9223372036854775807", "9223372036854775808", "18446744073709551615",
          "100000000000000000000", "+100", "+4294967295", "000100", "0004294967396",
          "-4294967196", "-9223372036854775808", "-9223372036854775809", "+-1", "-", "1x"]


@pytest.fixture(scope="module")
def both():
    mc = start_memcached()
    sc = start_segcache()
    yield {"memcached": mc.port, "segcache": sc.port}
    mc.stop()
    assert sc.stop() == 0


class Client:
    """One connection; `ask` sends commands followed by `mn` and returns the replies up to `MN`."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def ask(self, data: bytes) -> bytes:
        self.sock.sendall(data + b"mn\r\n")
        while not (self.buf == b"MN\r\n" or self.buf.endswith(b"\r\nMN\r\n")):
            chunk = self.sock.recv(65536)
            assert chunk, f"connection closed; partial {self.buf!r}"
            self.buf += chunk
        out, self.buf = self.buf[:-4], b""
        return out

    def binary(self, opcode: int, key: bytes = b"", extras: bytes = b"", value: bytes = b"") -> list:
        """One binary request; its responses up to the one that ends it (STAT ends with an
        empty key), as (status, key, value)."""
        body = extras + key + value
        self.sock.sendall(struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), len(extras), 0, 0,
                                      len(body), 0, 0) + body)
        out = []
        while True:
            hdr = self._exactly(24)
            _, op, klen, elen, _, status, blen, _, _ = struct.unpack(">BBHBBHIIQ", hdr)
            body = self._exactly(blen)
            k, v = body[elen:elen + klen], body[elen + klen:]
            out.append((status, k, v))
            if op != 0x10 or not k or status != 0:
                return out

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def ttl_class(reply: bytes) -> bytes:
    """A reply with each remaining TTL (`t` flag) as its class: -1 (never), up to a day (to ten
    seconds: the tests' relative TTLs, which may have ticked once), or `far` (an absolute time
    decades ahead)."""
    def cls(m):
        t = int(m.group(1))
        return b" t" + (str(t).encode() if t <= 0 else b"~%d0" % ((t + 5) // 10) if t <= 86400 else b"far")
    return re.sub(rb" t(-?[0-9]+)", cls, reply)


def compare(both, script) -> dict:
    """Runs `script(client, tag)` on both servers; returns their reply lists, asserted equal."""
    out = {}
    for name, port in both.items():
        c = Client(port)
        try:
            out[name] = script(c)
        finally:
            c.close()
    assert out["memcached"] == out["segcache"]
    return out


# --- exptime tokens -------------------------------------------------------------------------

EXPTIME_COMMANDS = {
    # name: (setup, command with {k} and {e}); each then reads the key back with its TTL
    "set": ("", "set {k} 0 {e} 1\r\nx\r\n"),
    "add": ("", "add {k} 0 {e} 1\r\nx\r\n"),
    "replace": ("set {k} 0 0 1\r\ny\r\n", "replace {k} 0 {e} 1\r\nx\r\n"),
    "append": ("set {k} 0 0 1\r\ny\r\n", "append {k} 0 {e} 1\r\nx\r\n"),
    "cas": ("", "cas {k} 0 {e} 1 999\r\nx\r\n"),
    "touch": ("set {k} 0 0 1\r\ny\r\n", "touch {k} {e}\r\n"),
    "gat": ("set {k} 0 0 1\r\ny\r\n", "gat {e} {k}\r\n"),
    "gats": ("set {k} 0 0 1\r\ny\r\n", "gats {e} {k}\r\n"),
    "ms T": ("", "ms {k} 1 T{e}\r\nx\r\n"),
    "mg T": ("set {k} 0 0 1\r\ny\r\n", "mg {k} v T{e}\r\n"),
    "mg N": ("", "mg {k} s N{e}\r\n"),
    "ma N": ("", "ma {k} N{e} J5 v\r\n"),
    "ma T": ("set {k} 0 0 1\r\n7\r\n", "ma {k} T{e} v\r\n"),
}


@pytest.mark.parametrize("cmd", list(EXPTIME_COMMANDS))
def test_exptime_tokens_as_memcached_reads_them(both, cmd):
    setup, line = EXPTIME_COMMANDS[cmd]

    def script(c: Client) -> list:
        replies = []
        for i, tok in enumerate(TOKENS):
            k = f"exp:{cmd.replace(' ', '')}:{i}"
            c.ask(f"delete {k}\r\n".encode())
            if setup:
                c.ask(setup.format(k=k).encode())
            r = re.sub(rb"^(VALUE \S+ \S+ \S+) [0-9]+", rb"\1", c.ask(line.format(k=k, e=tok).encode()))
            # mg N reports a won/stale/... flag set that depends on nothing here but the token
            kept = c.ask(f"mg {k} v t\r\n".encode())
            replies.append((tok, ttl_class(r), ttl_class(kept)))
        return replies

    compare(both, script)


def test_cas_with_large_exptime(both):
    def script(c: Client) -> list:
        out = []
        for i, tok in enumerate(TOKENS):
            k = f"expcas:{i}"
            c.ask(f"set {k} 0 0 1\r\ny\r\n".encode())
            cas = c.ask(f"mg {k} c\r\n".encode()).split(b" c")[1].strip()
            r = c.ask(f"cas {k} 0 {tok} 1 {cas.decode()}\r\nx\r\n".encode())
            out.append((tok, r, ttl_class(c.ask(f"mg {k} v t\r\n".encode()))))
        return out

    compare(both, script)


def test_django_forever_and_php_minus_one(both):
    """Django's PyLibMCCache sends timeout=0 as 4294967295; PHP sends -1 likewise: both mean
    "expired at once" to memcached."""
    def script(c: Client) -> list:
        return [c.ask(b"set rx 0 4294967295 1\r\nx\r\nget rx\r\n"),
                c.ask(b"set ry 0 4294967296 1\r\nx\r\nget ry\r\n")]

    out = compare(both, script)
    assert out["segcache"][0] == b"STORED\r\nEND\r\n"
    assert out["segcache"][1] == b"STORED\r\nVALUE ry 0 1\r\nx\r\nEND\r\n"


def test_flush_all_delay_tokens(both):
    """flush_all reads its delay as an exptime: 4294967295 is -1 (flush now)."""
    def script(c: Client) -> list:
        out = []
        for tok in ["4294967295", "4294967296", "18446744073709551615", "+0"]:
            c.ask(b"set fl 0 0 1\r\nx\r\n")
            out.append((tok, c.ask(f"flush_all {tok}\r\n".encode()), c.ask(b"get fl\r\n")))
        return out

    compare(both, script)



def delayed_flush_kept(ports: dict) -> tuple[dict, list]:
    """Sends `flush_all 2` to every server, then stores a fresh key on each every 40 ms for 3 s;
    returns the keys each server kept (after the flush came due everywhere) and the stored keys
    with the seconds after the command at which they were sent."""
    clients = {n: Client(p) for n, p in ports.items()}
    try:
        for c in clients.values():
            c.ask(b"set before 0 0 1\r\nx\r\n")
        start = time.monotonic()
        for c in clients.values():
            c.ask(b"flush_all 2\r\n")
        stored = []
        while (t := time.monotonic() - start) < 3.0:
            key = f"at{len(stored)}"
            for c in clients.values():
                assert c.ask(f"set {key} 0 0 1\r\nx\r\n".encode()) == b"STORED\r\n"
            stored.append((t, key))
            time.sleep(0.04)
        time.sleep(0.3)
        for n, c in clients.items():
            assert c.ask(b"get before\r\n") == b"END\r\n", n
        kept = {n: {k for _, k in stored if c.ask(f"get {k}\r\n".encode()) != b"END\r\n"}
                for n, c in clients.items()}
        return kept, stored
    finally:
        for c in clients.values():
            c.close()


def test_a_delayed_flush_comes_due_where_memcacheds_own_clocks_disagree(both):
    """`flush_all 2` removes what was stored well before its time and keeps what is stored well
    after, on every server. Between, memcached decides by a tick of its own once-a-second clock,
    whose phase is set by when the process started: two memcached processes started half a
    second apart disagree on some items stored there, so no server can agree with every
    memcached on them (the differential stream waits that window out)."""
    disagreed = []
    for _ in range(3):  # a loaded machine may start the second one a whole second later
        spawned = time.monotonic()
        first = start_memcached()
        time.sleep(max(0.0, spawned + 0.5 - time.monotonic()))
        second = start_memcached()
        try:
            kept, stored = delayed_flush_kept({"memcached": first.port, "memcached, started later": second.port,
                                               "segcache": both["segcache"]})
        finally:
            first.stop()
            second.stop()
        for n, keys in kept.items():
            # a flush removes a prefix of the stream: everything stored before some moment ...
            order = [k in keys for _, k in stored]
            assert order == sorted(order), (n, order)
            # ... between one and two seconds after the command, whatever the clock's phase
            assert not keys & {k for t, k in stored if t < 0.8}, n
            assert {k for t, k in stored if t > 2.3} <= keys, n
        disagreed.append(kept["memcached"] != kept["memcached, started later"])
        if disagreed[-1]:
            break
    # the floor: memcached itself is not one answer there
    assert any(disagreed)


# --- arithmetic padding ---------------------------------------------------------------------

PADDING_SCRIPTS = [
    # text decr pads in place; ma then rewrites the padded value, still padded
    ["set k17 65535 0 3\r\n510\r\n", "ma k17 N0 J13\r\n", "decr k17 18446744073709551615\r\n",
     "ma k17 N0 MI\r\n", "mg k17 k v\r\n"],
    ["set p1 0 0 3\r\n510\r\n", "ma p1 MD D505\r\n", "get p1\r\n", "ma p1 MI D10000 v\r\n", "get p1\r\n"],
    ["set p2 0 0 5\r\n60000\r\n", "decr p2 59940\r\n", "prepend p2 0 0 2\r\nZd\r\n", "get p2\r\n"],
    ["set p3 0 0 2\r\n60\r\n", "decr p3 1\r\n", "append p3 0 0 1\r\nx\r\n", "get p3\r\n"],
    ["set p4 0 0 1\r\n9\r\n", "incr p4 1\r\n", "get p4\r\n", "ma p4 MD D10 v\r\n", "get p4\r\n",
     "incr p4 123\r\n", "get p4\r\n"],
    ["ma p5 N0 J99999 v\r\n", "ma p5 MD D99990 v\r\n", "mg p5 v\r\n", "decr p5 1\r\n", "mg p5 v\r\n"],
]


@pytest.mark.parametrize("steps", PADDING_SCRIPTS, ids=[s[0].split()[1] for s in PADDING_SCRIPTS])
def test_arithmetic_padding(both, steps):
    """memcached writes an incr/decr/ma result into the item in place, padded with spaces to
    the old length, when nothing else holds the item (each step here waits for its reply), and
    append/prepend keep the padding; the server must hold the same bytes."""
    def script(c: Client) -> list:
        c.ask(f"delete {steps[0].split()[1]}\r\n".encode())
        return [re.sub(rb" c[0-9]+", b"", c.ask(s.encode())) for s in steps]

    compare(both, script)


# --- version --------------------------------------------------------------------------------

def test_one_version_for_every_protocol(both):
    def script(c: Client) -> list:
        text = c.ask(b"version\r\n").strip().split(b" ", 1)[1]
        # (memcached picks a connection's protocol from its first byte)
        b = Client(c.sock.getpeername()[1])
        [(status, _, binary)] = b.binary(0x0B)
        b.close()
        stats = dict(ln.split(b" ")[1:3] for ln in c.ask(b"stats\r\n").splitlines() if ln.startswith(b"STAT "))
        return [text, status, binary, stats[b"version"]]

    out = compare(both, script)
    text, _, binary, stat = out["segcache"]
    assert text == binary == stat


# --- smaller differences from memcached's t/ ------------------------------------------------

def detail_dump(c: Client) -> bytes:
    r = c.ask(b"stats detail dump\r\n")
    return r


def test_stats_reset_keeps_prefix_stats(both):
    """As memcached's t/stats-detail.t: `stats reset` leaves the per-prefix figures."""
    def script(c: Client) -> list:
        out = [c.ask(b"stats detail on\r\n")]
        c.ask(b"set pfx:a 0 0 1\r\nx\r\nget pfx:a\r\nget pfx:b\r\ndelete pfx:a\r\n")
        before = detail_dump(c)
        out.append(c.ask(b"stats reset\r\n"))
        after = detail_dump(c)
        out.append(before)
        out.append(after)
        out.append(c.ask(b"stats detail off\r\n"))
        return out

    out = compare(both, script)
    assert b"PREFIX pfx get 2 hit 1 set 1 del 1" in out["segcache"][2]


def test_binary_stat_detail(both):
    """As memcached's t/binary.t: STAT `detail on`, `detail dump`, `detail off` are groups."""
    def script(t: Client) -> list:
        c = Client(t.sock.getpeername()[1])
        out = []
        for group in [b"detail on", b"detail dump", b"detail off", b"detail dump", b"detail bogus"]:
            out.append([(s, k, v) for s, k, v in c.binary(0x10, key=group)])
            if group == b"detail on":
                t.ask(b"set bpx:a 0 0 1\r\nx\r\n")
        c.close()
        return out

    compare(both, script)


def test_slabs_automove_bad_argument(both):
    def script(c: Client) -> list:
        return [c.ask(f"slabs automove {a}\r\n".encode())
                for a in ["invalid", "3", "-1", "", "0", "1"]] + [c.ask(b"slabs bogus\r\n")]

    compare(both, script)


def test_get_expired_and_get_flushed_count(both):
    """A miss on an item that expired counts in `get_expired`; one on an item a delayed
    `flush_all` reached counts in `get_flushed` (memcached checks the flush first, so an item
    both expired and flushed counts as flushed)."""
    def script(c: Client) -> list:
        def figures():
            s = dict(ln.split(b" ")[1:3] for ln in c.ask(b"stats\r\n").splitlines()
                     if ln.startswith(b"STAT "))
            return [int(s[b"get_expired"]), int(s[b"get_flushed"]), int(s[b"get_misses"])]

        out = [figures()]
        # past the expiry (both clocks tick in whole seconds)
        c.ask(b"set gx1 0 1 1\r\nx\r\n")
        time.sleep(2.2)
        c.ask(b"get gx1\r\n")
        out.append(figures())
        c.ask(b"set gx2 0 1 1\r\nx\r\nset gx3 0 0 1\r\nx\r\nflush_all 1\r\n")
        time.sleep(2.2)
        c.ask(b"get gx2\r\nmg gx3 v\r\n")
        out.append(figures())
        return [[b - a for a, b in zip(x, y)] for x, y in zip(out, out[1:])]

    out = compare(both, script)
    assert out["segcache"][0][0] >= 1 and out["segcache"][1][1] >= 1, out


# --- behaviour of the newest memcached where 1.6.18 refuses the flags -----------------------

@pytest.fixture
def seg(both):
    c = Client(both["segcache"])
    yield c
    c.close()


def test_md_x_with_i_empties_the_value(both, seg):
    """memcached 1.6.18 refuses `x` (`CLIENT_ERROR invalid or duplicate flag`, checked here);
    the newest memcached (1.6.45, t/metaget.t "md x and I flags") empties the value and marks
    the item stale: the next reader sees an empty value, stale (X), and wins the recache (W).
    Tested against this server alone."""
    mc = Client(both["memcached"])
    try:
        assert mc.ask(b"set mdx1 0 0 2\r\nmz\r\nmd mdx1 x I\r\n") == \
            b"STORED\r\nCLIENT_ERROR invalid or duplicate flag\r\n"
    finally:
        mc.close()
    assert seg.ask(b"ms mdx1 2 T50\r\nmz\r\n") == b"HD\r\n"
    cas = int(seg.ask(b"mg mdx1 c\r\n").split(b" c")[1])
    assert seg.ask(b"md mdx1 x I\r\n") == b"HD\r\n"
    r = seg.ask(b"mg mdx1 v c\r\n")
    head, value = r.split(b"\r\n", 1)
    assert value == b"\r\n", r
    toks = head.split(b" ")
    assert toks[:2] == [b"VA", b"0"] and b"X" in toks and b"W" in toks, r
    assert int(toks[2][1:]) != cas  # invalidation hands out a new CAS value
    # with a CAS that does not match, nothing changes
    assert seg.ask(b"ms mdx2 2\r\nab\r\n") == b"HD\r\n"
    assert seg.ask(b"md mdx2 x I C1\r\n") == b"EX\r\n"
    assert seg.ask(b"mg mdx2 v\r\n") == b"VA 2\r\nab\r\n"


def test_mg_with_matching_cas_sends_no_value(both, seg):
    """The newest memcached (1.6.45, `proto_parser.c`) answers `mg ... v C<cas>` with `HD` when
    the CAS matches (the client holds that value), `VA` otherwise; 1.6.18 ignores `C` on mg
    (checked here). Tested against this server alone."""
    mc = Client(both["memcached"])
    try:
        assert mc.ask(b"set mgc1 0 0 3\r\nabc\r\n") == b"STORED\r\n"
        mcas = int(mc.ask(b"mg mgc1 c\r\n").split(b" c")[1])
        assert mc.ask(f"mg mgc1 v C{mcas}\r\n".encode()) == b"VA 3\r\nabc\r\n"
    finally:
        mc.close()
    assert seg.ask(b"set mgc1 0 0 3\r\nabc\r\n") == b"STORED\r\n"
    cas = int(seg.ask(b"mg mgc1 c\r\n").split(b" c")[1])
    assert seg.ask(f"mg mgc1 v C{cas} c\r\n".encode()) == f"HD c{cas}\r\n".encode()
    assert seg.ask(f"mg mgc1 v C{cas + 1}\r\n".encode()) == b"VA 3\r\nabc\r\n"
    assert seg.ask(f"mg mgc1 s k C{cas}\r\n".encode()) == b"HD s3 kmgc1\r\n"
    assert seg.ask(f"mg nosuch v C{cas}\r\n".encode()) == b"EN\r\n"
