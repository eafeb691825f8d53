"""The nodes of a pool: segcache-server with a persistence file, or memcached, each on a port of
its own that it keeps across restarts (consistent hashing places keys by host and port), stopped
gracefully (SIGTERM) or killed (SIGKILL) and started again the same way."""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def server_binary() -> Path:
    """The release server: $SEGCACHE_SERVER_BIN, else target/release/segcache-server."""
    env = os.environ.get("SEGCACHE_SERVER_BIN")
    if env:
        return Path(env).resolve()
    return Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "segcache-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_answering(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Until the node at `port` answers `version`; raises if it exits first or stays silent."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"node on port {port} exited with {proc.returncode}: {proc.stderr.read()!r}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"version\r\n")
                if s.recv(100).startswith(b"VERSION "):
                    return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"node on port {port} did not answer within {timeout} s")


# Both kinds run as root only when told which user to be (`-u root`, as memcached wants).
AS_ROOT = ["-u", "root"] if os.geteuid() == 0 else []


class Node:
    """One cache server of the pool. `kind` is "segcache" (its heap in `workdir`/cache.seg, so
    that a restart finds it warm) or "memcached" (which starts empty after any restart)."""

    def __init__(self, kind: str, workdir: Path, memory_mb: int):
        assert kind in ("segcache", "memcached"), kind
        self.kind = kind
        self.port = free_port()
        self.heap = workdir / f"node-{self.port}.seg"
        common = ["-p", str(self.port), "-l", "127.0.0.1", "-t", "1", "-m", str(memory_mb), "-U", "0", *AS_ROOT]
        if kind == "segcache":
            # --no-pin: every node's single worker would otherwise be pinned to the first core.
            self.argv = [str(server_binary()), *common, "--no-pin", "--persist", str(self.heap)]
        else:
            self.argv = ["memcached", *common]
        self.proc: subprocess.Popen | None = None
        self.log = ""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "Node":
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_answering(self.port, self.proc)
        return self

    def stop(self, how: str = "term") -> int:
        """Stops the node: "term" (SIGTERM, the graceful stop) or "kill" (SIGKILL, a crash).
        Returns its exit status once it is gone; keeps what it logged in `log`."""
        assert how in ("term", "kill"), how
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
        _, err = self.proc.communicate(timeout=30)
        self.log += err
        return self.proc.returncode

    def restart(self, how: str) -> tuple[float, float]:
        """Stops the node `how` and starts it again on the same port; returns the times (Unix
        seconds) at which the stop began and at which it answered again."""
        began = time.time()
        code = self.stop(how)
        if how == "term" and code != 0:
            raise RuntimeError(f"{self.kind} on port {self.port} exited with {code} at SIGTERM: {self.log}")
        self.start()
        return began, time.time()


class Pool:
    """`n` nodes of one kind, started together; a context manager that stops them all."""

    def __init__(self, kind: str, workdir: Path, n: int = 3, memory_mb: int = 32):
        self.nodes = [Node(kind, workdir, memory_mb) for _ in range(n)]

    def __enter__(self) -> "Pool":
        try:
            for node in self.nodes:
                node.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for node in self.nodes:
            node.stop("kill" if exc and exc[0] is not None else "term")

    @property
    def addresses(self) -> list[str]:
        return [n.address for n in self.nodes]
