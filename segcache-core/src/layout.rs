//! The position-independent layout shared by anonymous and file-backed heaps.
//!
//! ```text
//! [file header: 4 KiB][shard 0 metadata]..[shard N-1 metadata][pad to 2 MiB]
//!     [shard 0 table]..[shard N-1 table][pad to 2 MiB][shard 0 heap]..[shard N-1 heap]
//! shard metadata = [ShardMeta][TTL buckets][segment headers]
//! shard table    = [primary buckets][overflow pool]
//! ```
//!
//! The tables sit together on 2 MiB boundaries so that huge pages back them: a lookup reads a
//! random bucket, and with 4 KiB pages it would pay a TLB miss on top of the cache miss.
//!
//! Everything is addressed by index (segment id, byte offset, bucket index), never by pointer, so
//! the same bytes mean the same thing wherever the region is mapped.

use std::sync::atomic::AtomicU64;

use crate::ttl;

pub const FILE_HEADER_LEN: usize = 4096;
pub const HUGE_PAGE: usize = 2 << 20;
/// Marks "no segment" in links.
pub const NONE: u32 = u32::MAX;

/// One cache line: slot 0 of a chain's head is the bucket info, the rest are item slots; slot 7
/// links to the next bucket when the chain goes on.
#[repr(C, align(64))]
pub struct Bucket {
    pub slots: [AtomicU64; 8],
}

/// Segment states.
pub const SEG_FREE: u8 = 0;
/// In a TTL chain and accepting appends.
pub const SEG_OPEN: u8 = 1;
/// In a TTL chain, full or superseded: a candidate for eviction.
pub const SEG_SEALED: u8 = 2;
/// Held back as the destination of the next merge or promotion.
pub const SEG_SPARE: u8 = 3;

/// S3-FIFO pools (other policies use `POOL_MAIN` only).
pub const POOL_MAIN: u8 = 0;
pub const POOL_SMALL: u8 = 1;

/// A segment's header, kept outside the heap so that scanning headers touches no item memory.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SegHeader {
    /// Allocation sequence number, increasing per shard: the newest copy of a key wins at recovery.
    pub seq: u64,
    /// Wrapping sum of the checksums of the records written (see `record::checksum`): lets a
    /// crash-recovery scan verify a segment that was still being written.
    pub sum: u64,
    /// XXH3 of the written bytes, taken at graceful close: a reopen verifies a segment at memory
    /// speed instead of record by record.
    pub close_sum: u64,
    pub write_offset: u32,
    pub live_bytes: u32,
    pub live_items: u32,
    pub create_at: u32,
    /// Absolute expiry (Unix seconds) of the earliest-expiring item; 0 for never.
    pub expire_at: u32,
    pub prev: u32,
    pub next: u32,
    pub ttl_bucket: u16,
    pub state: u8,
    pub pool: u8,
}

impl SegHeader {
    pub const EMPTY: SegHeader = SegHeader {
        seq: 0,
        sum: 0,
        close_sum: 0,
        write_offset: 0,
        live_bytes: 0,
        live_items: 0,
        create_at: 0,
        expire_at: 0,
        prev: NONE,
        next: NONE,
        ttl_bucket: 0,
        state: SEG_FREE,
        pool: POOL_MAIN,
    };
}

/// A TTL bucket: the chain of segments (oldest at head) and the open segment of each pool.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TtlBucket {
    pub head: u32,
    pub tail: u32,
    pub open: [u32; 2],
    pub segments: u32,
    /// Where `Merge` goes on in this chain: the segment after the last merge's sources (a hint,
    /// checked before use; `NONE`: start at the head).
    pub merge_next: u32,
}

impl TtlBucket {
    pub const EMPTY: TtlBucket = TtlBucket { head: NONE, tail: NONE, open: [NONE; 2], segments: 0, merge_next: NONE };
}

/// Counters that readers bump (under a shared lock), hence atomic. They are bumped with a plain
/// load and store rather than a locked add: exact for one reader at a time, approximate (a
/// concurrent increment can be lost) when threads read one shard at once, and no barrier on the
/// read path.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ReadCounters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
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
    pub _reserved: u32,
    /// Overflow buckets handed out and given back.
    pub overflow: crate::hashtable::table::Pool,
    pub next_seq: u64,
    /// Segments with a sequence number up to this one were flushed (recovery skips them).
    pub flushed_below: u64,
    /// Everything stored before this time (Unix seconds) is gone from then on; 0 for none.
    pub flush_at: u32,
    pub last_expire: u32,
    pub _reserved2: u32,
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
    pub _pad: u32,
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
}

