//! The open-loop send schedule: request `i` is due at `start + (i + phase) / rate`.
//!
//! The schedule never looks at replies. If the client falls behind (a slow server, a full
//! pipeline), due requests queue up and their latency still counts from the due time.

use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Schedule {
    start: Instant,
    /// Nanoseconds between sends.
    period_ns: f64,
    /// Fraction of a period this schedule is offset by (threads interleave their sends).
    phase: f64,
    next: u64,
}

impl Schedule {
    /// A schedule of `rate` requests per second; `phase` in `[0, 1)` shifts it by that
    /// fraction of a period so that `n` threads at `rate / n` interleave evenly.
    pub fn new(start: Instant, rate: f64, phase: f64) -> Self {
        assert!(rate > 0.0 && rate.is_finite(), "rate must be positive");
        Schedule { start, period_ns: 1e9 / rate, phase: phase.clamp(0.0, 1.0), next: 0 }
    }

    /// Due time of request `i`.
    pub fn due(&self, i: u64) -> Instant {
        self.start + Duration::from_nanos(((i as f64 + self.phase) * self.period_ns) as u64)
    }

    /// Due time of the next request not yet taken.
    pub fn next_due(&self) -> Instant {
        self.due(self.next)
    }

    /// Takes the next request if it is due at or before `now`, returning its due time.
    pub fn take_due(&mut self, now: Instant) -> Option<Instant> {
        let t = self.next_due();
        if t <= now {
            self.next += 1;
            Some(t)
        } else {
            None
        }
    }

    /// Requests taken so far.
    pub fn taken(&self) -> u64 {
        self.next
    }

    /// Splits a total rate over `threads` interleaved schedules.
    pub fn split(start: Instant, total_rate: f64, threads: usize) -> Vec<Schedule> {
        let per = total_rate / threads as f64;
        (0..threads).map(|t| Schedule::new(start, per, t as f64 / threads as f64)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_are_evenly_spaced() {
        let s0 = Instant::now();
        let s = Schedule::new(s0, 1000.0, 0.0);
        assert_eq!(s.due(0), s0);
        assert_eq!(s.due(1) - s0, Duration::from_millis(1));
        assert_eq!(s.due(1000) - s0, Duration::from_secs(1));
    }

    #[test]
    fn take_due_releases_exactly_the_due_requests() {
        let s0 = Instant::now();
        let mut s = Schedule::new(s0, 10_000.0, 0.0);
        // At 10k/s, 2.5 ms after start requests 0..=25 are due (26 requests).
        let now = s0 + Duration::from_micros(2500);
        let mut n = 0;
        while let Some(t) = s.take_due(now) {
            assert!(t <= now);
            n += 1;
        }
        assert_eq!(n, 26);
        assert!(s.next_due() > now);
        // Falling behind never loses requests: a late caller gets all of them, with their own due times.
        let later = s0 + Duration::from_millis(100);
        let mut dues = Vec::new();
        while let Some(t) = s.take_due(later) {
            dues.push(t);
        }
        assert_eq!(s.taken(), 1001);
        assert_eq!(dues[0] - s0, Duration::from_micros(2600));
    }

    #[test]
    fn split_schedules_interleave_to_the_total_rate() {
        let s0 = Instant::now();
        let mut parts = Schedule::split(s0, 30_000.0, 3);
        let end = s0 + Duration::from_secs(1);
        let mut all = Vec::new();
        for p in parts.iter_mut() {
            while let Some(t) = p.take_due(end - Duration::from_nanos(1)) {
                all.push(t);
            }
        }
        assert_eq!(all.len(), 30_000);
        all.sort();
        // Merged, the three schedules are one even schedule at 30k/s (33.3 us apart).
        for w in all.windows(2) {
            let gap = (w[1] - w[0]).as_nanos() as i64;
            assert!((gap - 33_333).abs() <= 2, "gap {gap}");
        }
    }

    #[test]
    fn fractional_rates_do_not_drift() {
        let s0 = Instant::now();
        let s = Schedule::new(s0, 3.0, 0.0);
        // 3 per second: request 3_000_000 is due at exactly 1_000_000 s.
        let d = s.due(3_000_000) - s0;
        assert!((d.as_secs_f64() - 1_000_000.0).abs() < 1e-3);
    }
}
