//! `S3Fifo`: a small FIFO pool promoted into a main one, with a ghost of recently dropped keys.

use crate::segments::header::{POOL_MAIN, POOL_SMALL, SEG_SEALED};
use crate::Segcache;
use crate::{Policy, Result};
use std::sync::atomic::Ordering::Relaxed;

/// Segments promoted at once by `S3Fifo` (with 2, too little of the small pool's read items
/// would be kept: 0.79 against 0.86 on the Zipf bench).
pub(crate) const PROMOTE_SOURCES: usize = 4;

impl Segcache {
    /// S3-FIFO at segment granularity: while the small pool holds more than a tenth of the
    /// segments, its oldest segments are promoted (items read at least once move to the main
    /// pool, the rest leave a ghost); otherwise the main pool's oldest are merged as by `Merge`.
    pub(crate) fn evict_s3fifo(&mut self) -> Result<()> {
        let small_target = (self.geo.segments as u64 / 10).max(1);
        let small = self.meta().small_segments;
        let pool = if small > small_target { POOL_SMALL } else { POOL_MAIN };
        let oldest = (0..self.geo.segments as u32)
            .filter(|&id| {
                let s = self.seg(id);
                s.state == SEG_SEALED && s.pool == pool
            })
            .min_by_key(|&id| self.seg(id).seq);
        let Some(oldest) = oldest else {
            return self.evict_simple(Policy::Fifo);
        };
        let b = self.seg(oldest).ttl_bucket as usize;
        let mut sources = self.merge_sources(b, Some(pool), self.ttl_bucket(b).head, PROMOTE_SOURCES);
        if !sources.contains(&oldest) {
            sources = vec![oldest];
        }
        // Small: promote what was read. Main: reinsert what was read, counters halved.
        self.compact(&sources, 1, POOL_MAIN, None)
    }

    pub(crate) fn ghost_slot(&self, h: u64) -> Option<(usize, u32)> {
        let n = self.ghost.len();
        (n > 0).then(|| (((h >> 20) as usize) & (n - 1), (h as u32) | 1))
    }

    pub(crate) fn ghost_hit(&self, h: u64) -> bool {
        self.ghost_slot(h).is_some_and(|(i, fp)| self.ghost[i].load(Relaxed) == fp)
    }

    pub(crate) fn ghost_insert(&mut self, h: u64) {
        if let Some((i, fp)) = self.ghost_slot(h) {
            self.ghost[i].store(fp, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::eviction::tests::kept;
    use crate::Policy;

    #[test]
    fn s3fifo_promotes_the_items_read_in_the_small_pool() {
        let (hot, other, stats) = kept(Policy::S3Fifo);
        assert!(hot > 0.4, "{hot} of the read keys kept");
        assert!(other < 0.1, "{other} of the other keys kept");
        assert!(stats.merged_items > 0, "promotions count as merged items");
    }
}
