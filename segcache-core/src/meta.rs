//! Per-shard metadata in the region: the free list, sequence numbers, flush state, the CAS
//! counter and the statistics counters (some bumped by readers).

use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::hashtable::bucket::Pool;

/// Counters that readers bump (under a shared lock), hence atomic. They are bumped with a plain
/// load and store rather than a locked add: exact for one reader at a time, approximate (a
/// concurrent increment can be lost) when threads read one shard at once, and no barrier on the
/// read path.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ReadCounters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Misses that found the key's item expired (memcached's `get_expired`).
    pub expired: AtomicU64,
    /// Misses that found the key's item flushed (memcached's `get_flushed`).
    pub flushed: AtomicU64,
}

/// Why a read that found its key's slot served nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    Expired,
    Flushed,
}

impl ReadCounters {
    /// Counts a miss; `gone` when the key was there but its item expired or was flushed.
    #[inline]
    pub fn miss(&self, gone: Option<Gone>) {
        bump(&self.misses);
        match gone {
            None => {}
            Some(Gone::Expired) => {
                bump(&self.expired);
            }
            Some(Gone::Flushed) => {
                bump(&self.flushed);
            }
        }
    }

    /// The counts: hits, misses, expired, flushed.
    pub fn totals(&self) -> [u64; 4] {
        use std::sync::atomic::Ordering::Relaxed;
        [&self.hits, &self.misses, &self.expired, &self.flushed].map(|c| c.load(Relaxed))
    }

    /// Adds counts that `totals` took elsewhere.
    pub fn add(&self, totals: [u64; 4]) {
        use std::sync::atomic::Ordering::Relaxed;
        for (c, n) in [&self.hits, &self.misses, &self.expired, &self.flushed].into_iter().zip(totals) {
            c.fetch_add(n, Relaxed);
        }
    }
}

/// Adds one to a read counter without a locked instruction (see `ReadCounters`); returns the
/// old value.
#[inline]
pub fn bump(counter: &AtomicU64) -> u64 {
    use std::sync::atomic::Ordering::Relaxed;
    let v = counter.load(Relaxed);
    counter.store(v.wrapping_add(1), Relaxed);
    v
}

/// Per-shard state that is not a table, a bucket or a header.
#[repr(C)]
#[derive(Debug)]
pub struct ShardMeta {
    pub free_head: u32,
    pub free_count: u32,
    pub spare: u32,
    /// Segments the shard may hold at once (`set_memory_limit`); 0: all of them. In the region,
    /// so that every process sharing the cache keeps one limit; reset at each open.
    pub segment_cap: u32,
    /// Overflow buckets handed out and given back.
    pub overflow: Pool,
    pub next_seq: u64,
    /// Segments with a sequence number up to this one were flushed (recovery skips them).
    pub flushed_below: u64,
    /// Everything stored before this time (Unix seconds) is gone from then on; 0 for none.
    pub flush_at: u32,
    pub last_expire: u32,
    /// Where `Merge`'s next search for a lossless pair starts, as a segment number.
    pub lossless_cursor: u32,
    pub merge_cursor: u32,
    /// The record being published while an older copy of its key is marked dead; recovery prefers
    /// it (see `persist`). `intent_seg == NONE` when no publish is in flight.
    pub intent_seg: u32,
    pub intent_offset: u32,
    pub rng: u64,
    /// The shard's CAS counter: the next item modified takes it (see `Segcache::next_cas`).
    /// Atomic because rewrites in place take it under the shard's read lock. Never reset, so
    /// CAS values keep increasing across flushes and warm restarts. On the line of the counters
    /// that every store writes (`items`, `bytes`), not the first, which lock-free readers read.
    pub next_cas: std::sync::atomic::AtomicU32,
    /// The identity of the flash tier file whose records describe this heap's flash slots, as
    /// its header names it (`tier::meta`); 0: none does, and no flash slot may be trusted.
    pub tier_id: u32,
    pub items: u64,
    pub bytes: u64,
    pub small_segments: u64,
    pub reads: ReadCounters,
    pub sets: u64,
    pub deletes: u64,
    pub evicted_items: u64,
    pub evicted_segments: u64,
    pub expired_items: u64,
    pub expired_segments: u64,
    pub merged_items: u64,
    pub flushes: u64,
    /// Items expired or evicted that no read had fetched since they were stored.
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    /// The rewrite in place in flight in a file heap, which crash recovery undoes.
    pub undo: Undo,
}

/// The largest record a file heap rewrites in place (see `engine::undo`); larger ones are
/// appended.
pub const UNDO_BYTES: usize = 512;

/// A file heap's rewrite in place in flight (see `engine::undo`): where, the record's old bytes
/// and its segment's checksum sum before the rewrite; `len == 0` when none is. Atomics, since
/// processes sharing the file rewrite under a shared reference.
#[repr(C)]
#[derive(Debug)]
pub struct Undo {
    pub len: AtomicU32,
    pub seg: AtomicU32,
    pub offset: AtomicU32,
    pub _pad: u32,
    pub sum: AtomicU64,
    pub bytes: [AtomicU64; UNDO_BYTES / 8],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cas_counter_is_off_the_line_that_lock_free_readers_read() {
        let line = |off: usize| off / 64;
        assert_eq!(line(std::mem::offset_of!(ShardMeta, flush_at)), 0);
        assert_eq!(line(std::mem::offset_of!(ShardMeta, last_expire)), 0);
        assert_eq!(line(std::mem::offset_of!(ShardMeta, next_cas)), line(std::mem::offset_of!(ShardMeta, items)));
        assert_ne!(line(std::mem::offset_of!(ShardMeta, next_cas)), 0);
    }
}
