//! Eviction: making room before a write, dispatched on the policy.

pub(crate) mod compact;
pub(crate) mod merge;
pub(crate) mod policy;
pub(crate) mod s3fifo;
pub(crate) mod simple;

use crate::segments::header::{SEG_OPEN, SEG_SEALED};
use crate::Segcache;
use crate::{Error, Policy, Result};

impl Segcache {
    /// Start of every write: a due flush, and a step of expiry.
    pub(crate) fn prepare_write(&mut self) -> u32 {
        self.finish_checks();
        let now = self.now();
        if self.flushed(now) {
            self.reset(false);
            self.meta_mut().flushes += 1;
        }
        self.expire_step(now);
        now
    }

    /// Frees at least one segment's worth of space, or fails with `NoMemory` when eviction is off.
    pub(crate) fn evict(&mut self) -> Result<()> {
        match self.policy {
            Policy::None => Err(Error::NoMemory),
            Policy::Merge => self.evict_merge(),
            Policy::S3Fifo => self.evict_s3fifo(),
            p => self.evict_simple(p),
        }
    }

    pub(crate) fn is_candidate(&self, id: u32, allow_open: bool) -> bool {
        let st = self.seg(id).state;
        st == SEG_SEALED || (allow_open && st == SEG_OPEN)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use crate::{Builder, Policy};

    /// Writes 20,000 keys into a heap that holds about 4,000, reading every tenth key ("hot") of
    /// the last 1,000 written after each write; returns the shares of the hot and the other keys
    /// among the first 15,000 that are still there, and the stats.
    pub(crate) fn kept(policy: Policy) -> (f64, f64, crate::Stats) {
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
}
