"""Real memcached client libraries against segcache-server, with memcached as the oracle.

Each client has a scenario: a small program in the client's language (this folder) that takes
`HOST:PORT` and prints one line per scripted step of what the client's user sees (see common.py
for the line format). Each test runs one scenario against a fresh memcached (`/usr/bin/memcached
-U 0`) and a fresh segcache-server (SEGCACHE_SERVER_BIN) and asserts
  1. the memcached run printed exactly expected/<client>.txt (so a scenario that does nothing, or
     a client that silently changed behaviour, cannot pass), and
  2. the segcache run printed the same lines.
`make test-clients` installs the clients and builds the Go and Java scenarios under target/clients
(CLIENTS_DIR); run it before this file. UPDATE_EXPECTED=1 rewrites the expected files from memcached.

A scenario in SASL_CLIENTS logs in: both servers are started with `-S` (SASL PLAIN over the
binary protocol) and the same user, memcached through Cyrus SASL (a sasldb, as
tests/server/test_auth.py makes it) and segcache-server through its MEMCACHED_SASL_PWDB file.

Features still being written elsewhere (the binary protocol, the meta flags h l I E R W X Z N,
`stats cachedump`) are probed first on both servers: a scenario that needs one segcache lacks is
skipped (whole, or only the sections that use it), the skip reason naming the feature and both
servers' replies to the probe. Once the feature lands the probe passes and the scenario runs.
Every other difference fails the test."""

import difflib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "server"))
from conftest import ROOT_USER  # noqa: E402 - tests/server's
from diffkit import MEMCACHED, free_port, start_memcached, start_segcache  # noqa: E402
from test_auth import USERS, make_sasldb, users_file  # noqa: E402
from test_auth import Proc as PortProc  # noqa: E402

TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
CLIENTS_DIR = Path(os.environ.get("CLIENTS_DIR", TARGET / "clients"))
SERVER_BIN = Path(os.environ.get("SEGCACHE_SERVER_BIN", TARGET / "release" / "segcache-server"))
PY = sys.executable
TIMEOUT = 120  # a scenario's whole run (normally a few seconds); each client's own timeouts are 5 s

# Probes for the features in progress: (request, the reply's first bytes that mean "supported",
# what the feature is). A feature is missing from segcache when memcached's reply starts with the
# marker and segcache's does not. (memcached 1.6.18 rejects E, so the oracle cannot cover it.)
PROBES = {
    "binary protocol": (bytes([0x80, 0x0B]) + bytes(22), b"\x81", "a binary VERSION request"),
    "meta flags h l": (b"ms pr/a 1\r\nx\r\nmg pr/a h l v\r\n", b"HD\r\nVA 1 ", "mg with h l"),
    "meta flags I W X Z": (b"ms pr/b 1\r\nx\r\nmd pr/b I T30\r\nmg pr/b v\r\n", b"HD\r\nHD\r\nVA 1 X W", "md I then mg"),
    "meta flag R": (b"ms pr/c 1 T10\r\nx\r\nmg pr/c R30 v\r\n", b"HD\r\nVA 1 W", "mg R under the TTL"),
    "meta flags N W Z": (b"mg pr/d N30 v\r\nmg pr/d N30 v\r\n", b"VA 0 W\r\n\r\nVA 0 Z", "mg N on a miss, twice"),
    "stats cachedump": (b"set pr/f 0 0 1\r\nx\r\nstats cachedump 1 0\r\n", b"STORED\r\nITEM ", "stats cachedump 1 0"),
}


SASL_LOGIN = ("alice", USERS["alice"])
SASL_CLIENTS = {"php-memcache-sasl"}
JAVA_CP = f"{CLIENTS_DIR}/java/lib/*:{CLIENTS_DIR}/java/classes"
# name -> (argv with {addr}, features the whole scenario needs, {section: features it needs})
META_SECTIONS = {"stale": ["meta flags I W X Z"], "recache": ["meta flags R"], "lease": ["meta flags N W Z"]}
CLIENTS = {
    "pymemcache": ([PY, "py_pymemcache.py", "{addr}"], [], {}),
    "pylibmc-text": ([PY, "py_pylibmc.py", "{addr}", "text"], [], {}),
    "pylibmc-binary": ([PY, "py_pylibmc.py", "{addr}", "binary"], ["binary protocol"], {}),
    "aiomcache": ([PY, "py_aiomcache.py", "{addr}"], [], {}),
    "emcache": ([PY, "py_emcache.py", "{addr}"], [], {}),
    "meta-memcache": ([PY, "py_meta_memcache.py", "{addr}"], ["meta flags h l"], META_SECTIONS),
    "dalli": (["ruby", "ruby/scenario.rb", "{addr}"], ["binary protocol"], {}),
    "php-memcached-text": (["php", "php/scenario.php", "{addr}", "text"], [], {"dump": ["stats cachedump"]}),
    "php-memcached-binary": (["php", "php/scenario.php", "{addr}", "binary"], ["binary protocol"], {}),
    "django-pylibmc": ([PY, "py_django.py", "{addr}"], [], {}),
    "php-memcache-text": (["php", "php/memcache.php", "{addr}", "text"], [], {}),
    "php-memcache-binary": (["php", "php/memcache.php", "{addr}", "binary"], ["binary protocol"], {}),
    "php-memcache-sasl": (["php", "php/memcache.php", "{addr}", "sasl", *SASL_LOGIN], ["binary protocol"], {}),
    "gomemcache": ([str(CLIENTS_DIR / "gomemcache-scenario"), "{addr}"], [], {}),
    "node-memcached": (["node", "node/scenario.js", "{addr}"], [], {"dump": ["stats cachedump"]}),
    "spymemcached-text": (["java", "-cp", JAVA_CP, "Scenario", "{addr}", "text"], [], {}),
    "spymemcached-binary": (["java", "-cp", JAVA_CP, "Scenario", "{addr}", "binary"], ["binary protocol"], {}),
}


