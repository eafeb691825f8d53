"""Authentication and the command switches, against memcached 1.6 as the oracle: `-Y FILE` (the
text protocol's `set` of `user password` before anything else), `-S` (SASL PLAIN over the binary
protocol), `auth_cmds`/`auth_errors`, `-F`, `-X`, `-W`, and the refusals at start (the auth
file's permissions, -S/-Y with the other protocol, root without -u).

memcached and segcache-server get the same users: segcache-server reads `user:password` files
(-Y FILE, and MEMCACHED_SASL_PWDB for -S); Debian's memcached takes -Y FILE too, and for -S uses
Cyrus SASL, given here a sasldb written through libsasl2's own `sasl_setpass` (what saslpasswd2
does) and a config (SASL_CONF_PATH) that offers PLAIN only."""

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import ROOT_USER, free_port, server_binary
from diffkit import MEMCACHED

USERS = {"alice": "secret", "bob": "hunter2"}


class Proc:
    """A server that may answer nothing before authentication: waits for its port only."""

    def __init__(self, name: str, argv: list[str], port: int, env: dict | None = None):
        self.name, self.port = name, port
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{name} exited with {self.proc.returncode}: {self.log.read()!r}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                assert time.monotonic() < deadline, f"{name} did not listen on {port}"
                time.sleep(0.05)

    def connect(self) -> "Conn":
        return Conn(socket.create_connection(("127.0.0.1", self.port), timeout=5))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Conn:
    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError(f"closed; partial {self.buf!r}")
        self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n") + 2
        line, self.buf = self.buf[:i], self.buf[i:]
        return line

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def response(self) -> bytes:
        """One binary response, header and body."""
        head = self.exactly(24)
        return head + self.exactly(struct.unpack(">I", head[8:12])[0])

    def closed(self) -> bool:
        self.sock.settimeout(5)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


def users_file(tmp_path, mode: int = 0o600, text: str | None = None):
    f = tmp_path / "users"
    f.write_text(text if text is not None else "".join(f"{u}:{p}\n" for u, p in USERS.items()))
    f.chmod(mode)
    return f


