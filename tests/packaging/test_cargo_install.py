"""`cargo install` gives a working server, from the repository (`--path segcache-server`) and from
the crate files `cargo package` makes, as crates.io would serve them: each installed binary serves
a client (set, get) and stops cleanly on SIGTERM. The crate install runs offline: its
dependencies come from cargo's cache, and segcache-core, not on crates.io here, from its own
packaged crate."""

import os
import signal
import socket
import subprocess
import tarfile
import time
import tomllib
from pathlib import Path

from pymemcache.client.base import Client

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
CARGO = os.environ.get("CARGO", "cargo")
VERSION = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]


def cargo(*args: str, target_dir: Path) -> None:
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir)}
    subprocess.run([CARGO, *args], cwd=ROOT, env=env, check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serves(binary: Path) -> None:
    port = free_port()
    # As memcached, the server refuses to run as root without -u.
    user = ["-u", "root"] if os.geteuid() == 0 else []
    proc = subprocess.Popen([str(binary), "-p", str(port), "-t", "1", "-m", "8", *user],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"{binary} exited ({proc.returncode}): {proc.stderr.read()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"{binary} does not listen on {port}"
                time.sleep(0.05)
        client = Client(("127.0.0.1", port), connect_timeout=5, timeout=5)
        assert client.set("installed", b"serves", noreply=False)
        assert client.get("installed") == b"serves"
        assert client.get("absent") is None
        client.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_install_from_the_repository(tmp_path):
    # The workspace's own target directory: what `cargo build --release` built is reused.
    cargo("install", "--locked", "--offline", "--root", str(tmp_path), "--path", "segcache-server",
          target_dir=TARGET)
    serves(tmp_path / "bin" / "segcache-server")


def test_install_from_the_packaged_crate(tmp_path):
    cargo("package", "--locked", "--offline", "--no-verify", "--allow-dirty", "-p", "segcache-core",
          "-p", "segcache-server", target_dir=TARGET)
    for crate in ("segcache-core", "segcache-server"):
        with tarfile.open(TARGET / "package" / f"{crate}-{VERSION}.crate") as tar:
            tar.extractall(tmp_path / "src", filter="data")
    src = tmp_path / "src"
    assert not (src / f"segcache-server-{VERSION}" / "tests").exists(), "the crate holds only what users need"
    cargo("install", "--locked", "--offline", "--root", str(tmp_path / "root"),
          "--path", str(src / f"segcache-server-{VERSION}"),
          "--config", f'patch.crates-io.segcache-core.path="{src / f"segcache-core-{VERSION}"}"',
          target_dir=TARGET / "install")
    serves(tmp_path / "root" / "bin" / "segcache-server")
