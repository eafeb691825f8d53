//! The load itself: worker threads, each a mio event loop over its share of the
//! connections, sending on a fixed schedule and timing every reply from its due time.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Registry, Token};
use serde::{Deserialize, Serialize};

use crate::cpu;
use crate::histo::{self, Percentiles};
use crate::protocol::{parse_reply, ReqKind};
use crate::rate::Schedule;
use crate::timer::{set_timer_slack, TimerFd};
use crate::workload::{Generator, Workload};

const TIMER: Token = Token(usize::MAX - 1);
/// The longest a worker blocks in epoll, so timeouts and intervals are checked regularly.
const MAX_BLOCK: Duration = Duration::from_millis(5);
/// How often every connection is checked for a timed-out request: a scan of all connections
/// each loop turn costs more than the sends themselves at thousands of connections.
const TIMEOUT_SCAN: Duration = Duration::from_millis(10);

/// How the client connects and paces.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientConfig {
    pub addr: SocketAddr,
    /// Connections in all, spread over the threads.
    pub connections: usize,
    pub threads: usize,
    /// Most requests in flight on one connection (1 = no pipelining).
    pub depth: usize,
    /// A reply later than this after its due time counts as a timeout.
    pub timeout_ms: u64,
    /// Cores to pin the worker threads to (round robin); empty = no pinning.
    pub pin_cores: Vec<usize>,
    /// Length of a reporting interval.
    pub interval_ms: u64,
    pub seed: u64,
    /// The harness kept its schedule if its own send lag p99.9 stays under this.
    pub lag_limit_us: f64,
    /// Run the worker threads SCHED_FIFO at this priority (shields a measurement from other
    /// processes on a shared machine; needs root or CAP_SYS_NICE).
    #[serde(default)]
    pub rt_priority: Option<i32>,
    /// Speak TLS, checking the server's certificate against this CA file (PEM).
    #[serde(default)]
    pub tls_ca: Option<std::path::PathBuf>,
}

impl ClientConfig {
    pub fn new(addr: SocketAddr) -> Self {
        ClientConfig {
            addr,
            connections: 16,
            threads: 1,
            depth: 1,
            timeout_ms: 1000,
            pin_cores: Vec::new(),
            interval_ms: 1000,
            seed: 42,
            lag_limit_us: 100.0,
            rt_priority: None,
            tls_ca: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.threads == 0 {
            bail!("threads must be at least 1");
        }
        if self.connections < self.threads {
            bail!(
                "need at least one connection per thread ({} connections, {} threads)",
                self.connections,
                self.threads
            );
        }
        if self.depth == 0 {
            bail!("pipeline depth must be at least 1");
        }
        if self.timeout_ms == 0 || self.interval_ms == 0 {
            bail!("timeout and interval must be positive");
        }
        if let Some(p) = self.rt_priority {
            if !(1..=99).contains(&p) {
                bail!("real-time priority must be 1..=99, got {p}");
            }
        }
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        for c in &self.pin_cores {
            if !cores.iter().any(|id| id.id == *c) {
                bail!(
                    "cannot pin to core {c}: this machine has cores {:?}",
                    cores.iter().map(|c| c.id).collect::<Vec<_>>()
                );
            }
        }
        Ok(())
    }
}

/// Everything counted, never dropped: each request sent ends as a reply, an error or a timeout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Requests issued by the schedule (including those that timed out before a
    /// connection had room for them): sent = completed + timeouts + lost on broken connections.
    pub sent: u64,
    /// Replies received (including error replies).
    pub completed: u64,
    /// Replies received before the step's end (for throughput).
    pub completed_in_window: u64,
    pub hits: u64,
    pub misses: u64,
    /// ERROR / CLIENT_ERROR / SERVER_ERROR replies, and requests lost to a broken connection.
    pub errors: u64,
    pub timeouts: u64,
    pub reconnects: u64,
}

