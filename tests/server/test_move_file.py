"""Moving a cache to another host: the persistence file of a server stopped gracefully, or killed
with SIGKILL, is copied to another directory and a server started there over the copy (another
port, another path: what another machine with the same settings sees) is warm, every item served
with its value, flags and time to live. A start whose settings do not match the file is refused
with the setting named, and the copy is left as it was (docs/cluster.md, "Moving a node's file").
A file made with room to grow (--max-memory-limit) restarts warm with all it held, even more than
-m, the limit back at -m."""

import hashlib
import re
import shutil
import signal
import socket
import subprocess

import pytest
from pymemcache.client.base import Client

from conftest import ROOT_USER, Raw, Server, free_port, server_binary

ITEMS = 3000


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def value(i: int) -> bytes:
    return b"%d|" % i * (i % 50 + 1)


def fill(port: int) -> None:
    """ITEMS items, those of the first 500 with an hour to live, and one with client flags."""
    c = Client(("127.0.0.1", port), default_noreply=False)
    for start in range(0, ITEMS, 500):
        items = {f"moved:{i}": value(i) for i in range(start, start + 500)}
        assert c.set_many(items, expire=3600 if start == 0 else 0) == []
    c.close()
    with connect(port) as sock:
        assert Raw(sock).request(b"set flagged 4242 0 5\r\nhello\r\n") == b"STORED"


def check_every_item(port: int) -> None:
    c = Client(("127.0.0.1", port), default_noreply=False)
    keys = [f"moved:{i}" for i in range(ITEMS)]
    got = {}
    for start in range(0, ITEMS, 500):
        got.update(c.get_many(keys[start:start + 500]))
    c.close()
    assert got == {f"moved:{i}": value(i) for i in range(ITEMS)}
    with connect(port) as sock:
        raw = Raw(sock)
        # Flags and the remaining time to live came along.
        assert raw.request(b"mg flagged v f\r\n") == b"VA 5 f4242"
        assert raw.line() == b"hello"
        ttl = raw.request(b"mg moved:0 t\r\n")
        assert re.fullmatch(rb"HD t(\d+)", ttl) and 3000 < int(ttl[4:]) <= 3600, ttl
        assert raw.request(b"mg moved:500 t\r\n") == b"HD t-1"


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_file_copied_to_another_directory_opens_there_with_every_item(tmp_path, stop):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    s = Server("--persist", str(here / "cache.seg"), "-m", "16", "--segment-size", "2m").start()
    fill(s.port)
    s.proc.send_signal(getattr(signal, stop))
    s.proc.wait(30)
    assert s.proc.returncode == (0 if stop == "SIGTERM" else -signal.SIGKILL)
    shutil.copyfile(here / "cache.seg", there / "cache.seg")
    (here / "cache.seg").unlink()

    # The segment size is left out: it is taken from the file. The heap size is not (-m).
    moved = Server("--persist", str(there / "cache.seg"), "-m", "16", port=free_port()).start()
    try:
        check_every_item(moved.port)
    finally:
        assert moved.stop() == 0
    log = moved.stderr()
    came_back = "warm start from" if stop == "SIGTERM" else "recovered after a crash from"
    assert re.search(rf"{came_back} {re.escape(str(there / 'cache.seg'))}: {ITEMS + 1} items back", log), log
    if stop == "SIGKILL":
        assert "0 corrupt segments dropped" in log, log


