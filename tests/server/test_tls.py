"""TLS on the data port (-Z): certificates made here with `openssl`, clients `openssl s_client`
and pymemcache's `tls_context`, memcached -Z (Debian's build has TLS) as the oracle for the
operator-visible behaviour (refresh_certs replies, start errors, stats names)."""

import os
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from pymemcache.client.base import Client

import diffkit
from conftest import free_port, server_binary

ROOT_USER = ["-u", "root"] if os.geteuid() == 0 else []
# What a refused handshake looks like to a client: an alert, a reset, or an early close.
REFUSED = (ssl.SSLError, ConnectionError, OSError, Exception)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt",
            "-days", "30", "-subj", f"/CN={name}", cwd=d)


def make_cert(d: Path, name: str, ca: str, cn: str, days: str = "30", server: bool = True) -> None:
    """A certificate `name` signed by `ca`; `days` "-1" makes one that expired yesterday."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={cn}", cwd=d)
    ext = d / f"{name}.ext"
    if server:
        ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    else:
        ext.write_text("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", days, "-extfile", ext.name, cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """ca: the CA; server, server2: two server certificates by it; client: a client certificate
    by it; expired: one by it that expired; stranger: a client certificate by another CA."""
    d = tmp_path_factory.mktemp("certs")
    make_ca(d, "ca")
    make_ca(d, "otherca")
    make_cert(d, "server", "ca", "localhost")
    make_cert(d, "server2", "ca", "localhost-2")
    make_cert(d, "client", "ca", "client", server=False)
    make_cert(d, "expired", "ca", "expired", days="-1", server=False)
    make_cert(d, "stranger", "otherca", "stranger", server=False)
    return d


class TlsServer:
    """A server with a plain (`notls:`) listener on `plain` and a TLS one on `port`."""

    def __init__(self, chain: Path, key: Path, *extra: str, binary: str | None = None, threads: str = "2"):
        self.plain, self.port = free_port(), free_port()
        argv = [binary or str(server_binary())]
        if binary is None:
            argv += ["-m", "64", "--no-pin"]
        argv += ["-p", str(self.port), "-t", threads, "-U", "0", "-l",
                 f"notls:127.0.0.1:{self.plain},127.0.0.1:{self.port}", "-Z",
                 "-o", f"ssl_chain_cert={chain},ssl_key={key}", *extra, *ROOT_USER]
        self.proc = diffkit.Proc(Path(argv[0]).name, argv, self.plain)

    def command(self, line: bytes) -> bytes:
        """One text command on the plain listener; its first reply line."""
        with socket.create_connection(("127.0.0.1", self.plain), timeout=10) as s:
            s.sendall(line)
            data = b""
            while not data.endswith(b"\r\n"):
                chunk = s.recv(4096)
                assert chunk, data
                data += chunk
            return data

    def stats(self, what: str = "") -> dict[str, str]:
        with socket.create_connection(("127.0.0.1", self.plain), timeout=10) as s:
            s.sendall(f"stats {what}\r\n".encode())
            data = b""
            while not data.endswith(b"END\r\n"):
                chunk = s.recv(65536)
                assert chunk, data
                data += chunk
        return {p[1]: p[2] for p in (l.split(" ", 2) for l in data.decode().splitlines()) if p[0] == "STAT"}

    def stop(self) -> int:
        return self.proc.stop()


@pytest.fixture
def server(certs):
    srv = TlsServer(certs / "server.crt", certs / "server.key")
    yield srv
    assert srv.stop() == 0


def context(certs: Path, client: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if client:
        ctx.load_cert_chain(str(certs / f"{client}.crt"), str(certs / f"{client}.key"))
    return ctx


def tls_client(port: int, ctx: ssl.SSLContext) -> Client:
    return Client(("127.0.0.1", port), tls_context=ctx, connect_timeout=10, timeout=10)


def served(port: int, ctx: ssl.SSLContext, key: str = "k") -> bool:
    """Whether a TLS client gets a store and a fetch through; False when the server refused it."""
    c = tls_client(port, ctx)
    try:
        c.set(key, b"v")
        return c.get(key) == b"v"
    except REFUSED:
        return False
    finally:
        c.close()


def peer_cert(port: int, certs: Path) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context(certs).wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)


def der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def test_pymemcache_over_tls_beside_a_plain_listener(server, certs):
    c = tls_client(server.port, context(certs))
    big = os.urandom(700 << 10)  # many TLS records each way, more than a socket buffer
    c.set("small", b"hello")
    c.set("big", big)
    assert c.get("small") == b"hello"
    assert c.get_many(["small", "big"]) == {"small": b"hello", "big": big}
    c.close()
    # The plain listener serves the same cache.
    assert server.command(b"get small\r\n") == b"VALUE small 0 5\r\nhello\r\nEND\r\n"
    assert peer_cert(server.port, certs) == der(certs / "server.crt")


def test_a_large_reply_then_quit_is_sent_whole_before_the_close(server, certs):
    big = os.urandom(900 << 10)
    c = tls_client(server.port, context(certs))
    assert c.set("big", big, noreply=False)
    c.close()
    with socket.socket() as raw:
        # A small receive window and 7 MB of reply read in small pieces: the server's socket
        # fills again and again, its TLS records wait, and `quit` closes only after the last.
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.settimeout(10)
        raw.connect(("127.0.0.1", server.port))
        with context(certs).wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"get" + b" big" * 8 + b"\r\nquit\r\n")
            time.sleep(0.5)
            got = bytearray()
            while chunk := s.recv(4096):
                got += chunk
                time.sleep(0.0005)
    one = b"VALUE big 0 %d\r\n" % len(big) + big + b"\r\n"
    assert got == one * 8 + b"END\r\n"


def test_openssl_s_client(server, certs):
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{server.port}", "-CAfile",
                        str(certs / "ca.crt"), "-verify_return_error", "-quiet"],
                       input=b"set a 0 0 2\r\nhi\r\nget a\r\nquit\r\n", capture_output=True, timeout=30)
    assert b"STORED\r\nVALUE a 0 2\r\nhi\r\nEND\r\n" in r.stdout, r
    # The plain listener speaks no TLS.
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{server.plain}", "-quiet"],
                       input=b"version\r\n", capture_output=True, timeout=30)
    assert r.returncode != 0


def test_garbage_instead_of_a_handshake_closes_that_connection_only(server, certs):
    before = int(server.stats()["ssl_handshake_errors"])
    for junk in (b"version\r\n", os.urandom(300), b"\x16\x03\x01\x00\x05hello" + os.urandom(64)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(junk)
            got = b""
            while chunk := s.recv(4096):  # an alert at most, then the server closes
                got += chunk
            assert b"VERSION" not in got and len(got) < 64, got
    assert int(server.stats()["ssl_handshake_errors"]) >= before + 3
    assert served(server.port, context(certs))


def test_a_stalled_handshake_holds_no_worker(certs):
    # One worker: a server that ran the handshake to its end before serving anyone else would
    # hang the client below behind the stalled ones.
    srv = TlsServer(certs / "server.crt", certs / "server.key", threads="1")
    try:
        silent = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        half = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        hello = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = context(certs).wrap_bio(*hello, server_hostname="127.0.0.1")
        with pytest.raises(ssl.SSLWantReadError):
            obj.do_handshake()
        client_hello = hello[1].read()
        half.sendall(client_hello[: len(client_hello) // 2])
        # The second client is served while both stall (pymemcache's own timeout is 10 s).
        assert served(srv.port, context(certs))
        assert srv.command(b"version\r\n").startswith(b"VERSION ")
        assert int(srv.stats()["curr_connections"]) >= 3
        silent.close()
        half.close()
    finally:
        assert srv.stop() == 0


def test_mutual_tls_requires_a_client_certificate_from_the_ca(certs):
    srv = TlsServer(certs / "server.crt", certs / "server.key", "-o",
                    f"ssl_ca_cert={certs / 'ca.crt'},ssl_verify_mode=2")
    try:
        assert srv.stats("settings")["ssl_verify_mode"] == "2"
        assert served(srv.port, context(certs, "client"))
        before = int(srv.stats()["ssl_handshake_errors"])
        assert not served(srv.port, context(certs))  # no certificate
        assert not served(srv.port, context(certs, "stranger"))  # signed by another CA
        assert not served(srv.port, context(certs, "expired"))  # expired
        assert int(srv.stats()["ssl_handshake_errors"]) == before + 3
        assert served(srv.port, context(certs, "client"), key="again")
    finally:
        assert srv.stop() == 0


def test_verify_mode_request_takes_clients_without_a_certificate(certs):
    srv = TlsServer(certs / "server.crt", certs / "server.key", "-o",
                    f"ssl_ca_cert={certs / 'ca.crt'},ssl_verify_mode=1")
    try:
        assert served(srv.port, context(certs))
        assert served(srv.port, context(certs, "client"))
        assert not served(srv.port, context(certs, "stranger"))
    finally:
        assert srv.stop() == 0


def reload_case(binary: str | None, certs: Path, tmp: Path, how: str) -> tuple[list[bytes], list[bytes]]:
    """Starts a server on copies of `server.*`, swaps in `server2.*` and reloads (`how`:
    refresh_certs or SIGHUP), then breaks the chain file and reloads again. Returns the
    certificates new TLS clients saw after each step and what refresh_certs answered."""
    chain, key = tmp / "chain.pem", tmp / "key.pem"
    chain.write_bytes((certs / "server.crt").read_bytes())
    key.write_bytes((certs / "server.key").read_bytes())
    srv = TlsServer(chain, key, binary=binary)
    seen, replies = [], []

    def reload() -> None:
        if how == "command":
            replies.append(srv.command(b"refresh_certs\r\n"))
        else:
            srv.proc.proc.send_signal(signal.SIGHUP)
            time.sleep(0.5)

    try:
        seen.append(peer_cert(srv.port, certs))
        held = tls_client(srv.port, context(certs))
        held.set("held", b"1")
        chain.write_bytes((certs / "server2.crt").read_bytes())
        key.write_bytes((certs / "server2.key").read_bytes())
        reload()
        seen.append(peer_cert(srv.port, certs))
        chain.write_text("not a certificate\n")
        reload()
        seen.append(peer_cert(srv.port, certs))
        assert held.get("held") == b"1"  # a connection open across the reloads goes on
        held.close()
        assert srv.proc.proc.poll() is None
    finally:
        srv.stop()
    return seen, replies


@pytest.mark.parametrize("how", ["command", "sighup"])
def test_certificates_reload_without_a_restart(certs, tmp_path, how):
    seen, replies = reload_case(None, certs, tmp_path, how)
    first, second = der(certs / "server.crt"), der(certs / "server2.crt")
    # After a failed reload the certificates loaded before stay in use.
    assert seen == [first, second, second]
    if how == "command":
        assert replies[0] == b"OK\r\n"
        chain = tmp_path / "chain.pem"
        assert replies[1].startswith(f"Error loading the certificate chain: {chain} : ".encode()), replies
        assert replies[1].endswith(b"\r\n") and replies[1].count(b"\r\n") == 1
        # memcached answers the same (its error text after the path is OpenSSL's).
        mc_dir = tmp_path / "mc"
        mc_dir.mkdir()
        mc_seen, mc_replies = reload_case(diffkit.MEMCACHED, certs, mc_dir, how)
        assert mc_seen == seen
        assert mc_replies[0] == replies[0]
        assert mc_replies[1].startswith(f"Error loading the certificate chain: {mc_dir / 'chain.pem'} : ".encode())


def test_refresh_certs_without_tls_answers_as_memcached():
    sc = diffkit.Proc("segcache-server", [str(server_binary()), "-p", str(port := free_port()), "-t", "1",
                                          "--no-pin", *ROOT_USER], port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"refresh_certs\r\n")
            assert s.recv(100) == b"Error TLS not enabled\r\n"
    finally:
        sc.stop()


def test_stats_name_the_tls_figures_as_memcached(server, certs):
    mc = TlsServer(certs / "server.crt", certs / "server.key", binary=diffkit.MEMCACHED)
    try:
        names = ["ssl_handshake_errors", "time_since_server_cert_refresh"]
        assert all(n in mc.stats() for n in names)
        ours = server.stats()
        # ssl_proto_errors: newer memcached's (1.6.18 has not got it yet).
        assert all(n in ours for n in [*names, "ssl_proto_errors"]), ours
        settings = ["ssl_enabled", "ssl_chain_cert", "ssl_key", "ssl_verify_mode", "ssl_ca_cert", "ssl_min_version"]
        theirs, ours = mc.stats("settings"), server.stats("settings")
        assert [theirs[n] for n in ("ssl_enabled", "ssl_verify_mode", "ssl_ca_cert", "ssl_min_version")] == \
            [ours[n] for n in ("ssl_enabled", "ssl_verify_mode", "ssl_ca_cert", "ssl_min_version")]
        assert all(n in ours for n in settings)
        assert ours["ssl_chain_cert"] == str(certs / "server.crt")
    finally:
        mc.stop()


@pytest.mark.parametrize("args,message", [
    (["-Z"], "ssl_chain_cert"),
    (["-Z", "-o", "ssl_chain_cert=/nonexistent/chain.pem"], "Error loading the certificate chain: /nonexistent"),
    (["-Z", "-o", "ssl_chain_cert={certs}/server.crt,ssl_key={certs}/client.key"],
     "Error validating the certificate"),
    (["-Z", "-o", "ssl_chain_cert={certs}/server.crt,ssl_key={certs}/server.key,ssl_verify_mode=2"], "ssl_ca_cert"),
    (["-Z", "-o", "ssl_chain_cert={certs}/server.crt,ssl_key={certs}/server.key,ssl_ciphers=HIGH"], "ssl_ciphers"),
])
def test_bad_tls_settings_refuse_to_start(certs, args, message):
    args = [a.format(certs=certs) for a in args]
    r = subprocess.run([str(server_binary()), "-p", str(free_port()), *args, *ROOT_USER], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_tls_from_the_config_file(certs, tmp_path):
    conf = tmp_path / "segcache.toml"
    plain, port = free_port(), free_port()
    conf.write_text(f'listen = "notls:127.0.0.1:{plain},127.0.0.1:{port}"\n[tls]\nenabled = true\n'
                    f'chain_cert = "{certs / "server.crt"}"\nkey = "{certs / "server.key"}"\n'
                    f'ca_cert = "{certs / "ca.crt"}"\nverify_mode = "require"\n')
    sc = diffkit.Proc("segcache-server", [str(server_binary()), "--config", str(conf), "-t", "1", "--no-pin",
                                          *ROOT_USER], plain)
    try:
        assert served(port, context(certs, "client"))
        assert not served(port, context(certs))
    finally:
        sc.stop()


def test_a_daemon_reloads_certificates_given_by_relative_paths(certs, tmp_path):
    # -d runs in /: the files named relative to the start directory must still be found on a
    # reload.
    pidfile = tmp_path / "sc.pid"
    plain, port = free_port(), free_port()
    subprocess.run([str(server_binary()), "-d", "-P", str(pidfile), "-Z", "-p", str(port), "-l",
                    f"notls:127.0.0.1:{plain},127.0.0.1:{port}", "-o", "ssl_chain_cert=server.crt,ssl_key=server.key",
                    "-t", "1", "--no-pin", *ROOT_USER], cwd=certs, check=True, timeout=20)
    deadline = time.monotonic() + 10
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the daemon did not start: were its certificates found after chdir /?"
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    try:
        assert served(port, context(certs))
        with socket.create_connection(("127.0.0.1", plain), timeout=10) as s:
            s.sendall(b"refresh_certs\r\n")
            assert s.recv(200) == b"OK\r\n"
    finally:
        os.kill(pid, signal.SIGTERM)
