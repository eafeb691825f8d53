"""The segcache-server Debian package, installed on this machine as an operator would: `dpkg -i`,
the server started exactly as the unit's ExecStart says (as its User and Group; systemd itself
need not run), a client served, a SIGTERM, a warm restart, then `dpkg --purge` leaving nothing
behind. Needs root and dpkg; the package's path comes in SEGCACHE_DEB (make test-package builds it
with packaging/debian/build-deb.sh)."""

import configparser
import os
import pwd
import grp
import re
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from pymemcache.client.base import Client

PACKAGE = "segcache-server"
UNIT = Path("/lib/systemd/system/segcache-server.service")
CONFIG = Path("/etc/segcache/segcache.toml")
STATE = Path("/var/lib/segcache")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/dpkg").exists() or "SEGCACHE_DEB" not in os.environ,
    reason="needs root, dpkg and SEGCACHE_DEB (make test-package)",
)


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True)


def installed() -> bool:
    q = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", PACKAGE], capture_output=True, text=True)
    return q.returncode == 0 and q.stdout.strip() not in ("", "not-installed")


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}): {proc.stderr.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


def service_section() -> configparser.SectionProxy:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str
    unit.read_string(UNIT.read_text())
    return unit["Service"]


def exec_start(service: configparser.SectionProxy) -> list[str]:
    """ExecStart's command line as systemd reads it: its special prefixes (-, @, :, +, !) are not
    part of the command; this unit uses none of those that change how it runs."""
    line = service["ExecStart"].strip()
    prefixes = re.match(r"[-@:+!]*", line).group(0)
    assert not set(prefixes) & set("@+!"), f"ExecStart prefix {prefixes!r} changes how systemd runs it"
    argv = shlex.split(line[len(prefixes):])
    assert Path(argv[0]).is_absolute(), argv
    return argv


def start_as_unit(argv: list[str], user: str, group: str) -> subprocess.Popen:
    # systemd runs a system unit's command from / as User= and Group= with that user's groups;
    # setpriv execs the command itself, so the SIGTERM below reaches the server.
    cmd = ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups", *argv]
    return subprocess.Popen(cmd, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"exit status {proc.returncode} after SIGTERM: {err}"
    return err


def test_install_serve_restart_warm_and_purge():
    deb = Path(os.environ["SEGCACHE_DEB"]).resolve()
    assert not installed(), f"{PACKAGE} is already installed here: purge it first"
    assert not user_exists("segcache") and not group_exists("segcache"), "a segcache user or group already exists"
    assert not STATE.exists() and not Path("/etc/segcache").exists(), "/var/lib/segcache or /etc/segcache exists"

    proc = None
    try:
        run("dpkg", "-i", str(deb))
        files = [Path(p) for p in run("dpkg-query", "-L", PACKAGE).stdout.split()]
        shipped = [p for p in files if p.is_file()]
        assert {Path("/usr/bin/segcache-server"), UNIT, CONFIG,
                Path("/usr/share/man/man1/segcache-server.1.gz")} <= set(shipped), files
        conffiles = run("dpkg-query", "-W", "-f=${Conffiles}", PACKAGE).stdout
        assert str(CONFIG) in conffiles, "the config file is not a conffile: an upgrade would overwrite edits"

        # The man page is the server's own: every long flag of --help is in it.
        man = run("sh", "-c", "zcat /usr/share/man/man1/segcache-server.1.gz").stdout
        flags = set(re.findall(r"--[a-z][a-z-]+", run("/usr/bin/segcache-server", "--help").stdout))
        assert flags and all(f.replace("-", r"\-") in man for f in flags), flags

        # A system user that cannot log in, owning the heap's directory, which others cannot read.
        user = pwd.getpwnam("segcache")
        assert user.pw_uid < 1000 and user.pw_shell.endswith("nologin"), user
        st = STATE.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (user.pw_uid, user.pw_gid, 0o750)

        service = service_section()
        assert (service["User"], service["Group"]) == ("segcache", "segcache")
        argv = exec_start(service)
        assert argv[0] == "/usr/bin/segcache-server"

        # An operator's edit of the conffile: a free port (11211 may be taken on this machine).
        port = free_port()
        text = CONFIG.read_text()
        assert re.search(r"^port = 11211$", text, re.M), "the config file does not set the port"
        CONFIG.write_text(re.sub(r"^port = 11211$", f"port = {port}", text, flags=re.M))

        proc = start_as_unit(argv, "segcache", "segcache")
        wait_port(port, proc)
        client = Client(("127.0.0.1", port), connect_timeout=5, timeout=5)
        assert client.set("packaged", b"warm value", expire=0, noreply=False)
        assert client.get("packaged") == b"warm value"
        client.close()
        log = stop(proc)
        assert "cold start" in log, log
        heap = STATE / "cache.seg"
        assert heap.stat().st_uid == user.pw_uid, "the heap's file is not the segcache user's"

        proc = start_as_unit(argv, "segcache", "segcache")
        wait_port(port, proc)
        client = Client(("127.0.0.1", port), connect_timeout=5, timeout=5)
        assert client.get("packaged") == b"warm value", "the restart was not warm"
        client.close()
        log = stop(proc)
        assert "warm start" in log, log
        proc = None
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["dpkg", "--purge", PACKAGE], capture_output=True)

    assert not installed()
    left = [p for p in shipped if p.exists()]
    assert not left, f"left behind after purge: {left}"
    assert not STATE.exists() and not Path("/etc/segcache").exists()
    assert not user_exists("segcache") and not group_exists("segcache")
