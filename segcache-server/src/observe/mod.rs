//! What the server tells about itself. Recorded as requests run: the counters behind `stats`
//! (`stats`), the `watch` streams and `stats detail` (`watch`), per-command latency histograms
//! ([`latency`]), the sampled command log ([`klog`]) and the hot-key view ([`hotkeys`]). Read
//! out: the `stats` replies and the Prometheus text (`report`, walking items with `scan` for
//! `stats sizes`), served over HTTP with the health probes (`http`).
//!
//! Each worker has a [`WorkerObs`] of its own. The request path calls [`Probe::text`] or
//! [`Probe::binary`] before running a request and [`Probe::finish`] after: one clock read per
//! request (a request starts where the one before it in the same batch ended: see
//! [`begin_batch`]), a histogram bump (no lock, no atomic read-modify-write) and a countdown per
//! sampler; only a sampled request formats a log line or touches the hot-key map.

pub mod hotkeys;
pub(crate) mod http;
pub mod klog;
pub mod latency;
pub(crate) mod report;
pub(crate) mod scan;
pub(crate) mod stats;
pub(crate) mod watch;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

pub use crate::config::HotKeySettings;
use crate::protocol::binary::{Command as BinCommand, Request as BinRequest};
use crate::protocol::{MetaCmd, Request, StoreKind};
use hotkeys::HotKeys;
use klog::{Klog, KlogSender};
pub use latency::Kind;

/// One worker's share.
#[derive(Debug, Default)]
pub struct WorkerObs {
    pub latency: latency::Histograms,
    pub hot: HotKeys,
    /// Requests until the next one logged (counts down; only its worker writes it).
    klog_left: AtomicU64,
    /// Requests until the next one counted by the hot-key view.
    hot_left: AtomicU64,
    klog: Option<KlogSender>,
    /// When the previous request of the current batch finished (ns since `Observe::base`, plus
    /// one; 0 at a batch's start): the next one starts there, so a request costs one clock read.
    last_end: AtomicU64,
}

/// Every worker's share, the command log's writer and the settings.
#[derive(Debug)]
pub struct Observe {
    pub workers: Box<[WorkerObs]>,
    pub klog: Option<Klog>,
    pub hot: HotKeySettings,
    /// The origin of the workers' clock readings.
    base: Instant,
}

impl Observe {
    /// `workers` shares; the command log started when `klog` is given.
    pub fn new(workers: usize, klog: Option<klog::KlogSettings>, hot: HotKeySettings) -> std::io::Result<Observe> {
        let mut shares: Vec<WorkerObs> = (0..workers).map(|_| WorkerObs::default()).collect();
        let klog = match klog {
            Some(s) => {
                let (k, senders) = Klog::start(s, workers)?;
                for (w, tx) in shares.iter_mut().zip(senders) {
                    w.klog = Some(tx);
                    w.klog_left.store(k.settings.sample, Relaxed);
                }
                Some(k)
            }
            None => None,
        };
        for w in &shares {
            w.hot_left.store(hot.sample, Relaxed);
        }
        Ok(Observe { workers: shares.into(), klog, hot, base: Instant::now() })
    }

    /// Seconds since start (the hot-key window's clock).
    pub fn now(&self) -> u64 {
        self.base.elapsed().as_secs()
    }

    /// Stops the command log's writer once it has written what is queued (call after the
    /// workers have stopped).
    pub fn finish(&self) {
        if let Some(k) = &self.klog {
            k.finish();
        }
    }

    /// Every worker's latency histograms, summed.
    pub fn latency(&self) -> latency::Merged {
        let mut m = latency::Merged::default();
        for w in self.workers.iter() {
            w.latency.add_to(&mut m);
        }
        m
    }

