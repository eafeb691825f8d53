"""Items larger than a segment (`-I` above 4 MiB, up to memcached's 1 GiB): stored, read,
replaced and deleted through the text, meta and binary protocols, with the replies compared to
memcached's, as are the replies to a value over `-I`. The engine stores such an item as chunks;
a client sees one item."""

import os
import socket
import struct

import pytest

import diffkit
from conftest import as_user, free_port, server_binary

ITEM_MAX = "32m"
MEMORY_MB = "1024"


def pattern(version: int, n: int) -> bytes:
    """`n` bytes that tell one version, and one offset, from another."""
    block = bytes((i * 31 + version * 97) % 251 for i in range(4093))
    return (block * (n // len(block) + 1))[:n]


@pytest.fixture(scope="module")
def pair():
    port = free_port()
    argv = [diffkit.MEMCACHED, "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", MEMORY_MB, "-I", ITEM_MAX,
            "-t", "2", "-o", "no_lru_maintainer"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    mc = diffkit.Proc("memcached", argv, port)
    port = free_port()
    argv = [str(server_binary()), "-p", str(port), "-m", MEMORY_MB, "-I", ITEM_MAX, "-t", "2", "--no-pin",
            *as_user([])]
    sc = diffkit.Proc("segcache-server", argv, port)
    yield mc, sc
    mc.stop()
    assert sc.stop() == 0


class Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data: bytes):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError(f"closed; partial {self.buf[:100]!r}")
        self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def get_reply(self) -> list:
        """A text `get`/`gets` reply: the lines, with each value read whole."""
        out = []
        while True:
            line = self.line()
            out.append(line)
            if not line.startswith(b"VALUE "):
                return out
            n = int(line.split()[3])
            out.append(self.exactly(n + 2))

    def meta_reply(self) -> list:
        line = self.line()
        if line.startswith(b"VA "):
            n = int(line.split()[1])
            return [line, self.exactly(n + 2)]
        return [line]


def both(pair, script):
    """Runs `script(conn)` against memcached and the server; asserts the two transcripts match."""
    got = []
    for proc in pair:
        c = Conn(proc.port)
        try:
            got.append(script(c))
        finally:
            c.close()
    mc, sc = got
    if len(mc) != len(sc):
        short = [[line if len(line) < 100 else len(line) for line in t] for t in got]
        pytest.fail(f"memcached: {short[0]}\nsegcache-server: {short[1]}")
    for i, (a, b) in enumerate(zip(mc, sc)):
        if a != b:
            show = (a[:120], b[:120]) if len(a) > 240 or len(b) > 240 else (a, b)
            pytest.fail(f"reply {i} differs (memcached, segcache-server): {show!r}, lengths {len(a)}, {len(b)}")


def strip_cas(lines: list) -> list:
    """`gets` replies with the CAS value left out (each server numbers its own)."""
    return [b" ".join(l.split()[:4]) if l.startswith(b"VALUE ") else l for l in lines]


@pytest.mark.parametrize("size", [5 << 20, 20 << 20, (32 << 20) - 1024])
def test_text_set_get_replace_delete(pair, size):
    key = f"large-{size}".encode()

    def script(c: Conn):
        out = []
        for version, n in [(1, size), (2, size - 12345), (3, 100)]:
            value = pattern(version, n)
            c.send(b"set %s %d 0 %d\r\n%s\r\n" % (key, version, len(value), value))
            out.append(c.line())
            c.send(b"get %s\r\n" % key)
            out += c.get_reply()
        c.send(b"set %s 7 0 %d\r\n%s\r\n" % (key, size, pattern(4, size)))
        out.append(c.line())
        # One hit per request: a multi-get's reply is bounded by --max-reply-size (at least -I
        # and 1k), which memcached does not bound.
        c.send(b"gets other-missing %s\r\n" % key)
        out += strip_cas(c.get_reply())
        c.send(b"append %s 0 0 5\r\nhello\r\n" % key)
        out.append(c.line())
        c.send(b"get %s\r\n" % key)
        out += c.get_reply()
        c.send(b"delete %s\r\n" % key)
        out.append(c.line())
        c.send(b"get %s\r\n" % key)
        out += c.get_reply()
        return out

    both(pair, script)


def test_cas_on_a_large_item(pair):
    def script(c: Conn):
        out = []
        value = pattern(5, 6 << 20)
        c.send(b"set casbig 0 0 %d\r\n%s\r\n" % (len(value), value))
        out.append(c.line())
        c.send(b"gets casbig\r\n")
        reply = c.get_reply()
        cas = int(reply[0].split()[4])
        out += strip_cas(reply)
        other = pattern(6, 7 << 20)
        c.send(b"cas casbig 0 0 %d %d\r\n%s\r\n" % (len(other), cas + 1000, other))
        out.append(c.line())
        c.send(b"cas casbig 3 0 %d %d\r\n%s\r\n" % (len(other), cas, other))
        out.append(c.line())
        c.send(b"get casbig\r\n")
        out += c.get_reply()
        c.send(b"add casbig 0 0 %d\r\n%s\r\n" % (len(other), other))
        out.append(c.line())
        c.send(b"touch casbig 100\r\n")
        out.append(c.line())
        c.send(b"get casbig\r\n")
        out += c.get_reply()
        return out

    both(pair, script)


def test_meta_commands_on_a_large_item(pair):
    def script(c: Conn):
        out = []
        value = pattern(8, 9 << 20)
        c.send(b"ms metabig %d T0 F5\r\n%s\r\n" % (len(value), value))
        out += c.meta_reply()
        c.send(b"mg metabig v f s\r\n")
        out += c.meta_reply()
        c.send(b"mg metabig s k\r\n")
        out += c.meta_reply()
        c.send(b"md metabig\r\n")
        out += c.meta_reply()
        c.send(b"mg metabig v\r\n")
        out += c.meta_reply()
        return out

    both(pair, script)


def test_values_over_the_item_size_are_refused_alike(pair):
    def script(c: Conn):
        out = []
        over = pattern(9, 33 << 20)
        c.send(b"set over 0 0 %d\r\n%s\r\n" % (len(over), over))
        out.append(c.line())
        c.send(b"get over\r\n")
        out += c.get_reply()
        c.send(b"ms over %d\r\n%s\r\n" % (len(over), over))
        out += c.meta_reply()
        c.send(b"version\r\n")
        out.append(c.line().split()[0])
        return out

    both(pair, script)


def binary_request(opcode: int, key: bytes = b"", value: bytes = b"", extras: bytes = b"", cas: int = 0) -> bytes:
    header = struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), len(extras), 0, 0,
                         len(extras) + len(key) + len(value), 0, cas)
    return header + extras + key + value


