//! Statistics and item counts.

use std::sync::atomic::Ordering::Relaxed;

use crate::Segcache;
use crate::Stats;

impl Segcache {
    /// The engine's counters and gauges.
    pub fn stats(&self) -> Stats {
        let m = self.meta();
        Stats {
            items: m.items,
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

    /// Live items (expired ones count until their segment is freed).
    pub fn len(&self) -> usize {
        self.meta().items as usize
    }

    /// Whether no item is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
