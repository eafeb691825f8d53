//! Moving a cache's items into a cache of other sizes: what reopening a file with another heap
//! size, segment size, shard count, hash power or tier size does (`Builder::resize_file`).
//! Items on the flash tier move too, before those in DRAM: eviction put them there, so they are
//! the older.

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::flash::parse_flash;
use crate::engine::write::{Mode, NewState};
use crate::engine::{cas_token, Segcache};
use crate::error::Error;
use crate::hash::{hash, shard_of};
use crate::hashtable::slot::Loc;
use crate::segments::header::{SEG_OPEN, SEG_SEALED};
use crate::tier::entry;

/// What a move kept and left behind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    pub(crate) items: u64,
    /// Items larger than the new segments hold.
    pub(crate) too_large: u64,
}

impl Segcache {
    /// The highest CAS value this shard has handed out.
    pub(crate) fn last_cas(&self) -> u64 {
        cas_token(self.cas_stride, self.cas_offset, self.meta().next_cas.load(Relaxed))
    }

    /// Starts `dest`'s CAS values above `last`, so that no CAS value a client holds from the old
    /// cache matches an item of this one.
    pub(crate) fn cas_above(&mut self, last: u64) {
        let next = u32::try_from(last / self.cas_stride + 1).unwrap_or(u32::MAX);
        let counter = &self.meta().next_cas;
        counter.store(counter.load(Relaxed).max(next), Relaxed);
    }

    /// Stores every live item of this engine into `dests`, the shards of another cache (by key
    /// hash, as `SharedCache` shards), oldest first: the flash tier's segments in the order they
    /// were written, then the heap's segments in theirs. A smaller cache evicts (or demotes into
    /// its own tier) the oldest and keeps the newest. Items keep their value, client flags and
    /// expiry; their CAS values are new (see `cas_above`), their read counts start over.
    pub(crate) fn move_items_into(&mut self, dests: &mut [Segcache]) -> crate::error::Result<Moved> {
        let mut moved = Moved::default();
        let mut keys: Vec<(Vec<u8>, u64)> = Vec::new();
        for index in self.flash_segments_oldest_first() {
            keys.clear();
            self.flash_keys(index, &mut keys);
            for (key, h) in &keys {
                self.move_item(key, *h, dests, &mut moved)?;
            }
        }
        let mut ids: Vec<u32> =
            (0..self.geo.segments as u32).filter(|&id| matches!(self.seg(id).state, SEG_OPEN | SEG_SEALED)).collect();
        ids.sort_by_key(|&id| self.seg(id).seq);
        let mut live: Vec<(Loc, u64)> = Vec::new();
        for id in ids {
            live.clear();
            self.for_each_live(id, |_, loc, h, _| live.push((loc, h)));
            for &(loc, h) in &live {
                let Some(key) = self.record(loc).map(|r| r.key.to_vec()) else { continue };
                self.move_item(&key, h, dests, &mut moved)?;
            }
        }
        Ok(moved)
    }

    /// Stores the live item of `key` (hash `h`), as a read finds it, into its shard of `dests`.
    fn move_item(&mut self, key: &[u8], h: u64, dests: &mut [Segcache], moved: &mut Moved) -> crate::error::Result<()> {
        // A read, so that what expired or was flushed stays behind, and a flash entry is served
        // only once it checks; it finds the key's only live copy.
        let Some(item) = self.get(key) else { return Ok(()) };
        wait_for_tier_room(dests);
        let dest = &mut dests[shard_of(h, dests.len())];
        let now = dest.prepare_write();
        // The same expiry second, not the TTL left rounded down once more.
        let ttl = match item.expire_at() {
            None => Some(0),
            Some(at) if at <= now => None,
            Some(at) => Some(at - now),
        };
        let stored = ttl.map(|ttl| {
            let keep = NewState { keep_expiry: true, ..NewState::default() };
            dest.store_at(item.key(), h, &[item.value()], item.flags(), ttl, Mode::Set, now, keep, false)
        });
        // A large item's value was assembled for the move, a flash item's read into the tier's
        // arena: freed before the next.
        if self.large.holds() {
            self.large.release();
        }
        if let Some(tier) = self.tier.as_deref_mut() {
            tier.arena.clear();
        }
        match stored {
            None => {}
            Some(Ok(_)) => moved.items += 1,
            Some(Err(Error::TooLarge { .. })) => moved.too_large += 1,
            Some(Err(e)) => return Err(e),
        }
        Ok(())
    }

    /// The tier's flash segments that hold an image, oldest first.
    fn flash_segments_oldest_first(&self) -> Vec<u32> {
        let Some(tier) = self.tier.as_deref() else { return Vec::new() };
        let mut segs: Vec<u32> = (0..tier.file.segments()).filter(|&i| tier.ring.in_use(i)).collect();
        segs.sort_by_key(|&i| tier.ring.seg(i).seq);
        segs
    }

    /// The keys (with their hashes) of flash segment `index` that a slot still leads to, in the
    /// order they were written, read with one read of its image. An entry that does not check
    /// (torn, or of another generation) is passed over; what a key's slot leads to is checked
    /// again when the key is read.
    fn flash_keys(&self, index: u32, out: &mut Vec<(Vec<u8>, u64)>) {
        let Some(tier) = self.tier.as_deref() else { return };
        let seg = *tier.ring.seg(index);
        let Ok(image) = tier.file.read_segment(index, seg.generation, seg.written as usize) else { return };
        let image = &image[..image.len().min(seg.written as usize)];
        let id = tier.ids.seg_id(index);
        for offset in entry::offsets(image) {
            let Some((meta, record)) = entry::check(&image[offset..], index, offset as u32, seg.generation) else {
                continue;
            };
            let Some(r) = parse_flash(record, meta.cas_base).filter(|r| !r.dead) else { continue };
            let h = hash(r.key);
            let here = Loc { seg: id, offset: offset as u32 };
            if self.table().find(h, |loc| loc == here).is_some() {
                out.push((r.key.to_vec(), h));
            }
        }
    }
}

/// Waits for the tier writer of `dests` to catch up when its queue has no room left for two
/// more images (a store's eviction may hand one over and open the next): a move outruns any
/// device, and an eviction that finds the queue full drops what it would demote.
fn wait_for_tier_room(dests: &[Segcache]) {
    let tiers = || dests.iter().filter_map(|d| d.tier.as_deref());
    if tiers().any(|t| t.file.behind(2)) {
        tiers().for_each(|t| t.file.settle(None));
    }
}
