//! `SharedCache::set`'s rewrite in place (`Segcache::rewrite_shared`), under the shard's read
//! lock, which keeps out every writer that moves, frees or reuses a record, and under the lock
//! bit of the key's chain, which keeps out other rewrites of the chain (see `lock::lock_word`).
//! It writes the CAS counter, the client flags and the value only, so that reads under the read
//! lock that compare keys are not raced, and only records that lock-free reads copy
//! (`PEEK_BYTES`), so that readers of larger items, who are handed references under the read
//! lock, never see one change. Readers of small items copy them and keep the copy only if the
//! chain's info word did not change meanwhile (`ShardView::peek`); its version is bumped as the
//! rewrite leaves. Where a rewrite may go, and why it needs the old record's layout, is
//! `engine::rewrite`'s.

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::rewrite::InPlace;
use crate::engine::write::valid_key;
use crate::engine::Segcache;
use crate::hashtable::slot;
use crate::record;
use crate::record::PEEK_BYTES;
use crate::sync::lock::{lock_word, unlock_word};
use crate::ttl_buckets::expire::expiry_of;

impl Segcache {
    /// Whether `rewrite_shared` may run: always without a file. With one, rewrites must run one
    /// at a time per shard (`engine::undo`), which a read lock ensures only where it is a
    /// mutex: processes sharing the file.
    #[inline]
    pub(crate) fn rewrites_shared(&self) -> bool {
        !self.durable || self.exclusive_reads
    }

    /// `set` of an existing key with a value of its current length (`ttl` in seconds), for a
    /// caller that holds the shard's read lock (see the module docs); returns the item's new CAS
    /// value, or `None` to leave the store to the exclusive path.
    pub(crate) fn rewrite_shared(&self, key: &[u8], h: u64, value: &[u8], flags: u32, ttl: u32) -> Option<u64> {
        let len = record::record_len(key.len(), value.len(), flags, record::CasForm::Wide);
        // After a lazily verified reopen, a segment must be checked before anything changes it.
        // A listener is told of the replaced version under the exclusive lock, with its old
        // bytes (`overwrite_in_place`): the exclusive path does that, and it brings back the
        // items that reads on the tier asked for (`promote_before_write`).
        if !self.rewrites_shared()
            || len > PEEK_BYTES
            || self.unchecked.is_some()
            || self.hears_replacements()
            || self.tier.as_deref().is_some_and(|t| t.wanted.any())
            || !valid_key(key)
        {
            return None;
        }
        let now = self.now();
        // Each second's first store starts the shard's expiry pass (`prepare_write`): the
        // exclusive path takes it.
        if now != self.meta().last_expire {
            return None;
        }
        let info = self.table().info(h);
        let old = lock_word(info, slot::INFO_LOCKED);
        // A stale item, or one whose recache token is out, takes the exclusive path, which
        // writes its state afresh.
        let target = self.in_place_target(key, h, value.len(), flags, false, ttl, expiry_of(ttl, now), now);
        let Some(InPlace { loc, found, marked: false, form, base, len }) = target else {
            unlock_word(info, old);
            return None;
        };
        let record = loc.seg as usize * self.geo.segment_size + loc.offset as usize;
        // The same layout as the new record: the same key and value lengths.
        let header = len - key.len() - value.len();
        let cas_at = header - form.bytes() - if flags != 0 { 4 } else { 0 };
        let cas = self.next_cas();
        // A narrow record holds only a counter less than 2^16 above its segment's base: past
        // that, the exclusive path appends the item (the counter taken is skipped, as any other
        // that a failed store took).
        if !form.holds(cas, base) {
            unlock_word(info, old);
            return None;
        }
        let mut cas_bytes = cas.to_le_bytes();
        if form == record::CasForm::Narrow {
            cas_bytes[..2].copy_from_slice(&(cas.wrapping_sub(base) as u16).to_le_bytes());
        }
        // A new version: not fetched yet, accessed now. (A reader of the old version may still
        // set the fetched bit, as if it had read this one.)
        if found.value & slot::FETCHED != 0 {
            found.slot.fetch_and(!slot::FETCHED, Relaxed);
        }
        let age = now.saturating_sub(self.seg(loc.seg).create_at);
        self.record_byte(loc, record::ACCESS_AT).store(record::access_code(age), Relaxed);
        // With a file, this rewrite runs alone in the shard (`rewrites_shared`).
        let rewrite = self.begin_rewrite(loc, len);
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
            std::ptr::copy(cas_bytes.as_ptr(), dst.add(cas_at), form.bytes());
            if flags != 0 {
                // Same layout (`in_place_target`): the old record has client flags too.
                std::ptr::copy(flags.to_le_bytes().as_ptr(), dst.add(cas_at + form.bytes()), 4);
            }
            std::ptr::copy(value.as_ptr(), dst.add(len - value.len()), value.len());
        }
        self.end_rewrite(loc, len, rewrite);
        unlock_word(info, slot::touched(old, now));
        Some(self.cas_of(cas))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::builder::Builder;
    use crate::clock::ManualClock;
    use crate::engine::read::ReadOptions;
    use crate::engine::write::{Mode, StoreOptions};
    use crate::shared::handle::SharedCache;

