"""Standard tools against the server: memccapable's ASCII conformance suite, and a twemproxy
(nutcracker) cluster of three servers."""

import hashlib
import shutil
import subprocess
import time

import pytest
from pymemcache.client.base import Client

from conftest import Server, free_port, wait_port


def test_memccapable_ascii_suite_passes(server):
    tool = shutil.which("memccapable") or shutil.which("memcapable")
    assert tool, "memccapable missing: apt-get install libmemcached-tools (make deps)"
    r = subprocess.run([tool, "-h", "127.0.0.1", "-p", str(server.port), "-a", "-t", "5"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "All tests passed" in r.stdout + r.stderr


@pytest.fixture
def cluster(tmp_path):
    tool = shutil.which("nutcracker")
    assert tool, "nutcracker missing: apt-get install nutcracker (make deps)"
    servers = [Server("-m", "16").start() for _ in range(3)]
    port, stats_port = free_port(), free_port()
    conf = tmp_path / "nutcracker.yml"
    conf.write_text(
        "pool:\n"
        f"  listen: 127.0.0.1:{port}\n"
        "  hash: fnv1a_64\n"
        "  distribution: ketama\n"
        "  timeout: 2000\n"
        "  auto_eject_hosts: false\n"
        "  servers:\n" + "".join(f"    - 127.0.0.1:{s.port}:1\n" for s in servers)
    )
    check = subprocess.run([tool, "-t", "-c", str(conf)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    proxy = subprocess.Popen([tool, "-c", str(conf), "-s", str(stats_port), "-a", "127.0.0.1",
                              "-o", str(tmp_path / "nutcracker.log")])
    deadline = time.monotonic() + 10
    while True:
        try:
            c = Client(("127.0.0.1", port), timeout=1, connect_timeout=1)
            try:
                c.get("probe")
            finally:
                c.close()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield port, servers
    proxy.terminate()
    proxy.wait(10)
    for s in servers:
        assert s.stop() == 0


def test_nutcracker_cluster_spreads_and_reads_back(cluster):
    port, servers = cluster
    proxy = Client(("127.0.0.1", port), timeout=5, default_noreply=False)
    # Varied keys: twemproxy's fnv1a_64 barely mixes a key's last byte, so keys that differ only
    # there land together.
    keys = [f"cluster-{hashlib.sha1(str(i).encode()).hexdigest()[:16]}" for i in range(600)]
    for k in keys:
        assert proxy.set(k, k.encode() * 3)
    for k in keys:
        assert proxy.get(k) == k.encode() * 3
    got = proxy.get_many(keys[:50])
    assert got == {k: k.encode() * 3 for k in keys[:50]}
    proxy.set("counter", b"1")
    assert proxy.incr("counter", 41) == 42
    assert proxy.delete("counter")

    # Each key lives on exactly one backend, and every backend holds a fair share.
    shares = []
    for s in servers:
        direct = Client(("127.0.0.1", s.port), timeout=5)
        held = direct.get_many(keys)
        shares.append(len(held))
        assert all(v == k.encode() * 3 for k, v in held.items())
        direct.close()
    assert sum(shares) == len(keys), shares
    assert all(n >= len(keys) // 20 for n in shares), shares
