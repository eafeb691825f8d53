//! Items larger than a segment holds (up to `Builder::max_item_size`): stored as chunk records
//! behind a head record under the key, and gathered again by reads.
//!
//! - The head is an ordinary record of the key, marked `record::LARGE_HEAD`, whose value is a
//!   descriptor (`Descriptor`: the total length, the chunk count and length, the key's hash and
//!   a random id for this version), padded to `PEEK_BYTES` so that a lock-free read
//!   (`shared::peek`) always leaves it to the locked path, which gathers the chunks. The head
//!   carries the item's client flags, CAS value, TTL and state; only it is in a TTL bucket's
//!   sense "the item".
//! - Each chunk is an ordinary record under an internal key of `CHUNK_KEY_LEN` bytes (the key's
//!   hash, the version's id, the chunk's index), one byte longer than any key a user may give:
//!   no read, write or scan of a user key can reach it. Chunks take the head's TTL and are
//!   persisted, copied by merges and evicted like any record.
//! - A read that misses a chunk (evicted on its own), or finds it of another length, misses the
//!   whole item: never a partial value. Reads hold the engine shared (a `SharedCache` shard's
//!   read lock), so they only note the key (`Large::note_broken`); the next write, which holds
//!   it exclusively, removes the head and the chunks left, counted as evicted
//!   (`remove_broken_heads`).
//! - A store makes room for all its chunks and its head before it writes the first
//!   (`make_room_for`), so that no chunk's store evicts: under a random policy that eviction
//!   could take an earlier chunk of the same item.
//! - Item counts (`len`, `Stats::items`) count a large item once, by its head: the shard's
//!   record count less its live chunk records (`Large::chunks`).
//! - A write that replaces or deletes the head removes the chunks of its version. A head that
//!   eviction takes leaves its chunks behind, unreachable: they hold no slot a user reads, and
//!   eviction or expiry reclaims their segments as any other, so memory stays bounded.
//! - Neither heads nor chunks go to the flash tier: eviction drops them (see `engine::demote`).
//!
//! Nothing here runs for an item that fits a segment: the store path branches here only past
//! the size check that refused such items before, and the read path only on the head's mark.

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::read::ReadOptions;
use crate::engine::write::{Mode, NewState};
use crate::engine::Segcache;
use crate::error::{Error, Result};
use crate::hash::hash;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table;
use crate::item::Item;
use crate::large::{parts_in, Descriptor, CHUNK_KEY_LEN, SPARE_SEGMENTS};
use crate::meta::{bump, ReadCounters};
use crate::record::{self, Record};

impl Segcache {
    /// Bytes of value a chunk holds: what a segment holds under a chunk key, its CAS wide.
    pub(crate) fn chunk_payload(&self) -> usize {
        let overhead = record::record_len(CHUNK_KEY_LEN, 1 << 16, 0, record::CasForm::Wide) - (1 << 16);
        (self.geo.segment_size - overhead).min(record::MAX_VALUE_LEN)
    }

    /// The largest item (key and value) that `Builder::max_item_size` allows, if above what a
    /// segment holds.
    #[inline]
    pub(crate) fn large_max(&self) -> usize {
        self.large.max()
    }

    /// The largest value a shard's heap takes as chunks, one to a segment: all its segments but
    /// `SPARE_SEGMENTS`, which the other items' open segments and the eviction's work need.
    fn shard_large_max(&self) -> usize {
        self.geo.segments.saturating_sub(SPARE_SEGMENTS) * self.chunk_payload()
    }

