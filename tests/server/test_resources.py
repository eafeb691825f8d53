"""Resource bounds (docs/server.md, "Resource bounds"): what a client can make the server hold,
that one connection's pipeline cannot starve the others on its worker, and that a slow client of
the admin port blocks neither other scrapers nor a stop."""

import contextlib
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

from conftest import Raw, Server, free_port

KIB = 1 << 10
MIB = 1 << 20

# The constants of the bound, as in segcache-server/src (session.rs, worker.rs, parse.rs,
# config/mod.rs) and docs/server.md.
OUT_HIGH_WATER = 256 * KIB
MAX_GET_LINE = 256 * KIB
DEFAULT_MAX_REPLY = 16 * MIB
# Admin clients that may be sending their request at once (admin.rs MAX_PENDING).
ADMIN_MAX_PENDING = 64
TURN_REQUESTS = 256
# Allocator arenas, thread stacks, the event arrays: what the server holds beyond the documented
# per-connection figures (generous: glibc keeps an arena per worker thread).
SLACK = 24 * MIB


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KIB
    raise AssertionError("no VmRSS")


@contextlib.contextmanager
def stopped(pid: int, timeout: float = 10.0):
    """The process stopped (SIGSTOP) for the block, then continued. Waits until every one of its
    threads is stopped: `kill` returns before they are, and on a busy machine a worker may go on
    serving for milliseconds until the thread that took the signal runs and stops the others."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + timeout
        while not all(thread_state(pid, t) in "Tt" for t in os.listdir(f"/proc/{pid}/task")):
            assert time.monotonic() < deadline, "the server did not stop"
            time.sleep(0.001)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def thread_state(pid: int, tid: str) -> str:
    """A thread's state letter from /proc (`T`: stopped); `T` for one that has gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "T"


def input_cap(item_max: int) -> int:
    return MAX_GET_LINE + item_max + 4 * KIB


def per_connection_bound(item_max: int, max_reply: int = DEFAULT_MAX_REPLY) -> int:
    """The documented bound: the input buffer's cap, the output high-water mark, one reply."""
    return input_cap(item_max) + OUT_HIGH_WATER + max_reply + item_max + KIB


def flood_without_reading(port: int, request: bytes, conns: int, seconds: float) -> int:
    """Opens `conns` connections that pipeline `request` and never read, until every send would
    block (the server stopped reading them) or `seconds` pass; returns the requests sent."""
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
    batch = request * 256
    sent = 0
    deadline = time.monotonic() + seconds
    blocked_since = None
    while time.monotonic() < deadline:
        progress = False
        for s in socks:
            try:
                sent += s.send(batch)
                progress = True
            except BlockingIOError:
                pass
        if progress:
            blocked_since = None
        else:
            blocked_since = blocked_since or time.monotonic()
            if time.monotonic() - blocked_since > 1.0:
                break
            time.sleep(0.05)
    flood_without_reading.socks = socks  # kept open (and unread) until the caller is done
    return sent // len(request)


def close_flood() -> None:
    for s in getattr(flood_without_reading, "socks", []):
        s.close()
    flood_without_reading.socks = []


def test_clients_that_never_read_hold_bounded_memory(fresh_server):
    item_max, value, conns = 2 * MIB, 1 * MIB, 32
    s = fresh_server("-I", "2m", "-m", "64")
    r = Raw(s.connect())
    r.send(b"set big 0 0 %d\r\n" % value + b"v" * value + b"\r\n")
    assert r.line() == b"STORED"
    base = rss(s.proc.pid)
    try:
        requests = flood_without_reading(s.port, b"get big\r\n", conns, seconds=4.0)
        time.sleep(0.5)
        held = max(rss(s.proc.pid) for _ in range(3)) - base
        # What the clients asked for, were the replies all buffered.
        assert requests * value > 100 * conns * MIB
        # This workload's figure of the bound: a small input buffer, the high-water mark and one
        # reply (the value and its header) per connection. The old server held ~5 MiB each.
        workload = conns * (8 * KIB + OUT_HIGH_WATER + value + KIB) + SLACK
        assert held < workload, f"held {held / MIB:.0f} MiB, bound {workload / MIB:.0f} MiB"
        assert held < conns * per_connection_bound(item_max) + SLACK
        # The server still serves: another client reads the value.
        r.send(b"get big\r\n")
        assert r.line() == b"VALUE big 0 %d" % value
        assert len(r.exactly(value + 2)) == value + 2 and r.line() == b"END"
    finally:
        close_flood()
        r.sock.close()


