//! The flash tier across a reopen: what the heap's hash table kept of it (its flash slots) is
//! trusted only beside the tier file whose identity the heap names, and only for the flash segments
//! that file's records say are in use; the counts of slots into each are taken again. A tier that
//! cannot be trusted starts cold, its flash slots gone. After a crash, the heap's rebuild keeps the
//! table's flash slots (`flash_slots`, `restore_flash_slots`), which it would otherwise drop with
//! the rest of the table.
//!
//! What makes the slots trustworthy is the order of the writes that change them (`demote.rs`): a
//! flash segment's record says it is free, with its new generation, before any slot leads into its
//! new image, and says it is in use only once that image is written; so after a crash at any point
//! every slot into a segment in use leads to an entry written in its generation, and the slots
//! into the others go.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};

use crate::engine::flash::parse_flash;
use crate::engine::Segcache;
use crate::hashtable::slot::{slot_loc, slot_tag, Loc, LOC_MASK};
use crate::tier::file::TierFile;
use crate::tier::ring::{FlashSeg, Ring};
use crate::tier::Tier;

/// A random number: the seed of a new tier's identity and generations.
pub(crate) fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

impl Segcache {
    /// Gives this engine its slice of a tier file. `warm`: the file is this heap's tier (its header
    /// names the heap's `tier_id` and these sizes), so the flash slots the table kept are kept for
    /// the segments its records say are in use; otherwise, or when the records cannot be read,
    /// the slice starts cold: every flash slot goes and every record is written free, with
    /// generations no earlier entry has. `Err` when those records cannot be written.
    pub(crate) fn attach_tier(&mut self, file: TierFile, warm: bool) -> std::io::Result<()> {
        let dram = self.geo.segments as u32;
        let flash = file.segments();
        let size = file.segment_size() as u32;
        let records = if warm { file.read_records().ok() } else { None };
        let cold = records.is_none();
        let nonce = random();
        // A record that does not check is a free segment, of a generation no entry has.
        let fresh = |i: u32| FlashSeg { generation: nonce.wrapping_add(u64::from(i)), ..FlashSeg::default() };
        let mut segs: Vec<FlashSeg> = match records {
            Some(records) => (0..flash)
                .zip(records)
                .map(|(i, r)| r.filter(|s| s.seq == 0 || s.written <= size).unwrap_or_else(|| fresh(i)))
                .collect(),
            None => (0..flash).map(fresh).collect(),
        };
        let doubtful = std::mem::take(&mut self.doubtful_flash);
        if !cold {
            self.settle_doubtful(&file, &segs, doubtful);
        }
        // One walk of the table: the slots into each segment in use are counted; those into a
        // segment not in use (or past the tier), or past what its record says was written (the
        // image a sync wrote while it was being filled), lead nowhere, and their chains lose them.
        let mut pool = self.meta().overflow;
        let t = self.table();
        let in_use = |segs: &[FlashSeg], loc: Loc| {
            loc.seg
                .checked_sub(dram)
                .filter(|&i| i < flash && segs[i as usize].seq != 0 && loc.offset < segs[i as usize].written)
                .map(|i| i as usize)
        };
        for chain in 0..=t.mask() {
            // A chain's index serves as its hash: `head` only uses the masked bits.
            let mut stale = false;
            t.scan(chain, |_, v| {
                let loc = slot_loc(v);
                if loc.seg >= dram {
                    match in_use(&segs, loc) {
                        Some(i) => segs[i].live += 1,
                        None => stale = true,
                    }
                }
                false
            });
            while stale {
                let found = t.scan(chain, |_, v| slot_loc(v).seg >= dram && in_use(&segs, slot_loc(v)).is_none());
                match found {
                    Some(slot) => t.remove(chain, slot, &mut pool),
                    None => stale = false,
                }
            }
        }
        self.meta_mut().overflow = pool;
        let tier = Tier::new(file, dram, Ring::restore(segs));
        if cold {
            tier.file.write_records(tier.ring.segs())?;
        }
        self.tier = Some(Box::new(tier));
        Ok(())
    }

