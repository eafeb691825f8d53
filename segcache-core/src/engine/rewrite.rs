//! Rewrites in place: a store whose record has the length of the key's current one goes where
//! that one lies, if the segment's expiry suits the new TTL as well as an append would. Loads
//! that rewrite (counters, fixed-size values) then take no segment space and drive no eviction,
//! and a shared cache's stores to existing keys need no exclusive lock.
//!
//! - `Segcache::overwrite_in_place` is the engine's own, under `&mut self`.
//! - `Segcache::rewrite_shared` is `SharedCache::set`'s, under the shard's read lock, which keeps
//!   out every writer that moves, frees or reuses a record, and under the lock bit of the key's
//!   chain, which keeps out other rewrites of the chain (see `lock::lock_word`). It writes the
//!   CAS counter, the client flags and the value only, so that reads under the read lock that
//!   compare keys are not raced, and only records that lock-free reads copy (`PEEK_BYTES`), so that readers of
//!   larger items, who are handed references under the read lock, never see one change. Readers
//!   of small items copy them and keep the copy only if the chain's info word did not change
//!   meanwhile (`ShardView::peek`); its version is bumped as the rewrite leaves.
//!
//! Both require the old record's *layout*, not only its length: client flags take 4 bytes only
//! when non-zero, so a record with flags and a value 4 bytes shorter has the length of one
//! without, with its key and value elsewhere (`record::same_layout`). Writing only the flags and
//! the value over such a record once lost the item.
//!
//! Neither runs with a file: an append publishes its record only once whole (the slot store),
//! so a crash leaves the old value or the new one, where a crash in the middle of a rewrite
//! would leave a mix of both.

use crate::engine::memory::prefetch;
use crate::engine::write::check_key;
use std::sync::atomic::Ordering::Relaxed;

use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::Found;
use crate::record;
use crate::segments::append::expiry_fits;
use crate::shared::lock::{lock_word, unlock_word};
use crate::shared::peek::PEEK_BYTES;
use crate::ttl_buckets::expire::expiry_of;
use crate::{ttl, Segcache};

impl Segcache {
    /// Where a record of `len` bytes for `key` with client flags `flags` (and a client-chosen CAS
    /// value if `explicit`) may be rewritten: the key's live record, if it has that layout and its
    /// segment's expiry suits `expire_at` (see `expiry_fits`); with its slot, and whether it is
    /// stale or its recache token was handed out.
    #[allow(clippy::too_many_arguments)]
    fn in_place_target(
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

    /// `set` of an existing key with a value of its current length (`ttl` in seconds), for a
    /// caller that holds the shard's read lock (see the module docs); `false` leaves the store
    /// to the exclusive path.
    pub(crate) fn rewrite_shared(&self, key: &[u8], h: u64, value: &[u8], flags: u32, ttl: u32) -> bool {
        let len = record::record_len(key.len(), value.len(), flags, false);
        if self.durable || len > PEEK_BYTES || check_key(key).is_err() {
            return false;
        }
        let now = self.now();
        // Stores run the shard's expiry once a second (`prepare_write`): the exclusive path takes
        // each second's first.
        if now != self.meta().last_expire {
            return false;
        }
        let info = self.table().info(h);
        let old = lock_word(info, slot::INFO_LOCKED);
        // A stale item, or one whose recache token is out, takes the exclusive path, which
        // writes its state afresh.
        let Some((loc, found, false)) = self.in_place_target(key, h, len, flags, false, ttl, expiry_of(ttl, now), now)
        else {
            unlock_word(info, old);
            return false;
        };
        let record = loc.seg as usize * self.geo.segment_size + loc.offset as usize;
        let Some(header) = self.record(loc).map(|r| r.len - r.key.len() - r.value.len()) else {
            unlock_word(info, old);
            return false;
        };
        let cas_at = header - 4 - if flags != 0 { 4 } else { 0 };
        let cas = self.next_cas();
        // A new version: not fetched yet, accessed now. (A reader of the old version may still
        // set the fetched bit, as if it had read this one.)
        found.slot.fetch_and(!slot::FETCHED, Relaxed);
        let age = now.saturating_sub(self.seg(loc.seg).create_at);
        self.record_byte(loc, record::ACCESS_AT).store(record::access_code(age), Relaxed);
        // SAFETY: `loc` holds the key's live record of `len` bytes and of the layout written
        // (client flags present iff `flags != 0`), inside its segment (just found
        // through the chain), so the ranges written lie in the heap. The caller's read lock keeps
        // out every writer that could move, free or reuse the record, the chain's lock bit every
        // other rewrite of it (no other chain points at it), and no reference to these bytes
        // exists: reads under the read lock reference only the header and key of records this
        // small, and lock-free reads copy through atomics and drop what the info word says
        // changed. `ptr::copy` allows `value` to overlap (it cannot, but costs nothing).
        unsafe {
            let dst = self.mem.heap.add(record);
            std::ptr::copy(cas.to_le_bytes().as_ptr(), dst.add(cas_at), 4);
            if flags != 0 {
                // Same layout (`in_place_target`): the old record has client flags too.
                std::ptr::copy(flags.to_le_bytes().as_ptr(), dst.add(cas_at + 4), 4);
            }
            std::ptr::copy(value.as_ptr(), dst.add(len - value.len()), value.len());
        }
        unlock_word(info, slot::touched(old, now));
        true
    }
}