def memcached(*args: str, env: dict | None = None) -> Proc:
    port = free_port()
    argv = [MEMCACHED, "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "2", *ROOT_USER, *args]
    return Proc("memcached", argv, port, env)


def segcache(*args: str, env: dict | None = None) -> Proc:
    port = free_port()
    argv = [str(server_binary()), "-p", str(port), "-t", "2", "--no-pin", *ROOT_USER, *args]
    return Proc("segcache-server", argv, port, env)


@pytest.fixture
def both():
    started = []

    def make(mc_args, sc_args, mc_env=None, sc_env=None):
        mc = memcached(*mc_args, env=mc_env)
        started.append(mc)
        sc = segcache(*sc_args, env=sc_env)
        started.append(sc)
        return mc, sc

    yield make
    for p in started:
        rc = p.stop()
        if p.name == "segcache-server":
            assert rc == 0, p.name


def converse(server: Proc, steps) -> list:
    """Runs `steps` on one new connection: (bytes to send, lines to read) or (bytes, "closed")."""
    c = server.connect()
    got = []
    try:
        for data, want in steps:
            c.send(data)
            if want == "closed":
                got.append(("closed", c.closed()))
            else:
                got.append(b"".join(c.line() for _ in range(want)))
    finally:
        c.close()
    return got


def same(mc: Proc, sc: Proc, steps) -> list:
    want, got = converse(mc, steps), converse(sc, steps)
    assert got == want, f"steps {steps!r}:\nmemcached {want!r}\nsegcache  {got!r}"
    return got


def auth_set(user: str, password: str, head: bytes = b"set x 0 0") -> bytes:
    value = f"{user} {password}".encode()
    return head + b" %d\r\n" % len(value) + value + b"\r\n"


def text_stats(server: Proc, c: Conn | None = None) -> dict:
    own = c is None
    c = c or server.connect()
    if own:
        c.send(auth_set("alice", "secret"))
        assert c.line() == b"STORED\r\n"
    c.send(b"stats\r\n")
    out = {}
    while (line := c.line()) != b"END\r\n":
        _, k, v = line.decode().split(" ", 2)
        out[k] = v.strip()
    if own:
        c.close()
    return out


# --- -Y: the text protocol's authentication -------------------------------------------------


def test_unauthenticated_commands_are_refused(tmp_path, both):
    f = users_file(tmp_path)
    mc, sc = both(["-Y", str(f)], ["-Y", str(f)])
    got = same(mc, sc, [
        (b"get foo\r\n", 1),
        (b"version\r\n", 1),
        (b"mg foo v\r\n", 1),
        (b"stats\r\n", 1),
        (b"flush_all\r\n", 1),
        (b"set x 0\r\n", 1),  # too few tokens for the auth set
        (b"set x 0 0 abc\r\n", 1),  # no size
        (b"setx x 0 0 12\r\n", 1),  # not `set`
        (b"add x 0 0 5\r\n", 1),  # not `set`
        (b"get\r\n", 1),
    ])
    assert set(got) == {b"CLIENT_ERROR unauthenticated\r\n"}
    # Nothing was run: the cache was not flushed and nothing counted.
    assert text_stats(sc)["cmd_flush"] == "0"


def test_wrong_password_then_the_right_one(tmp_path, both):
    f = users_file(tmp_path)
    mc, sc = both(["-Y", str(f)], ["-Y", str(f)])
    got = same(mc, sc, [
        (auth_set("alice", "wrong"), 1),
        (b"get foo\r\n", 1),
        (auth_set("alice", "hunter2"), 1),  # bob's password
        (auth_set("carol", "secret"), 1),  # no such user
        (auth_set("alice", "secre"), 1),  # a prefix
        (auth_set("alice", "secret2"), 1),  # longer
        (auth_set("alice", "secret", head=b"set anykey 5 100"), 1),
        (b"get foo\r\n", 1),
        (b"set k 0 0 1\r\nv\r\n", 1),
        (b"get k\r\n", 3),
        (b"version\r\n", 1),
    ])
    assert got[0] == got[2] == got[3] == got[4] == got[5] == b"CLIENT_ERROR authentication failure\r\n"
    assert got[1] == b"CLIENT_ERROR unauthenticated\r\n"
    assert got[6] == b"STORED\r\n" and got[7] == b"END\r\n" and got[9] == b"VALUE k 0 1\r\nv\r\nEND\r\n"


def test_auth_value_forms(tmp_path, both):
    f = users_file(tmp_path)
    mc, sc = both(["-Y", str(f)], ["-Y", str(f)])
    cases = [
        [(b"set x 0 0 5\r\nalice\r\n", 1)],  # one token: bad format
        [(b"set x 0 0 0\r\n\r\n", 1)],  # empty
        [(b"set x 0 0 12\r\nalice secret\n\n", 1), (b"get a\r\n", 1)],  # not ended by CRLF
        [(b"set x 0 0 1\r\nab\r\n", 1)],  # shorter than the value
        [(b"set x 0 0 13\r\nalice  secret\r\n", 1)],  # spaces collapse
        [(b"set x 0 0 19\r\nalice secret extra\r\n\r\n", 1)],  # extra tokens are ignored
        [(auth_set("bob", "hunter2", head=b"set  x  0  0"), 1)],
        [(b"set x 0 0 12 noreply\r\nalice secret\r\n", 1)],  # noreply: answered anyway
        # Pipelined: the auth set and what follows in one write.
        [(auth_set("alice", "secret") + b"get foo\r\nset k 0 0 1\r\nv\r\n", 3)],
        # Split: the line, then the value in two pieces.
        [(b"set x 0 0 12\r\n", 0), (b"alice se", 0), (b"cret\r\n", 1)],
    ]
    for steps in cases:
        same(mc, sc, steps)


def test_junk_without_a_newline_closes(tmp_path, both):
    f = users_file(tmp_path)
    mc, sc = both(["-Y", str(f)], ["-Y", str(f)])
    assert same(mc, sc, [(b"x" * 3000, "closed")]) == [("closed", True)]


def test_auth_stats(tmp_path, both):
    f = users_file(tmp_path)
    mc, sc = both(["-Y", str(f)], ["-Y", str(f)])
    steps = [
        (auth_set("alice", "nope"), 1),
        (b"set x 0 0 5\r\nalice\r\n", 1),  # bad format: not counted
        (auth_set("bob", "nope"), 1),
        (auth_set("bob", "hunter2"), 1),
    ]
    same(mc, sc, steps)
    for s in (mc, sc):
        c = s.connect()
        c.send(auth_set("alice", "secret"))
        assert c.line() == b"STORED\r\n"
        st = text_stats(s, c)
        c.close()
        assert (st["auth_cmds"], st["auth_errors"]) == ("4", "2"), s.name
    # memcached's place for them: after store_no_memory, before bytes_read.
    names = list(text_stats(sc))
    assert names.index("auth_cmds") == names.index("store_no_memory") + 1
    assert names.index("auth_errors") + 1 == names.index("bytes_read")
    for s in (mc, sc):
        c = s.connect()
        c.send(auth_set("alice", "secret") + b"stats settings\r\n")
        assert c.line() == b"STORED\r\n"
        st = {}
        while (line := c.line()) != b"END\r\n":
            _, k, v = line.decode().split(" ", 2)
            st[k] = v.strip()
        c.close()
        assert (st["auth_enabled_ascii"], st["auth_enabled_sasl"]) == (str(f), "no"), s.name
        assert st["binding_protocol"] == "ascii", s.name


def test_both_s_and_y_speak_text_with_the_file(tmp_path, both):
    """memcached with -S and -Y and no -B: the text protocol with the file; SASL goes unused."""
    f = users_file(tmp_path)
    d = tmp_path / "sasl"
    d.mkdir()
    mc_env = make_sasldb(d)  # memcached -S does not start without a SASL config
    mc, sc = both(["-S", "-Y", str(f)], ["-S", "-Y", str(f)], mc_env=mc_env,
                  sc_env={**os.environ, "MEMCACHED_SASL_PWDB": "/absent"})
    got = same(mc, sc, [(b"get k\r\n", 1), (auth_set("bob", "hunter2"), 1), (b"get k\r\n", 1)])
    assert got == [b"CLIENT_ERROR unauthenticated\r\n", b"STORED\r\n", b"END\r\n"]
    for s in (mc, sc):
        c = s.connect()
        c.send(auth_set("alice", "secret") + b"stats settings\r\n")
        assert c.line() == b"STORED\r\n"
        st = {}
        while (line := c.line()) != b"END\r\n":
            _, k, v = line.decode().split(" ", 2)
            st[k] = v.strip()
        c.close()
        assert (st["binding_protocol"], st["auth_enabled_sasl"], st["auth_enabled_ascii"]) == ("ascii", "yes", str(f))


def test_sighup_reloads_the_auth_file(tmp_path, both):
    f = users_file(tmp_path)
    mc, sc = both(["-Y", str(f)], ["-Y", str(f)])
    f.write_text("carol:pw\n")
    for s in (mc, sc):
        s.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    for s in (mc, sc):
        c = s.connect()
        while True:  # the reload is asynchronous: poll
            c.send(auth_set("carol", "pw"))
            if c.line() == b"STORED\r\n":
                break
            assert time.monotonic() < deadline, f"{s.name} did not reload"
            time.sleep(0.05)
        c.close()
    assert same(mc, sc, [(auth_set("alice", "secret"), 1)]) == [b"CLIENT_ERROR authentication failure\r\n"]
    # A file that cannot be used any more leaves the users as they were.
    f.write_text("nocolon\n")
    sc.proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    assert converse(sc, [(auth_set("carol", "pw"), 1)]) == [b"STORED\r\n"]
    assert sc.proc.poll() is None


def test_auth_file_is_checked_at_start(tmp_path):
    # Readable or writable by group or others: refused, with the fix (memcached does not check).
    for mode in (0o644, 0o640, 0o606):
        f = users_file(tmp_path, mode)
        r = subprocess.run([str(server_binary()), "-p", str(free_port()), *ROOT_USER, "-Y", str(f)],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode != 0 and f"chmod 600 {f}" in r.stderr, (oct(mode), r.stderr)
    # Malformed or missing: both refuse.
    bad = users_file(tmp_path, text="alice:secret\nnocolon\n")
    for path in (bad, tmp_path / "absent"):
        for argv in ([MEMCACHED, "-U", "0"], [str(server_binary())]):
            r = subprocess.run([*argv, "-p", str(free_port()), *ROOT_USER, "-Y", str(path)],
                               capture_output=True, text=True, timeout=10)
            assert r.returncode != 0, (argv, path)
        assert "malformed" in r.stderr or "could not open" in r.stderr, r.stderr


@pytest.mark.parametrize("args, words", [
    (["-S", "-B", "ascii"], "You cannot allow the ASCII protocol while using SASL"),
    (["-S", "-B", "auto"], "You cannot allow the ASCII protocol while using SASL"),
    (["-Y", "FILE", "-B", "binary"], "You cannot allow the BINARY protocol while using ascii authentication"),
])
def test_auth_and_the_other_protocol_are_refused(tmp_path, args, words):
    f = users_file(tmp_path)
    args = [str(f) if a == "FILE" else a for a in args]
    for argv in ([MEMCACHED, "-U", "0"], [str(server_binary())]):
        r = subprocess.run([*argv, "-p", str(free_port()), *ROOT_USER, *args], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode != 0 and words in r.stderr, (argv, r.stderr)


def test_root_needs_u():
    if os.geteuid() != 0:
        pytest.skip("only root is refused")
    for argv in ([MEMCACHED, "-U", "0"], [str(server_binary())]):
        r = subprocess.run([*argv, "-p", str(free_port())], capture_output=True, text=True, timeout=10)
        assert r.returncode == 64 and "can't run as root without the -u switch" in r.stderr, (argv, r.stderr)


# --- -S: SASL PLAIN over the binary protocol ------------------------------------------------


def bin_req(op: int, key: bytes = b"", extras: bytes = b"", value: bytes = b"", opaque: int = 0x01020304) -> bytes:
    body = len(key) + len(extras) + len(value)
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0, body, opaque, 0) + extras + key + value


LIST, AUTH, STEP = 0x20, 0x21, 0x22
GET, NOOP, VERSION, FLUSH, FLUSHQ, STAT = 0x00, 0x0A, 0x0B, 0x08, 0x18, 0x10


# Writes a Cyrus sasldb through libsasl2's sasl_setpass, as saslpasswd2 does (run in a child:
# libsasl2 keeps the callbacks of its first initialisation for the life of the process).
SASLDB_WRITER = r"""
import ctypes, ctypes.util, socket, sys
name = ctypes.util.find_library("sasl2")
if not name:
    sys.exit(3)
lib = ctypes.CDLL(name)
db = sys.argv[1].encode()
getopt_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                            ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_uint))
def getopt(_ctx, _plugin, option, result, length):
    if option == b"sasldb_path":
        result[0] = db
        if length:
            length[0] = len(db)
        return 0
    return -1
cb = getopt_t(getopt)
class Callback(ctypes.Structure):
    _fields_ = [("id", ctypes.c_ulong), ("proc", ctypes.c_void_p), ("context", ctypes.c_void_p)]
cbs = (Callback * 2)(Callback(1, ctypes.cast(cb, ctypes.c_void_p), None), Callback(0, None, None))
if lib.sasl_server_init(cbs, b"memcached") != 0:
    sys.exit(3)
conn = ctypes.c_void_p()
host = socket.gethostname().encode()
if lib.sasl_server_new(b"memcached", host, host, None, None, cbs, 0, ctypes.byref(conn)) != 0:
    sys.exit(3)
for pair in sys.argv[2:]:
    u, p = pair.split(":", 1)
    if lib.sasl_setpass(conn, u.encode(), p.encode(), len(p), None, 0, 1) != 0:
        sys.exit(3)
"""


def make_sasldb(dirpath) -> dict:
    """A Cyrus sasldb of USERS and memcached's SASL config offering PLAIN only: the environment
    memcached -S needs to know the users segcache-server reads from its file."""
    db = dirpath / "sasldb2"
    r = subprocess.run([sys.executable, "-c", SASLDB_WRITER, str(db), *(f"{u}:{p}" for u, p in USERS.items())],
                       capture_output=True, text=True, timeout=30)
    if r.returncode == 3:
        pytest.skip("libsasl2 (with its sasldb plugin) is not installed: memcached -S cannot be given users")
    assert r.returncode == 0, r.stderr
    (dirpath / "memcached.conf").write_text(f"mech_list: plain\nsasldb_path: {db}\n")
    return {**os.environ, "SASL_CONF_PATH": str(dirpath)}


@pytest.fixture
def sasl_pair(tmp_path, both):
    d = tmp_path / "sasl"
    d.mkdir()
    mc_env = make_sasldb(d)
    f = users_file(tmp_path)
    return both(["-S"], ["-S"], mc_env=mc_env, sc_env={**os.environ, "MEMCACHED_SASL_PWDB": str(f)})


def bconverse(server: Proc, steps, mask_cas: bool = False) -> list:
    """(request, responses to read, or "closed")."""
    c = server.connect()
    got = []
    try:
        for data, want in steps:
            c.send(data)
            if want == "closed":
                got.append(("closed", c.closed()))
            else:
                got.append(b"".join(cas_masked(c.response()) if mask_cas else c.response() for _ in range(want)))
    finally:
        c.close()
    return got


def cas_masked(response: bytes) -> bytes:
    """A binary response with its CAS number masked: the numbers differ between the servers (a
    sharded cache counts in strides), whether one is 0 does not."""
    if len(response) < 24:
        return response
    cas = response[16:24]
    return response[:16] + (cas if cas == bytes(8) else b"\xff" * 8) + response[24:]


def bsame(mc: Proc, sc: Proc, steps) -> list:
    """Runs `steps` on both servers; their responses must match, CAS numbers masked."""
    want, got = bconverse(mc, steps, mask_cas=True), bconverse(sc, steps, mask_cas=True)
    assert got == want, f"steps {steps!r}:\nmemcached {want!r}\nsegcache  {got!r}"
    return got


def status(resp: bytes) -> int:
    return struct.unpack(">H", resp[6:8])[0]


PLAIN_OK = b"\0alice\0secret"


def test_sasl_unauthenticated_is_refused_and_closed(sasl_pair):
    mc, sc = sasl_pair
    for op, key, extras in ((GET, b"foo", b""), (NOOP, b"", b""), (FLUSH, b"", b""), (STAT, b"", b""),
                            (0x01, b"k", b"\0" * 8)):
        got = bsame(mc, sc, [(bin_req(op, key, extras), 1), (bin_req(NOOP), "closed")])
        assert status(got[0]) == 0x20 and got[0].endswith(b"Auth failure.") and got[1] == ("closed", True)
    # VERSION is answered before authentication (the version strings differ).
    for s in (mc, sc):
        assert status(bconverse(s, [(bin_req(VERSION), 1)])[0]) == 0


def test_sasl_list_and_plain(sasl_pair):
    mc, sc = sasl_pair
    got = bsame(mc, sc, [(bin_req(LIST), 1)])
    assert got[0].endswith(b"PLAIN")
    got = bsame(mc, sc, [(bin_req(AUTH, b"PLAIN", value=PLAIN_OK), 1), (bin_req(GET, b"foo"), 1)])
    assert status(got[0]) == 0 and got[0].endswith(b"Authenticated") and got[1].endswith(b"Not found")
    cases = [
        # Wrong password: refused, the connection kept; the next command closes it.
        [(bin_req(AUTH, b"PLAIN", value=b"\0alice\0wrong"), 1), (bin_req(NOOP), 1), (bin_req(NOOP), "closed")],
        [(bin_req(AUTH, b"PLAIN", value=b"\0bob\0secret"), 1)],
        [(bin_req(AUTH, b"PLAIN", value=b"\0carol\0secret"), 1)],
        [(bin_req(AUTH, b"PLAIN", value=b"alice\0alice\0secret"), 1), (bin_req(NOOP), 1)],  # authzid = user
        [(bin_req(AUTH, b"PLAIN", value=b"bob\0alice\0secret"), 1)],  # another authzid
        [(bin_req(AUTH, b"PLAIN", value=b"alice\0secret"), 1)],  # no authzid field
        [(bin_req(AUTH, b"plain", value=PLAIN_OK), 1)],  # mechanism names are case-blind
        [(bin_req(AUTH, b"CRAM-MD5", value=PLAIN_OK), 1)],  # not offered
        # No initial response: continue, then the step.
        [(bin_req(AUTH, b"PLAIN"), 1), (bin_req(STEP, b"PLAIN", value=PLAIN_OK), 1), (bin_req(NOOP), 1)],
        [(bin_req(STEP, b"PLAIN", value=PLAIN_OK), 1)],  # a step before any auth
        # A mechanism name over 32 bytes: invalid, its body dropped, the connection kept.
        [(bin_req(AUTH, b"P" * 40, value=b"x"), 1), (bin_req(NOOP), 1)],
        # Listing the mechanisms starts over: no longer authenticated.
        [(bin_req(AUTH, b"PLAIN", value=PLAIN_OK), 1), (bin_req(LIST), 1), (bin_req(NOOP), 1)],
        # Wrong, then right, on one connection.
        [(bin_req(AUTH, b"PLAIN", value=b"\0bob\0x"), 1), (bin_req(AUTH, b"PLAIN", value=b"\0bob\0hunter2"), 1),
         (bin_req(0x01, b"k", b"\0" * 8, b"v"), 1), (bin_req(GET, b"k"), 1)],
    ]
    for steps in cases:
        bsame(mc, sc, steps)


def bstats(server: Proc) -> dict:
    c = server.connect()
    c.send(bin_req(AUTH, b"PLAIN", value=PLAIN_OK) + bin_req(STAT))
    assert status(c.response()) == 0
    out = {}
    while True:
        r = c.response()
        klen = struct.unpack(">H", r[2:4])[0]
        if klen == 0:
            break
        out[r[24:24 + klen].decode()] = r[24 + klen:].decode()
    c.close()
    return out


def test_sasl_stats(sasl_pair):
    mc, sc = sasl_pair
    bsame(mc, sc, [
        (bin_req(AUTH, b"PLAIN", value=b"\0alice\0wrong"), 1),
        (bin_req(AUTH, b"PLAIN"), 1),  # continue: not counted
        (bin_req(STEP, b"PLAIN", value=b"\0bob\0hunter2"), 1),
        (bin_req(STEP, b"PLAIN", value=b"\0bob\0hunter2"), 1),
    ])
    want = {k: v for k, v in bstats(mc).items() if k.startswith("auth_")}
    got = {k: v for k, v in bstats(sc).items() if k.startswith("auth_")}
    assert got == want == {"auth_cmds": "4", "auth_errors": "2"}


DALLI = """
require 'dalli'
port, user, pass = ARGV
c = Dalli::Client.new("127.0.0.1:#{port}", username: user, password: pass, socket_timeout: 2)
begin
  c.set('k', 'v')
  puts "get=#{c.get('k').inspect}"
rescue => e
  puts "error=#{e.message}"
end
"""

PHP_MEMCACHED = """<?php
[$_, $port, $user, $pass] = $argv;
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->setSaslAuthData($user, $pass);
$m->addServer('127.0.0.1', (int)$port);
echo 'set=', var_export($m->set('k', 'v'), true), ' ', $m->getResultMessage(), "\\n";
echo 'get=', var_export($m->get('k'), true), "\\n";
"""


def client_argv(client: str, tmp_path) -> list[str]:
    if client == "dalli":
        ok = subprocess.run(["ruby", "-e", "require 'dalli'"], capture_output=True).returncode == 0 \
            if shutil.which("ruby") else False
        script, argv = tmp_path / "c.rb", ["ruby"]
        text = DALLI
    else:
        ok = subprocess.run(["php", "-r", "exit(class_exists('Memcached') && Memcached::HAVE_SASL ? 0 : 1);"],
                            capture_output=True).returncode == 0 if shutil.which("php") else False
        script, argv = tmp_path / "c.php", ["php"]
        text = PHP_MEMCACHED
    if not ok:
        pytest.skip(f"{client} (with SASL) is not installed")
    script.write_text(text)
    return [*argv, str(script)]


@pytest.mark.parametrize("client", ["dalli", "php-memcached"])
def test_sasl_clients(client, tmp_path, sasl_pair):
    """dalli and php-memcached (username/password options) against both: the same outcome."""
    argv = client_argv(client, tmp_path)
    for user, password in (("alice", "secret"), ("bob", "wrong")):
        outs = []
        for s in sasl_pair:
            r = subprocess.run([*argv, str(s.port), user, password], capture_output=True, text=True, timeout=60)
            # Only the outcome lines (dalli logs with timestamps).
            outs.append([ln for ln in r.stdout.splitlines() if ln.startswith(("get=", "set=", "error="))])
        assert outs[1] == outs[0], (user, outs)
        got_v = any(ln in ("get='v'", 'get="v"') for ln in outs[0])
        assert outs[0] and got_v == (password != "wrong"), outs[0]


def test_sasl_needs_its_user_file():
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), *ROOT_USER, "-S"], capture_output=True,
                       text=True, timeout=10, env={k: v for k, v in os.environ.items() if k != "MEMCACHED_SASL_PWDB"})
    assert r.returncode != 0 and "MEMCACHED_SASL_PWDB" in r.stderr, r.stderr


