//! The tag summary: one byte per chain, bit `tag % 8` set for every item in the chain (see
//! `table`).

use std::sync::atomic::Ordering::Relaxed;

use crate::hashtable::slot::{slot_tag, summary_bit, tag_of};
use crate::hashtable::table::Table;

impl Table<'_> {
    /// Whether the chain may hold the tag: `false` means certainly not.
    #[inline]
    pub fn may_hold(&self, hash: u64) -> bool {
        self.summary[(hash & self.mask) as usize].load(Relaxed) & summary_bit(tag_of(hash)) != 0
    }

    /// Recomputes the chain's summary from its slots (after items left it).
    pub fn refresh_summary(&self, hash: u64) {
        let mut bits = 0;
        self.scan(hash, |_, v| {
            bits |= summary_bit(slot_tag(v));
            false
        });
        self.summary[(hash & self.mask) as usize].store(bits, Relaxed);
    }

    /// Recomputes every chain's summary: for buckets found in a reopened file.
    pub fn rebuild_summary(&self) {
        for chain in 0..=self.mask {
            // A chain's index serves as its hash: `head` only uses the masked bits.
            self.refresh_summary(chain);
        }
    }
}
