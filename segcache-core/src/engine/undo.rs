//! Rewrites in place in a file heap, made crash-safe by an undo record.
//!
//! A store that keeps its record's length goes where the old record lies (`engine::rewrite`).
//! In a file, a process killed in the middle of that would leave a record half old, half new:
//! crash recovery would find its segment's checksums no longer adding up and drop every item in
//! it. So a rewrite first saves the old record and its segment's checksum sum in the shard's
//! undo record (`meta::Undo`), and clears it once the new record and the sum are whole;
//! `rebuild`, which crash recovery and the repair after a dead process both run, puts back
//! whatever an undo record still holds. A crash thus leaves the old value or the new one, as an
//! append does.
//!
//! One undo record per shard is enough because a file heap's rewrites run one at a time per
//! shard: under the exclusive lock, or, where processes share the file, under the shard's lock,
//! which is then a mutex (see `Segcache::rewrites_shared`). Records over `UNDO_BYTES` are
//! appended instead.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicU64};

use crate::engine::Segcache;
use crate::hashtable::slot::Loc;
use crate::meta::UNDO_BYTES;
use crate::record;

/// A rewrite in progress (`Segcache::begin_rewrite`): the old record's checksum, which the
/// segment's sum loses when the new record's replaces it.
#[must_use = "end_rewrite completes the rewrite"]
pub(crate) struct Rewrite {
    old_sum: u64,
}

impl Segcache {
    /// Whether a record of `len` bytes may be rewritten in place: any, without a file; in a file,
    /// one that the undo record holds.
    #[inline]
    pub(crate) fn may_rewrite(&self, len: usize) -> bool {
        !self.durable || len <= UNDO_BYTES
    }

    /// Before the `len` bytes at `loc`, a live record, are rewritten in place by a caller that
    /// keeps out every other writer of the shard: in a file, saves them and their segment's
    /// checksum sum in the shard's undo record.
    #[inline]
    pub(crate) fn begin_rewrite(&self, loc: Loc, len: usize) -> Rewrite {
        // Only a file outlives a crash: without one, the test is all a rewrite pays.
        if !self.durable {
            return Rewrite { old_sum: 0 };
        }
        self.save_undo(loc, len)
    }

    /// `begin_rewrite` in a file.
    #[inline(never)]
    fn save_undo(&self, loc: Loc, len: usize) -> Rewrite {
        assert!(len <= UNDO_BYTES);
        let mut old = [0u8; UNDO_BYTES];
        // SAFETY: `len` bytes in the heap (checked by `record_ptr`), at most `old`'s. Only its access byte and `WON` bit may change meanwhile (lock-free
        // readers), and the checksum ignores both.
        unsafe { std::ptr::copy_nonoverlapping(self.record_ptr(loc, len), old.as_mut_ptr(), len) };
        let undo = &self.meta().undo;
        for (word, bytes) in undo.bytes.iter().zip(old[..len.next_multiple_of(8)].chunks_exact(8)) {
            word.store(u64::from_le_bytes(bytes.try_into().expect("8 bytes")), Relaxed);
        }
        undo.seg.store(loc.seg, Relaxed);
        undo.offset.store(loc.offset, Relaxed);
        undo.sum.store(self.seg(loc.seg).sum, Relaxed);
        undo.len.store(len as u32, Release);
        // The rewrite's stores follow: none may be seen before the undo record is (a release
        // orders only the stores before it).
        fence(SeqCst);
        Rewrite { old_sum: record::checksum(&old[..len]) }
    }

    /// After the rewrite that `begin_rewrite` began: the segment's checksum sum takes the new
    /// record's, then the undo record is cleared.
    #[inline]
    pub(crate) fn end_rewrite(&self, loc: Loc, len: usize, rewrite: Rewrite) {
        if self.durable {
            self.clear_undo(loc, len, rewrite);
        }
    }

    /// `end_rewrite` in a file.
    #[inline(never)]
    fn clear_undo(&self, loc: Loc, len: usize, rewrite: Rewrite) {
        let mut new = [0u8; UNDO_BYTES];
        // SAFETY: as in `begin_rewrite`.
        unsafe { std::ptr::copy_nonoverlapping(self.record_ptr(loc, len), new.as_mut_ptr(), len) };
        let delta = record::checksum(&new[..len]).wrapping_sub(rewrite.old_sum);
        // SAFETY: the header of a segment in bounds (checked by `record_ptr`), in the live region, 8-aligned
        // (`SegHeader` is `repr(C)` with `sum` after a `u64`); the caller keeps out every other
        // writer of the shard, so no other store to it races this one.
        let sum = unsafe { AtomicU64::from_ptr(&raw mut (*self.mem.segs.add(loc.seg as usize)).sum) };
        sum.store(sum.load(Relaxed).wrapping_add(delta), Relaxed);
        self.meta().undo.len.store(0, Release);
    }

