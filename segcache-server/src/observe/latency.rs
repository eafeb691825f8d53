//! Per-command latency histograms: log-linear buckets (8 per power of two, so a quantile read
//! from them is within 12.5% of the true value), one set per worker, written by that worker
//! alone with plain loads and stores (no atomic read-modify-write, no lock), summed on scrape.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The command groups timed apart (the `command` label of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `get`, `gets`, `mg`, binary GET/GETK.
    Get,
    /// `gat`, `gats`, binary GAT/GATK.
    Gat,
    /// `touch`, binary TOUCH.
    Touch,
    /// `set`, `ms`, binary SET.
    Set,
    Add,
    Replace,
    Cas,
    Append,
    Prepend,
    /// `delete`, `md`, binary DELETE.
    Delete,
    /// `incr`, `decr`, `ma`, binary INCREMENT/DECREMENT.
    IncrDecr,
    /// `flush_all`, binary FLUSH.
    FlushAll,
    /// Everything else: `stats`, `version`, `verbosity`, `me`, `mn`, the operator commands.
    Other,
}

impl Kind {
    /// Every kind, in label order.
    pub const ALL: [Kind; 13] = [
        Kind::Get,
        Kind::Gat,
        Kind::Touch,
        Kind::Set,
        Kind::Add,
        Kind::Replace,
        Kind::Cas,
        Kind::Append,
        Kind::Prepend,
        Kind::Delete,
        Kind::IncrDecr,
        Kind::FlushAll,
        Kind::Other,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::Gat => "gat",
            Kind::Touch => "touch",
            Kind::Set => "set",
            Kind::Add => "add",
            Kind::Replace => "replace",
            Kind::Cas => "cas",
            Kind::Append => "append",
            Kind::Prepend => "prepend",
            Kind::Delete => "delete",
            Kind::IncrDecr => "incr_decr",
            Kind::FlushAll => "flush_all",
            Kind::Other => "other",
        }
    }
}

/// Values below this have a bucket each.
const EXACT: usize = 16;
/// Buckets per power of two above `EXACT` (log2 of it: `SUB_BITS`).
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// The highest power of two with buckets of its own: 2^40 ns is about 18 minutes; longer
/// times go to the last bucket.
const TOP_EXP: usize = 40;
/// Buckets per histogram.
pub const BUCKETS: usize = EXACT + (TOP_EXP - 3) * SUB;

/// The bucket of `ns`.
#[inline]
pub fn bucket(ns: u64) -> usize {
    if ns < EXACT as u64 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize; // >= 4
    if e > TOP_EXP {
        return BUCKETS - 1;
    }
    let sub = ((ns >> (e - SUB_BITS as usize)) as usize) & (SUB - 1);
    EXACT + (e - 4) * SUB + sub
}

/// The smallest value of bucket `i`.
pub fn bucket_low(i: usize) -> u64 {
    if i < EXACT {
        return i as u64;
    }
    let e = 4 + (i - EXACT) / SUB;
    let sub = ((i - EXACT) % SUB) as u64;
    (SUB as u64 + sub) << (e - SUB_BITS as usize)
}

/// The largest value of bucket `i` (what a quantile reports: never below the true value).
pub fn bucket_high(i: usize) -> u64 {
    if i + 1 >= BUCKETS {
        bucket_low(i) * 2
    } else {
        bucket_low(i + 1) - 1
    }
}

/// One worker's histograms, one per [`Kind`].
#[derive(Debug)]
pub struct Histograms {
    counts: Box<[AtomicU64]>,
    sums: Box<[AtomicU64]>,
}

