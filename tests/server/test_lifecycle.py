"""Lifecycle and operations: graceful stop on SIGTERM/SIGINT, the connection limit, the admin
port, the config file and flags, warm restart from a persistence file."""

import re
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from pymemcache.client.base import Client

from conftest import ROOT_USER, Raw, Server, free_port, server_binary


def stats(port: int, arg: str = "") -> dict[str, str]:
    r = Raw(socket.create_connection(("127.0.0.1", port), timeout=5))
    r.send(f"stats {arg}".strip().encode() + b"\r\n")
    out = {}
    while (line := r.line()) != b"END":
        _, name, value = line.decode().split(" ", 2)
        out[name] = value
    r.sock.close()
    return out


def test_sigterm_finishes_in_flight_requests(fresh_server):
    s = fresh_server()
    r = Raw(s.connect())
    idle = [s.connect() for _ in range(5)]  # idle clients must not hold up the stop
    r.send(b"set inflight 0 0 10\r\nhello")
    time.sleep(0.2)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    r.send(b"world\r\nget inflight\r\n")
    assert r.line() == b"STORED"
    assert r.line() == b"VALUE inflight 0 10" and r.line() == b"helloworld" and r.line() == b"END"
    assert r.closed()  # closed once it sits between requests
    assert s.proc.wait(10) == 0
    for c in idle:
        c.close()
    # It no longer accepts connections.
    with pytest.raises(OSError):
        s.connect(timeout=1).sendall(b"version\r\n")
        raise OSError("still listening")


def test_sigint_stops_too_and_closes_the_engine(fresh_server):
    s = fresh_server("-v")
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(10) == 0
    log = s.proc.stderr.read()
    assert "stopping gracefully" in log and "cache closed" in log


def test_connection_limit_refuses_politely(fresh_server):
    s = fresh_server("-c", "3")
    # The start-up probe's connection is released asynchronously: wait for it to go.
    deadline = time.monotonic() + 5
    while stats(s.port)["curr_connections"] != "1" and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    held = [Raw(s.connect()) for _ in range(3)]
    for h in held:
        assert h.request(b"version\r\n").startswith(b"VERSION")
    extra = Raw(s.connect())
    assert extra.line() == b"SERVER_ERROR too many open connections"
    assert extra.closed()
    held.pop().sock.close()
    time.sleep(0.2)
    again = Raw(s.connect())
    assert again.request(b"version\r\n").startswith(b"VERSION")
    # Every slot is taken, so ask through one of the held connections.
    again.send(b"stats\r\n")
    st = {}
    while (line := again.line()) != b"END":
        _, name, value = line.decode().split(" ", 2)
        st[name] = value
    assert int(st["rejected_connections"]) >= 1 and st["max_connections"] == "3"
    assert st["curr_connections"] == "3"


def test_admin_port_serves_prometheus_metrics(fresh_server):
    admin = free_port()
    s = fresh_server("--admin-port", str(admin))
    c = Client(("127.0.0.1", s.port), default_noreply=False)
    c.set("m", b"1")
    c.get("m")
    c.get("missing")
    body = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    assert "# TYPE segcache_get_hits counter" in body
    assert "segcache_get_hits 1" in body and "segcache_get_misses 1" in body
    assert "segcache_curr_items 1" in body and "segcache_curr_connections" in body
    # The engine's figures, typed and described by its own list.
    assert re.search(r"^# HELP segcache_engine_items Live items\b.*\n# TYPE segcache_engine_items gauge\nsegcache_engine_items 1\n", body, re.M)
    assert "# TYPE segcache_engine_evicted_items counter" in body
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://127.0.0.1:{admin}/other", timeout=5)
    assert stats(s.port, "settings")["admin_port"] == str(admin)
    c.close()


def test_admin_port_is_off_by_default(server):
    assert stats(server.port, "settings")["admin_port"] == "0"


def test_config_file_and_flags_override_it(fresh_server, tmp_path):
    conf = tmp_path / "segcache.toml"
    conf.write_text(
        'threads = 3\nmax_item_size = "2k"\nmemory_mb = 16\nmax_connections = 77\npin = false\n'
        '[engine]\neviction = "fifo"\n'
    )
    s = fresh_server("--config", str(conf), "-c", "50")  # -t 2 comes from the fixture
    st = stats(s.port, "settings")
    assert st["num_threads"] == "2"  # flag beats file
    assert st["maxconns"] == "50"  # flag beats file
    assert st["item_size_max"] == "2048"  # from the file
    assert st["maxbytes"] == str(16 << 20)
    assert st["eviction_policy"] == "fifo"
    assert st["pin_threads"] == "no"
    c = Client(("127.0.0.1", s.port), default_noreply=False)
    with pytest.raises(Exception, match="too large"):
        c.set("k", b"x" * 3000)
    assert c.set("k", b"x" * 1000)
    c.close()


