//! What every thread of the server shares: the engine handle, the settings and the counters.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use segcache_core::SharedCache;

use crate::config::Settings;
use crate::protocol::Limits;
use crate::stats::{ConnStats, Totals, WorkerStats};

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
    started: Instant,
    started_unix: u64,
}

impl Shared {
    pub fn new(cache: SharedCache, settings: Settings) -> Shared {
        let workers = (0..settings.threads).map(|_| WorkerStats::default()).collect();
        let limits = Limits { max_item_size: settings.max_item_size, max_response: settings.max_reply_size };
        Shared {
            cache,
            limits,
            workers,
            conns: ConnStats::default(),
            stopping: Arc::new(AtomicBool::new(false)),
            verbosity: AtomicU32::new(0),
            started: Instant::now(),
            started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            settings,
        }
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
}

/// What a request needs to run: the shared state and the counters of the worker running it.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub stats: &'a WorkerStats,
}

impl<'a> Ctx<'a> {
    /// The context of worker `i`.
    pub fn new(shared: &'a Shared, i: usize) -> Ctx<'a> {
        Ctx { shared, stats: &shared.workers[i % shared.workers.len()] }
    }
}
