//! What memcached's operator commands need to know about connections and requests: the list of
//! open connections (`stats conns`), the live log streams (`watch`) and the per-prefix counters
//! (`stats detail`).
//!
//! None of it costs the request path more than one relaxed load while unused: the watchers'
//! stream mask and the detail switch are read before anything is formatted or locked.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use mio::Waker;
use segcache_core::{RemovalCause, RemovalListener};

/// `watch` streams, as bits (see `protocol::WATCH_STREAMS`).
pub const FETCHERS: u8 = 1;
pub const MUTATIONS: u8 = 2;
pub const EVICTIONS: u8 = 4;
pub const CONNEVENTS: u8 = 8;

/// A watcher's buffer may hold this much unsent log before lines are dropped (memcached's
/// `watcher_logbuf_size`).
const WATCH_BUF: usize = 256 << 10;

/// One open client connection, as `stats conns` lists it.
#[derive(Debug)]
pub struct ConnEntry {
    /// The socket's descriptor: memcached's connection id.
    pub fd: i32,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Server uptime, in seconds, at the connection's last request.
    pub last_cmd: AtomicU64,
    /// Set by `watch` (the streams asked for): the worker turns the connection into a watcher.
    pub watch: AtomicU8,
    /// A key dump that did not fit in one reply buffer: the worker goes on with it as the
    /// client reads, before it runs the connection's next request.
    pub dump: Mutex<Option<DumpJob>>,
    /// Whether `dump` holds a job (read without the lock).
    pub dumping: AtomicBool,
}

/// Where a key dump (`lru_crawler metadump|mgdump`) stands: its kind and the engine's cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpJob {
    pub mg: bool,
    pub cursor: u64,
}

impl ConnEntry {
    /// An entry for a connection from `peer` to `local` on descriptor `fd`.
    pub fn new(fd: i32, peer: SocketAddr, local: SocketAddr) -> ConnEntry {
        ConnEntry {
            fd,
            peer,
            local,
            last_cmd: AtomicU64::new(0),
            watch: AtomicU8::new(0),
            dump: Mutex::new(None),
            dumping: AtomicBool::new(false),
        }
    }

    /// Leaves a dump to the worker.
    pub fn park_dump(&self, job: DumpJob) {
        *self.dump.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        self.dumping.store(true, Relaxed);
    }
}

/// A connection that watches log streams: lines are queued here by any thread and written by
/// the connection's worker, which `waker` wakes.
#[derive(Debug)]
pub struct Watcher {
    pub streams: u8,
    pub buf: Mutex<Vec<u8>>,
    waker: Arc<Waker>,
    /// Lines dropped because the client did not read them fast enough.
    pub skipped: AtomicU64,
}

/// The connection registry and the log watchers.
#[derive(Debug, Default)]
pub struct Watchers {
    /// The union of every watcher's streams: a request checks it before formatting anything.
    mask: AtomicU8,
    list: Mutex<Vec<Arc<Watcher>>>,
    /// memcached's log line counter (`gid=`).
    gid: AtomicU64,
    conns: Mutex<BTreeMap<i32, Arc<ConnEntry>>>,
    /// The listening socket's descriptor and address.
    listener: std::sync::OnceLock<(i32, SocketAddr)>,
    /// `stats detail on`.
    detail_on: AtomicBool,
    detail: Mutex<HashMap<Vec<u8>, [u64; 4]>>,
    /// `log_watcher_sent` and `log_watcher_skipped`.
    pub sent: AtomicU64,
    pub skipped: AtomicU64,
}

impl Watchers {
    /// Whether any watcher wants `stream`.
    #[inline]
    pub fn wants(&self, stream: u8) -> bool {
        self.mask.load(Relaxed) & stream != 0
    }

    /// Starts a watcher for `streams`, written by the worker that `waker` wakes.
    pub fn add(&self, streams: u8, waker: Arc<Waker>) -> Arc<Watcher> {
        let w = Arc::new(Watcher { streams, buf: Mutex::new(Vec::new()), waker, skipped: AtomicU64::new(0) });
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.push(w.clone());
        self.mask.fetch_or(streams, Relaxed);
        w
    }

