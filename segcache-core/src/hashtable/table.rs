//! The compact chained hash table.
//!
//! A slot (64 bits) packs `tag: 12 | freq: 8 | segment: 22 | offset: 22` (high to low). The first
//! slot of a chain's head bucket is the bucket info: `chain length: 8 | timestamp: 16 | locked: 1
//! | unused: 7 | version: 32` (low to high). The version is not the items' CAS value (each
//! record holds its own, see `record`); it only tells lock-free readers that the chain changed.
//! A full bucket chains to an overflow bucket through its last slot. The lock bit is held by a rewrite in place (`Segcache::rewrite_shared`), which
//! bumps the version as it leaves, so the info word versions the chain's values for readers
//! that take no lock (see `lock::lock_word`).
//!
//! Beside the buckets, a *tag summary* keeps one byte per chain: bit `tag % 8` is set for every
//! item in the chain (and maybe for some that left it). A lookup whose bit is clear is a miss
//! without reading the bucket: the summary is 1/64 of the primary buckets, small enough to stay
//! in the processor's caches where the buckets mostly do not. It is derived data, rebuilt from
//! the buckets when a file is reopened, never stored.
//!
//! Writers hold the engine exclusively, except rewrites in place, which hold the shard's read
//! lock and their chain's lock bit, and change only a value and its client flags. Readers only
//! ever change a slot's frequency field: under
//! the shard's read lock with a plain store (only another reader can race it, and a lost
//! increment is harmless), and without a lock (`peek`) with a compare-exchange, since a writer
//! may have reused the slot meanwhile.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

use crate::hashtable::bucket::{Bucket, Pool};
use crate::hashtable::slot::{
    freq_due, info_chain_len, pack, slot_freq, slot_loc, slot_tag, summary_bit, tag_of, touched, Loc, FETCHED,
    FREQ_SHIFT, LOC_MASK,
};
use crate::prefetch::prefetch;

/// Item slots in a bucket that does not chain on (slot 7 is a link when it does).
const SLOTS: usize = 8;

/// A view of one shard's buckets: `1 << hash_power` primary buckets, then the overflow pool,
/// and the tag summary of each chain (one byte per primary bucket).
///
/// `new` checks that every chain's head bucket and summary byte exist, so the chain of a hash
/// is found without a bounds check on each lookup.
#[derive(Clone, Copy)]
pub struct Table<'a> {
    buckets: &'a [Bucket],
    summary: &'a [AtomicU8],
    mask: u64,
}

/// The result of looking for a key's slot.
#[derive(Clone, Copy)]
pub struct Found<'a> {
    pub slot: &'a AtomicU64,
    pub value: u64,
}

impl<'a> Table<'a> {
    /// A table of `chains` chains (a power of two): their head buckets, then the overflow pool,
    /// in `buckets`; one summary byte per chain.
    ///
    /// # Panics
    /// If `chains` is not a power of two, or `buckets` or `summary` is shorter than `chains`.
    pub fn new(buckets: &'a [Bucket], summary: &'a [AtomicU8], chains: usize) -> Self {
        assert!(
            chains.is_power_of_two() && buckets.len() >= chains && summary.len() >= chains,
            "a table of {chains} chains over {} buckets and {} summary bytes",
            buckets.len(),
            summary.len()
        );
        Table { buckets, summary, mask: chains as u64 - 1 }
    }

    /// The chains' count less one: a hash's chain is `hash & mask`.
    #[inline]
    pub fn mask(&self) -> u64 {
        self.mask
    }