    /// Puts back each of the flash slots a crash rebuild set aside (`restore_flash_slots`) whose
    /// entry, read from `file` (segments `segs`), is another key than every heap item of its tag
    /// in its chain; one of the same key was being demoted, and its heap copy stays alone.
    fn settle_doubtful(&mut self, file: &TierFile, segs: &[FlashSeg], doubtful: Vec<(u64, u64)>) {
        let dram = self.geo.segments as u32;
        let mut pool = self.meta().overflow;
        for (chain, v) in doubtful {
            let loc = slot_loc(v);
            let Some(seg) = loc.seg.checked_sub(dram).and_then(|i| Some((i, segs.get(i as usize)?))) else { continue };
            let (index, seg) = seg;
            if seg.seq == 0 {
                continue;
            }
            let Some(read) = file.read_entry(index, loc.offset, seg.generation) else { continue };
            let Some(flash) = parse_flash(&read.bytes[read.start..read.start + read.len], read.meta.cas_base) else {
                continue;
            };
            let t = self.table();
            let tag = slot_tag(v);
            let same = t.scan(chain, |_, w| {
                slot_tag(w) == tag
                    && slot_loc(w).seg < dram
                    && self.record(slot_loc(w)).is_some_and(|r| r.key == flash.key)
            });
            if same.is_none() {
                if let Some(slot) = t.empty_slot(chain, &mut pool) {
                    t.put(chain, slot, v);
                }
            }
        }
        self.meta_mut().overflow = pool;
    }

    /// After a failed write of a flash segment's record: the file no longer tells which flash
    /// slots may be trusted, so the next open does not trust it.
    pub(crate) fn distrust_tier(&mut self) {
        self.meta_mut().tier_id = 0;
    }

    /// Writes flash segment `index`'s record; if that fails, the next open starts the tier cold.
    pub(crate) fn save_flash_seg(&mut self, tier: &Tier, index: u32) {
        if tier.save(index).is_err() {
            self.distrust_tier();
        }
    }

    /// Frees every flash segment (the table is about to be cleared), their records first: a
    /// crash before the clear is over leaves no trusted slot into them.
    pub(crate) fn release_tier(&mut self) {
        let Some(mut tier) = self.tier.take() else { return };
        tier.image = None;
        // Records the writer still holds must not land over these.
        tier.file.settle(None);
        tier.ring.release_all();
        if tier.file.write_records(tier.ring.segs()).is_err() {
            self.distrust_tier();
        }
        self.tier = Some(tier);
    }

    /// Before a crash rebuild clears the table: its flash slots, each with its chain, when the
    /// heap has a tier that may trust them (none when a flush is due: they are gone with it).
    /// The chains are walked as they are: a walk is bounded by its chain's length, and a link out
    /// of range ends it.
    pub(crate) fn flash_slots(&self, flush_due: bool) -> Vec<(u64, u64)> {
        if self.meta().tier_id == 0 || flush_due {
            return Vec::new();
        }
        let dram = self.geo.segments as u32;
        let t = self.table();
        let mut out = Vec::new();
        for chain in 0..=t.mask() {
            t.scan(chain, |_, v| {
                if slot_loc(v).seg >= dram {
                    out.push((chain, v));
                }
                false
            });
        }
        out
    }