def test_a_copy_opened_with_other_settings_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "made-here.seg"
    s = Server("--persist", str(path), "-m", "16", "--segment-size", "2m").start()
    fill(s.port)
    assert s.stop() == 0
    copy = tmp_path / "elsewhere" / "cache.seg"
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    before = digest(copy)
    for args, reason in (
        (["-m", "32"], r"heap size is 16777216 bytes in the file, 33554432 in this cache"),
        (["-m", "16", "--segment-size", "1m"], r"segment size is 2097152 in the file, 1048576 in this cache"),
        (["-m", "16", "--hash-power", "16"], r"hash power is \d+ in the file, 16 in this cache"),
    ):
        r = subprocess.run([str(server_binary()), "-p", str(free_port()), "--persist", str(copy), *args, *ROOT_USER],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, (args, r.stderr)
        assert f"bad persistence file {copy}: made with another configuration" in r.stderr, (args, r.stderr)
        assert re.search(reason, r.stderr), (args, r.stderr)
        assert digest(copy) == before, f"{args}: the refused start changed the file"
    # A copy cut short (a transfer that stopped half way) is refused as truncated, and left so.
    cut = tmp_path / "cut.seg"
    cut.write_bytes(copy.read_bytes()[: copy.stat().st_size // 2])
    cut_digest = digest(cut)
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), "--persist", str(cut), "-m", "16", *ROOT_USER],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "(truncated or resized)" in r.stderr, r.stderr
    assert digest(cut) == cut_digest
    # Opened as it was made, it holds everything.
    s = Server("--persist", str(copy), "-m", "16").start()
    try:
        check_every_item(s.port)
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_resize_file_moves_every_item_into_a_heap_of_other_sizes(tmp_path, stop):
    path = tmp_path / "cache.seg"
    s = Server("--persist", str(path), "-m", "16", "--segment-size", "2m").start()
    fill(s.port)
    s.proc.send_signal(getattr(signal, stop))
    s.proc.wait(30)
    # Larger, with other segments and shards; then smaller again.
    for args in (["-m", "32", "--segment-size", "1m", "--shards", "4"], ["-m", "8"]):
        resized = Server("--persist", str(path), *args, "--resize-file", port=free_port()).start()
        try:
            check_every_item(resized.port)
            with connect(resized.port) as sock:
                sock.sendall(b"stats\r\n")
                stats = b""
                while not stats.endswith(b"END\r\n"):
                    stats += sock.recv(65536)
            limit = int(re.search(rb"STAT limit_maxbytes (\d+)", stats).group(1))
            assert limit == int(args[1]) << 20, stats
        finally:
            assert resized.stop() == 0
        assert not (tmp_path / "cache.seg.resizing").exists()


def limit_maxbytes(port: int) -> int:
    with connect(port) as sock:
        sock.sendall(b"stats\r\n")
        stats = b""
        while not stats.endswith(b"END\r\n"):
            stats += sock.recv(65536)
    return int(re.search(rb"STAT limit_maxbytes (\d+)", stats).group(1))


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_file_with_room_to_grow_restarts_warm_at_its_memory_limit(tmp_path, stop):
    """The file is made for --max-memory-limit; what the limit grew to holds, and the next start
    (the same flags) is warm with every item, the limit back at -m."""
    path = tmp_path / "cache.seg"
    args = ["--persist", str(path), "-m", "8", "--max-memory-limit", "32"]
    s = Server(*args).start()
    with connect(s.port) as sock:
        assert Raw(sock).request(b"cache_memlimit 32\r\n") == b"OK"
    fill(s.port)
    big = b"b" * 8000
    c = Client(("127.0.0.1", s.port), default_noreply=False)
    assert c.set_many({f"big:{i}": big for i in range(2000)}) == []  # 16 MB: twice -m
    c.close()
    s.proc.send_signal(getattr(signal, stop))
    s.proc.wait(30)
    again = Server(*args, port=free_port()).start()
    try:
        check_every_item(again.port)
        c = Client(("127.0.0.1", again.port), default_noreply=False)
        keys = [f"big:{i}" for i in range(2000)]
        assert all(len(c.get_many(keys[i:i + 500])) == 500 for i in range(0, 2000, 500))
        c.close()
        assert limit_maxbytes(again.port) == 8 << 20
    finally:
        assert again.stop() == 0
    # Without the room the file's sizes are not these: refused, the file left as it was.
    before = digest(path)
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), "--persist", str(path), "-m", "8", *ROOT_USER],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and str(path) in r.stderr, r.stderr
    assert digest(path) == before
