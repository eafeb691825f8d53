"""Retrieval lines of any length, against memcached 1.6.

memcached serves a `get`/`gets` line with any number of keys (`memcslap --test=mget` sends
100,000): this server runs a line longer than its input buffer as it arrives. The replies must be
memcached's byte for byte, whatever the pieces the line arrives in, and the server's memory must
not grow with the line.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import threading
import time

import pytest

from conftest import start_segcache
from diffkit import MEMCACHED

pytestmark = pytest.mark.skipif(shutil.which(MEMCACHED) is None and not os.path.exists(MEMCACHED),
                                reason="memcached 1.6 is the oracle: not installed")

SENTINEL = b"version\r\n"
VERSION = b"VERSION 1.6.18\r\n"


def chunks(data: bytes, rng: random.Random):
    """`data` cut into pieces of random sizes (1 byte to 64 KiB)."""
    at = 0
    while at < len(data):
        n = rng.choice([1, 7, 100, 1400, 4096, 9000, 65536, rng.randint(1, 65536)])
        yield data[at:at + n]
        at += n


def exchange(port: int, data: bytes, seed: int, on_sent=None) -> bytes:
    """Sends `data` then `version` in random pieces (a thread writes, this one reads); returns
    everything received up to and with the `VERSION` line, or up to the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        rng = random.Random(seed)

        def send():
            try:
                for piece in chunks(data + SENTINEL, rng):
                    s.sendall(piece)
                    if on_sent:
                        on_sent()
            except OSError:
                pass  # closed: what came back tells

        writer = threading.Thread(target=send)
        writer.start()
        buf = b""
        try:
            while not buf.endswith(VERSION):
                try:
                    piece = s.recv(1 << 20)
                except ConnectionResetError:
                    break  # closed with input unread
                if not piece:
                    break
                buf += piece
        finally:
            writer.join()
        return buf


def both(pair, data: bytes, seed: int) -> tuple[bytes, bytes]:
    mc, sc = pair
    return exchange(mc.port, data, seed), exchange(sc.port, data, seed)


def store(pair, keys: list[str]) -> None:
    req = b"".join(f"set {k} {i} 0 {len(k) + 1}\r\n{k}!\r\n".encode() for i, k in enumerate(keys))
    for p in pair:
        assert exchange(p.port, req, 0) == b"STORED\r\n" * len(keys) + VERSION


def test_get_of_50000_keys_in_random_pieces(pair):
    keys = [f"gl:{i:06d}" for i in range(50_000)]
    store(pair, keys[::3])
    line = ("get " + " ".join(keys) + "\r\n").encode()
    assert len(line) > 256 * 1024  # longer than the server parses whole
    for seed in range(3):
        mc, sc = both(pair, line, seed)
        assert mc.count(b"VALUE ") == len(keys[::3]) and mc.endswith(b"END\r\n" + VERSION)
        assert sc == mc, f"seed {seed}: {len(sc)} bytes, memcached {len(mc)}"


def test_pipeline_around_a_long_line_and_a_key_too_long_inside(pair):
    keys = [f"gp:{i:06d}" for i in range(40_000)]
    store(pair, keys[::5])
    line = ("get " + " ".join(keys) + "\r\n").encode()
    data = b"set gp:a 0 0 1\r\na\r\n" + line + b"get gp:a gp:000000\r\ndelete gp:a\r\n" + line
    mc, sc = both(pair, data, 7)
    assert mc.startswith(b"STORED\r\nVALUE gp:000000 0 10\r\n") and mc.count(b"END\r\n") == 3
    assert sc == mc
    # A key of 251 bytes in the middle (and at the end): memcached answers the error alone for
    # the line, and goes on.
    for at in (len(keys) // 2, len(keys)):
        bad = keys[:at] + ["k" * 251] + keys[at:]
        data = ("get " + " ".join(bad) + "\r\nget gp:000005\r\n").encode()
        mc, sc = both(pair, data, at)
        assert mc.startswith(b"CLIENT_ERROR bad command line format\r\nVALUE gp:000005 ")
        assert sc == mc


def test_gets_of_a_long_line(pair):
    keys = [f"gs:{i:06d}" for i in range(30_000)]
    store(pair, keys[::4])
    line = ("gets " + " ".join(keys) + "\r\n").encode()
    mc, sc = both(pair, line, 3)

    def values(reply: bytes) -> list[tuple[bytes, bytes]]:
        # Each server numbers CAS its own way: compare the rest, and that each hit has one.
        lines = reply.split(b"\r\n")
        out = []
        for i, ln in enumerate(lines):
            if ln.startswith(b"VALUE "):
                head = ln.split(b" ")
                assert len(head) == 5 and head[4].isdigit()
                out.append((b" ".join(head[:4]), lines[i + 1]))
        return out

    assert len(values(mc)) == len(keys[::4])
    assert values(sc) == values(mc) and sc.endswith(b"END\r\n" + VERSION)


def test_other_long_lines_close_without_a_reply(pair):
    for data in (b"set " + b"k" * (300 << 10) + b" 0 0 1\r\nx\r\n", b"xyzzy " * 50_000 + b"\r\n"):
        mc, sc = both(pair, data, 1)
        assert mc == b"" and sc == b""


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_memory_stays_bounded_while_a_20mb_get_line_streams():
    s = start_segcache()
    try:
        line = ("get " + " ".join(f"missing:{i:08d}" for i in range(1_250_000)) + "\r\n").encode()
        assert len(line) > 20 << 20
        base = rss(s.proc.pid)
        peak = [base]
        sent = [0]

        def sample():
            sent[0] += 1
            if sent[0] % 64 == 0:
                peak[0] = max(peak[0], rss(s.proc.pid))

        got = exchange(s.port, line, 11, on_sent=sample)
        assert got == b"END\r\n" + VERSION
        # The input buffer holds at most the line's first 256 KiB (and a read's worth): nothing
        # near the line's 20 MB.
        grown = peak[0] - base
        assert grown < 6 << 20, f"RSS grew by {grown} bytes while the line streamed"
        time.sleep(0.05)
    finally:
        assert s.stop() == 0
