//! The TTL chains' invariants, checked at rest (by `Segcache::verify`, for tests and soaks): each
//! chain is doubly linked from head to tail, counts its segments, holds only segments in use of
//! its own bucket, and every segment in use is in exactly one chain.

use thiserror::Error;

#[cfg(test)]
use crate::segments::header::SEG_FREE;
use crate::segments::header::{SegHeader, NONE, SEG_OPEN, SEG_SEALED};
use crate::ttl_buckets::bucket::TtlBucket;
use crate::ttl_buckets::TtlBuckets;

/// A broken invariant of the TTL chains.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ChainError {
    #[error("TTL bucket {bucket}: its chain links to segment {id}, out of range")]
    OutOfRange { bucket: usize, id: u32 },
    #[error("TTL bucket {bucket}: segment {id} is linked twice")]
    LinkedTwice { bucket: usize, id: u32 },
    #[error("TTL bucket {bucket}: segment {id}'s back link is {prev}, not {expected}")]
    BackLink { bucket: usize, id: u32, prev: u32, expected: u32 },
    #[error("TTL bucket {bucket}: segment {id} says it belongs to bucket {its}")]
    OtherBucket { bucket: usize, id: u32, its: u16 },
    #[error("TTL bucket {bucket}: segment {id} is chained in state {state}")]
    NotInUse { bucket: usize, id: u32, state: u8 },
    #[error("TTL bucket {bucket}: its tail is {tail}, its chain ends at {last}")]
    Tail { bucket: usize, tail: u32, last: u32 },
    #[error("TTL bucket {bucket}: it counts {counted} segments, its chain links {linked}")]
    Count { bucket: usize, counted: u32, linked: u32 },
    #[error("TTL bucket {bucket}: its open segment {id} is not in its chain")]
    OpenUnchained { bucket: usize, id: u32 },
    #[error("segment {id} is in use but in no TTL chain")]
    Unchained { id: u32 },
}

impl TtlBuckets<'_> {
    /// Checks the invariants above over a shard's TTL buckets and segment headers (read only).
    pub(crate) fn check(buckets: &[TtlBucket], headers: &[SegHeader]) -> Result<(), ChainError> {
        // The bucket each segment was found chained in.
        let mut chained = vec![usize::MAX; headers.len()];
        for (bucket, tb) in buckets.iter().enumerate() {
            let (mut prev, mut id, mut linked) = (NONE, tb.head, 0u32);
            while id != NONE {
                let s = headers.get(id as usize).ok_or(ChainError::OutOfRange { bucket, id })?;
                if std::mem::replace(&mut chained[id as usize], bucket) != usize::MAX {
                    return Err(ChainError::LinkedTwice { bucket, id });
                }
                if s.prev != prev {
                    return Err(ChainError::BackLink { bucket, id, prev: s.prev, expected: prev });
                }
                if s.ttl_bucket as usize != bucket {
                    return Err(ChainError::OtherBucket { bucket, id, its: s.ttl_bucket });
                }
                if !matches!(s.state, SEG_OPEN | SEG_SEALED) {
                    return Err(ChainError::NotInUse { bucket, id, state: s.state });
                }
                (prev, id, linked) = (id, s.next, linked + 1);
            }
            if tb.tail != prev {
                return Err(ChainError::Tail { bucket, tail: tb.tail, last: prev });
            }
            if tb.segments != linked {
                return Err(ChainError::Count { bucket, counted: tb.segments, linked });
            }
            if let Some(&id) = tb.open.iter().find(|&&id| id != NONE && chained.get(id as usize) != Some(&bucket)) {
                return Err(ChainError::OpenUnchained { bucket, id });
            }
        }
        match (0u32..)
            .zip(headers)
            .find(|(id, s)| matches!(s.state, SEG_OPEN | SEG_SEALED) && chained[*id as usize] == usize::MAX)
        {
            Some((id, _)) => Err(ChainError::Unchained { id }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bucket 0 chains segments 1 then 0 (1 open); bucket 1 chains 2; segment 3 is free.
    fn shard() -> (Vec<TtlBucket>, Vec<SegHeader>) {
        let seg = |prev, next, ttl_bucket, state| SegHeader { prev, next, ttl_bucket, state, ..SegHeader::EMPTY };
        let headers = vec![
            seg(1, NONE, 0, SEG_SEALED),
            seg(NONE, 0, 0, SEG_OPEN),
            seg(NONE, NONE, 1, SEG_SEALED),
            SegHeader::EMPTY,
        ];
        let buckets = vec![
            TtlBucket { head: 1, tail: 0, segments: 2, open: [1, NONE], ..TtlBucket::EMPTY },
            TtlBucket { head: 2, tail: 2, segments: 1, ..TtlBucket::EMPTY },
            TtlBucket::EMPTY,
        ];
        (buckets, headers)
    }

    #[test]
    fn whole_chains_pass() {
        let (b, h) = shard();
        assert_eq!(TtlBuckets::check(&b, &h), Ok(()));
    }

    #[test]
    fn each_broken_invariant_is_named() {
        let (b, mut h) = shard();
        h[0].prev = NONE;
        assert_eq!(TtlBuckets::check(&b, &h), Err(ChainError::BackLink { bucket: 0, id: 0, prev: NONE, expected: 1 }));
        let (b, mut h) = shard();
        h[0].ttl_bucket = 5;
        assert_eq!(TtlBuckets::check(&b, &h), Err(ChainError::OtherBucket { bucket: 0, id: 0, its: 5 }));
        let (b, mut h) = shard();
        h[0].state = SEG_FREE;
        assert_eq!(TtlBuckets::check(&b, &h), Err(ChainError::NotInUse { bucket: 0, id: 0, state: SEG_FREE }));
        let (mut b, h) = shard();
        b[0].tail = 1;
        assert_eq!(TtlBuckets::check(&b, &h), Err(ChainError::Tail { bucket: 0, tail: 1, last: 0 }));
        let (mut b, h) = shard();
        b[1].segments = 2;
        assert_eq!(TtlBuckets::check(&b, &h), Err(ChainError::Count { bucket: 1, counted: 2, linked: 1 }));
        let (mut b, h) = shard();
        b[1].open[0] = 1;
        assert_eq!(TtlBuckets::check(&b, &h), Err(ChainError::OpenUnchained { bucket: 1, id: 1 }));
        let (mut b, h) = shard();
        b[1] = TtlBucket::EMPTY;
        assert_eq!(TtlBuckets::check(&b, &h), Err(ChainError::Unchained { id: 2 }));
        let (mut b, mut h) = shard();
        (b[2].head, b[2].tail, b[2].segments, h[0].prev) = (0, 0, 1, NONE);
        h[0].ttl_bucket = 2;
        assert!(matches!(TtlBuckets::check(&b, &h), Err(ChainError::BackLink { .. } | ChainError::LinkedTwice { .. })));
        let (mut b, h) = shard();
        b[2].head = 7;
        assert_eq!(TtlBuckets::check(&b, &h), Err(ChainError::OutOfRange { bucket: 2, id: 7 }));
    }
}
