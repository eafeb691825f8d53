//! `Merge`: the paper's merge-based eviction, choosing which segments of a TTL bucket merge.

use crate::eviction::policy::Policy;
use crate::eviction::{Compaction, Plan, Victims};
use crate::segments::header::{SegHeader, NONE, POOL_MAIN, SEG_SEALED};
use crate::ttl_buckets::ttl;

/// Whether `later`'s items may share a merge with `first`'s in TTL bucket `b`: both never expire,
/// or `later` expires no earlier than `first` and less than one bucket width after it. The merge's
/// destinations take `first`'s expiry, which must not be later than any item's. A chain is in
/// expiry order but for segments of items that kept an exact expiry (brought back from flash,
/// or recached): one of those may expire after the segments that follow it.
pub(crate) fn same_expiry_window(first: &SegHeader, later: &SegHeader, b: usize) -> bool {
    (first.expire_at == 0) == (later.expire_at == 0)
        && later.expire_at >= first.expire_at
        && later.expire_at - first.expire_at < ttl::width_of_bucket(b)
}

/// Segments merged at once by `Merge`. Two, not the paper's four: each merge then frees exactly
/// one segment, the one about to be written, instead of two of which one waits on the free list
/// (a segment per shard holding nothing; with 8 shards of 32 segments 3% of the heap). The
/// smaller merges leave no partly filled segments behind, since the next merge continues the
/// last destination, so the hit ratio is at least that of four-segment merges for as many items
/// copied.
pub(crate) const MERGE_SOURCES: usize = 2;

/// Segments whose pairs one search for a lossless merge looks at (see `lossless_pair`): 64 KiB
/// of headers, which a scan reads in a few microseconds.
pub(crate) const LOSSLESS_WINDOW: usize = 1024;

impl Victims<'_, '_> {
    /// Merge eviction (the Segcache paper): take `MERGE_SOURCES` neighbouring sealed segments of a
    /// TTL chain, where the chain's sweep stands, copy their most frequently read items into the
    /// previous merge's last destination and the spare segment, which take their place, and free
    /// the sources. Retained items have their counters halved.
    ///
    /// Before that, space that overwrites and deletes left dead is reclaimed without loss: if two
    /// neighbouring segments' live items fit in one, the emptiest such pair is merged, keeping
    /// all. Without this, a sweep that reaches segments still densely live (keys written once and
    /// never again) drops their least read items even while the heap holds dead space elsewhere.
    pub(crate) fn merge(&mut self) -> Option<Plan> {
        if let Some((b, pair)) = self.lossless_pair() {
            if pair.contains(&self.buckets.bucket(b).merge_next) {
                self.buckets.bucket_mut(b).merge_next = self.segments.header(pair[1]).next;
            }
            return Some(Plan::Compact(Compaction {
                sources: pair.to_vec(),
                min_freq: 0,
                pool: POOL_MAIN,
                cont: None,
            }));
        }
        let start = self.cursors.merge as usize;
        for i in 0..ttl::BUCKETS {
            let b = (start + i) % ttl::BUCKETS;
            if self.buckets.bucket(b).head == NONE {
                continue;
            }
            // Merges sweep each chain from where the last one stopped, wrapping at the tail (as
            // in the paper): every segment is merged once per sweep, so the frequencies compared
            // were all gathered over one sweep. Restarting at the head instead would merge the
            // last merge's destinations again at once, with counters just halved, and would keep
            // only the very hottest items (no better than FIFO).
            let next = self.buckets.bucket(b).merge_next;
            let at_cursor = (next != NONE).then(|| self.segments.header(next));
            let from_cursor = if at_cursor.is_some_and(|s| s.ttl_bucket as usize == b && s.state == SEG_SEALED) {
                self.merge_sources(b, None, next, MERGE_SOURCES)
            } else {
                Vec::new()
            };
            let sources = if from_cursor.len() >= 2 {
                from_cursor
            } else {
                self.merge_sources(b, None, self.buckets.bucket(b).head, MERGE_SOURCES)
            };
            if sources.len() >= 2 {
                self.cursors.merge = ((b + 1) % ttl::BUCKETS) as u32;
                // The sweep goes on after the sources, which the compaction leaves in place.
                let last = *sources.last().expect("two sources");
                self.buckets.bucket_mut(b).merge_next = self.segments.header(last).next;
                let cont = self.merge_continuation(sources[0]);
                return Some(Plan::Compact(Compaction { sources, min_freq: 0, pool: POOL_MAIN, cont }));
            }
        }
        self.simple(Policy::Fifo)
    }

