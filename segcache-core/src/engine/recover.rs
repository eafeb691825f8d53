//! Checking a reopened heap, and rebuilding the index after a crash.

use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::{Acquire, Release};

use crate::engine::Segcache;
use crate::hash::hash;
use crate::hashtable::slot::{self, Loc};
use crate::record;
use crate::segments::header::{NONE, POOL_SMALL, SEG_OPEN, SEG_SEALED};
use crate::ttl_buckets::bucket::TtlBucket;
use crate::ttl_buckets::ttl;

/// Check states of `Segcache::unchecked`.
const UNCHECKED: u8 = 0;
const GOOD: u8 = 1;
const BAD: u8 = 2;

impl Segcache {
    /// After a graceful close: checks every segment in use among `ids` against the checksum
    /// taken at close; `Err` names the first bad one.
    pub(crate) fn verify_segments(&self, ids: std::ops::Range<u32>) -> Result<(), String> {
        match ids.into_iter().find(|&id| !self.matches_close_sum(id)) {
            Some(id) => Err(format!("segment {id} does not match its checksum (corrupt heap)")),
            None => Ok(()),
        }
    }

    /// The segment is unused, or its bytes are those it had at the graceful close.
    fn matches_close_sum(&self, id: u32) -> bool {
        let s = self.seg(id);
        !matches!(s.state, SEG_OPEN | SEG_SEALED)
            || (s.write_offset as usize <= self.geo.segment_size
                && xxhash_rust::xxh3::xxh3_64(self.seg_data(id)) == s.close_sum)
    }

    /// After a clean reopen with `lazy_verify`: every segment is checked at its first use
    /// instead of now.
    pub(crate) fn defer_segment_checks(&mut self) {
        self.unchecked = Some((0..self.geo.segments).map(|_| AtomicU8::new(UNCHECKED)).collect());
    }

    /// Whether records of segment `id` may be read: after a lazily verified reopen, the first
    /// read of a segment checks it (readers racing on one segment may both check it; the
    /// result is the same).
    #[inline]
    pub(crate) fn readable_segment(&self, id: u32) -> bool {
        let Some(states) = &self.unchecked else { return true };
        match states[id as usize].load(Acquire) {
            GOOD => true,
            BAD => false,
            _ => self.check_segment(states, id),
        }
    }

    #[cold]
    fn check_segment(&self, states: &[AtomicU8], id: u32) -> bool {
        let ok = self.matches_close_sum(id);
        states[id as usize].store(if ok { GOOD } else { BAD }, Release);
        ok
    }

    /// Before the first write after a lazily verified reopen: checks the segments no read has
    /// checked yet, and drops the corrupt ones (their items become misses), with a warning.
    #[cold]
    pub(crate) fn finish_checks(&mut self) {
        let Some(states) = self.unchecked.take() else { return };
        let mut dropped = 0;
        for id in 0..self.geo.segments as u32 {
            let good = match states[id as usize].load(Acquire) {
                UNCHECKED => self.matches_close_sum(id),
                state => state == GOOD,
            };
            if !good {
                self.drop_corrupt_segment(id);
                dropped += 1;
            }
        }
        self.dropped_segments += dropped;
        if dropped > 0 {
            eprintln!(
                "segcache: warning: {dropped} segment(s) did not match their checksums after reopening \
                 (corrupt heap) and were dropped with their items"
            );
        }
    }

    /// Removes every slot pointing into the segment (its records cannot be trusted to find
    /// them) and frees it.
    fn drop_corrupt_segment(&mut self, id: u32) {
        let mut pool = self.meta().overflow;
        self.table().remove_where(|loc| loc.seg == id, &mut pool);
        self.meta_mut().overflow = pool;
        self.free_segment(id);
    }

    /// Before a graceful close: takes every used segment's checksum (see `verify_segments`).
    pub(crate) fn seal_for_close(&mut self) {
        // A segment never checked since the reopen must not be vouched for unchecked.
        self.finish_checks();
        for id in 0..self.geo.segments as u32 {
            if matches!(self.seg(id).state, SEG_OPEN | SEG_SEALED) {
                let sum = xxhash_rust::xxh3::xxh3_64(self.seg_data(id));
                self.seg_mut(id).close_sum = sum;
            }
        }
    }

    /// Records tile the segment up to its write offset and their checksums add up to the
    /// header's sum, or would but for the last record: the process may have died between
    /// publishing that record's offset and adding its checksum.
    pub(crate) fn segment_checks_out(&self, id: u32) -> bool {
        let s = self.seg(id);
        if s.write_offset as usize > self.geo.segment_size
            || s.ttl_bucket as usize >= ttl::BUCKETS
            || s.pool > POOL_SMALL
        {
            return false;
        }
        let data = self.seg_data(id);
        let mut off = 0;
        let mut sum = 0u64;
        let mut last = 0u64;
        while off < data.len() {
            let Some(r) = record::parse(&data[off..], s.cas_base) else { return false };
            last = record::checksum(&data[off..off + r.len]);
            sum = sum.wrapping_add(last);
            off += r.len;
        }
        sum == s.sum || sum.wrapping_sub(last) == s.sum
    }

