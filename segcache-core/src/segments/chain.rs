//! The TTL buckets' chains of segments.

use crate::segments::header::{NONE, POOL_SMALL};
use crate::Segcache;

impl Segcache {
    pub(crate) fn link_tail(&mut self, b: usize, id: u32) {
        let tail = self.ttl_bucket(b).tail;
        {
            let s = self.seg_mut(id);
            s.prev = tail;
            s.next = NONE;
        }
        if tail == NONE {
            self.ttl_bucket_mut(b).head = id;
        } else {
            self.seg_mut(tail).next = id;
        }
        let tb = self.ttl_bucket_mut(b);
        tb.tail = id;
        tb.segments += 1;
    }

    /// Puts `id` into the chain of bucket `b` right before `before` (or at the tail).
    pub(crate) fn link_before(&mut self, b: usize, id: u32, before: u32) {
        if before == NONE {
            return self.link_tail(b, id);
        }
        let prev = self.seg(before).prev;
        {
            let s = self.seg_mut(id);
            s.prev = prev;
            s.next = before;
        }
        self.seg_mut(before).prev = id;
        if prev == NONE {
            self.ttl_bucket_mut(b).head = id;
        } else {
            self.seg_mut(prev).next = id;
        }
        self.ttl_bucket_mut(b).segments += 1;
    }

    pub(crate) fn unlink(&mut self, id: u32) {
        let (prev, next, b, pool) = {
            let s = self.seg(id);
            (s.prev, s.next, s.ttl_bucket as usize, s.pool)
        };
        if prev == NONE {
            self.ttl_bucket_mut(b).head = next;
        } else {
            self.seg_mut(prev).next = next;
        }
        if next == NONE {
            self.ttl_bucket_mut(b).tail = prev;
        } else {
            self.seg_mut(next).prev = prev;
        }
        let tb = self.ttl_bucket_mut(b);
        tb.segments = tb.segments.saturating_sub(1);
        if tb.open[pool as usize] == id {
            tb.open[pool as usize] = NONE;
        }
        if pool == POOL_SMALL {
            let m = self.meta_mut();
            m.small_segments = m.small_segments.saturating_sub(1);
        }
    }
}