@pytest.mark.parametrize(
    "args, message",
    [
        (["-I", "100m"], "max item size"),
        (["--eviction", "lru"], "eviction"),
        (["-t", "0"], "threads"),
        (["--config", "/nonexistent/segcache.toml"], "cannot read config file"),
    ],
)
def test_bad_settings_exit_with_a_clear_message(args, message):
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), *args, *ROOT_USER], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 2
    assert message in r.stderr


def test_bad_config_key_is_named(tmp_path):
    conf = tmp_path / "bad.toml"
    conf.write_text("prot = 1\n")
    r = subprocess.run([str(server_binary()), "--config", str(conf)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "prot" in r.stderr


def test_port_in_use_is_reported(server):
    r = subprocess.run([str(server_binary()), "-p", str(server.port), *ROOT_USER], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "cannot listen" in r.stderr


def test_pinning_options(fresh_server):
    s = fresh_server("--cores", "0", "-v")
    assert stats(s.port, "settings")["pin_threads"] == "yes"
    s2 = fresh_server("--no-pin")
    assert stats(s2.port, "settings")["pin_threads"] == "no"


def test_graceful_stop_then_warm_restart(tmp_path):
    path = tmp_path / "cache.seg"
    port = free_port()
    s = Server("--persist", str(path), "-m", "16", port=port).start()
    c = Client(("127.0.0.1", port), default_noreply=False)
    for i in range(500):
        c.set(f"warm{i}", f"value{i}".encode(), expire=3600)
    c.close()
    assert s.stop() == 0
    time.sleep(1.1)
    # Once with the whole heap checked before listening, once with segments checked lazily.
    for lazy in ([], ["--lazy-verify"]):
        s = Server("--persist", str(path), "-m", "16", *lazy, port=port).start()
        c = Client(("127.0.0.1", port), default_noreply=False)
        got = c.get_many([f"warm{i}" for i in range(500)])
        assert got == {f"warm{i}": f"value{i}".encode() for i in range(500)}
        c.close()
        assert s.stop() == 0
        time.sleep(1.1)


def test_unusable_persistence_file_is_refused_unless_reset(tmp_path):
    path = tmp_path / "garbage.seg"
    path.write_bytes(b"not a segcache file" * 1000)
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), "--persist", str(path), *ROOT_USER],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "garbage.seg" in r.stderr
    s = Server("--persist", str(path), "--reset-bad-file").start()
    c = Client(("127.0.0.1", s.port), default_noreply=False)
    assert c.get("anything") is None and c.set("k", b"v")
    c.close()
    assert s.stop() == 0


def test_a_file_keeps_the_layout_it_was_made_with(tmp_path):
    """A start that sets no segment size, shard count or hash power takes them from the file (as
    the one of a server whose defaults differed: 2 MiB segments for -I 1m; none of the three is
    this start's default) and is warm. A start
    that sets another, or whose -I needs larger segments than the file's, or another heap size, is
    refused with the setting named, and the file is left as it was."""
    path = tmp_path / "cache.seg"
    port = free_port()
    made = ("--segment-size", "2m", "--shards", "2", "--hash-power", "9")  # none of them a default
    s = Server("--persist", str(path), "-m", "16", *made, port=port).start()
    c = Client(("127.0.0.1", port), default_noreply=False)
    assert c.set("kept", b"value")
    hash_bytes = stats(port)["hash_bytes"]
    c.close()
    assert s.stop() == 0
    before = path.read_bytes()
    for args, reason in ((["--segment-size", "1m"], "segment size is 2097152 in the file, 1048576 in this cache"),
                         (["--shards", "1"], "shard count is 2 in the file, 1 in this cache"),
                         (["--hash-power", "10"], "hash power is 9 in the file, 10 in this cache"),
                         (["-I", "3m"], "segment size is 2097152 in the file, 4194304 in this cache"),
                         (["-m", "32"], "heap size is 16777216 bytes in the file, 33554432 in this cache")):
        r = subprocess.run([str(server_binary()), "-p", str(free_port()), "--persist", str(path),
                            *([] if "-m" in args else ["-m", "16"]), *args, *ROOT_USER], capture_output=True, text=True, timeout=10)
        assert r.returncode == 1 and reason in r.stderr, (args, r.stderr)
        assert path.read_bytes() == before
    s = Server("--persist", str(path), "-m", "16", port=port).start()
    c = Client(("127.0.0.1", port), default_noreply=False)
    assert c.get("kept") == b"value"
    settings = stats(port, "settings")
    assert (settings["segment_size"], settings["shards"]) == (str(2 << 20), "2"), settings
    assert stats(port)["hash_bytes"] == hash_bytes
    c.close()
    assert s.stop() == 0
    # Another heap size: the file cannot open, and a start over it has this heap's own defaults.
    s = Server("--persist", str(path), "-m", "32", "--reset-bad-file", port=port).start()
    assert stats(port, "settings")["segment_size"] == str(1 << 20)
    assert stats(port)["curr_items"] == "0"
    assert s.stop() == 0