    /// Before crash recovery checks the segments: puts back the rewrite in place that a crash,
    /// or a process that died holding the shard's lock, left in flight. An undo record that
    /// points outside the heap (a damaged file) is dropped: the segments' checks then drop what
    /// they cannot vouch for.
    pub(crate) fn roll_back_rewrite(&mut self) -> bool {
        let undo = &self.meta().undo;
        let len = undo.len.load(Acquire) as usize;
        if len == 0 {
            return false;
        }
        let (seg, offset, sum) = (undo.seg.load(Relaxed), undo.offset.load(Relaxed) as usize, undo.sum.load(Relaxed));
        let mut old = [0u8; UNDO_BYTES];
        for (word, bytes) in undo.bytes.iter().zip(old.chunks_exact_mut(8)) {
            bytes.copy_from_slice(&word.load(Relaxed).to_le_bytes());
        }
        let fits = len <= UNDO_BYTES && (seg as usize) < self.geo.segments && offset + len <= self.geo.segment_size;
        if fits {
            self.seg_space(seg)[offset..offset + len].copy_from_slice(&old[..len]);
            self.seg_mut(seg).sum = sum;
        }
        self.meta().undo.len.store(0, Release);
        fits
    }

    /// The start of the `len` bytes at `loc`, checked to lie in the heap.
    fn record_ptr(&self, loc: Loc, len: usize) -> *mut u8 {
        assert!((loc.seg as usize) < self.geo.segments && loc.offset as usize + len <= self.geo.segment_size);
        self.mem.heap.wrapping_add(loc.seg as usize * self.geo.segment_size + loc.offset as usize)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use crate::builder::Builder;
    use crate::engine::Segcache;
    use crate::hash::hash;
    use crate::hashtable::slot::{self, Loc};

    fn cache(name: &str) -> (Segcache, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("segcache-test-{}-undo-{name}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        (Builder::new().heap_size(1 << 20).segment_size(64 << 10).path(&path).build().unwrap(), path)
    }

    fn loc_of(c: &Segcache, key: &[u8]) -> Loc {
        slot::slot_loc(c.table().find(hash(key), |l| c.key_at(l, key)).unwrap().value)
    }

    /// Fills a segment around `key`, so that dropping that segment would show.
    fn neighbours(c: &mut Segcache) {
        for i in 0..50 {
            c.set(format!("n{i}").as_bytes(), &[b'n'; 40], 0, Duration::ZERO).unwrap();
        }
    }

    fn neighbours_kept(c: &Segcache) -> bool {
        (0..50).all(|i| c.get(format!("n{i}").as_bytes()).is_some_and(|v| v.value() == [b'n'; 40]))
    }

    #[test]
    fn a_file_rewrites_small_records_in_place_and_keeps_its_checksums() {
        let (mut c, path) = cache("in-place");
        neighbours(&mut c);
        c.set(b"k", &[1; 40], 5, Duration::ZERO).unwrap();
        let at = loc_of(&c, b"k");
        for v in 2..200u8 {
            c.set(b"k", &[v; 40], 5, Duration::ZERO).unwrap();
        }
        assert_eq!(loc_of(&c, b"k"), at, "rewritten where it lay");
        assert_eq!(c.meta().undo.len.load(std::sync::atomic::Ordering::Relaxed), 0);
        // What crash recovery finds: every segment checks out.
        assert_eq!(c.rebuild(), (51, 0));
        assert_eq!(c.get(b"k").unwrap().value(), [199; 40]);
        assert!(neighbours_kept(&c));
        drop(c);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_file_appends_records_too_large_to_undo() {
        let (mut c, path) = cache("large");
        let big = vec![7; super::UNDO_BYTES];
        c.set(b"k", &big, 0, Duration::ZERO).unwrap();
        let at = loc_of(&c, b"k");
        c.set(b"k", &big, 0, Duration::ZERO).unwrap();
        assert_ne!(loc_of(&c, b"k"), at);
        drop(c);
        let _ = std::fs::remove_file(path);
    }

    /// A crash in the middle of a rewrite: the undo record puts the old record back, and its
    /// segment, neighbours and all, checks out. Without it, the segment would be dropped.
    #[test]
    fn recovery_undoes_a_rewrite_left_half_done() {
        for undone in [true, false] {
            let (mut c, path) = cache(&format!("torn-{undone}"));
            neighbours(&mut c);
            c.set(b"k", b"old value old value old value", 0, Duration::ZERO).unwrap();
            let at = loc_of(&c, b"k");
            let len = c.record(at).unwrap().len;
            let _never_ended = c.begin_rewrite(at, len);
            // Half of a new value, then the crash: `end_rewrite` never runs.
            let end = at.offset as usize + len;
            c.seg_space(at.seg)[end - 10..end].copy_from_slice(b"new value!");
            if !undone {
                c.meta().undo.len.store(0, std::sync::atomic::Ordering::Relaxed);
            }
            let (_, dropped) = c.rebuild();
            if undone {
                assert_eq!(dropped, 0);
                assert_eq!(c.get(b"k").unwrap().value(), b"old value old value old value");
                assert!(neighbours_kept(&c));
            } else {
                assert_eq!(dropped, 1, "a torn record fails its segment's checks");
                assert!(c.get(b"k").is_none() && !neighbours_kept(&c));
            }
            drop(c);
            let _ = std::fs::remove_file(path);
        }
    }

    #[test]
    fn a_damaged_undo_record_is_ignored() {
        let (mut c, path) = cache("damaged");
        c.set(b"k", b"v", 0, Duration::ZERO).unwrap();
        let undo = &c.meta().undo;
        undo.seg.store(u32::MAX, std::sync::atomic::Ordering::Relaxed);
        undo.len.store(40, std::sync::atomic::Ordering::Relaxed);
        assert!(!c.roll_back_rewrite());
        c.meta().undo.len.store(u32::MAX, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(c.rebuild(), (1, 0));
        assert_eq!(c.get(b"k").unwrap().value(), b"v");
        drop(c);
        let _ = std::fs::remove_file(path);
    }
}
