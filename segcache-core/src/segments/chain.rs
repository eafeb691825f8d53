//! The TTL buckets' chains of segments: linking a segment into its bucket's chain, and out.

use crate::segments::header::{NONE, POOL_SMALL};
use crate::segments::Segments;
use crate::ttl_buckets::bucket::TtlBucket;
use crate::ttl_buckets::TtlBuckets;

impl Segments<'_> {
    /// Puts `id` at the tail of `bucket`'s chain (its header's `pool` already set).
    pub(crate) fn link_tail(&mut self, bucket: &mut TtlBucket, id: u32) {
        let tail = bucket.tail;
        {
            let s = self.header_mut(id);
            s.prev = tail;
            s.next = NONE;
        }
        if tail == NONE {
            bucket.head = id;
        } else {
            self.header_mut(tail).next = id;
        }
        bucket.tail = id;
        bucket.segments += 1;
        self.count_joining(id);
    }

    /// Puts `id` into `bucket`'s chain right before `before` (or at the tail; its header's `pool`
    /// already set).
    pub(crate) fn link_before(&mut self, bucket: &mut TtlBucket, id: u32, before: u32) {
        if before == NONE {
            return self.link_tail(bucket, id);
        }
        let prev = self.header(before).prev;
        {
            let s = self.header_mut(id);
            s.prev = prev;
            s.next = before;
        }
        self.header_mut(before).prev = id;
        if prev == NONE {
            bucket.head = id;
        } else {
            self.header_mut(prev).next = id;
        }
        bucket.segments += 1;
        self.count_joining(id);
    }

    /// Takes `id` out of the chain of its TTL bucket (one of `buckets`), and out of the bucket's
    /// open segments.
    pub(crate) fn unlink(&mut self, id: u32, buckets: &mut TtlBuckets<'_>) {
        let (prev, next, b, pool) = {
            let s = self.header(id);
            (s.prev, s.next, s.ttl_bucket as usize, s.pool)
        };
        let tb = buckets.bucket_mut(b);
        if prev == NONE {
            tb.head = next;
        } else {
            self.header_mut(prev).next = next;
        }
        if next == NONE {
            tb.tail = prev;
        } else {
            self.header_mut(next).prev = prev;
        }
        tb.segments = tb.segments.saturating_sub(1);
        if tb.open[pool as usize] == id {
            tb.open[pool as usize] = NONE;
        }
        if pool == POOL_SMALL {
            self.meta.small_segments = self.meta.small_segments.saturating_sub(1);
        }
    }

    /// Keeps the count of S3-FIFO's small pool as segment `id` joins a chain.
    fn count_joining(&mut self, id: u32) {
        if self.header(id).pool == POOL_SMALL {
            self.meta.small_segments += 1;
        }
    }
}
