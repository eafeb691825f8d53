//! `Merge`: the paper's merge-based eviction, choosing which segments of a TTL bucket merge.

use crate::segments::header::{SegHeader, NONE, POOL_MAIN, SEG_SEALED};
use crate::Segcache;
use crate::{ttl, Policy, Result};

/// Whether `later`'s items may share a merge with `first`'s in TTL bucket `b`: both never expire,
/// or `later` expires less than one bucket width after `first`.
pub(crate) fn same_expiry_window(first: &SegHeader, later: &SegHeader, b: usize) -> bool {
    (first.expire_at == 0) == (later.expire_at == 0)
        && later.expire_at.saturating_sub(first.expire_at) < ttl::width_of_bucket(b)
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

impl Segcache {
    /// Merge eviction (the Segcache paper): take `MERGE_SOURCES` neighbouring sealed segments of a
    /// TTL chain, where the chain's sweep stands, copy their most frequently read items into the
    /// previous merge's last destination and the spare segment, which take their place, and free
    /// the sources. Retained items have their counters halved.
    ///
    /// Before that, space that overwrites and deletes left dead is reclaimed without loss: if two
    /// neighbouring segments' live items fit in one, the emptiest such pair is merged, keeping
    /// all. Without this, a sweep that reaches segments still densely live (keys written once and
    /// never again) drops their least read items even while the heap holds dead space elsewhere.
    pub(crate) fn evict_merge(&mut self) -> Result<()> {
        if let Some((b, pair)) = self.lossless_pair() {
            if pair.contains(&self.ttl_bucket(b).merge_next) {
                self.ttl_bucket_mut(b).merge_next = self.seg(pair[1]).next;
            }
            return self.compact(&pair, 0, POOL_MAIN, None);
        }
        let start = self.meta().merge_cursor as usize;
        for i in 0..ttl::BUCKETS {
            let b = (start + i) % ttl::BUCKETS;
            if self.ttl_bucket(b).head == NONE {
                continue;
            }
            // Merges sweep each chain from where the last one stopped, wrapping at the tail (as
            // in the paper): every segment is merged once per sweep, so the frequencies compared
            // were all gathered over one sweep. Restarting at the head instead would merge the
            // last merge's destinations again at once, with counters just halved, and would keep
            // only the very hottest items (no better than FIFO).
            let next = self.ttl_bucket(b).merge_next;
            let from_cursor =
                if next != NONE && self.seg(next).ttl_bucket as usize == b && self.seg(next).state == SEG_SEALED {
                    self.merge_sources(b, None, next, MERGE_SOURCES)
                } else {
                    Vec::new()
                };
            let sources = if from_cursor.len() >= 2 {
                from_cursor
            } else {
                self.merge_sources(b, None, self.ttl_bucket(b).head, MERGE_SOURCES)
            };
            if sources.len() >= 2 {
                self.meta_mut().merge_cursor = ((b + 1) % ttl::BUCKETS) as u32;
                let last = *sources.last().expect("two sources");
                let after = self.seg(last).next;
                let cont = self.merge_continuation(sources[0]);
                self.compact(&sources, 0, POOL_MAIN, cont)?;
                self.ttl_bucket_mut(b).merge_next = after;
                return Ok(());
            }
        }
        self.evict_simple(Policy::Fifo)
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
        let n = self.geo.segments;
        let count = n.min(LOSSLESS_WINDOW);
        let start = self.meta().lossless_cursor as usize % n;
        self.meta_mut().lossless_cursor = ((start + count) % n) as u32;
        let limit = (self.geo.segment_size - self.geo.segment_size / 8) as u64;
        let mut best: Option<(u64, usize, [u32; 2])> = None;
        for i in 0..count {
            let id = ((start + i) % n) as u32;
            let s = self.seg(id);
            if s.state != SEG_SEALED || s.pool != POOL_MAIN || s.next == NONE {
                continue;
            }
            let (b, next) = (s.ttl_bucket as usize, s.next);
            let after = self.seg(next);
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
        let f = self.seg(first);
        let prev = f.prev;
        if prev == NONE {
            return None;
        }
        let p = self.seg(prev);
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
            && (p.write_offset as usize) + 1024 <= self.geo.segment_size)
            .then_some(prev)
    }

    /// Up to `max` sealed segments of chain `b` (of `pool`, if given) from `from` on, whose
    /// expiry lies within one bucket width of the first one's.
    pub(crate) fn merge_sources(&self, b: usize, pool: Option<u8>, from: u32, max: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(max);
        let mut id = from;
        while id != NONE && out.len() < max {
            let s = self.seg(id);
            if pool.is_some_and(|p| s.pool != p) {
                id = s.next;
                continue;
            }
            if s.state != SEG_SEALED {
                break;
            }
            if out.first().is_some_and(|&first| !same_expiry_window(self.seg(first), s, b)) {
                break;
            }
            out.push(id);
            id = s.next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::LOSSLESS_WINDOW;
    use crate::eviction::tests::kept;
    use crate::{Builder, Policy, Segcache};

    /// A Merge cache of `segments` segments of 4 KiB, written until `used` of them hold items,
    /// then every item of two neighbouring segments deleted but one: `first` and the next one.
    /// Returns the cache and that pair. All other segments are full, so the pair is the only
    /// one whose live items fit in one segment.
    fn one_sparse_pair(segments: usize, used: usize, first: u32) -> (Segcache, [u32; 2]) {
        let mut c =
            Builder::new().heap_size(segments << 12).segment_size(4 << 10).eviction(Policy::Merge).build().unwrap();
        let mut by_seg: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
        for i in 0.. {
            let key = format!("key-{i:07}").into_bytes();
            c.set(&key, &[b'v'; 200], 0, Duration::ZERO).unwrap();
            let seg = c.record_location(&key).unwrap().0;
            if seg as usize >= used {
                break;
            }
            by_seg.entry(seg).or_default().push(key);
        }
        assert_eq!(c.stats().evicted_segments, 0, "the fill evicted nothing");
        let next = c.seg(first).next;
        for key in by_seg[&first].iter().chain(&by_seg[&next]).skip(1) {
            c.delete(key).unwrap();
        }
        (c, [first, next])
    }

    /// Each search looks at the next `LOSSLESS_WINDOW` segments, wrapping around the heap: a
    /// sparse pair far from where the search starts is found once the window reaches it.
    #[test]
    fn a_lossless_pair_anywhere_in_a_large_heap_is_found_within_one_round_of_windows() {
        let segments = 4 * LOSSLESS_WINDOW;
        let first = (2 * LOSSLESS_WINDOW + 100) as u32;
        let (mut c, pair) = one_sparse_pair(segments, segments - 64, first);
        let mut found = Vec::new();
        for call in 0..5 {
            assert_eq!(c.meta().lossless_cursor as usize, call * LOSSLESS_WINDOW % segments);
            found.push(c.lossless_pair().map(|(_, p)| p));
        }
        assert_eq!(found, [None, None, Some(pair), None, None]);
    }

    /// A heap of no more segments than the window is searched whole every time.
    #[test]
    fn a_small_heap_is_searched_whole_every_time() {
        let segments = LOSSLESS_WINDOW / 2;
        let (mut c, pair) = one_sparse_pair(segments, segments - 16, (segments - 40) as u32);
        for _ in 0..3 {
            assert_eq!(c.lossless_pair().map(|(_, p)| p), Some(pair));
            assert_eq!(c.meta().lossless_cursor, 0);
        }
    }

    #[test]
    fn merge_keeps_the_frequently_read_items() {
        let (hot, other, stats) = kept(Policy::Merge);
        assert!(hot > 0.5, "{hot} of the read keys kept");
        assert!(other < 0.1, "{other} of the other keys kept");
        assert!(stats.merged_items > 0);
    }
}
