"""The server under faults: a second server started on a live UNIX socket, admin clients that
send half a request and hold on, a command log on a full disk. memcached 1.6 runs beside it where
it has the same feature (the UNIX socket); its admin port and command log have no memcached
counterpart."""

import os
import re
import signal
import socket
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

import diffkit
from conftest import ROOT_USER, free_port, server_binary, spawn
from conftest import stop_logged as stop


# --- a UNIX socket that is in use ----------------------------------------------------------


def wait_socket(path: Path, proc: subprocess.Popen, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
        if path.exists() and stat.S_ISSOCK(os.lstat(path).st_mode):
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(1)
                    s.connect(str(path))
                    s.sendall(b"version\r\n")
                    if s.recv(100).startswith(b"VERSION "):
                        return
            except OSError:
                pass
        assert time.monotonic() < deadline, f"no server answering on {path}"
        time.sleep(0.05)


def version_over(path: Path) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(path))
        s.sendall(b"version\r\n")
        return s.recv(100)


def segcache_on(path: Path) -> subprocess.Popen:
    proc, _ = spawn("-s", str(path), *ROOT_USER, wait=False)
    return proc


def memcached_on(path: Path) -> subprocess.Popen:
    argv = [diffkit.MEMCACHED, "-s", str(path), "-m", "16", "-t", "1", *ROOT_USER]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_second_server_on_a_live_unix_socket_is_refused(tmp_path):
    path = tmp_path / "mc.sock"
    first = segcache_on(path)
    try:
        wait_socket(path, first)
        before = os.lstat(path)
        second = segcache_on(path)
        _, err = second.communicate(timeout=30)
        assert second.returncode != 0, "a second server on a live socket must not start"
        assert "another server is listening" in err and str(path) in err, err
        # The first server's socket is untouched and still answers.
        assert (os.lstat(path).st_dev, os.lstat(path).st_ino) == (before.st_dev, before.st_ino)
        assert version_over(path).startswith(b"VERSION ")
    finally:
        stop(first)
    assert not path.exists(), "the first server removes its own socket at stop"


def test_memcached_takes_a_live_unix_socket_over(tmp_path):
    """The oracle, for the record in docs/server.md: memcached unlinks whatever socket is at its
    -s path and binds its own (the first server keeps running, unreachable by path), and removes
    nothing at exit. segcache refuses the start instead (above)."""
    path = tmp_path / "mc.sock"
    first = memcached_on(path)
    second = None
    try:
        wait_socket(path, first)
        inode = os.lstat(path).st_ino
        second = memcached_on(path)
        deadline = time.monotonic() + 10
        while os.lstat(path).st_ino == inode:
            assert second.poll() is None and time.monotonic() < deadline, "memcached did not take the path"
            time.sleep(0.05)
        wait_socket(path, second)
        assert first.poll() is None, "the first memcached keeps running"
    finally:
        for p in (first, second):
            if p is not None:
                p.send_signal(signal.SIGTERM)
                p.wait(10)
    assert path.exists(), "memcached leaves its socket file at exit"


def test_a_stale_unix_socket_is_replaced(tmp_path):
    path = tmp_path / "mc.sock"
    # A socket file whose server is gone: bound, never listening, closed (connect is refused).
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    proc = segcache_on(path)
    try:
        wait_socket(path, proc)
    finally:
        stop(proc)
    assert not path.exists()


def test_stop_leaves_a_socket_that_is_not_its_own(tmp_path):
    path = tmp_path / "mc.sock"
    first = segcache_on(path)
    second = None
    try:
        wait_socket(path, first)
        # The first server's socket file is removed by hand, and a second server binds the path.
        path.unlink()
        second = segcache_on(path)
        wait_socket(path, second)
        ours = os.lstat(path).st_ino
        log = stop(first)
        first = None
        assert path.exists() and os.lstat(path).st_ino == ours, "the first server's stop left the second's socket"
        assert "another socket took its place" in log, log
        assert version_over(path).startswith(b"VERSION ")
        stop(second)
        second = None
        assert not path.exists()
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# --- admin probes beside slow admin clients ------------------------------------------------


