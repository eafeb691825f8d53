//! Each flash segment's metadata, and the FIFO ring they are written in: the next segment written
//! is always the oldest, reclaimed first if it still holds items. The tier file keeps a record of
//! each segment (`meta.rs`), from which a reopen restores the ring.

/// A flash segment's metadata, kept in DRAM and, but for `live`, in the tier file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FlashSeg {
    /// Bumped each time the segment is reclaimed: every entry's checksum covers it, so a slot
    /// left pointing at an older image reads as a miss.
    pub(crate) generation: u64,
    /// Its place in FIFO order (0: free).
    pub(crate) seq: u64,
    /// The latest expiry of its entries (0: some never expire): the whole segment is gone after it.
    pub(crate) expire_at: u32,
    /// Slots that point into it.
    pub(crate) live: u32,
    /// Bytes of its image.
    pub(crate) written: u32,
}

/// The flash segments of one shard, written round-robin.
#[derive(Debug)]
pub(crate) struct Ring {
    segs: Vec<FlashSeg>,
    head: u32,
    next_seq: u64,
}

impl Ring {
    /// `count` free segments, their generations `nonce`.
    #[cfg(test)]
    pub(crate) fn new(count: u32, nonce: u64) -> Ring {
        Ring { segs: vec![FlashSeg { generation: nonce, ..FlashSeg::default() }; count as usize], head: 0, next_seq: 1 }
    }

    /// The ring of the segments `segs` describe (their `live` counts set by the caller), as a
    /// reopen finds them: the next written is the one after the newest in use (the ring fills
    /// its segments in order), and sequence numbers go on from the newest.
    pub(crate) fn restore(segs: Vec<FlashSeg>) -> Ring {
        let newest = (0..segs.len()).filter(|&i| segs[i].seq != 0).max_by_key(|&i| segs[i].seq);
        let head = newest.map_or(0, |i| (i + 1) % segs.len()) as u32;
        let next_seq = newest.map_or(1, |i| segs[i].seq + 1);
        Ring { segs, head, next_seq }
    }

    /// Every segment's metadata, in order.
    pub(crate) fn segs(&self) -> &[FlashSeg] {
        &self.segs
    }

    #[inline]
    pub(crate) fn seg(&self, index: u32) -> &FlashSeg {
        &self.segs[index as usize]
    }

    #[inline]
    pub(crate) fn seg_mut(&mut self, index: u32) -> &mut FlashSeg {
        &mut self.segs[index as usize]
    }

    /// The segment the next image goes to: the oldest.
    pub(crate) fn next(&self) -> u32 {
        self.head
    }

    /// Whether segment `index` holds an image.
    pub(crate) fn in_use(&self, index: u32) -> bool {
        self.seg(index).seq != 0
    }

    /// Records the image just written to the head segment (free) and moves the head on.
    pub(crate) fn fill(&mut self, written: u32, live: u32, expire_at: u32) {
        let filled = self.filled(written, live, expire_at);
        debug_assert_eq!(self.segs[self.head as usize].seq, 0);
        self.segs[self.head as usize] = filled;
        self.next_seq += 1;
        self.head = (self.head + 1) % self.segs.len() as u32;
    }

    /// What `fill` would record for the head segment.
    pub(crate) fn filled(&self, written: u32, live: u32, expire_at: u32) -> FlashSeg {
        let generation = self.segs[self.head as usize].generation;
        FlashSeg { seq: self.next_seq, expire_at, live, written, generation }
    }

    /// Frees segment `index`, whose slots are gone: a new generation, so nothing of its image
    /// checks any more.
    pub(crate) fn release(&mut self, index: u32) {
        let s = &mut self.segs[index as usize];
        *s = FlashSeg { generation: s.generation.wrapping_add(1), ..FlashSeg::default() };
    }

    /// Frees every segment (the table was cleared).
    pub(crate) fn release_all(&mut self) {
        for i in 0..self.segs.len() as u32 {
            self.release(i);
        }
        self.head = 0;
    }

    /// Slots pointing into the ring.
    pub(crate) fn live_items(&self) -> u64 {
        self.segs.iter().map(|s| u64::from(s.live)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_writes_its_oldest_segment_next_and_a_release_changes_the_generation() {
        let mut ring = Ring::new(3, 100);
        for expect in [0, 1, 2] {
            assert_eq!(ring.next(), expect);
            ring.fill(4096, 2, 0);
        }
        assert_eq!((ring.next(), ring.live_items()), (0, 6));
        assert!(ring.in_use(0) && ring.seg(0).seq < ring.seg(1).seq);
        ring.release(0);
        assert_eq!((ring.in_use(0), ring.seg(0).generation, ring.live_items()), (false, 101, 4));
        ring.fill(8, 1, 0);
        assert_eq!((ring.next(), ring.seg(0).seq), (1, 4));
    }

    #[test]
    fn a_restored_ring_goes_on_after_its_newest_segment() {
        let seg = |seq| FlashSeg { generation: 5, seq, ..FlashSeg::default() };
        let ring = Ring::restore(vec![seg(7), seg(0), seg(5), seg(6)]);
        assert_eq!((ring.next(), ring.next_seq), (1, 8));
        let ring = Ring::restore(vec![seg(4), seg(5), seg(6)]);
        assert_eq!((ring.next(), ring.next_seq), (0, 7), "after the last comes the first");
        let ring = Ring::restore(vec![seg(0), seg(0)]);
        assert_eq!((ring.next(), ring.next_seq, ring.segs().len()), (0, 1, 2));
    }
}
