//! The admin endpoint: `/metrics` (Prometheus text), `/healthz` (the process is alive) and
//! `/readyz` (the server is serving: 503 while the cache is still opening, say while a warm
//! start checks its file, and once a stop has begun). Off unless `--admin-port` (or
//! `admin_port` in the file) is given; bound to `--admin-listen` (loopback by default).
//!
//! It starts before the cache opens, so that a supervisor sees the process alive (and not yet
//! ready) during a long warm start; [`Health`] carries the state it reports.
//!
//! One thread reads every client's request, without blocking on any (poll(2) over the listener
//! and the clients still sending), and answers `/healthz`, `/readyz` and errors itself at once:
//! a probe is answered as soon as its request is in, whatever other clients do, so clients that
//! send half a request and hold the connection (a scanner, a stuck scraper) never make a healthy
//! server look dead to its orchestrator. At most [`MAX_PENDING`] clients may be sending at once,
//! each for at most [`REQUEST_TIME`] (a trickle does not extend it); a new client past that takes
//! the place of the one waiting longest, which is nearest its deadline anyway. `/metrics`, whose
//! reply is large and may meet a slow reader, is written by a thread of its own (at most
//! [`MAX_CLIENTS`] at once; past that it is answered 503) with a deadline for the whole reply.
//! Every wait is cut into short slices that look at the stop flag, so a stalled client never
//! delays a stop.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::observe::report::prometheus;
use crate::ratelimit::{warn_limited, RateLimit};
use crate::state::Shared;

/// `/metrics` replies written at once.
pub const MAX_CLIENTS: usize = 8;
/// Clients still sending their request at once (each holds at most [`MAX_REQUEST`] bytes).
pub const MAX_PENDING: usize = 64;
/// Time a client has to send its whole request (not per read: a trickle does not extend it).
pub const REQUEST_TIME: Duration = Duration::from_secs(3);
/// Time a client has to take the whole reply.
pub const REPLY_TIME: Duration = Duration::from_secs(3);
/// The longest single wait, after which the stop flag is looked at again.
const SLICE: Duration = Duration::from_millis(100);
/// The longest request read (the request line and headers).
const MAX_REQUEST: usize = 16 << 10;
/// The pause after an accept error (out of descriptors), before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

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
        let mut endpoint = Endpoint { listener, health, pending: Vec::new(), writers: Vec::new() };
        endpoint.run();
    })?;
    Ok((addr, thread))
}

/// A client whose request is not all in yet.
struct Pending {
    stream: TcpStream,
    req: Vec<u8>,
    deadline: Instant,
}

/// What reading a pending client found.
enum Progress {
    /// Not all in yet.
    More,
    /// The request is in (or the client stopped sending, or sent too much): answer it.
    Done,
    /// The client is gone or failed: drop it.
    Gone,
}

/// The admin thread's state: the listener, the clients still sending, the `/metrics` writers.
struct Endpoint {
    listener: TcpListener,
    health: Arc<Health>,
    pending: Vec<Pending>,
    writers: Vec<JoinHandle<()>>,
}

