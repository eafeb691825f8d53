//! Time, in whole seconds of Unix time: TTLs and expiry are kept at one-second resolution, as in
//! memcached, and expiry times are absolute so that they survive a restart.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time, in seconds since the Unix epoch.
///
/// ```
/// use std::sync::Arc;
/// use segcache_core::{Builder, Clock};
///
/// /// A clock that stands still.
/// #[derive(Debug)]
/// struct Frozen(u32);
///
/// impl Clock for Frozen {
///     fn now(&self) -> u32 {
///         self.0
///     }
/// }
///
/// let cache = Builder::new().heap_size(4 << 20).clock(Arc::new(Frozen(1_700_000_000))).build()?;
/// assert_eq!(cache.now(), 1_700_000_000);
/// # Ok::<(), segcache_core::Error>(())
/// ```
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Seconds since the Unix epoch.
    ///
    /// ```
    /// use segcache_core::{Clock, ManualClock, SystemClock};
    /// assert!(SystemClock.now() > 1_600_000_000);
    /// assert_eq!(ManualClock::new(42).now(), 42);
    /// ```
    fn now(&self) -> u32;

    /// Whether this is [`SystemClock`], which the read paths then call directly rather than
    /// through the trait object.
    #[doc(hidden)]
    fn is_system(&self) -> bool {
        false
    }
}

/// The system's wall clock.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{SystemTime, UNIX_EPOCH};
/// use segcache_core::{Builder, SystemClock};
///
/// let cache = Builder::new().heap_size(4 << 20).clock(Arc::new(SystemClock)).build()?;
/// let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
/// assert!(u64::from(cache.now()).abs_diff(wall) <= 2);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> u32 {
        system_now()
    }

    fn is_system(&self) -> bool {
        true
    }
}

/// [`SystemClock`]'s time, for callers that know their clock is it (`Clock::is_system`).
#[inline]
pub(crate) fn system_now() -> u32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as in `unix_seconds`.
        let t = unsafe { libc::time(std::ptr::null_mut()) };
        // Every operation reads the clock: one unsigned comparison takes any time that `u32`
        // holds, and sends the rest (an error's -1 among them) the long way.
        if let Ok(s) = u32::try_from(t) {
            return s;
        }
    }
    system_now_slow()
}

/// `system_now` for a time past `u32`, or when the coarse clock failed.
#[cold]
#[inline(never)]
fn system_now_slow() -> u32 {
    u32::try_from(unix_seconds()).unwrap_or(u32::MAX)
}

/// Whole seconds of Unix time. On Linux `time` reads the coarse clock's seconds (x86-64's vDSO
/// has a call for it alone, elsewhere glibc asks `CLOCK_REALTIME_COARSE`), in a few
/// nanoseconds: every operation reads the time, and the coarse clock's few milliseconds of lag
/// do not matter at one-second resolution. It is the seconds field of `clock_gettime`'s
/// coarse clock without the nanoseconds, which nothing here needs.
#[cfg(target_os = "linux")]
#[inline]
fn unix_seconds() -> u64 {
    // SAFETY: with a null pointer `time` only returns the time; it fails for no other reason.
    let t = unsafe { libc::time(std::ptr::null_mut()) };
    if t >= 0 {
        t as u64
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
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, ManualClock};
///
/// let clock = ManualClock::new(1_000);
/// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
/// cache.set(b"k", b"v", 0, Duration::from_secs(10))?;
/// assert!(cache.get(b"k").is_some());
/// clock.advance(10);
/// assert!(cache.get(b"k").is_none()); // an item never outlives its TTL
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicU32,
}

impl ManualClock {
    /// A clock standing at `now` (seconds since the epoch).
    ///
    /// ```
    /// use segcache_core::{Clock, ManualClock};
    /// let clock = ManualClock::new(1_700_000_000);
    /// assert_eq!(clock.now(), 1_700_000_000);
    /// ```
    pub fn new(now: u32) -> Arc<Self> {
        Arc::new(Self { now: AtomicU32::new(now) })
    }

    /// Moves the clock forward by `secs`, stopping at `u32::MAX` (a wrap would take it back
    /// to 1970 and bring expired items back).
    ///
    /// ```
    /// use segcache_core::{Clock, ManualClock};
    /// let clock = ManualClock::new(100);
    /// clock.advance(5);
    /// assert_eq!(clock.now(), 105);
    /// clock.advance(u32::MAX);
    /// assert_eq!(clock.now(), u32::MAX);
    /// ```
    pub fn advance(&self, secs: u32) {
        let _ = self.now.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| Some(t.saturating_add(secs)));
    }

    /// Sets the clock to `now`.
    ///
    /// ```
    /// use segcache_core::{Clock, ManualClock};
    /// let clock = ManualClock::new(100);
    /// clock.set(50);
    /// assert_eq!(clock.now(), 50);
    /// ```
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

    /// `SystemClock` reads the same seconds as the coarse realtime clock it stands for, and says
    /// it is the system clock (the read paths call it directly then); other clocks do not.
    #[test]
    fn the_system_clock_is_the_coarse_realtime_clock() {
        for _ in 0..1000 {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: a valid, writable timespec.
            assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) }, 0);
            let ours = SystemClock.now();
            // The fast path and the long way read the same clock.
            let (fast, slow) = (system_now(), system_now_slow());
            let mut after = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: as above.
            assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut after) }, 0);
            assert!(ts.tv_sec as u32 <= ours && ours <= after.tv_sec as u32, "{} {ours} {}", ts.tv_sec, after.tv_sec);
            for t in [fast, slow] {
                assert!(ts.tv_sec as u32 <= t && t <= after.tv_sec as u32, "{} {t} {}", ts.tv_sec, after.tv_sec);
            }
        }
        assert!(SystemClock.is_system() && system_now() >= SystemClock.now());
        assert!(!ManualClock::new(5).is_system());
    }

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