/// Sizes of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub hash_power: u8,
    pub segment_size: usize,
    pub segments: usize,
}

impl Geometry {
    pub fn primary_buckets(&self) -> usize {
        1 << self.hash_power
    }
    /// The overflow pool: as many buckets as the primary table. Pages of it are touched only as
    /// chains grow, so the pool costs address space, not memory.
    pub fn overflow_buckets(&self) -> usize {
        self.primary_buckets()
    }
    pub fn ttl_offset(&self) -> usize {
        round_up(std::mem::size_of::<ShardMeta>(), 64)
    }
    pub fn segs_offset(&self) -> usize {
        self.ttl_offset() + ttl::BUCKETS * std::mem::size_of::<TtlBucket>()
    }
    /// Bytes of one shard's metadata (without its table), a multiple of the page size.
    pub fn meta_len(&self) -> usize {
        round_up(self.segs_offset() + self.segments * std::mem::size_of::<SegHeader>(), 4096)
    }
    /// Bytes of one shard's hash table: primary buckets, then the overflow pool.
    pub fn table_len(&self) -> usize {
        (self.primary_buckets() + self.overflow_buckets()) * std::mem::size_of::<Bucket>()
    }
    pub fn heap_len(&self) -> usize {
        self.segments * self.segment_size
    }
}

/// Where each part of a whole region (all shards) lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub geometry: Geometry,
    pub shards: usize,
}

impl Layout {
    pub fn meta_start(&self, shard: usize) -> usize {
        FILE_HEADER_LEN + shard * self.geometry.meta_len()
    }
    pub fn metas_end(&self) -> usize {
        self.meta_start(self.shards)
    }
    /// Where shard `shard`'s table starts: 2 MiB-aligned for the first, and for every shard
    /// whose table is a multiple of 2 MiB.
    pub fn table_start(&self, shard: usize) -> usize {
        round_up(self.metas_end(), HUGE_PAGE) + shard * self.geometry.table_len()
    }
    pub fn heap_start(&self, shard: usize) -> usize {
        round_up(self.table_start(self.shards), HUGE_PAGE) + shard * self.geometry.heap_len()
    }
    pub fn total_len(&self) -> usize {
        self.heap_start(self.shards)
    }
}

pub fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// The default hash power: enough primary buckets for the shard's heap of ~100-byte items at
/// about 85% slot load (7 slots a bucket).
pub fn default_hash_power(shard_heap: usize) -> u8 {
    let items = shard_heap / 96;
    let buckets = (items / 6).max(16);
    (usize::BITS - (buckets - 1).leading_zeros()).clamp(4, 32) as u8
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

    #[test]
    fn struct_sizes_are_what_the_format_assumes() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::size_of::<SegHeader>(), 56);
        assert_eq!(std::mem::size_of::<TtlBucket>(), 24);
    }

    #[test]
    fn regions_do_not_overlap_and_tables_and_heaps_are_huge_page_aligned() {
        for hash_power in [10, 15, 16] {
            let g = Geometry { hash_power, segment_size: 1 << 20, segments: 8 };
            let l = Layout { geometry: g, shards: 4 };
            assert!(g.meta_len() >= g.segs_offset() + 8 * 56);
            assert_eq!(l.meta_start(1) - l.meta_start(0), g.meta_len());
            assert!(l.table_start(0) >= l.metas_end());
            assert_eq!(l.table_start(0) % HUGE_PAGE, 0);
            assert_eq!(l.table_start(1) - l.table_start(0), g.table_len());
            if g.primary_buckets() * 64 >= HUGE_PAGE {
                // Every primary table and overflow pool fills whole huge pages of its own.
                assert!((0..4).all(|i| l.table_start(i).is_multiple_of(HUGE_PAGE)));
            }
            assert_eq!(l.heap_start(0) % HUGE_PAGE, 0);
            assert!(l.heap_start(0) >= l.table_start(4));
            assert_eq!(l.total_len(), l.heap_start(0) + 4 * 8 * (1 << 20));
        }
    }

    #[test]
    fn default_hash_power_scales_with_heap() {
        assert_eq!(default_hash_power(256 << 20), 19);
        assert!(default_hash_power(1 << 20) >= 4);
        assert!(default_hash_power(64 << 20) < default_hash_power(256 << 20));
    }
}
