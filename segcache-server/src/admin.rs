//! The admin port: Prometheus metrics at `http://127.0.0.1:PORT/metrics`. Off unless
//! `--admin-port` (or `admin_port` in the file) is given; always bound to loopback.
//!
//! Each client gets a thread of its own (at most [`MAX_CLIENTS`] at once; past that a client is
//! answered 503 at once), and a deadline for its whole request and for its whole reply, so a client
//! that sends or reads one byte a second neither blocks the others' `/metrics` nor holds a
//! thread for long. Every wait is cut into short slices that look at the stop flag, so a
//! stalled client never delays a stop.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::exec::prometheus;
use crate::state::Shared;

/// Admin clients served at once.
pub const MAX_CLIENTS: usize = 8;
/// Time a client has to send its whole request (not per read: a trickle does not extend it).
pub const REQUEST_TIME: Duration = Duration::from_secs(3);
/// Time a client has to take the whole reply.
pub const REPLY_TIME: Duration = Duration::from_secs(3);
/// The longest single wait, after which the stop flag is looked at again.
const SLICE: Duration = Duration::from_millis(100);
/// The longest request read (the request line and headers).
const MAX_REQUEST: usize = 16 << 10;
/// How often the listener is polled for new clients.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n";

/// Binds 127.0.0.1:`port` and serves until the server stops.
pub fn spawn(shared: Arc<Shared>, port: u16) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    log::info!("metrics on http://{addr}/metrics");
    let thread = std::thread::Builder::new().name("admin".into()).spawn(move || {
        let mut clients: Vec<JoinHandle<()>> = Vec::new();
        while !shared.is_stopping() {
            clients.retain(|c| !c.is_finished());
            match listener.accept() {
                Ok((stream, _)) => {
                    if clients.len() >= MAX_CLIENTS {
                        log::debug!("admin port: {MAX_CLIENTS} clients already, refusing one");
                        refuse(stream);
                        continue;
                    }
                    let shared = shared.clone();
                    let spawned = std::thread::Builder::new().name("admin-client".into()).spawn(move || {
                        if let Err(e) = serve(stream, &shared) {
                            log::debug!("admin request failed: {e}");
                        }
                    });
                    match spawned {
                        Ok(c) => clients.push(c),
                        Err(e) => log::warn!("admin port: cannot start a thread: {e}"),
                    }
                }
                // Polled rather than woken: the admin port is not on any hot path.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
                Err(e) => {
                    log::warn!("admin accept failed: {e}");
                    std::thread::sleep(ACCEPT_POLL);
                }
            }
        }
        // Each client thread notices the stop within one slice.
        for c in clients {
            let _ = c.join();
        }
    })?;
    Ok((addr, thread))
}

/// Answers 503 without waiting for anything, then closes.
fn refuse(stream: TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let _ = (&stream).write(BUSY);
    }
}

/// Why a wait ended early.
fn gave_up(shared: &Shared, deadline: Instant, what: &str) -> Option<io::Error> {
    if shared.is_stopping() {
        Some(io::Error::new(io::ErrorKind::Interrupted, format!("server stopping while {what}")))
    } else if Instant::now() >= deadline {
        Some(io::Error::new(io::ErrorKind::TimedOut, format!("admin client too slow {what}")))
    } else {
        None
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

/// The time to wait next: at most one slice, never past the deadline (and never zero, which
/// would mean "no timeout" to the socket).
fn slice_until(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()).clamp(Duration::from_millis(1), SLICE)
}

fn serve(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let deadline = Instant::now() + REQUEST_TIME;
    let mut req = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n") {
        if let Some(e) = gave_up(shared, deadline, "sending its request") {
            return Err(e);
        }
        stream.set_read_timeout(Some(slice_until(deadline)))?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => req.extend_from_slice(&chunk[..n]),
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(e),
        }
        if req.len() > MAX_REQUEST {
            break;
        }
    }
    let first = req.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = first.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let (status, body) = match (method, path) {
        (b"GET", b"/metrics") => ("200 OK", prometheus(shared)),
        (b"GET", _) => ("404 Not Found", "not found; try /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET /metrics\n".to_string()),
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    reply.extend_from_slice(body.as_bytes());
    let deadline = Instant::now() + REPLY_TIME;
    let mut sent = 0;
    while sent < reply.len() {
        if let Some(e) = gave_up(shared, deadline, "reading the reply") {
            return Err(e);
        }
        stream.set_write_timeout(Some(slice_until(deadline)))?;
        match stream.write(&reply[sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
