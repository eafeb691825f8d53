"""Framing against memcached 1.6 as the oracle: when a refused store is answered (after its value,
which is swallowed as it arrives), which data lengths are read at all, and what becomes of long
command lines.

A store refused as too large is answered only once the last byte of its value came, as memcached
does: clients that read an earlier reply as the end of their request (php-memcache with SASL,
async-memcached's pipelined `meta_set_multi`) lose the connection or the request after it. Each
case sends its value in pieces and checks that nothing is answered until the last byte, then that
the same connection serves a pipelined next command."""

import select
import socket
import struct
import time

import pytest

import diffkit
from conftest import server_binary
from test_auth import PLAIN_OK, bin_req, both, sasl_pair  # noqa: F401 (both and sasl_pair are fixtures)

TOO_LARGE = b"SERVER_ERROR object too large for cache\r\n"
BAD_FORMAT = b"CLIENT_ERROR bad command line format\r\n"
BIG = 2 * 1024 * 1024  # over both servers' 1 MB item limit
SET, NOOP, AUTH = 0x01, 0x0A, 0x21


@pytest.fixture(scope="module")
def pair():
    mc = diffkit.start_memcached()
    sc = diffkit.start_segcache(server_binary(), ["-m", "64", "-t", "2"])
    yield mc, sc
    mc.stop()
    assert sc.stop() == 0


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def quiet(sock: socket.socket, wait: float) -> bool:
    """Whether nothing arrives on `sock` within `wait` seconds (an early reply would come in
    well under it: this bounds how late a reply may be, never how fast the server is)."""
    r, _, _ = select.select([sock], [], [], wait)
    return not r


def read_until(sock: socket.socket, done) -> bytes:
    buf = b""
    while not done(buf):
        chunk = sock.recv(1 << 20)
        if not chunk:
            return buf + b"<closed>"
        buf += chunk
    return buf


def read_all(sock: socket.socket, wait: float = 1.0) -> bytes:
    """Everything until the server closes (`<closed>` appended) or is quiet for `wait` seconds."""
    buf = b""
    sock.settimeout(wait)
    try:
        while chunk := sock.recv(1 << 20):
            buf += chunk
        return buf + b"<closed>"
    except socket.timeout:
        return buf
    except ConnectionResetError:
        return buf + b"<closed>"


