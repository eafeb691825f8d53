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

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::parse::MAX_GET_LINE;
use crate::session::{Session, OUT_HIGH_WATER};
use crate::state::{Ctx, Shared};
use crate::stats::bump;

const WAKER: Token = Token(usize::MAX);
/// Per-connection starting size of each buffer: small, so that many idle connections are cheap.
const INITIAL_BUF: usize = 8 << 10;
/// Buffers above this are given back once they empty.
const KEEP_BUF: usize = 256 << 10;
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
    let thread = std::thread::Builder::new().name(format!("worker-{index}")).spawn(move || {
        if let Some(core) = core {
            if core_affinity::set_for_current(core) {
                log::info!("worker {index} pinned to core {}", core.id);
            } else {
                log::warn!("worker {index}: could not pin to core {}", core.id);
            }
        }
        let mut w = Worker { poll, rx, conns: Slab::new(), shared, index, ready: Vec::new(), again: Vec::new() };
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
}

impl Worker {
    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut drain_until: Option<Instant> = None;
        loop {
            let timeout = if !self.ready.is_empty() {
                Some(Duration::ZERO)
            } else {
                drain_until.map(|_| Duration::from_millis(20))
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
                    WAKER => self.adopt(drain_until.is_some()),
                    Token(key) => self.drive(key, ev.is_read_closed() || ev.is_error()),
                }
            }
            if drain_until.is_none() && self.shared.is_stopping() {
                drain_until = Some(Instant::now() + DRAIN_TIME);
                self.adopt(true);
            }
            if let Some(deadline) = drain_until {
                // Close every connection that sits between requests with nothing left to send.
                let idle: Vec<usize> =
                    self.conns.iter().filter(|(_, c)| c.is_idle()).map(|(k, _)| k).collect();
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
                log::warn!("worker {}: cannot register a connection: {e}", self.index);
                self.shared.conns.curr_connections.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            entry.insert(Conn::new(stream));
            // Data may already be waiting: edge-triggered readiness fires for it anyway.
        }
    }

    /// Gives connection `key` a turn; `hup`: the peer closed its side (EPOLLRDHUP) or errored.
    fn drive(&mut self, key: usize, hup: bool) {
        let ctx = Ctx::new(&self.shared, self.index);
        let outcome = match self.conns.get_mut(key) {
            Some(conn) => {
                conn.hup |= hup;
                conn.drive(&ctx)
            }
            None => return,
        };
        match outcome {
            Drive::Wait => {}
            Drive::Again => {
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
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.shared.conns.curr_connections.fetch_sub(1, Ordering::Relaxed);
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

/// Reads one connection may do per turn, so that one busy pipeline cannot starve the others on
/// its worker.
const READ_BUDGET: usize = 16;

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
    /// Input: `buf[start..end]` is received and not yet used.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Output: `out[sent..]` waits to be written.
    out: Vec<u8>,
    sent: usize,
    /// Close once the output is written (`quit`, a fatal protocol error, or the peer's EOF).
    closing: bool,
    /// The client shut down its sending side (read returned 0).
    eof: bool,
    /// The poller reported the peer's shutdown: read until 0 rather than trusting a short read.
    hup: bool,
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            session: Session::new(),
            buf: vec![0; INITIAL_BUF],
            start: 0,
            end: 0,
            out: Vec::with_capacity(INITIAL_BUF),
            sent: 0,
            closing: false,
            eof: false,
            hup: false,
        }
    }

    fn pending(&self) -> usize {
        self.out.len() - self.sent
    }

    fn is_idle(&self) -> bool {
        self.start == self.end && self.session.at_boundary() && self.pending() == 0
    }

    /// Reads, runs and writes as far as the socket allows (within the read budget).
    fn drive(&mut self, ctx: &Ctx<'_>) -> Drive {
        let mut reads = 0;
        // A read that returned less than it had room for emptied the socket: with
        // edge-triggered readiness, data arriving later raises a new event, so there is no
        // need for one more read(2) just to see EAGAIN (one syscall less per request).
        let mut drained = false;
        loop {
            if self.flush(ctx).is_err() {
                return Drive::Close;
            }
            if self.closing {
                return if self.pending() > 0 { Drive::Wait } else { Drive::Close };
            }
            if self.pending() >= OUT_HIGH_WATER {
                return Drive::Wait; // until the client reads: a writable event follows
            }
            if self.start < self.end {
                if self.out.len() >= OUT_HIGH_WATER && self.sent > 0 {
                    // The session measures the whole buffer: drop the part already sent so that
                    // it sees only what is pending (rare: a partial write of a large backlog).
                    self.out.drain(..self.sent);
                    self.sent = 0;
                }
                let p = self.session.process(&self.buf[self.start..self.end], &mut self.out, ctx);
                self.start += p.consumed;
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
                if self.pending() >= OUT_HIGH_WATER {
                    continue;
                }
            }
            if self.eof {
                // Everything the client sent has been answered (or is incomplete forever).
                self.closing = true;
                continue;
            }
            if drained {
                return if self.flush(ctx).is_ok() { Drive::Wait } else { Drive::Close };
            }
            if reads == READ_BUDGET {
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
                    self.end += n;
                    // After the peer's FIN no new event will come: read on until 0.
                    drained = n < room && !self.hup;
                    bump(&ctx.stats.bytes_read, n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if self.flush(ctx).is_ok() { Drive::Wait } else { Drive::Close };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Drive::Close,
            }
        }
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
        let cap = MAX_GET_LINE + ctx.shared.settings.max_item_size + 4096;
        if self.buf.len() >= cap {
            log::warn!("closing a connection whose request exceeds every limit");
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
        Ok(())
    }
}