    /// The two neighbouring sealed segments (as `merge_sources` picks them) with the fewest live
    /// bytes between them, and their TTL bucket, if those fit in seven eighths of a segment: room
    /// for the records not packing a destination to the last byte, so merging them keeps every item.
    ///
    /// A pair is named by its first segment. One call looks at the pairs of at most
    /// `LOSSLESS_WINDOW` segments, the next call at the following ones, so that the search costs
    /// the same at any heap size: a search over every segment of a large shard (16,384 segments,
    /// 1 GiB of 64 KiB segments) would cost more per eviction than the merge it chooses. A shard
    /// with no more segments than the window looks at all of them every time.
    pub(crate) fn lossless_pair(&mut self) -> Option<(usize, [u32; 2])> {
        let n = self.segments.count();
        let count = n.min(LOSSLESS_WINDOW);
        let start = self.cursors.lossless as usize % n;
        self.cursors.lossless = ((start + count) % n) as u32;
        let size = self.segments.segment_size();
        let limit = (size - size / 8) as u64;
        let mut best: Option<(u64, usize, [u32; 2])> = None;
        for i in 0..count {
            let id = ((start + i) % n) as u32;
            let s = self.segments.header(id);
            if s.state != SEG_SEALED || s.pool != POOL_MAIN || s.next == NONE {
                continue;
            }
            let (b, next) = (s.ttl_bucket as usize, s.next);
            let after = self.segments.header(next);
            let neighbours = after.state == SEG_SEALED && after.pool == POOL_MAIN && same_expiry_window(s, after, b);
            let live = u64::from(s.live_bytes) + u64::from(after.live_bytes);
            if neighbours && live <= limit && best.is_none_or(|(l, ..)| live < l) {
                best = Some((live, b, [id, next]));
            }
        }
        best.map(|(_, b, pair)| (b, pair))
    }

    /// The segment right before `first` in its chain, if the sources starting at `first` can
    /// go on filling it: sealed, of the same pool, with room for a few items, and with an expiry
    /// window that takes the sources' items (its expiry is no later than theirs, and no more
    /// than one bucket width earlier).
    pub(crate) fn merge_continuation(&self, first: u32) -> Option<u32> {
        let f = self.segments.header(first);
        let prev = f.prev;
        if prev == NONE {
            return None;
        }
        let p = self.segments.header(prev);
        let width = ttl::width_of_bucket(f.ttl_bucket as usize);
        let fits_expiry = if p.expire_at == 0 {
            f.expire_at == 0
        } else {
            f.expire_at >= p.expire_at && f.expire_at - p.expire_at < width / 2
        };
        (p.state == SEG_SEALED
            && p.pool == f.pool
            && p.ttl_bucket == f.ttl_bucket
            && fits_expiry
            && (p.write_offset as usize) + 1024 <= self.segments.segment_size())
        .then_some(prev)
    }

    /// Up to `max` sealed segments of chain `b` (of `pool`, if given) from `from` on, whose
    /// expiry lies within one bucket width of the first one's.
    pub(crate) fn merge_sources(&self, b: usize, pool: Option<u8>, from: u32, max: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(max);
        let mut id = from;
        while id != NONE && out.len() < max {
            let s = self.segments.header(id);
            if pool.is_some_and(|p| s.pool != p) {
                id = s.next;
                continue;
            }
            if s.state != SEG_SEALED {
                break;
            }
            if out.first().is_some_and(|&first| !same_expiry_window(self.segments.header(first), s, b)) {
                break;
            }
            out.push(id);
            id = s.next;
        }
        out
    }
}