    /// The top keys of worker `worker` (or of all, merged) over the window ending at `now`,
    /// with their estimated requests (sampled counts times the sampling rate).
    pub fn hot_keys(&self, worker: Option<usize>, now: u64) -> Vec<(Box<[u8]>, u64)> {
        let mut m = HashMap::new();
        match worker {
            Some(i) => self.workers[i].hot.add_to(&mut m, now),
            None => self.workers.iter().for_each(|w| w.hot.add_to(&mut m, now)),
        }
        let mut v = hotkeys::top(m, self.hot.top);
        for (_, c) in &mut v {
            *c *= self.hot.sample.max(1);
        }
        v
    }
}

/// Counts down to the next sampled request: `true` every `every`-th call (never when 0).
#[inline]
fn countdown(left: &AtomicU64, every: u64) -> bool {
    match left.load(Relaxed) {
        0 => false,
        1 => {
            left.store(every, Relaxed);
            true
        }
        n => {
            left.store(n - 1, Relaxed);
            false
        }
    }
}

/// A batch of requests begins (the requests one read brought): its first request reads the
/// clock; each next one starts when the one before it finished (its parsing counts as its own).
#[inline]
pub fn begin_batch(o: &Observe, worker: usize) {
    o.workers[worker].last_end.store(0, Relaxed);
}

/// Nanoseconds since `base`.
#[inline]
fn clock(base: Instant) -> u64 {
    base.elapsed().as_nanos() as u64
}

/// Where a request of worker `w` starts: the previous one's end in this batch, else now.
#[inline]
fn start_of(o: &Observe, w: &WorkerObs) -> u64 {
    match w.last_end.load(Relaxed) {
        0 => clock(o.base),
        t => t - 1,
    }
}

/// One request in flight: its kind, its start, and whether the command log takes it.
#[derive(Debug)]
pub struct Probe<'r> {
    kind: Kind,
    start: u64,
    mark: usize,
    /// The request's text for the command log, when sampled.
    log: Option<Logged<'r>>,
}

#[derive(Debug)]
enum Logged<'r> {
    Line(&'r [u8]),
    Binary(String),
}

impl<'r> Probe<'r> {
    /// Before running the text or meta request `req`, received as `raw`; `mark` is the output's
    /// length before its reply.
    #[inline]
    pub fn text(o: &Observe, worker: usize, req: &Request<'_>, raw: &'r [u8], mark: usize) -> Probe<'r> {
        let w = &o.workers[worker];
        let kind = text_kind(req);
        if countdown(&w.hot_left, o.hot.sample) {
            let now = o.now();
            match req {
                Request::Get { keys, .. } | Request::Gat { keys, .. } => (*keys).for_each(|k| w.hot.record(k, now)),
                Request::Store { key, .. }
                | Request::Arith { key, .. }
                | Request::Delete { key, .. }
                | Request::Touch { key, .. } => w.hot.record(key, now),
                Request::Meta { key, .. } => w.hot.record(key.sent(), now),
                _ => {}
            }
        }
        let log = (w.klog.is_some() && countdown(&w.klog_left, klog_sample(o))).then(|| {
            let end = memchr::memchr(b'\n', raw).map_or(raw.len(), |i| i + 1);
            Logged::Line(&raw[..end])
        });
        Probe { kind, start: start_of(o, w), mark, log }
    }

    /// Before running the binary request `req`.
    #[inline]
    pub fn binary(o: &Observe, worker: usize, req: &BinRequest<'_>, mark: usize) -> Probe<'r> {
        let w = &o.workers[worker];
        let (kind, key) = binary_kind(req);
        if let Some(key) = key {
            if countdown(&w.hot_left, o.hot.sample) {
                w.hot.record(key, o.now());
            }
        }
        let log = (w.klog.is_some() && countdown(&w.klog_left, klog_sample(o))).then(|| {
            let mut s = format!("{} opcode={:#04x}", kind.name(), req.header.opcode);
            if let Some(key) = key {
                s.push_str(" key=");
                s.push_str(&hotkeys::printable(key));
            }
            Logged::Binary(s)
        });
        Probe { kind, start: start_of(o, w), mark, log }
    }

    /// After the request ran and appended its reply to `out`.
    #[inline]
    /// `peer`: the client, when the request came on a connection.
    pub fn finish(self, o: &Observe, worker: usize, peer: Option<SocketAddr>, out: &[u8]) {
        let w = &o.workers[worker];
        let end = clock(o.base);
        w.latency.record(self.kind, end.saturating_sub(self.start));
        w.last_end.store(end + 1, Relaxed);
        if let Some(log) = self.log {
            write_log(o, w, peer, log, out.get(self.mark..).unwrap_or_default());
        }
    }
}

