//! Demotion to the flash tier: the items that eviction gives up (a cleared segment's live items, or
//! those a merge does not keep) go into an image of the tier's next flash segment, their slots
//! repointed there, and the image is written when full or when the eviction ends; the flash
//! segment an image replaces is reclaimed first (its slots dropped, its generation bumped).

use crate::engine::Segcache;
use crate::hash::hash;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::Table;
use crate::tier::entry::{self, EntryMeta};
use crate::tier::file::TierFile;
use crate::tier::image::Image;
use crate::tier::Tier;
use crate::ttl_buckets::expire::live_until;

impl Segcache {
    /// Gives this engine its slice of a tier file. A reopened heap may hold slots into a tier whose
    /// metadata this open does not have (it lives in DRAM): they are dropped.
    pub(crate) fn attach_tier(&mut self, file: TierFile, reopened: bool) {
        let nonce =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let tier = Tier::new(file, self.geo.segments as u32, nonce);
        if reopened {
            let dram = self.geo.segments as u32;
            let mut pool = self.meta().overflow;
            self.table().remove_where(|loc| loc.seg >= dram, &mut pool);
            self.meta_mut().overflow = pool;
        }
        self.tier = Some(Box::new(tier));
    }

    /// Writes the live items of segment `id`, which eviction is about to clear, to the tier, and
    /// points their slots there: as many flash segments as they take (each entry adds a head, so a
    /// full heap segment may not fit in one). An item that fits in no flash segment keeps its slot
    /// into `id`, and the clear drops it; so does one whose write fails, which is counted.
    #[cold]
    pub(crate) fn demote(&mut self, id: u32) {
        if self.tier.is_none() {
            return;
        }
        let seg = *self.seg(id);
        let meta = EntryMeta { cas_base: seg.cas_base, create_at: seg.create_at, expire_at: seg.expire_at };
        // Locations, not slots: reclaiming a flash segment removes slots, which moves others
        // within their chains.
        let mut live = Vec::with_capacity(seg.live_items as usize);
        self.for_each_live(id, |_, loc, h, len| live.push((loc, h, len)));
        for (loc, h, len) in live {
            self.demote_item(h, loc, len as usize, meta);
        }
        self.finish_demotion();
    }

    /// Puts the item whose record of `len` bytes lies at heap location `loc` (key hash `h`, of a
    /// segment that `meta` describes) in the image the eviction is filling, and points its slot
    /// there. `false` when it stays where it is, for the eviction to drop: no tier, the key of
    /// the write under way (see `Tier::writing`), a record too long for a flash segment, a large
    /// item's head or chunk, or no slot leading to it.
    ///
    /// The record is read from the heap whatever its segment's header now says: a merge that
    /// compacts a segment in place has already made it a destination, but has not yet written
    /// over the records it has not reached. Opening an image may reclaim a flash segment, which
    /// moves slots within their chains: a caller that holds a slot finds it again after a
    /// `false`. The eviction calls `finish_demotion` before it returns, which writes the image.
    pub(crate) fn demote_item(&mut self, h: u64, loc: Loc, len: usize, meta: EntryMeta) -> bool {
        let Some(mut tier) = self.tier.take() else { return false };
        let done = self.demote_into(&mut tier, h, loc, len, meta);
        self.tier = Some(tier);
        done
    }

