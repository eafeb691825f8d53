//! The tag summary: one byte per chain, bit `tag % 8` set for every item in the chain (see
//! `table`).

use std::sync::atomic::Ordering::Relaxed;

use crate::hashtable::slot::{slot_loc, slot_tag, summary_bit, tag_of, Loc};
use crate::hashtable::table::Table;

impl Table<'_> {
    /// Whether the chain may hold the tag: `false` means certainly not.
    #[inline]
    pub fn may_hold(&self, hash: u64) -> bool {
        self.summary_of(hash).load(Relaxed) & summary_bit(tag_of(hash)) != 0
    }

    /// Whether the chain may hold an item with the hash's tag: the summary, then (when its bit
    /// is set) the tags of the chain's slots. `false` means certainly not when no writer changed
    /// the chain meanwhile. Safe without a lock (atomic loads, bounds-checked links), where it is
    /// only a hint: `SharedCache::set` skips the shared-lock rewrite attempt for new keys with it,
    /// since the summary alone lets through about half of them once chains are full.
    /// `matched` sees the location of the first slot whose tag matches (almost always the key's).
    #[inline]
    pub fn may_hold_tag(&self, hash: u64, mut matched: impl FnMut(Loc)) -> bool {
        if !self.may_hold(hash) {
            return false;
        }
        let tag = tag_of(hash);
        let mut cut = false;
        let found = self.scan_cut(hash, &mut cut, |_, v| {
            let hit = slot_tag(v) == tag;
            if hit {
                matched(slot_loc(v));
            }
            hit
        });
        // A link out of range (a writer relinking the chain meanwhile) ends the scan: say maybe.
        found || cut
    }

    /// Recomputes the chain's summary from its slots (after items left it).
    pub fn refresh_summary(&self, hash: u64) {
        let mut bits = 0;
        self.scan(hash, |_, v| {
            bits |= summary_bit(slot_tag(v));
            false
        });
        self.summary_of(hash).store(bits, Relaxed);
    }

    /// Recomputes every chain's summary: for buckets found in a reopened file.
    pub fn rebuild_summary(&self) {
        for chain in 0..=self.mask() {
            // A chain's index serves as its hash: `head` only uses the masked bits.
            self.refresh_summary(chain);
        }
    }
}
