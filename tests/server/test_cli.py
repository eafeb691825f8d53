"""memcached's command line: the real binary started with memcached-style flags, a
UNIX socket with pymemcache, -d with -P, idle_timeout and idle_kicks, -R, -B, the refusals, the
start line of the log. Each flag accepted here is also accepted by /usr/bin/memcached (the oracle),
checked by starting it with the same flags."""

import os
import re
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest
from pymemcache.client.base import Client

from conftest import free_port, server_binary, spawn
from conftest import stop_logged as stop

MEMCACHED = os.environ.get("SEGCACHE_MEMCACHED_BIN", "/usr/bin/memcached")
ROOT_USER = ["-u", "root"] if os.geteuid() == 0 else []
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z segcache-server ", re.M)


def start(*args: str, tcp: bool = True) -> tuple[subprocess.Popen, int]:
    return spawn(*args, wait=tcp)


def command(port_or_path, data: bytes, until: bytes = b"END\r\n") -> bytes:
    if isinstance(port_or_path, int):
        s = socket.create_connection(("127.0.0.1", port_or_path), timeout=5)
    else:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(str(port_or_path))
    with s:
        s.sendall(data)
        out = b""
        while not out.endswith(until):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def stats(port_or_path, which: str = "") -> dict[str, str]:
    raw = command(port_or_path, f"stats {which}\r\n".encode()).decode()
    return {p[1]: p[2] for p in (l.split(" ", 2) for l in raw.splitlines()) if p[0] == "STAT"}


