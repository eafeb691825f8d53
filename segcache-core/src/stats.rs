//! Counters and gauges, per engine and summed over the shards of a shared cache.

use crate::Policy;

/// A snapshot of the cache's counters (monotonic since start or reopen) and gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Live items (gauge).
    pub items: u64,
    /// Bytes of live items, headers included (gauge).
    pub bytes: u64,
    /// Heap size in bytes (configuration).
    pub heap_bytes: u64,
    /// Segment size in bytes (configuration).
    pub segment_size: u64,
    /// Segments in all (gauge).
    pub segments_total: u64,
    /// Segments free (gauge).
    pub segments_free: u64,
    /// Reads that found the key.
    pub get_hits: u64,
    /// Reads that did not.
    pub get_misses: u64,
    /// Successful writes of every kind (set, add, replace, cas, append, prepend, incr, decr).
    pub sets: u64,
    /// Deletes that removed an item.
    pub deletes: u64,
    /// Items removed by eviction.
    pub evicted_items: u64,
    /// Segments evicted or merged away.
    pub evicted_segments: u64,
    /// Items removed because they expired.
    pub expired_items: u64,
    /// Whole segments freed by expiry.
    pub expired_segments: u64,
    /// Items kept by merge eviction (copied into the merged segment).
    pub merged_items: u64,
    /// `flush` calls that took effect.
    pub flushes: u64,
    /// Overflow hash buckets taken from the pool (high-water mark; emptied ones are reused).
    pub overflow_buckets: u64,
    /// Number of shards (1 for a single-owner engine).
    pub shards: u64,
    /// The eviction policy (configuration).
    pub policy: Policy,
}

impl Stats {
    /// Adds another shard's figures to these (configuration fields are summed where they are
    /// sizes and kept where they are settings).
    pub fn merge(&mut self, o: &Stats) {
        self.items += o.items;
        self.bytes += o.bytes;
        self.heap_bytes += o.heap_bytes;
        self.segment_size = o.segment_size;
        self.segments_total += o.segments_total;
        self.segments_free += o.segments_free;
        self.get_hits += o.get_hits;
        self.get_misses += o.get_misses;
        self.sets += o.sets;
        self.deletes += o.deletes;
        self.evicted_items += o.evicted_items;
        self.evicted_segments += o.evicted_segments;
        self.expired_items += o.expired_items;
        self.expired_segments += o.expired_segments;
        self.merged_items += o.merged_items;
        self.flushes += o.flushes;
        self.overflow_buckets += o.overflow_buckets;
        self.shards += o.shards;
        self.policy = o.policy;
    }
}
