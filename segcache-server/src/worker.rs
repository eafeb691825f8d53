//! A worker thread: its own mio event loop over the connections the acceptor hands it, pinned
//! to one core. It calls the thread-safe engine directly; nothing else is shared on the hot path.
//!
//! Buffers are per connection and reused: input is read into one buffer (grown only for a large
//! value, shrunk back when it empties), replies are appended to one output buffer and sent with
//! as few writes as the socket allows (all replies of a pipelined batch go out in one write).

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// Named as before UNIX sockets: a client stream, TCP or UNIX.
use crate::listen::Stream as TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::config::Protocol;
use crate::observe::stats::bump;
use crate::observe::watch::{ConnEntry, Watcher, CONNEVENTS};
use crate::protocol::MAX_GET_LINE;
use crate::ratelimit::{warn_limited, RateLimit};
use crate::session::{Budget, Session, OUT_HIGH_WATER};
use crate::state::{Ctx, Shared};

/// Connections the event loop cannot take (one per accept when it happens): one warning a second.
static REGISTER_FAILED: RateLimit = RateLimit::per_second();
/// Clients closed for a request over every limit (a client can send them at will): one warning a
/// second.
static OVER_LIMIT: RateLimit = RateLimit::per_second();

const WAKER: Token = Token(usize::MAX);
/// Per-connection starting size of each buffer: small, so that many idle connections are cheap.
const INITIAL_BUF: usize = 8 << 10;
/// Buffers above this are given back once they empty.
const KEEP_BUF: usize = 256 << 10;
/// Most spare buffers of each kind a worker keeps for its connections (see [`BufPool`]).
const POOL_MAX: usize = 256;

/// Spare input and output buffers of [`INITIAL_BUF`] bytes. A connection waiting between
/// requests with nothing buffered parks its buffers here and takes a pair back on its next
/// event (memcached's read-buffer cache), so an idle connection holds no buffer memory
/// (10,000 idle connections cost ~100 MB with two 8 KiB buffers each) and busy connections
/// reuse the same few cache-warm buffers instead of touching one pair per connection.
#[derive(Default)]
struct BufPool {
    input: Vec<Vec<u8>>,
    output: Vec<Vec<u8>>,
}
/// How long a stopping worker waits for clients to finish their requests.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// The acceptor's side of a worker: hand it a connection, then wake it.
#[derive(Debug)]
pub struct WorkerHandle {
    tx: Sender<TcpStream>,
    waker: Arc<Waker>,
}

impl WorkerHandle {
    /// Passes a connection to the worker.
    pub fn hand(&self, stream: TcpStream) -> io::Result<()> {
        self.tx.send(stream).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "worker has stopped"))?;
        self.waker.wake()
    }
    /// Wakes the worker (to notice that the server is stopping).
    pub fn wake(&self) {
        let _ = self.waker.wake();
    }
}

/// Starts worker `index`, pinned to `core` if given.
pub fn spawn(
    index: usize,
    shared: Arc<Shared>,
    core: Option<core_affinity::CoreId>,
) -> io::Result<(WorkerHandle, JoinHandle<()>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let (tx, rx) = std::sync::mpsc::channel();
    let waker_own = waker.clone();
    let thread = std::thread::Builder::new().name(format!("worker-{index}")).spawn(move || {
        if let Some(core) = core {
            if core_affinity::set_for_current(core) {
                log::info!("worker {index} pinned to core {}", core.id);
            } else {
                log::warn!("worker {index}: could not pin to core {}", core.id);
            }
        }
        let mut w = Worker {
            poll,
            rx,
            conns: Slab::new(),
            shared,
            index,
            ready: Vec::new(),
            again: Vec::new(),
            waker: waker_own,
            watching: Vec::new(),
            pool: BufPool::default(),
        };
        if let Err(e) = w.run() {
            log::error!("worker {index} stopped: {e}");
        }
        w.close_all();
    })?;
    Ok((WorkerHandle { tx, waker }, thread))
}

struct Worker {
    poll: Poll,
    rx: Receiver<TcpStream>,
    conns: Slab<Conn>,
    shared: Arc<Shared>,
    index: usize,
    /// Connections that used up their read budget with input still waiting: edge-triggered
    /// readiness will not fire for them again, so they are driven again after the next poll.
    ready: Vec<usize>,
    /// The previous round's `ready`, kept to reuse its allocation.
    again: Vec<usize>,
    /// Wakes this worker: watchers' log lines, queued by any thread, are written on a wake.
    waker: Arc<Waker>,
    /// Connections that became `watch` log streams.
    watching: Vec<usize>,
    pool: BufPool,
}

