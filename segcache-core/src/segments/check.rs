//! The segments' own invariants, checked at rest (by `Segcache::verify`, for tests and soaks):
//! the free list holds exactly the free segments, as many as it counts, and each segment in use
//! holds no more than it has written.

use thiserror::Error;

use crate::meta::ShardMeta;
use crate::segments::header::{SegHeader, NONE, SEG_FREE, SEG_OPEN, SEG_SEALED};
use crate::segments::Segments;

/// A broken invariant of the segments.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SegmentsError {
    #[error("segment {id} is linked but out of range")]
    OutOfRange { id: u32 },
    #[error("the free list runs into segment {id} twice")]
    FreeListCycle { id: u32 },
    #[error("segment {id} is on the free list in state {state}")]
    ListedNotFree { id: u32, state: u8 },
    #[error("segment {id} is free but not on the free list")]
    FreeNotListed { id: u32 },
    #[error("the free list holds {listed} segments but counts {counted}")]
    FreeCount { listed: u32, counted: u32 },
    #[error("segment {id} holds {live} live bytes of {written} written, in {size}-byte segments")]
    Overfull { id: u32, live: u32, written: u32, size: usize },
}

impl Segments<'_> {
    /// Checks the invariants above over a shard's headers and metadata (read only, so that a
    /// check runs beside readers).
    pub(crate) fn check(headers: &[SegHeader], meta: &ShardMeta, segment_size: usize) -> Result<(), SegmentsError> {
        let mut listed = vec![false; headers.len()];
        let (mut id, mut count) = (meta.free_head, 0u32);
        while id != NONE {
            let s = headers.get(id as usize).ok_or(SegmentsError::OutOfRange { id })?;
            if std::mem::replace(&mut listed[id as usize], true) {
                return Err(SegmentsError::FreeListCycle { id });
            }
            if s.state != SEG_FREE {
                return Err(SegmentsError::ListedNotFree { id, state: s.state });
            }
            count += 1;
            id = s.next;
        }
        if count != meta.free_count {
            return Err(SegmentsError::FreeCount { listed: count, counted: meta.free_count });
        }
        for (id, s) in (0u32..).zip(headers) {
            if s.state == SEG_FREE && !listed[id as usize] {
                return Err(SegmentsError::FreeNotListed { id });
            }
            let written = s.write_offset;
            if matches!(s.state, SEG_OPEN | SEG_SEALED) && (written as usize > segment_size || s.live_bytes > written) {
                return Err(SegmentsError::Overfull { id, live: s.live_bytes, written, size: segment_size });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::ShardMeta;

    /// Four segments: 0 and 2 free (listed 2 then 0), 1 and 3 in use.
    fn shard() -> (Vec<SegHeader>, Box<ShardMeta>) {
        let used = SegHeader { state: SEG_SEALED, write_offset: 100, live_bytes: 60, ..SegHeader::EMPTY };
        let headers =
            vec![SegHeader { next: NONE, ..SegHeader::EMPTY }, used, SegHeader { next: 0, ..SegHeader::EMPTY }, used];
        // SAFETY: the metadata is integers and atomics, for which zero is a valid value.
        let mut meta: Box<ShardMeta> = Box::new(unsafe { std::mem::zeroed() });
        (meta.free_head, meta.free_count) = (2, 2);
        (headers, meta)
    }

    #[test]
    fn a_whole_shard_passes() {
        let (h, m) = shard();
        assert_eq!(Segments::check(&h, &m, 4096), Ok(()));
    }

    #[test]
    fn each_broken_invariant_is_named() {
        let (mut h, m) = shard();
        h[0].next = 2;
        assert_eq!(Segments::check(&h, &m, 4096), Err(SegmentsError::FreeListCycle { id: 2 }));
        let (mut h, m) = shard();
        h[0].state = SEG_OPEN;
        assert_eq!(Segments::check(&h, &m, 4096), Err(SegmentsError::ListedNotFree { id: 0, state: SEG_OPEN }));
        let (h, mut m) = shard();
        m.free_count = 3;
        assert_eq!(Segments::check(&h, &m, 4096), Err(SegmentsError::FreeCount { listed: 2, counted: 3 }));
        let (mut h, m) = shard();
        h[3].state = SEG_FREE;
        assert_eq!(Segments::check(&h, &m, 4096), Err(SegmentsError::FreeNotListed { id: 3 }));
        let (mut h, m) = shard();
        h[1].live_bytes = 101;
        assert!(matches!(Segments::check(&h, &m, 4096), Err(SegmentsError::Overfull { id: 1, .. })));
        let (mut h, m) = shard();
        h[2].next = 9;
        assert_eq!(Segments::check(&h, &m, 4096), Err(SegmentsError::OutOfRange { id: 9 }));
    }
}