    /// After a crash rebuild indexed the heap: puts back the flash slots `flash_slots` took. A
    /// crash in the middle of a chain's change may have left a slot twice: one copy is kept. A
    /// slot whose chain now holds a heap item of its tag waits for the tier (`doubtful_flash`):
    /// if its entry is that item's key, the key was being demoted and its heap copy, the same
    /// item, wins; if another key's, both stay.
    pub(crate) fn restore_flash_slots(&mut self, slots: Vec<(u64, u64)>) {
        let dram = self.geo.segments as u32;
        let t = self.table();
        let mut pool = self.meta().overflow;
        let mut seen = HashSet::with_capacity(slots.len());
        for (chain, v) in slots {
            let tag = slot_tag(v);
            if !seen.insert(v & LOC_MASK) {
                continue;
            }
            if t.scan(chain, |_, w| slot_tag(w) == tag && slot_loc(w).seg < dram).is_some() {
                self.doubtful_flash.push((chain, v));
                continue;
            }
            let Some(slot) = t.empty_slot(chain, &mut pool) else { continue };
            t.put(chain, slot, v);
        }
        self.meta_mut().overflow = pool;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::engine::Segcache;
    use crate::eviction::policy::Policy;

    #[test]
    fn a_crash_rebuild_keeps_every_flash_slot_once() {
        let file = |what: &str| std::env::temp_dir().join(format!("segcache-warm-{}-{what}", std::process::id()));
        let (heap, tier) = (file("heap"), file("tier"));
        let mut c = Segcache::builder()
            .heap_size(64 << 10)
            .segment_size(16 << 10)
            .eviction(Policy::Fifo)
            .path(&heap)
            .tier(&tier, 64 * (16 << 10))
            .build()
            .unwrap();
        for i in 0..1000u32 {
            c.set(&i.to_le_bytes(), &[7; 100], 0, Duration::ZERO).unwrap();
        }
        let flash = c.flash_slots(false);
        assert!(flash.len() > 300, "{}", flash.len());
        assert!(c.flash_slots(true).is_empty(), "a flush due takes them all");
        // A crash in the middle of a chain's change can leave a slot twice.
        let (chain, v) = flash[0];
        let t = c.table();
        let mut pool = c.meta().overflow;
        t.put(chain, t.empty_slot(chain, &mut pool).unwrap(), v);
        c.meta_mut().overflow = pool;
        assert_eq!(c.flash_slots(false).len(), flash.len() + 1);
        c.rebuild();
        assert_eq!(c.flash_slots(false).len(), flash.len());
        c.verify().unwrap();
        assert!((0..1000u32).all(|i| c.get(&i.to_le_bytes()).is_some_and(|it| it.value() == [7; 100])));
        drop(c);
        let _ = (std::fs::remove_file(&heap), std::fs::remove_file(&tier));
    }

    /// A crash rebuild meets a flash item and a heap item of another key that share a chain and a
    /// tag: both come back. (A heap copy of the flash item's own key wins alone.) A child process
    /// writes and exits without closing the cache, as a killed one would leave it.
    #[test]
    fn a_crash_keeps_a_flash_item_beside_another_keys_heap_item_of_its_tag() {
        use crate::hash::hash;
        use crate::hashtable::slot::tag_of;

        const CHILD: &str = "SEGCACHE_WARM_TAG_CHILD";
        let file = |what: &str| std::env::temp_dir().join(format!("segcache-warm-{what}"));
        let dir = std::env::var(CHILD).unwrap_or_else(|_| format!("{}", std::process::id()));
        let (heap, tier) = (file(&format!("{dir}-tag-heap")), file(&format!("{dir}-tag-tier")));
        let open = || {
            Segcache::builder()
                .heap_size(64 << 10)
                .segment_size(16 << 10)
                .hash_power(6)
                .eviction(Policy::Fifo)
                .path(&heap)
                .tier(&tier, 64 * (16 << 10))
                .tier_write_queue(0)
                .build()
                .unwrap()
        };
        // Two keys of one chain and tag.
        let mask = (1u64 << 6) - 1;
        let at = |k: &[u8]| (hash(k) & mask, tag_of(hash(k)));
        let a = b"flash-0".to_vec();
        let b = (0u32..).map(|i| format!("heap-{i}").into_bytes()).find(|k| at(k) == at(&a)).unwrap();
        if std::env::var(CHILD).is_ok() {
            let mut c = open();
            assert_eq!(c.table().mask(), mask);
            c.set(&a, b"on flash", 0, Duration::ZERO).unwrap();
            // Twice the heap, within what the small table holds.
            for i in 0..500u32 {
                c.set(&i.to_le_bytes(), &[7; 250], 0, Duration::ZERO).unwrap();
            }
            assert!(c.stats().flash_items > 0);
            c.set(&b, b"in the heap", 0, Duration::ZERO).unwrap();
            assert_eq!(c.get(&a).unwrap().value(), b"on flash");
            std::process::exit(0);
        }
        let _ = (std::fs::remove_file(&heap), std::fs::remove_file(&tier));
        crate::engine::run_child_test(
            "engine::warm::tests::a_crash_keeps_a_flash_item_beside_another_keys_heap_item_of_its_tag",
            CHILD,
            &dir,
        );
        let c = open();
        assert_eq!(c.get(&b).unwrap().value(), b"in the heap");
        assert_eq!(c.get(&a).map(|i| i.value().to_vec()), Some(b"on flash".to_vec()), "the flash item came back");
        drop(c);
        let _ = (std::fs::remove_file(&heap), std::fs::remove_file(&tier));
    }
}
