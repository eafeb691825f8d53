//! Demotion to the flash tier: the items that eviction gives up (a cleared segment's live items, or
//! those a merge does not keep) go into an image of the tier's next flash segment, their slots
//! repointed there, and the image is written when full or when the eviction ends; the flash
//! segment an image replaces is reclaimed first (its slots dropped, its generation bumped).
//!
//! The tier file's record of a segment changes in an order that a crash at any point leaves safe
//! (see `warm.rs`): the record of the segment an image opens on says it is free, in its new
//! generation, before any slot leads into it; the image is written before the record says the
//! segment is in use. A reclaim drops its slots before that first record is written, so a slot
//! left by a crash in the middle of it leads into a segment still in use in its old generation,
//! whose entries are that generation's.

use crate::engine::Segcache;
use crate::hash::hash;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::Table;
use crate::tier::entry::{self, EntryMeta};
use crate::tier::image::Image;
use crate::tier::Tier;
use crate::ttl_buckets::expire::live_until;

impl Segcache {
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

    /// Whether an item of key hash `h` that an eviction gives up is the version of the key a
    /// write under way replaces (see `Tier::writing`): it is not demoted, and it is the write's
    /// to replace, not an item evicted.
    pub(crate) fn replaced_by_write(&self, h: u64) -> bool {
        self.tier.as_deref().is_some_and(|tier| tier.writing == h)
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
            // The device is behind: the item goes as it would without a tier, rather than the
            // eviction waiting.
            if tier.file.behind(1) {
                tier.counts.demotions_dropped += 1;
                return false;
            }
            let index = tier.ring.next();
            if tier.ring.in_use(index) {
                self.reclaim(tier, index);
            }
            // On file, free and in its new generation, before a slot leads into it.
            self.save_flash_seg(tier, index);
            tier.image = Some(Image::new(index, tier.ring.seg(index).generation, size));
        }
        let Some(f) = self.table().find_loc(h, loc) else { return false };
        let image = tier.image.as_mut().expect("an image was opened above");
        let offset = image.put(&self.seg_bytes(loc.seg)[loc.offset as usize..][..len], meta, h);
        tier.counts.demoted += 1;
        let to = Loc { seg: tier.ids.seg_id(image.index()), offset };
        Table::relocate(f.slot, f.value, slot::slot_freq(f.value), to);
        true
    }

    /// Every eviction that demotes calls it before it returns. The image stays open for the
    /// next eviction until it is full (or a sync, a close or a flush comes): an eviction gives
    /// up a segment's live items, a merge only some of them, and an image written whole at each
    /// eviction's end would leave most flash segments partly empty. Without a queue, what the
    /// image gained is written at once, then its record (see `write_tail`), so that a process
    /// killed after the eviction loses none of its items. Either way, the images that failed
    /// are dropped.
    pub(crate) fn finish_demotion(&mut self) {
        let Some(mut tier) = self.tier.take() else { return };
        if tier.file.inline() {
            self.write_tail(&mut tier);
        }
        self.drop_failed_images(&mut tier);
        self.tier = Some(tier);
    }

    /// Writes the entries the open image gained since its last write, then its record: in use,
    /// up to there (as `sync_tier` writes it). A reopen trusts the slots into what the record
    /// covers. A write that fails hands the image over whole, to fail as any image does.
    fn write_tail(&mut self, tier: &mut Tier) {
        let Some(image) = tier.image.as_mut().filter(|image| image.unwritten() > 0) else { return };
        let seg = tier.ring.filled(image.bytes().len() as u32, image.live(), image.expire_at());
        if tier.file.write_tail(image, &seg).is_ok() {
            image.mark_written();
        } else {
            self.write_image(tier);
        }
    }

    /// Writes the tier to stable storage: the images queued, and what the image being filled
    /// holds so far, with a record that says so (the image stays open, and a later write of it
    /// whole, or a reclaim, supersedes both). A crash after this serves every item demoted before
    /// it; one demoted later into the same image reads as a miss (its entry does not check).
    pub(crate) fn sync_tier(&self) -> crate::error::Result<()> {
        let Some(tier) = self.tier.as_deref() else { return Ok(()) };
        if let Some(image) = tier.image.as_ref().filter(|image| !image.entries().is_empty()) {
            let seg = tier.ring.filled(image.bytes().len() as u32, image.live(), image.expire_at());
            tier.file.write_now(image, &seg)?;
        }
        tier.file.sync()
    }

    /// Hands the open image, if any, to the writer: before a graceful stop.
    pub(crate) fn close_image(&mut self) {
        let Some(mut tier) = self.tier.take() else { return };
        self.write_image(&mut tier);
        self.tier = Some(tier);
    }

    /// Hands the open image to the writer, as the ring's head. Its slots already lead there, and
    /// reads are served from the image until it is written. Then drops what earlier images
    /// whose write failed hold (see `drop_failed`).
    fn write_image(&mut self, tier: &mut Tier) {
        if let Some(image) = tier.image.take() {
            // An image that took nothing leaves its segment free (a reclaim may have emptied it).
            if !image.entries().is_empty() {
                debug_assert_eq!(image.index(), tier.ring.next(), "images are written to the ring's head");
                let written = image.bytes().len() as u32;
                tier.ring.fill(written, image.live(), image.expire_at());
                tier.counts.bytes_written += u64::from(written);
                // Its record says it is in use once the writer has written it (see `writer.rs`).
                let seg = *tier.ring.seg(image.index());
                tier.file.submit(image, &seg);
            }
        }
        self.drop_failed_images(tier);
    }

    /// Drops what the images whose write failed hold (see `drop_failed`).
    fn drop_failed_images(&mut self, tier: &mut Tier) {
        for job in tier.file.reap() {
            self.drop_failed(tier, &job.image, job.generation);
        }
    }

    /// An image whose write failed: the slots that still lead into it go, their items with them
    /// (counted as evicted, and as demotions dropped), and its segment is free again, unless a
    /// reclaim already freed it. Its record on file still says it is free.
    fn drop_failed(&mut self, tier: &mut Tier, image: &Image, generation: u64) {
        let index = image.index();
        if tier.ring.seg(index).generation != generation {
            return;
        }
        let seg = tier.ids.seg_id(index);
        let mut removed = 0;
        for &(h, offset) in image.entries() {
            if let Some(f) = self.table().find_loc(h, Loc { seg, offset }) {
                self.remove_slot(h, f.slot);
                removed += 1;
            }
        }
        tier.ring.release(index);
        tier.counts.demotions_dropped += removed;
        self.meta_mut().evicted_items += removed;
    }

    /// Reclaims flash segment `index`: drops the slots that still point into it (found by reading
    /// its image back, or by a sweep of the table where the image no longer says), then frees it
    /// with a new generation.
    fn reclaim(&mut self, tier: &mut Tier, index: u32) {
        // The writer writes the record of the image it holds after that image: done with it
        // first, so that the record this reclaim leads to is not written over by an older one.
        tier.file.settle(Some(index));
        let fs = *tier.ring.seg(index);
        let seg_id = tier.ids.seg_id(index);
        let mut removed = 0u64;
        if fs.live > 0 {
            if let Ok(image) = tier.file.read_segment(index, fs.generation, fs.written as usize) {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::builder::Builder;
    use crate::engine::Segcache;
    use crate::eviction::policy::Policy;
    use crate::tier::writer::Writer;

    const SEG: usize = 16 << 10;

    fn key(i: usize) -> Vec<u8> {
        format!("key-{i:06}").into_bytes()
    }

    fn value(i: usize) -> Vec<u8> {
        let mut v = format!("{i}:").into_bytes();
        v.resize(100 + i % 300, b'a' + (i % 26) as u8);
        v
    }

    /// A heap of 4 segments over a tier of 64, whose writer queues at most `queue` bytes.
    fn tiered(name: &str, queue: usize) -> (Segcache, Arc<Writer>, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("segcache-demote-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let c = Builder::new()
            .heap_size(4 * SEG)
            .segment_size(SEG)
            .eviction(Policy::Fifo)
            .tier(&path, (64 * SEG) as u64)
            .tier_write_queue(queue)
            .build()
            .unwrap();
        let writer = Arc::clone(&c.tier.as_deref().unwrap().file.writer);
        (c, writer, path)
    }

    /// Every key reads back its exact value or misses; returns how many read back.
    fn check(c: &Segcache, n: usize) -> usize {
        (0..n)
            .filter(|&i| match c.get(&key(i)) {
                Some(item) => {
                    assert_eq!(item.value(), &value(i)[..], "key {i}");
                    true
                }
                None => false,
            })
            .count()
    }

    /// Without a queue, each eviction writes what it demoted before it returns, and the next one
    /// goes on filling the same flash segment: items that take 70% of the tier fit in it whole,
    /// none reclaimed.
    #[test]
    fn without_a_queue_evictions_fill_flash_segments_whole() {
        let (mut c, _writer, path) = tiered("whole", 0);
        let mut bytes = 0;
        let mut n = 0;
        while bytes < 64 * SEG * 7 / 10 {
            c.set(&key(n), &value(n), 0, Duration::ZERO).unwrap();
            bytes += key(n).len() + value(n).len();
            n += 1;
        }
        let s = c.stats();
        assert!(s.flash_demoted > n as u64 / 2, "{s:?}");
        assert_eq!((s.flash_reclaimed_segments, s.evicted_items), (0, 0), "{s:?}");
        assert_eq!(check(&c, n), n);
        drop(c);
        let _ = std::fs::remove_file(&path);
    }

    /// What a kill inside a promotion can leave: a key's item in DRAM beside a flash copy, or two
    /// flash copies of one version. The key's next write keeps the DRAM copy (else promotes one
    /// flash copy) and drops every other, so that no older copy can undo a later write.
    #[test]
    fn a_write_keeps_one_copy_of_a_key_found_in_dram_and_on_flash() {
        use crate::engine::write::{Mode, NewState};
        use crate::hashtable::slot;
        let (mut c, _writer, path) = tiered("copies", 0);
        let fill = |c: &mut Segcache, keys: std::ops::Range<usize>| {
            for i in keys {
                c.set(&key(i), &value(i), 0, Duration::ZERO).unwrap();
            }
        };
        // Stored as the promotion stores, without the write's own promotion first.
        let store = |c: &mut Segcache, k: &[u8], v: &[u8]| {
            let (h, now) = (crate::hash::hash(k), c.now());
            c.store_at(k, h, &[v], 0, 0, Mode::Set, now, NewState::default(), false).unwrap();
        };
        let on_flash = |c: &Segcache, k: &[u8]| c.contains_flash(k, crate::hash::hash(k), c.now());
        // Slots of the key's tag that lead past the heap (no other key of these shares its tag).
        let flash_slots = |c: &Segcache, k: &[u8]| {
            let h = crate::hash::hash(k);
            let mut n = 0;
            c.table().scan(h, |_, v| {
                n += usize::from(
                    slot::slot_tag(v) == slot::tag_of(h) && slot::slot_loc(v).seg as usize >= c.geo.segments,
                );
                false
            });
            n
        };
        fill(&mut c, 0..2000);
        // Keys demoted last: their flash segments are not reclaimed before the end.
        let mut demoted = (0..2000).rev().map(key).filter(|k| c.record_location(k).is_none() && on_flash(&c, k));
        let (k0, k1) = (demoted.next().unwrap(), demoted.next().unwrap());
        // A DRAM copy beside the flash one: the write appends to the DRAM copy.
        store(&mut c, &k0, b"dram");
        c.append(&k0, b"+x").unwrap();
        assert_eq!(c.get(&k0).unwrap().value(), b"dram+x");
        assert!(!on_flash(&c, &k0) && flash_slots(&c, &k0) == 0, "the flash copy went");
        // Two flash copies of one version: the DRAM copy pushed out beside the first.
        store(&mut c, &k1, b"demoted twice");
        fill(&mut c, 2000..2400);
        assert!(c.record_location(&k1).is_none());
        assert_eq!(flash_slots(&c, &k1), 2);
        c.set(&k1, b"latest", 0, Duration::ZERO).unwrap();
        assert_eq!(flash_slots(&c, &k1), 0, "no flash copy is left");
        fill(&mut c, 4000..6000);
        assert_eq!(c.get(&k1).unwrap().value(), b"latest");
        c.set(&k1, b"later", 0, Duration::ZERO).unwrap();
        assert_eq!(c.get(&k1).unwrap().value(), b"later");
        drop(c);
        let _ = std::fs::remove_file(&path);
    }

    /// While the device is stalled, the writer's queue fills with one image; evictions after
    /// that drop their items instead of waiting, and say so. The queued image's items are
    /// served from memory meanwhile, and from the file once it is written.
    #[test]
    fn a_stalled_device_makes_eviction_drop_instead_of_wait() {
        let (mut c, writer, path) = tiered("stalled", SEG);
        let stall = writer.stall();
        for i in 0..2000 {
            c.set(&key(i), &value(i), 0, Duration::ZERO).unwrap();
        }
        let s = c.stats();
        assert!(s.flash_demotions_dropped > 0, "{s:?}");
        assert!(s.flash_items > 0 && s.flash_demoted < 200, "one image at most: {s:?}");
        let held = check(&c, 2000);
        assert!(c.stats().flash_hits > 0, "the queued image serves reads");
        drop(stall);
        c.tier.as_deref().unwrap().file.settle(None);
        assert_eq!(check(&c, 2000), held, "written, the same items read back from the file");
        c.flush();
        for i in 0..2000 {
            c.set(&key(i), &value(i), 0, Duration::ZERO).unwrap();
            c.tier.as_deref().unwrap().file.settle(None);
        }
        let s = c.stats();
        assert!(s.flash_items > 1000, "a device that keeps up takes every eviction: {s:?}");
        drop(c);
        std::fs::remove_file(path).unwrap();
    }

    /// Without a queue each eviction writes its images before it returns: nothing a set
    /// demoted waits in memory, so a process killed after it loses none of it.
    #[test]
    fn without_a_queue_every_image_is_written_before_the_eviction_returns() {
        let (mut c, _writer, path) = tiered("inline", 0);
        for i in 0..2000 {
            c.set(&key(i), &value(i), 0, Duration::ZERO).unwrap();
            assert!(c.tier.as_deref().unwrap().file.all_written(), "key {i}");
        }
        let s = c.stats();
        assert!(s.flash_demoted > 1000 && s.flash_demotions_dropped == 0, "{s:?}");
        assert_eq!(check(&c, 2000) as u64, s.items + s.flash_items);
        drop(c);
        std::fs::remove_file(path).unwrap();
    }

    /// A device whose writes fail: the items of each image are served from it until the failure
    /// is known, then dropped, counted; nothing ever reads back wrong.
    #[test]
    fn a_failing_device_loses_what_it_could_not_write_and_nothing_else() {
        for queue in [8 << 20, 0] {
            failing_device(queue);
        }
    }

    fn failing_device(queue: usize) {
        let (mut c, writer, path) = tiered("failing", queue);
        writer.fail_writes();
        for i in 0..2000 {
            c.set(&key(i), &value(i), 0, Duration::ZERO).unwrap();
            if i % 100 == 0 {
                check(&c, i);
            }
        }
        c.tier.as_deref().unwrap().file.settle(None);
        // Every failure is known now; the next demotion learns of them all. Only the images
        // that demotion hands over may still be in flight after it (a segment's worth).
        let demoted = c.stats().flash_demoted;
        let mut i = 2000;
        while c.stats().flash_demoted == demoted {
            c.set(&key(i), &value(i), 0, Duration::ZERO).unwrap();
            i += 1;
        }
        let s = c.stats();
        assert!(s.flash_demotions_dropped > 1000, "{s:?}");
        let segment_items = (SEG / 100) as u64;
        assert!(s.flash_items <= segment_items, "only the images not yet known to have failed: {s:?}");
        let held = check(&c, i);
        assert!(held >= s.items as usize - s.flash_items as usize, "the heap's items are intact");
        drop(c);
        std::fs::remove_file(path).unwrap();
    }

    /// Evictions that each give up part of a segment still fill the tier's segments whole: the
    /// image stays open from one eviction to the next and is written once full, its items served
    /// from it meanwhile.
    #[test]
    fn images_fill_whole_flash_segments_across_evictions() {
        let (mut c, _writer, path) = tiered("fill", 8 << 20);
        // Each key is written twice, a few stores apart: a heap segment that eviction clears
        // holds about half its records live.
        let n = 3000;
        for i in 0..n {
            c.set(&key(i), &value(i), 0, Duration::ZERO).unwrap();
            if i >= 4 {
                c.set(&key(i - 4), &value(i - 4), 0, Duration::ZERO).unwrap();
            }
        }
        let s = c.stats();
        assert!(s.flash_items > 1000 && s.flash_reclaimed_segments == 0, "{s:?}");
        assert_eq!(check(&c, n) as u64, s.items + s.flash_items, "every item reads back");
        let tier = c.tier.as_deref().unwrap();
        tier.file.settle(None);
        let written: Vec<u32> =
            (0..tier.file.segments()).map(|i| *tier.ring.seg(i)).filter(|s| s.seq != 0).map(|s| s.written).collect();
        // An entry is at most a head and a 420-byte record: what a full image may leave unused.
        let full = SEG as u32 - 512;
        assert!(written.len() >= 10 && written.iter().all(|&w| w >= full), "{written:?}");
        assert!(tier.image.as_ref().is_some_and(|image| image.live() > 0), "the rest waits in the open image");
        c.verify().unwrap();
        drop(c);
        std::fs::remove_file(path).unwrap();
    }

    /// `sync` writes what the open image holds: a process that ends without closing after it
    /// leaves every item that was on flash at the sync readable; items demoted into the same
    /// image after the sync read back whole or miss. A child process writes and exits, as a
    /// killed one would, and names the keys that were on flash at the sync.
    #[test]
    fn a_sync_writes_the_open_image_and_a_crash_after_it_keeps_those_items() {
        const CHILD: &str = "SEGCACHE_DEMOTE_SYNC_CHILD";
        let dir = std::env::var(CHILD).unwrap_or_else(|_| format!("{}", std::process::id()));
        let file = |what: &str| std::env::temp_dir().join(format!("segcache-demote-sync-{dir}-{what}"));
        let (heap, tier, listed) = (file("heap"), file("tier"), file("on-flash"));
        let open = || {
            Builder::new()
                .heap_size(4 * SEG)
                .segment_size(SEG)
                .eviction(Policy::Fifo)
                .path(&heap)
                .tier(&tier, (64 * SEG) as u64)
                .build()
                .unwrap()
        };
        if std::env::var(CHILD).is_ok() {
            let mut c = open();
            let mut n = 800;
            for i in 0..n {
                c.set(&key(i), &value(i), 0, Duration::ZERO).unwrap();
            }
            let open_image = |c: &Segcache| c.tier.as_deref().unwrap().image.as_ref().map_or(0, |image| image.live());
            while open_image(&c) == 0 {
                c.set(&key(n), &value(n), 0, Duration::ZERO).unwrap();
                n += 1;
                assert!(n < 3000, "evictions leave an image open");
            }
            c.sync().unwrap();
            let on_flash: Vec<String> =
                (0..n).filter(|&i| c.record_location(&key(i)).is_none()).map(|i| i.to_string()).collect();
            std::fs::write(&listed, on_flash.join(" ")).unwrap();
            // More for the same image, not synced.
            let before = open_image(&c);
            while open_image(&c) == before {
                c.set(&key(n), &value(n), 0, Duration::ZERO).unwrap();
                n += 1;
                assert!(n < 3000, "evictions leave an image open");
            }
            std::process::exit(0);
        }
        let _ = (std::fs::remove_file(&heap), std::fs::remove_file(&tier));
        crate::engine::run_child_test(
            "engine::demote::tests::a_sync_writes_the_open_image_and_a_crash_after_it_keeps_those_items",
            CHILD,
            &dir,
        );
        let on_flash: Vec<usize> =
            std::fs::read_to_string(&listed).unwrap().split(' ').map(|i| i.parse().unwrap()).collect();
        assert!(on_flash.len() > 100);
        let c = open();
        let missing: Vec<usize> = on_flash.into_iter().filter(|&i| c.get(&key(i)).is_none()).collect();
        assert_eq!(missing, Vec::<usize>::new(), "every item on flash at the sync");
        check(&c, 3000);
        c.verify().unwrap();
        drop(c);
        let _ = (std::fs::remove_file(&heap), std::fs::remove_file(&tier), std::fs::remove_file(&listed));
    }
}
