//! Rewrites in place: a store whose record has the length of the key's current one goes where
//! that one lies, if the segment's expiry suits the new TTL as well as an append would. Loads
//! that rewrite (counters, fixed-size values) then take no segment space and drive no eviction,
//! and a shared cache's stores to existing keys need no exclusive lock.
//!
//! - `Segcache::overwrite_in_place` is the engine's own, under `&mut self`.
//! - `Segcache::rewrite_shared` (in `shared::rewrite`) is `SharedCache::set`'s, under the shard's
//!   read lock; it uses `in_place_target` too.
//!
//! Both require the old record's *layout*, not only its length: client flags take 4 bytes only
//! when non-zero, so a record with flags and a value 4 bytes shorter has the length of one
//! without, with its key and value elsewhere (`record::same_layout`). Writing only the flags and
//! the value over such a record once lost the item.
//!
//! Neither runs with a file: an append publishes its record only once whole (the slot store),
//! so a crash leaves the old value or the new one, where a crash in the middle of a rewrite
//! would leave a mix of both.

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::memory::prefetch;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::Found;
use crate::record;
use crate::segments::append::expiry_fits;
use crate::{ttl, Segcache};

impl Segcache {
    /// Where a record of `len` bytes for `key` with client flags `flags` (and a client-chosen CAS
    /// value if `explicit`) may be rewritten: the key's live record, if it has that layout and its
    /// segment's expiry suits `expire_at` (see `expiry_fits`); with its slot, and whether it is
    /// stale or its recache token was handed out.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn in_place_target(
        &self,
        key: &[u8],
        h: u64,
        len: usize,
        flags: u32,
        explicit: bool,
        ttl: u32,
        expire_at: u32,
        now: u32,
    ) -> Option<(Loc, Found<'static>, bool)> {
        if self.durable {
            return None;
        }
        let found = self.table().find(h, |loc| {
            // The rewrite writes the record's last line too, which the key comparison does not
            // read: fetch it beside the first rather than at the write (criterion's set of
            // random cold keys: 330 -> 309 ns).
            let last = loc.seg as usize * self.geo.segment_size + loc.offset as usize + len - 1;
            prefetch(self.mem.heap.wrapping_add(last));
            self.key_at(loc, key)
        })?;
        let (item, found) = self.item_of(found, h, now)?;
        let loc = slot::slot_loc(found.value);
        let old_explicit = self.record(loc)?.stamp.cas_hi.is_some();
        let old_len = record::record_len(item.key.len(), item.value.len(), item.flags, old_explicit);
        let same_layout = record::same_layout(old_len, item.flags, old_explicit, len, flags, explicit);
        let marked = item.state.stale || item.state.token_sent;
        (same_layout && expiry_fits(self.seg(loc.seg), expire_at, ttl::width_of(ttl))).then_some((loc, found, marked))
    }

    /// Rewrites the key's record in place if `in_place_target` allows; `false` leaves the store
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
        len: usize,
        ttl: u32,
        expire_at: u32,
        now: u32,
    ) -> bool {
        let explicit = stamp.cas_hi.is_some();
        let Some((loc, found, _)) = self.in_place_target(key, h, len, flags, explicit, ttl, expire_at, now) else {
            return false;
        };
        let access = record::access_code(now.saturating_sub(self.seg(loc.seg).create_at));
        let at = loc.offset as usize;
        record::write(&mut self.seg_space(loc.seg)[at..at + len], key, value, flags, record::Stamp { access, ..stamp });
        if !keep_fetched && found.value & slot::FETCHED != 0 {
            found.slot.store(found.value & !slot::FETCHED, Relaxed);
        }
        self.table().touch_info(h, now);
        true
    }
}