impl std::ops::AddAssign for Counters {
    fn add_assign(&mut self, o: Self) {
        self.sent += o.sent;
        self.completed += o.completed;
        self.completed_in_window += o.completed_in_window;
        self.hits += o.hits;
        self.misses += o.misses;
        self.errors += o.errors;
        self.timeouts += o.timeouts;
        self.reconnects += o.reconnects;
    }
}

impl Counters {
    pub fn hit_ratio(&self) -> Option<f64> {
        let n = self.hits + self.misses;
        (n > 0).then(|| self.hits as f64 / n as f64)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IntervalResult {
    /// Seconds from the start of the step to the end of this interval.
    pub t_s: f64,
    pub rate: f64,
    pub counters: Counters,
    pub hit_ratio: Option<f64>,
    pub latency: Percentiles,
}

/// One run at one rate.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StepResult {
    pub target_rate: f64,
    pub duration_s: f64,
    /// Replies per second received during the step.
    pub achieved_rate: f64,
    pub counters: Counters,
    pub hit_ratio: Option<f64>,
    /// Reply time minus scheduled send time.
    pub latency: Percentiles,
    /// How late the harness noticed a request was due: its own scheduling jitter.
    pub send_lag: Percentiles,
    pub intervals: Vec<IntervalResult>,
    /// CPU (user + sys) the harness used, and as a fraction of one core.
    pub client_cpu_s: f64,
    pub client_cpu_util: f64,
    pub server_cpu_s: Option<f64>,
    pub server_cpu_us_per_req: Option<f64>,
    /// The harness sent on time (send lag p99.9 under the limit) and sent every scheduled request.
    pub kept_schedule: bool,
    /// Fraction of the sampled sends the harness made more than [`LATE_NS`] after their due
    /// time. Above 0.1% the step's p99.9 holds the generator's lateness, not only the server's.
    #[serde(default)]
    pub late_fraction: f64,
    /// The server's largest resident set (VmRSS, KiB) seen at the step's interval ends.
    #[serde(default)]
    pub server_rss_kb: Option<u64>,
}

/// A send more than this late (1 ms) counts in [`StepResult::late_fraction`].
pub const LATE_NS: u64 = 1_000_000;

/// Fraction of the samples in `lag` (nanoseconds) above [`LATE_NS`].
pub fn late_fraction(lag: &Histogram<u64>) -> f64 {
    if lag.is_empty() {
        return 0.0;
    }
    // count_between covers whole buckets: start at the first bucket past the limit's.
    lag.count_between(lag.next_non_equivalent(LATE_NS), histo::MAX_NS) as f64 / lag.len() as f64
}

struct InFlight {
    due: Instant,
    kind: ReqKind,
}

struct Conn {
    stream: Option<Link>,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    inflight: VecDeque<InFlight>,
    last_attempt: Instant,
}

fn connect(addr: SocketAddr, tls: Option<&Arc<rustls::ClientConfig>>) -> io::Result<Link> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_nodelay(true)?;
    let tls = match tls {
        Some(config) => {
            // The handshake is done here, blocking, before the connection joins the load.
            let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
            let mut c = rustls::ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            while c.is_handshaking() {
                c.complete_io(&mut s)?;
            }
            Some(c)
        }
        None => None,
    };
    s.set_nonblocking(true)?;
    let s = TcpStream::from_std(s);
    Ok(match tls {
        Some(c) => Link::Tls(s, Box::new(c)),
        None => Link::Tcp(s),
    })
}