def memcached_accepts(*args: str, listen: bool = True) -> None:
    """The oracle: memcached starts with these flags (and is then stopped)."""
    if not Path(MEMCACHED).exists():
        pytest.skip("memcached is not installed")
    port = free_port()
    where = ["-l", "127.0.0.1"] if listen else []
    proc = subprocess.Popen([MEMCACHED, "-p", str(port), *where, *ROOT_USER, *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        assert proc.poll() is None, f"memcached refused {args}: {proc.stderr.read()}"
    finally:
        proc.kill()
        proc.wait()


def test_an_init_scripts_command_line(tmp_path):
    pid = tmp_path / "mc.pid"
    args = ["-U", "0", "-P", str(pid), "-o", "idle_timeout=600", *ROOT_USER]
    memcached_accepts(*args[:2], "-o", "idle_timeout=600")
    proc, port = start(*args)
    assert int(pid.read_text()) == proc.pid
    assert command(port, b"set k 0 0 1\r\nv\r\nget k\r\n") == b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    s = stats(port, "settings")
    assert (s["idle_timeout"], s["udpport"]) == ("600", "0")
    assert stats(port)["idle_kicks"] == "0"
    err = stop(proc)
    assert not pid.exists(), "the pid file stays after a stop"
    # Every log line carries an RFC 3339 UTC timestamp, and the start says what it was.
    assert "cold start: the cache is empty" in err
    assert all(STAMP.match(l) for l in err.splitlines() if l.strip()), err


def test_memcached_flags_accepted(tmp_path):
    flags = ["-b", "64", "-R", "4", "-B", "ascii", "-L", "-k", "-f", "1.25", "-n", "48", "-r", "-D", ":",
             "-c", "100", "-m", "64", "-o", "modern,no_lru_crawler,no_lru_maintainer,lru_crawler,hashpower=16",
             "-o", "maxconns_fast,slab_reassign,slab_automove=1,track_sizes", "-M", "-N", "1", "-A", "-I", "2m"]
    memcached_accepts(*flags)
    proc, port = start(*flags, *ROOT_USER)
    s = stats(port, "settings")
    assert (s["tcp_backlog"], s["reqs_per_event"], s["binding_protocol"]) == ("64", "4", "ascii")
    assert (s["detail_enabled"], s["track_sizes"]) == ("yes", "yes")
    assert (s["evictions"], s["shutdown_command"], s["item_size_max"]) == ("off", "yes", str(2 << 20))
    stop(proc)


def test_listen_list(tmp_path):
    other = free_port()
    memcached_accepts("-l", f"127.0.0.1,127.0.0.1:{free_port()}", listen=False)
    proc, port = start("-l", f"127.0.0.1,127.0.0.1:{other}", *ROOT_USER)
    for p in (port, other):
        assert command(p, b"version\r\n", until=b"\r\n").startswith(b"VERSION ")
    stop(proc)


def test_unix_socket_with_mask(tmp_path):
    path = tmp_path / "mc.sock"
    memcached_accepts("-s", str(tmp_path / "oracle.sock"), "-a", "0766")
    proc, port = start("-s", str(path), "-a", "0766", *ROOT_USER, tcp=False)
    deadline = time.monotonic() + 10
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "no socket"
        time.sleep(0.05)
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o766
    client = Client(str(path))
    client.set("over", b"unix")
    assert client.get("over") == b"unix"
    client.close()
    assert stats(path, "settings")["domain_socket"] == str(path)
    # memcached's `watch connevents` line for a UNIX socket client.
    w = socket.socket(socket.AF_UNIX)
    w.settimeout(5)
    w.connect(str(path))
    w.sendall(b"watch connevents\r\n")
    assert w.recv(100) == b"OK\r\n"
    command(path, b"version\r\n", until=b"\r\n")
    events = b""
    while b"conn_close" not in events:
        events += w.recv(1000)
    assert b"type=conn_new rip=unix rport=0 transport=local cfd=" in events, events
    w.close()
    # memcached's `stats conns` spellings for a UNIX socket.
    conns = command(path, b"stats conns\r\n").decode()
    assert re.search(rf"STAT \d+:addr unix:{re.escape(str(path))}\r\nSTAT \d+:state conn_listening", conns), conns
    assert re.search(rf"STAT \d+:addr \?:<AF 0>\r\nSTAT \d+:listen_addr unix:{re.escape(str(path))}", conns), conns
    # With -s, memcached listens on the UNIX socket only: no TCP port.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    stop(proc)
    assert not path.exists()


def test_unix_socket_default_mask_is_700(tmp_path):
    path = tmp_path / "mc.sock"
    proc, _ = start("-s", str(path), *ROOT_USER, tcp=False)
    deadline = time.monotonic() + 10
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    stop(proc)


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(l for l in status.splitlines() if l.startswith("VmRSS:")).split()[1]) / 1024


def test_large_pages_take_the_memory_at_start():
    """-L takes the heap at start (memcached preallocates with it too), so that no request later
    waits for a page fault of the heap; without it the heap is faulted in as it fills."""
    memcached_accepts("-L", "-m", "128")
    lazy, port = start("-m", "128", *ROOT_USER)
    taken, port_l = start("-L", "-m", "128", *ROOT_USER)
    try:
        assert rss_mib(lazy.pid) < 64, rss_mib(lazy.pid)
        assert rss_mib(taken.pid) >= 128, rss_mib(taken.pid)
        assert command(port_l, b"set k 0 0 1\r\nv\r\nget k\r\n") == b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    finally:
        stop(lazy)
        stop(taken)


def thread_names(pid: int) -> list[str]:
    return [(t / "comm").read_text().strip() for t in Path(f"/proc/{pid}/task").iterdir()]


def kernel_populates() -> bool:
    """MADV_POPULATE_WRITE, which touch-ahead faults memory in with: Linux 5.14 and later."""
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return m is not None and (int(m[1]), int(m[2])) >= (5, 14)


@pytest.mark.skipif(not kernel_populates(), reason="the kernel cannot populate memory (before Linux 5.14)")
def test_touch_ahead_runs_until_the_heap_was_gone_through():
    """Without -L a thread faults the heap in a few segments ahead of the workers, in the shards
    they write, keeping the memory small at start; it ends once the writers have used every
    segment. -o no_touch_ahead starts none, nor does -L (its heap is in from the start)."""
    heap = ("-m", "128", "--segment-size", "2m")
    ahead, port = start(*heap, *ROOT_USER)
    off, off_port = start(*heap, "-o", "no_touch_ahead", *ROOT_USER)
    taken, _ = start("-L", *heap, *ROOT_USER)
    try:
        deadline = time.time() + 5  # a new thread names itself once it runs
        while "segcache-ahead" not in thread_names(ahead.pid) and time.time() < deadline:
            time.sleep(0.01)
        assert "segcache-ahead" in thread_names(ahead.pid)
        assert "segcache-ahead" not in thread_names(off.pid)
        assert "segcache-ahead" not in thread_names(taken.pid)
        # Nothing is faulted in before a write.
        assert rss_mib(ahead.pid) - rss_mib(off.pid) < 8, (rss_mib(ahead.pid), rss_mib(off.pid))
        value = b"v" * 100_000
        # 20 MB into each: 128 MiB in 4 shards of 16 segments of 2 MiB, each shard written; the
        # thread keeps 2 segments ahead in each, 16 MiB (less what else the two processes'
        # memory differs by).
        for p in (port, off_port):
            with socket.create_connection(("127.0.0.1", p), timeout=10) as s:
                for i in range(200):
                    s.sendall(b"set w%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value))
                s.sendall(b"get w199\r\n")  # after the sets on this connection
                reply = b""
                while not reply.endswith(b"END\r\n"):
                    reply += s.recv(1 << 20)
            assert reply == b"VALUE w199 0 100000\r\n" + value + b"\r\nEND\r\n"
        deadline = time.time() + 5
        while rss_mib(ahead.pid) - rss_mib(off.pid) < 10 and time.time() < deadline:
            time.sleep(0.05)
        assert 10 <= rss_mib(ahead.pid) - rss_mib(off.pid) < 32, (rss_mib(ahead.pid), rss_mib(off.pid))
        # 200 MiB of new items through a 128 MiB heap: every segment is used.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            for i in range(2047):
                s.sendall(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value))
        reply = command(port, b"set k2047 0 0 %d noreply\r\n%s\r\nget k2047\r\n" % (len(value), value))
        assert reply == b"VALUE k2047 0 100000\r\n" + value + b"\r\nEND\r\n"
        deadline = time.time() + 5
        while "segcache-ahead" in thread_names(ahead.pid) and time.time() < deadline:
            time.sleep(0.05)
        assert "segcache-ahead" not in thread_names(ahead.pid), "the thread ends once the heap was used"
    finally:
        stop(ahead)
        stop(off)
        stop(taken)


@pytest.mark.skipif(os.geteuid() != 0, reason="-u drops privileges only when started as root")
def test_user_drops_root(tmp_path):
    memcached_accepts("-u", "nobody")
    proc, port = start("-u", "nobody")
    status = Path(f"/proc/{proc.pid}/status").read_text()
    uids = next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1:]
    gids = next(l for l in status.splitlines() if l.startswith("Gid:")).split()[1:]
    assert uids == ["65534"] * 4 and gids == ["65534"] * 4, status
    assert command(port, b"set k 0 0 1\r\nv\r\nget k\r\n") == b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    stop(proc)


