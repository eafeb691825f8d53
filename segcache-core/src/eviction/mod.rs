//! Eviction: which segments the policy frees when the heap is full.
//!
//! `Victims` reads the segment headers and the TTL chains and names what to free, as a `Plan`;
//! the engine carries the plan out (`Segcache::evict`), since dropping or moving items also
//! changes the hash table, the statistics and the removal listener. The choice's state that lasts
//! from one eviction to the next (`Cursors`) lives in the shard's metadata; S3-FIFO's ghost
//! (`ghost::Ghost`) is its own part of the region.

pub(crate) mod ghost;
pub(crate) mod merge;
pub(crate) mod policy;
pub(crate) mod s3fifo;
pub(crate) mod simple;

use crate::meta::ShardMeta;
use crate::segments::header::{SEG_OPEN, SEG_SEALED};
use crate::segments::Segments;
use crate::ttl_buckets::TtlBuckets;
use policy::Policy;

/// What an eviction frees.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Drop every item of this segment and free it.
    Clear(u32),
    /// Copy the frequently read live items of neighbouring segments into destinations that take
    /// their place in the chain, and free the rest (see `Segcache::compact`).
    Compact(Compaction),
}

/// A merge or promotion: which segments, and what their kept items keep.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Compaction {
    /// Neighbours in one TTL chain, older first.
    pub(crate) sources: Vec<u32>,
    /// Items read fewer times than this are dropped whatever room is left.
    pub(crate) min_freq: u8,
    /// The pool the destinations join.
    pub(crate) pool: u8,
    /// A sealed segment just before the sources that the kept items fill first.
    pub(crate) cont: Option<u32>,
}

/// The state eviction keeps between choices, copied out of the shard's metadata for one choice
/// and back after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursors {
    /// The random policies' xorshift state.
    pub(crate) rng: u64,
    /// The TTL bucket where `Merge`'s next search for a chain to merge starts.
    pub(crate) merge: u32,
    /// The segment where `Merge`'s next search for a lossless pair starts.
    pub(crate) lossless: u32,
}

impl Cursors {
    pub(crate) fn of(meta: &ShardMeta) -> Cursors {
        Cursors { rng: meta.rng, merge: meta.merge_cursor, lossless: meta.lossless_cursor }
    }

    pub(crate) fn store(self, meta: &mut ShardMeta) {
        (meta.rng, meta.merge_cursor, meta.lossless_cursor) = (self.rng, self.merge, self.lossless);
    }
}

/// Eviction's view of one shard: its segments (read only), its TTL buckets (whose merge cursors
/// a choice moves) and the cursors.
pub(crate) struct Victims<'v, 'a> {
    segments: &'v Segments<'a>,
    buckets: &'v mut TtlBuckets<'a>,
    cursors: &'v mut Cursors,
}

impl<'v, 'a> Victims<'v, 'a> {
    pub(crate) fn new(segments: &'v Segments<'a>, buckets: &'v mut TtlBuckets<'a>, cursors: &'v mut Cursors) -> Self {
        Victims { segments, buckets, cursors }
    }

    /// What `policy` frees next; `None` when eviction is off or no segment can be freed.
    pub(crate) fn choose(&mut self, policy: Policy) -> Option<Plan> {
        match policy {
            Policy::None => None,
            Policy::Merge => self.merge(),
            Policy::S3Fifo => self.s3fifo(),
            p => self.simple(p),
        }
    }

    /// Whether segment `id` may be evicted: sealed, or open when `allow_open`.
    pub(crate) fn is_candidate(&self, id: u32, allow_open: bool) -> bool {
        let st = self.segments.header(id).state;
        st == SEG_SEALED || (allow_open && st == SEG_OPEN)
    }
}
