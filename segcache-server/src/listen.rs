//! Listening sockets (TCP, TLS over TCP, and a UNIX socket as memcached's `-s`) and the client
//! streams they accept, one type for all so that the workers do not care which.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};

use crate::config::Settings;
use crate::tls::{Tls, TlsStream};

/// A client connection, over TCP, TLS or a UNIX socket.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The peer's address; a UNIX socket's peer shows as `0.0.0.0:0`.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok(),
            Stream::Unix(_) => None,
            Stream::Tls(s) => s.tcp.peer_addr().ok(),
        }
    }

    /// The local address; a UNIX socket shows as `0.0.0.0:0`.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.local_addr().ok(),
            Stream::Unix(_) => None,
            Stream::Tls(s) => s.tcp.local_addr().ok(),
        }
    }

    /// memcached's word for the transport in `watch connevents` lines.
    pub fn transport(&self) -> &'static str {
        match self {
            Stream::Tcp(_) | Stream::Tls(_) => "tcp",
            Stream::Unix(_) => "local",
        }
    }

    /// Whether a read that returned less than the buffer's room emptied the socket (so that
    /// edge-triggered readiness fires for the next bytes). Not so for TLS: one read gives the
    /// plaintext of what rustls decrypted so far, and more records may wait in the socket.
    pub fn short_read_drains(&self) -> bool {
        !matches!(self, Stream::Tls(_))
    }

    /// Whether bytes the worker already handed over (TLS records) still wait to be written.
    pub fn wants_write(&self) -> bool {
        match self {
            Stream::Tls(s) => s.wants_write(),
            _ => false,
        }
    }

    /// Writes what [`Stream::wants_write`] holds, as far as the socket takes it.
    pub fn push_pending(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => match s.push() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
                r => r,
            },
            _ => Ok(()),
        }
    }

    /// Before closing: a TLS connection sends its close_notify.
    pub fn close_notify(&mut self) {
        if let Stream::Tls(s) = self {
            s.close_notify();
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.tcp.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
            Stream::Tls(s) => s.tcp.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
            Stream::Tls(s) => s.tcp.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
            Stream::Tls(s) => s.tcp.deregister(r),
        }
    }
}

/// The file a UNIX listener bound: its path and the device and inode it had right after the
/// bind, which tell it from a socket another process made at the same path later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    fn of(path: &Path) -> io::Result<SocketFile> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path)?;
        Ok(SocketFile { path: path.to_path_buf(), dev: m.dev(), ino: m.ino() })
    }

    /// Removes the file if it is still the one bound: a server started later on the same path
    /// (after this one's was removed by hand, say) keeps its socket.
    fn remove(&self) {
        match SocketFile::of(&self.path) {
            Ok(now) if now == *self => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    log::warn!("cannot remove the UNIX socket {}: {e}", self.path.display());
                }
            }
            Ok(_) => log::warn!("leaving {}: another socket took its place", self.path.display()),
            Err(_) => {}
        }
    }
}

/// A listening socket.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener, SocketAddr),
    Unix(UnixListener, SocketFile),
    /// TCP whose connections speak TLS (`-Z`).
    Tls(TcpListener, SocketAddr, Arc<Tls>),
}

impl Listener {
    /// Accepts one connection; the name is the peer's, for log lines.
    pub fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Listener::Tcp(l, _) => l.accept().map(|(s, peer)| {
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), peer.to_string())
            }),
            Listener::Unix(l, file) => l.accept().map(|(s, _)| (Stream::Unix(s), file.path.display().to_string())),
            Listener::Tls(l, _, tls) => {
                let (s, peer) = l.accept()?;
                let _ = s.set_nodelay(true);
                Ok((Stream::Tls(Box::new(tls.accept(s)?)), peer.to_string()))
            }
        }
    }

    /// Where it listens, for log lines.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(_, a) => a.to_string(),
            Listener::Unix(_, f) => format!("unix:{}", f.path.display()),
            Listener::Tls(_, a, _) => format!("{a} (TLS)"),
        }
    }

    /// The TCP address, TLS or not.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(_, a) | Listener::Tls(_, a, _) => Some(*a),
            Listener::Unix(..) => None,
        }
    }

    /// At stop: a UNIX listener removes its socket file, if the file is still the one it bound.
    pub fn remove_socket_file(&self) {
        if let Listener::Unix(_, file) = self {
            file.remove();
        }
    }

    pub fn source(&mut self) -> &mut dyn Source {
        match self {
            Listener::Tcp(l, _) => l,
            Listener::Unix(l, _) => l,
            Listener::Tls(l, _, _) => l,
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l, _) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
            Listener::Tls(l, _, _) => l.as_raw_fd(),
        }
    }
}