def test_unknown_user_is_refused():
    if os.geteuid() != 0:
        pytest.skip("-u is ignored when not started as root")
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), "-u", "no-such-user-here"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "can't find the user no-such-user-here" in r.stderr, r.stderr


def read_pidfile(path: Path, deadline: float) -> int:
    """The pid in `path` once it is whole. memcached writes its pid file in place, so a poll can
    read it empty or half written: read until it holds a whole line."""
    while True:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n") and text.strip().isdigit():
            return int(text)
        assert time.monotonic() < deadline, f"no whole pid file at {path}: {text!r}"
        time.sleep(0.01)


def process_gone(pid: int) -> bool:
    """Whether `pid` has exited: gone from /proc, or a zombie that its new parent has not reaped
    yet (in a container whose first process does not reap, it stays one)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] == "Z"


def test_daemon_with_pidfile(tmp_path):
    pid = tmp_path / "d.pid"
    port = free_port()
    # The oracle daemonizes with the same flags: its parent exits 0, the daemon writes its pid.
    oracle_pid = tmp_path / "oracle.pid"
    o = subprocess.run([MEMCACHED, "-d", "-P", str(oracle_pid), "-p", str(free_port()), "-l", "127.0.0.1",
                        *ROOT_USER], capture_output=True, text=True, timeout=20)
    assert o.returncode == 0, o.stderr
    os.kill(read_pidfile(oracle_pid, time.monotonic() + 10), signal.SIGTERM)
    r = subprocess.run([str(server_binary()), "-d", "-P", str(pid), "-p", str(port), "-t", "2", *ROOT_USER],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    # Ours is renamed into place whole: from the moment it exists, it holds the daemon's pid.
    deadline = time.monotonic() + 10
    while not pid.exists():
        assert time.monotonic() < deadline, "no pid file"
        time.sleep(0.001)
    text = pid.read_text()
    assert re.fullmatch(r"[0-9]+\n", text), f"pid file read as {text!r}"
    daemon = int(text)
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")], "a temporary file left beside it"
    try:
        assert command(port, b"version\r\n", until=b"\r\n").startswith(b"VERSION ")
        # A daemon: its own session, not the child of the command that started it.
        assert os.getsid(daemon) == daemon
        assert os.readlink(f"/proc/{daemon}/cwd") == "/"
    finally:
        os.kill(daemon, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while pid.exists() or not process_gone(daemon):
        assert time.monotonic() < deadline, "the daemon did not stop"
        time.sleep(0.05)


def test_idle_timeout_kicks_idle_clients():
    proc, port = start("-o", "idle_timeout=1", *ROOT_USER)
    watcher = socket.create_connection(("127.0.0.1", port), timeout=10)
    watcher.sendall(b"watch connevents\r\n")
    assert watcher.recv(100) == b"OK\r\n"
    idle = socket.create_connection(("127.0.0.1", port), timeout=10)
    idle.sendall(b"version\r\n")
    assert idle.recv(100).startswith(b"VERSION ")
    # memcached closes it after 1 to 2 seconds (its sweep runs once a second); wait for the EOF.
    assert idle.recv(100) == b""
    idle.close()
    assert stats(port)["idle_kicks"] == "1"
    # memcached's close reason; a `watch` stream is never kicked.
    events = b""
    while b"reason=idle_timeout" not in events:
        events += watcher.recv(1000)
    watcher.close()
    stop(proc)


def test_no_idle_kicks_without_idle_timeout():
    proc, port = start(*ROOT_USER)
    assert "idle_kicks" not in stats(port)
    stop(proc)


def test_one_request_per_event_still_serves_pipelines():
    proc, port = start("-R", "1", *ROOT_USER)
    n = 300
    batch = b"".join(b"set k%d 0 0 2\r\nv%d\r\n" % (i, i % 10) for i in range(n))
    batch += b"".join(b"get k%d\r\n" % i for i in range(n))
    want = b"STORED\r\n" * n + b"".join(b"VALUE k%d 0 2\r\nv%d\r\nEND\r\n" % (i, i % 10) for i in range(n))
    got = command(port, batch, until=b"VALUE k%d 0 2\r\nv%d\r\nEND\r\n" % (n - 1, (n - 1) % 10))
    assert got == want
    assert int(stats(port)["conn_yields"]) > 0
    stop(proc)


def binary_version() -> bytes:
    # A binary-protocol VERSION request (magic 0x80, opcode 0x0b).
    return bytes([0x80, 0x0B]) + bytes(22)


def test_protocol_ascii_refuses_binary_connections():
    proc, port = start("-B", "ascii", *ROOT_USER)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(binary_version())
        assert s.recv(100) == b""
    assert command(port, b"version\r\n", until=b"\r\n").startswith(b"VERSION ")
    stop(proc)


def test_protocol_binary_refuses_text_connections():
    proc, port = start("-B", "binary", *ROOT_USER, tcp=False)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"version\r\n")
        assert s.recv(100) == b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(binary_version())
        head = s.recv(24)
        assert head[0] == 0x81 and head[1] == 0x0B
    stop(proc)


@pytest.mark.parametrize("args,message", [
    (["-Z"], "TLS"),
    (["-Z", "-o", "ssl_chain_cert=/nonexistent/cert.pem"], "Error loading the certificate chain"),
    (["-S"], "MEMCACHED_SASL_PWDB"),  # -S needs its user file named
    (["-Y", "/nonexistent/mc.auth"], "could not open authfile"),
    (["-S", "-B", "ascii"], "ASCII protocol while using SASL"),
    (["-U", "11211"], "-U 0"),
    (["-C"], "CAS"),
    (["-o", "ext_low_ttl=10"], "TTL"),
    (["-o", "no_such_option"], "Illegal suboption"),
    (["-o", "idle_timeout"], "idle_timeout=N"),
    (["-B", "utf8"], "ascii, binary or auto"),
    (["-a", "9"], "octal"),
])
def test_refused_flags_say_what_to_use(args, message):
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), *args, *ROOT_USER], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_memory_file_is_a_warm_restart(tmp_path):
    path = tmp_path / "mc.file"
    memcached_accepts("-e", str(tmp_path / "oracle.file"))
    proc, port = start("-e", str(path), *ROOT_USER)
    command(port, b"set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\n", until=b"STORED\r\nSTORED\r\n")
    assert "cold start" in stop(proc)
    proc, port = start("-e", str(path), *ROOT_USER)
    assert command(port, b"get a b\r\n") == b"VALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nEND\r\n"
    proc.kill()  # a crash: the next start recovers
    proc.wait()
    proc, port = start("-e", str(path), *ROOT_USER)
    assert command(port, b"get a\r\n") == b"VALUE a 0 1\r\n1\r\nEND\r\n"
    err = stop(proc)
    assert "recovered after a crash" in err and "2 items back" in err, err
    proc, port = start("-e", str(path), *ROOT_USER)
    err = stop(proc)
    assert "warm start" in err and "2 items back" in err, err