def binary_reply(c: Conn) -> tuple:
    header = c.exactly(24)
    _, opcode, key_len, extras_len, _, status, body_len, _, _ = struct.unpack(">BBHBBHIIQ", header)
    body = c.exactly(body_len)
    return opcode, status, body[extras_len + key_len:]


def test_binary_set_and_get_of_a_large_item(pair):
    def script(c: Conn):
        out = []
        value = pattern(10, 12 << 20)
        c.send(binary_request(0x01, b"binbig", value, struct.pack(">II", 9, 0)))
        out.append(binary_reply(c)[:2])
        c.send(binary_request(0x00, b"binbig"))
        out.append(binary_reply(c))
        over = pattern(11, 33 << 20)
        c.send(binary_request(0x01, b"binover", over, struct.pack(">II", 0, 0)))
        out.append(binary_reply(c)[:2])
        c.send(binary_request(0x00, b"binover"))
        out.append(binary_reply(c)[:2])
        return out

    both(pair, script)


def item_counts(c: Conn) -> tuple:
    """`curr_items` and `total_items` from `stats`."""
    c.send(b"stats\r\n")
    counts = {}
    while (line := c.line()) != b"END":
        _, name, value = line.split(b" ", 2)
        counts[name] = value
    return int(counts[b"curr_items"]), int(counts[b"total_items"])


def test_a_large_item_counts_as_one_item(pair):
    """`curr_items` and `total_items` move as memcached's: a large item is one item, however
    many chunks the engine stores it as."""

    def script(c: Conn):
        curr, total = item_counts(c)
        out = []
        for key, version, n in [(b"count-a", 1, 6 << 20), (b"count-a", 2, 5 << 20), (b"count-b", 3, 7 << 20)]:
            value = pattern(version, n)
            c.send(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
            out.append(c.line())
            now = item_counts(c)
            out.append((now[0] - curr, now[1] - total))
        c.send(b"delete count-a\r\n")
        out.append(c.line())
        now = item_counts(c)
        out.append((now[0] - curr, now[1] - total))
        c.send(b"delete count-b\r\n")
        out.append(c.line())
        return out

    both(pair, script)


@pytest.fixture(scope="module")
def small_reply_pair():
    """memcached and the server with `-I 8m`, the server's replies bounded at 9 MiB."""
    port = free_port()
    argv = [diffkit.MEMCACHED, "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "256", "-I", "8m",
            "-t", "2", "-o", "no_lru_maintainer"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    mc = diffkit.Proc("memcached", argv, port)
    port = free_port()
    argv = [str(server_binary()), "-p", str(port), "-m", "256", "-I", "8m", "--max-reply-size", "9m", "-t", "2",
            "--no-pin", *as_user([])]
    sc = diffkit.Proc("segcache-server", argv, port)
    yield mc, sc
    mc.stop()
    assert sc.stop() == 0


def test_a_multiget_of_large_values_past_the_reply_bound_comes_whole(small_reply_pair):
    """Three values of 3 MiB (9 MiB and more with their headers) in one `get`, `gets` or `gat`,
    an `mg` pipeline and a binary GETKQ pipeline: every value whole, as memcached streams them."""
    keys = [b"stream-%d" % i for i in range(3)]

    def script(c: Conn):
        out = []
        for i, key in enumerate(keys):
            value = pattern(20 + i, 3 << 20)
            c.send(b"set %s %d 0 %d\r\n%s\r\n" % (key, i, len(value), value))
            out.append(c.line())
        c.send(b"get %s missing %s\r\nversion\r\n" % (b" ".join(keys), b" ".join(reversed(keys))))
        out += c.get_reply()
        out.append(c.line().split()[0])
        c.send(b"gets %s\r\n" % b" ".join(keys))
        out += strip_cas(c.get_reply())
        c.send(b"gat 0 %s\r\n" % b" ".join(keys))
        out += c.get_reply()
        c.send(b"".join(b"mg %s v f k\r\n" % key for key in keys) + b"mn\r\n")
        for _ in keys:
            out += c.meta_reply()
        out.append(c.line())
        return out

    def binary_script(c: Conn):
        c.send(b"".join(binary_request(0x0D, key) for key in keys) + binary_request(0x0A))
        return [binary_reply(c) for _ in range(len(keys) + 1)]

    both(small_reply_pair, script)
    both(small_reply_pair, binary_script)
