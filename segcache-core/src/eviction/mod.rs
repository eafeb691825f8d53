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
    /// Start of every write: a due flush, and expiry once a second.
    pub(crate) fn prepare_write(&mut self) -> u32 {
        self.finish_checks();
        let now = self.now();
        if self.flushed(now) {
            self.reset(false);
            self.meta_mut().flushes += 1;
        }
        if now != self.meta().last_expire {
            self.expire();
        }
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
