//! A rate limit for one kind of repeated log line (a klog write failing on a full disk, an
//! accept failing while out of descriptors): at most one line per period, and the next line let
//! through says how many were held back since the last one. Without it a fault that hits every
//! request writes a warning for each, tens of thousands a second, and fills the disk the
//! operator needs to read them.
//!
//! Each kind has its own limiter, usually a `static` beside the code that logs:
//!
//! ```ignore
//! static ACCEPT_FAILED: RateLimit = RateLimit::per_second();
//! warn_limited!(ACCEPT_FAILED, "accept failed: {e}");
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lets through one event per period and counts the ones it holds back.
#[derive(Debug)]
pub struct RateLimit {
    period: Duration,
    state: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    /// When the last line was let through; `None` before the first.
    last: Option<Instant>,
    /// Events held back since then.
    suppressed: u64,
}

impl RateLimit {
    /// A limit of one line per `period`.
    pub const fn new(period: Duration) -> RateLimit {
        RateLimit { period, state: Mutex::new(Window { last: None, suppressed: 0 }) }
    }

    /// A limit of one line per second.
    pub const fn per_second() -> RateLimit {
        RateLimit::new(Duration::from_secs(1))
    }

    /// Whether an event now may be logged: `Some(n)` with the `n` events held back since the
    /// last one let through, or `None` (the event is counted) within the period.
    pub fn check(&self) -> Option<u64> {
        self.check_at(Instant::now())
    }

    /// [`RateLimit::check`] at time `now` (a test's clock).
    pub fn check_at(&self, now: Instant) -> Option<u64> {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match w.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                w.suppressed += 1;
                None
            }
            _ => {
                w.last = Some(now);
                Some(std::mem::take(&mut w.suppressed))
            }
        }
    }

    /// `Some(n)` when `n` (> 0) events were held back and a period has passed since the last line
    /// let through: a line saying so may be written now (and counts as the period's line), so a
    /// fault that stops does not leave its count unsaid until the next one.
    pub fn overdue(&self) -> Option<u64> {
        self.overdue_at(Instant::now())
    }

    /// [`RateLimit::overdue`] at time `now` (a test's clock).
    pub fn overdue_at(&self, now: Instant) -> Option<u64> {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let due = w.last.is_none_or(|last| now.saturating_duration_since(last) >= self.period);
        if w.suppressed == 0 || !due {
            return None;
        }
        w.last = Some(now);
        Some(std::mem::take(&mut w.suppressed))
    }

    /// Takes the count of events held back since the last one let through (for a last line when
    /// the thing that failed stops, so a count is never lost).
    pub fn take_suppressed(&self) -> u64 {
        std::mem::take(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).suppressed)
    }
}

/// The words appended to a line let through after `n` were held back (empty for none).
pub fn suppressed_note(n: u64) -> String {
    match n {
        0 => String::new(),
        1 => " (1 more like it suppressed)".to_string(),
        n => format!(" ({n} more like it suppressed)"),
    }
}

/// `log::warn!` through a [`RateLimit`]: the line is written when the limit lets it through,
/// with the count held back before it.
macro_rules! warn_limited {
    ($limit:expr, $($arg:tt)+) => {
        if let Some(n) = $limit.check() {
            log::warn!("{}{}", format_args!($($arg)+), $crate::ratelimit::suppressed_note(n))
        }
    };
}
pub(crate) use warn_limited;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_period_and_the_next_counts_the_rest() {
        let limit = RateLimit::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(limit.check_at(at(0)), Some(0), "the first line goes through");
        for ms in [1, 10, 500, 999] {
            assert_eq!(limit.check_at(at(ms)), None, "within the period at {ms} ms");
        }
        assert_eq!(limit.check_at(at(1000)), Some(4), "the next period's first line counts the four held back");
        assert_eq!(limit.check_at(at(1500)), None);
        assert_eq!(limit.overdue_at(at(1900)), None, "not before the period is over");
        assert_eq!(limit.overdue_at(at(2000)), Some(1), "then the count is due on its own");
        assert_eq!(limit.overdue_at(at(4000)), None, "nothing held back");
        assert_eq!(limit.check_at(at(2500)), None, "the overdue line was the period's line");
        assert_eq!(limit.take_suppressed(), 1);
        assert_eq!(limit.take_suppressed(), 0, "taken once");
        // A quiet spell: the next line goes through at once, with nothing held back.
        assert_eq!(limit.check_at(at(60_000)), Some(0));
        // A clock that seems to go back (another thread's earlier `now`) is within the period.
        assert_eq!(limit.check_at(at(59_000)), None);
    }

    #[test]
    fn a_flood_lets_through_one_line_per_period() {
        let limit = RateLimit::new(Duration::from_millis(100));
        let t0 = Instant::now();
        let (mut let_through, mut counted) = (0u64, 0u64);
        // 100,000 events over 10 s of the fake clock.
        for i in 0..100_000u64 {
            if let Some(n) = limit.check_at(t0 + Duration::from_micros(i * 100)) {
                let_through += 1;
                counted += n;
            }
        }
        assert_eq!(let_through, 100, "one per 100 ms over 10 s");
        assert_eq!(counted + let_through + limit.take_suppressed(), 100_000, "every event is either logged or counted");
    }

    #[test]
    fn the_note_names_the_count() {
        assert_eq!(suppressed_note(0), "");
        assert_eq!(suppressed_note(1), " (1 more like it suppressed)");
        assert_eq!(suppressed_note(16_816), " (16816 more like it suppressed)");
    }
}
