//! Time, in whole seconds of Unix time: TTLs and expiry are kept at one-second resolution, as in
//! memcached, and expiry times are absolute so that they survive a restart.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time, in seconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Seconds since the Unix epoch.
    fn now(&self) -> u32;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> u32 {
        u32::try_from(unix_seconds()).unwrap_or(u32::MAX)
    }
}

/// Whole seconds of Unix time. On Linux the coarse clock answers from the vDSO in a few
/// nanoseconds (every operation reads the time), and its few milliseconds of lag do not matter at
/// one-second resolution.
#[cfg(target_os = "linux")]
#[inline]
fn unix_seconds() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_REALTIME_COARSE always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc == 0 {
        ts.tv_sec as u64
    } else {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
    }
}

#[cfg(not(target_os = "linux"))]
#[inline]
fn unix_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
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

    /// Moves the clock forward by `secs`, stopping at `u32::MAX` (a wrap would take it back
    /// to 1970 and bring expired items back).
    pub fn advance(&self, secs: u32) {
        let _ = self.now.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| Some(t.saturating_add(secs)));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_saturates_instead_of_wrapping() {
        let c = ManualClock::new(u32::MAX - 5);
        c.advance(3);
        assert_eq!(c.now(), u32::MAX - 2);
        c.advance(10);
        assert_eq!(c.now(), u32::MAX);
        c.advance(u32::MAX);
        assert_eq!(c.now(), u32::MAX);
    }
}
