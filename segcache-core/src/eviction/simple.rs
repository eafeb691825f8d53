//! The simple policies: random, random FIFO, FIFO, closest to expiry, least utilised. Each frees
//! one whole segment.

use crate::eviction::policy::Policy;
use crate::eviction::{Plan, Victims};
use crate::segments::header::NONE;
use crate::ttl_buckets::ttl;

impl Victims<'_, '_> {
    /// One segment to clear by a simple policy: sealed segments first, open ones only when
    /// nothing else is left.
    pub(crate) fn simple(&mut self, policy: Policy) -> Option<Plan> {
        [false, true].into_iter().find_map(|allow_open| self.pick(policy, allow_open)).map(Plan::Clear)
    }

    pub(crate) fn pick(&mut self, policy: Policy, allow_open: bool) -> Option<u32> {
        let n = self.segments.count() as u32;
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
                .filter(|&id| self.segments.header(id).expire_at != 0)
                .min_by_key(|&id| self.segments.header(id).expire_at)
                .or_else(|| self.pick(Policy::Fifo, allow_open)),
            Policy::Util => (0..n)
                .filter(|&id| self.is_candidate(id, allow_open))
                .min_by_key(|&id| self.segments.header(id).live_bytes),
            // Fifo, and the fallback of the others.
            _ => (0..ttl::BUCKETS)
                .flat_map(|b| self.chain_head_candidate(b, allow_open))
                .min_by_key(|&id| self.segments.header(id).seq),
        }
    }

    /// The oldest evictable segment of a chain.
    pub(crate) fn chain_head_candidate(&self, b: usize, allow_open: bool) -> Option<u32> {
        let mut id = self.buckets.bucket(b).head;
        while id != NONE {
            if self.is_candidate(id, allow_open) {
                return Some(id);
            }
            id = self.segments.header(id).next;
        }
        None
    }

    fn rand(&mut self) -> u64 {
        // xorshift64*: eviction only needs cheap, decent randomness.
        let mut x = self.cursors.rng | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.cursors.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