impl Worker {
    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut drain_until: Option<Instant> = None;
        let mut last_sweep = Instant::now();
        loop {
            let timeout = if !self.ready.is_empty() {
                Some(Duration::ZERO)
            } else if drain_until.is_some() {
                Some(Duration::from_millis(20))
            } else {
                // With an idle timeout, wake at least once a second to look for idle clients.
                (self.shared.settings.idle_timeout > 0).then_some(IDLE_SWEEP)
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // Those that were cut short last time go first, then the new events.
            std::mem::swap(&mut self.ready, &mut self.again);
            let mut again = std::mem::take(&mut self.again);
            for &key in &again {
                self.drive(key, false);
            }
            again.clear();
            self.again = again;
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {
                        self.adopt(drain_until.is_some());
                        for key in self.watching.clone() {
                            self.drive(key, false);
                        }
                    }
                    Token(key) => self.drive(key, ev.is_read_closed() || ev.is_error()),
                }
            }
            if self.shared.settings.idle_timeout > 0 && last_sweep.elapsed() >= IDLE_SWEEP {
                last_sweep = Instant::now();
                self.kick_idle();
            }
            if drain_until.is_none() && self.shared.is_stopping() {
                drain_until = Some(Instant::now() + DRAIN_TIME);
                self.adopt(true);
            }
            if let Some(deadline) = drain_until {
                // Close every connection that sits between requests with nothing left to send.
                let idle: Vec<usize> = self.conns.iter().filter(|(_, c)| c.is_idle()).map(|(k, _)| k).collect();
                for key in idle {
                    self.remove(key);
                }
                if self.conns.is_empty() || Instant::now() >= deadline {
                    return Ok(());
                }
            }
        }
    }

    /// Registers the connections the acceptor sent (or closes them when stopping).
    fn adopt(&mut self, stopping: bool) {
        while let Ok(mut stream) = self.rx.try_recv() {
            if stopping {
                self.shared.conns.curr_connections.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let entry = self.conns.vacant_entry();
            let token = Token(entry.key());
            if let Err(e) = self.poll.registry().register(&mut stream, token, Interest::READABLE | Interest::WRITABLE) {
                warn_limited!(REGISTER_FAILED, "worker {}: cannot register a connection: {e}", self.index);
                self.shared.conns.curr_connections.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let info = conn_entry(&stream);
            self.shared.watchers.open(info.clone());
            log_conn(&self.shared, &info, stream.transport(), None);
            entry.insert(Conn::new(stream, info, self.waker.clone()));
            // Data may already be waiting: edge-triggered readiness fires for it anyway.
        }
    }

    /// Gives connection `key` a turn; `hup`: the peer closed its side (EPOLLRDHUP) or errored.
    fn drive(&mut self, key: usize, hup: bool) {
        let ctx = Ctx::new(&self.shared, self.index);
        let outcome = match self.conns.get_mut(key) {
            Some(conn) => {
                conn.hup |= hup;
                let info = conn.info.clone();
                conn.unpark(&mut self.pool);
                let outcome = conn.drive(&ctx.on(&info));
                if outcome == Drive::Wait {
                    conn.park(&mut self.pool);
                }
                if conn.watcher.is_some() && !self.watching.contains(&key) {
                    self.watching.push(key);
                }
                outcome
            }
            None => return,
        };
        match outcome {
            Drive::Wait => {}
            Drive::Again => {
                bump(&self.shared.conns.conn_yields, 1);
                if !self.ready.contains(&key) {
                    self.ready.push(key);
                }
            }
            Drive::Close => self.remove(key),
        }
    }

    fn remove(&mut self, key: usize) {
        if let Some(mut conn) = self.conns.try_remove(key) {
            self.ready.retain(|&k| k != key);
            self.watching.retain(|&k| k != key);
            if let Some(w) = &conn.watcher {
                self.shared.watchers.remove(w);
            }
            self.shared.watchers.close(conn.info.fd);
            log_conn(
                &self.shared,
                &conn.info,
                conn.stream.transport(),
                Some(if conn.kicked {
                    "idle_timeout"
                } else if conn.eof || conn.closing {
                    "normal"
                } else {
                    "error"
                }),
            );
            conn.stream.close_notify();
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.shared.conns.curr_connections.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Closes the connections that sat between requests, with nothing to send, for longer than
    /// `-o idle_timeout` (memcached's `idle_kicks`).
    fn kick_idle(&mut self) {
        let limit = Duration::from_secs(u64::from(self.shared.settings.idle_timeout));
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.watcher.is_none() && c.is_idle() && c.last_active.elapsed() >= limit)
            .map(|(k, _)| k)
            .collect();
        for key in idle {
            bump(&self.shared.conns.idle_kicks, 1);
            if let Some(c) = self.conns.get_mut(key) {
                c.kicked = true;
            }
            self.remove(key);
        }
    }

    fn close_all(&mut self) {
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.remove(key);
        }
        self.adopt(true);
    }
}

/// How often a worker looks for connections past `-o idle_timeout`.
const IDLE_SWEEP: Duration = Duration::from_secs(1);

/// Whether a connection whose first byte is `first` may go on under `-B`: memcached's binary
/// requests start with the magic byte 0x80, text and meta ones never do.
fn protocol_allowed(p: Protocol, first: u8) -> bool {
    match p {
        Protocol::Auto => true,
        Protocol::Ascii => first != 0x80,
        Protocol::Binary => first == 0x80,
    }
}

/// Input bytes one connection may have processed per turn (a single larger request still runs).
const TURN_BYTES: usize = 64 << 10;
/// Reads one connection may do per turn (a large value arriving in small pieces).
const READ_BUDGET: usize = 16;
/// Once a connection's unsent output has reached [`OUT_HIGH_WATER`], its input is left alone
/// (neither read nor run) until the client has read its replies down to this.
const OUT_LOW_WATER: usize = 64 << 10;

/// The largest input buffer a connection may need: one request the parser has not yet rejected
/// (the first [`MAX_GET_LINE`] bytes of a retrieval line, whose rest is run as it streams in, or
/// a storage line with its value of at most `-I`), with room to spare.
pub fn input_cap(max_item_size: usize) -> usize {
    MAX_GET_LINE + max_item_size + 4096
}

/// What a connection needs after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drive {
    /// Nothing until the next readiness event.
    Wait,
    /// Input may be waiting: drive it again after the other connections had their turn.
    Again,
    Close,
}

