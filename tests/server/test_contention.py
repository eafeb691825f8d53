"""Writers racing on one key, on memcached and on this server: what each client is told about
its own write holds for the version it wrote, and read-modify-writes lose nothing.

- `ms ... c` and `ma ... c` report the CAS value of the version this request made, never another
  writer's: no two replies share a value, and `ma`'s values rise with its numbers.
- `append` (one compare-and-swap of the joined value, retried when another writer came between)
  keeps every client's piece; `ma` with `E` (the client's CAS value: also a compare-and-swap
  loop) loses no increment.
"""

from __future__ import annotations

import re
import shutil
import socket
import threading

import pytest

from diffkit import MEMCACHED

pytestmark = pytest.mark.skipif(shutil.which(MEMCACHED) is None, reason="memcached 1.6 is the oracle: not installed")

CLIENTS = 4
ROUNDS = 3000
PIPELINE = 1000
RACES = 5


class Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buf = b""

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def ask(self, req: bytes, lines: int = 1) -> list[bytes]:
        self.sock.sendall(req)
        return [self.line() for _ in range(lines)]


def race(port: int, work) -> list:
    """Runs `work(conn, client)` on CLIENTS connections at once; returns their results."""
    results: list = [None] * CLIENTS
    errors: list[BaseException] = []
    start = threading.Barrier(CLIENTS)

    def run(i: int) -> None:
        conn = Conn(port)
        try:
            start.wait()
            results[i] = work(conn, i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            conn.sock.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


@pytest.mark.parametrize("which", ["memcached", "segcache"])
def test_ms_reports_the_cas_of_its_own_version(pair, which):
    port = pair[0 if which == "memcached" else 1].port

    def work(conn: Conn, i: int) -> list[int]:
        cas = []
        for batch in range(0, ROUNDS, PIPELINE):
            # Pipelined, so that each server worker writes the key back to back.
            req = b"".join(b"ms race-ms 8 c\r\n%08d\r\n" % (i * ROUNDS + r) for r in range(batch, batch + PIPELINE))
            for reply in conn.ask(req, PIPELINE):
                cas.append(int(re.fullmatch(rb"HD c(\d+)", reply).group(1)))
        return cas

    # A reply that read the CAS value back after its write could see another writer's when
    # that writer came between: rare per write, so the race runs several times.
    for _ in range(RACES):
        every = [c for cas in race(port, work) for c in cas]
        assert len(set(every)) == len(every), "two writes were told the same CAS value"


@pytest.mark.parametrize("which", ["memcached", "segcache"])
def test_ma_reports_the_cas_of_its_own_increment(pair, which):
    port = pair[0 if which == "memcached" else 1].port
    Conn(port).ask(b"set race-ma 0 0 1\r\n0\r\n")

    def work(conn: Conn, i: int) -> list[tuple[int, int]]:
        seen = []
        for _ in range(0, ROUNDS, PIPELINE):
            lines = conn.ask(b"ma race-ma v c\r\n" * PIPELINE, 2 * PIPELINE)
            for head, value in zip(lines[::2], lines[1::2]):
                cas = int(re.fullmatch(rb"VA \d+ c(\d+)", head).group(1))
                seen.append((int(value), cas))
        return seen

    for attempt in range(RACES):
        seen = sorted(p for ps in race(port, work) for p in ps)
        base = attempt * CLIENTS * ROUNDS
        assert [n for n, _ in seen] == list(range(base + 1, base + CLIENTS * ROUNDS + 1)), "an increment was lost"
        cas = [c for _, c in seen]
        assert cas == sorted(cas) and len(set(cas)) == len(cas), "a reply carried another increment's CAS value"


@pytest.mark.parametrize("which", ["memcached", "segcache"])
def test_racing_appends_and_explicit_cas_increments_lose_nothing(pair, which):
    port = pair[0 if which == "memcached" else 1].port
    Conn(port).ask(b"set race-app 0 0 1\r\n.\r\nset race-e 0 0 1\r\n0\r\n", 2)

    def work(conn: Conn, i: int) -> None:
        for r in range(ROUNDS // 3):
            assert conn.ask(b"append race-app 0 0 6\r\n%d:%04d\r\n" % (i, r)) == [b"STORED"]
            # (`E` is newer than the memcached Debian ships: there a plain `ma`.)
            e = b" E%d" % (1_000_000 + i * ROUNDS + r) if which == "segcache" else b""
            (reply,) = conn.ask(b"ma race-e%s\r\n" % e)
            assert reply == b"HD"

    race(port, work)
    c = Conn(port)
    head, value, end = c.ask(b"get race-app\r\n", 3)
    pieces = re.findall(rb"\d:\d{4}", value)
    assert sorted(pieces) == sorted(b"%d:%04d" % (i, r) for i in range(CLIENTS) for r in range(ROUNDS // 3))
    head, value, end = c.ask(b"get race-e\r\n", 3)
    assert int(value) == CLIENTS * (ROUNDS // 3)