impl Default for Histograms {
    fn default() -> Self {
        Histograms {
            counts: (0..Kind::ALL.len() * BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sums: (0..Kind::ALL.len()).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// Adds one without a read-modify-write: only the owning worker writes (a second writer could
/// lose a count, never corrupt anything).
#[inline]
fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

impl Histograms {
    /// Records one request of `kind` that took `ns` nanoseconds.
    #[inline]
    pub fn record(&self, kind: Kind, ns: u64) {
        let k = kind as usize;
        add(&self.counts[k * BUCKETS + bucket(ns)], 1);
        add(&self.sums[k], ns);
    }

    /// Adds this worker's histograms into `into`.
    pub fn add_to(&self, into: &mut Merged) {
        for (k, m) in into.kinds.iter_mut().enumerate() {
            for (i, c) in m.counts.iter_mut().enumerate() {
                *c += self.counts[k * BUCKETS + i].load(Relaxed);
            }
            m.sum_ns += self.sums[k].load(Relaxed);
        }
    }
}

/// One kind's histogram, summed over the workers.
#[derive(Debug, Clone)]
pub struct Histogram {
    pub counts: Vec<u64>,
    pub sum_ns: u64,
}

impl Histogram {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The value at quantile `q` (0..=1), in nanoseconds: the top of the bucket holding it;
    /// 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_high(i);
            }
        }
        bucket_high(BUCKETS - 1)
    }
}

/// Every kind's histogram, summed over the workers.
#[derive(Debug, Clone)]
pub struct Merged {
    pub kinds: Vec<Histogram>,
}

impl Default for Merged {
    fn default() -> Self {
        Merged { kinds: Kind::ALL.iter().map(|_| Histogram { counts: vec![0; BUCKETS], sum_ns: 0 }).collect() }
    }
}

/// The quantiles exported (those the load harness reports).
pub const QUANTILES: [(f64, &str); 4] = [(0.5, "0.5"), (0.99, "0.99"), (0.999, "0.999"), (0.9999, "0.9999")];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(15), 15);
        assert_eq!(bucket(16), 16);
        let mut last = 0;
        for v in (0..1_000_000u64).chain([1 << 39, (1 << 41) - 1, 1 << 41, u64::MAX]) {
            let b = bucket(v);
            assert!(b >= last, "bucket order broke at {v}");
            assert!(b < BUCKETS);
            if b < BUCKETS - 1 {
                assert!(bucket_low(b) <= v && v <= bucket_high(b), "{v} outside bucket {b}");
            }
            last = b;
        }
        // Log-linear: a bucket is at most 1/8 of its lower bound wide.
        for i in EXACT..BUCKETS - 1 {
            assert!((bucket_high(i) - bucket_low(i) + 1) * 8 <= bucket_low(i), "bucket {i}");
            assert_eq!(bucket(bucket_low(i)), i);
            assert_eq!(bucket(bucket_high(i)), i);
        }
    }

    #[test]
    fn quantiles_from_merged_workers() {
        let (a, b) = (Histograms::default(), Histograms::default());
        // 990 fast gets (1 us) on one worker, 10 slow ones (1 ms) on the other.
        for _ in 0..990 {
            a.record(Kind::Get, 1_000);
        }
        for _ in 0..10 {
            b.record(Kind::Get, 1_000_000);
        }
        a.record(Kind::Set, 5);
        let mut m = Merged::default();
        a.add_to(&mut m);
        b.add_to(&mut m);
        let get = &m.kinds[Kind::Get as usize];
        assert_eq!(get.count(), 1000);
        assert_eq!(get.sum_ns, 990 * 1_000 + 10 * 1_000_000);
        let p50 = get.quantile(0.5);
        assert!((1_000..=1_125).contains(&p50), "p50 {p50}");
        assert!(get.quantile(0.99) < 1_200, "p99 is the 990th value: fast");
        let p999 = get.quantile(0.999);
        assert!((1_000_000..=1_125_000).contains(&p999), "p999 {p999}");
        assert_eq!(m.kinds[Kind::Set as usize].quantile(0.5), 5);
        assert_eq!(m.kinds[Kind::Delete as usize].quantile(0.5), 0);
    }
}
