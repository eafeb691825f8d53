//! Counters and gauges, per engine and summed over the shards of a shared cache.
//!
//! The list of figures is written once, below: [`Stats`]' fields, their kinds and their help
//! texts all come from it, and every face reads it through [`Stats::figures`] (the server's
//! `stats` and Prometheus text, Python's `Cache.stats()`; C's `segcache_stats_t` is checked
//! against it).

use crate::eviction::policy::Policy;

/// What kind of number a figure is: how it is summed over shards and how exporters type it.
///
/// ```
/// use segcache_core::{Builder, FigureKind};
///
/// let cache = Builder::new().heap_size(4 << 20).build()?;
/// let stats = cache.stats();
/// let kind = |name: &str| stats.figures().find(|f| f.name == name).unwrap().kind;
/// assert_eq!(kind("get_hits"), FigureKind::Counter);
/// assert_eq!(kind("items"), FigureKind::Gauge);
/// assert_eq!(kind("segment_size"), FigureKind::Setting);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FigureKind {
    /// Only grows while the cache is open (Prometheus `counter`); summed over shards.
    Counter,
    /// Goes up and down (Prometheus `gauge`); summed over shards.
    Gauge,
    /// A setting, the same in every shard (Prometheus `gauge`); not summed.
    Setting,
}

/// One figure of a [`Stats`] snapshot.
///
/// ```
/// use std::time::Duration;
/// use segcache_core::Builder;
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// cache.set(b"k", b"v", 0, Duration::ZERO)?;
/// // Prometheus-style text, one line per figure.
/// let text: String = cache.stats().figures().map(|f| format!("segcache_{} {}\n", f.name, f.value)).collect();
/// assert!(text.contains("segcache_items 1\n"));
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure {
    /// The field's name, `snake_case` (also the key in Python and the C struct's field).
    pub name: &'static str,
    /// How it behaves.
    pub kind: FigureKind,
    /// One line saying what it counts.
    pub help: &'static str,
    /// Its value.
    pub value: u64,
}