/// Queues the command log's line for a sampled request that replied `reply`.
#[cold]
fn write_log(o: &Observe, w: &WorkerObs, peer: Option<SocketAddr>, log: Logged<'_>, reply: &[u8]) {
    let (Some(tx), Some(klog)) = (&w.klog, &o.klog) else { return };
    let peer = match peer {
        Some(p) if p.port() != 0 => p.to_string(),
        Some(_) => "unix".to_string(),
        None => "-".to_string(),
    };
    let time = crate::logger::rfc3339(std::time::SystemTime::now());
    let mut line = Vec::with_capacity(128);
    match &log {
        Logged::Line(l) => klog::format_line(&mut line, &peer, &time, l, reply),
        Logged::Binary(s) => klog::format_line(&mut line, &peer, &time, s.as_bytes(), reply),
    }
    tx.send(line, &klog.stats);
}

fn klog_sample(o: &Observe) -> u64 {
    o.klog.as_ref().map_or(0, |k| k.settings.sample)
}

fn store_kind(kind: StoreKind) -> Kind {
    match kind {
        StoreKind::Set => Kind::Set,
        StoreKind::Add => Kind::Add,
        StoreKind::Replace => Kind::Replace,
        StoreKind::Append => Kind::Append,
        StoreKind::Prepend => Kind::Prepend,
        StoreKind::Cas => Kind::Cas,
    }
}

fn text_kind(req: &Request<'_>) -> Kind {
    match req {
        Request::Get { .. } => Kind::Get,
        Request::Gat { .. } => Kind::Gat,
        Request::Store { kind, .. } => store_kind(*kind),
        Request::Arith { .. } => Kind::IncrDecr,
        Request::Delete { .. } => Kind::Delete,
        Request::Touch { .. } => Kind::Touch,
        Request::FlushAll { .. } => Kind::FlushAll,
        Request::Meta { cmd, .. } => match cmd {
            MetaCmd::Get => Kind::Get,
            MetaCmd::Set => Kind::Set,
            MetaCmd::Delete => Kind::Delete,
            MetaCmd::Arith => Kind::IncrDecr,
            MetaCmd::Debug | MetaCmd::Noop => Kind::Other,
        },
        _ => Kind::Other,
    }
}

fn binary_kind<'a>(req: &BinRequest<'a>) -> (Kind, Option<&'a [u8]>) {
    match req.cmd {
        BinCommand::Get { key, exptime: None, .. } => (Kind::Get, Some(key)),
        BinCommand::Get { key, with_value: false, .. } => (Kind::Touch, Some(key)),
        BinCommand::Get { key, .. } => (Kind::Gat, Some(key)),
        BinCommand::Store { kind, key, .. } => {
            let kind = match kind {
                StoreKind::Set | StoreKind::Add | StoreKind::Replace if req.header.cas != 0 => Kind::Cas,
                k => store_kind(k),
            };
            (kind, Some(key))
        }
        BinCommand::Delete { key } => (Kind::Delete, Some(key)),
        BinCommand::Arith { key, .. } => (Kind::IncrDecr, Some(key)),
        BinCommand::Flush { .. } => (Kind::FlushAll, None),
        _ => (Kind::Other, None),
    }
}

