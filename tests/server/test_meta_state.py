"""The item state behind the meta protocol, against memcached 1.6 on fresh servers: stale-while-
revalidate (`md I`, then one client wins `W` and the others see `Z`, all `X`), vivify on miss
(`mg N`: one `W`, the others `Z`), `ms I` (a recache that lost to a newer invalidation), `h`, `l`
and `me`'s `fetch`/`la`, where a long random stream cannot compare them (see diffkit.py).

Each scenario runs on a fresh memcached and a fresh segcache-server; replies must match byte for
byte once CAS values and TTL seconds are normalised (as diffkit does). `E` (newer than the
memcached Debian ships) is checked against this server alone.
"""

import re
import shutil
import socket

import pytest

from diffkit import MEMCACHED, default_binary, start_memcached, start_segcache

pytestmark = pytest.mark.skipif(shutil.which(MEMCACHED) is None, reason="memcached not installed")

CAS = re.compile(rb"\bc\d+|cas=\d+")
TTL = re.compile(rb" t\d+")
ME_TAIL = re.compile(rb" cls=\d+ size=\d+")


class Client:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def send(self, data: bytes) -> bytes:
        """Sends `data` and an `mn`; returns what came back before `MN`."""
        self.sock.sendall(data + b"mn\r\n")
        while not self.buf.endswith(b"MN\r\n"):
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk
        out, self.buf = self.buf[:-4], b""
        return out

    def close(self) -> None:
        self.sock.close()


def normalise(reply: bytes) -> bytes:
    return ME_TAIL.sub(b"", TTL.sub(b" t<ttl>", CAS.sub(b"<cas>", reply)))


@pytest.fixture
def servers():
    procs = [start_memcached(), start_segcache(default_binary(), ["-t", "2"])]
    yield procs
    for p in procs:
        p.stop()


def both(servers, script):
    """Runs `script(connect)` on each server; returns the normalised transcripts."""
    out = []
    for p in servers:
        clients = []

        def connect(port=p.port):
            c = Client(port)
            clients.append(c)
            return c

        try:
            out.append([normalise(r) for r in script(connect)])
        finally:
            for c in clients:
                c.close()
    return out


def test_stale_while_revalidate(servers):
    def script(connect):
        a, b, c = connect(), connect(), connect()
        out = [a.send(b"ms k 5 T100\r\nhello\r\n"), a.send(b"md k I T30\r\n")]
        # Two clients read the stale item: one wins the recache, the other sees it taken.
        out += [a.send(b"mg k v c t\r\n"), b.send(b"mg k v c t\r\n"), c.send(b"mg k s\r\n")]
        # The loser's recache with an old CAS is kept, stale; the winner's lands fresh.
        out.append(b.send(b"mg k c\r\n"))
        return out

    mc, sc = both(servers, script)
    assert mc == sc
    assert mc[2].startswith(b"VA 5 <cas> t<ttl> X W\r\n") and mc[3].startswith(b"VA 5 <cas> t<ttl> Z X\r\n")


def test_one_winner_whoever_asks_first(servers):
    """Which connection wins differs by who asks first, never how many win."""
    for p in servers:
        a, b = Client(p.port), Client(p.port)
        try:
            a.send(b"ms k 1\r\nx\r\nmd k I\r\n")
            replies = [b.send(b"mg k\r\n"), a.send(b"mg k\r\n"), b.send(b"mg k\r\n")]
            assert replies == [b"HD X W\r\n", b"HD Z X\r\n", b"HD Z X\r\n"], p.name
            # `mg N` on a miss: the first vivifies and wins, the other sees the token out.
            replies = [a.send(b"mg n N30 s v\r\n"), b.send(b"mg n N30 s v\r\n")]
            assert replies == [b"VA 0 s0 W\r\n\r\n", b"VA 0 s0 Z\r\n\r\n"], p.name
        finally:
            a.close()
            b.close()


