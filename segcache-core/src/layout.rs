//! The position-independent layout shared by anonymous and file-backed heaps.
//!
//! ```text
//! [file header: 4 KiB][shard 0 lock]..[shard N-1 lock][shard 0 reader slots]..[shard N-1 reader slots]
//!     [shard 0 metadata]..[shard N-1 metadata][shard 0 tag summary]..[shard N-1 tag summary]
//!     [shard 0 ghost]..[shard N-1 ghost][pad to 2 MiB]
//!     [shard 0 table]..[shard N-1 table][pad to 2 MiB][shard 0 heap]..[shard N-1 heap]
//! shard metadata = [ShardMeta][TTL buckets][segment headers]
//! shard table    = [primary buckets][overflow pool]
//! ```
//!
//! The locks, reader slots, tag summaries and S3-FIFO ghosts coordinate the processes that share a
//! cache (`Builder::multi_process`): they live in the mapping so that every process sees the same
//! ones. They carry nothing a restart needs (the first process to open the file sets them up), so
//! no checksum covers them. Pages of them that no process touches (a ghost under another policy)
//! cost no memory.
//!
//! The tables sit together on 2 MiB boundaries so that huge pages back them: a lookup reads a
//! random bucket, and with 4 KiB pages it would pay a TLB miss on top of the cache miss.
//!
//! Everything is addressed by index (segment id, byte offset, bucket index), never by pointer, so
//! the same bytes mean the same thing wherever the region is mapped.

use crate::hashtable::bucket::Bucket;
use crate::meta::ShardMeta;
use crate::segments::header::SegHeader;
use crate::sync::lock::ReaderSlot;
use crate::sync::mapped::MappedLock;
use crate::ttl_buckets::bucket::TtlBucket;
use crate::ttl_buckets::ttl;

pub const FILE_HEADER_LEN: usize = 4096;
pub const HUGE_PAGE: usize = 2 << 20;
/// Reader slots per shard in the mapping, for processes that share a cache: threads of every
/// process count their reads there (see `ShardLock`).
pub const MAPPED_SLOTS: usize = 64;
/// Sizes of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub hash_power: u8,
    pub segment_size: usize,
    pub segments: usize,
}

/// Whole segments of `segment_size` bytes that each of `shards` shards gets from a heap of
/// `heap_size` bytes (what `Builder` builds; the rest of the heap is not used).
pub fn segments_per_shard(heap_size: usize, shards: usize, segment_size: usize) -> usize {
    heap_size / shards / segment_size
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
    /// Bytes of one shard's tag summary (one byte per primary bucket), rounded to a cache line.
    pub fn summary_len(&self) -> usize {
        round_up(self.primary_buckets(), 64)
    }
    /// Entries of one shard's S3-FIFO ghost (a fingerprint each): about one per ten items of
    /// 64 bytes the heap holds, a power of two.
    pub fn ghost_entries(&self) -> usize {
        (self.segments * self.segment_size / 10 / 64).next_power_of_two().max(64)
    }
}

/// Where each part of a whole region (all shards) lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub geometry: Geometry,
    pub shards: usize,
}

impl Layout {
    /// Where shard `shard`'s lock lies (one cache-line pair each).
    pub fn lock_start(&self, shard: usize) -> usize {
        FILE_HEADER_LEN + shard * std::mem::size_of::<MappedLock>()
    }
    /// Where shard `shard`'s reader slots lie.
    pub fn slots_start(&self, shard: usize) -> usize {
        round_up(self.lock_start(self.shards), 4096) + shard * MAPPED_SLOTS * std::mem::size_of::<ReaderSlot>()
    }
    pub fn meta_start(&self, shard: usize) -> usize {
        round_up(self.slots_start(self.shards), 4096) + shard * self.geometry.meta_len()
    }
    pub fn metas_end(&self) -> usize {
        self.meta_start(self.shards)
    }
    /// Where shard `shard`'s tag summary lies.
    pub fn summary_start(&self, shard: usize) -> usize {
        self.metas_end() + shard * self.geometry.summary_len()
    }
    /// Where shard `shard`'s S3-FIFO ghost lies.
    pub fn ghost_start(&self, shard: usize) -> usize {
        round_up(self.summary_start(self.shards), 4096) + shard * self.geometry.ghost_entries() * 4
    }
    /// Where shard `shard`'s table starts: 2 MiB-aligned for the first, and for every shard
    /// whose table is a multiple of 2 MiB.
    pub fn table_start(&self, shard: usize) -> usize {
        round_up(self.ghost_start(self.shards), HUGE_PAGE) + shard * self.geometry.table_len()
    }
    pub fn heap_start(&self, shard: usize) -> usize {
        round_up(self.table_start(self.shards), HUGE_PAGE) + shard * self.geometry.heap_len()
    }
    pub fn total_len(&self) -> usize {
        self.heap_start(self.shards)
    }
    /// Heap segments over every shard.
    pub fn heap_segments(&self) -> usize {
        self.shards * self.geometry.segments
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
    fn struct_sizes_are_what_the_format_assumes() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::size_of::<SegHeader>(), 64);
        assert_eq!(std::mem::size_of::<TtlBucket>(), 24);
        assert_eq!(std::mem::size_of::<MappedLock>(), 128);
        assert_eq!(std::mem::size_of::<ReaderSlot>(), 256);
    }

    #[test]
    fn regions_do_not_overlap_and_tables_and_heaps_are_huge_page_aligned() {
        for hash_power in [10, 15, 16] {
            let g = Geometry { hash_power, segment_size: 1 << 20, segments: 8 };
            let l = Layout { geometry: g, shards: 4 };
            assert!(g.meta_len() >= g.segs_offset() + 8 * 64);
            assert_eq!(l.meta_start(1) - l.meta_start(0), g.meta_len());
            assert!(l.slots_start(0) >= l.lock_start(4) && l.meta_start(0) >= l.slots_start(4));
            assert!(l.summary_start(0) >= l.metas_end() && l.ghost_start(0) >= l.summary_start(4));
            assert!(l.table_start(0) >= l.ghost_start(4));
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
