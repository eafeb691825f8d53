//! Statistics and item counts.

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::Segcache;
use crate::stats::Stats;

impl Segcache {
    /// The engine's counters and gauges.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.get(b"k");
    /// cache.get(b"absent");
    /// let stats = cache.stats();
    /// assert_eq!((stats.items, stats.sets, stats.get_hits, stats.get_misses), (1, 1, 1, 1));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let m = self.meta();
        Stats {
            items: self.len() as u64,
            bytes: m.bytes,
            heap_bytes: self.geo.heap_len() as u64,
            segment_size: self.geo.segment_size as u64,
            segments_total: self.geo.segments as u64,
            segments_free: u64::from(m.free_count),
            get_hits: m.reads.hits.load(Relaxed),
            get_misses: m.reads.misses.load(Relaxed),
            get_expired: m.reads.expired.load(Relaxed),
            get_flushed: m.reads.flushed.load(Relaxed),
            sets: m.sets,
            deletes: m.deletes,
            evicted_items: m.evicted_items,
            evicted_segments: m.evicted_segments,
            expired_items: m.expired_items,
            expired_unfetched: m.expired_unfetched,
            evicted_unfetched: m.evicted_unfetched,
            expired_segments: m.expired_segments,
            merged_items: m.merged_items,
            flash_items: self.tier.as_deref().map_or(0, |t| t.items()),
            flash_demoted: self.tier.as_deref().map_or(0, |t| t.counts.demoted),
            flash_hits: self.tier.as_deref().map_or(0, |t| t.counts.hits.load(Relaxed)),
            flash_bad_reads: self.tier.as_deref().map_or(0, |t| t.counts.bad_reads.load(Relaxed)),
            flash_reclaimed_segments: self.tier.as_deref().map_or(0, |t| t.counts.reclaimed),
            flash_demotions_dropped: self.tier.as_deref().map_or(0, |t| t.counts.demotions_dropped),
            flash_bytes_written: self.tier.as_deref().map_or(0, |t| t.counts.bytes_written),
            flash_bytes_read: self.tier.as_deref().map_or(0, |t| t.counts.bytes_read.load(Relaxed)),
            flash_promoted: self.tier.as_deref().map_or(0, |t| t.counts.promoted),
            flushes: m.flushes,
            overflow_buckets: u64::from(m.overflow.used),
            shards: 1,
            policy: self.policy,
        }
    }

    /// Adds reads and stores counted elsewhere (in `SharedCache`'s reader slots) to this shard's
    /// counters.
    pub(crate) fn count_slots(&mut self, reads: [u64; 4], sets: u64) {
        self.meta().reads.add(reads);
        self.meta_mut().sets += sets;
    }

    /// Live items (expired ones count until their segment is freed). A large item counts once:
    /// its chunks are records, not items.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"a", b"1", 0, Duration::ZERO)?;
    /// cache.set(b"b", b"2", 0, Duration::ZERO)?;
    /// cache.set(b"a", b"3", 0, Duration::ZERO)?;
    /// assert_eq!(cache.len(), 2);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.meta().items.saturating_sub(self.large.chunks) as usize
    }

    /// Whether no item is live.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// assert!(cache.is_empty());
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// assert!(!cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