def test_invalidated_recache_and_cas(servers):
    def script(connect):
        a = connect()
        out = [a.send(b"ms k 2 T100\r\nv1\r\n")]
        old = re.search(rb"c(\d+)", a.send(b"mg k c\r\n")).group(1)
        out.append(a.send(b"md k I T50 q\r\nmg k\r\n"))
        # With I, a CAS older than the item's stores a stale value that keeps the TTL.
        out.append(a.send(b"ms k 2 C" + old + b" I T900\r\nv2\r\nmg k v t\r\n"))
        out.append(a.send(b"ms k 2 C" + old + b" T900\r\nv3\r\n"))
        cur = re.search(rb"c(\d+)", a.send(b"mg k c\r\n")).group(1)
        out.append(a.send(b"ms k 2 C" + cur + b" I\r\nv4\r\nmg k v\r\n"))
        # C0 compares nothing, with I or not.
        out.append(a.send(b"ms k 2 C0 I\r\nv5\r\nmg k v\r\n"))
        out.append(a.send(b"md k I C1 q\r\nmd missing I q\r\nmd missing k q\r\nma missing k q\r\n"))
        return out

    mc, sc = both(servers, script)
    assert mc == sc


def test_fetched_and_last_access(servers):
    def script(connect):
        a = connect()
        return [
            a.send(b"ms k 1\r\nx\r\nmg k h l\r\nmg k h l\r\nme k\r\n"),
            # A store is a new version; u reads leave the state alone; a touch is an access.
            a.send(b"ms k 1\r\ny\r\nmg k h u\r\nmg k h\r\nme k\r\n"),
            a.send(b"ms t 1\r\nz\r\ntouch t 100\r\nmg t h\r\n"),
            a.send(b"ms t 1\r\nz\r\nmg t h T100\r\nmg t h\r\n"),
            # Invalidation keeps the fetched bit; a vivified item is its creator's fetch.
            a.send(b"md k I\r\nmg k h\r\nmg v N30 h\r\nmg v h\r\n"),
            # An incr that memcached writes in place (no other reference to the item: the read
            # before it answered first) keeps the item's state, token included.
            a.send(b"ms n 2\r\n10\r\nmg n R100000 T100\r\n"),
            a.send(b"ma n\r\n"),
            a.send(b"mg n h\r\n"),
            a.send(b"ma n D100\r\nmg n h\r\nmd n I\r\nmg n\r\n"),
            a.send(b"ma n MD\r\n"),
            a.send(b"mg n h\r\n"),
        ]

    mc, sc = both(servers, script)
    assert mc == sc


def test_client_chosen_cas(servers):
    """`E` (memcached after 1.6.18; the Debian one refuses it): this server alone."""
    c = Client(servers[1].port)
    try:
        assert c.send(b"ms k 1 E12345678901\r\nx\r\nmg k c\r\n") == b"HD\r\nHD c12345678901\r\n"
        assert c.send(b"ms k 1 C12345678901 E7\r\ny\r\nmg k c v\r\n") == b"HD\r\nVA 1 c7\r\ny\r\n"
        assert c.send(b"md k I E99\r\nmg k c\r\n") == b"HD\r\nHD c99 X W\r\n"
        assert c.send(b"ms n 1\r\n5\r\nma n E42 v c\r\n") == b"HD\r\nVA 1 c42\r\n6\r\n"
        assert c.send(b"mg viv N30 E5 c\r\n") == b"HD c5 W\r\n"
        # (An append is a new item: no longer stale, as memcached's.)
        assert c.send(b"ms k 1 MA E8\r\nz\r\nmg k c v\r\n") == b"HD\r\nVA 2 c8\r\nyz\r\n"
        assert c.send(b"gets k\r\n") == b"VALUE k 0 2 8\r\nyz\r\nEND\r\n"
        assert c.send(b"cas k 0 0 1 8\r\nq\r\n") == b"STORED\r\n"
    finally:
        c.close()


def test_a_refused_oversized_ms_removes_the_old_value_whatever_the_key_form(servers):
    """`ms` of an item over the size limit removes the key's current value, as `set` does, with a
    base64 key (`b`) as with a plain one: a stale value is never read back."""
    big = b"z" * (1024 * 1024 + 50_000)

    def script(connect):
        a = connect()
        out = [a.send(b"ms plain 3\r\nold\r\nms YmluYXJ5 3 b\r\nold\r\n")]
        out.append(a.send(b"ms plain %d\r\n" % len(big) + big + b"\r\n"))
        out.append(a.send(b"ms YmluYXJ5 %d b\r\n" % len(big) + big + b"\r\n"))
        out.append(a.send(b"mg plain v\r\nmg YmluYXJ5 b v\r\n"))
        return out

    mc, sc = both(servers, script)
    assert mc == sc
    assert mc[-1] == b"EN\r\nEN\r\n"
