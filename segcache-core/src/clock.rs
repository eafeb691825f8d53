//! Time, in whole seconds of Unix time: TTLs and expiry are kept at one-second resolution, as in
//! memcached, and expiry times are absolute so that they survive a restart.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time, in seconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> u32;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u32 {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        u32::try_from(secs).unwrap_or(u32::MAX)
    }
}

/// A clock that moves only when told to; share it with the cache through `Arc`.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicU32,
}

impl ManualClock {
    /// A clock standing at `now` (seconds since the epoch).
    pub fn new(now: u32) -> Arc<Self> {
        Arc::new(Self { now: AtomicU32::new(now) })
    }

    /// Moves the clock forward by `secs`.
    pub fn advance(&self, secs: u32) {
        self.now.fetch_add(secs, Ordering::Relaxed);
    }

    /// Sets the clock to `now`.
    pub fn set(&self, now: u32) {
        self.now.store(now, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u32 {
        self.now.load(Ordering::Relaxed)
    }
}