/// One client connection.
struct Conn {
    stream: TcpStream,
    session: Session,
    /// When the client last sent something (for `-o idle_timeout`).
    last_active: Instant,
    /// The first byte was checked against `-B`.
    protocol_checked: bool,
    /// Closed by `-o idle_timeout`.
    kicked: bool,
    /// Input: `buf[start..end]` is received and not yet used.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Output: `out[sent..]` waits to be written.
    out: Vec<u8>,
    sent: usize,
    /// The output reached the high-water mark and has not yet drained to the low-water mark:
    /// input is not read or run meanwhile.
    throttled: bool,
    /// Close once the output is written (`quit`, a fatal protocol error, or the peer's EOF).
    closing: bool,
    /// The client shut down its sending side (read returned 0).
    eof: bool,
    /// The poller reported the peer's shutdown: read until 0 rather than trusting a short read.
    hup: bool,
    /// What `stats conns` shows of this connection.
    info: Arc<ConnEntry>,
    /// Set once the client sent `watch`: the connection carries log lines from then on, and
    /// what the client sends is read and dropped.
    watcher: Option<Arc<Watcher>>,
    /// The worker's waker, for a watcher's log lines.
    waker: Arc<Waker>,
}

/// The `stats conns` entry of a new connection.
fn conn_entry(stream: &TcpStream) -> Arc<ConnEntry> {
    use std::os::fd::AsRawFd;
    let unknown = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    Arc::new(ConnEntry::new(
        stream.as_raw_fd(),
        stream.peer_addr().unwrap_or(unknown),
        stream.local_addr().unwrap_or(unknown),
    ))
}

/// memcached's `connevents` lines: `conn_new`, or `conn_close` with its reason.
fn log_conn(shared: &Shared, info: &ConnEntry, transport: &str, close: Option<&str>) {
    shared.watchers.log(CONNEVENTS, |line| {
        use std::fmt::Write as _;
        let kind = if close.is_some() { "conn_close" } else { "conn_new" };
        if transport == "local" {
            // memcached's words for a UNIX socket client.
            let _ = write!(line, "type={kind} rip=unix rport=0 transport=local");
        } else {
            let _ = write!(line, "type={kind} rip={} rport={} transport={transport}", info.peer.ip(), info.peer.port());
        }
        if let Some(reason) = close {
            let _ = write!(line, " reason={reason}");
        }
        let _ = write!(line, " cfd={}", info.fd);
    });
}

