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
/// (a segment per shard holding nothing; with 8 shards of 32 segments 3% of the heap), and
/// keeps a little more (the last destination is continued by the next merge, so the smaller
/// merges do not leave partly filled segments). Zipf bench, 64 MiB: 0.8920 -> 0.8922 unsharded,
/// 0.8837 -> 0.8852 with 4 shards, for as many items copied.
pub(crate) const MERGE_SOURCES: usize = 2;

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
    pub(crate) fn lossless_pair(&self) -> Option<(usize, [u32; 2])> {
        let limit = (self.geo.segment_size - self.geo.segment_size / 8) as u64;
        let mut best: Option<(u64, usize, [u32; 2])> = None;
        for b in 0..ttl::BUCKETS {
            let mut id = self.ttl_bucket(b).head;
            while id != NONE {
                let (s, next) = (self.seg(id), self.seg(id).next);
                if next == NONE {
                    break;
                }
                let n = self.seg(next);
                let neighbours = s.state == SEG_SEALED
                    && n.state == SEG_SEALED
                    && s.pool == POOL_MAIN
                    && n.pool == POOL_MAIN
                    && same_expiry_window(s, n, b);
                let live = u64::from(s.live_bytes) + u64::from(n.live_bytes);
                if neighbours && live <= limit && best.is_none_or(|(l, ..)| live < l) {
                    best = Some((live, b, [id, next]));
                }
                id = next;
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
    use crate::eviction::tests::kept;
    use crate::Policy;

    #[test]
    fn merge_keeps_the_frequently_read_items() {
        let (hot, other, stats) = kept(Policy::Merge);
        assert!(hot > 0.5, "{hot} of the read keys kept");
        assert!(other < 0.1, "{other} of the other keys kept");
        assert!(stats.merged_items > 0);
    }
}
