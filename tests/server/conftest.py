"""Fixtures for the segcache-server end-to-end tests: start the real release binary on a free
port, wait for it to answer, stop it with SIGTERM (checking that it exits cleanly)."""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import diffkit

ROOT = Path(__file__).resolve().parents[2]


def server_binary() -> Path:
    env = os.environ.get("SEGCACHE_SERVER_BIN")
    if env:
        # Absolute: some tests start it from another working directory.
        return Path(env).resolve()
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "segcache-server"



# As memcached, the server refuses to run as root without -u: the tests, often run as root, say
# `-u root` then (unless they pass a -u of their own).
ROOT_USER = ["-u", "root"] if os.geteuid() == 0 else []


def as_user(args) -> list[str]:
    """`args`, with `-u root` when running as root and `args` names no user."""
    args = list(args)
    return args if "-u" in args or "--user" in args else [*args, *ROOT_USER]


def spawn(*args: str, wait: bool = True) -> tuple[subprocess.Popen, int]:
    """The server on a free port with `args` (and `-u root` when root), stderr piped; with
    `wait`, once it answers."""
    port = free_port()
    argv = [str(server_binary()), "-p", str(port), "-t", "2", *as_user(args)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if wait:
        wait_port(port, proc)
    return proc, port


def stop_logged(proc: subprocess.Popen, timeout: float = 30) -> str:
    """Stops a `spawn`ed server with SIGTERM, checks it exited cleanly; returns its log."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}: {proc.stderr.read()!r}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"version\r\n")
                if s.recv(100).startswith(b"VERSION "):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not answer within {timeout}s")


class Server:
    def __init__(self, *args: str, port: int | None = None):
        self.port = port or free_port()
        self.args = ["-p", str(self.port), "-t", "2", *as_user(args)]
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Server":
        binary = server_binary()
        assert binary.exists(), f"{binary} missing: build it with `cargo build --release -p segcache-server`"
        self.proc = subprocess.Popen(
            [str(binary), *self.args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        wait_port(self.port, self.proc)
        return self

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc and self.proc.poll() is not None else ""

    def connect(self, timeout: float = 5.0) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


@pytest.fixture(scope="module")
def server():
    s = Server("-I", "64k", "-m", "32").start()
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture
def fresh_server():
    """A server of its own, for tests that stop or overload it."""
    started = []

    def make(*args: str) -> Server:
        s = Server(*args).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


class Raw:
    """A raw protocol connection: send bytes, read lines and blocks."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buf += chunk
        return bool(chunk)

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise EOFError(f"connection closed; partial {self.buf!r}")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError("connection closed")
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def closed(self) -> bool:
        """True when the server closes the connection (after any pending bytes)."""
        try:
            while self._fill():
                pass
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def request(self, data: bytes) -> bytes:
        self.send(data)
        return self.line()


@pytest.fixture
def raw(server):
    s = server.connect()
    yield Raw(s)
    s.close()


# memcached 1.6 beside this server, for tests that compare their replies (the oracle): the same
# memory and threads, memcached without its LRU maintainer (so items stay where `stats
# cachedump` looks).
def start_memcached() -> diffkit.Proc:
    port = free_port()
    argv = [diffkit.MEMCACHED, "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "64", "-t", "2",
            "-o", "no_lru_maintainer"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    return diffkit.Proc("memcached", argv, port)


def start_segcache(*args: str) -> diffkit.Proc:
    port = free_port()
    argv = [str(server_binary()), "-p", str(port), "-m", "64", "-t", "2", "--no-pin", *as_user(args)]
    return diffkit.Proc("segcache-server", argv, port)


@pytest.fixture(scope="module")
def pair():
    """memcached and this server, started once per test module."""
    mc = start_memcached()
    sc = start_segcache()
    yield mc, sc
    mc.stop()
    assert sc.stop() == 0
