//! Which heap segments this process has faulted in ahead of the writers (`Region::fault_in`),
//! so that `SharedCache::touch_ahead` faults each in once.
//!
//! A bit per segment of the whole region, in this process only: another process mapping the
//! same file has page tables of its own. Anonymous memory, once faulted in, stays (the engine
//! never gives heap pages back), so a set bit stays true.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

#[derive(Debug)]
pub(crate) struct Resident {
    bits: Box<[AtomicU64]>,
    segments: usize,
    /// Bits set so far.
    count: AtomicUsize,
    /// The kernel refused to populate memory (no `MADV_POPULATE_*`: Linux before 5.14, or
    /// another system): nothing can be faulted in ahead.
    refused: AtomicBool,
}

impl Resident {
    /// `segments`: the region's heap segments, over every shard; none of them faulted in.
    pub fn new(segments: usize) -> Resident {
        let bits = (0..segments.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        Resident { bits, segments, count: AtomicUsize::new(0), refused: AtomicBool::new(false) }
    }

    pub fn contains(&self, segment: usize) -> bool {
        self.bits[segment / 64].load(Relaxed) & (1 << (segment % 64)) != 0
    }

    /// Marks `segment` faulted in; false if it already was.
    pub fn insert(&self, segment: usize) -> bool {
        // Every allocation of a segment marks it: after the heap's first pass, a load that finds
        // the bit set keeps the word's line shared between the cores instead of writing it.
        if self.contains(segment) {
            return false;
        }
        let bit = 1 << (segment % 64);
        let fresh = self.bits[segment / 64].fetch_or(bit, Relaxed) & bit == 0;
        if fresh {
            self.count.fetch_add(1, Relaxed);
        }
        fresh
    }

    /// Marks every segment faulted in (after a prefault of the whole heap).
    pub fn insert_all(&self) {
        for s in 0..self.segments {
            self.insert(s);
        }
    }

    pub fn refuse(&self) {
        self.refused.store(true, Relaxed);
    }

    /// Whether faulting in ahead has nothing left to do: every segment is in, or the kernel
    /// cannot populate.
    pub fn done(&self) -> bool {
        self.refused.load(Relaxed) || self.count.load(Relaxed) >= self.segments
    }
}

#[cfg(test)]
mod tests {
    use super::Resident;

    #[test]
    fn counts_each_segment_once() {
        let r = Resident::new(130);
        assert!(!r.contains(129) && !r.done());
        assert!(r.insert(129));
        assert!(!r.insert(129), "already in");
        assert!(r.contains(129) && !r.contains(128));
        r.insert_all();
        assert!(r.done() && (0..130).all(|s| r.contains(s)));
        let refused = Resident::new(4);
        refused.refuse();
        assert!(refused.done() && !refused.contains(0));
    }
}
