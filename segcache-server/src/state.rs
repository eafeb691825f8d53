//! What every thread of the server shares: the engine handle, the settings and the counters.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use segcache_core::SharedCache;

use crate::config::Settings;
use crate::observe::stats::{ConnStats, Totals, WorkerStats};
use crate::observe::watch::{ConnEntry, Watchers};
use crate::observe::Observe;
use crate::protocol::Limits;

/// Stop taking requests from a pipeline once this much output waits to be sent, so that a
/// client that writes without reading cannot grow the buffer without bound: the output buffer
/// then holds less than this plus one request's reply.
pub const OUT_HIGH_WATER: usize = 256 << 10;

/// Shared by the acceptor, the workers and the admin thread (behind an `Arc`).
#[derive(Debug)]
pub struct Shared {
    pub cache: SharedCache,
    pub settings: Settings,
    pub limits: Limits,
    /// One counter block per worker.
    pub workers: Box<[WorkerStats]>,
    pub conns: ConnStats,
    /// Set once on SIGTERM/SIGINT: stop accepting and drain.
    pub stopping: Arc<AtomicBool>,
    /// memcached's `verbosity` setting (the log level follows it).
    pub verbosity: AtomicU32,
    /// Open connections, `watch` streams and `stats detail` counters.
    pub watchers: Arc<Watchers>,
    /// The engine tells `watchers` of evictions from the first `watch evictions` on.
    evictions_logged: std::sync::Once,
    /// `stats sizes_enable` was sent: `stats sizes` answers with the histogram.
    pub sizes_enabled: AtomicBool,
    /// memcached's `maxbytes`: `-m`, or what `cache_memlimit` last set.
    pub memory_limit: AtomicU64,
    /// Wakes the acceptor (set once the server is bound): `shutdown` stops the server with it.
    pub acceptor: OnceLock<Arc<mio::Waker>>,
    /// The certificates and counters of `-Z` (set once the server is bound, when TLS is on).
    pub tls: OnceLock<Arc<crate::tls::Tls>>,
    /// Latency histograms, the command log and the hot-key view (one share per worker).
    pub observe: Observe,
    started: Instant,
    started_unix: u64,
}

impl Shared {
    pub fn new(cache: SharedCache, settings: Settings) -> Shared {
        let observe = Observe::new(settings.threads, None, settings.hotkeys).expect("no command log to open");
        Shared::with_observe(cache, settings, observe)
    }

    /// As [`Shared::new`], with the observers given (a command log already opened).
    pub fn with_observe(cache: SharedCache, settings: Settings, observe: Observe) -> Shared {
        let workers = (0..settings.threads).map(|_| WorkerStats::default()).collect();
        let limits = Limits { max_item_size: settings.max_item_size, max_response: settings.max_reply_size };
        Shared {
            cache,
            limits,
            workers,
            conns: ConnStats::default(),
            stopping: Arc::new(AtomicBool::new(false)),
            verbosity: AtomicU32::new(0),
            watchers: Arc::new(Watchers::default()),
            evictions_logged: std::sync::Once::new(),
            sizes_enabled: AtomicBool::new(false),
            memory_limit: AtomicU64::new(settings.engine.memory_bytes as u64),
            acceptor: OnceLock::new(),
            tls: OnceLock::new(),
            observe,
            started: Instant::now(),
            started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            settings,
        }
    }

    /// Has the engine tell the `evictions` watchers of each item it evicts (an eviction then
    /// costs a check of the watchers, so not before anyone watches).
    pub fn log_evictions(&self) {
        self.evictions_logged.call_once(|| self.cache.set_eviction_listener(Some(self.watchers.eviction_logger())));
    }

    /// Seconds since start.
    pub fn uptime(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Unix time the server started.
    pub fn started_unix(&self) -> u64 {
        self.started_unix
    }

    /// Every worker's counters summed.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for w in self.workers.iter() {
            w.add_to(&mut t);
        }
        t
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Stops the server gracefully, as a signal does (`shutdown`).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(w) = self.acceptor.get() {
            let _ = w.wake();
        }
    }
}

/// What a request needs to run: the shared state and the counters of the worker running it.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub stats: &'a WorkerStats,
    /// The client connection the request came on, when it came on a socket.
    pub conn: Option<&'a ConnEntry>,
    /// The worker's index (into `shared.workers` and `shared.observe.workers`).
    pub worker: usize,
}

impl<'a> Ctx<'a> {
    /// The context of worker `i`.
    pub fn new(shared: &'a Shared, i: usize) -> Ctx<'a> {
        let worker = i % shared.workers.len();
        Ctx { shared, stats: &shared.workers[worker], conn: None, worker }
    }

    /// This context for a request that came on connection `conn`.
    pub fn on(self, conn: &'a ConnEntry) -> Ctx<'a> {
        Ctx { conn: Some(conn), ..self }
    }
}
