"""Differential testing of segcache-server against memcached 1.6: a random command stream over a
small key space, sent to both servers, replies compared byte for byte after a few documented
normalisations (CAS numbers, TTL and last-access seconds, `me` details, the version string and
memcached's base64 key bit), with memcached bugs checked for and stepped around (its incr of a
number of 2^63 or more, or of a value of whitespace alone, reading stale memory, and `ma T` lost
when the result outgrows the item: see `big_number_quirk`, `blank_quirk`, `ttl_lost` and
docs/server.md).

Used by test_differential.py; also runnable by hand to replay or soak:

    SEGCACHE_DIFF_SEED=123 SEGCACHE_DIFF_OPS=200000 python tests/server/diffkit.py [-- server args]

(SEGCACHE_DIFF_KEYS and SEGCACHE_DIFF_PREFILL set `run_stream`'s `keys` and `prefill`, as
test_differential.py's STREAMS does for a configuration.)

To reduce a divergence: record a trace, then replay the ops of the keys involved (or all of
them, with --reduce to find the fewest that still diverge) to fresh servers:

    SEGCACHE_DIFF_TRACE=/tmp/t SEGCACHE_DIFF_SEED=123 python tests/server/diffkit.py
    python tests/server/diffkit.py replay /tmp/t --keys k3,k7 --upto 9820 [--reduce] [--show-from N]

Stdlib only (sockets, subprocess).
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

MEMCACHED = os.environ.get("SEGCACHE_MEMCACHED_BIN", "/usr/bin/memcached")
ITEM_MAX = 1 << 20  # -I 1m on both servers
# Exptime tokens as clients send them, beyond what fits a signed 32-bit number: memcached reads
# an exptime with strtol into 64 bits, then keeps the low 32 bits as a signed number (so 2^31 to
# 2^32-1 are negative: expired at once; 2^32 is 0: never; 2^32+100 is 100 s; 2^63-1 is -1), and
# refuses a number outside the 64-bit range. Django sends "forever" as 4294967295, PHP sends -1
# likewise.
BIG_EXPTIMES = ["2147483647", "2147483648", "4294967295", "4294967296", "4294967396",
                "9223372036854775807", "18446744073709551615", "100000000000000000000",
                "+100", "+4294967295", "000100", "0004294967396", "-4294967196"]
# Those memcached refuses (outside the 64-bit range): a text store's data line is then read as a
# command, and how a data line over 2048 bytes read as a command is framed is not this stream's
# business, so stores take only the others.
REFUSED_EXPTIMES = {"18446744073709551615", "100000000000000000000"}
# The command mixes (SEGCACHE_DIFF_MIX): every command, the text protocol's, the meta protocol's.
MIXES = ("all", "text", "meta")

KEYS = 24
# Keys only ever used by meta commands with `b` (base64): memcached remembers per item whether
# its key came in base64 and prints `k` accordingly, so these never meet a text command.
BKEYS = [base64.b64encode(f"bin/{i}".encode()).decode() for i in range(4)]
LONG_KEY = "x" * 251


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A server process on a free port (stderr to a file, so a chatty log cannot block it)."""

    def __init__(self, name: str, argv: list[str], port: int):
        self.name, self.port = name, port
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{name} exited with {self.proc.returncode}: {self.log.read()!r}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(b"version\r\n")
                    if s.recv(100).startswith(b"VERSION "):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not answer on port {port}")
            time.sleep(0.05)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_memcached(item_max: str = "1m", ext_path: str | None = None) -> Proc:
    """memcached 1.6 as the oracle; with `ext_path` (FILE:SIZE), extstore too."""
    port = free_port()
    argv = [MEMCACHED, "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "64", "-I", item_max, "-t", "2"]
    # No background LRU threads: the maintainer's asynchronous bumps and the crawler hold a
    # reference to an item for a while, and memcached writes an incr/decr result in place (space
    # padded) only when nothing else holds one; with them the padding came and went at random.
    opts = ["no_lru_maintainer", "no_lru_crawler"]
    if item_max != "1m":
        # memcached wants its slab chunk no larger than -I
        opts.append("slab_chunk_max=16384")
    if ext_path:
        opts.append(f"ext_path={ext_path}")
    argv += ["-o", ",".join(opts)]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    return Proc("memcached", argv, port)


def start_segcache(binary: str | os.PathLike, args: list[str]) -> Proc:
    port = free_port()
    limit = [] if "-I" in args else ["-I", "1m"]
    # A big heap, so that nothing is evicted: each shard keeps a segment open per TTL bucket in
    # use, and random TTLs fill a 64 MiB heap's few segments per shard long before memcached's
    # 64 MB. The stream compares semantics, not capacity (anonymous memory: pages untouched cost nothing).
    memory = [] if "-m" in args else ["-m", "1024"]
    # As memcached, the server refuses to run as root without -u.
    user = [] if "-u" in args or os.geteuid() != 0 else ["-u", "root"]
    argv = [str(binary), "-p", str(port), *memory, *limit, "--no-pin", *user, *args]
    return Proc("segcache-server", argv, port)


class Conn:
    """One connection; reads replies in units up to an `MN` line."""

    def __init__(self, port: int, name: str = "", trace=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buf = bytearray()
        self.name, self.trace = name, trace

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def side(self, data: bytes) -> list[bytes]:
        """Out-of-stream traffic (resync, workaround knobs): sends `data`, which ends with `mn`,
        and returns its reply segment; recorded in the trace as such."""
        self.send(data)
        units = self.segment()
        if self.trace:
            trace_write(self.trace, {"t": "aux", "server": self.name, "send": data, "reply": units})
        return units

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError(f"{self.name}: connection closed; pending {bytes(self.buf[:200])!r}")
        self.buf += chunk

    def line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return out
            self._fill()

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def replies(self, seg: list[Op]) -> list[bytes]:
        """The reply units to the ops of one segment, sent followed by `mn`: an `mn` op of the
        stream answers `MN` itself, which is kept as one of the units."""
        units = self.segment()
        for o in seg:
            if o.wire[self.name] == b"mn\r\n":
                units += [b"MN"] + self.segment()
        return units

    def segment(self) -> list[bytes]:
        """Reply units (a line, or a line with its data block) up to the next `MN`."""
        units = []
        while True:
            ln = self.line()
            if ln == b"MN":
                return units
            n = None
            if ln.startswith(b"VALUE "):
                n = int(ln.split(b" ")[3])
            elif ln.startswith(b"VA "):
                n = int(ln.split(b" ")[1])
            if n is not None:
                data = self.exactly(n + 2)
                units.append(ln + b"\r\n" + data)
            else:
                units.append(ln)


@dataclass(eq=False)
class Op:
    """One command as sent to each server (they differ only in CAS tokens)."""

    text: str  # readable form for reports
    wire: dict  # server name -> bytes
    keys: list[str] = field(default_factory=list)
    # Whether the reply may be empty in success (quiet / noreply), so several can share a segment.
    quiet: bool = False
    # Key whose CAS the reply's `c` flag (meta) reports.
    cas_key: str | None = None
    # Arithmetic: the value this key holds may carry memcached's space padding from now on.
    arith: bool = False
    # After a malformed command whose recovery differs by design: reconnect both.
    reconnect: bool = False
    # A retrieval with a key over 250 bytes: memcached 1.6.18 drops the reply of the command
    # just before it in the same read (docs/server.md), so it starts a segment (after an `mn`).
    own_segment: bool = False
    # A delayed flush: seconds during which nothing else is sent, so that no op lands where the
    # two servers' clocks may disagree on whether the flush has come due (see `Gen.flush`).
    settle: float = 0.0


CAS_RE = re.compile(rb"^(VALUE \S+ \d+ \d+) \d+")
META_CAS_RE = re.compile(rb" c\d+")
META_TTL_RE = re.compile(rb" t(\d+)")
META_LA_RE = re.compile(rb" l\d+")
META_B64_KEY_RE = re.compile(rb" k(\S+) b(?= |$)")
ME_RE = re.compile(rb"^ME (\S+) exp=(-?\d+) la=\d+ cas=\d+ fetch=(?:yes|no) .*$")


def plain_key(key: bytes) -> bytes:
    """`key` decoded if it is the base64 form of a printable key, else as it is."""
    try:
        decoded = base64.b64decode(key, validate=True)
    except ValueError:
        return key
    return decoded if decoded and all(33 <= c < 127 for c in decoded) else key


def normalise(unit: bytes, op: Op) -> bytes:
    head, sep, data = unit.partition(b"\r\n")
    head = CAS_RE.sub(rb"\1 <cas>", head)
    if head.startswith((b"HD", b"VA", b"EN", b"NF", b"NS", b"EX")):
        head = META_CAS_RE.sub(b" c<cas>", head)
        # memcached returns a hit's key base64-encoded (with `b`) only if the item was stored
        # through a base64 key; segcache keeps no such bit and encodes it when the request did
        # (docs/server.md): compare the key itself.
        head = META_B64_KEY_RE.sub(lambda m: b" k" + base64.b64decode(m.group(1)), head)
        # Seconds left: the engine rounds TTLs down to its bucket width, and a second may tick
        # between the two servers; only "never" (-1) versus "some" is compared.
        # An item that a past T expired on arrival is still returned this once; memcached then
        # reports its negative seconds left as an unsigned 32-bit number (2^32 - n, depending on
        # its uptime), segcache reports -1 (docs/server.md).
        head = META_TTL_RE.sub(lambda m: b" t-1" if int(m.group(1)) >= 1 << 31 else b" t<ttl>", head)
        # Seconds since the last access: both count from the last store or fetch, refreshed at
        # most once a minute, but a second may tick between the two servers.
        head = META_LA_RE.sub(b" l<s>", head)
    m = ME_RE.match(head)
    if m:
        # memcached's `me` reports its slab class and the item's size with its own header
        # (docs/server.md): compare the key and whether it expires. (Not `fetch`: in a long
        # stream memcached 1.6.18 now and then reports fetched an item that no command fetched
        # since it was stored; test_meta_state.py compares it on fresh servers.)
        # memcached names the key base64-encoded only if it was stored through a base64 key.
        head = b"ME " + plain_key(m.group(1)) + (b" exp=-1" if m.group(2) == b"-1" else b" exp=<ttl>")
    if head.startswith(b"VERSION "):
        head = b"VERSION <v>"
    if sep:
        # Values compare exactly, an incr/decr result's space padding included: this server
        # pads a shorter result to the old length as memcached does when it writes in place
        # (and memcached runs without the LRU threads that made it write a new item instead).
        body = data[:-2]
        return head + b"\r\n" + body
    return head


class Gen:
    """The random command stream. `tokens[name][key]` is the last CAS token `name` returned."""

    def __init__(self, rng: random.Random, names: list[str], item_max: int = ITEM_MAX, mix: str = "all",
                 keys: int = KEYS):
        assert mix in MIXES, f"mix {mix!r} is not one of {MIXES}"
        self.rng = rng
        self.keys = [f"k{i}" for i in range(keys)]
        self.names = names
        self.tokens: dict[str, dict[str, int]] = {n: {} for n in names}
        # the item limit (-I) both servers run with: an oversized store is a little over it
        self.item_max = item_max
        self.mix = mix
        # ops generated ahead as one scenario (a decr then an `ma` on its padded result)
        self.queued: deque = deque()

    # --- pieces ---------------------------------------------------------------------------

    def key(self) -> str:
        return self.rng.choice(self.keys)

    def flags(self) -> int:
        r = self.rng.random()
        if r < 0.55:
            return 0
        return self.rng.choice([1, 2, 7, 0xFFFF, 0xFFFFFFFF, self.rng.randrange(1, 1 << 32)])

    def value(self, flags: int) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            v = rng.choice(
                [b"0", b"1", b"5", b"9", b"10", b"99", b"100", b"12345", b"18446744073709551615",
                 b"18446744073709551614", b"007", b"5 ", b"abc", b"-3", b"1x", b""]
            )
        else:
            # Lengths chosen so that a value of n bytes with flags 0 and one of n-4 with flags
            # set make records of equal size (4-byte header, 4 bytes of flags only when != 0).
            n = rng.choice([4, 5, 6, 8, 9, 12, 16, 20, 33, 64, 100, 250, 600, 2000, 9000])
            if flags:
                n -= 4
            alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789"
            if rng.random() < 0.1:
                v = bytes(rng.randrange(256) for _ in range(n))
            else:
                v = bytes(rng.choice(alphabet) for _ in range(n))
        return v

    def exptime(self, refused: bool = True) -> int | str:
        """An exptime token; `refused`: possibly one that memcached refuses."""
        rng = self.rng
        r = rng.random()
        now = int(time.time())
        if r < 0.45:
            return 0
        if r < 0.5:
            return rng.choice([e for e in BIG_EXPTIMES if refused or e not in REFUSED_EXPTIMES])
        if r < 0.75:
            return self.seconds()
        if r < 0.83:
            return rng.choice([-1, -1000, -2147483648])
        if r < 0.9:
            return now - rng.randrange(100, 100_000)  # absolute, in the past
        return now + self.seconds()  # absolute, in the future

    def seconds(self) -> int:
        """A TTL in seconds, from a few that fall in TTL buckets of each width: the engine keeps
        a segment open per TTL bucket in use in each shard, and thousands of distinct TTLs
        would make it evict (capacity, not semantics: the run checks it evicted nothing)."""
        return self.rng.choice([1500, 1501, 5000, 40_000, 90_000])

    def cas_for(self, key: str) -> dict[str, int]:
        """Each server's own last token for `key`; sometimes a stale or bogus one for all."""
        r = self.rng.random()
        if r < 0.15:
            # (never a token either server hands out in a run: memcached's count from 1)
            bogus = self.rng.choice([0, 999_999_999, 1 << 40, (1 << 64) - 1])
            return {n: bogus for n in self.names}
        return {n: self.tokens[n].get(key, 0) for n in self.names}

    def same(self, text: str, **kw) -> Op:
        b = text.encode("latin-1")
        return Op(text=text, wire={n: b for n in self.names}, **kw)

    # --- commands -------------------------------------------------------------------------

    def op(self) -> Op:
        if self.queued:
            return self.queued.popleft()
        rng = self.rng
        r = rng.random()
        table = [
            (0.16, self.store),
            (0.08, self.cas),
            (0.12, self.get),
            (0.05, self.gat),
            (0.04, self.touch),
            (0.08, self.arith),
            (0.05, self.delete),
            (0.14, self.mg),
            (0.11, self.ms),
            (0.04, self.md),
            (0.06, self.ma),
            (0.02, self.me),
            (0.03, self.malformed),
            (0.002, self.flush),
            (0.00005, self.flush_later),
            (0.005, self.misc),
            (0.003, self.too_large),
            (0.01, self.padded),
        ]
        if self.mix != "all":
            table = [(w, f) for w, f in table if self.mix in self.PROTOCOL[f.__name__]]
        total = sum(w for w, _ in table)
        r *= total
        for w, f in table:
            if r < w:
                return f()
            r -= w
        return self.get()

    # Which mixes each generator belongs to.
    PROTOCOL = {
        "store": "text", "cas": "text", "get": "text", "gat": "text", "touch": "text",
        "arith": "text", "delete": "text", "malformed": "text meta", "flush": "text meta",
        "flush_later": "text meta",
        "misc": "text meta", "too_large": "text meta", "padded": "text meta",
        "mg": "meta", "ms": "meta", "md": "meta", "ma": "meta", "me": "meta",
    }

    def padded(self) -> Op:
        """A number whose decrement memcached writes in place, space padded to the old length,
        then arithmetic (`ma` or incr/decr) or append/prepend on the padded value, then a read:
        queued as separate ops (each arithmetic op is alone on its key in its write, see
        `splits`)."""
        rng = self.rng
        key = self.key()
        text = self.mix != "meta"
        meta = self.mix != "text"
        number = rng.choice(["510", "60000", "99999", "1000000", "18446744073709551615"])
        delta = rng.choice(["1", "500", "59940", str(int(number) - 1), "18446744073709551615"])
        if text and (not meta or rng.random() < 0.5):
            first = self.same(f"set {key} 0 0 {len(number)}\r\n{number}\r\n", keys=[key])
            dec = self.same(f"decr {key} {delta}\r\n", keys=[key], arith=True)
        else:
            first = self.same(f"ms {key} {len(number)}\r\n{number}\r\n", keys=[key])
            dec = self.same(f"ma {key} MD D{delta} v\r\n", keys=[key], arith=True)
        nexts = []
        if meta:
            nexts += [self.same(f"ma {key} {rng.choice(['', 'MI', 'MD', 'N0 MI', 'MI D1000000'])} v\r\n"
                                .replace("  ", " "), keys=[key], arith=True)]
        if text:
            nexts += [self.same(f"incr {key} {rng.choice([1, 9, 1000000])}\r\n", keys=[key], arith=True),
                      self.same(f"prepend {key} 0 0 2\r\nZd\r\n", keys=[key]),
                      self.same(f"append {key} 0 0 1\r\n7\r\n", keys=[key])]
        read = self.same(f"mg {key} s v\r\n" if meta else f"get {key}\r\n", keys=[key])
        self.queued.extend([dec, rng.choice(nexts), read])
        return first

    def store(self) -> Op:
        rng = self.rng
        kind = rng.choice(["set", "set", "set", "add", "replace", "append", "prepend"])
        key, flags = self.key(), self.flags()
        data = self.value(flags)
        noreply = rng.random() < 0.15
        line = f"{kind} {key} {flags} {self.exptime(refused=False)} {len(data)}" + (" noreply" if noreply else "")
        wire = (line + "\r\n").encode() + data + b"\r\n"
        return Op(text=f"{line} <{data[:40]!r}>", wire={n: wire for n in self.names}, keys=[key],
                  quiet=noreply)

    def cas(self) -> Op:
        rng = self.rng
        key, flags = self.key(), self.flags()
        data = self.value(flags)
        exp = self.exptime(refused=False)
        noreply = rng.random() < 0.1
        toks = self.cas_for(key)
        wire, text = {}, ""
        for n in self.names:
            line = f"cas {key} {flags} {exp} {len(data)} {toks[n]}" + (" noreply" if noreply else "")
            wire[n] = (line + "\r\n").encode() + data + b"\r\n"
            text = f"cas {key} {flags} {exp} {len(data)} <own token> {'noreply' if noreply else ''} <{data[:40]!r}>"
        return Op(text=text, wire=wire, keys=[key], quiet=noreply)

    def get(self) -> Op:
        rng = self.rng
        cmd = rng.choice(["get", "gets"])
        keys = [self.key() for _ in range(rng.choice([1, 1, 1, 2, 3, 5]))]
        return self.same(f"{cmd} {' '.join(keys)}\r\n", keys=keys)

    def gat(self) -> Op:
        rng = self.rng
        cmd = rng.choice(["gat", "gats"])
        keys = [self.key() for _ in range(rng.choice([1, 1, 2]))]
        return self.same(f"{cmd} {self.exptime()} {' '.join(keys)}\r\n", keys=keys)

    def touch(self) -> Op:
        key = self.key()
        noreply = self.rng.random() < 0.2
        return self.same(f"touch {key} {self.exptime()}{' noreply' if noreply else ''}\r\n",
                         keys=[key], quiet=noreply)

    def arith(self) -> Op:
        rng = self.rng
        key = self.key()
        delta = rng.choice([0, 1, 1, 2, 7, 100, 1 << 32, (1 << 64) - 1])
        noreply = rng.random() < 0.15
        cmd = rng.choice(["incr", "decr"])
        return self.same(f"{cmd} {key} {delta}{' noreply' if noreply else ''}\r\n",
                         keys=[key], quiet=noreply, arith=True)

    def delete(self) -> Op:
        rng = self.rng
        key = self.key()
        tail = rng.choice(["", "", " noreply", " 0", " 0 noreply"])
        return self.same(f"delete {key}{tail}\r\n", keys=[key], quiet="noreply" in tail)

    def _meta_flags(self, pool: list[str], k: int) -> list[str]:
        picked = self.rng.sample(pool, min(k, len(pool)))
        return picked

    def _opaque(self) -> str:
        return "O" + self.rng.choice(["1", "123", "abc", "x" * 31, str(self.rng.randrange(1 << 30))])

    def _meta_key(self) -> tuple[str, str, bool]:
        """(key as sent, key as stored, base64?)"""
        if self.rng.random() < 0.12:
            k = self.rng.choice(BKEYS)
            return k, base64.b64decode(k).decode(), True
        k = self.key()
        return k, k, False

    def mg(self) -> Op:
        rng = self.rng
        sent, key, b = self._meta_key()
        # (`h` is compared by test_meta_state.py: in a long stream, memcached 1.6.18 now and then
        # reports an item fetched that no command fetched since it was stored; see also md.)
        pool = ["c", "f", "k", "s", "t", "v", "q", "u", "O", "T", "N", "l", "R"]
        if b:
            pool.remove("N")  # memcached: a vivified item forgets its key was base64
        flags = self._meta_flags(pool, rng.randrange(0, 6))
        # R: a recache window below every TTL the stream gives, or above them all (TTLs are
        # rounded to a bucket width: docs/server.md).
        flags = [self._opaque() if f == "O" else f"T{self.exptime()}" if f == "T"
                 else f"N{rng.choice([self.seconds(), self.seconds(), rng.choice(BIG_EXPTIMES)])}" if f == "N" else f"R{rng.choice([30, 1_000_000])}" if f == "R"
                 else f for f in flags]
        if b:
            flags.insert(rng.randrange(len(flags) + 1), "b")
        return self.same(f"mg {sent} {' '.join(flags)}".rstrip() + "\r\n", keys=[key],
                         cas_key=key if "c" in flags else None)

    def ms(self) -> Op:
        rng = self.rng
        sent, key, b = self._meta_key()
        client_flags = self.flags()
        data = self.value(client_flags)
        pool = ["c", "k", "q", "O", "T", "F", "M", "C"]
        flags = self._meta_flags(pool, rng.randrange(0, 5))
        mode = rng.choice(["S", "S", "E", "A", "P", "R"])
        out, has_cas = [], False
        for f in flags:
            if f == "O":
                out.append(self._opaque())
            elif f == "T":
                out.append(f"T{self.exptime()}")
            elif f == "F":
                out.append(f"F{client_flags}")
            elif f == "M":
                out.append(f"M{mode}")
            elif f == "C":
                out.append("C<cas>")
                has_cas = True
            else:
                out.append(f)
        if "F" not in flags and client_flags:
            # the value length was chosen for these flags: keep the layout they imply
            out.append(f"F{client_flags}")
        if b:
            out.insert(rng.randrange(len(out) + 1), "b")
        toks = self.cas_for(key) if has_cas else {}
        wire = {}
        for n in self.names:
            line = f"ms {sent} {len(data)} {' '.join(out)}".rstrip()
            if has_cas:
                line = line.replace("C<cas>", f"C{toks[n]}")
            wire[n] = (line + "\r\n").encode() + data + b"\r\n"
        text = f"ms {sent} {len(data)} {' '.join(out)} <{data[:40]!r}>"
        return Op(text=text, wire=wire, keys=[key], quiet="q" in flags,
                  cas_key=key if "c" in flags else None)

    def md(self) -> Op:
        rng = self.rng
        sent, key, b = self._meta_key()
        # (`I` is compared by test_meta_state.py: in a long stream, memcached 1.6.18 now and then
        # reports a token sent (Z) for an item invalidated since, which no request took.)
        pool = ["k", "q", "O", "C", "T"]
        flags = list(dict.fromkeys(self._meta_flags(pool, rng.randrange(0, 5))))
        has_cas = "C" in flags
        out = [self._opaque() if f == "O" else "C<cas>" if f == "C" else f"T{self.seconds()}" if f == "T"
               else f for f in flags]
        if b:
            out.insert(rng.randrange(len(out) + 1), "b")
        toks = self.cas_for(key) if has_cas else {}
        wire = {}
        for n in self.names:
            line = f"md {sent} {' '.join(out)}".rstrip()
            if has_cas:
                line = line.replace("C<cas>", f"C{toks[n]}")
            wire[n] = (line + "\r\n").encode()
        return Op(text=f"md {sent} {' '.join(out)}", wire=wire, keys=[key], quiet="q" in flags)

    def ma(self) -> Op:
        rng = self.rng
        sent, key, b = self._meta_key()
        pool = ["N", "J", "D", "T", "M", "O", "q", "t", "c", "v", "k", "C"]
        if b:
            pool.remove("N")
        flags = self._meta_flags(pool, rng.randrange(0, 6))
        out, has_cas = [], False
        for f in flags:
            if f == "N":
                out.append(f"N{rng.choice([self.seconds(), self.seconds(), rng.choice(BIG_EXPTIMES)])}")
            elif f == "J":
                out.append(f"J{rng.choice([0, 1, 13, 1 << 40])}")
            elif f == "D":
                out.append(f"D{rng.choice([0, 1, 3, 1000, (1 << 64) - 1])}")
            elif f == "T":
                out.append(f"T{rng.choice([0, self.seconds(), rng.choice(BIG_EXPTIMES)])}")
            elif f == "M":
                out.append("M" + rng.choice("I+D-"))
            elif f == "O":
                out.append(self._opaque())
            elif f == "C":
                out.append("C<cas>")
                has_cas = True
            else:
                out.append(f)
        if b:
            out.insert(rng.randrange(len(out) + 1), "b")
        toks = self.cas_for(key) if has_cas else {}
        wire = {}
        for n in self.names:
            line = f"ma {sent} {' '.join(out)}".rstrip()
            if has_cas:
                line = line.replace("C<cas>", f"C{toks[n]}")
            wire[n] = (line + "\r\n").encode()
        return Op(text=f"ma {sent} {' '.join(out)}", wire=wire, keys=[key],
                  quiet="q" in flags, cas_key=key if "c" in flags else None, arith=True)

    def me(self) -> Op:
        sent, key, b = self._meta_key()
        return self.same(f"me {sent}{' b' if b else ''}\r\n", keys=[key])

    def flush(self) -> Op:
        tail = self.rng.choice(["", " 0", " noreply", " 0 noreply", " -1", " 4294967295", " 4294967296 noreply"])
        return self.same(f"flush_all{tail}\r\n", quiet="noreply" in tail)

    def flush_later(self) -> Op:
        """A delayed flush (rare: the stream waits it out). memcached's comes due at a tick of
        its own once-a-second clock, whose phase is set by when it started: between delay-2 and
        delay-1 s from now, and it hides the items stored until its next tick; this server's at
        the wall clock's second, between delay-1 and delay s from now. Which of the two removes
        an item stored in between depends on those phases alone (two memcached processes
        disagree there too, see test_compat.py), so nothing else is sent until both are due."""
        delay, tail = self.rng.choice([(1, "1"), (2, "2"), (2, "2 noreply"), (2, "4294967298")])
        op = self.same(f"flush_all {tail}\r\n", quiet="noreply" in tail)
        op.settle = delay + 0.3
        return op

    def misc(self) -> Op:
        return self.same(self.rng.choice(["verbosity 0\r\n", "verbosity 0 noreply\r\n", "version\r\n",
                                          "verbosity noreply\r\n", "mn\r\n"]))

    def too_large(self) -> Op:
        rng = self.rng
        key = self.key()
        # a little over the limit: too large for either server, whatever its item header
        data = b"z" * (self.item_max + rng.choice([1, 100, 5000]))
        if self.mix == "text" or (self.mix == "all" and rng.random() < 0.5):
            kind = rng.choice(["set", "set", "add", "replace", "append"])
            noreply = rng.random() < 0.3
            line = f"{kind} {key} 0 0 {len(data)}" + (" noreply" if noreply else "")
        else:
            kind = "ms"
            noreply = False
            sent, key, b = self._meta_key()
            line = f"ms {sent} {len(data)}" + rng.choice(["", " q", " T0", " MS k"]) + (" b" if b else "")
        wire = (line + "\r\n").encode() + data + b"\r\n"
        return Op(text=f"{line} <{len(data)} bytes>", wire={n: wire for n in self.names}, keys=[key],
                  quiet=noreply)

    def malformed(self) -> Op:
        rng = self.rng
        k = self.key()
        cases = [
            # bad numbers
            f"set {k} x 0 1\r\na\r\n",
            f"set {k} 0 0 -1\r\n",
            f"set {k} 0 x 1 noreply\r\na\r\n",
            f"set {k} 0 18446744073709551615 1\r\na\r\n",
            f"touch {k} 100000000000000000000\r\n",
            f"cas {k} 0 0 1 x\r\na\r\n",
            f"incr {k} x\r\n",
            f"incr {k} -1\r\n",
            f"incr {k} x noreply\r\n",
            f"decr {k} 18446744073709551616\r\n",
            f"touch {k} x\r\n",
            f"touch {k} x noreply\r\n",
            f"gat x {k}\r\n",
            f"verbosity x\r\n",
            f"flush_all x\r\n",
            f"flush_all x noreply\r\n",
            # token counts
            f"set {k} 0 0\r\n",
            f"set {k} 0 0 1 extra noreply\r\na\r\n",
            f"set {k} 0 0 1 2 3\r\na\r\n",
            f"set {k} 0 0 1 extra\r\na\r\n",
            f"cas {k} 0 0 1\r\na\r\n",
            # (a token neither server hands out: memcached's first item has CAS 1)
            f"cas {k} 0 0 1 999999999 extra\r\na\r\n",
            f"incr {k}\r\n",
            f"incr {k} 1 extra\r\n",
            f"incr {k} 1 2 3\r\n",
            f"touch {k} 86400 extra\r\n",  # (a long TTL: memcached ignores the extra token)
            f"delete {k} 10\r\n",
            f"delete {k} 10 noreply\r\n",
            f"delete {k} 0 0 0\r\n",
            f"delete {k} x noreply\r\n",
            "delete\r\n",
            "get\r\n",
            "gat 1\r\n",
            "verbosity\r\n",
            "verbosity 1 2 3\r\n",
            "flush_all 0 0 0\r\n",
            "bogus\r\n",
            "bogus noreply\r\n",
            "\r\n",
            # missing / bad data
            f"set {k} 0 0 1\r\nabc\r\n",
            f"set {k} 0 0 1 noreply\r\nabc\r\n",
            f"ms {k} 1\r\nabc\r\n",
            f"ms {k} 1 q\r\nabc\r\n",
            f"ms {k} x\r\na\r\n",
            f"ms {k}\r\n",
            # key too long (not on storage commands: see docs/server.md)
            f"get {LONG_KEY}\r\n",
            f"delete {LONG_KEY}\r\n",
            f"delete {LONG_KEY} noreply\r\n",
            f"incr {LONG_KEY} 1\r\n",
            f"touch {LONG_KEY} 1\r\n",
            f"mg {LONG_KEY} v\r\n",
            f"md {LONG_KEY}\r\n",
            f"ma {LONG_KEY}\r\n",
            # meta flags
            f"mg {k} v v\r\n",
            f"mg {k} zz\r\n",
            f"mg {k} Tx\r\n",
            f"mg {k} F5 C3 v\r\n",
            f"md {k} v s\r\n",
            f"md {k} k k\r\n",
            f"md {k} Cx\r\n",
            f"ma {k} MX\r\n",
            f"ma {k} Dx\r\n",
            f"ma {k} Jx\r\n",
            f"ma {k} q q\r\n",
            f"ms {k} 1 MX\r\na\r\n",
            f"ms {k} 1 Fx\r\na\r\n",
            f"ms {k} 1 Tx\r\na\r\n",
            f"ms {k} 1 c c\r\na\r\n",
            f"mg {k} O{'y' * 33}\r\n",
            "mg\r\n",
            "me\r\n",
        ]
        text = rng.choice(cases)
        # ("incr k 1 extra": both servers ignore the extra token and do the arithmetic)
        arith = re.match(r"(incr|decr) \S+ \d+ ", text) is not None
        return self.same(text, keys=[k], quiet=True, arith=arith,
                         own_segment=text.startswith(f"get {LONG_KEY}"))


def size_arg(text: str) -> int:
    """A size as -I takes it: bytes, or with a k or m suffix."""
    scale = {"k": 1 << 10, "m": 1 << 20}.get(text[-1:].lower(), 1)
    return int(text[:-1] if scale > 1 else text) * scale


def run_stream(segcache_bin, seg_args: list[str], seed: int, ops: int, log=print,
               keep_going: bool = False, mix: str = "all", keys: int = KEYS, prefill: int = 0) -> dict:
    """Runs `ops` random operations against memcached and segcache-server; returns counts.
    Raises AssertionError with a replayable report at the first divergence (unless keep_going).
    `mix`: every command (`all`), the text protocol's only (`text`) or the meta protocol's.
    `keys`: how many keys the stream uses; `prefill`: each is first set to a value of that many
    bytes (0: none), so that a small heap starts full and evicts (to a flash tier, if any)."""
    rng = random.Random(seed)
    item_max = seg_args[seg_args.index("-I") + 1] if "-I" in seg_args else "1m"
    # memcached's largest slab chunk (see start_memcached): a bigger item is chunked
    chunk_max = 512 * 1024 if item_max == "1m" else 16384
    # A flash tier on segcache's side: extstore on memcached's, in a file beside it.
    tier = next((m.group(1) for a in seg_args for m in [re.search(r"ext_path=([^,]+)", a)] if m), None)
    mc = start_memcached(item_max, tier and re.sub(r":([^:]+)$", r".memcached:\1", tier))
    try:
        sc = start_segcache(segcache_bin, seg_args)
    except Exception:
        mc.stop()
        raise
    procs = {"memcached": mc, "segcache": sc}
    names = list(procs)
    trace_path = os.environ.get("SEGCACHE_DIFF_TRACE")
    trace = open(trace_path, "w", encoding="latin-1") if trace_path else None
    if trace:
        trace_write(trace, {"t": "start", "seed": seed, "args": seg_args})
    conns = {n: Conn(p.port, n, trace) for n, p in procs.items()}
    gen = Gen(rng, names, size_arg(item_max), mix, keys)
    history: deque = deque(maxlen=20)
    diffs = []
    done = 0
    quirks = blank_quirks = ttl_fixes = 0

    def report(done: int, replies: dict, why: str = "") -> None:
        msg = (
            f"divergence at op {done} (seed {seed}, segcache args {seg_args}; replay with "
            f"SEGCACHE_DIFF_SEED={seed}){why}\n  last commands:\n    "
            + "\n    ".join(history)
            + f"\n  memcached: {replies['memcached']!r}\n  segcache:  {replies['segcache']!r}"
            + "\n  (SEGCACHE_DIFF_TRACE=FILE records every op's wire bytes and replies; "
            "`diffkit.py replay FILE --keys K --upto N [--reduce]` replays them)"
        )
        msg += "\n  segcache-server: " + engine_stats(sc.port)
        if not keep_going:
            raise AssertionError(msg)
        diffs.append(msg)
        log(msg)

    def run_batch(batch: list[list[Op]], done: int) -> int:
        nonlocal quirks, blank_quirks, ttl_fixes
        # memcached's incr/decr on a number of 2^63 or more may answer "non-numeric", and on a
        # value of whitespace alone may find a number, depending on stale bytes after the value
        # (see `big_number_quirk`, `blank_quirk`): read such values first.
        values = arith_values(batch, conns["memcached"])
        exposed = big_numbers(values)
        blank = blanks(values)
        lost = ttl_lost(values)
        for n, c in conns.items():
            payload = b"".join(b"".join(o.wire[n] for o in seg) + b"mn\r\n" for seg in batch)
            c.send(payload)
        resync: set[str] = set()
        claimed: set[Op] = set()  # ops whose replies differed by memcached's quirk alone
        for seg in batch:
            replies = {n: c.replies(seg) for n, c in conns.items()}
            for o in seg:
                history.append(o.text.rstrip("\r\n"))
            done += len(seg)
            if trace:
                trace_segment(trace, done - len(seg) + 1, seg, replies)
            norm = {n: [normalise(u, seg[-1]) for u in r] for n, r in replies.items()}
            if norm["memcached"] != norm["segcache"]:
                if not big_number_quirk(norm, seg, exposed) and not blank_quirk(norm, seg, blank) \
                        and not chunked_check_order(norm, seg, values, chunk_max):
                    report(done, replies)
                    resync.update(k for o in seg for k in o.keys)
                    continue
                claimed.update(o for o in seg if o in exposed or o in blank)
            for o in seg:
                track(o, replies, gen)
        for n, c in conns.items():
            # every reply read, none early: the segments stay aligned with their ops
            assert not c.buf, f"{n}: replies past the batch's last `MN`: {bytes(c.buf[:200])!r}"
        for o, (stored, number) in exposed.items():
            k = o.keys[0]
            post = {n: value_of(c, k) for n, c in conns.items()}
            if post["memcached"] == post["segcache"] and o not in claimed:
                continue
            if value_of(conns["memcached"], k, raw=True) == stored \
                    and post["segcache"] == (None if expires_now(o) else arith_result(o, number)):
                # memcached refused it on a '-' after the number; this server did the arithmetic
                quirks += 1
                resync.add(k)
            else:
                report(done, post, f" in `{k}`'s value after `{o.text.strip()}` on {stored!r}")
                resync.add(k)
        for o, before in blank.items():
            k = o.keys[0]
            post = {n: value_of(c, k, raw=True) for n, c in conns.items()}
            if post["memcached"] == post["segcache"] and o not in claimed:
                continue
            if post["segcache"] == before and post["memcached"] != before:
                # memcached found a number in stale bytes; this server refused
                blank_quirks += 1
                resync.add(k)
            else:
                report(done, post, f" in `{k}`'s value after `{o.text.strip()}` on {before!r}")
                resync.add(k)
        for o, (ttl, number) in lost.items():
            k = o.keys[0]
            if k not in resync and value_of(conns["memcached"], k) == arith_result(o, number):
                # it succeeded: give memcached the TTL it lost
                conns["memcached"].side(f"mg {k} T{ttl.decode()}\r\nmn\r\n".encode())
                ttl_fixes += 1
        if any(o.reconnect for seg in batch for o in seg):
            for n in names:
                conns[n].close()
                conns[n] = Conn(procs[n].port, n, trace)
            if trace:
                trace_write(trace, {"t": "reconnect"})
        # after a divergence (keep going) or memcached's quirk: forget the key on both servers
        for k in resync:
            for n, c in conns.items():
                c.side(f"delete {k}\r\nmn\r\n".encode())
                gen.tokens[n].pop(k, None)
        return done

    try:
        for i, k in enumerate(gen.keys if prefill else []):
            value = (f"{k}:" * prefill).encode()[:prefill]
            for n, c in conns.items():
                assert c.side(f"set {k} {i} 0 {prefill}\r\n".encode() + value + b"\r\nmn\r\n") == [b"STORED"], n
        while done < ops:
            # A round: 1 to 12 operations, in one write unless an arithmetic op splits it (see
            # `splits`). Every operation ends its own reply segment with `mn`, except runs of
            # quiet ones (which may reply nothing) that share one, so `q`/`noreply` pipelines
            # are checked too.
            batches: list[list[list[Op]]] = [[]]
            for _ in range(rng.choice([1, 1, 2, 4, 8, 12])):
                op = gen.op()
                if splits(batches[-1], op):
                    batches.append([])
                batch = batches[-1]
                if batch and op.quiet and all(o.quiet and o.cas_key is None for o in batch[-1]) \
                        and op.cas_key is None and rng.random() < 0.6 \
                        and not op.own_segment:
                    batch[-1].append(op)
                else:
                    batch.append([op])
                if op.settle:
                    break
            for batch in batches:
                sent = time.monotonic()
                done = run_batch(batch, done)
                settle(batch, sent)
        for n, c in conns.items():
            c.send(b"mn\r\n")
            assert c.segment() == [] and not c.buf, f"{n}: replies out of step at the end"
        # An eviction would lose items memcached keeps: the comparison assumes none.
        figures = engine_stats(sc.port)
        assert " evictions=0 " in f" {figures} ", f"segcache-server evicted (raise -m?): {figures}"
    finally:
        if trace:
            trace.close()
        for c in conns.values():
            c.close()
        rc = sc.stop()
        mc.stop()
    if rc != 0:
        sc.log.seek(0)
        raise AssertionError(f"segcache-server exited with {rc}: {sc.log.read()[-2000:]!r}")
    return {"ops": done, "divergences": len(diffs), "engine": figures, "memcached_big_number_quirks": quirks,
            "memcached_blank_value_quirks": blank_quirks, "memcached_ma_ttl_fixes": ttl_fixes}


def engine_stats(port: int) -> str:
    """The segcache-server figures that tell whether the engine dropped items on its own."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"stats\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
    except OSError as e:
        return f"(stats: {e})"
    want = ("evictions", "engine_evicted_segments", "engine_expired_segments", "engine_merged_items",
            "engine_segments_total", "engine_segments_free", "curr_items", "get_extstore", "extstore_objects_written")
    stats = dict(ln.split(" ")[1:3] for ln in buf.decode().splitlines() if ln.startswith("STAT "))
    return " ".join(f"{k}={stats.get(k)}" for k in want if k in stats or not k.startswith(("get_ext", "extstore")))


def settle(batch: list[list[Op]], sent: float) -> None:
    """Waits out the settle time of a batch's delayed flush (see `Op.settle`), from `sent`."""
    wait = max((o.settle for seg in batch for o in seg), default=0.0)
    if wait:
        time.sleep(max(0.0, sent + wait - time.monotonic()))


def splits(batch: list[list[Op]], op: Op) -> bool:
    """Whether `op` must start a new batch: an arithmetic op is the only op on its key in its
    batch (no keyless op such as `flush_all` with it either), so that its key's value before and
    after the batch is its value before and after the op (see `big_numbers`)."""
    ops = [o for seg in batch for o in seg]
    keys = set(op.keys)
    if op.arith and any(not o.keys or keys & set(o.keys) for o in ops):
        return True
    return any(o.arith and (not op.keys or keys & set(o.keys)) for o in ops)


def value_of(conn: Conn, key: str, raw: bool = False) -> bytes | None:
    """The value `key` holds on `conn`'s server (`None`: a miss), spaces after a number left
    out unless `raw`."""
    units = conn.side(f"mg {key} v\r\nmn\r\n".encode())
    if not units or not units[0].startswith(b"VA "):
        return None
    body = units[0].split(b"\r\n", 1)[1][:-2]
    return body.rstrip(b" ") if not raw and re.fullmatch(rb"[0-9]+ *", body) else body


def arith_values(batch: list[list[Op]], mc: Conn) -> dict:
    """The values the keys of the batch's arithmetic ops hold in memcached, as stored (with any
    padding): op -> value, for the keys that hold one."""
    out = {}
    for seg in batch:
        for o in seg:
            if o.arith and o.keys:
                v = value_of(mc, o.keys[0], raw=True)
                if v is not None:
                    out[o] = v
    return out


def strtoull_number(v: bytes) -> bytes | None:
    """The number memcached's safe_strtoull reads from a value, as digits: C whitespace, an
    optional '+', digits, then the end of the value or whitespace (and anything after it).
    `None` where it reads none. Leading zeros are kept, as the value holds them."""
    space = b"[" + re.escape(C_SPACE) + b"]"
    m = re.match(space + rb"*\+?([0-9]+)(?:" + space + rb"|\Z)", v)
    return m.group(1) if m else None


def big_numbers(values: dict) -> dict:
    """Those of `values` (see `arith_values`) that memcached reads as a number from 2^63 to
    2^64-1, trailing bytes or not (op -> (the value as stored, the number))."""
    out = {}
    for o, v in values.items():
        n = strtoull_number(v)
        if n is not None and 1 << 63 <= int(n) < 1 << 64:
            out[o] = (v, n)
    return out


# What C's isspace() calls whitespace: strtoull skips it before the number.
C_SPACE = b" \t\n\v\f\r"


def blanks(values: dict) -> dict:
    """Those of `values` (see `arith_values`) made of whitespace alone (op -> the value)."""
    return {o: v for o, v in values.items() if v and not v.strip(C_SPACE)}


def meta_token(op: Op, flag: bytes) -> bytes | None:
    for t in op.wire["memcached"].split(b"\r\n")[0].split(b" ")[2:]:
        if t[:1] == flag:
            return t[1:]
    return None


def ttl_lost(values: dict) -> dict:
    """The `ma ... T` ops of `values` (see `arith_values`) whose result is longer than the value
    stored, any bytes after the number included: memcached then writes it to a new item, and
    applies T to the old one it replaced, so the TTL is lost (op -> (the T token, the number
    memcached read)). The intended semantics, which this server follows: T updates the TTL on
    success."""
    out = {}
    for o, v in values.items():
        ttl = meta_token(o, b"T") if o.wire["memcached"].startswith(b"ma ") else None
        number = strtoull_number(v)
        if ttl is not None and number is not None and int(number) < 1 << 64 \
                and len(arith_result(o, number)) > len(v):
            out[o] = (ttl, number)
    return out


def expires_now(op: Op) -> bool:
    """Whether a successful `ma` leaves its item expired: its T, read as memcached reads an
    exptime (a C long cut to 32 bits), is negative."""
    ttl = meta_token(op, b"T") if op.wire["memcached"].startswith(b"ma ") else None
    if ttl is None or not re.fullmatch(rb"[-+]?[0-9]+", ttl) or not -(1 << 63) <= int(ttl) < 1 << 63:
        return False
    return (int(ttl) + (1 << 31)) % (1 << 32) < 1 << 31


def arith_result(op: Op, value: bytes) -> bytes:
    """The value an incr/decr (text or `ma`) leaves on `value`."""
    toks = op.wire["memcached"].split(b"\r\n")[0].split(b" ")
    if toks[0] == b"ma":
        delta, incr = 1, True
        for t in toks[2:]:
            if t[:1] == b"D":
                delta = int(t[1:])
            elif t[:1] == b"M":
                incr = t[1:2] in (b"I", b"i", b"+")
    else:
        delta, incr = int(toks[2]), toks[0] == b"incr"
    v = int(value)
    return str((v + delta) % (1 << 64) if incr else max(v - delta, 0)).encode()


NON_NUMERIC = b"CLIENT_ERROR cannot increment or decrement non-numeric value"


def big_number_quirk(norm: dict, seg: list[Op], exposed: dict) -> bool:
    """Whether a segment's replies differ only in that memcached answered "non-numeric" to an
    incr/decr of a number of 2^63 or more that this server incremented: memcached 1.6.18's
    safe_strtoull then looks for a '-' with strchr, over the rest of the value after the number
    and on past it (not NUL terminated) into whatever bytes the item's memory held before, so its
    answer depends on bytes that are not the number, earlier items' among them (newer memcached
    looks only within the number, as this server does; docs/server.md). The values after the
    batch are then checked (memcached's unchanged, this server's the right result) before the
    key is forgotten."""
    return sum(o in exposed for o in seg) == 1 and refused_alone(norm["memcached"], norm["segcache"])


def blank_quirk(norm: dict, seg: list[Op], blank: dict) -> bool:
    """Whether a segment's replies differ only in that memcached did the arithmetic of an
    incr/decr on a value of whitespace alone, which this server refused as non-numeric:
    memcached's strtoull skips the whitespace and the item's "\r\n" after it and reads on into
    whatever bytes the item's memory held before, so it finds a number there or not depending on
    earlier, unrelated items (a fresh memcached refuses, as this server always does;
    docs/server.md). The values after the batch are then checked (this server's unchanged)
    before the key is forgotten."""
    return sum(o in blank for o in seg) == 1 and refused_alone(norm["segcache"], norm["memcached"])


def refused_alone(refused: list, did: list) -> bool:
    """Whether two servers' replies to a segment differ only in that the first answered
    "non-numeric" to one incr/decr where the second did the arithmetic: it answered the number
    (`ma`: `HD`/`VA`), or nothing (a quiet success)."""
    for i, u in enumerate(refused):
        if u != NON_NUMERIC:
            continue
        rest = refused[:i] + refused[i + 1:]
        if did == rest:
            return True
        if len(did) == len(refused) and did[:i] + did[i + 1:] == rest \
                and (re.fullmatch(rb"[0-9]+", did[i]) or did[i].startswith((b"HD", b"VA"))):
            return True
    return False


def chunked_check_order(norm: dict, seg: list[Op], values: dict, chunk_max: int) -> bool:
    """Whether a segment's replies differ only in that memcached answered "non-numeric" where
    this server answered `EX` to an `ma ... C<token>` on a non-numeric value too large for one
    memcached slab chunk: memcached refuses a chunked item as non-numeric before it compares
    the CAS, and compares the CAS first otherwise (as this server always does). Both refuse and
    change nothing."""
    ops = [o for o in seg if o in values]
    if len(ops) != 1:
        return False
    o, v = ops[0], values[ops[0]]
    token = meta_token(o, b"C") if o.wire["memcached"].startswith(b"ma ") else None
    if token in (None, b"0") or re.fullmatch(rb"[0-9]+ *", v):
        return False
    # memcached's item: header and CAS (56 bytes), key and NUL, value and "\r\n", flags
    if 56 + len(o.keys[0]) + 1 + len(v) + 2 + 4 < chunk_max - 32:
        return False
    mc, sc = norm["memcached"], norm["segcache"]
    diff = [i for i in range(len(mc)) if i >= len(sc) or mc[i] != sc[i]]
    return len(mc) == len(sc) and len(diff) == 1 and mc[diff[0]] == NON_NUMERIC \
        and sc[diff[0]].startswith(b"EX")


def track(op: Op, replies: dict, gen: Gen) -> None:
    """Records each server's CAS tokens."""
    for n, units in replies.items():
        for u in units:
            head = u.split(b"\r\n", 1)[0]
            if head.startswith(b"VALUE ") and len(head.split(b" ")) == 5:
                _, k, _, _, cas = head.split(b" ")
                gen.tokens[n][k.decode("latin-1")] = int(cas)
            elif op.cas_key is not None and head[:2] in (b"HD", b"VA"):
                m = re.search(rb" c(\d+)", head)
                if m:
                    gen.tokens[n][op.cas_key] = int(m.group(1))


# --- trace and replay ------------------------------------------------------------------------
#
# SEGCACHE_DIFF_TRACE=FILE writes one JSON object a line, bytes as latin-1 strings (exact):
#   {"t": "start", "seed", "args"}
#   {"t": "seg", "first": number of its first op, "ops": [{"text", "keys", "cas_key", ..., "wire":
#     {server: bytes sent}}], "reply": {server: [reply units]}}: one reply segment, that is, the
#     ops as they went on the wire (followed by `mn`) and everything each server answered to them;
#     several ops share a segment only when they are quiet (`q`/`noreply`), so a reply there
#     belongs to the one op of them that had something to say;
#   {"t": "aux", "server", "send", "reply"}: traffic outside the stream (resyncs, memcached's quirks);
#   {"t": "reconnect"}.


def _jsonable(v):
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def trace_write(trace, entry: dict) -> None:
    trace.write(json.dumps(_jsonable(entry)) + "\n")


def trace_segment(trace, first: int, seg: list[Op], replies: dict) -> None:
    ops = [{"text": o.text, "keys": o.keys, "cas_key": o.cas_key, "quiet": o.quiet, "arith": o.arith,
            "reconnect": o.reconnect, "settle": o.settle, "wire": o.wire} for o in seg]
    trace_write(trace, {"t": "seg", "first": first, "ops": ops, "reply": replies})


def load_trace(path) -> list[dict]:
    def unb(v):
        if isinstance(v, str):
            return v.encode("latin-1")
        if isinstance(v, dict):
            return {k: unb(x) for k, x in v.items()}
        return [unb(x) for x in v]

    out = []
    with open(path, encoding="latin-1") as f:
        for line in f:
            e = json.loads(line)
            if e["t"] == "seg":
                e["ops"] = [Op(text=o["text"], wire=unb(o["wire"]), keys=o["keys"], quiet=o["quiet"],
                               cas_key=o["cas_key"], arith=o["arith"],
                               reconnect=o["reconnect"], settle=o.get("settle", 0.0)) for o in e["ops"]]
                e["reply"] = {n: unb(r) for n, r in e["reply"].items()}
            elif e["t"] == "aux":
                e["send"], e["reply"] = unb(e["send"]), unb(e["reply"])
            out.append(e)
    return out


CAS_LINE_RE = re.compile(rb"^(cas \S+ \S+ \S+ \S+ )(\d+)")
META_C_RE = re.compile(rb"^(m[sda] .*? C)(\d+)")


def _with_token(wire: bytes, key: str | None, rec: dict, new: dict) -> bytes:
    """`wire` with a CAS token that was `key`'s current one in the recording replaced by the
    current one of the replay (stale and bogus tokens stay as they are)."""
    line, sep, rest = wire.partition(b"\r\n")
    for rx in (CAS_LINE_RE, META_C_RE):
        m = rx.match(line)
        if m and key is not None and rec.get(key) == int(m.group(2)) and key in new:
            line = m.group(1) + str(new[key]).encode() + line[m.end():]
    return line + sep + rest


class _Tokens:
    def __init__(self, names):
        self.tokens = {n: {} for n in names}


def replay(binary, path, keys: set[str] | None = None, upto: int | None = None, show_from: int = 0,
           seg_args: list[str] | None = None, out=print, only: set[int] | None = None) -> bool:
    """Replays a trace's ops (those naming one of `keys`, and the keyless ones such as
    `flush_all`, if given; up to op number `upto`) to a fresh memcached and segcache-server,
    segment by segment as recorded; CAS tokens are mapped to the ones the new servers hand out.
    Prints the exchanges from op `show_from` on (and any divergence); returns whether the last
    replayed segment diverges. `only`: replay just these op numbers (and no `aux` traffic)."""
    entries = load_trace(path) if isinstance(path, (str, os.PathLike)) else path
    start = entries[0] if entries and entries[0]["t"] == "start" else {"args": []}
    args = seg_args if seg_args is not None else start["args"]
    item_max = args[args.index("-I") + 1] if "-I" in args else "1m"
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.replace(os.path.dirname(a), tmp) if a.endswith(".seg") else a for a in args]
        mc = start_memcached(item_max)
        try:
            sc = start_segcache(binary, args)
        except Exception:
            mc.stop()
            raise
        procs = {"memcached": mc, "segcache": sc}
        names = list(procs)
        conns = {n: Conn(p.port, n) for n, p in procs.items()}
        rec, new = _Tokens(names), _Tokens(names)
        last_diverged = False
        try:
            for e in entries:
                if e["t"] == "aux":
                    if only is None and (keys is None or any(k.encode() in e["send"] for k in keys)):
                        conns[e["server"]].side(e["send"])
                    continue
                if e["t"] == "reconnect":
                    for n in names:
                        conns[n].close()
                        conns[n] = Conn(procs[n].port, n)
                    continue
                if e["t"] != "seg" or (upto is not None and e["first"] > upto):
                    continue
                picked = [(e["first"] + i, o) for i, o in enumerate(e["ops"])
                          if (upto is None or e["first"] + i <= upto)
                          and (keys is None or not o.keys or keys & set(o.keys))
                          and (only is None or e["first"] + i in only)]
                # tokens as the recording knew them before this segment
                before = {n: dict(rec.tokens[n]) for n in names}
                for o in e["ops"]:
                    track(o, e["reply"], rec)
                if not picked:
                    continue
                wires = {}
                for n in names:
                    parts = [_with_token(o.wire[n], o.keys[0] if o.keys else None, before[n], new.tokens[n])
                             for _, o in picked]
                    wires[n] = b"".join(parts) + b"mn\r\n"
                sent = time.monotonic()
                for n, c in conns.items():
                    c.send(wires[n])
                replies = {n: c.replies([o for _, o in picked]) for n, c in conns.items()}
                settle([[o for _, o in picked]], sent)
                last = picked[-1][1]
                norm = {n: [normalise(u, last) for u in r] for n, r in replies.items()}
                last_diverged = norm["memcached"] != norm["segcache"]
                if picked[0][0] >= show_from or last_diverged:
                    for i, o in picked:
                        same = o.wire["memcached"] == o.wire["segcache"]
                        out(f"[{i}] " + (_show(o.wire["memcached"]) if same else o.text))
                    for n in names:
                        out(f"    {n:9}: " + " | ".join(_show(u) for u in replies[n]))
                    if last_diverged:
                        out("    !! DIVERGES")
                for _, o in picked:
                    track(o, replies, new)
        finally:
            for c in conns.values():
                c.close()
            sc.stop()
            mc.stop()
    return last_diverged


def reduce(binary, path, upto: int, keys: set[str] | None = None, log=print) -> list[int]:
    """Delta debugging over the ops up to `upto` (those of `keys` if given): the fewest ops
    (always ending with op `upto`) whose replay still diverges at its last segment."""
    entries = load_trace(path)
    ops = [e["first"] + i for e in entries if e["t"] == "seg" for i, o in enumerate(e["ops"])
           if e["first"] + i < upto and (keys is None or not o.keys or keys & set(o.keys))]

    def diverges(sel: list[int]) -> bool:
        return replay(binary, entries, None, upto, 1 << 62, out=lambda *a: None, only=set(sel) | {upto})

    if not diverges(ops):
        raise AssertionError("the selected ops do not diverge when replayed")
    n = 2
    while ops:
        chunk = -(-len(ops) // n)
        for i in range(0, len(ops), chunk):
            rest = ops[:i] + ops[i + chunk:]
            if diverges(rest):
                ops, n = rest, max(n - 1, 2)
                log(f"reduce: {len(ops)} ops")
                break
        else:
            if chunk == 1:
                break
            n = min(len(ops), n * 2)
    return ops + [upto]


def _show(b: bytes, limit: int = 120) -> str:
    r = repr(b)[2:-1]
    return r if len(r) <= limit else r[:limit] + f"...({len(b)} bytes)"


def default_binary() -> Path:
    env = os.environ.get("SEGCACHE_SERVER_BIN")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[2]
    return Path(os.environ.get("CARGO_TARGET_DIR", root / "target")) / "release" / "segcache-server"


def replay_main(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="diffkit.py replay", description=replay.__doc__)
    ap.add_argument("trace")
    ap.add_argument("--keys", help="comma-separated keys (as stored: base64 keys decoded)")
    ap.add_argument("--upto", type=int, help="last op number to replay")
    ap.add_argument("--show-from", type=int, default=0, help="print exchanges from this op on")
    ap.add_argument("args", nargs="*", help="segcache-server args (after --; default: the trace's)")
    ap.add_argument("--reduce", action="store_true",
                    help="find the fewest ops before --upto that still diverge there, and show them")
    a = ap.parse_args(argv)
    keys = set(a.keys.split(",")) if a.keys else None
    only = None
    if a.reduce:
        only = set(reduce(default_binary(), a.trace, a.upto, keys))
        keys = None
    diverged = replay(default_binary(), a.trace, keys, a.upto, a.show_from, a.args or None, only=only)
    print("last segment diverges" if diverged else "last segment agrees")
    sys.exit(1 if diverged else 0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["replay"]:
        replay_main(sys.argv[2:])
        sys.exit(0)
    seed = int(os.environ.get("SEGCACHE_DIFF_SEED", random.randrange(1 << 32)))
    ops = int(os.environ.get("SEGCACHE_DIFF_OPS", "20000"))
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    t0 = time.monotonic()
    res = run_stream(default_binary(), args, seed, ops, keep_going=bool(os.environ.get("SEGCACHE_DIFF_KEEP_GOING")),
                     mix=os.environ.get("SEGCACHE_DIFF_MIX", "all"), keys=int(os.environ.get("SEGCACHE_DIFF_KEYS", KEYS)),
                     prefill=int(os.environ.get("SEGCACHE_DIFF_PREFILL", "0")))
    print(f"seed {seed}: {res} in {time.monotonic() - t0:.1f}s")
