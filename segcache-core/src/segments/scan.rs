//! Scans of a segment's records: its live items, and clearing it.

use crate::hash::hash;
use crate::hashtable::bucket::Bucket;
use crate::hashtable::slot::{self, Loc};
use crate::listener::RemovalCause;
use crate::prefetch::prefetch;
use crate::record::{self};
use crate::Segcache;

impl Segcache {
    /// Calls `f` with the location, key hash and length of every record of segment `id` that is
    /// not marked dead, in order. Segments scanned whole (eviction, expiry, recovery) are mostly
    /// old and out of cache, and a scan that waited on each record's line, then on its bucket,
    /// was bound by memory latency (73% of a merge's first pass went to each record's first
    /// byte). So the records are parsed in batches, with the segment's lines prefetched ahead of
    /// the parse, and each batch's buckets (heads, then overflow buckets) are prefetched before
    /// `f` sees the first of them.
    pub(crate) fn for_each_live(&mut self, id: u32, mut f: impl FnMut(&mut Self, Loc, u64, u32)) {
        pub(crate) const BATCH: usize = 16;
        /// Bytes ahead of the parse that are prefetched: a batch of typical records.
        pub(crate) const AHEAD: usize = 1024;
        let mut batch = [(Loc { seg: 0, offset: 0 }, 0u64, 0u32); BATCH];
        let mut off = 0usize;
        let base = self.seg(id).cas_base;
        loop {
            let mut n = 0;
            let data = self.seg_data(id);
            while n < BATCH {
                prefetch(data.as_ptr().wrapping_add(off + AHEAD));
                let Some(r) = data.get(off..).and_then(|src| record::parse(src, base)) else { break };
                if !r.dead {
                    let h = hash(r.key);
                    prefetch(self.table().head(h) as *const Bucket as *const u8);
                    batch[n] = (Loc { seg: id, offset: off as u32 }, h, r.len as u32);
                    n += 1;
                }
                off += r.len;
            }
            // The heads have been fetched meanwhile: fetch the chains' overflow buckets together
            // too (a quarter of the chains have one in a full table; removing an item walks to
            // its chain's tail).
            let t = self.table();
            for &(_, h, _) in &batch[..n] {
                t.prefetch_chain(h);
            }
            for &(loc, h, len) in &batch[..n] {
                f(self, loc, h, len);
            }
            if n < BATCH {
                return;
            }
        }
    }

    /// Removes a segment's live items from the table and returns it to the free list.
    pub(crate) fn clear_segment(&mut self, id: u32, expired: bool) {
        let (mut removed, mut unfetched) = (0u64, 0u64);
        let t = self.table();
        let cause = if expired { RemovalCause::Expired } else { RemovalCause::Evicted };
        self.for_each_live(id, |s, loc, h, _| {
            if let Some(f) = t.find_loc(h, loc) {
                s.tell_removal(loc, f.value, cause);
                unfetched += u64::from(f.value & slot::FETCHED == 0);
                s.remove_slot(h, f.slot);
                removed += 1;
            }
        });
        let (items, bytes) = {
            let s = self.seg(id);
            (u64::from(s.live_items), u64::from(s.live_bytes))
        };
        self.unlink(id);
        self.push_free(id);
        let m = self.meta_mut();
        m.items = m.items.saturating_sub(items);
        m.bytes = m.bytes.saturating_sub(bytes);
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