impl Endpoint {
    fn run(&mut self) {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(MAX_PENDING + 1);
        while !self.health.is_done() {
            self.writers.retain(|c| !c.is_finished());
            fds.clear();
            fds.push(libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            fds.extend(self.pending.iter().map(|p| libc::pollfd {
                fd: p.stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }));
            let wait = self.pending.iter().map(|p| p.deadline).min().map_or(SLICE, slice_until);
            // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfd records whose fds
            // belong to the listener and streams held in `self`, which outlive the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait.as_millis() as libc::c_int) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    log::warn!("admin poll failed: {e}");
                    std::thread::sleep(SLICE);
                }
                continue;
            }
            // Clients first (the indices of `fds` match `pending` until the accepts below).
            let ready: Vec<bool> = fds[1..].iter().map(|f| f.revents != 0).collect();
            let now = Instant::now();
            let mut kept = Vec::with_capacity(self.pending.len());
            for (mut p, was_ready) in std::mem::take(&mut self.pending).into_iter().zip(ready) {
                let read = if was_ready { read_some(&mut p) } else { Progress::More };
                match read {
                    Progress::More if now < p.deadline => kept.push(p),
                    Progress::More => log::debug!("admin client too slow sending its request"),
                    Progress::Gone => {}
                    Progress::Done => self.answer_or_hand(p),
                }
            }
            self.pending = kept;
            if fds[0].revents != 0 {
                self.accept_all();
            }
        }
        self.pending.clear();
        // Each writer notices the stop within one slice.
        for c in self.writers.drain(..) {
            let _ = c.join();
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if self.pending.len() >= MAX_PENDING {
                        // The one waiting longest is first: it is nearest its deadline.
                        let oldest = self.pending.remove(0);
                        log::debug!("admin port: {MAX_PENDING} clients sending, dropping the oldest");
                        refuse(oldest.stream);
                    }
                    let mut p = Pending { stream, req: Vec::new(), deadline: Instant::now() + REQUEST_TIME };
                    // The request is often in already: answered without another poll.
                    match read_some(&mut p) {
                        Progress::More => self.pending.push(p),
                        Progress::Gone => {}
                        Progress::Done => self.answer_or_hand(p),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warn_limited!(ACCEPT_FAILING, "admin accept failed: {e}");
                    std::thread::sleep(ACCEPT_RETRY);
                    return;
                }
            }
        }
    }

    /// Answers a request that is all in: a probe or an error here and now, `/metrics` from a
    /// thread of its own.
    fn answer_or_hand(&mut self, p: Pending) {
        let (method, path) = request_line(&p.req);
        if (method, path) != (&b"GET"[..], &b"/metrics"[..]) {
            let (status, body) = answer(&self.health, method, path);
            // A reply of a few hundred bytes to a new connection fits its socket buffer: the
            // write does not wait. A client that somehow takes less gets what fit.
            let reply = http_reply(status, &body);
            if let Ok(n) = (&p.stream).write(&reply) {
                if n < reply.len() {
                    log::debug!("admin client took {n} of {} bytes", reply.len());
                }
            }
            return;
        }
        if self.writers.len() >= MAX_CLIENTS {
            log::debug!("admin port: {MAX_CLIENTS} /metrics replies under way, refusing one");
            refuse(p.stream);
            return;
        }
        let health = self.health.clone();
        let spawned = std::thread::Builder::new().name("admin-client".into()).spawn(move || {
            let (status, body) = match health.shared() {
                Some(s) => ("200 OK", prometheus(&s)),
                None => ("503 Service Unavailable", "starting: the cache is opening\n".to_string()),
            };
            if let Err(e) = send(p.stream, &health, &http_reply(status, &body)) {
                log::debug!("admin request failed: {e}");
            }
        });
        match spawned {
            Ok(c) => self.writers.push(c),
            Err(e) => warn_limited!(THREAD_FAILING, "admin port: cannot start a thread: {e}"),
        }
    }
}

/// Admin accept failures (out of descriptors): one warning a second.
static ACCEPT_FAILING: RateLimit = RateLimit::per_second();
/// Admin writer threads that could not start: one warning a second.
static THREAD_FAILING: RateLimit = RateLimit::per_second();

/// Reads what a client sent so far, without waiting.
fn read_some(p: &mut Pending) -> Progress {
    let mut chunk = [0u8; 1024];
    loop {
        if request_complete(&p.req) || p.req.len() > MAX_REQUEST {
            return Progress::Done;
        }
        match (&p.stream).read(&mut chunk) {
            Ok(0) if p.req.is_empty() => return Progress::Gone,
            Ok(0) => return Progress::Done,
            Ok(n) => p.req.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Progress::More,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Progress::Gone,
        }
    }
}

fn request_complete(req: &[u8]) -> bool {
    req.windows(4).any(|w| w == b"\r\n\r\n") || req.windows(2).any(|w| w == b"\n\n")
}

/// The method and path of a request's first line.
fn request_line(req: &[u8]) -> (&[u8], &[u8]) {
    let first = req.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = first.split(|&b| b == b' ');
    (parts.next().unwrap_or_default(), parts.next().unwrap_or_default())
}

/// The status and body for every request but `/metrics`.
fn answer(health: &Health, method: &[u8], path: &[u8]) -> (&'static str, String) {
    match (method, path) {
        (b"GET", b"/healthz") => ("200 OK", "ok\n".to_string()),
        (b"GET", b"/readyz") => {
            let (status, why) = health.ready();
            (status, why.to_string())
        }
        (b"GET", _) => ("404 Not Found", "not found; try /metrics, /healthz or /readyz\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET\n".to_string()),
    }
}

fn http_reply(status: &str, body: &str) -> Vec<u8> {
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    reply.extend_from_slice(body.as_bytes());
    reply
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

/// Writes `reply` within [`REPLY_TIME`], in slices that look at the stop flag.
fn send(stream: TcpStream, health: &Health, reply: &[u8]) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let deadline = Instant::now() + REPLY_TIME;
    let mut sent = 0;
    while sent < reply.len() {
        if let Some(e) = gave_up(health, deadline, "reading the reply") {
            return Err(e);
        }
        stream.set_write_timeout(Some(slice_until(deadline)))?;
        match (&stream).write(&reply[sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