    /// Stops a watcher (its connection closed).
    pub fn remove(&self, w: &Arc<Watcher>) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|x| !Arc::ptr_eq(x, w));
        self.mask.store(list.iter().fold(0, |m, x| m | x.streams), Relaxed);
    }

    /// Number of watchers.
    pub fn count(&self) -> usize {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// An engine eviction listener that logs each evicted item to the `evictions` watchers, as
    /// memcached's `type=eviction` lines (items have no slab class here: `clsid=1`). It hears
    /// only what the engine removes on its own, so that deletes and sets cost no more once
    /// someone has watched evictions.
    pub fn eviction_logger(self: &Arc<Self>) -> RemovalListener {
        let watchers = self.clone();
        RemovalListener::expired_or_evicted(move |item, cause| {
            if cause != RemovalCause::Evicted || !watchers.wants(EVICTIONS) {
                return;
            }
            watchers.log(EVICTIONS, |line| {
                line.push_str("type=eviction key=");
                uriencode_str(line, item.key());
                let fetch = if item.fetched() { "yes" } else { "no" };
                let ttl = item.ttl().map_or(-1, |d| d.as_secs() as i64);
                let (la, size) = (item.last_access().as_secs(), item.value().len());
                let _ = write!(line, " fetch={fetch} ttl={ttl} la={la} clsid=1 size={size}");
            });
        })
    }

    /// Sends one log line of `stream` to its watchers: `body` writes what follows
    /// `ts=<secs>.<micros> gid=<n> ` (without the newline).
    pub fn log(&self, stream: u8, body: impl FnOnce(&mut String)) {
        if !self.wants(stream) {
            return;
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let gid = self.gid.fetch_add(1, Relaxed) + 1;
        let mut line = String::with_capacity(128);
        let _ = write!(line, "ts={}.{:06} gid={gid} ", now.as_secs(), now.subsec_micros());
        body(&mut line);
        line.push('\n');
        let list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        for w in list.iter().filter(|w| w.streams & stream != 0) {
            let mut buf = w.buf.lock().unwrap_or_else(|e| e.into_inner());
            if buf.len() + line.len() > WATCH_BUF {
                w.skipped.fetch_add(1, Relaxed);
                self.skipped.fetch_add(1, Relaxed);
                continue;
            }
            let was_empty = buf.is_empty();
            // As memcached: the lines a watcher missed are counted in a line before the next.
            let missed = w.skipped.swap(0, Relaxed);
            if missed > 0 {
                buf.extend_from_slice(format!("skipped={missed}\n").as_bytes());
            }
            buf.extend_from_slice(line.as_bytes());
            drop(buf);
            self.sent.fetch_add(1, Relaxed);
            if was_empty {
                let _ = w.waker.wake();
            }
        }
    }

    /// Records the listening socket (once).
    pub fn set_listener(&self, fd: i32, addr: SocketAddr) {
        let _ = self.listener.set((fd, addr));
    }

    /// The listening socket's descriptor and address.
    pub fn listener(&self) -> Option<(i32, SocketAddr)> {
        self.listener.get().copied()
    }

    /// Registers an open connection.
    pub fn open(&self, entry: Arc<ConnEntry>) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(entry.fd, entry);
    }

    /// Forgets a closed connection.
    pub fn close(&self, fd: i32) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&fd);
    }

    /// The open connections, by descriptor.
    pub fn conns(&self) -> Vec<Arc<ConnEntry>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// `stats detail on|off`.
    pub fn set_detail(&self, on: bool) {
        self.detail_on.store(on, Relaxed);
    }

    pub fn detail_enabled(&self) -> bool {
        self.detail_on.load(Relaxed)
    }

    /// Counts a request on `key` for `stats detail dump`: `what` is 0 get, 1 hit, 2 set,
    /// 3 delete (a hit counts as a get too). Keys without the `:` delimiter are not counted, as
    /// in memcached.
    #[inline]
    pub fn detail(&self, key: &[u8], what: usize) {
        if !self.detail_on.load(Relaxed) {
            return;
        }
        let Some(end) = key.iter().position(|&b| b == b':') else { return };
        let mut map = self.detail.lock().unwrap_or_else(|e| e.into_inner());
        let e = map.entry(key[..end].to_vec()).or_default();
        e[what] += 1;
        if what == 1 {
            e[0] += 1;
        }
    }

    /// Forgets every prefix's counts (`stats reset`, as memcached's `stats_prefix_clear`).
    pub fn detail_clear(&self) {
        self.detail.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// memcached's `stats detail dump` lines.
    pub fn detail_dump(&self, out: &mut Vec<u8>) {
        let map = self.detail.lock().unwrap_or_else(|e| e.into_inner());
        let mut prefixes: Vec<_> = map.iter().collect();
        prefixes.sort();
        for (p, c) in prefixes {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(p);
            let counts = format!(" get {} hit {} set {} del {}\r\n", c[0], c[1], c[2], c[3]);
            out.extend_from_slice(counts.as_bytes());
        }
        out.extend_from_slice(b"END\r\n");
    }
}

impl Watcher {
    /// Moves the queued lines to `out`.
    pub fn drain_into(&self, out: &mut Vec<u8>) {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        out.extend_from_slice(&buf);
        buf.clear();
    }
}

/// Appends `key` as memcached's logs and dumps print it: URL-encoded (RFC 3986 unreserved
/// characters as they are, every other byte as `%XX`).
pub fn uriencode(out: &mut Vec<u8>, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// `uriencode` into a `String`.
pub fn uriencode_str(out: &mut String, key: &[u8]) {
    let mut v = Vec::with_capacity(key.len());
    uriencode(&mut v, key);
    out.push_str(&String::from_utf8_lossy(&v));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watcher that does not read in time misses lines, counted in `log_watcher_skipped`, and
    /// is told how many in a `skipped=N` line before the next one it gets (as memcached).
    #[test]
    fn a_slow_watcher_is_told_what_it_missed() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let watchers = Watchers::default();
        let w = watchers.add(MUTATIONS, waker);
        let long = "x".repeat(1000);
        let mut n = 0;
        while watchers.skipped.load(Relaxed) < 3 {
            watchers.log(MUTATIONS, |l| l.push_str(&long));
            n += 1;
        }
        let mut out = Vec::new();
        w.drain_into(&mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), n - 3);
        watchers.log(MUTATIONS, |l| l.push_str("next"));
        out.clear();
        w.drain_into(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("skipped=3\nts="), "{text}");
        assert!(text.ends_with("next\n"));
    }

    #[test]
    fn keys_are_url_encoded_as_memcached_does() {
        let mut v = Vec::new();
        uriencode(&mut v, b"b%20c:d~e");
        assert_eq!(v, b"b%2520c%3Ad~e");
    }

    #[test]
    fn detail_counts_by_prefix() {
        let w = Watchers::default();
        w.detail(b"a:1", 0);
        w.set_detail(true);
        w.detail(b"a:1", 1);
        w.detail(b"a:2", 0);
        w.detail(b"b:x", 2);
        w.detail(b"nodelim", 3);
        let mut out = Vec::new();
        w.detail_dump(&mut out);
        assert_eq!(out, b"PREFIX a get 2 hit 1 set 0 del 0\r\nPREFIX b get 0 hit 0 set 1 del 0\r\nEND\r\n");
    }
}
