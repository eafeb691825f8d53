"""Observability against the real binary: the start line in each start mode (cold, warm, recovered
after a crash), the admin endpoint (/healthz, /readyz while the cache opens and while draining,
its bind address), per-command latency summaries in /metrics, the sampled command log (klog) with
its rate and rotation, the hot-key view in `stats hotkeys` and /metrics, and busy polling."""

import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port, spawn
from conftest import stop_logged as stop



def start(*args: str, wait: bool = True) -> tuple[subprocess.Popen, int]:
    return spawn("--no-pin", *args, wait=wait)


def http(port: int, path: str, host: str = "127.0.0.1", timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def send_all(port: int, data: bytes, until: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while not out.endswith(until):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            out += chunk
        return out


def notice(err: str) -> str:
    lines = [l for l in err.splitlines() if " NOTICE " in l]
    assert len(lines) == 1, err
    return lines[0]


def fill(port: int, n: int, size: int = 1000) -> None:
    val = b"v" * size
    batch = b"".join(b"set k%07d 0 0 %d noreply\r\n%s\r\n" % (i, size, val) for i in range(n))
    assert send_all(port, batch + b"mn\r\n", b"MN\r\n").endswith(b"MN\r\n")


def test_the_start_line_in_each_start_mode(tmp_path):
    path = tmp_path / "cache.seg"
    proc, port = start("-m", "64", "--persist", str(path), "-v")
    fill(port, 2000)
    err = stop(proc)
    line = notice(err)
    assert re.search(rf"cold start: the cache is empty \(new persistence file {re.escape(str(path))}\), "
                     r"opened in \d+ ms; listening on 127\.0\.0\.1:\d+", line), line
    # A normal stop is not a warning.
    assert re.search(r" INFO \S+: signal 15: stopping gracefully", err), err
    assert " WARN " not in err.replace("running as root", ""), err

    proc, port = start("-m", "64", "--persist", str(path))
    line = notice(stop(proc))
    assert re.search(r"warm start from \S+: 2000 items back in \d+ ms; listening on 127\.0\.0\.1:", line), line

    proc, port = start("-m", "64", "--persist", str(path))
    proc.kill()  # a crash: the file is left open
    proc.wait()
    proc, port = start("-m", "64", "--persist", str(path))
    line = notice(stop(proc))
    assert re.search(r"recovered after a crash from \S+: 2000 items back in \d+ ms, 0 corrupt segments dropped; "
                     r"listening on 127\.0\.0\.1:", line), line


def test_the_start_line_counts_the_segments_a_crash_recovery_dropped(tmp_path):
    path = tmp_path / "cache.seg"
    proc, port = start("-m", "64", "--persist", str(path))
    send_all(port, b"".join(b"set k%d 0 0 12 noreply\r\nvalue-%06d\r\n" % (i, i) for i in range(3000)) + b"mn\r\n",
             b"MN\r\n")
    proc.kill()  # a crash; then one value is damaged in the file
    proc.wait()
    data = bytearray(path.read_bytes())
    at = data.find(b"value-001234")
    assert at > 0
    data[at + 2] ^= 0x20
    path.write_bytes(bytes(data))
    proc, port = start("-m", "64", "--persist", str(path))
    line = notice(stop(proc))
    m = re.search(r"recovered after a crash from \S+: (\d+) items back in \d+ ms, 1 corrupt segment dropped;", line)
    assert m and 0 < int(m.group(1)) < 3000, line


def raw_get(port: int, path: str) -> tuple[int, str]:
    """GET over a plain socket (faster than urllib: the poll below must be quick)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode().strip()


def poll_readyz(admin: int, seen: list, done: threading.Event) -> None:
    """Records each change of /readyz's answer, polling as fast as it answers, until `done`."""
    while not done.is_set():
        try:
            answer = raw_get(admin, "/readyz")
        except OSError:
            continue  # not bound yet
        if not seen or seen[-1] != answer:
            seen.append(answer)


def test_readyz_is_503_while_a_warm_start_checks_its_file(tmp_path):
    path = tmp_path / "cache.seg"
    proc, port = start("-m", "512", "--persist", str(path))
    # Three million items: rebuilding their index after a crash takes a few hundred ms.
    for part in range(3):
        batch = b"".join(b"set %d 0 0 1 noreply\r\nv\r\n" % (part * 1_000_000 + i) for i in range(1_000_000))
        assert send_all(port, batch + b"mn\r\n", b"MN\r\n").endswith(b"MN\r\n")
    proc.kill()  # a crash: the next start rebuilds the index from the segments
    proc.wait()
    admin = free_port()
    seen: list = []
    done = threading.Event()
    poller = threading.Thread(target=poll_readyz, args=(admin, seen, done))
    poller.start()
    try:
        # The poller is already knocking: it sees the endpoint from the moment it binds, which
        # is before the cache opens.
        proc, port = start("-m", "512", "--persist", str(path), "--admin-port", str(admin))
        deadline = time.monotonic() + 10
        while (not seen or seen[-1][0] != 200) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        done.set()
        poller.join()
    assert seen, "the admin endpoint never answered"
    assert seen[0] == (503, "starting: the cache is opening"), seen
    assert seen[-1] == (200, "ready"), seen
    assert http(admin, "/healthz") == (200, "ok\n")
    line = notice(stop(proc))
    assert "recovered after a crash" in line and "3000000 items back" in line, line


def test_readyz_is_ready_once_a_lazy_warm_start_listens(tmp_path):
    path = tmp_path / "cache.seg"
    proc, port = start("-m", "64", "--persist", str(path))
    fill(port, 1000)
    stop(proc)
    admin = free_port()
    proc, port = start("-m", "64", "--persist", str(path), "--lazy-verify", "--admin-port", str(admin))
    # Serving at once, segments checked at first use: ready as soon as it listens.
    assert http(admin, "/readyz") == (200, "ready\n")
    assert send_all(port, b"get k0000001\r\n", b"END\r\n").startswith(b"VALUE k0000001 0 1000\r\n")
    assert "warm start" in notice(stop(proc))


def test_readyz_is_503_while_draining(tmp_path):
    admin = free_port()
    proc, port = start("--admin-port", str(admin))
    assert http(admin, "/readyz") == (200, "ready\n")
    # A request half sent: the stop waits (up to its drain time) for it to complete.
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    c.sendall(b"set k 0 0 10\r\nabc")
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    status = None
    while time.monotonic() < deadline:
        status, body = http(admin, "/readyz")
        if status == 503:
            break
        time.sleep(0.02)
    assert (status, body) == (503, "draining: the server is stopping\n")
    assert http(admin, "/healthz") == (200, "ok\n")
    c.sendall(b"defghij\r\n")
    assert c.recv(100) == b"STORED\r\n"
    c.close()
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_admin_endpoint_binds_the_address_given():
    admin = free_port()
    proc, port = start("--admin-port", str(admin), "--admin-listen", "127.0.0.2")
    try:
        assert http(admin, "/healthz", host="127.0.0.2") == (200, "ok\n")
        with pytest.raises(urllib.error.URLError):
            http(admin, "/healthz", host="127.0.0.1")
    finally:
        assert f"admin on http://127.0.0.2:{admin}/" in notice(stop(proc))


def test_metrics_have_latency_summaries_per_command():
    admin = free_port()
    proc, port = start("--admin-port", str(admin))
    try:
        reqs = b"set a 0 0 1\r\n1\r\n" * 30 + b"get a\r\n" * 70 + b"delete a\r\n" + b"incr n 1\r\n"
        send_all(port, reqs + b"mn\r\n", b"MN\r\n")
        status, body = http(admin, "/metrics")
        assert status == 200
        assert "# TYPE segcache_request_duration_seconds summary" in body
        assert 'segcache_request_duration_seconds_count{command="get"} 70\n' in body
        assert 'segcache_request_duration_seconds_count{command="set"} 30\n' in body
        assert 'segcache_request_duration_seconds_count{command="delete"} 1\n' in body
        assert 'segcache_request_duration_seconds_count{command="incr_decr"} 1\n' in body
        qs = {}
        for q in ("0.5", "0.99", "0.999", "0.9999"):
            m = re.search(rf'segcache_request_duration_seconds{{command="get",quantile="{q}"}} (\S+)\n', body)
            assert m, body
            qs[q] = float(m.group(1))
        assert 0 < qs["0.5"] <= qs["0.99"] <= qs["0.999"] <= qs["0.9999"] < 1, qs
    finally:
        stop(proc)


KLOG_LINE = re.compile(r'^127\.0\.0\.1:\d+ - \[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "(get|set) k\d+( 0 0 1)?" '
                       r"(VALUE|END|STORED) \d+$")


def test_klog_logs_one_request_in_n_and_rotates_by_size(tmp_path):
    log = tmp_path / "klog"
    proc, port = start("-o", f"klog_file={log},klog_sample=10,klog_max_bytes=40k")
    try:
        reqs = b"".join(b"set k%d 0 0 1\r\nv\r\n" % i for i in range(5000))
        reqs += b"".join(b"get k%d\r\n" % i for i in range(5000))
        send_all(port, reqs + b"mn\r\n", b"MN\r\n")
    finally:
        stop(proc)  # the writer drains its queues at the stop
    files = sorted(tmp_path.glob("klog*"))
    assert log.with_name("klog.1") in files, "40k is less than the log: it rotated"
    lines = [l for f in files for l in f.read_text().splitlines()]
    # 10k requests, 1 in 10 (klog.2 may have been rotated away: 3 files of 40k hold them all).
    assert 900 <= len(lines) <= 1100, len(lines)
    assert all(KLOG_LINE.match(l) for l in lines), [l for l in lines if not KLOG_LINE.match(l)][:3]
    assert all(f.stat().st_size <= 40 << 10 for f in files)


def test_klog_is_off_by_default(tmp_path):
    admin = free_port()
    proc, port = start("--admin-port", str(admin))
    try:
        send_all(port, b"get x\r\n", b"END\r\n")
        assert "segcache_klog_" not in http(admin, "/metrics")[1]
    finally:
        stop(proc)


def test_hot_keys_in_stats_and_metrics():
    admin = free_port()
    proc, port = start("--admin-port", str(admin), "-o", "hotkey_sample=1,hotkey_top=3")
    try:
        reqs = b'get a"b\\c\r\n' * 50 + b"get warm\r\n" * 20 + b"".join(b"get cold%d\r\n" % i for i in range(100))
        send_all(port, reqs + b"mn\r\n", b"MN\r\n")
        settings = send_all(port, b"stats settings\r\n", b"END\r\n").decode()
        assert "STAT hotkey_sample 1\r\n" in settings and "STAT hotkey_top 3\r\n" in settings
        assert "STAT klog_file none\r\n" in settings and "STAT busy_poll_us 0\r\n" in settings
        raw = send_all(port, b"stats hotkeys\r\n", b"END\r\n").decode()
        assert 'STAT hotkey:1 a"b\\c 50\r\n' in raw, raw
        assert "STAT hotkey:2 warm 20\r\n" in raw, raw
        assert "STAT hotkey:4" not in raw, "hotkey_top=3"
        assert re.search(r"STAT worker:\d:hotkey:1 a\"b\\c 50\r\n", raw), raw
        body = http(admin, "/metrics")[1]
        # Label values escaped as Prometheus asks.
        assert 'segcache_hotkey_requests{worker="all",rank="1",key="a\\"b\\\\c"} 50\n' in body, body
        assert 'segcache_hotkey_requests{worker="all",rank="2",key="warm"} 20\n' in body
    finally:
        stop(proc)


def test_busy_poll_option_serves_and_says_when_refused():
    proc, port = start("-o", "busy_poll_us=50")
    assert send_all(port, b"set k 0 0 1\r\nv\r\nget k\r\n", b"END\r\n") == b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    err = stop(proc)
    if os.geteuid() != 0:
        # Without CAP_NET_ADMIN, 50 us above the sysctl (0 by default) is refused, with a warning.
        busy_read = int(Path("/proc/sys/net/core/busy_read").read_text())
        if busy_read < 50:
            assert "SO_BUSY_POLL refused" in err, err
    else:
        assert "SO_BUSY_POLL refused" not in err, err