    fn set(c: &SharedCache, key: &[u8], value: &[u8]) -> u64 {
        c.store_with(key, value, 0, Duration::ZERO, Mode::Set, StoreOptions::default()).unwrap()
    }

    /// Under the shared lock too, a rewrite keeps the record's CAS form: a narrow record whose
    /// new counter lies 2^16 or more above its segment's base is left to the exclusive path,
    /// which appends it (wide, in the same open segment); a wide one is rewritten in place.
    #[test]
    fn a_shared_rewrite_whose_counter_does_not_fit_goes_to_the_exclusive_path() {
        let c = Builder::new()
            .heap_size(4 << 20)
            .segment_size(64 << 10)
            .shards(1)
            .clock(ManualClock::new(1_700_000_000))
            .build_shared()
            .unwrap();
        let shard = c.shard_at(0);
        let at = |c: &SharedCache| c.shard_at(0).read().record_location(b"k").unwrap();
        let v1 = set(&c, b"k", b"value-1");
        let first = at(&c);
        let writes = shard.writes();
        let v2 = set(&c, b"k", b"value-2");
        assert_eq!((shard.writes(), at(&c)), (writes, first), "in place, under the shared lock");
        *shard.write().meta_mut().next_cas.get_mut() += 70_000;
        let writes = shard.writes();
        let v3 = set(&c, b"k", b"value-3");
        assert_eq!(shard.writes(), writes + 1, "the exclusive path");
        let third = at(&c);
        assert_ne!(third, first, "appended");
        let v4 = set(&c, b"k", b"value-4");
        assert_eq!((shard.writes(), at(&c)), (writes + 1, third), "a wide record: in place, under the shared lock");
        assert!(v1 < v2 && v2 < v3 && v3 < v4);
        let item = c.get(b"k").unwrap();
        assert_eq!((item.value, item.cas), (b"value-4".to_vec(), v4));
        assert_eq!(c.stats().items, 1);
    }

    /// The exclusive path appends a key whose narrow record a shared rewrite outgrew wide, even
    /// into a segment opened since (whose base would take the counter narrow): the key's later
    /// stores are rewritten in place under the shared lock again, however many stores to other
    /// keys come between.
    #[test]
    fn a_key_that_outgrew_its_narrow_record_is_rewritten_under_the_shared_lock_again() {
        let c = Builder::new().heap_size(4 << 20).segment_size(64 << 10).shards(1).build_shared().unwrap();
        let shard = c.shard_at(0);
        let at = |key: &[u8]| c.shard_at(0).read().record_location(key).unwrap();
        set(&c, b"k", b"value-1");
        let first = at(b"k");
        *shard.write().meta_mut().next_cas.get_mut() += 70_000;
        // Fill the open segment: the next append goes to a segment opened after the skip.
        let open = (1..)
            .map(|i| {
                let key = format!("filler-{i}");
                set(&c, key.as_bytes(), &[b'f'; 500]);
                at(key.as_bytes()).0
            })
            .find(|&seg| seg != first.0)
            .unwrap();
        let writes = shard.writes();
        set(&c, b"k", b"value-2");
        let second = at(b"k");
        assert_eq!((shard.writes(), second.0), (writes + 1, open), "appended");
        for round in 0..3 {
            *shard.write().meta_mut().next_cas.get_mut() += 70_000;
            let writes = shard.writes();
            let cas = set(&c, b"k", format!("value-{}", round + 3).as_bytes());
            assert_eq!((shard.writes(), at(b"k")), (writes, second), "round {round}: in place, under the shared lock");
            let item = c.get(b"k").unwrap();
            assert_eq!((item.value, item.cas), (format!("value-{}", round + 3).into_bytes(), cas));
        }
    }

    /// A rewrite under the shared lock is a new version, not fetched yet, whether or not the old
    /// one was (it clears the slot's fetched bit only when set).
    #[test]
    fn a_shared_rewrite_is_not_fetched_yet() {
        let c = Builder::new().heap_size(4 << 20).segment_size(64 << 10).shards(1).build_shared().unwrap();
        let quiet = ReadOptions { no_update: true, ..ReadOptions::default() };
        let fetched = |c: &SharedCache| c.get_with_options(b"k", quiet, |i| (i.fetched(), i.value().to_vec())).unwrap();
        set(&c, b"k", b"value-1");
        let writes = c.shard_at(0).writes();
        c.get(b"k").unwrap();
        assert_eq!(fetched(&c), (true, b"value-1".to_vec()));
        set(&c, b"k", b"value-2");
        assert_eq!(fetched(&c), (false, b"value-2".to_vec()), "a read version rewritten");
        set(&c, b"k", b"value-3");
        assert_eq!(fetched(&c), (false, b"value-3".to_vec()), "an unread version rewritten");
        c.get(b"k").unwrap();
        assert_eq!(fetched(&c), (true, b"value-3".to_vec()));
        assert_eq!(c.shard_at(0).writes(), writes, "every rewrite in place, under the shared lock");
    }
}
