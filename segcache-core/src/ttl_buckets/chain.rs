//! The TTL buckets' chains of segments: linking a segment into its bucket's chain, and out.
//! A chain's ends live in its bucket, its links in the segments' headers.

use crate::segments::header::NONE;
use crate::segments::Segments;
use crate::ttl_buckets::TtlBuckets;

impl TtlBuckets<'_> {
    /// Puts `id` at the tail of bucket `b`'s chain (its header's `pool` already set).
    pub(crate) fn link_tail(&mut self, segments: &mut Segments<'_>, b: usize, id: u32) {
        let bucket = &mut self.buckets[b];
        let tail = bucket.tail;
        {
            let s = segments.header_mut(id);
            s.prev = tail;
            s.next = NONE;
        }
        if tail == NONE {
            bucket.head = id;
        } else {
            segments.header_mut(tail).next = id;
        }
        bucket.tail = id;
        bucket.segments += 1;
        segments.count_joining(id);
    }

    /// Puts `id` into bucket `b`'s chain right before `before` (or at the tail; its header's
    /// `pool` already set).
    pub(crate) fn link_before(&mut self, segments: &mut Segments<'_>, b: usize, id: u32, before: u32) {
        if before == NONE {
            return self.link_tail(segments, b, id);
        }
        let bucket = &mut self.buckets[b];
        let prev = segments.header(before).prev;
        {
            let s = segments.header_mut(id);
            s.prev = prev;
            s.next = before;
        }
        segments.header_mut(before).prev = id;
        if prev == NONE {
            bucket.head = id;
        } else {
            segments.header_mut(prev).next = id;
        }
        bucket.segments += 1;
        segments.count_joining(id);
    }

    /// Takes `id` out of the chain of its TTL bucket, and out of the bucket's open segments.
    pub(crate) fn unlink(&mut self, segments: &mut Segments<'_>, id: u32) {
        let (prev, next, b, pool) = {
            let s = segments.header(id);
            (s.prev, s.next, s.ttl_bucket as usize, s.pool)
        };
        let tb = &mut self.buckets[b];
        if prev == NONE {
            tb.head = next;
        } else {
            segments.header_mut(prev).next = next;
        }
        if next == NONE {
            tb.tail = prev;
        } else {
            segments.header_mut(next).prev = prev;
        }
        tb.segments = tb.segments.saturating_sub(1);
        if tb.open[pool as usize] == id {
            tb.open[pool as usize] = NONE;
        }
        segments.count_leaving(id);
    }
}
