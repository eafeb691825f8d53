//! Items on the flash tier as the rest of the engine meets them: a read of a key whose slot names
//! a flash segment (a positioned read of the entry, checked, then served from the tier's arena), a
//! keyed write that first brings the key's item back into DRAM (and the items that reads asked
//! back, see `tier::wanted`), and a full chain that gives up a flash slot. None of it is on a path that a DRAM hit takes.

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::read::{state_of, token_due, ReadOptions};
use crate::engine::write::{Mode, NewState};
use crate::engine::Segcache;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::{self, Table};
use crate::item::Item;
use crate::meta::{bump, Gone, ReadCounters};
use crate::record::{self, Record};
use crate::tier::entry::EntryMeta;
use crate::tier::image::Image;
use crate::tier::Tier;
use crate::ttl_buckets::expire::live_until;

/// Why a flash slot served nothing.
enum Missed {
    /// Its segment or its entry expired.
    Expired,
    /// Another key's entry (a tag shared), or an entry that failed its check or its read.
    Other,
}

impl Segcache {
    /// `get_with_options_in` for a key that no DRAM slot holds: the key's flash slot, if any, read
    /// and checked. A read that fails, or an entry that does not check, is a miss. `no_update`:
    /// `ReadOptions::no_update` (the only option it reads: the options stay out of the call, so
    /// that a DRAM read needs none of them in memory). The item's bytes are held in the tier's
    /// arena until the next write, as the item borrows the engine.
    #[cold]
    #[inline(never)]
    pub(crate) fn get_flash(&self, key: &[u8], h: u64, counters: &ReadCounters, no_update: bool) -> Option<Item<'_>> {
        let (bytes, meta, found, now) = self.find_flash(key, h, counters)?;
        let held = self.tier.as_deref().and_then(|tier| tier.arena.hold(bytes));
        let Some(r) = held.and_then(|b| parse_flash(b, meta.cas_base)) else {
            counters.miss(None);
            return None;
        };
        self.count_flash_hit(&r, found, h, counters, no_update);
        Some(self.flash_item(r, meta, found, now))
    }

    /// `get_flash` for a caller that hands the item to `f` at once: the bytes stay in this call's
    /// own buffer, so a run of such reads holds nothing in the arena, however long.
    #[cold]
    #[inline(never)]
    pub(crate) fn get_flash_with<R>(
        &self,
        key: &[u8],
        h: u64,
        counters: &ReadCounters,
        no_update: bool,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Option<R> {
        let (bytes, meta, found, now) = self.find_flash(key, h, counters)?;
        let Some(r) = parse_flash(&bytes, meta.cas_base) else {
            counters.miss(None);
            return None;
        };
        self.count_flash_hit(&r, found, h, counters, no_update);
        Some(f(self.flash_item(r, meta, found, now)))
    }

    /// `get_with_options_in` handing the item to `f`: a key that no DRAM slot holds is read from
    /// flash into a buffer of the call's own (`get_flash_with`), as is a large item's value
    /// (`large_get_with`); every other read goes as it does without a tier.
    #[inline]
    pub(crate) fn get_with_options_then<R>(
        &self,
        key: &[u8],
        h: u64,
        counters: &ReadCounters,
        opts: &ReadOptions,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Option<R> {
        let Some((found, r)) = self.find_record(key, h) else {
            // A key on the flash tier has no DRAM slot: it is looked for only after a DRAM miss.
            if self.tier.is_some() {
                return self.get_flash_with(key, h, counters, opts.no_update, f);
            }
            counters.miss(None);
            return None;
        };
        // A large item is gathered into a buffer of this call's own, not held by the engine.
        if r.stamp.large {
            return self.large_get_with(found, r, h, counters, opts, f);
        }
        self.serve(found, r, h, counters, opts).map(f)
    }

    /// The key's flash entry, read and checked, with its slot and the time read; `None`, counted
    /// as a miss, when it has none that checks.
    fn find_flash(
        &self,
        key: &[u8],
        h: u64,
        counters: &ReadCounters,
    ) -> Option<(Vec<u8>, EntryMeta, table::Found<'static>, u32)> {
        let Some(tier) = self.tier.as_deref() else {
            counters.miss(None);
            return None;
        };
        let now = self.now();
        if self.flushed(now) || self.origin.forked() {
            counters.miss(None);
            return None;
        }
        let mut got = None;
        let mut gone = None;
        let found = self.table().find(h, |loc| match read_flash(tier, loc, key, now) {
            Ok(read) => {
                got = Some(read);
                true
            }
            Err(Missed::Expired) => {
                gone = Some(Gone::Expired);
                false
            }
            Err(Missed::Other) => false,
        });
        match (found, got) {
            (Some(found), Some((bytes, meta))) => Some((bytes, meta, found, now)),
            _ => {
                counters.miss(gone);
                None
            }
        }
    }

    /// Counts a read served from flash, and raises its slot's frequency unless `no_update`.
    fn count_flash_hit(
        &self,
        r: &Record<'_>,
        found: table::Found<'static>,
        h: u64,
        counters: &ReadCounters,
        no_update: bool,
    ) {
        let coin = bump(&counters.hits);
        if !no_update {
            Table::bump_freq(found.slot, found.value, coin ^ h);
        }
        if let Some(tier) = self.tier.as_deref() {
            tier.counts.hits.fetch_add(1, Relaxed);
            tier.counts.bytes_read.fetch_add(r.len as u64, Relaxed);
            // This read counts: the counter before it, plus one.
            let reads = u16::from(slot::slot_freq(found.value)) + 1;
            if !no_update && tier.promote_after != 0 && reads >= u16::from(tier.promote_after) {
                tier.wanted.push(h, r.key);
            }
        }
    }

    /// The item of a checked flash entry. Its recache token is not taken here: a flash item was
    /// never invalidated (a keyed write drops its slot), and its access time is not refreshed.
    fn flash_item<'a>(&self, r: Record<'a>, meta: EntryMeta, found: table::Found<'static>, now: u32) -> Item<'a> {
        let cas = r.explicit_cas().unwrap_or_else(|| self.cas_of(r.stamp.cas));
        let state = state_of(&r.stamp, meta.create_at, found.value);
        Item { key: r.key, value: r.value, flags: r.client_flags, cas, expire_at: meta.expire_at, now, state }
    }

    /// Before a write to `key` (hash `h`) at `now`: brings the key's item back from flash, so that
    /// the write finds it in DRAM as if it had never left (an `add` fails, a `cas` compares, an
    /// `append` appends). It keeps its value, flags, CAS value, expiry and state; its flash slot
    /// goes once the copy in DRAM is in the table, so that a process killed in between keeps one
    /// of the two. Any other flash slot of the key goes too (a kill at that moment leaves two
    /// copies of one version), and so do those of the key's tag that fail their check: they can
    /// never serve. A key with a copy in DRAM already keeps it, and its flash slots go: a flash
    /// copy is never the newer (only a demotion makes one, out of the DRAM copy). Also frees
    /// what reads held in the tier's arena (the caller holds the engine exclusively).
    #[cold]
    #[inline(never)]
    pub(crate) fn promote_flash(&mut self, key: &[u8], h: u64, now: u32) -> bool {
        let in_dram = self.find_record(key, h).is_some();
        let Some(mut tier) = self.tier.take() else { return false };
        tier.arena.clear();
        tier.writing = h;
        let mut got = None;
        let mut chosen = None;
        let mut slot_value = 0;
        loop {
            let mut dead = false;
            let found = self.table().find(h, |loc| {
                if Some(loc) == chosen {
                    return false;
                }
                match read_flash(&tier, loc, key, now) {
                    Ok(read) => {
                        if chosen.is_none() && !in_dram {
                            got = Some(read);
                        }
                        true
                    }
                    Err(Missed::Expired) => {
                        dead = true;
                        true
                    }
                    Err(Missed::Other) if tier.ids.flash_index(loc.seg).is_some() && !readable(&tier, loc) => {
                        dead = true;
                        true
                    }
                    Err(Missed::Other) => false,
                }
            });
            let Some(f) = found else { break };
            if !dead && chosen.is_none() && !in_dram {
                chosen = Some(slot::slot_loc(f.value));
                slot_value = f.value;
                continue;
            }
            self.remove_slot(h, f.slot);
            drop_live(&mut tier, slot::slot_loc(f.value));
        }
        let from = slot::slot_loc(slot_value);
        let generation = flash_generation(&tier, from);
        self.tier = Some(tier);
        let Some((bytes, meta)) = got else { return false };
        let Some(r) = parse_flash(&bytes, meta.cas_base) else {
            self.drop_flash_slot(h, from, generation);
            return false;
        };
        let ttl = if meta.expire_at == 0 { 0 } else { meta.expire_at.saturating_sub(now) };
        let state = NewState {
            explicit: Some(r.explicit_cas().unwrap_or_else(|| self.cas_of(r.stamp.cas))),
            stale: r.stamp.stale,
            won: r.stamp.won,
            keep_expiry: true,
            ..NewState::default()
        };
        // The store finds no copy of the key in DRAM to replace (a flash location holds no
        // record) and adds its slot beside the flash one.
        let stored = self.store_at(key, h, &[r.value], r.client_flags, ttl, Mode::Set, now, state, false).is_ok();
        // A promotion that finds no room leaves the item gone, as an eviction would.
        self.drop_flash_slot(h, from, generation);
        if !stored {
            return false;
        }
        if let Some(f) = self.find_key(key, h).filter(|_| slot_value & slot::FETCHED != 0) {
            f.slot.store(f.value | slot::FETCHED, Relaxed);
        }
        true
    }

    /// Removes the slot of key hash `h` into flash location `loc`, unless its segment is no
    /// longer in `generation`: making room since may have reclaimed it (its slots went with it),
    /// and an image opened in its place may hold another item at the same location.
    fn drop_flash_slot(&mut self, h: u64, loc: Loc, generation: Option<u64>) {
        let Some(mut tier) = self.tier.take() else { return };
        if flash_generation(&tier, loc) == generation {
            if let Some(f) = self.table().find_loc(h, loc) {
                self.remove_slot(h, f.slot);
                drop_live(&mut tier, loc);
            }
        }
        self.tier = Some(tier);
    }

    /// Before a write to `key` (hash `h`) at `now`: the items that reads asked back, then the
    /// key's own (`promote_wanted`, `promote_flash`). One call out of line, so that the write
    /// paths that inline `prepare_keyed_write` stay as they are without a tier.
    #[cold]
    #[inline(never)]
    pub(crate) fn promote_before_write(&mut self, key: &[u8], h: u64, now: u32) {
        self.promote_wanted(now);
        self.promote_flash(key, h, now);
    }

    /// Brings back to DRAM the items that reads on flash asked for (see `Tier::wanted`), before
    /// a keyed write at `now`. An item written or dropped since is left as it is.
    fn promote_wanted(&mut self, now: u32) {
        let Some(tier) = self.tier.as_deref_mut().filter(|t| t.wanted.any()) else { return };
        for (h, key) in tier.wanted.take() {
            if self.promote_flash(&key, h, now) {
                if let Some(tier) = self.tier.as_deref_mut() {
                    tier.counts.promoted += 1;
                }
            }
        }
    }

    /// Whether a read with `opts` of `key`'s item on flash, if it has one, would take its
    /// recache token (see `ReadOptions::claim_token`). Only an item in DRAM can hand the token
    /// to exactly one reader, so the caller brings such an item back first (`promote_flash`).
    /// Not counted as a read.
    #[cold]
    pub(crate) fn flash_token_due(&self, key: &[u8], h: u64, opts: &ReadOptions) -> bool {
        let Some(tier) = self.tier.as_deref().filter(|_| opts.claim_token) else { return false };
        let now = self.now();
        if self.flushed(now) {
            return false;
        }
        let mut due = false;
        self.table().find(h, |loc| match read_flash(tier, loc, key, now) {
            Ok((bytes, meta)) => {
                due = parse_flash(&bytes, meta.cas_base)
                    .is_some_and(|r| token_due(opts, &state_of(&r.stamp, meta.create_at, 0), meta.expire_at, now));
                true
            }
            Err(_) => false,
        });
        due
    }

    /// Whether `key` has an item on flash at `now` (read and checked; not counted as a read).
    #[cold]
    pub(crate) fn contains_flash(&self, key: &[u8], h: u64, now: u32) -> bool {
        let Some(tier) = self.tier.as_deref() else { return false };
        !self.flushed(now) && self.table().find(h, |loc| read_flash(tier, loc, key, now).is_ok()).is_some()
    }

    /// For a chain that must give up a slot: `true` if `loc` lies past the heap (a flash location,
    /// or one a file kept from a tier this open lacks), whose item no listener can be told of; a
    /// flash location leaves its segment's count.
    pub(crate) fn flash_victim(&mut self, loc: Loc) -> bool {
        if (loc.seg as usize) < self.geo.segments {
            return false;
        }
        if let Some(tier) = self.tier.as_deref_mut() {
            drop_live(tier, loc);
        }
        true
    }
}

/// One slot fewer points into the flash segment of `loc` (or into the image being filled).
fn drop_live(tier: &mut Tier, loc: Loc) {
    let Some(index) = tier.ids.flash_index(loc.seg) else { return };
    match tier.image.as_mut().filter(|image| image.index() == index) {
        Some(image) => image.drop_one(),
        None => {
            let s = tier.ring.seg_mut(index);
            s.live = s.live.saturating_sub(1);
        }
    }
}

/// Whether the flash location `loc` may still be read: its segment holds an image and has not
/// expired, or is the one being filled. A slot into one that may not serves nothing, whatever
/// its entry says.
fn readable(tier: &Tier, loc: Loc) -> bool {
    tier.ids.flash_index(loc.seg).is_some_and(|i| tier.ring.in_use(i) || open_image(tier, i).is_some())
}

/// The generation of the flash segment that `loc` lies in (`None`: not a flash location).
fn flash_generation(tier: &Tier, loc: Loc) -> Option<u64> {
    tier.ids.flash_index(loc.seg).map(|index| tier.ring.seg(index).generation)
}

/// The image being filled, if it is flash segment `index`'s.
fn open_image(tier: &Tier, index: u32) -> Option<&Image> {
    tier.image.as_ref().filter(|image| image.index() == index)
}

/// The bytes of `key`'s record at flash location `loc`, read and checked, with its entry's head:
/// from the image being filled, if it is there; else its flash segment's metadata first (a free
/// or expired segment needs no read), then the entry.
fn read_flash(tier: &Tier, loc: Loc, key: &[u8], now: u32) -> Result<(Vec<u8>, EntryMeta), Missed> {
    let index = tier.ids.flash_index(loc.seg).ok_or(Missed::Other)?;
    if let Some(image) = open_image(tier, index) {
        let (meta, record) = image.entry(loc.offset).ok_or(Missed::Other)?;
        if !live_until(meta.expire_at, now) {
            return Err(Missed::Expired);
        }
        return match parse_flash(record, meta.cas_base) {
            Some(r) if !r.dead && record::same_key(r.key, key) => Ok((record.to_vec(), meta)),
            _ => Err(Missed::Other),
        };
    }
    let fs = tier.ring.seg(index);
    if !tier.ring.in_use(index) {
        return Err(Missed::Other);
    }
    if !live_until(fs.expire_at, now) {
        return Err(Missed::Expired);
    }
    let Some(read) = tier.file.read_entry(index, loc.offset, fs.generation) else {
        tier.counts.bad_reads.fetch_add(1, Relaxed);
        return Err(Missed::Other);
    };
    if !live_until(read.meta.expire_at, now) {
        return Err(Missed::Expired);
    }
    let mut bytes = read.bytes;
    bytes.truncate(read.start + read.len);
    bytes.drain(..read.start);
    match parse_flash(&bytes, read.meta.cas_base) {
        Some(r) if !r.dead && record::same_key(r.key, key) => Ok((bytes, read.meta)),
        _ => Err(Missed::Other),
    }
}

/// `record::parse` out of line for the tier's reads, which are rare beside DRAM's: inlined here
/// too, it stopped being inlined into the DRAM read path.
#[inline(never)]
pub(crate) fn parse_flash(src: &[u8], base: u32) -> Option<Record<'_>> {
    record::parse(src, base)
}