/// The client's config for `--tls-ca`.
pub fn tls_config(ca: &std::path::Path) -> Result<Arc<rustls::ClientConfig>> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))? {
        roots.add(c.with_context(|| format!("reading {}", ca.display()))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A connection, plain or TLS, read and written as a nonblocking stream: a TLS read runs until
/// the socket has nothing more (so edge-triggered polling sees every byte), a TLS write hands
/// the bytes to rustls and writes its records as far as the socket takes them.
enum Link {
    Tcp(TcpStream),
    Tls(TcpStream, Box<rustls::ClientConnection>),
}

impl Link {
    fn socket(&mut self) -> &mut TcpStream {
        match self {
            Link::Tcp(s) | Link::Tls(s, _) => s,
        }
    }

    /// Writes the TLS records waiting; WouldBlock when the socket is full.
    fn push(&mut self) -> io::Result<()> {
        if let Link::Tls(s, c) = self {
            while c.wants_write() {
                match c.write_tls(s) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn push_some(&mut self) -> io::Result<()> {
        match self.push() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r,
        }
    }
}

impl Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (s, c) = match self {
            Link::Tcp(s) => return s.read(buf),
            Link::Tls(s, c) => (s, c),
        };
        loop {
            match c.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match c.read_tls(s) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            c.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Link::Tcp(s) = self {
            return s.write(buf);
        }
        self.push()?;
        let n = match self {
            Link::Tls(_, c) => c.writer().write(buf)?,
            Link::Tcp(_) => unreachable!(),
        };
        self.push_some()?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.push_some()
    }
}

impl Conn {
    fn open(
        addr: SocketAddr,
        tls: Option<&Arc<rustls::ClientConfig>>,
        registry: &Registry,
        token: Token,
    ) -> io::Result<Conn> {
        let mut stream = connect(addr, tls)?;
        registry.register(stream.socket(), token, Interest::READABLE | Interest::WRITABLE)?;
        Ok(Conn {
            stream: Some(stream),
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            rbuf: Vec::with_capacity(64 * 1024),
            inflight: VecDeque::new(),
            last_attempt: Instant::now(),
        })
    }

    fn usable(&self) -> bool {
        self.stream.is_some()
    }

    /// Drops the connection; whatever was in flight on it is returned for counting.
    fn close(&mut self, registry: &Registry) -> usize {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(s.socket());
        }
        let lost = self.inflight.len();
        self.inflight.clear();
        self.wbuf.clear();
        self.wpos = 0;
        self.rbuf.clear();
        self.last_attempt = Instant::now();
        lost
    }

    fn reopen(
        &mut self,
        addr: SocketAddr,
        tls: Option<&Arc<rustls::ClientConfig>>,
        registry: &Registry,
        token: Token,
    ) -> bool {
        self.last_attempt = Instant::now();
        match connect(addr, tls) {
            Ok(mut s) => {
                if registry.register(s.socket(), token, Interest::READABLE | Interest::WRITABLE).is_ok() {
                    self.stream = Some(s);
                    return true;
                }
                false
            }
            Err(_) => false,
        }
    }

    /// Writes what it can; Err means the connection is broken.
    fn flush(&mut self) -> io::Result<()> {
        let Some(s) = self.stream.as_mut() else { return Ok(()) };
        while self.wpos < self.wbuf.len() {
            match s.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        // TLS records the socket did not take yet.
        s.flush()
    }

    /// Reads everything available (edge-triggered polling needs that); Err on EOF or error.
    fn fill(&mut self, scratch: &mut [u8]) -> io::Result<()> {
        let Some(s) = self.stream.as_mut() else { return Ok(()) };
        loop {
            match s.read(scratch) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.rbuf.extend_from_slice(&scratch[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

enum Msg {
    Interval { idx: u64, counters: Counters, hist: Histogram<u64> },
    Done(std::result::Result<WorkerResult, String>),
}

struct WorkerResult {
    counters: Counters,
    latency: Histogram<u64>,
    lag: Histogram<u64>,
}

struct Worker {
    cfg: ClientConfig,
    tls: Option<Arc<rustls::ClientConfig>>,
    poll: Poll,
    conns: Vec<Conn>,
    gen: Generator,
    totals: Counters,
    ivl: Counters,
    ivl_hist: Histogram<u64>,
    latency: Histogram<u64>,
    lag: Histogram<u64>,
    scratch: Vec<u8>,
}

impl Worker {
    fn new(cfg: &ClientConfig, wl: &Workload, conns: usize, seed: u64) -> Result<Worker> {
        let poll = Poll::new()?;
        let tls = cfg.tls_ca.as_deref().map(tls_config).transpose()?;
        let mut v = Vec::with_capacity(conns);
        for i in 0..conns {
            let c = Conn::open(cfg.addr, tls.as_ref(), poll.registry(), Token(i))
                .with_context(|| format!("cannot connect to {}", cfg.addr))?;
            v.push(c);
        }
        Ok(Worker {
            cfg: cfg.clone(),
            tls,
            poll,
            conns: v,
            gen: Generator::new(wl, seed)?,
            totals: Counters::default(),
            ivl: Counters::default(),
            ivl_hist: histo::new_hist(),
            latency: histo::new_hist(),
            lag: histo::new_hist(),
            scratch: vec![0u8; 256 * 1024],
        })
    }

    fn count(&mut self, f: impl Fn(&mut Counters)) {
        f(&mut self.totals);
        f(&mut self.ivl);
    }

    /// A broken connection: its in-flight requests are errors, and it is reopened.
    fn reset(&mut self, c: usize, as_timeout: bool) {
        let lost = self.conns[c].close(self.poll.registry()) as u64;
        self.count(|k| {
            if as_timeout {
                k.timeouts += lost
            } else {
                k.errors += lost
            }
            k.reconnects += 1;
        });
        self.conns[c].reopen(self.cfg.addr, self.tls.as_ref(), self.poll.registry(), Token(c));
    }

    fn on_readable(&mut self, c: usize, end: Instant) {
        let res = {
            let (conns, scratch) = (&mut self.conns, &mut self.scratch);
            conns[c].fill(scratch)
        };
        // Parse what arrived even if the peer then closed: those replies are real.
        let now = Instant::now();
        let mut pos = 0;
        let mut broken = res.is_err();
        loop {
            let conn = &self.conns[c];
            let Some(front) = conn.inflight.front() else {
                if pos < conn.rbuf.len() {
                    broken = true; // unsolicited bytes: out of sync
                }
                break;
            };
            match parse_reply(&conn.rbuf[pos..], front.kind) {
                Ok(Some(r)) => {
                    pos += r.consumed;
                    let ns = now.saturating_duration_since(front.due).as_nanos() as u64;
                    histo::record(&mut self.ivl_hist, ns);
                    let in_window = now <= end;
                    self.count(|k| {
                        k.completed += 1;
                        k.completed_in_window += in_window as u64;
                        k.hits += r.hits as u64;
                        k.misses += r.misses as u64;
                        k.errors += r.error as u64;
                    });
                    self.conns[c].inflight.pop_front();
                }
                Ok(None) => break,
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        self.conns[c].rbuf.drain(..pos);
        if broken {
            self.reset(c, false);
        }
    }

    fn flush_interval(&mut self, idx: u64, tx: &Sender<Msg>) {
        let hist = self.ivl_hist.clone();
        self.latency.add(&hist).expect("histograms share bounds");
        let _ = tx.send(Msg::Interval { idx, counters: self.ivl, hist });
        self.ivl = Counters::default();
        self.ivl_hist.reset();
    }

    fn run(&mut self, mut sched: Schedule, start: Instant, duration: Duration, tx: &Sender<Msg>) -> Result<()> {
        let end = start + duration;
        let timeout = Duration::from_millis(self.cfg.timeout_ms);
        let interval = Duration::from_millis(self.cfg.interval_ms);
        let mut timer = TimerFd::new()?;
        self.poll.registry().register(&mut timer, TIMER, Interest::READABLE)?;
        let mut armed: Option<Instant> = None;
        let mut events = Events::with_capacity(1024);
        let mut pending: VecDeque<Instant> = VecDeque::new();
        let mut dirty: Vec<usize> = Vec::new();
        let mut rr = 0usize;
        let mut scheduling = true;
        let mut ivl_idx = 0u64;
        let mut last_scan = start;
        let n = self.conns.len();
        let depth = self.cfg.depth;

        loop {
            let now = Instant::now();
            // 1. Take every request due by now (but none due after the end).
            if scheduling {
                // Lag is the harness's own lateness, so it is only sampled when no backlog
                // (a full pipeline, i.e. a slow server) held the requests back.
                let backlogged = !pending.is_empty();
                while sched.next_due() < end {
                    let Some(t) = sched.take_due(now) else { break };
                    if !backlogged {
                        histo::record(&mut self.lag, now.saturating_duration_since(t).as_nanos() as u64);
                    }
                    pending.push_back(t);
                }
                if sched.next_due() >= end {
                    scheduling = false;
                }
            }
            // 2. Hand them to connections with room in their pipeline.
            while let Some(&due) = pending.front() {
                let mut found = None;
                for k in 0..n {
                    let c = (rr + k) % n;
                    if self.conns[c].usable() && self.conns[c].inflight.len() < depth {
                        found = Some(c);
                        break;
                    }
                }
                let Some(c) = found else { break };
                rr = (c + 1) % n;
                let conn = &mut self.conns[c];
                let kind = self.gen.next_request(&mut conn.wbuf);
                conn.inflight.push_back(InFlight { due, kind });
                if !dirty.contains(&c) {
                    dirty.push(c);
                }
                pending.pop_front();
                self.count(|k| k.sent += 1);
            }
            for c in dirty.drain(..) {
                if self.conns[c].flush().is_err() {
                    self.reset(c, false);
                }
            }
            // 3. Timeouts: the oldest request on each connection, and requests never sent.
            let now = Instant::now();
            let scan = now.saturating_duration_since(last_scan) >= TIMEOUT_SCAN;
            if scan {
                last_scan = now;
            }
            for c in (0..n).filter(|_| scan) {
                let late = match self.conns[c].inflight.front() {
                    Some(f) => now.saturating_duration_since(f.due) > timeout,
                    None => false,
                };
                if late {
                    self.reset(c, true);
                } else if !self.conns[c].usable() && now - self.conns[c].last_attempt > Duration::from_millis(100) {
                    self.conns[c].reopen(self.cfg.addr, self.tls.as_ref(), self.poll.registry(), Token(c));
                }
            }
            while pending.front().is_some_and(|&t| now.saturating_duration_since(t) > timeout) {
                pending.pop_front();
                self.count(|k| {
                    k.sent += 1;
                    k.timeouts += 1
                });
            }
            // 4. Interval boundary.
            let idx = (now.saturating_duration_since(start).as_nanos() / interval.as_nanos()) as u64;
            if idx > ivl_idx && now <= end {
                self.flush_interval(ivl_idx, tx);
                ivl_idx = idx;
            }
            // 5. Done? After the end, wait for outstanding replies up to the timeout.
            if !scheduling && pending.is_empty() && self.conns.iter().all(|c| c.inflight.is_empty()) {
                break;
            }
            if !scheduling && now > end + timeout {
                let lost: u64 = pending.len() as u64 + self.conns.iter().map(|c| c.inflight.len() as u64).sum::<u64>();
                let unsent = pending.len() as u64;
                self.count(|k| {
                    k.timeouts += lost;
                    k.sent += unsent;
                });
                break;
            }
            // 6. Sleep until the next send (timerfd), a reply, or MAX_BLOCK.
            // Step 2 left requests pending only when no connection had room; when it took them
            // all, assume one still has (a wrong guess only wakes the loop once more).
            let can_send = pending.is_empty();
            let mut wait = MAX_BLOCK;
            if scheduling && can_send {
                let next = sched.next_due();
                if next <= now {
                    wait = Duration::ZERO;
                } else if next - now < MAX_BLOCK && armed != Some(next) {
                    timer.arm(next - now)?;
                    armed = Some(next);
                }
            }
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            for ev in events.iter() {
                if ev.token() == TIMER {
                    timer.drain();
                    armed = None;
                    continue;
                }
                let c = ev.token().0;
                if c >= n {
                    continue;
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    self.on_readable(c, end);
                }
                if ev.is_writable() && self.conns[c].flush().is_err() {
                    self.reset(c, false);
                }
            }
        }
        // The last partial interval counts in the totals but is not reported on its own.
        let rest = self.ivl_hist.clone();
        self.latency.add(&rest).expect("histograms share bounds");
        Ok(())
    }
}

/// Makes the calling thread SCHED_FIFO at `priority`.
fn set_fifo(priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param on our stack.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs one step: `rate` requests per second for `duration`, and reports it.
/// `server_pid`, when given, is charged CPU per request; `on_interval` sees each interval.
pub fn run_step(
    cfg: &ClientConfig,
    wl: &Workload,
    rate: f64,
    duration: Duration,
    server_pid: Option<u32>,
    mut on_interval: impl FnMut(&IntervalResult),
) -> Result<StepResult> {
    cfg.validate()?;
    wl.validate()?;
    if !(rate > 0.0 && rate.is_finite()) {
        bail!("rate must be a positive number, got {rate}");
    }
    if duration.is_zero() {
        bail!("duration must be positive");
    }
    let threads = cfg.threads;
    if let Some(p) = cfg.rt_priority {
        // The collecting thread too: a worker must never wait on a lock (the allocator's,
        // the address space's) held by a preempted normal-priority thread of this process.
        set_fifo(p).with_context(|| format!("cannot set real-time priority {p}"))?;
    }
    let (tx, rx) = unbounded::<Msg>();
    let mut ready_rxs = Vec::new();
    let mut start_txs = Vec::new();
    let mut handles = Vec::new();
    for t in 0..threads {
        let conns = cfg.connections / threads + usize::from(t < cfg.connections % threads);
        let (ready_tx, ready_rx) = bounded::<std::result::Result<(), String>>(1);
        let (start_tx, start_rx): (Sender<Instant>, Receiver<Instant>) = bounded(1);
        ready_rxs.push(ready_rx);
        start_txs.push(start_tx);
        let (cfg, wl, tx) = (cfg.clone(), wl.clone(), tx.clone());
        let phase = t as f64 / threads as f64;
        let per_rate = rate / threads as f64;
        handles.push(std::thread::Builder::new().name(format!("load-{t}")).spawn(move || {
            if !cfg.pin_cores.is_empty() {
                core_affinity::set_for_current(core_affinity::CoreId { id: cfg.pin_cores[t % cfg.pin_cores.len()] });
            }
            set_timer_slack(1);
            if let Some(p) = cfg.rt_priority {
                if let Err(e) = set_fifo(p) {
                    let _ = ready_tx.send(Err(format!("cannot set real-time priority {p}: {e}")));
                    return;
                }
            }
            let mut worker = match Worker::new(&cfg, &wl, conns, cfg.seed.wrapping_add(t as u64 * 7919)) {
                Ok(w) => w,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{e:#}")));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            let Ok(start) = start_rx.recv() else { return };
            let sched = Schedule::new(start, per_rate, phase);
            let res = worker.run(sched, start, duration, &tx).map_err(|e| format!("{e:#}"));
            let done = res.map(|()| WorkerResult { counters: worker.totals, latency: worker.latency, lag: worker.lag });
            let _ = tx.send(Msg::Done(done));
        })?);
    }
    drop(tx);
    let mut failure = None;
    for r in &ready_rxs {
        match r.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some("a worker thread did not start".into()),
        }
    }
    if let Some(e) = failure {
        drop(start_txs); // workers waiting for a start time see the channel close and exit
        for h in handles {
            let _ = h.join();
        }
        bail!("{e}");
    }
    // Thousands of fresh connections: let the server accept and register them all before the
    // first send, so the step measures serving them, not their hand-off (1 s at 10,000).
    std::thread::sleep(Duration::from_millis((cfg.connections as u64 / 10).min(1000)));
    let server_cpu0 = server_pid.map(cpu::process_cpu).transpose().context("reading server CPU")?;
    let self_cpu0 = cpu::self_cpu()?;
    // A small head start so every worker has its start time before the first send is due.
    let start = Instant::now() + Duration::from_millis(2);
    for s in &start_txs {
        let _ = s.send(start);
    }
    let mut intervals: HashMap<u64, (usize, Counters, Histogram<u64>)> = HashMap::new();
    let mut reported = Vec::new();
    let mut totals = Counters::default();
    let mut latency = histo::new_hist();
    let mut lag = histo::new_hist();
    let mut done = 0;
    let mut errors = Vec::new();
    let mut rss_kb: Option<u64> = None;
    let ivl_s = cfg.interval_ms as f64 / 1000.0;
    while done < threads {
        let Ok(msg) = rx.recv() else { break };
        match msg {
            Msg::Interval { idx, counters, hist } => {
                let e = intervals.entry(idx).or_insert_with(|| (0, Counters::default(), histo::new_hist()));
                e.0 += 1;
                e.1 += counters;
                e.2.add(&hist).expect("histograms share bounds");
                if e.0 == threads {
                    let (_, c, h) = intervals.remove(&idx).expect("entry exists");
                    let ir = IntervalResult {
                        t_s: (idx + 1) as f64 * ivl_s,
                        rate: c.completed as f64 / ivl_s,
                        counters: c,
                        hit_ratio: c.hit_ratio(),
                        latency: histo::summarize(&h),
                    };
                    on_interval(&ir);
                    reported.push(ir);
                    if let Some(kb) = server_pid.and_then(cpu::process_rss_kb) {
                        rss_kb = Some(rss_kb.map_or(kb, |m: u64| m.max(kb)));
                    }
                }
            }
            Msg::Done(Ok(w)) => {
                done += 1;
                totals += w.counters;
                latency.add(&w.latency).expect("histograms share bounds");
                lag.add(&w.lag).expect("histograms share bounds");
            }
            Msg::Done(Err(e)) => {
                done += 1;
                errors.push(e);
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    for h in handles {
        let _ = h.join();
    }
    if let Some(e) = errors.into_iter().next() {
        bail!("worker failed: {e}");
    }
    let self_cpu = (cpu::self_cpu()? - self_cpu0).as_secs_f64();
    let server_cpu = match (server_pid, server_cpu0) {
        (Some(pid), Some(c0)) => Some((cpu::process_cpu(pid).context("reading server CPU")? - c0).as_secs_f64()),
        _ => None,
    };
    reported.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let send_lag = histo::summarize(&lag);
    let late = late_fraction(&lag);
    if let Some(kb) = server_pid.and_then(cpu::process_rss_kb) {
        rss_kb = Some(rss_kb.map_or(kb, |m| m.max(kb)));
    }
    let scheduled = (rate * duration.as_secs_f64()).round() as u64;
    let kept_schedule = send_lag.p999_us <= cfg.lag_limit_us && totals.sent + threads as u64 >= scheduled;
    Ok(StepResult {
        target_rate: rate,
        duration_s: duration.as_secs_f64(),
        achieved_rate: totals.completed_in_window as f64 / duration.as_secs_f64(),
        counters: totals,
        hit_ratio: totals.hit_ratio(),
        latency: histo::summarize(&latency),
        send_lag,
        intervals: reported,
        client_cpu_s: self_cpu,
        client_cpu_util: self_cpu / wall.max(1e-9),
        server_cpu_s: server_cpu,
        server_cpu_us_per_req: server_cpu.map(|s| s * 1e6 / totals.completed.max(1) as f64),
        kept_schedule,
        late_fraction: late,
        server_rss_kb: rss_kb,
    })
}