/// The addresses of `-l` (comma separated, each `host`, `host:port`, `[v6]:port` or a bare IPv6
/// address) with `port` where none is given, each with whether memcached's `notls:` prefix marks
/// it as a listener without TLS (under `-Z`; without it no listener has TLS).
pub fn tcp_listens(listen: &str, port: u16) -> Result<Vec<(SocketAddr, bool)>, String> {
    let mut out: Vec<(SocketAddr, bool)> = Vec::new();
    for entry in listen.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let notls = entry.starts_with("notls:");
        let entry = entry.strip_prefix("notls:").unwrap_or(entry);
        let resolved: Vec<SocketAddr> = if let Ok(a) = entry.parse::<SocketAddr>() {
            vec![a]
        } else if let Ok(ip) = entry.trim_matches(|c| c == '[' || c == ']').parse::<std::net::IpAddr>() {
            vec![SocketAddr::new(ip, port)]
        } else {
            let (host, p) = match entry.rsplit_once(':') {
                Some((h, p)) => (h, p.parse::<u16>().map_err(|_| format!("invalid port in listen address {entry:?}"))?),
                None => (entry, port),
            };
            (host, p).to_socket_addrs().map_err(|e| format!("cannot resolve listen address {entry}: {e}"))?.collect()
        };
        match resolved.into_iter().next() {
            Some(a) if !out.iter().any(|&(b, _)| b == a) => out.push((a, notls)),
            Some(_) => {}
            None => return Err(format!("listen address {entry} resolves to nothing")),
        }
    }
    if out.is_empty() {
        return Err("no listen address (-l)".into());
    }
    Ok(out)
}

/// Binds what the settings ask: the UNIX socket of `-s` alone (as memcached), else every `-l`
/// address on TCP, with TLS when `tls` is given except where `notls:` says otherwise. Each
/// listens with the `-b` backlog.
pub fn bind_all(s: &Settings, tls: Option<&Arc<Tls>>) -> Result<Vec<Listener>, String> {
    if let Some(path) = &s.unix_socket {
        return Ok(vec![bind_unix(path, s.unix_mask, s.backlog)?]);
    }
    let mut out = Vec::new();
    for (addr, notls) in tcp_listens(&s.listen, s.port)? {
        // std sets SO_REUSEADDR, so a restart does not wait for TIME_WAIT sockets.
        let l = std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        set_backlog(l.as_raw_fd(), s.backlog);
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        let l = TcpListener::from_std(l);
        out.push(match tls.filter(|_| !notls) {
            Some(tls) => Listener::Tls(l, addr, tls.clone()),
            None => Listener::Tcp(l, addr),
        });
    }
    Ok(out)
}

/// Binds a UNIX socket at `path` with permissions `mask`. A socket already there is replaced only
/// when stale (a connect to it is refused: its server is gone); one that accepts connections
/// belongs to a running server, and taking its path would leave that server unreachable, so the
/// start is refused as a TCP port in use is. Never another kind of file.
fn bind_unix(path: &Path, mask: u32, backlog: i32) -> Result<Listener, String> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!("cannot listen on {}: a file that is not a socket is there", path.display()));
        }
        // Non-blocking, so that a live server with a full backlog (EAGAIN) does not hang the start.
        match UnixStream::connect(path) {
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound) => {}
            Ok(_) => {
                return Err(format!(
                    "cannot listen on UNIX socket {}: another server is listening on it (address in use)",
                    path.display()
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(format!(
                    "cannot listen on UNIX socket {}: another server is listening on it (its backlog is full)",
                    path.display()
                ))
            }
            Err(e) => {
                return Err(format!(
                    "cannot listen on UNIX socket {}: cannot tell whether a server is listening on it: {e}",
                    path.display()
                ))
            }
        }
        std::fs::remove_file(path).map_err(|e| format!("cannot remove the stale socket {}: {e}", path.display()))?;
    }
    let l = std::os::unix::net::UnixListener::bind(path)
        .map_err(|e| format!("cannot listen on UNIX socket {}: {e}", path.display()))?;
    // Read at once, so that the file this server removes at stop is the one it made.
    let file = SocketFile::of(path).map_err(|e| format!("cannot read back the UNIX socket {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mask))
        .map_err(|e| format!("cannot set the mode of {} to {mask:o}: {e}", path.display()))?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    set_backlog(l.as_raw_fd(), backlog);
    Ok(Listener::Unix(UnixListener::from_std(l), file))
}

/// std listens with a backlog of 128; a burst of connects (a proxy or a pool starting) needs
/// more, as memcached's 1024 (`-b`). Calling listen(2) again on a listening socket only resizes it.
fn set_backlog(fd: RawFd, backlog: i32) {
    // SAFETY: `fd` is a valid, bound, listening socket owned by the caller's listener, which
    // outlives this call; listen(2) does not take ownership of it.
    let rc = unsafe { libc::listen(fd, backlog) };
    if rc != 0 {
        log::warn!("cannot set the listen backlog to {backlog}: {}", io::Error::last_os_error());
    }
}

#[cfg(test)]
mod tests {
    use super::tcp_listens;

    fn tcp_addrs(listen: &str, port: u16) -> Result<Vec<std::net::SocketAddr>, String> {
        Ok(tcp_listens(listen, port)?.into_iter().map(|(a, _)| a).collect())
    }

    #[test]
    fn listen_lists() {
        let a = tcp_addrs("127.0.0.1, notls:127.0.0.2:99,[::1]:7,::1", 11211).unwrap();
        let want: Vec<std::net::SocketAddr> =
            ["127.0.0.1:11211", "127.0.0.2:99", "[::1]:7", "[::1]:11211"].iter().map(|s| s.parse().unwrap()).collect();
        assert_eq!(a, want);
        let marked: Vec<bool> = tcp_listens("127.0.0.1:1,notls:127.0.0.1:2", 3).unwrap().iter().map(|a| a.1).collect();
        assert_eq!(marked, [false, true]);
        assert!(tcp_addrs("127.0.0.1:x", 1).is_err());
        assert!(tcp_addrs("", 1).is_err());
    }
}