impl Conn {
    fn new(stream: TcpStream, info: Arc<ConnEntry>, waker: Arc<Waker>) -> Conn {
        Conn {
            info,
            watcher: None,
            waker,
            stream,
            session: Session::new(),
            last_active: Instant::now(),
            protocol_checked: false,
            kicked: false,
            // Taken from the worker's pool at the first event (`unpark`).
            buf: Vec::new(),
            start: 0,
            end: 0,
            out: Vec::new(),
            sent: 0,
            throttled: false,
            closing: false,
            eof: false,
            hup: false,
        }
    }

    /// Output not yet written: the worker's, and a TLS record the socket did not take.
    fn pending(&self) -> usize {
        self.out.len() - self.sent + usize::from(self.stream.wants_write())
    }

    /// Gives back to `pool` the buffers of [`INITIAL_BUF`] bytes that hold nothing (between
    /// requests, output written); past [`POOL_MAX`] spares they are freed. A buffer grown for
    /// large values stays with its connection (up to `KEEP_BUF`), as before.
    fn park(&mut self, pool: &mut BufPool) {
        if self.start == self.end && self.buf.len() == INITIAL_BUF {
            self.start = 0;
            self.end = 0;
            let buf = std::mem::take(&mut self.buf);
            if pool.input.len() < POOL_MAX {
                pool.input.push(buf);
            }
        }
        if self.out.is_empty() && self.out.capacity() == INITIAL_BUF {
            self.sent = 0;
            let out = std::mem::take(&mut self.out);
            if pool.output.len() < POOL_MAX {
                pool.output.push(out);
            }
        }
    }

    /// Takes buffers from `pool` (or new ones) where `park` gave them back; `drive` needs them.
    fn unpark(&mut self, pool: &mut BufPool) {
        if self.buf.is_empty() {
            self.buf = pool.input.pop().unwrap_or_else(|| vec![0; INITIAL_BUF]);
        }
        if self.out.capacity() == 0 {
            self.out = pool.output.pop().unwrap_or_else(|| Vec::with_capacity(INITIAL_BUF));
        }
    }

    fn is_idle(&self) -> bool {
        self.start == self.end && self.session.at_boundary() && self.pending() == 0
    }

    /// Whether the client must read its replies before more of its input is taken: at the
    /// high-water mark, and until the output drains to the low-water mark.
    fn output_full(&mut self) -> bool {
        let pending = self.pending();
        if pending >= OUT_HIGH_WATER {
            self.throttled = true;
        } else if pending <= OUT_LOW_WATER {
            self.throttled = false;
        }
        self.throttled
    }

    /// Drops the part of the output already sent, so that the buffer holds only what is pending
    /// (less than the low-water mark here), and gives back a large buffer's memory.
    fn compact_out(&mut self) {
        if self.sent == 0 {
            return;
        }
        if self.out.capacity() > KEEP_BUF {
            let mut fresh = Vec::with_capacity(INITIAL_BUF.max(self.pending()));
            fresh.extend_from_slice(&self.out[self.sent..]);
            self.out = fresh;
        } else {
            self.out.drain(..self.sent);
        }
        self.sent = 0;
    }

