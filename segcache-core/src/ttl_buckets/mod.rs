//! TTL buckets: the bucket math, the buckets and their chains of segments, and expiry.
//!
//! `TtlBuckets` is a view over one shard's TTL buckets, built by the engine for a call
//! (`Segcache::segments_and_ttl`, beside the segments, whose headers hold the chains' links).

pub(crate) mod bucket;
pub(crate) mod chain;
pub(crate) mod check;
pub(crate) mod expire;
pub mod ttl;

use crate::segments::header::NONE;
use crate::segments::Segments;
use crate::ttl_buckets::bucket::TtlBucket;
use crate::ttl_buckets::expire::live_until;

/// A view of one shard's `ttl::BUCKETS` TTL buckets. Held with the engine exclusively.
pub(crate) struct TtlBuckets<'a> {
    buckets: &'a mut [TtlBucket],
}

impl<'a> TtlBuckets<'a> {
    #[inline]
    pub(crate) fn new(buckets: &'a mut [TtlBucket]) -> Self {
        TtlBuckets { buckets }
    }

    #[inline]
    pub(crate) fn bucket(&self, b: usize) -> &TtlBucket {
        &self.buckets[b]
    }

    #[inline]
    pub(crate) fn bucket_mut(&mut self, b: usize) -> &mut TtlBucket {
        &mut self.buckets[b]
    }

    /// The next segment that expiry frees: the head of the first chain from `*pass` on whose
    /// items have all expired at `now`, leaving `*pass` at that chain; `None`, with `*pass` past
    /// the last chain, when no chain's head has expired. Chains are ordered by expiry, oldest at
    /// the head, so a chain whose head is live holds nothing expired.
    pub(crate) fn next_expired(&self, pass: &mut usize, segments: &Segments<'_>, now: u32) -> Option<u32> {
        while *pass < self.buckets.len() {
            let head = self.buckets[*pass].head;
            if head != NONE && !live_until(segments.header(head).expire_at, now) {
                return Some(head);
            }
            *pass += 1;
        }
        None
    }
}