    #[inline]
    pub fn head(&self, hash: u64) -> &'a Bucket {
        // SAFETY: `hash & mask` < `mask + 1`, the chain count, which `new` checked `buckets`
        // holds at least.
        unsafe { self.buckets.get_unchecked((hash & self.mask) as usize) }
    }

    /// The summary byte of the hash's chain.
    #[inline]
    pub(crate) fn summary_of(&self, hash: u64) -> &'a AtomicU8 {
        // SAFETY: as in `head`: `new` checked `summary` holds a byte per chain.
        unsafe { self.summary.get_unchecked((hash & self.mask) as usize) }
    }

    /// Prefetches the chain's first overflow bucket, if it has one. Reads the head: call it once
    /// the head's own prefetch has had time to arrive, so that the overflow buckets of a batch
    /// of chains are fetched together rather than each on its walk. Safe without a lock (an
    /// atomic load, a bounds-checked link, a hint).
    #[inline]
    pub fn prefetch_chain(&self, hash: u64) {
        let head = self.head(hash);
        if info_chain_len(head.slots[0].load(Relaxed)) > 0 {
            if let Some(next) = self.buckets.get(head.slots[SLOTS - 1].load(Relaxed) as usize) {
                prefetch(next as *const Bucket as *const u8);
            }
        }
    }

    /// Calls `f` on every item slot of the hash's chain until it returns `true`; returns that slot.
    #[inline]
    pub(crate) fn scan(&self, hash: u64, f: impl FnMut(&'a AtomicU64, u64) -> bool) -> Option<&'a AtomicU64> {
        self.scan_links(hash, &mut false, f)
    }

    /// `scan`, returning only whether `f` matched; sets `cut` when a link out of range ended
    /// the walk early (only a chain changing under a reader without a lock has one).
    #[inline]
    pub(crate) fn scan_cut(&self, hash: u64, cut: &mut bool, f: impl FnMut(&'a AtomicU64, u64) -> bool) -> bool {
        self.scan_links(hash, cut, f).is_some()
    }

    #[inline(always)]
    fn scan_links(
        &self,
        hash: u64,
        cut: &mut bool,
        mut f: impl FnMut(&'a AtomicU64, u64) -> bool,
    ) -> Option<&'a AtomicU64> {
        let head = self.head(hash);
        let mut left = info_chain_len(head.slots[0].load(Relaxed));
        let mut bucket = head;
        // Slot indexes rather than subslices: the walk's set-up is a few registers, and an index
        // below `end` (at most `SLOTS`) needs no bounds check.
        let mut i = 1;
        loop {
            let end = if left > 0 { SLOTS - 1 } else { SLOTS };
            while i < end {
                let slot = &bucket.slots[i];
                let v = slot.load(Relaxed);
                if v != 0 && f(slot, v) {
                    return Some(slot);
                }
                i += 1;
            }
            if left == 0 {
                return None;
            }
            let next = bucket.slots[SLOTS - 1].load(Relaxed) as usize;
            let Some(b) = self.buckets.get(next) else {
                *cut = true;
                return None;
            };
            bucket = b;
            i = 0;
            left -= 1;
        }
    }

    /// Stores an item slot of the hash's chain (one that `find`, `empty_slot` or `least_used`
    /// gave), keeping the summary up to date.
    #[inline]
    pub fn put(&self, hash: u64, slot: &AtomicU64, value: u64) {
        let s = self.summary_of(hash);
        let (bits, bit) = (s.load(Relaxed), summary_bit(slot_tag(value)));
        if bits & bit == 0 {
            s.store(bits | bit, Relaxed);
        }
        slot.store(value, Relaxed);
    }

    /// The slot of the key with this hash, `is_key` deciding between tag matches.
    #[inline]
    pub fn find(&self, hash: u64, is_key: impl FnMut(Loc) -> bool) -> Option<Found<'a>> {
        if !self.may_hold(hash) {
            return None;
        }
        self.find_in_chain(hash, is_key)
    }

    /// `find` for a caller that has asked the summary already (`may_hold`).
    #[inline]
    pub fn find_in_chain(&self, hash: u64, mut is_key: impl FnMut(Loc) -> bool) -> Option<Found<'a>> {
        let tag = tag_of(hash);
        let mut value = 0;
        let slot = self.scan(hash, |_, v| {
            if slot_tag(v) == tag && is_key(slot_loc(v)) {
                value = v;
                true
            } else {
                false
            }
        })?;
        Some(Found { slot, value })
    }

    /// The slot that points at `loc`, whatever its key.
    pub fn find_loc(&self, hash: u64, loc: Loc) -> Option<Found<'a>> {
        let bits = loc.bits();
        let mut value = 0;
        let slot = self.scan(hash, |_, v| {
            if v & LOC_MASK == bits {
                value = v;
                true
            } else {
                false
            }
        })?;
        Some(Found { slot, value })
    }

    /// The occupied slot of the chain with the lowest frequency.
    pub fn least_used(&self, hash: u64) -> Option<Found<'a>> {
        let mut best: Option<Found<'a>> = None;
        self.scan(hash, |slot, v| {
            if best.as_ref().is_none_or(|b| slot_freq(v) < slot_freq(b.value)) {
                best = Some(Found { slot, value: v });
            }
            false
        });
        best
    }

    /// First empty item slot of the chain, growing the chain with an overflow bucket if needed.
    /// `None` when the pool is exhausted.
    pub fn empty_slot(&self, hash: u64, pool: &mut Pool) -> Option<&'a AtomicU64> {
        if let Some(s) = self.scan_empty(hash) {
            return Some(s);
        }
        let head = self.head(hash);
        let info = head.slots[0].load(Relaxed);
        let chain = info_chain_len(info);
        if chain >= 255 {
            return None;
        }
        let next = if pool.free != 0 {
            let idx = pool.free as usize - 1;
            pool.free = self.buckets.get(idx)?.slots[0].load(Relaxed) as u32;
            idx
        } else {
            let idx = self.mask as usize + 1 + pool.used as usize;
            self.buckets.get(idx)?;
            pool.used += 1;
            idx
        };
        let new = &self.buckets[next];
        // Walk to the tail; its last slot's item moves to the new bucket and the slot becomes the link.
        let mut tail = head;
        for _ in 0..chain {
            tail = &self.buckets[tail.slots[SLOTS - 1].load(Relaxed) as usize];
        }
        for s in &new.slots {
            s.store(0, Relaxed);
        }
        new.slots[0].store(tail.slots[SLOTS - 1].load(Relaxed), Relaxed);
        tail.slots[SLOTS - 1].store(next as u64, Relaxed);
        head.slots[0].store((info & !0xff) | (chain as u64 + 1), Relaxed);
        Some(&new.slots[1])
    }

    /// Empties `slot` (an item slot of the hash's chain) and keeps the chain compact: the chain's
    /// last item moves into the hole, and a last bucket left empty goes back to the pool. Without
    /// this, chains would keep the longest length they ever had, and the pool would grow with
    /// every burst of collisions.
    pub fn remove(&self, hash: u64, slot: &AtomicU64, pool: &mut Pool) {
        slot.store(0, Relaxed);
        let head = self.head(hash);
        let info = head.slots[0].load(Relaxed);
        let chain = info_chain_len(info);
        if chain == 0 {
            self.refresh_head_summary(hash, head);
            return;
        }
        let mut prev = head;
        let mut tail = head;
        for _ in 0..chain {
            prev = tail;
            tail = &self.buckets[tail.slots[SLOTS - 1].load(Relaxed) as usize];
        }
        if let Some(last) = tail.slots.iter().rev().find(|s| s.load(Relaxed) != 0) {
            if !std::ptr::eq(last, slot) && slot.load(Relaxed) == 0 {
                slot.store(last.load(Relaxed), Relaxed);
                last.store(0, Relaxed);
            }
        }
        // A last bucket left empty goes back to the pool; so does one left with a single item,
        // which takes the place of the link in the bucket before. Otherwise a chain that once
        // held 8 items would keep its overflow bucket at 7 items (6 in the head, 1 beyond): a
        // bucket (and a memory access on lookups) for nothing.
        let mut items = tail.slots.iter().filter(|s| s.load(Relaxed) != 0);
        let only = match (items.next(), items.next()) {
            (None, _) => Some(0),
            (Some(s), None) => Some(s.load(Relaxed)),
            _ => None,
        };
        if let Some(v) = only {
            let idx = prev.slots[SLOTS - 1].load(Relaxed);
            prev.slots[SLOTS - 1].store(v, Relaxed);
            head.slots[0].store((info & !0xff) | (chain as u64 - 1), Relaxed);
            tail.slots[0].store(u64::from(pool.free), Relaxed);
            pool.free = idx as u32 + 1;
        }
        self.refresh_summary(hash);
    }

    /// Empties every item slot whose location `gone` selects, keeping chains compact; returns
    /// how many. Walks the whole table: for rare repairs only.
    pub fn remove_where(&self, mut gone: impl FnMut(Loc) -> bool, pool: &mut Pool) -> u64 {
        let mut removed = 0;
        for chain in 0..=self.mask {
            // A chain's index serves as its hash: `head` only uses the masked bits.
            while let Some(slot) = self.scan(chain, |_, v| gone(slot_loc(v))) {
                self.remove(chain, slot, pool);
                removed += 1;
            }
        }
        removed
    }

    /// `refresh_summary` of a chain that is its head bucket alone: the seven item slots folded
    /// without branches, where the walk would test each slot and call into its closure.
    #[inline]
    fn refresh_head_summary(&self, hash: u64, head: &Bucket) {
        let mut bits = 0u8;
        for s in &head.slots[1..] {
            let v = s.load(Relaxed);
            // An empty slot (0) adds nothing: its mask is 0.
            bits |= summary_bit(slot_tag(v)) & 0u8.wrapping_sub(u8::from(v != 0));
        }
        self.summary_of(hash).store(bits, Relaxed);
    }

    fn scan_empty(&self, hash: u64) -> Option<&'a AtomicU64> {
        let head = self.head(hash);
        let chain = info_chain_len(head.slots[0].load(Relaxed));
        let mut bucket = head;
        let mut first = 1;
        for depth in 0..=chain {
            let last = if depth < chain { SLOTS - 1 } else { SLOTS };
            if let Some(s) = bucket.slots[first..last].iter().find(|s| s.load(Relaxed) == 0) {
                return Some(s);
            }
            if depth < chain {
                bucket = self.buckets.get(bucket.slots[SLOTS - 1].load(Relaxed) as usize)?;
                first = 0;
            }
        }
        None
    }

    /// The chain's version counter (the info word's high half; not the items' CAS values,
    /// which their records hold).
    #[cfg(test)]
    pub fn cas(&self, hash: u64) -> u32 {
        crate::hashtable::slot::info_cas(self.head(hash).slots[0].load(Relaxed))
    }

    /// Bumps the chain's version and stamps the time (low 16 bits of `now`).
    #[inline]
    pub fn touch_info(&self, hash: u64, now: u32) {
        let info = self.info(hash);
        info.store(touched(info.load(Relaxed), now), Relaxed);
    }

    /// The chain's info word, which also holds its lock bit (`INFO_LOCKED`).
    #[inline]
    pub fn info(&self, hash: u64) -> &'a AtomicU64 {
        &self.head(hash).slots[0]
    }

    /// Raises a slot's frequency counter: always while small, then with falling probability, so
    /// that 7 bits tell apart warm from hot (and marks the item fetched). `coin` is a cheap random number.
    ///
    /// A plain store, not a locked read-modify-write: only readers race here (writers hold the
    /// engine exclusively), they change nothing but the counter, and a lost increment is
    /// harmless. A locked instruction would instead stop the processor from overlapping the
    /// memory misses of consecutive reads.
    #[inline]
    pub fn bump_freq(slot: &AtomicU64, value: u64, coin: u64) {
        let new = Self::bumped(value, coin);
        if new != value {
            slot.store(new, Relaxed);
        }
    }

    /// `value` read once more: fetched, and its counter raised when due.
    #[inline]
    fn bumped(value: u64, coin: u64) -> u64 {
        let value = value | FETCHED;
        if freq_due(value, coin) {
            value + (1 << FREQ_SHIFT)
        } else {
            value
        }
    }

    /// `bump_freq` for a reader that holds no lock (`peek`): a writer may have reused the slot
    /// since `value` was read, so the counter is raised only if the slot still holds `value`.
    #[inline]
    pub fn bump_freq_unlocked(slot: &AtomicU64, value: u64, coin: u64) {
        let new = Self::bumped(value, coin);
        if new != value {
            let _ = slot.compare_exchange(value, new, Relaxed, Relaxed);
        }
    }

    /// Replaces a slot's location and frequency, keeping its tag and fetched bit.
    #[inline]
    pub fn relocate(slot: &AtomicU64, value: u64, freq: u8, loc: Loc) {
        slot.store(pack(slot_tag(value), freq, loc) | (value & FETCHED), Relaxed);
    }

    /// Clears the primary buckets (items, chains, versions). Overflow buckets are zeroed when
    /// a chain takes them, so they are left alone: their pages stay untouched until needed.
    pub fn clear(&self) {
        for b in &self.buckets[..=self.mask as usize] {
            for s in &b.slots {
                s.store(0, Relaxed);
            }
        }
        for s in self.summary {
            s.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` buckets: 2 primary (mask 1), the rest overflow; and their summary.
    fn table(n: usize) -> (Vec<Bucket>, Vec<AtomicU8>, u64) {
        let v = (0..n).map(|_| Bucket { slots: Default::default() }).collect();
        (v, (0..2).map(|_| AtomicU8::new(0)).collect(), 1)
    }

    /// Lookups index a hash's head bucket and summary byte unchecked, so a table is refused unless
    /// both hold every chain, and a chain count that is not a power of two (its mask would skip
    /// chains) is refused too; a hash with every bit set lands on the last chain.
    #[test]
    fn a_table_holds_every_chain_it_is_built_for() {
        let (buckets, summary, _) = table(4);
        for (chains, summary_len) in [(4, 2), (8, 2), (3, 2)] {
            let built = std::panic::catch_unwind(|| Table::new(&buckets, &summary[..summary_len], chains).mask());
            assert!(built.is_err(), "{chains} chains over 4 buckets and {summary_len} summary bytes");
        }
        let t = Table::new(&buckets, &summary, 2);
        assert!(std::ptr::eq(t.head(u64::MAX), &buckets[1]));
        assert!(std::ptr::eq(t.summary_of(u64::MAX), &summary[1]));
    }

    /// Puts `n` items in chain 0 (hash low bit 0), with tags 1..=n, item `i` in segment `i`;
    /// returns their hashes.
    fn fill_chain(t: &Table<'_>, pool: &mut Pool, n: u64) -> Vec<u64> {
        let hashes: Vec<u64> = (1..=n).map(|i| i << 52).collect();
        for (i, &h) in hashes.iter().enumerate() {
            let slot = t.empty_slot(h, pool).expect("pool has room");
            t.put(h, slot, pack(tag_of(h), 0, Loc { seg: i as u32, offset: 0 }));
        }
        hashes
    }

    /// A chain that is its head bucket alone: each of its seven item slots is found, holes are
    /// skipped, the info word is never taken for an item, and an eighth item grows the chain
    /// without losing one.
    #[test]
    fn a_chain_of_one_bucket_is_scanned_slot_by_slot() {
        let (buckets, summary, mask) = table(4);
        let t = Table::new(&buckets, &summary, mask as usize + 1);
        let mut pool = Pool::default();
        // An info word that looks like an item of tag 1 must not be seen as one.
        t.head(0).slots[0].store(pack(1, 0, Loc { seg: 77, offset: 0 }) & !0xff, Relaxed);
        let hashes = fill_chain(&t, &mut pool, 7);
        assert_eq!((pool.used, info_chain_len(t.head(0).slots[0].load(Relaxed))), (0, 0));
        let mut seen = Vec::new();
        t.scan(0, |_, v| {
            seen.push(slot_loc(v).seg);
            false
        });
        assert_eq!(seen, (0..7).collect::<Vec<_>>(), "every item slot, in order, and not the info word");
        for (i, &h) in hashes.iter().enumerate() {
            assert_eq!(t.find(h, |loc| loc.seg == i as u32).map(|f| slot_loc(f.value).seg), Some(i as u32));
        }
        let f = t.find(hashes[3], |_| true).unwrap();
        f.slot.store(0, Relaxed);
        assert!(t.find(hashes[3], |_| true).is_none(), "a hole is skipped");
        assert!(t.find(hashes[6], |loc| loc.seg == 6).is_some(), "and the slots after it still read");
        f.slot.store(f.value, Relaxed);
        let eighth = 8u64 << 52;
        let slot = t.empty_slot(eighth, &mut pool).unwrap();
        t.put(eighth, slot, pack(tag_of(eighth), 0, Loc { seg: 7, offset: 0 }));
        assert_eq!(info_chain_len(t.head(0).slots[0].load(Relaxed)), 1);
        for (i, &h) in hashes.iter().chain([&eighth]).enumerate() {
            assert!(t.find(h, |loc| loc.seg == i as u32).is_some(), "item {i} after the chain grew");
        }
    }

    /// The summary of a chain left as its head bucket alone is recomputed from its seven item
    /// slots (not the info word, whatever it holds), and equals a walk's; a chain with overflow
    /// buckets is walked as before.
    #[test]
    fn removal_keeps_the_summary_of_exactly_the_items_left() {
        for n in [7u64, 9] {
            let (buckets, summary, mask) = table(4);
            let t = Table { buckets: &buckets, summary: &summary, mask };
            let mut pool = Pool::default();
            // An info word whose high bits read as a tag must not count as an item.
            t.head(0).slots[0].store(pack(5, 0, Loc { seg: 77, offset: 0 }) & !0xff, Relaxed);
            let hashes = fill_chain(&t, &mut pool, n);
            let mut left: Vec<usize> = (0..n as usize).collect();
            for i in [3, 0, 6, 1, 8, 4, 2, 7, 5].into_iter().filter(|&i| i < n as usize) {
                let f = t.find(hashes[i], |loc| loc.seg == i as u32).expect("found");
                t.remove(hashes[i], f.slot, &mut pool);
                left.retain(|&j| j != i);
                let want = left.iter().fold(0u8, |b, &j| b | summary_bit(tag_of(hashes[j])));
                let bits = summary[0].load(Relaxed);
                t.refresh_summary(0);
                assert_eq!((bits, summary[0].load(Relaxed)), (want, want), "{n} items, {i} removed");
                for &j in &left {
                    assert!(t.find(hashes[j], |loc| loc.seg == j as u32).is_some(), "item {j} kept");
                }
            }
        }
    }

    #[test]
    fn chains_grow_into_overflow_and_find_every_item() {
        let (buckets, summary, mask) = table(16);
        let t = Table::new(&buckets, &summary, mask as usize + 1);
        let mut pool = Pool::default();
        // Twenty items with the same bucket and distinct tags.
        let hashes = fill_chain(&t, &mut pool, 20);
        // k overflow buckets hold 7k + 7 items with the head: 20 items need 2.
        assert_eq!(pool.used, 2);
        for (i, &h) in hashes.iter().enumerate() {
            let f = t.find(h, |loc| loc.seg == i as u32).expect("found");
            assert_eq!(slot_loc(f.value).seg, i as u32);
            assert!(t.find_loc(h, Loc { seg: i as u32, offset: 0 }).is_some());
        }
        // Other bucket unaffected.
        assert!(t.find(1 | (5 << 52), |_| true).is_none());
        // Removing items shrinks the chain and returns buckets, which are taken again first.
        for (i, &h) in hashes.iter().enumerate().take(14) {
            let f = t.find(h, |loc| loc.seg == i as u32).expect("found");
            t.remove(h, f.slot, &mut pool);
        }
        for (i, &h) in hashes.iter().enumerate().skip(14) {
            assert!(t.find(h, |loc| loc.seg == i as u32).is_some(), "item {i} survives compaction");
        }
        assert_eq!(info_chain_len(t.head(0).slots[0].load(Relaxed)), 0, "six items fit in the head again");
        assert_ne!(pool.free, 0);
        let again = t.empty_slot(hashes[0], &mut pool).unwrap();
        again.store(1, Relaxed);
        for h in &hashes[..8] {
            t.empty_slot(*h, &mut pool).unwrap().store(pack(1, 0, Loc { seg: 99, offset: 1 }), Relaxed);
        }
        assert_eq!(pool.used, 2, "returned buckets are reused before the pool grows");
    }

    /// `prefetch_chain` follows a link it reads: one out of range (a chain that a writer is
    /// relinking, seen without a lock) must not make it read outside the table.
    #[test]
    fn prefetch_chain_follows_only_links_in_range() {
        let (buckets, summary, mask) = table(16);
        let t = Table::new(&buckets, &summary, mask as usize + 1);
        let mut pool = Pool::default();
        let hashes = fill_chain(&t, &mut pool, 8);
        t.prefetch_chain(hashes[0]); // chained
        t.prefetch_chain(1 | (5 << 52)); // another head, no chain
        t.head(0).slots[SLOTS - 1].store(u64::MAX, Relaxed);
        t.prefetch_chain(hashes[0]); // a link out of range: no read, no panic
    }

    #[test]
    fn a_last_bucket_left_with_one_item_folds_back_into_the_link() {
        let (buckets, summary, mask) = table(16);
        let t = Table::new(&buckets, &summary, mask as usize + 1);
        let mut pool = Pool::default();
        // Eight items: the head's 6, and 2 in one overflow bucket.
        let hashes = fill_chain(&t, &mut pool, 8);
        assert_eq!(info_chain_len(t.head(0).slots[0].load(Relaxed)), 1);
        let f = t.find(hashes[2], |loc| loc.seg == 2).unwrap();
        t.remove(hashes[2], f.slot, &mut pool);
        assert_eq!(info_chain_len(t.head(0).slots[0].load(Relaxed)), 0, "seven items fit in the head");
        assert_ne!(pool.free, 0, "the overflow bucket went back to the pool");
        for (i, &h) in hashes.iter().enumerate().filter(|&(i, _)| i != 2) {
            assert!(t.find(h, |loc| loc.seg == i as u32).is_some(), "item {i} survives");
        }
        assert!(t.find(hashes[2], |loc| loc.seg == 2).is_none());
    }

    #[test]
    fn summary_tracks_the_tags_of_each_chain() {
        let (buckets, summary, mask) = table(16);
        let t = Table::new(&buckets, &summary, mask as usize + 1);
        let mut pool = Pool::default();
        // Tags 1..=9 in chain 0: bit 1 is shared by tags 1 and 9, and tag 8 has bit 0.
        let hashes = fill_chain(&t, &mut pool, 9);
        assert_eq!(summary[0].load(Relaxed), 0xff);
        assert_eq!(summary[1].load(Relaxed), 0, "the other chain is untouched");
        assert!(!t.may_hold(1 | (3 << 52)), "chain 1 holds nothing");
        // Tag 3 leaves: its bit clears, and a lookup of it stops at the summary.
        let f = t.find(hashes[2], |loc| loc.seg == 2).unwrap();
        t.remove(hashes[2], f.slot, &mut pool);
        assert_eq!(summary[0].load(Relaxed), !(1u8 << 3));
        assert!(t.find(hashes[2], |_| panic!("no tag 3 is left to compare")).is_none());
        // Tag 1 leaves but tag 9 keeps bit 1 set.
        let f = t.find(hashes[0], |loc| loc.seg == 0).unwrap();
        t.remove(hashes[0], f.slot, &mut pool);
        assert_ne!(summary[0].load(Relaxed) & (1 << 1), 0);
        assert!(t.find(hashes[8], |loc| loc.seg == 8).is_some());
        // A lost summary (a reopened file) is rebuilt from the buckets.
        let before = summary[0].load(Relaxed);
        summary[0].store(0, Relaxed);
        t.rebuild_summary();
        assert_eq!(summary[0].load(Relaxed), before);
        t.clear();
        assert_eq!(summary[0].load(Relaxed), 0);
    }

    /// `may_hold_tag` lets `SharedCache::set` skip the shared-lock rewrite for a key it calls
    /// absent, so it must never call a present key absent: every item of a chain that spans
    /// overflow buckets is seen, a tag whose summary bit another tag set is not, and a chain
    /// cut by a link out of range (a writer relinking it under a reader) says maybe.
    #[test]
    fn may_hold_tag_sees_every_item_of_a_long_chain() {
        // Even tags 2..=20 in chain 0: bits 0, 2, 4 and 6 of the summary set.
        let hashes: Vec<u64> = (1..=10).map(|i| (2 * i) << 52).collect();
        let (buckets, summary, mask) = table(16);
        let t = Table::new(&buckets, &summary, mask as usize + 1);
        let mut pool = Pool::default();
        for &h in &hashes {
            let slot = t.empty_slot(h, &mut pool).expect("pool has room");
            t.put(h, slot, pack(tag_of(h), 0, Loc { seg: (h >> 52) as u32, offset: 0 }));
        }
        assert!(info_chain_len(t.head(0).slots[0].load(Relaxed)) >= 1, "the chain spans an overflow bucket");
        for &h in &hashes {
            assert!(t.may_hold(h) && t.may_hold_tag(h, |_| {}), "tag {} is in the chain", h >> 52);
        }
        // Tags 26 and 34 share bit 2 with tags 2, 10 and 18, but no slot holds them.
        for tag in [26u64, 34] {
            assert!(t.may_hold(tag << 52), "the summary lets tag {tag} through");
            assert!(!t.may_hold_tag(tag << 52, |_| {}), "no slot holds tag {tag}");
        }
        // An odd tag stops at the summary.
        assert!(!t.may_hold_tag(3 << 52, |_| {}));
        // A link out of range ends the walk before the items behind it: maybe, not no.
        let link = &t.head(0).slots[SLOTS - 1];
        let saved = link.load(Relaxed);
        link.store(u64::from(u32::MAX), Relaxed);
        let last = *hashes.last().unwrap();
        assert!(t.may_hold_tag(last, |_| {}), "a cut chain is not proof of absence");
        assert!(t.may_hold_tag(26 << 52, |_| {}), "nor for a tag that is absent");
        link.store(saved, Relaxed);
        assert!(!t.may_hold_tag(26 << 52, |_| {}));
    }

    #[test]
    fn pool_exhaustion_is_reported() {
        let (buckets, summary, mask) = table(3);
        let t = Table::new(&buckets, &summary, mask as usize + 1);
        let mut pool = Pool::default();
        let mut n = 0;
        while let Some(s) = t.empty_slot(0, &mut pool) {
            s.store(pack(1, 0, Loc { seg: n, offset: 0 }), Relaxed);
            n += 1;
        }
        assert_eq!(n, 7 + 7, "head (7) then one overflow bucket (7 after the link)");
    }

    #[test]
    fn cas_counter_and_freq() {
        let (buckets, summary, mask) = table(2);
        let t = Table::new(&buckets, &summary, mask as usize + 1);
        let c0 = t.cas(0);
        t.touch_info(0, 123);
        assert_eq!(t.cas(0), c0 + 1);
        let s = AtomicU64::new(pack(5, 0, Loc { seg: 1, offset: 2 }));
        for _ in 0..10 {
            Table::bump_freq(&s, s.load(Relaxed), 0);
        }
        assert_eq!(slot_freq(s.load(Relaxed)), 10);
        let v = s.load(Relaxed);
        Table::relocate(&s, v, 3, Loc { seg: 9, offset: 8 });
        assert_eq!((slot_tag(s.load(Relaxed)), slot_freq(s.load(Relaxed))), (5, 3));
    }
}
