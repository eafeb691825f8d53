//! Rewrites in place: a store whose record has the length of the key's current one goes where
//! that one lies, if the segment's expiry suits the new TTL as well as an append would. Loads
//! that rewrite (counters, fixed-size values) then take no segment space and drive no eviction,
//! and a shared cache's stores to existing keys need no exclusive lock.
//!
//! - `Segcache::overwrite_in_place` is the engine's own, under `&mut self`.
//! - `Segcache::rewrite_shared` (in `engine::shared_rewrite`) is `SharedCache::set`'s, under the shard's
//!   read lock; it uses `in_place_target` too.
//!
//! Both require the old record's *layout*, not only its length: client flags take 4 bytes only
//! when non-zero, so a record with flags and a value 4 bytes shorter has the length of one
//! without, with its key and value elsewhere (`record::same_layout`). Writing only the flags and
//! the value over such a record would write them over its key and lose the item.
//!
//! The new record keeps the old one's CAS form (`record::CasForm`): a wide one holds any counter,
//! but a narrow one only a counter less than 2^16 above its segment's base; a new counter beyond
//! that leaves the store to an append, which holds the counter wide (`Overwrite::Append { wide }`).
//! Every store takes a new counter, so in a cache that rewrites, a segment's base falls 2^16
//! behind within 2^16 stores to its shard: were the append narrow again, a key rewritten less
//! often than that would be appended on every store, leaving a dead copy each time that takes
//! space until a merge and so lowers the hit ratio. Held wide, it is rewritten in place from
//! then on.
//!
//! In a file, a crash in the middle of a rewrite would leave a mix of both values: there each
//! rewrite saves the old record first (`engine::undo`), which recovery puts back, and records
//! too large for that are appended.

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::Segcache;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::Found;
use crate::prefetch::prefetch;
use crate::record;
use crate::segments::append::expiry_fits;
use crate::ttl_buckets::ttl;

/// What `Segcache::overwrite_in_place` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overwrite {
    /// The key's record was rewritten in place.
    Done,
    /// The store is left to an append. `wide`: the key's record had the new one's layout, but
    /// its narrow CAS could not hold the new counter; the append holds it wide, so that the
    /// key's next stores are rewritten in place again. `absent`: the key's chain holds no slot
    /// of it, so the append has no old copy to replace (an append evicts and moves only items
    /// that are there).
    Append { wide: bool, absent: bool },
}

/// Why `Segcache::in_place_lookup` found no record to rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotInPlace {
    /// The key's chain holds no slot of it.
    Absent,
    /// The key has a slot whose record cannot be rewritten, or may have one (not looked for).
    Elsewhere,
}

/// A record that a store may rewrite in place (`Segcache::in_place_target`).
pub(crate) struct InPlace {
    pub loc: Loc,
    /// Its slot.
    pub found: Found<'static>,
    /// Stale, or its recache token was handed out.
    pub marked: bool,
    /// Its CAS form and its segment's base, which the new record keeps (the caller checks that
    /// its counter fits: `CasForm::holds`).
    pub form: record::CasForm,
    pub base: u32,
    /// Its length in bytes (the new record's too).
    pub len: usize,
}

impl Segcache {
    /// Where a record for `key` with a `value_len`-byte value and client flags `flags` (and a
    /// client-chosen CAS value if `explicit`) may be rewritten: the key's live record, if it has
    /// that layout (`record::same_layout`) and its segment's expiry suits `expire_at` (see
    /// `expiry_fits`).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn in_place_target(
        &self,
        key: &[u8],
        h: u64,
        value_len: usize,
        flags: u32,
        explicit: bool,
        ttl: u32,
        expire_at: u32,
        now: u32,
    ) -> Option<InPlace> {
        self.in_place_lookup(key, h, value_len, flags, explicit, ttl, expire_at, now).ok()
    }

    /// `in_place_target`, saying why not when there is none.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn in_place_lookup(
        &self,
        key: &[u8],
        h: u64,
        value_len: usize,
        flags: u32,
        explicit: bool,
        ttl: u32,
        expire_at: u32,
        now: u32,
    ) -> Result<InPlace, NotInPlace> {
        let len = record::record_len(key.len(), value_len, flags, record::CasForm::Narrow);
        if !self.may_rewrite(len) {
            return Err(NotInPlace::Elsewhere);
        }
        let mut old = None;
        let found = self.table().find(h, |loc| {
            // The rewrite writes the record's last line too, which the key comparison does not
            // read: fetch it beside the first, so that its miss overlaps the comparison's
            // rather than stalling the write.
            let last = loc.seg as usize * self.geo.segment_size + loc.offset as usize + len - 1;
            prefetch(self.mem.heap.wrapping_add(last));
            old = self.keyed_record(loc, key);
            old.is_some()
        });
        let (Some(found), Some(old)) = (found, old) else { return Err(NotInPlace::Absent) };
        // As the record lies: a large item's head is never rewritten (`same_layout`), so its chunks
        // need no look.
        let (item, found) = self.item_raw(found, old, now).ok_or(NotInPlace::Elsewhere)?;
        let loc = slot::slot_loc(found.value);
        let same_layout = record::same_layout(&old, value_len, flags, explicit);
        let marked = item.state.stale || item.state.token_sent;
        let seg = self.seg(loc.seg);
        (same_layout && self.may_rewrite(old.len) && expiry_fits(seg, expire_at, ttl::width_of(ttl)))
            .then_some(InPlace { loc, found, marked, form: old.form(), base: seg.cas_base, len: old.len })
            .ok_or(NotInPlace::Elsewhere)
    }

    /// Rewrites the key's record in place if `in_place_target` allows; otherwise leaves the store
    /// to an append.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn overwrite_in_place(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[&[u8]],
        flags: u32,
        stamp: record::Stamp,
        keep_fetched: bool,
        value_len: usize,
        ttl: u32,
        expire_at: u32,
        now: u32,
    ) -> Overwrite {
        let explicit = stamp.cas_hi.is_some();
        let InPlace { loc, found, form, base, .. } =
            match self.in_place_lookup(key, h, value_len, flags, explicit, ttl, expire_at, now) {
                Ok(target) => target,
                Err(why) => return Overwrite::Append { wide: false, absent: why == NotInPlace::Absent },
            };
        // A narrow record whose new counter lies too far from its segment's base cannot hold it.
        if !explicit && !form.holds(stamp.cas, base) {
            return Overwrite::Append { wide: true, absent: false };
        }
        let access = record::access_code(now.saturating_sub(self.seg(loc.seg).create_at));
        let (at, len) = (loc.offset as usize, record::record_len(key.len(), value_len, flags, form));
        let stamp = record::Stamp { access, ..stamp };
        // The old version is told of while its bytes are still there.
        self.tell_owner_removal(loc, found.value, crate::listener::RemovalCause::Replaced);
        let rewrite = self.begin_rewrite(loc, len);
        // The same key and layout (`in_place_lookup`): the key's bytes stay.
        record::write_over(&mut self.seg_space(loc.seg)[at..at + len], key.len(), value, flags, stamp, form, base);
        self.end_rewrite(loc, len, rewrite);
        if !keep_fetched && found.value & slot::FETCHED != 0 {
            found.slot.store(found.value & !slot::FETCHED, Relaxed);
        }
        self.table().touch_info(h, now);
        Overwrite::Done
    }
}
