//! The admin endpoint: `/metrics` (Prometheus text), `/healthz` (the process is alive) and
//! `/readyz` (the server is serving: 503 while the cache is still opening, say while a warm
//! start checks its file, and once a stop has begun). Off unless `--admin-port` (or
//! `admin_port` in the file) is given; bound to `--admin-listen` (loopback by default).
//!
//! It starts before the cache opens, so that a supervisor sees the process alive (and not yet
//! ready) during a long warm start; [`Health`] carries the state it reports.
//!
//! Each client gets a thread of its own (at most [`MAX_CLIENTS`] at once; past that a client is
//! answered 503 at once), and a deadline for its whole request and for its whole reply, so a client
//! that sends or reads one byte a second neither blocks the others' `/metrics` nor holds a
//! thread for long. Every wait is cut into short slices that look at the stop flag, so a
//! stalled client never delays a stop.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};
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

const STARTING: u8 = 0;
const SERVING: u8 = 1;
const DRAINING: u8 = 2;

/// What the admin endpoint reports, from before the cache opens to after the workers stop.
#[derive(Debug, Default)]
pub struct Health {
    state: AtomicU8,
    /// The server's state once it is up (taken back before the cache closes).
    shared: RwLock<Option<Arc<Shared>>>,
    /// The admin endpoint stops (after the drain, so that `/readyz` says 503 through it).
    done: AtomicBool,
}

impl Health {
    /// The server is up: serve `/metrics` from `shared`, answer ready.
    pub fn serving(&self, shared: Arc<Shared>) {
        *self.shared.write().unwrap_or_else(|e| e.into_inner()) = Some(shared);
        self.state.store(SERVING, Ordering::SeqCst);
    }

    /// A stop has begun: no longer ready.
    pub fn draining(&self) {
        self.state.store(DRAINING, Ordering::SeqCst);
    }

    /// Stops the endpoint and lets go of the server's state.
    pub fn done(&self) {
        self.done.store(true, Ordering::SeqCst);
    }

    /// Drops the endpoint's handle on the server's state (once its threads are joined).
    pub fn release(&self) {
        self.shared.write().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Relaxed)
    }

    /// `/readyz`: the status and why.
    fn ready(&self) -> (&'static str, &'static str) {
        let stopping = self.shared().is_some_and(|s| s.is_stopping());
        match self.state.load(Ordering::SeqCst) {
            SERVING if !stopping => ("200 OK", "ready\n"),
            STARTING => ("503 Service Unavailable", "starting: the cache is opening\n"),
            _ => ("503 Service Unavailable", "draining: the server is stopping\n"),
        }
    }
}

/// Binds `host`:`port` and serves until [`Health::done`].
pub fn spawn(health: Arc<Health>, host: &str, port: u16) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let listener = TcpListener::bind((host, port))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    log::info!("admin endpoint on http://{addr}/ (/metrics, /healthz, /readyz)");
    let thread = std::thread::Builder::new().name("admin".into()).spawn(move || {
        let mut clients: Vec<JoinHandle<()>> = Vec::new();
        while !health.is_done() {
            clients.retain(|c| !c.is_finished());
            match listener.accept() {
                Ok((stream, _)) => {
                    if clients.len() >= MAX_CLIENTS {
                        log::debug!("admin port: {MAX_CLIENTS} clients already, refusing one");
                        refuse(stream);
                        continue;
                    }
                    let health = health.clone();
                    let spawned = std::thread::Builder::new().name("admin-client".into()).spawn(move || {
                        if let Err(e) = serve(stream, &health) {
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
fn gave_up(health: &Health, deadline: Instant, what: &str) -> Option<io::Error> {
    if health.is_done() {
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

fn serve(mut stream: TcpStream, health: &Health) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let deadline = Instant::now() + REQUEST_TIME;
    let mut req = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n") {
        if let Some(e) = gave_up(health, deadline, "sending its request") {
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
        (b"GET", b"/metrics") => match health.shared() {
            Some(s) => ("200 OK", prometheus(&s)),
            None => ("503 Service Unavailable", "starting: the cache is opening\n".to_string()),
        },
        (b"GET", b"/healthz") => ("200 OK", "ok\n".to_string()),
        (b"GET", b"/readyz") => {
            let (status, why) = health.ready();
            (status, why.to_string())
        }
        (b"GET", _) => ("404 Not Found", "not found; try /metrics, /healthz or /readyz\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET\n".to_string()),
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
        if let Some(e) = gave_up(health, deadline, "reading the reply") {
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