    fn demote_into(&mut self, tier: &mut Tier, h: u64, loc: Loc, len: usize, meta: EntryMeta) -> bool {
        let size = tier.file.segment_size();
        // A large item's parts are dropped, not demoted: its chunks could not be kept whole on
        // flash, where each goes as its eviction finds it.
        if h == tier.writing
            || entry::entry_len(len) > size
            || crate::large::is_large_part(&self.seg_bytes(loc.seg)[loc.offset as usize..])
        {
            return false;
        }
        if tier.image.as_ref().is_some_and(|image| !image.fits(len)) {
            self.write_image(tier);
        }
        if tier.image.is_none() {
            let index = tier.ring.next();
            if tier.ring.in_use(index) {
                self.reclaim(tier, index);
            }
            tier.image = Some(Image::new(index, tier.ring.seg(index).generation, size));
        }
        let Some(f) = self.table().find_loc(h, loc) else { return false };
        let image = tier.image.as_mut().expect("an image was opened above");
        let offset = image.put(&self.seg_bytes(loc.seg)[loc.offset as usize..][..len], meta, h);
        let to = Loc { seg: tier.ids.seg_id(image.index()), offset };
        Table::relocate(f.slot, f.value, slot::slot_freq(f.value), to);
        true
    }

    /// Writes the image the eviction filled, if any: every eviction that demotes calls it before
    /// it returns, so that no slot leads into a flash segment not yet written.
    pub(crate) fn finish_demotion(&mut self) {
        let Some(mut tier) = self.tier.take() else { return };
        self.write_image(&mut tier);
        self.tier = Some(tier);
    }

    /// Writes the open image to its flash segment, the ring's head. Its slots already lead there:
    /// if the write fails they go, and their items with them (counted as evicted, and as
    /// demotions dropped).
    fn write_image(&mut self, tier: &mut Tier) {
        // An image that took nothing leaves its segment free (a reclaim may have emptied it).
        let Some(image) = tier.image.take().filter(|image| !image.entries().is_empty()) else { return };
        debug_assert_eq!(image.index(), tier.ring.next(), "images are written to the ring's head");
        let items = image.entries().len() as u64;
        if tier.file.write_segment(image.index(), image.bytes()).is_ok() {
            tier.ring.fill(image.bytes().len() as u32, items as u32, image.expire_at());
            tier.counts.demoted += items;
            tier.counts.bytes_written += image.bytes().len() as u64;
            return;
        }
        let seg = tier.ids.seg_id(image.index());
        let mut removed = 0;
        for &(h, offset) in image.entries() {
            if let Some(f) = self.table().find_loc(h, Loc { seg, offset }) {
                self.remove_slot(h, f.slot);
                removed += 1;
            }
        }
        tier.counts.demotions_dropped += removed;
        self.meta_mut().evicted_items += removed;
    }

    /// Reclaims flash segment `index`: drops the slots that still point into it (found by reading
    /// its image back, or by a sweep of the table where the image no longer says), then frees it
    /// with a new generation.
    fn reclaim(&mut self, tier: &mut Tier, index: u32) {
        let fs = *tier.ring.seg(index);
        let seg_id = tier.ids.seg_id(index);
        let mut removed = 0u64;
        if fs.live > 0 {
            if let Ok(image) = tier.file.read_segment(index, fs.written as usize) {
                let t = self.table();
                for off in entry::offsets(&image[..(fs.written as usize).min(image.len())]) {
                    let found = entry::check(&image[off..], index, off as u32, fs.generation)
                        .and_then(|(meta, rec)| crate::engine::flash::parse_flash(rec, meta.cas_base))
                        .map(|r| hash(r.key))
                        .and_then(|h| Some((h, t.find_loc(h, Loc { seg: seg_id, offset: off as u32 })?)));
                    if let Some((h, f)) = found {
                        self.remove_slot(h, f.slot);
                        removed += 1;
                    }
                }
            }
            if removed < u64::from(fs.live) {
                let mut pool = self.meta().overflow;
                removed += self.table().remove_where(|loc| loc.seg == seg_id, &mut pool);
                self.meta_mut().overflow = pool;
            }
        }
        let now = self.now();
        let m = self.meta_mut();
        if fs.expire_at != 0 && !live_until(fs.expire_at, now) {
            m.expired_items += removed;
        } else {
            m.evicted_items += removed;
        }
        tier.ring.release(index);
        tier.counts.reclaimed += 1;
    }
}
