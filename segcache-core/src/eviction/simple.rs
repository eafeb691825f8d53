//! The simple policies: random, FIFO, closest to expiry, least recently updated.

use crate::segments::header::NONE;
use crate::Segcache;
use crate::{ttl, Error, Policy, Result};

impl Segcache {
    /// Picks and clears one segment by a simple policy. Sealed segments first; open ones only
    /// when nothing else is left.
    pub(crate) fn evict_simple(&mut self, policy: Policy) -> Result<()> {
        for allow_open in [false, true] {
            if let Some(id) = self.pick_victim(policy, allow_open) {
                self.clear_segment(id, false);
                return Ok(());
            }
        }
        Err(Error::NoMemory)
    }

    pub(crate) fn pick_victim(&mut self, policy: Policy, allow_open: bool) -> Option<u32> {
        let n = self.geo.segments as u32;
        match policy {
            Policy::Random => {
                for _ in 0..64 {
                    let id = (self.rand() % u64::from(n)) as u32;
                    if self.is_candidate(id, allow_open) {
                        return Some(id);
                    }
                }
                (0..n).find(|&id| self.is_candidate(id, allow_open))
            }
            Policy::RandomFifo => {
                let start = (self.rand() % ttl::BUCKETS as u64) as usize;
                (0..ttl::BUCKETS)
                    .map(|i| (start + i) % ttl::BUCKETS)
                    .flat_map(|b| self.chain_head_candidate(b, allow_open))
                    .next()
            }
            Policy::Cte => (0..ttl::BUCKETS)
                .flat_map(|b| self.chain_head_candidate(b, allow_open))
                .filter(|&id| self.seg(id).expire_at != 0)
                .min_by_key(|&id| self.seg(id).expire_at)
                .or_else(|| self.pick_victim(Policy::Fifo, allow_open)),
            Policy::Util => {
                (0..n).filter(|&id| self.is_candidate(id, allow_open)).min_by_key(|&id| self.seg(id).live_bytes)
            }
            // Fifo, and the fallback of the others.
            _ => (0..ttl::BUCKETS)
                .flat_map(|b| self.chain_head_candidate(b, allow_open))
                .min_by_key(|&id| self.seg(id).seq),
        }
    }

    /// The oldest evictable segment of a chain.
    pub(crate) fn chain_head_candidate(&self, b: usize, allow_open: bool) -> Option<u32> {
        let mut id = self.ttl_bucket(b).head;
        while id != NONE {
            if self.is_candidate(id, allow_open) {
                return Some(id);
            }
            id = self.seg(id).next;
        }
        None
    }

    pub(crate) fn rand(&mut self) -> u64 {
        // xorshift64*: eviction only needs cheap, decent randomness.
        let m = self.meta_mut();
        let mut x = m.rng | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        m.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{Builder, Policy, Segcache};

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
        assert_eq!(c.pick_victim(Policy::Fifo, true), Some(long));
        assert_eq!(c.pick_victim(Policy::Fifo, false), None, "open segments are kept while sealed ones remain");
    }

    #[test]
    fn cte_picks_the_segment_closest_to_expiry() {
        let (mut c, [_, short, _]) = three_segments();
        assert_eq!(c.pick_victim(Policy::Cte, true), Some(short));
    }

    #[test]
    fn util_picks_the_segment_with_the_fewest_live_bytes() {
        let (mut c, [_, short, _]) = three_segments();
        assert_eq!(c.pick_victim(Policy::Util, true), Some(short));
    }

    #[test]
    fn random_policies_pick_a_segment_in_use() {
        let (mut c, segs) = three_segments();
        for policy in [Policy::Random, Policy::RandomFifo] {
            for _ in 0..16 {
                let id = c.pick_victim(policy, true).unwrap();
                assert!(segs.contains(&id), "{policy:?} picked segment {id}, not one in use");
            }
        }
    }
}
