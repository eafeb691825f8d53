//! HDR histograms of nanoseconds and their percentile summaries.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency recorded exactly (60 s); larger values saturate there.
pub const MAX_NS: u64 = 60_000_000_000;

/// A histogram of nanoseconds with 3 significant digits (0.1% resolution).
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_NS, 3).expect("static histogram bounds are valid")
}

/// Records `ns`, clamping into the histogram's range so nothing is dropped.
pub fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1, MAX_NS));
}

/// Percentiles in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
}

impl Percentiles {
    /// The markdown cells "p50 | p99 | p99.9 | p99.99", in milliseconds, that every table shows.
    pub fn tail_cells_ms(&self) -> String {
        format!(
            "{:.3} | {:.3} | {:.3} | {:.3}",
            self.p50_us / 1000.0,
            self.p99_us / 1000.0,
            self.p999_us / 1000.0,
            self.p9999_us / 1000.0
        )
    }
}

pub fn summarize(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    Percentiles {
        count: h.len(),
        mean_us: h.mean() / 1000.0,
        p50_us: us(h.value_at_quantile(0.5)),
        p90_us: us(h.value_at_quantile(0.9)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        p9999_us: us(h.value_at_quantile(0.9999)),
        max_us: us(h.max()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = new_hist();
        // 1..=100_000 us, one sample each: the q-quantile is q * 100_000 us.
        for us in 1..=100_000u64 {
            record(&mut h, us * 1000);
        }
        let p = summarize(&h);
        let close = |got: f64, want: f64| (got - want).abs() / want < 0.002;
        assert_eq!(p.count, 100_000);
        assert!(close(p.p50_us, 50_000.0), "{p:?}");
        assert!(close(p.p90_us, 90_000.0), "{p:?}");
        assert!(close(p.p99_us, 99_000.0), "{p:?}");
        assert!(close(p.p999_us, 99_900.0), "{p:?}");
        assert!(close(p.p9999_us, 99_990.0), "{p:?}");
        assert!(close(p.max_us, 100_000.0), "{p:?}");
        assert!(close(p.mean_us, 50_000.5), "{p:?}");
    }

    #[test]
    fn tail_of_a_bimodal_distribution() {
        let mut h = new_hist();
        // 99.8% at 100 us, 0.2% at 5 ms: p99 sees the fast mode, p99.9 the slow one.
        for i in 0..100_000u64 {
            record(&mut h, if i % 500 == 0 { 5_000_000 } else { 100_000 });
        }
        let p = summarize(&h);
        assert!((p.p99_us - 100.0).abs() < 0.5, "{p:?}");
        assert!((p.p999_us - 5000.0).abs() < 5.0, "{p:?}");
    }

    #[test]
    fn out_of_range_values_saturate_instead_of_vanishing() {
        let mut h = new_hist();
        record(&mut h, 0);
        record(&mut h, u64::MAX);
        assert_eq!(h.len(), 2);
        assert!(summarize(&h).max_us >= 59_000_000.0);
        assert_eq!(summarize(&new_hist()), Percentiles::default());
    }
}