def _talk(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(request)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
                if out.endswith(b"\r\n") or out[:1] == b"\x81" and len(out) >= 24:
                    s.settimeout(0.3)  # the rest of a multi-part reply comes at once
        except OSError:
            pass
        return out


def _servers():
    mc = start_memcached()
    try:
        sc = start_segcache(SERVER_BIN, [])
    except BaseException:
        mc.stop()
        raise
    return mc, sc


def _sasl_servers(tmp_path: Path):
    """memcached and segcache-server with -S and the users of test_auth.USERS; both answer
    nothing before a login, so only their ports are waited for."""
    (tmp_path / "sasl").mkdir()
    mc_env = make_sasldb(tmp_path / "sasl")
    sc_env = {**os.environ, "MEMCACHED_SASL_PWDB": str(users_file(tmp_path))}
    port = free_port()
    mc = PortProc("memcached", [MEMCACHED, "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "64", "-I", "1m",
                                "-t", "2", "-S", *ROOT_USER], port, mc_env)
    try:
        port = free_port()
        sc = PortProc("segcache-server", [str(SERVER_BIN), "-p", str(port), "-m", "1024", "-I", "1m", "--no-pin",
                                          "-S", *ROOT_USER], port, sc_env)
    except BaseException:
        mc.stop()
        raise
    return mc, sc


@pytest.fixture(scope="module")
def missing() -> dict[str, str]:
    """Features in progress that segcache-server lacks: name -> why (both servers' replies)."""
    assert SERVER_BIN.exists(), f"{SERVER_BIN} missing: cargo build --release -p segcache-server"
    mc, sc = _servers()
    try:
        found = {}
        for name, (request, marker, what) in PROBES.items():
            want, got = _talk(mc.port, request), _talk(sc.port, request)
            assert want.startswith(marker), f"probe {name}: memcached replied {want!r}"
            if not got.startswith(marker):
                found[name] = f"{name} (in progress): to {what} {request!r} memcached replies {want!r}, segcache-server {got!r}"
        return found
    finally:
        mc.stop()
        sc.stop()


def run_scenario(argv: list[str], port: int) -> list[str]:
    argv = [a.replace("{addr}", f"127.0.0.1:{port}") for a in argv]
    env = dict(os.environ, NODE_PATH=str(CLIENTS_DIR / "node" / "node_modules"), PYTHONDONTWRITEBYTECODE="1")
    try:
        r = subprocess.run(argv, cwd=HERE, env=env, capture_output=True, timeout=TIMEOUT)
        out, err, status = r.stdout, r.stderr, f"exit {r.returncode}" if r.returncode else None
    except subprocess.TimeoutExpired as e:  # a client that waits forever on a reply it did not expect
        out, err, status = e.stdout or b"", e.stderr or b"", f"timed out after {TIMEOUT} s"
    lines = out.decode(errors="replace").replace(str(port), "PORT").splitlines()
    if status:
        lines.append(status)
        lines += ["stderr: " + l for l in err.decode(errors="replace").replace(str(port), "PORT").splitlines()[-15:]]
    return lines


@pytest.mark.parametrize("name", list(CLIENTS))
def test_client(name: str, missing: dict[str, str], tmp_path: Path) -> None:
    argv, needs, section_needs = CLIENTS[name]
    mc, sc = _sasl_servers(tmp_path) if name in SASL_CLIENTS else _servers()
    try:
        want = run_scenario(argv, mc.port)
        expected_file = HERE / "expected" / f"{name}.txt"
        if os.environ.get("UPDATE_EXPECTED"):
            expected_file.parent.mkdir(exist_ok=True)
            expected_file.write_text("\n".join(want) + "\n")
        expected = expected_file.read_text().splitlines()
        diff = "\n".join(difflib.unified_diff(expected, want, "expected", "memcached", lineterm=""))
        assert want == expected, f"{name} against memcached:\n{diff}"
        lacking = [missing[f] for f in needs if f in missing]
        if lacking:
            pytest.skip("; ".join(lacking))
        got = run_scenario(argv, sc.port)
    finally:
        mc.stop()
        sc.stop()

    # Sections that need a feature segcache lacks are left out of the comparison.
    skipped = {s: [missing[f] for f in fs if f in missing] for s, fs in section_needs.items()}
    skipped = {s: why for s, why in skipped.items() if why}

    def kept(lines: list[str]) -> list[str]:
        return [l for l in lines if l.split(" ", 1)[0] not in skipped]

    diff = "\n".join(difflib.unified_diff(kept(want), kept(got), "memcached", "segcache-server", lineterm="", n=1))
    assert kept(got) == kept(want), f"{name}: what the user sees differs\n{diff}"
    if skipped and got != want:
        reasons = sorted({w for why in skipped.values() for w in why})
        pytest.skip(f"sections {sorted(skipped)} left out: " + "; ".join(reasons))
