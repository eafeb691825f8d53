//! Eviction carried out: the policy's choice (`eviction::Victims`) made over this shard's parts,
//! then the segment it names cleared, or the segments it names compacted.

use crate::engine::Segcache;
use crate::error::{Error, Result};
use crate::eviction::policy::Policy;
use crate::eviction::{Cursors, Plan, Victims};

impl Segcache {
    /// Frees at least one segment's worth of space by the engine's policy, or fails with
    /// `NoMemory` when eviction is off or nothing can be freed.
    pub(crate) fn evict(&mut self) -> Result<()> {
        self.evict_by(self.policy)
    }

    /// As `evict`, by `policy`.
    pub(crate) fn evict_by(&mut self, policy: Policy) -> Result<()> {
        match self.victims(|v| v.choose(policy)) {
            None => Err(Error::NoMemory),
            Some(Plan::Clear(id)) => {
                self.clear_segment(id, false);
                Ok(())
            }
            Some(Plan::Compact(c)) => self.compact(&c.sources, c.min_freq, c.pool, c.cont),
        }
    }

    /// Runs `f` over eviction's view of this shard, its cursors taken from the shard's metadata
    /// and put back after.
    pub(crate) fn victims<R>(&mut self, f: impl FnOnce(&mut Victims<'_, '_>) -> R) -> R {
        let mut cursors = Cursors::of(self.meta());
        let out = {
            let (segments, mut buckets) = self.segments_and_ttl();
            f(&mut Victims::new(&segments, &mut buckets, &mut cursors))
        };
        cursors.store(self.meta_mut());
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use crate::builder::Builder;
    use crate::engine::Segcache;
    use crate::eviction::merge::LOSSLESS_WINDOW;
    use crate::eviction::policy::Policy;

    impl Segcache {
        fn victims_pick(&mut self, policy: Policy, allow_open: bool) -> Option<u32> {
            self.victims(|v| v.pick(policy, allow_open))
        }
    }

    /// Writes 20,000 keys into a heap that holds about 4,000, reading every tenth key ("hot") of
    /// the last 1,000 written after each write; returns the shares of the hot and the other keys
    /// among the first 15,000 that are still there, and the stats.
    fn kept(policy: Policy) -> (f64, f64, crate::stats::Stats) {
        let mut c = Builder::new().heap_size(1 << 20).segment_size(64 << 10).eviction(policy).build().unwrap();
        let key = |i: usize| format!("key-{i:06}").into_bytes();
        for i in 0..20_000 {
            c.set(&key(i), &[b'v'; 200], 0, Duration::ZERO).unwrap();
            for j in (i.saturating_sub(1000)..i).filter(|j| j % 10 == 0) {
                let _ = c.get(&key(j));
            }
        }
        let share = |hot: bool| {
            let keys: Vec<usize> = (0..15_000).filter(|i| (i % 10 == 0) == hot).collect();
            keys.iter().filter(|&&i| c.contains(&key(i))).count() as f64 / keys.len() as f64
        };
        (share(true), share(false), c.stats())
    }

    #[test]
    fn fifo_keeps_no_old_key_however_often_read() {
        let (hot, other, stats) = kept(Policy::Fifo);
        assert_eq!((hot, other), (0.0, 0.0));
        assert_eq!(stats.merged_items, 0);
    }

    /// Three items in three TTL buckets, so in three segments, opened in this order: `long`
    /// (1,000 bytes, expiring in a day), `short` (10 bytes, in 100 s), `never` (500 bytes).
    fn three_segments() -> (Segcache, [u32; 3]) {
        let mut c = Builder::new().heap_size(1 << 20).segment_size(64 << 10).eviction(Policy::Fifo).build().unwrap();
        c.set(b"long", &[b'l'; 1000], 0, Duration::from_secs(86_400)).unwrap();
        c.set(b"short", &[b's'; 10], 0, Duration::from_secs(100)).unwrap();
        c.set(b"never", &[b'n'; 500], 0, Duration::ZERO).unwrap();
        let seg = |k: &[u8]| c.record_location(k).unwrap().0;
        let segs = [seg(b"long"), seg(b"short"), seg(b"never")];
        (c, segs)
    }

    #[test]
    fn fifo_picks_the_oldest_segment() {
        let (mut c, [long, _, _]) = three_segments();
        assert_eq!(c.victims_pick(Policy::Fifo, true), Some(long));
        assert_eq!(c.victims_pick(Policy::Fifo, false), None, "open segments are kept while sealed ones remain");
    }

    #[test]
    fn cte_picks_the_segment_closest_to_expiry() {
        let (mut c, [_, short, _]) = three_segments();
        assert_eq!(c.victims_pick(Policy::Cte, true), Some(short));
    }

    #[test]
    fn util_picks_the_segment_with_the_fewest_live_bytes() {
        let (mut c, [_, short, _]) = three_segments();
        assert_eq!(c.victims_pick(Policy::Util, true), Some(short));
    }

    #[test]
    fn random_policies_pick_a_segment_in_use() {
        let (mut c, segs) = three_segments();
        for policy in [Policy::Random, Policy::RandomFifo] {
            for _ in 0..16 {
                let id = c.victims_pick(policy, true).unwrap();
                assert!(segs.contains(&id), "{policy:?} picked segment {id}, not one in use");
            }
        }
    }

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
            found.push(c.victims(|v| v.lossless_pair()).map(|(_, p)| p));
        }
        assert_eq!(found, [None, None, Some(pair), None, None]);
    }

    /// A heap of no more segments than the window is searched whole every time.
    #[test]
    fn a_small_heap_is_searched_whole_every_time() {
        let segments = LOSSLESS_WINDOW / 2;
        let (mut c, pair) = one_sparse_pair(segments, segments - 16, (segments - 40) as u32);
        for _ in 0..3 {
            assert_eq!(c.victims(|v| v.lossless_pair()).map(|(_, p)| p), Some(pair));
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

    #[test]
    fn s3fifo_promotes_the_items_read_in_the_small_pool() {
        let (hot, other, stats) = kept(Policy::S3Fifo);
        assert!(hot > 0.4, "{hot} of the read keys kept");
        assert!(other < 0.1, "{other} of the other keys kept");
        assert!(stats.merged_items > 0, "promotions count as merged items");
    }
}
