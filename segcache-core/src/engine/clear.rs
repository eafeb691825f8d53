//! Scans that act on each live item of a segment, and clearing a segment: its live items leave
//! the table, the segment leaves its chain and goes on the free list.

use crate::engine::Segcache;
use crate::hashtable::slot::{self, Loc};
use crate::listener::RemovalCause;
use crate::segments::scan::{Live, BATCH};

impl Segcache {
    /// Calls `f` with the location, key hash and length of every record of segment `id` that is
    /// not marked dead, in order, a batch at a time (see `Segments::live_batch`).
    pub(crate) fn for_each_live(&mut self, id: u32, mut f: impl FnMut(&mut Self, Loc, u64, u32)) {
        let mut batch: [Live; BATCH] = [(Loc { seg: 0, offset: 0 }, 0u64, 0u32); BATCH];
        let mut off = 0usize;
        let base = self.seg(id).cas_base;
        let table = self.table();
        loop {
            let n = self.segments().live_batch(id, base, &mut off, &table, &mut batch);
            for &(loc, h, len) in &batch[..n] {
                f(self, loc, h, len);
            }
            if n < BATCH {
                return;
            }
        }
    }

    /// Takes a segment whose items are out of the table out of its chain and onto the free list,
    /// and its live items and bytes out of the shard's counts.
    pub(crate) fn free_segment(&mut self, id: u32) {
        let (items, bytes) = {
            let s = self.seg(id);
            (u64::from(s.live_items), u64::from(s.live_bytes))
        };
        let (mut segments, mut buckets) = self.segments_and_ttl();
        buckets.unlink(&mut segments, id);
        segments.push_free(id);
        let m = self.meta_mut();
        m.items = m.items.saturating_sub(items);
        m.bytes = m.bytes.saturating_sub(bytes);
    }

    /// Removes a segment's live items from the table and returns it to the free list.
    /// With a tier, eviction first moves the segment's items there (`demote`): their slots then
    /// point to flash, and only what did not go is removed.
    pub(crate) fn clear_segment(&mut self, id: u32, expired: bool) {
        if !expired && self.tier.is_some() {
            self.demote(id);
        }
        let (mut removed, mut unfetched) = (0u64, 0u64);
        let t = self.table();
        let cause = if expired { RemovalCause::Expired } else { RemovalCause::Evicted };
        self.for_each_live(id, |s, loc, h, _| {
            if let Some(f) = t.find_loc(h, loc) {
                if s.large.chunks != 0 && s.is_chunk_at(loc) {
                    s.large.chunks -= 1;
                }
                if !expired && s.replaced_by_write(h) {
                    s.tell_owner_removal(loc, f.value, RemovalCause::Replaced);
                } else {
                    s.tell_removal(loc, f.value, cause);
                    unfetched += u64::from(f.value & slot::FETCHED == 0);
                    removed += 1;
                }
                s.remove_slot(h, f.slot);
            }
        });
        self.free_segment(id);
        let m = self.meta_mut();
        if expired {
            m.expired_items += removed;
            m.expired_unfetched += unfetched;
            m.expired_segments += 1;
        } else {
            m.evicted_items += removed;
            m.evicted_unfetched += unfetched;
            m.evicted_segments += 1;
        }
    }
}