def probe(admin: int, path: str, timeout: float = 1.0) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}{path}", timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@contextmanager
def slow_admin_clients(admin: int, n: int, every: float = 2.9):
    """`n` clients that each send a partial GET and reconnect every `every` seconds."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", admin), timeout=2)
                s.sendall(b"GET /metr")
            except OSError:
                stop.wait(0.1)
                continue
            stop.wait(every)
            s.close()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(10)


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(l for l in status.splitlines() if l.startswith("VmRSS:")).split()[1])


@pytest.mark.parametrize("slow", [20, 100])
def test_probes_answer_whatever_slow_admin_clients_do(slow):
    admin = free_port()
    proc, _ = spawn("--admin-port", str(admin))
    try:
        assert probe(admin, "/readyz") == 200
        rss_before = rss_kib(proc.pid)
        with slow_admin_clients(admin, slow):
            time.sleep(0.5)
            began = time.monotonic()
            seen = []
            # Over 7 s: more than two rounds of every slow client reconnecting.
            while time.monotonic() - began < 7:
                for path in ("/healthz", "/readyz"):
                    t = time.monotonic()
                    status = probe(admin, path)
                    seen.append((path, status, time.monotonic() - t))
                time.sleep(0.2)
            rss_during = rss_kib(proc.pid)
        bad = [s for s in seen if s[1] != 200]
        assert not bad, f"{len(bad)} of {len(seen)} probes not 200: {bad[:5]}"
        # Promptly: a probe is answered once its request is in, not after other clients' turns.
        assert max(s[2] for s in seen) < 0.5, max(s[2] for s in seen)
        # Bounded: the waiting clients hold at most 64 requests of 16 KiB (here 9 bytes each).
        assert rss_during - rss_before < 8 * 1024, (rss_before, rss_during)
        # /metrics still answers.
        assert probe(admin, "/metrics", timeout=5) == 200
    finally:
        stop(proc)


# --- a command log on a full disk ----------------------------------------------------------


@contextmanager
def tiny_tmpfs(where: Path, size: str = "1m"):
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def send_all(port: int, data: bytes, until: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(data)
        got = b""
        while not got.endswith(until):
            chunk = s.recv(65536)
            assert chunk, "connection closed"
            got += chunk


KLOG_WARNING = re.compile(r"WARN klog: klog: (cannot write|(\d+) more failed writes)")


def test_a_full_disk_does_not_flood_the_log(tmp_path):
    with tiny_tmpfs(tmp_path / "disk") as disk:
        klog = disk / "klog"
        # No rotation: the disk fills with the first file.
        proc, port = spawn("-o", f"klog_file={klog},klog_sample=1,klog_max_bytes=64m")
        began = time.monotonic()
        try:
            for batch in range(0, 200_000, 20_000):
                sets = b"".join(b"set k%d 0 0 1 noreply\r\nv\r\n" % i for i in range(batch, batch + 20_000))
                send_all(port, sets + b"mn\r\n", b"MN\r\n")
            # Long enough for the one-a-second warning to name what it held back.
            time.sleep(1.5)
        finally:
            log = stop(proc)
        elapsed = time.monotonic() - began
        assert os.statvfs(disk).f_bavail == 0 or klog.stat().st_size > 900 << 10, "the disk did fill"
    warnings = [m for m in map(KLOG_WARNING.search, log.splitlines()) if m]
    # One line a second at most, plus the first and the last at stop.
    assert 1 <= len(warnings) <= elapsed + 2, (len(warnings), elapsed)
    held_back = sum(int(m.group(2) or 0) for m in warnings) + sum(
        int(n) for n in re.findall(r"\((\d+) more like it suppressed\)", log)
    )
    # The file took some 20k lines of the 200k; the writer tried tens of thousands more (those
    # that found a worker's queue full were dropped before it, and counted in `stats`), and each
    # failure is logged or counted, never silently lost.
    assert held_back >= 10_000, (held_back, log[-2000:])
    assert len(log) < 64 << 10, f"{len(log)} bytes of log"