    /// `store_at` of an item too large for a segment: its chunks, then its head. `mode` is
    /// checked first, so that a store that would fail writes nothing, and again as the head is
    /// stored (the chunks' room may have evicted the current item); a head that fails leaves
    /// no chunk behind.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn store_large(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[&[u8]],
        flags: u32,
        ttl: u32,
        mode: Mode,
        now: u32,
        st: NewState,
        invalidate: bool,
    ) -> Result<u64> {
        if self.large.holds() {
            self.large.release();
        }
        let value_len: usize = value.iter().map(|v| v.len()).sum();
        let size = key.len() + value_len;
        let max = self.max_item_size().min(self.shard_large_max().max(self.segment_item_size()));
        if size > max || self.large.max() == 0 {
            return Err(Error::TooLarge { size, max: self.max_item_size().min(max) });
        }
        match (mode, self.lookup_meta(key, h, now).map(|(item, _)| item.cas)) {
            (Mode::Add, Some(_)) | (Mode::Replace, None) => return Err(Error::NotStored),
            (Mode::Cas(_), None) => return Err(Error::NotFound),
            (Mode::Cas(c), Some(cas)) if c != cas && !invalidate => return Err(Error::Exists),
            _ => {}
        }
        let chunk_len = self.chunk_payload();
        let d = Descriptor {
            total: value_len as u64,
            chunks: value_len.div_ceil(chunk_len) as u32,
            chunk_len: chunk_len as u32,
            key_hash: h,
            id: self.version_id(h),
        };
        // Room for every chunk and the head first, so that no chunk's store evicts: an eviction
        // then could take an earlier chunk of this very item (a random policy's victim may be
        // any segment) and fail a store the cache has room for.
        self.make_room_for(d.chunks as usize + 1).map_err(|e| match e {
            Error::TooLarge { .. } => Error::TooLarge { size, max },
            e => e,
        })?;
        let sets = self.meta().sets;
        let chunk_state = NewState { keep_expiry: st.keep_expiry, ..NewState::default() };
        for i in 0..d.chunks {
            let from = i as usize * chunk_len;
            let parts = parts_in(value, from, from + d.len_of(i));
            let ck = d.chunk_key(i);
            if let Err(e) = self.store_at(&ck, hash(&ck), &parts, 0, ttl, Mode::Set, now, chunk_state, false) {
                self.drop_chunks(&d);
                self.meta_mut().sets = sets;
                return Err(e);
            }
            self.large.chunks += 1;
        }
        // The chunks are not stores a client made.
        self.meta_mut().sets = sets;
        let head = d.encode();
        let head_state = NewState { large: true, ..st };
        let cas = match self.store_at(key, h, &[&head], flags, ttl, mode, now, head_state, invalidate) {
            Ok(cas) => cas,
            Err(e) => {
                self.drop_chunks(&d);
                return Err(e);
            }
        };
        // Room for the last chunks may have evicted the first (a heap the item nearly fills):
        // the store then fails whole rather than leave an item that reads miss.
        if !self.chunks_present(&d, now) {
            if let Some(found) = self.find_key(key, h) {
                let loc = slot::slot_loc(found.value);
                self.kill(loc);
                self.remove_slot(h, found.slot);
            }
            self.drop_chunks(&d);
            return Err(Error::TooLarge { size, max: self.shard_large_max() });
        }
        Ok(cas)
    }

    /// Frees segments until `n` can be taken without evicting (by expiry, else by the policy's
    /// eviction, else FIFO's: `free_step`). `NoMemory` when eviction is off and the
    /// free segments are too few; `TooLarge` when the shard may never hold `n` at once.
    fn make_room_for(&mut self, n: usize) -> Result<()> {
        if n + SPARE_SEGMENTS > self.segment_cap() as usize + 1 {
            return Err(Error::TooLarge { size: 0, max: 0 });
        }
        let rounds = 3 * self.geo.segments + n;
        for round in 0..=rounds {
            if self.free_room() >= n {
                return Ok(());
            }
            self.free_step(round)?;
        }
        Err(Error::NoMemory)
    }

    /// Whether the record at `loc` is a chunk's (its key is longer than a user's may be).
    #[inline]
    pub(crate) fn is_chunk_at(&self, loc: Loc) -> bool {
        self.seg_bytes(loc.seg)
            .get(loc.offset as usize..)
            .and_then(record::header)
            .is_some_and(|h| h.key_len > crate::record::MAX_KEY_LEN)
    }

    /// Counts the live chunk records again, from the table: after an open of a file, whose
    /// chunks this process did not store.
    pub(crate) fn recount_chunks(&mut self) {
        let t = self.table();
        let ids = self.tier.as_deref().map(|t| t.ids);
        let mut n = 0u64;
        for chain in 0..=t.mask() {
            t.scan(chain, |_, v| {
                let loc = slot::slot_loc(v);
                let on_flash = ids.and_then(|ids| ids.flash_index(loc.seg)).is_some();
                if !on_flash && (loc.seg as usize) < self.geo.segments && self.is_chunk_at(loc) {
                    n += 1;
                }
                false
            });
        }
        self.large.chunks = n;
    }

    /// Removes the heads that reads found with a chunk missing (`Large::note_broken`), and
    /// what is left of their chunks, as evicted: reads hold the engine shared and cannot.
    /// A head that is whole again (a new version stored since) stays.
    #[cold]
    #[inline(never)]
    pub(crate) fn remove_broken_heads(&mut self, now: u32) {
        for key in self.large.take_broken() {
            let h = hash(&key);
            let Some((found, r)) = self.find_record(&key, h) else { continue };
            if !r.stamp.large {
                continue;
            }
            let Some(d) = Descriptor::decode(r.value) else { continue };
            if self.chunks_present(&d, now) {
                continue;
            }
            let loc = slot::slot_loc(found.value);
            self.tell_removal(loc, found.value, crate::listener::RemovalCause::Evicted);
            self.kill(loc);
            self.remove_slot(h, found.slot);
            self.drop_chunks(&d);
            let m = self.meta_mut();
            m.evicted_items += 1;
            m.evicted_unfetched += u64::from(found.value & slot::FETCHED == 0);
        }
    }

    /// Notes the head of `key` (descriptor `v`) for removal by the next write when a chunk of
    /// it is missing (not when assembling failed for want of memory).
    #[cold]
    fn note_if_broken(&self, key: &[u8], v: &[u8], now: u32) {
        if Descriptor::decode(v).is_some_and(|d| !self.chunks_present(&d, now)) {
            self.large.note_broken(key);
        }
    }

    /// A new version's id: the key's hash, the shard's counters and the clock's nanoseconds,
    /// mixed, so that two versions of a key (in this process or after a restart) differ.
    fn version_id(&self, h: u64) -> u64 {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut seed = [0u8; 40];
        seed[0..8].copy_from_slice(&h.to_le_bytes());
        seed[8..12].copy_from_slice(&self.meta().next_cas.load(Relaxed).to_le_bytes());
        seed[12..20].copy_from_slice(&self.meta().next_seq.to_le_bytes());
        seed[20..36].copy_from_slice(&nanos.to_le_bytes());
        seed[36..40].copy_from_slice(&(self.cas_offset as u32).to_le_bytes());
        hash(&seed)
    }

    /// The live record of chunk `index` of `d`, unless it is gone, expired or of another length.
    fn chunk(&self, d: &Descriptor, index: u32, now: u32) -> Option<Record<'_>> {
        let ck = d.chunk_key(index);
        let mut rec = None;
        let found = self.table().find(hash(&ck), |loc| {
            rec = self.keyed_record(loc, &ck);
            rec.is_some()
        })?;
        self.live_expiry(slot::slot_loc(found.value).seg, now)?;
        rec.filter(|r| r.value.len() == d.len_of(index))
    }

    /// Whether every chunk of `d` is there.
    fn chunks_present(&self, d: &Descriptor, now: u32) -> bool {
        (0..d.chunks).all(|i| self.chunk(d, i, now).is_some())
    }

    /// The value of the head whose descriptor is `v`, gathered from its chunks; `None` if one
    /// is missing.
    fn assemble(&self, v: &[u8], now: u32) -> Option<Vec<u8>> {
        let d = Descriptor::decode(v)?;
        let mut out = Vec::new();
        out.try_reserve_exact(usize::try_from(d.total).ok()?).ok()?;
        for i in 0..d.chunks {
            out.extend_from_slice(self.chunk(&d, i, now)?.value);
        }
        Some(out)
    }

    /// For `item_in`, of the record in `found` whose value `v` has a head's length: `v` itself
    /// unless the record is a head; else the value its descriptor names, assembled and held
    /// until a write frees it (`Large::release`), or `None` when a chunk is missing or too many
    /// bytes are held already. The record's mark is read again here, so that the hit path keeps
    /// nothing of it.
    #[cold]
    #[inline(never)]
    pub(crate) fn value_of_head<'a>(&'a self, found: table::Found<'static>, v: &'a [u8]) -> Option<&'a [u8]> {
        let Some(r) = self.record(slot::slot_loc(found.value)).filter(|r| r.stamp.large) else {
            return Some(v);
        };
        // The clock is read again here, so that the hit path keeps no time for this call.
        let now = self.now();
        let Some(value) = self.assemble(v, now) else {
            self.note_if_broken(r.key, v, now);
            return None;
        };
        self.large.hold(value)
    }

    /// `item_in` for a head, for a write that needs only the item's metadata (its CAS value,
    /// flags and expiry): the chunks are checked, not copied. The item's value is the
    /// descriptor.
    #[cold]
    #[inline(never)]
    pub(crate) fn large_meta<'a>(
        &'a self,
        found: table::Found<'static>,
        r: Record<'a>,
        now: u32,
    ) -> Option<(Item<'a>, table::Found<'static>)> {
        let d = Descriptor::decode(r.value)?;
        if !self.chunks_present(&d, now) {
            self.large.note_broken(r.key);
            return None;
        }
        self.item_raw(found, r, now)
    }

    /// A read of the head in `found` (record `r`) that hands the item to `f` at once: the value
    /// is assembled in a buffer of the call's own, which nothing holds after it. Counted as a
    /// hit, or as a miss when a chunk is missing.
    #[cold]
    #[inline(never)]
    pub(crate) fn large_get_with<R>(
        &self,
        found: table::Found<'static>,
        r: Record<'_>,
        h: u64,
        counters: &ReadCounters,
        opts: &ReadOptions,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Option<R> {
        let now = self.now();
        let Some((mut item, found)) = self.item_raw(found, r, now) else {
            counters.miss(None);
            return None;
        };
        let Some(value) = self.assemble(r.value, now) else {
            self.note_if_broken(r.key, r.value, now);
            counters.miss(None);
            return None;
        };
        let coin = bump(&counters.hits);
        self.note_read(found, &mut item.state, item.expire_at, item.now, opts, coin ^ h);
        item.value = &value;
        Some(f(item))
    }

    /// For `store_at`: the key's slot `f` gets `new` in place of the large item's head at `loc`,
    /// whose chunks go too (after the slot is put: removing slots may move others in their
    /// chains).
    #[cold]
    #[inline(never)]
    pub(crate) fn replace_head(&mut self, loc: Loc, h: u64, f: table::Found<'static>, new: u64) {
        let d = self.record(loc).and_then(|r| Descriptor::decode(r.value));
        self.kill(loc);
        self.table().put(h, f.slot, new);
        if let Some(d) = d {
            self.drop_chunks(&d);
        }
    }

    /// Removes the chunks of the version `d` describes, those still there: its head was
    /// replaced or deleted, or its store failed. Not told to a listener, nor counted: chunks are
    /// not items.
    #[cold]
    #[inline(never)]
    pub(crate) fn drop_chunks(&mut self, d: &Descriptor) {
        for i in 0..d.chunks {
            let ck = d.chunk_key(i);
            let ch = hash(&ck);
            if let Some(found) = self.table().find(ch, |loc| self.key_at(loc, &ck)) {
                self.kill(slot::slot_loc(found.value));
                self.remove_slot(ch, found.slot);
            }
        }
    }
}