/// Escapes a Prometheus label value (after [`hotkeys::printable`], which leaves `"` and `\`).
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `stats hotkeys`: the merged view, then each worker's.
pub fn write_hotkeys(out: &mut Vec<u8>, o: &Observe) {
    let now = o.now();
    let mut s = String::new();
    let _ = write!(
        s,
        "STAT hotkeys_sample {}\r\nSTAT hotkeys_window_seconds {}\r\nSTAT hotkeys_top {}\r\n",
        o.hot.sample,
        hotkeys::BUCKETS as u64 * hotkeys::BUCKET_SECS,
        o.hot.top
    );
    if o.hot.sample > 0 {
        for (rank, (k, c)) in o.hot_keys(None, now).iter().enumerate() {
            let _ = write!(s, "STAT hotkey:{} {} {c}\r\n", rank + 1, hotkeys::printable(k));
        }
        for w in 0..o.workers.len() {
            for (rank, (k, c)) in o.hot_keys(Some(w), now).iter().enumerate() {
                let _ = write!(s, "STAT worker:{w}:hotkey:{} {} {c}\r\n", rank + 1, hotkeys::printable(k));
            }
        }
    }
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"END\r\n");
}

/// The Prometheus text of the latency summaries, the hot keys and the command log's counters.
pub fn prometheus(s: &mut String, o: &Observe) {
    let m = o.latency();
    s.push_str(
        "# HELP segcache_request_duration_seconds Time to run one request, from parsed to reply buffered, since start.\n\
         # TYPE segcache_request_duration_seconds summary\n",
    );
    for (kind, h) in Kind::ALL.iter().zip(&m.kinds) {
        let name = kind.name();
        for (q, qs) in latency::QUANTILES {
            let v = h.quantile(q) as f64 / 1e9;
            let _ = writeln!(s, "segcache_request_duration_seconds{{command=\"{name}\",quantile=\"{qs}\"}} {v}");
        }
        let _ = writeln!(s, "segcache_request_duration_seconds_sum{{command=\"{name}\"}} {}", h.sum_ns as f64 / 1e9);
        let _ = writeln!(s, "segcache_request_duration_seconds_count{{command=\"{name}\"}} {}", h.count());
    }
    if o.hot.sample > 0 {
        let now = o.now();
        s.push_str(
            "# HELP segcache_hotkey_requests Estimated requests for the hottest keys over the last minute (sampled).\n\
             # TYPE segcache_hotkey_requests gauge\n",
        );
        for (rank, (k, c)) in o.hot_keys(None, now).iter().enumerate() {
            let key = label(&hotkeys::printable(k));
            let _ = writeln!(s, "segcache_hotkey_requests{{worker=\"all\",rank=\"{}\",key=\"{key}\"}} {c}", rank + 1);
        }
        for w in 0..o.workers.len() {
            for (rank, (k, c)) in o.hot_keys(Some(w), now).iter().enumerate() {
                let key = label(&hotkeys::printable(k));
                let _ =
                    writeln!(s, "segcache_hotkey_requests{{worker=\"{w}\",rank=\"{}\",key=\"{key}\"}} {c}", rank + 1);
            }
        }
    }
    if let Some(k) = &o.klog {
        for (name, help, c) in [
            ("logged", "Requests written to the command log.", &k.stats.logged),
            ("dropped", "Command log lines dropped because a worker's queue was full.", &k.stats.dropped),
            ("rotations", "Command log files rotated.", &k.stats.rotations),
        ] {
            let _ = writeln!(
                s,
                "# HELP segcache_klog_{name} {help}\n# TYPE segcache_klog_{name} counter\nsegcache_klog_{name} {}",
                c.load(Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn countdown_samples_one_in_n() {
        let left = AtomicU64::new(10);
        assert_eq!((0..1000).filter(|_| countdown(&left, 10)).count(), 100);
        let off = AtomicU64::new(0);
        assert!(!(0..1000).any(|_| countdown(&off, 0)));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label(&hotkeys::printable(b"a\"b\\c\nd")), "a\\\"b\\\\c%0Ad");
    }
}