def trickle(sock: socket.socket, request: bytes, pieces: int = 4) -> bool:
    """Sends all of `request` but its last byte in `pieces` pieces; whether no reply came."""
    body = request[:-1]
    step = -(-len(body) // pieces)
    silent = True
    for i in range(0, len(body), step):
        sock.sendall(body[i:i + step])
        silent &= quiet(sock, 0.1)
    return silent and quiet(sock, 0.3)


def lines(n: int):
    return lambda buf: buf.endswith(b"<closed>") or buf.count(b"\r\n") >= n


def through_mn(buf: bytes) -> bool:
    return buf.endswith(b"MN\r\n") or buf.endswith(b"<closed>")


def text_refusal(port: int, request: bytes, after: bytes) -> tuple[bool, bytes]:
    """(no reply before the last byte, the replies to the request and to `after`, which ends
    with `mn`)."""
    with connect(port) as s:
        silent = trickle(s, request)
        s.sendall(request[-1:] + after)
        return silent, read_until(s, through_mn)


def value_of(head: bytes, size: int = BIG) -> bytes:
    return head + b"v" * size + b"\r\n"


TEXT_REFUSALS = [
    # (request, its reply)
    (value_of(b"set k 0 0 %d\r\n" % BIG), TOO_LARGE),
    (value_of(b"add k 0 0 %d\r\n" % BIG), TOO_LARGE),
    (value_of(b"replace k 0 0 %d\r\n" % BIG), TOO_LARGE),
    (value_of(b"append k 0 0 %d\r\n" % BIG), TOO_LARGE),
    (value_of(b"prepend k 0 0 %d\r\n" % BIG), TOO_LARGE),
    (value_of(b"cas k 0 0 %d 1\r\n" % BIG), TOO_LARGE),
    (value_of(b"set k 0 0 %d noreply\r\n" % BIG), b""),
    (value_of(b"ms k %d T0\r\n" % BIG), TOO_LARGE),
    # A quiet ms is answered its refusal all the same.
    (value_of(b"ms k %d q\r\n" % BIG), TOO_LARGE),
    (value_of(b"ms k %d MA\r\n" % BIG), TOO_LARGE),
    # A flag refused once the length is known: the value is swallowed too.
    (value_of(b"ms k 5000 zz\r\n", 5000), b"CLIENT_ERROR invalid flag\r\n"),
]


@pytest.mark.parametrize("request_, reply", TEXT_REFUSALS, ids=lambda v: v[:24].decode(errors="replace"))
def test_text_and_meta_refusal_waits_for_the_value(pair, request_, reply):
    mc, sc = pair
    # The key holds a value first: a refused set must not leave it readable (memcached unlinks).
    after = b"set n 0 0 1\r\nx\r\nmg k v\r\nmn\r\n"
    got = {}
    for p in (mc, sc):
        with connect(p.port) as s:
            s.sendall(b"set k 0 0 3\r\nold\r\n")
            assert read_until(s, lines(1)) == b"STORED\r\n"
        got[p.name] = text_refusal(p.port, request_, after)
    assert got["segcache-server"] == got["memcached"]
    silent, replies = got["segcache-server"]
    assert silent, "a reply came before the value's last byte"
    assert replies.startswith(reply + b"STORED\r\n") and replies.endswith(b"MN\r\n"), replies


def binary_responses(sock: socket.socket, n: int) -> list[bytes]:
    """The next `n` binary responses."""

    def split(buf: bytes) -> list[bytes] | None:
        out = []
        while len(out) < n:
            if len(buf) < 24 or len(buf) < 24 + struct.unpack(">I", buf[8:12])[0]:
                return None
            end = 24 + struct.unpack(">I", buf[8:12])[0]
            out.append(buf[:end])
            buf = buf[end:]
        assert not buf, f"more than {n} responses"
        return out

    buf = read_until(sock, lambda b: b.endswith(b"<closed>") or split(b) is not None)
    assert not buf.endswith(b"<closed>"), buf
    return split(buf)


def binary_refusal(port: int, prelude: bytes = b"") -> tuple[bytes, bool, bytes, bytes]:
    """(the prelude's response, no reply before the last byte, the refusal, the NOOP's), CAS masked."""
    with connect(port) as s:
        first = b""
        if prelude:
            s.sendall(prelude)
            (first,) = binary_responses(s, 1)
        request = bin_req(SET, b"k", b"\0" * 8, b"v" * BIG)
        silent = trickle(s, request)
        s.sendall(request[-1:] + bin_req(NOOP))
        refusal, noop = binary_responses(s, 2)
    mask = lambda r: r[:16] + b"\0" * 8 + r[24:]  # noqa: E731
    return mask(first), silent, mask(refusal), mask(noop)


def test_binary_refusal_waits_for_the_value(pair):
    mc, sc = pair
    want, got = binary_refusal(mc.port), binary_refusal(sc.port)
    assert got == want
    _, silent, refusal, noop = got
    assert silent, "a reply came before the value's last byte"
    assert refusal[6:8] == b"\x00\x03" and refusal.endswith(b"Too large.")
    assert noop[1] == NOOP and noop[6:8] == b"\x00\x00"


def test_sasl_binary_refusal_waits_for_the_value(sasl_pair):
    """-S: after a SASL PLAIN exchange, a refused SET is answered after its value and the
    connection stays authenticated."""
    mc, sc = sasl_pair
    auth = bin_req(AUTH, b"PLAIN", value=PLAIN_OK)
    want, got = binary_refusal(mc.port, auth), binary_refusal(sc.port, auth)
    assert got == want
    authed, silent, refusal, noop = got
    assert authed.endswith(b"Authenticated")
    assert silent, "a reply came before the value's last byte"
    assert refusal[6:8] == b"\x00\x03" and noop[6:8] == b"\x00\x00"


def exchange(port: int, data: bytes) -> bytes:
    """Sends `data` (which ends with `mn`), returns the replies through `MN` or the close."""
    with connect(port) as s:
        s.sendall(data)
        return read_until(s, through_mn)


LENGTHS = [b"2147483647", b"2147483646", b"2147483648", b"4294967297", b"+1", b"-0", b"-1", b"1x",
           b"9223372036854775808", b"-9223372036854775808", b"18446744073709551617"]


@pytest.mark.parametrize("length", LENGTHS)
def test_data_length_token_as_memcached(pair, length):
    """memcached swallows a value only when its length is valid (a `long`, kept in an `int`, not
    negative, room for its CRLF): otherwise a bad command line, and what follows is a command."""
    mc, sc = pair
    key = b"len%d" % LENGTHS.index(length)  # a key of its own: what the other cases stored is not read
    for cmd in (b"set %s 0 0 %s", b"ms %s %s T0"):
        head = cmd % (key, length)
        data = head + b"\r\nx\r\nmg " + key + b" v\r\nmd " + key + b" q\r\nmn\r\n"
        want, got = exchange(mc.port, data), exchange(sc.port, data)
        assert got == want, head
        assert got.endswith(b"MN\r\n")
    if length == b"2147483647":
        assert want.startswith(BAD_FORMAT)


def long_line_cases() -> list[tuple[str, bytes]]:
    return [
        ("set 3000", b"set k 0 0 1" + b" " * 2989 + b"\r\nx\r\n"),
        ("touch 3000 spaces", b"set t 0 0 1\r\nx\r\ntouch t 100" + b" " * 3000 + b"\r\n"),
        ("mg opaque 2090", b"mg k O" + b"o" * 2089 + b"\r\n"),
        ("mg 5000 flags", b"mg k" + b" v" * 5000 + b"\r\n"),
        ("ma 5000 q", b"ma k" + b" q" * 5000 + b"\r\n"),
        ("ms 5000 flags", b"ms k 1" + b" T0" * 5000 + b"\r\nx\r\n"),
        ("unknown 3000", b"x" * 3000 + b"\r\n"),
        ("set many tokens", b"set k 0 0 1 noreply" + b" x" * 1500 + b"\r\nx\r\n"),
        ("get 20000", b"get" + b" k" * 10000 + b"\r\n"),
        ("line 16000", b"set k 0 0 1" + b" " * (16000 - 13) + b"\r\nx\r\n"),
        # The longest line memcached's read buffer holds with its newline.
        ("line 16384", b"set k 0 0 1" + b" " * (16384 - 13) + b"\r\nx\r\n"),
    ]


@pytest.mark.parametrize("name, line", long_line_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_long_lines_with_a_newline_are_answered(pair, name, line):
    mc, sc = pair
    data = line + b"mn\r\n"
    want, got = exchange(mc.port, data), exchange(sc.port, data)
    assert got == want, name
    assert got.endswith(b"MN\r\n"), "the connection serves the next command"


@pytest.mark.parametrize("data", [b"x" * 3000, b"set k 0 0 1" + b" " * 3000, b"x" * 17000 + b"\r\nmn\r\n",
                                  b"set k 0 0 1" + b" " * (16385 - 13) + b"\r\nx\r\nmn\r\n"],
                         ids=["3000 without newline", "set 3000 without newline", "17000 then newline",
                              "16385 with its newline"])
def test_lines_that_cannot_end_close_without_a_reply(pair, data):
    mc, sc = pair
    got = {}
    for p in (mc, sc):
        with connect(p.port) as s:
            s.sendall(data)
            got[p.name] = read_all(s, wait=3)
    assert got["segcache-server"] == got["memcached"] == b"<closed>"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    raise AssertionError("no VmRSS")


def stream_refused(sc, head: bytes, size: int, after: bytes, done) -> tuple[int, int, bytes]:
    """Sends `head`, then `size` zero bytes, then `after`; (RSS before, highest RSS, replies)."""
    pid = sc.proc.pid
    with connect(sc.port) as s:
        s.sendall(head)
        time.sleep(0.1)
        base = peak = rss_kib(pid)
        chunk = memoryview(bytes(4 << 20))
        sent = 0
        while sent < size:
            k = min(size - sent, len(chunk))
            s.sendall(chunk[:k])
            sent += k
            if sent % (256 << 20) < k:
                peak = max(peak, rss_kib(pid))
        s.sendall(after)
        replies = read_until(s, done)
        return base, max(peak, rss_kib(pid)), replies


def test_two_gib_refused_value_streams_in_bounded_memory():
    sc = diffkit.start_segcache(server_binary(), ["-m", "64", "-t", "2"])
    try:
        n = 2147483645  # the longest length memcached reads (room for the CRLF in an int)
        base, peak, replies = stream_refused(sc, b"set big 0 0 %d\r\n" % n, n + 2, b"mn\r\n", through_mn)
        assert replies == TOO_LARGE + b"MN\r\n"
        assert peak - base < 32 * 1024, f"text: RSS grew from {base} KiB to {peak} KiB"
        body = 2 << 30
        head = bin_req(SET, b"big", b"\0" * 8)
        head = head[:8] + struct.pack(">I", len(b"big") + 8 + body) + head[12:]
        base, peak, replies = stream_refused(sc, head, body, bin_req(NOOP), lambda b: len(b) >= 24 + 10 + 24)
        assert replies[6:8] == b"\x00\x03" and replies[34 + 1] == NOOP
        assert peak - base < 32 * 1024, f"binary: RSS grew from {base} KiB to {peak} KiB"
    finally:
        assert sc.stop() == 0