# --- -F, -X, -W ----------------------------------------------------------------------------


def test_switches_refuse_as_memcached(both):
    mc, sc = both(["-F", "-X", "-W"], ["-F", "-X", "-W"])
    got = same(mc, sc, [
        (b"flush_all\r\n", 1),
        (b"flush_all 10\r\n", 1),
        (b"flush_all noreply\r\nversion\r\n", 1),
        (b"stats cachedump 1 1\r\n", 1),
        (b"lru_crawler metadump all\r\n", 1),
        (b"lru_crawler metadump 1\r\n", 1),
        (b"watch\r\n", 1),
        (b"watch fetchers mutations\r\n", 1),
        (b"shutdown\r\n", 1),
    ])
    assert got[:2] == [b"CLIENT_ERROR flush_all not allowed\r\n"] * 2
    assert got[2] == b"VERSION 1.6.18\r\n"
    assert got[3] == b"CLIENT_ERROR stats cachedump not allowed\r\n"
    assert got[4] == got[5] == b"ERROR metadump not allowed\r\n"
    assert got[6] == got[7] == b"CLIENT_ERROR watch commands not allowed\r\n"
    # The binary FLUSH, quiet or not: an auth error, the connection kept.
    got = bsame(mc, sc, [(bin_req(FLUSH), 1), (bin_req(FLUSHQ), 1), (bin_req(NOOP), 1)])
    assert status(got[0]) == status(got[1]) == 0x20 and status(got[2]) == 0
    # The newest memcached's words for mgdump (1.6.18 has no mgdump).
    assert converse(sc, [(b"lru_crawler mgdump all\r\n", 1)]) == [b"ERROR key dump not allowed\r\n"]
    # Nothing was flushed.
    c = sc.connect()
    c.send(b"set k 0 0 1\r\nv\r\nflush_all\r\nget k\r\nstats settings\r\n")
    assert c.line() == b"STORED\r\n" and c.line() == b"CLIENT_ERROR flush_all not allowed\r\n"
    assert c.line() + c.line() + c.line() == b"VALUE k 0 1\r\nv\r\nEND\r\n"
    st = {}
    while (line := c.line()) != b"END\r\n":
        _, k, v = line.decode().split(" ", 2)
        st[k] = v.strip()
    c.close()
    assert (st["flush_enabled"], st["dump_enabled"], st["watch_enabled"]) == ("no", "no", "no")


def test_switches_off_by_default(both):
    mc, sc = both([], [])
    got = same(mc, sc, [(b"flush_all\r\n", 1), (b"stats cachedump 1 1\r\n", 1), (b"watch\r\n", 1)])
    assert got == [b"OK\r\n", b"END\r\n", b"OK\r\n"]
