//! Demotion to the flash tier: the live items of a segment that eviction frees are written, as one
//! image, to the tier's next flash segment, and their slots repointed there; the flash segment that
//! image replaces is reclaimed first (its slots dropped, its generation bumped).

use crate::engine::Segcache;
use crate::hash::hash;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::Table;
use crate::record;
use crate::tier::entry::{self, EntryMeta};
use crate::tier::file::TierFile;
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
    /// into `id`, and the clear drops it; so does a failed write, which is counted.
    #[cold]
    pub(crate) fn demote(&mut self, id: u32) {
        let Some(mut tier) = self.tier.take() else { return };
        let seg = *self.seg(id);
        let meta = EntryMeta { cas_base: seg.cas_base, create_at: seg.create_at, expire_at: seg.expire_at };
        // Locations, not slots: reclaiming a flash segment removes slots, which moves others
        // within their chains.
        let mut live = Vec::with_capacity(seg.live_items as usize);
        let writing = tier.writing;
        self.for_each_live(id, |_, loc, h, len| {
            if h != writing {
                live.push((loc, h, len as usize));
            }
        });
        let size = tier.file.segment_size();
        let mut rest = &live[..];
        while let Some(&(_, _, first)) = rest.first() {
            if entry::entry_len(first) > size {
                break;
            }
            let index = tier.ring.next();
            if tier.ring.in_use(index) {
                self.reclaim(&mut tier, index);
            }
            let generation = tier.ring.seg(index).generation;
            let mut image = Vec::with_capacity(size);
            let mut offsets = Vec::new();
            let data = self.seg_data(id);
            for &(loc, _, len) in rest {
                if image.len() + entry::entry_len(len) > size {
                    break;
                }
                offsets.push(entry::put(&mut image, &data[loc.offset as usize..][..len], meta, index, generation));
            }
            let (taken, later) = rest.split_at(offsets.len());
            rest = later;
            if tier.file.write_segment(index, &image).is_err() {
                tier.counts.demotions_dropped += taken.len() as u64;
                continue;
            }
            let (t, seg_id) = (self.table(), tier.ids.seg_id(index));
            let mut moved = 0;
            for (&(loc, h, _), &offset) in taken.iter().zip(&offsets) {
                if let Some(f) = t.find_loc(h, loc) {
                    Table::relocate(f.slot, f.value, slot::slot_freq(f.value), Loc { seg: seg_id, offset });
                    moved += 1;
                }
            }
            tier.ring.fill(image.len() as u32, moved, seg.expire_at, seg.create_at, seg.cas_base);
            tier.counts.demoted += u64::from(moved);
        }
        self.tier = Some(tier);
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
                let mut off = 0usize;
                while off + entry::HEAD <= (fs.written as usize).min(image.len()) {
                    let Some(n) = entry::declared_len(&image[off..]) else { break };
                    let found = entry::check(&image[off..], index, off as u32, fs.generation)
                        .and_then(|(meta, rec)| record::parse(rec, meta.cas_base))
                        .map(|r| hash(r.key))
                        .and_then(|h| Some((h, t.find_loc(h, Loc { seg: seg_id, offset: off as u32 })?)));
                    if let Some((h, f)) = found {
                        self.remove_slot(h, f.slot);
                        removed += 1;
                    }
                    off += n;
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
