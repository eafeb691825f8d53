"""The persistence file's filesystem and the server: a heap larger than the filesystem is refused
at start with a clear message (never a SIGBUS later), SIGUSR2 writes the heap to stable storage,
SIGUSR1 stops gracefully as memcached's does, and a file truncated under a live server ends it
with a line naming the file. The small filesystem is a tmpfs mounted here (root only)."""

import os
import queue
import signal
import subprocess
import threading
import time

import pytest
from pymemcache.client.base import Client

from conftest import ROOT_USER, Server, free_port, server_binary


@pytest.fixture
def small_fs(tmp_path):
    """A 20 MiB tmpfs, unmounted afterwards."""
    d = tmp_path / "small"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (root needed): {r.stderr.decode().strip()}")
    yield d
    subprocess.run(["umount", "-l", str(d)], check=True)


@pytest.mark.parametrize("extra", [[], ["-L"]], ids=["plain", "prefault"])
def test_a_heap_larger_than_the_filesystem_is_refused_at_start(small_fs, extra):
    path = small_fs / "cache.seg"
    argv = [str(server_binary()), "-p", str(free_port()), "--persist", str(path), "-m", "64", *extra, *ROOT_USER]
    for _ in range(2):  # a restart on the same file is refused the same way, not a crash loop
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert str(path) in r.stderr and "free" in r.stderr and "no space" in r.stderr, r.stderr
    # A heap that fits starts over what was refused, and every page of it can be written.
    port = free_port()
    s = Server("--persist", str(path), "-m", "8", *extra, port=port).start()
    c = Client(("127.0.0.1", port), default_noreply=False)
    value = b"v" * 100_000
    for i in range(200):
        assert c.set(f"k{i}", value)
    assert c.get("k199") == value
    c.close()
    assert s.stop() == 0, s.stderr()


def stderr_lines(s: Server) -> "queue.Queue[str]":
    """The server's stderr, line by line as it comes, for waiting on one line with a deadline."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in s.proc.stderr], daemon=True).start()
    return lines


def wait_for_line(lines: "queue.Queue[str]", text: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    seen = []
    while not seen or text not in seen[-1]:
        left = deadline - time.monotonic()
        assert left > 0, f"no line with {text!r} in:\n{''.join(seen)}"
        try:
            seen.append(lines.get(timeout=left))
        except queue.Empty:
            pass


def test_sigusr2_writes_the_heap_and_sigusr1_stops_gracefully(tmp_path):
    path = tmp_path / "cache.seg"
    port = free_port()
    s = Server("--persist", str(path), "-m", "8", "-vv", port=port).start()
    lines = stderr_lines(s)
    c = Client(("127.0.0.1", port), default_noreply=False)
    assert c.set("k", b"a value only the heap holds")
    s.proc.send_signal(signal.SIGUSR2)
    # The file is the heap's mapping, so the value is in it at once; the line says it is synced.
    wait_for_line(lines, "SIGUSR2: the heap is on stable storage")
    assert b"a value only the heap holds" in path.read_bytes()
    assert c.get("k") == b"a value only the heap holds"  # still serving
    c.close()
    s.proc.send_signal(signal.SIGUSR1)
    assert s.proc.wait(10) == 0
    wait_for_line(lines, "persisted for a warm restart")
    s = Server("--persist", str(path), "-m", "8", port=port).start()
    c = Client(("127.0.0.1", port), default_noreply=False)
    assert c.get("k") == b"a value only the heap holds"
    c.close()
    assert s.stop() == 0


def test_a_stop_taken_beside_a_pending_heap_write_still_stops_cleanly(tmp_path):
    """SIGUSR1 and SIGUSR2 pending together are taken in signal order, so the stop runs while
    the heap write may still hold the cache: the stop waits for it and closes warm."""
    path = tmp_path / "cache.seg"
    for round in range(5):
        port = free_port()
        s = Server("--persist", str(path), "-m", "8", port=port).start()
        c = Client(("127.0.0.1", port), default_noreply=False)
        assert c.set(f"k{round}", b"v" * 1000)
        for r in range(round):
            assert c.get(f"k{r}") == b"v" * 1000, (round, r)
        c.close()
        s.proc.send_signal(signal.SIGUSR2)
        s.proc.send_signal(signal.SIGUSR1)
        assert s.proc.wait(10) == 0, s.stderr()


def test_a_file_truncated_under_the_server_is_named_as_it_ends(tmp_path):
    path = tmp_path / "cache.seg"
    port = free_port()
    s = Server("--persist", str(path), "-m", "8", port=port).start()
    c = Client(("127.0.0.1", port), default_noreply=False, connect_timeout=2, timeout=2)
    assert c.set("before", b"x")
    os.truncate(path, 0)
    with pytest.raises(Exception):
        for i in range(1000):
            c.set(f"k{i}", b"v" * 1000)
    assert s.proc.wait(10) == -signal.SIGBUS
    err = s.proc.stderr.read()
    assert f"the persistence file {path} no longer backs the heap" in err, err