    /// Rebuilds the hash table, TTL chains, free list and counts from the segments after a
    /// crash. Segments that fail their checks are dropped. Returns (items recovered, segments
    /// dropped as corrupt).
    pub(crate) fn rebuild(&mut self) -> (u64, u64) {
        // The segment of a rewrite in place left half done would fail its checks.
        self.roll_back_rewrite();
        let now = self.now();
        let n = self.geo.segments as u32;
        let flushed_below = self.meta().flushed_below;
        let flush_due = self.meta().flush_at != 0 && now >= self.meta().flush_at;
        let mut keep: Vec<(u64, u32)> = Vec::new();
        let mut corrupt = 0;
        for id in 0..n {
            let s = *self.seg(id);
            if !matches!(s.state, SEG_OPEN | SEG_SEALED) || s.seq <= flushed_below || flush_due {
                continue;
            }
            if self.segment_checks_out(id) {
                keep.push((s.seq, id));
            } else {
                corrupt += 1;
            }
        }
        keep.sort_unstable();
        let intent = Loc { seg: self.meta().intent_seg, offset: self.meta().intent_offset };

        // The flash tier's slots outlive the table's rebuild: they are put back after it.
        let flash = self.flash_slots(flush_due);
        // Empty structures, then the kept segments back in, oldest first.
        self.table().clear();
        for b in 0..ttl::BUCKETS {
            *self.ttl_bucket_mut(b) = TtlBucket::EMPTY;
        }
        self.large.chunks = 0;
        {
            let m = self.meta_mut();
            m.free_head = NONE;
            m.free_count = 0;
            m.spare = NONE;
            m.overflow = Default::default();
            m.items = 0;
            m.bytes = 0;
            m.small_segments = 0;
            m.intent_seg = NONE;
            m.last_expire = 0;
            if flush_due {
                m.flush_at = 0;
            }
        }
        let mut kept = vec![false; n as usize];
        for &(_, id) in &keep {
            kept[id as usize] = true;
        }
        for id in (0..n).rev() {
            if !kept[id as usize] {
                self.segments().push_free(id);
            }
        }
        let mut recovered = 0;
        for &(_, id) in &keep {
            {
                let s = self.seg_mut(id);
                s.state = SEG_SEALED;
                s.live_items = 0;
                s.live_bytes = 0;
            }
            let b = self.seg(id).ttl_bucket as usize;
            let (mut segments, mut buckets) = self.segments_and_ttl();
            buckets.link_tail(&mut segments, b, id);
            self.for_each_live(id, |s, loc, h, _| {
                if s.index_recovered(loc, h) {
                    recovered += 1;
                }
            });
        }
        // The publish in flight at the crash wins over the copy it was replacing.
        if (intent.seg as usize) < kept.len()
            && kept[intent.seg as usize]
            && intent.offset < self.seg(intent.seg).write_offset
        {
            if let Some(h) = self.record_at(intent).map(|r| hash(r.key)) {
                self.index_recovered(intent, h);
            }
        }
        self.restore_flash_slots(flash);
        self.fit_spare_to_policy();
        self.dropped_segments += corrupt;
        (recovered, corrupt)
    }

    /// After a process died holding this shard's lock (`Builder::multi_process`): whatever it
    /// was changing may be half done, so the shard is rebuilt from its segments as after a
    /// crash. Its write in flight is lost; everything else stays.
    pub(crate) fn repair_after_death(&mut self) {
        let (items, corrupt) = self.rebuild();
        eprintln!(
            "segcache: warning: a process died holding shard {}'s lock; the shard was rebuilt from its segments \
             ({items} items, {corrupt} segments dropped)",
            self.mem.index
        );
    }

    /// Points the record's key at `loc`, marking any other copy dead. `false` if the record is
    /// unreadable or there is no room for it in its hash chain.
    fn index_recovered(&mut self, loc: Loc, h: u64) -> bool {
        let t = self.table();
        let (len, cas, existing) = {
            let Some(r) = self.record_at(loc).filter(|r| !r.dead) else { return false };
            // A client-chosen CAS value is no counter value.
            let cas = if r.stamp.cas_hi.is_some() { 0 } else { r.stamp.cas };
            (r.len as u32, cas, t.find(h, |l| self.record_at(l).is_some_and(|o| o.key == r.key)))
        };
        // The shard's counter lies in the mapped file and survives a process crash; after a
        // system crash it may lag the records written: it must stay above every counter found.
        let next = &self.meta().next_cas;
        if cas >= next.load(std::sync::atomic::Ordering::Relaxed) && cas != u32::MAX {
            next.store(cas + 1, std::sync::atomic::Ordering::Relaxed);
        }
        let new = slot::pack(slot::tag_of(h), 0, loc);
        if let Some(f) = existing {
            if slot::slot_loc(f.value) == loc {
                return true;
            }
            self.kill_at(slot::slot_loc(f.value));
            t.put(h, f.slot, new);
        } else {
            let mut pool = self.meta().overflow;
            let Some(slot) = t.empty_slot(h, &mut pool) else {
                self.mark_dead_only(loc);
                return false;
            };
            self.meta_mut().overflow = pool;
            t.put(h, slot, new);
        }
        self.count_live(loc.seg, len);
        if self.is_chunk_at(loc) {
            self.large.chunks += 1;
        }
        true
    }
}