macro_rules! figures {
    ($($(#[doc = $help:literal])+ $name:ident: $kind:ident,)+) => {
        /// A snapshot of the cache's counters (monotonic since start or reopen) and gauges.
        ///
        /// ```
        /// use std::time::Duration;
        /// use segcache_core::Builder;
        ///
        /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
        /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
        /// let stats = cache.stats();
        /// assert_eq!((stats.items, stats.sets, stats.evicted_items), (1, 1, 0));
        /// # Ok::<(), segcache_core::Error>(())
        /// ```
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Stats {
            $($(#[doc = $help])+ pub $name: u64,)+
            /// The eviction policy (configuration).
            pub policy: Policy,
        }

        impl Stats {
            /// Every figure but the policy, in a fixed order: name, kind, help and value.
            ///
            /// ```
            /// use segcache_core::Builder;
            ///
            /// let cache = Builder::new().heap_size(4 << 20).build()?;
            /// let names: Vec<&str> = cache.stats().figures().map(|f| f.name).collect();
            /// assert_eq!(names[..3], ["items", "bytes", "heap_bytes"]);
            /// assert!(cache.stats().figures().all(|f| !f.help.is_empty()));
            /// # Ok::<(), segcache_core::Error>(())
            /// ```
            pub fn figures(&self) -> impl Iterator<Item = Figure> + '_ {
                [$(Figure {
                    name: stringify!($name),
                    kind: FigureKind::$kind,
                    help: concat!($($help),+).trim_ascii(),
                    value: self.$name,
                },)+]
                .into_iter()
            }

            /// Adds another shard's figures to these: counters and gauges are summed, settings
            /// kept.
            ///
            /// ```
            /// use std::time::Duration;
            /// use segcache_core::{Builder, Stats};
            ///
            /// let mut shard = Builder::new().heap_size(4 << 20).build()?;
            /// shard.set(b"k", b"v", 0, Duration::ZERO)?;
            /// let mut total = Stats::default();
            /// total.merge(&shard.stats());
            /// total.merge(&shard.stats());
            /// assert_eq!((total.items, total.segment_size), (2, 1 << 20)); // gauges summed, settings kept
            /// # Ok::<(), segcache_core::Error>(())
            /// ```
            pub fn merge(&mut self, o: &Stats) {
                $(merge_one(FigureKind::$kind, &mut self.$name, o.$name);)+
                self.policy = o.policy;
            }
        }
    };
}

fn merge_one(kind: FigureKind, mine: &mut u64, other: u64) {
    match kind {
        FigureKind::Counter | FigureKind::Gauge => *mine += other,
        FigureKind::Setting => *mine = other,
    }
}

figures! {
    /// Live items; an item stored in chunks counts once.
    items: Gauge,
    /// Bytes of live items, headers included (a large item's chunks too).
    bytes: Gauge,
    /// Heap size in bytes.
    heap_bytes: Gauge,
    /// Segment size in bytes.
    segment_size: Setting,
    /// Segments in all.
    segments_total: Gauge,
    /// Free segments.
    segments_free: Gauge,
    /// Reads that found the key.
    get_hits: Counter,
    /// Reads that did not.
    get_misses: Counter,
    /// Misses that found the key's item expired (memcached's `get_expired`).
    get_expired: Counter,
    /// Misses that found the key's item flushed by `flush_all` (memcached's `get_flushed`).
    get_flushed: Counter,
    /// Successful writes of every kind (set, add, replace, cas, append, prepend, incr, decr).
    sets: Counter,
    /// Deletes that removed an item.
    deletes: Counter,
    /// Items removed by eviction.
    evicted_items: Counter,
    /// Segments evicted or merged away.
    evicted_segments: Counter,
    /// Items removed because they expired.
    expired_items: Counter,
    /// Items expired that no read had fetched since they were stored.
    expired_unfetched: Counter,
    /// Items evicted that no read had fetched since they were stored.
    evicted_unfetched: Counter,
    /// Whole segments freed by expiry.
    expired_segments: Counter,
    /// Items kept by merge eviction (copied into the merged segment).
    merged_items: Counter,
    /// Flushes that took effect.
    flushes: Counter,
    /// Overflow hash buckets taken from the pool (high-water mark; emptied ones are reused).
    overflow_buckets: Gauge,
    /// Number of shards (1 for a single-owner engine).
    shards: Gauge,
    /// Items on the flash tier.
    flash_items: Gauge,
    /// Items written to the flash tier by eviction.
    flash_demoted: Counter,
    /// Reads served from the flash tier.
    flash_hits: Counter,
    /// Reads of the flash tier that failed or did not check (torn, stale or corrupt): misses.
    flash_bad_reads: Counter,
    /// Flash segments reclaimed to make room for newer ones.
    flash_reclaimed_segments: Counter,
    /// Items that eviction would have written to the flash tier but dropped: the tier's write
    /// queue was full (the device was behind), or the write failed.
    flash_demotions_dropped: Counter,
    /// Bytes written to the flash tier: its segments' images, entries' heads included.
    flash_bytes_written: Counter,
    /// Bytes of the items that reads served from the flash tier (their records).
    flash_bytes_read: Counter,
    /// Items that reads on the flash tier brought back to DRAM (`Builder::tier_promote_after`).
    flash_promoted: Counter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_follow_the_fields() {
        let s = Stats { items: 3, sets: 7, segment_size: 1 << 20, ..Stats::default() };
        let f: Vec<Figure> = s.figures().collect();
        assert_eq!(f.len(), 31);
        assert_eq!((f[0].name, f[0].kind, f[0].value), ("items", FigureKind::Gauge, 3));
        let sets = f.iter().find(|x| x.name == "sets").unwrap();
        assert_eq!((sets.kind, sets.value), (FigureKind::Counter, 7));
        assert!(f.iter().all(|x| !x.help.is_empty() && !x.help.starts_with(' ')));
    }

    #[test]
    fn merge_sums_counters_and_keeps_settings() {
        let a = Stats { items: 2, get_hits: 5, segment_size: 1 << 20, shards: 1, ..Stats::default() };
        let mut sum = a.clone();
        sum.merge(&a);
        assert_eq!((sum.items, sum.get_hits, sum.segment_size, sum.shards), (4, 10, 1 << 20, 2));
    }
}