def test_a_multiget_past_max_reply_size_is_streamed_whole(fresh_server):
    """As memcached, which streams a multi-get's values: the reply to one line is not capped,
    it is sent a reply buffer at a time as the client reads, and the connection goes on."""
    s = fresh_server("-I", "1m", "--max-reply-size", "3m")
    r = Raw(s.connect())
    value = 1000 * KIB
    r.send(b"set big 0 0 %d\r\n" % value + b"v" * value + b"\r\n")
    assert r.line() == b"STORED"
    r.send(b"get" + b" big" * 6 + b"\r\nget big\r\n")  # ~5.9 MiB: past --max-reply-size
    for i in range(7):
        assert r.line() == b"VALUE big 0 %d" % value
        assert r.exactly(value + 2) == b"v" * value + b"\r\n"
        if i == 5:
            assert r.line() == b"END"
    assert r.line() == b"END"
    r.sock.close()


def test_a_deep_pipeline_does_not_starve_its_neighbours():
    """One connection's backlog is run a slice per turn: a neighbour's request on the same worker
    waits for at most a turn or two of it, not for all of it. Counted, not timed: the server is
    stopped (SIGSTOP) while a deep pipeline of increments and then the neighbour's `get` queue up,
    and the value the neighbour reads says how many increments ran before its request."""
    s = Server()
    s.args[s.args.index("-t") + 1] = "1"  # one worker: both clients share its event loop
    s.start()
    a, b = s.connect(), Raw(s.connect())
    try:
        b.send(b"set c 0 0 1\r\n0\r\n")
        assert b.line() == b"STORED"
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MIB)
        a.setblocking(False)
        cmd = b"incr c 1 noreply\r\n"
        chunk = cmd * 4096
        queued = 0
        with stopped(s.proc.pid):
            while True:
                try:
                    queued += a.send(chunk[queued % len(chunk) :])
                except BlockingIOError:
                    break
            b.send(b"get c\r\n")
            time.sleep(0.2)  # let the loopback deliver both before the server runs again
        queued //= len(cmd)
        assert b.line().startswith(b"VALUE c 0 ")
        value = int(b.line())
        assert b.line() == b"END"
        assert queued > 8 * TURN_REQUESTS, f"only {queued} increments queued"
        # A turn runs at most TURN_REQUESTS of them; the old server read 16 buffers' worth
        # (thousands of increments, all of a grown buffer's) before the neighbour's turn.
        assert value <= 4 * TURN_REQUESTS, f"{value} of {queued} increments ran before the neighbour's get"
    finally:
        a.close()
        b.sock.close()
        assert s.stop() == 0


def metrics(port: int, timeout: float = 2.0) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout).read().decode()


def trickle(sock: socket.socket, stop: threading.Event, data: bytes = b"GET /metrics HTTP/1.1\r\nX: ") -> None:
    """A slow-loris client: one byte every 0.3 s, never the blank line that ends the request."""
    i = 0
    while not stop.wait(0.3):
        try:
            sock.send(data[i % len(data) : i % len(data) + 1])
        except OSError:
            return
        i += 1


@contextlib.contextmanager
def stalled_admin_clients(admin: int):
    """Two stalled admin clients: one trickling a request a byte at a time, one silent after its
    first line. Yields (slow, silent)."""
    stop = threading.Event()
    slow = socket.create_connection(("127.0.0.1", admin), timeout=15)
    silent = socket.create_connection(("127.0.0.1", admin), timeout=15)
    silent.send(b"GET /metrics HTTP/1.1\r\n")
    t = threading.Thread(target=trickle, args=(slow, stop))
    t.start()
    try:
        yield slow, silent
    finally:
        stop.set()
        t.join()
        slow.close()
        silent.close()


def test_a_slow_admin_client_blocks_no_one(fresh_server):
    admin = free_port()
    fresh_server("--admin-port", str(admin))
    with stalled_admin_clients(admin) as (slow, silent):
        time.sleep(0.5)
        for _ in range(3):
            assert "segcache_curr_connections" in metrics(admin)
        # The trickle does not extend its deadline: the server closes it (after about 3 s).
        began = time.monotonic()
        try:
            while slow.recv(4096):
                pass
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert time.monotonic() - began < 10
        assert silent.recv(4096) == b""


def test_admin_clients_past_the_cap_displace_the_oldest(fresh_server):
    admin = free_port()
    s = fresh_server("--admin-port", str(admin))
    held = [socket.create_connection(("127.0.0.1", admin), timeout=5) for _ in range(ADMIN_MAX_PENDING)]
    try:
        time.sleep(0.3)
        # Clients that send nothing hold no one up: past the cap, the one waiting longest is
        # answered 503 and closed, and the new request is served.
        assert "segcache_" in metrics(admin)
        first = b""
        while chunk := held[0].recv(4096):
            first += chunk
        assert first.startswith(b"HTTP/1.1 503 "), first
    finally:
        for h in held:
            h.close()
    # Once the stalled clients are gone, scraping works again.
    deadline = time.monotonic() + 5
    while True:
        try:
            assert "segcache_" in metrics(admin)
            break
        except urllib.error.HTTPError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert s.stop() == 0


def test_sigterm_is_prompt_with_stalled_admin_clients(fresh_server):
    admin = free_port()
    s = fresh_server("--admin-port", str(admin))
    with stalled_admin_clients(admin) as (slow, silent):
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(5) == 0
