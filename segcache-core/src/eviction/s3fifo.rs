//! `S3Fifo`: a small FIFO pool promoted into a main one, with a ghost of recently dropped keys.

use crate::eviction::policy::Policy;
use crate::eviction::{Compaction, Plan, Victims};
use crate::segments::header::{POOL_MAIN, POOL_SMALL, SEG_SEALED};

/// Segments promoted at once by `S3Fifo` (with 2, too little of the small pool's read items
/// would be kept: 0.79 against 0.86 on the Zipf bench).
pub(crate) const PROMOTE_SOURCES: usize = 4;

impl Victims<'_, '_> {
    /// S3-FIFO at segment granularity: while the small pool holds more than a tenth of the
    /// segments, its oldest segments are promoted (items read at least once move to the main
    /// pool, the rest leave a ghost); otherwise the main pool's oldest are merged as by `Merge`.
    pub(crate) fn s3fifo(&mut self) -> Option<Plan> {
        let segments = self.segments;
        let small_target = (segments.count() as u64 / 10).max(1);
        let pool = if segments.small_count() > small_target { POOL_SMALL } else { POOL_MAIN };
        let oldest = (0..segments.count() as u32)
            .filter(|&id| {
                let s = segments.header(id);
                s.state == SEG_SEALED && s.pool == pool
            })
            .min_by_key(|&id| segments.header(id).seq);
        let Some(oldest) = oldest else {
            return self.simple(Policy::Fifo);
        };
        let b = segments.header(oldest).ttl_bucket as usize;
        let mut sources = self.merge_sources(b, Some(pool), self.buckets.bucket(b).head, PROMOTE_SOURCES);
        if !sources.contains(&oldest) {
            sources = vec![oldest];
        }
        // Small: promote what was read. Main: reinsert what was read, counters halved.
        Some(Plan::Compact(Compaction { sources, min_freq: 1, pool: POOL_MAIN, cont: None }))
    }
}