    /// Reads, runs and writes as far as the socket allows, within one turn's budget.
    fn drive(&mut self, ctx: &Ctx<'_>) -> Drive {
        let mut reads = 0;
        let turn_requests = ctx.shared.settings.reqs_per_event;
        let mut budget = Budget { requests: turn_requests, bytes: TURN_BYTES, out_high: OUT_HIGH_WATER };
        // A read that returned less than it had room for emptied the socket: with
        // edge-triggered readiness, data arriving later raises a new event, so there is no
        // need for one more read(2) just to see EAGAIN (one syscall less per request).
        let mut drained = false;
        loop {
            if let Some(w) = &self.watcher {
                // Lines wait in the watcher's bounded queue (dropped past it, as memcached
                // does) while the client has a reply buffer's worth unread.
                if self.pending() < OUT_HIGH_WATER {
                    w.drain_into(&mut self.out);
                }
                // A watcher's input is not run.
                self.start = self.end;
            }
            if self.flush(ctx).is_err() {
                return Drive::Close;
            }
            if self.closing {
                return if self.pending() > 0 { Drive::Wait } else { Drive::Close };
            }
            if self.output_full() {
                return Drive::Wait; // until the client reads: a writable event follows
            }
            if self.info.dumping.load(std::sync::atomic::Ordering::Relaxed) {
                // A key dump goes on, a reply buffer at a time, before any further request.
                if budget.requests == 0 {
                    return Drive::Again;
                }
                budget.requests -= 1;
                self.compact_out();
                crate::exec::dump_more(&self.info, &mut self.out, ctx, OUT_HIGH_WATER);
                continue;
            }
            if self.session.retrieving() {
                // A multi-get's reply goes on, a reply buffer at a time, before any further
                // request (as memcached streams it), however much the line asks for.
                if budget.requests == 0 {
                    return Drive::Again;
                }
                budget.requests -= 1;
                self.compact_out();
                self.session.resume(&mut self.out, ctx);
                continue;
            }
            if self.start < self.end {
                if budget.requests == 0 || budget.bytes == 0 {
                    // This turn is spent: the rest waits for the others on this worker.
                    return Drive::Again;
                }
                self.compact_out();
                let p = self.session.process_within(&self.buf[self.start..self.end], &mut self.out, ctx, budget);
                if self.out.capacity() > KEEP_BUF && self.out.capacity() - self.out.len() > self.out.len() / 4 {
                    // Growing by doubling left room this connection may hold on to while its
                    // client does not read: give it back (a shrinking realloc is usually in place).
                    self.out.shrink_to_fit();
                }
                self.start += p.consumed;
                if p.requests > 0 {
                    self.info.last_cmd.store(ctx.shared.uptime(), std::sync::atomic::Ordering::Relaxed);
                    let streams = self.info.watch.load(std::sync::atomic::Ordering::Relaxed);
                    if streams != 0 && self.watcher.is_none() {
                        self.watcher = Some(ctx.shared.watchers.add(streams, self.waker.clone()));
                    }
                }
                budget.requests = budget.requests.saturating_sub(p.requests);
                budget.bytes = budget.bytes.saturating_sub(p.consumed);
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                    if self.buf.len() > KEEP_BUF {
                        self.buf = vec![0; INITIAL_BUF];
                    }
                }
                if p.close {
                    self.closing = true;
                    continue;
                }
                if p.requests > 0 {
                    // Write what it produced, then go on with what is left.
                    continue;
                }
            }
            if self.eof {
                // Everything the client sent has been answered (or is incomplete forever).
                self.closing = true;
                continue;
            }
            if drained {
                if self.line_stalled() {
                    self.closing = true;
                    continue;
                }
                return if self.flush(ctx).is_ok() { Drive::Wait } else { Drive::Close };
            }
            if reads == READ_BUDGET || budget.requests == 0 || budget.bytes == 0 {
                return if self.flush(ctx).is_ok() { Drive::Again } else { Drive::Close };
            }
            if !self.make_room(ctx) {
                return Drive::Close;
            }
            reads += 1;
            let room = self.buf.len() - self.end;
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    // The client finished sending: answer what it sent, then close.
                    self.eof = true;
                }
                Ok(n) => {
                    self.last_active = Instant::now();
                    if !self.protocol_checked {
                        self.protocol_checked = true;
                        if !protocol_allowed(ctx.shared.settings.protocol, self.buf[self.end]) {
                            return Drive::Close;
                        }
                    }
                    self.end += n;
                    // After the peer's FIN no new event will come: read on until 0.
                    drained = n < room && !self.hup && self.stream.short_read_drains();
                    bump(&ctx.stats.bytes_read, n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.line_stalled() {
                        self.closing = true;
                        continue;
                    }
                    return if self.flush(ctx).is_ok() { Drive::Wait } else { Drive::Close };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Drive::Close,
            }
        }
    }

    /// Whether all the input there is holds a command line that will never end (see
    /// [`Session::line_stalled`]).
    fn line_stalled(&self) -> bool {
        self.start < self.end && self.session.line_stalled(&self.buf[self.start..self.end])
    }

    /// Makes space to read into: compacts, or grows for a request larger than the buffer.
    fn make_room(&mut self, ctx: &Ctx<'_>) -> bool {
        if self.end < self.buf.len() {
            return true;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            return true;
        }
        // The buffer holds one incomplete request. The parser rejects lines and values over the
        // limits before they arrive, so the buffer never needs to exceed this.
        let cap = input_cap(ctx.shared.settings.max_item_size);
        if self.buf.len() >= cap {
            warn_limited!(OVER_LIMIT, "closing a connection whose request exceeds every limit");
            return false;
        }
        let new_len = (self.buf.len() * 2).min(cap);
        self.buf.resize(new_len, 0);
        true
    }

    /// Writes pending output until done or the socket is full.
    fn flush(&mut self, ctx: &Ctx<'_>) -> io::Result<()> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent += n;
                    bump(&ctx.stats.bytes_written, n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.sent = 0;
        if self.out.capacity() > KEEP_BUF {
            self.out.shrink_to(INITIAL_BUF);
        }
        // TLS: the records of what was written (or of the handshake) the socket did not take.
        self.stream.push_pending()
    }
}
