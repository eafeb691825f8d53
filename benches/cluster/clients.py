"""The clients of a pool, each placing keys by consistent hashing on the same ring, so that any of
them finds what another stored: pylibmc with libmemcached's ketama_weighted, spymemcached with
KETAMA and libmemcached's point names (a Java process, java/ClusterReader.java), and pymemcache
through twemproxy (nutcracker) with `distribution: ketama`. Values are bytes with flags 0.

Each fills the pool with `keys` items, then reads keys drawn uniformly at random until told to
stop, refilling each miss as an application in front of a database would, and counts per time
slice the hits, the misses, the errors (a node down: the request failed, nothing was learnt of
the cache) and the wrong values (a hit whose value is not the one stored for its key)."""

import os
import random
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nodes import ROOT, free_port

KINDS = ("pylibmc", "spymemcached", "twemproxy")


def key(i: int) -> str:
    return f"cluster:{i}"


def value(k: str, length: int) -> bytes:
    """The value stored for a key: the key and a bar, repeated to the length (the same in Java)."""
    unit = (k + "|").encode()
    return (unit * (length // len(unit) + 1))[:length]


@dataclass
class Counts:
    hits: int = 0
    misses: int = 0
    errors: int = 0
    wrong: int = 0

    def add(self, other: "Counts") -> None:
        self.hits += other.hits
        self.misses += other.misses
        self.errors += other.errors
        self.wrong += other.wrong

    @property
    def answered(self) -> int:
        return self.hits + self.misses + self.wrong


def slice_of(t: float, slice_s: float) -> int:
    """The slice a Unix time falls in (the Java reader computes the same from milliseconds)."""
    return int(t * 1000) // int(slice_s * 1000)


class PythonReader:
    """Fill and reader loop over a Python client; subclasses make the client and name the
    exceptions that mean a node could not be reached."""

    errors: tuple[type[BaseException], ...] = ()

    def __init__(self, keys: int, value_bytes: int, slice_s: float, seed: int):
        self.keys, self.value_bytes, self.slice_s = keys, value_bytes, slice_s
        self.random = random.Random(seed)
        self.slices: dict[int, Counts] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def connect(self):
        raise NotImplementedError

    def fill(self) -> tuple[int, int]:
        client = self.connect()
        ok = errors = 0
        batch = 500
        for start in range(0, self.keys, batch):
            items = {key(i): value(key(i), self.value_bytes) for i in range(start, min(start + batch, self.keys))}
            failed = self.set_many(client, items)
            errors += len(failed)
            ok += len(items) - len(failed)
        self.close(client)
        return ok, errors

    def set_many(self, client, items: dict[str, bytes]) -> list[str]:
        return list(client.set_multi(items))

    def close(self, client) -> None:
        pass

    def start(self) -> None:
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def stop(self) -> dict[int, Counts]:
        self._stop.set()
        self._thread.join(30)
        return self.slices

    def _read(self) -> None:
        client = self.connect()
        while not self._stop.is_set():
            k = key(self.random.randrange(self.keys))
            want = value(k, self.value_bytes)
            got = Counts()
            try:
                v = client.get(k)
                if v is None:
                    got.misses = 1
                    self._refill(client, k, want)
                elif v == want:
                    got.hits = 1
                else:
                    got.wrong = 1
            except self.errors:
                got.errors = 1
            self.slices.setdefault(slice_of(time.time(), self.slice_s), Counts()).add(got)
        self.close(client)

    def _refill(self, client, k: str, v: bytes) -> None:
        # A refill that fails (its node just went down) changes nothing of what the read saw.
        try:
            client.set(k, v)
        except self.errors:
            pass


class PylibmcKetama(PythonReader):
    """pylibmc (libmemcached) with ketama_weighted over the nodes themselves."""

    def __init__(self, addresses: list[str], workdir: Path, **kw):
        super().__init__(**kw)
        import pylibmc

        self.pylibmc = pylibmc
        self.addresses = addresses
        self.errors = (pylibmc.Error,)

    def connect(self):
        # ketama_weighted: libmemcached's ketama-compatible ring (MD5, four points per digest,
        # points named "address:port-N"), the one twemproxy's ketama builds; plain "ketama"
        # builds another. No remove_failed (nor auto_eject): a node that is down stays in the
        # ring, so its keys do not move to nodes that never held them. retry_timeout: try a
        # failed node again after a second.
        return self.pylibmc.Client(
            self.addresses, binary=False,
            behaviors={"ketama_weighted": True, "tcp_nodelay": True, "connect_timeout": 1000, "retry_timeout": 1},
        )


class Twemproxy(PythonReader):
    """pymemcache through a nutcracker (twemproxy) in front of the nodes, `distribution: ketama`."""

    def __init__(self, addresses: list[str], workdir: Path, **kw):
        super().__init__(**kw)
        from pymemcache.client.base import Client
        from pymemcache.exceptions import MemcacheError

        tool = shutil.which("nutcracker")
        assert tool, "nutcracker missing: apt-get install nutcracker (make deps)"
        self.Client = Client
        self.errors = (MemcacheError, OSError)
        self.port = free_port()
        conf = workdir / f"nutcracker-{self.port}.yml"
        # auto_eject_hosts false: a node that is down keeps its keys (its requests fail) rather
        # than having them moved to the other nodes.
        conf.write_text(
            "pool:\n"
            f"  listen: 127.0.0.1:{self.port}\n"
            "  hash: md5\n"
            "  distribution: ketama\n"
            "  timeout: 1000\n"
            "  auto_eject_hosts: false\n"
            "  servers:\n" + "".join(f"    - {a}:1\n" for a in addresses)
        )
        self.proxy = subprocess.Popen([tool, "-c", str(conf), "-s", str(free_port()), "-a", "127.0.0.1",
                                       "-o", str(workdir / f"nutcracker-{self.port}.log")])
        deadline = time.monotonic() + 10
        while True:
            try:
                c = self.connect()
                c.get("probe")
                c.close()
                break
            except Exception:
                if time.monotonic() > deadline or self.proxy.poll() is not None:
                    self.proxy.kill()
                    raise
                time.sleep(0.05)

    def connect(self):
        return self.Client(("127.0.0.1", self.port), timeout=2, connect_timeout=2, default_noreply=False)

    def set_many(self, client, items: dict[str, bytes]) -> list[str]:
        return client.set_many(items)

    def close(self, client) -> None:
        client.close()

    def stop(self) -> dict[int, Counts]:
        slices = super().stop()
        self.proxy.terminate()
        self.proxy.wait(10)
        return slices


def java_dir() -> Path:
    """Where benches/cluster/build_java.sh put the spymemcached driver."""
    return Path(os.environ.get("CLUSTER_JAVA_DIR") or Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
                / "cluster" / "java")


def build_java() -> Path:
    subprocess.run(["bash", str(Path(__file__).with_name("build_java.sh"))], check=True,
                   stdout=subprocess.DEVNULL)
    return java_dir()


class Spymemcached:
    """spymemcached with KETAMA, in a Java process of its own (java/ClusterReader.java)."""

    def __init__(self, addresses: list[str], workdir: Path, keys: int, value_bytes: int, slice_s: float,
                 seed: int, fill: bool = True):
        d = build_java()
        # spymemcached logs every reconnection: kept beside the nodes' files, not on the console.
        self.log = open(workdir / "spymemcached.log", "w")
        self.proc = subprocess.Popen(
            ["java", "-cp", f"{d}/lib/*:{d}/classes", "ClusterReader", ",".join(addresses), str(keys),
             str(value_bytes), str(int(slice_s * 1000)), str(seed), "fill" if fill else "read"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
        )

    def fill(self) -> tuple[int, int]:
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "filled":
            self.proc.kill()
            raise RuntimeError(f"spymemcached driver: {line!r}")
        return int(line[1]), int(line[2])

    def start(self) -> None:
        # The Java reader starts reading as soon as it has filled the pool.
        pass

    def stop(self) -> dict[int, Counts]:
        out, _ = self.proc.communicate(timeout=60)
        self.log.close()
        if self.proc.returncode != 0:
            raise RuntimeError(f"spymemcached driver exited with {self.proc.returncode}")
        slices = {}
        for line in out.splitlines():
            f = line.split()
            if f and f[0] == "slice":
                slices[int(f[1])] = Counts(*map(int, f[2:6]))
        return slices


def make(kind: str, addresses: list[str], workdir: Path, **kw):
    """A client of `kind` (one of KINDS) over the nodes at `addresses`."""
    return {"pylibmc": PylibmcKetama, "spymemcached": Spymemcached, "twemproxy": Twemproxy}[kind](
        addresses, workdir, **kw)
