//! Flush and reset: dropping every item at once, and the spare segment that eviction policies
//! keep.

use std::time::Duration;

use crate::engine::Segcache;
use crate::eviction::policy::Policy;
use crate::segments::header::{SegHeader, NONE, SEG_SPARE};
use crate::ttl_buckets::bucket::TtlBucket;
use crate::ttl_buckets::expire::ttl_secs;
use crate::ttl_buckets::ttl;

impl Segcache {
    /// Removes every item now.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.flush();
    /// assert!(cache.get(b"k").is_none() && cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn flush(&mut self) {
        if self.origin.forked() {
            return;
        }
        self.reset(false);
        self.meta_mut().flushes += 1;
    }

    /// Removes every item stored before `delay` from now, at that time (`ZERO`: now).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.flush_after(Duration::from_secs(10));
    /// assert!(cache.get(b"k").is_some());
    /// clock.advance(10);
    /// assert!(cache.get(b"k").is_none());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn flush_after(&mut self, delay: Duration) {
        if delay.is_zero() {
            return self.flush();
        }
        if self.origin.forked() {
            return;
        }
        // A flush already due has hidden every item from reads: it takes effect before the new
        // one replaces it, or the items it removed would come back until the new time.
        let now = self.now();
        if self.flushed(now) {
            self.reset(false);
            self.meta_mut().flushes += 1;
        }
        self.meta_mut().flush_at = now.saturating_add(ttl_secs(delay));
    }

    /// Empties the shard: every segment free, the table cleared (CAS values go on increasing).
    /// `zeroed`: the region is fresh, all zero, so the table need not be written (writing it
    /// would make every page of it resident before the first item).
    pub(crate) fn reset(&mut self, zeroed: bool) {
        // Every segment is about to be freed: none is left to check.
        self.unchecked = None;
        // Segments allocated before now belong to the flushed cache, whatever a crash leaves;
        // recorded first, so that a crash in the middle of the reset cannot bring them back.
        let m = self.meta_mut();
        m.flushed_below = m.next_seq;
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        // The tier's records say its segments are free before the table's flash slots go, so a
        // crash in the middle of the clear leaves none that a reopen trusts.
        self.release_tier();
        if !zeroed {
            self.table().clear();
        }
        for b in 0..ttl::BUCKETS {
            *self.ttl_bucket_mut(b) = TtlBucket::EMPTY;
        }
        let n = self.geo.segments as u32;
        for id in 0..n {
            *self.seg_mut(id) = SegHeader { next: if id + 1 < n { id + 1 } else { NONE }, ..SegHeader::EMPTY };
        }
        self.large.chunks = 0;
        let m = self.meta_mut();
        m.free_head = 0;
        m.free_count = n;
        m.spare = NONE;
        m.overflow = Default::default();
        m.flush_at = 0;
        m.intent_seg = NONE;
        m.items = 0;
        m.bytes = 0;
        m.small_segments = 0;
        if m.rng == 0 {
            m.rng = 0x9e37_79b9_7f4a_7c15;
        }
        self.ghost.forget_all();
        self.fit_spare_to_policy();
    }

    /// Merge and S3-FIFO keep one spare segment to copy into when the heap is a file (see
    /// `compact`); other policies, and caches without a file, need none.
    pub(crate) fn wants_spare(&self) -> bool {
        self.durable && matches!(self.policy, Policy::Merge | Policy::S3Fifo)
    }

    pub(crate) fn fit_spare_to_policy(&mut self) {
        let wants = self.wants_spare();
        let spare = self.meta().spare;
        if wants && spare == NONE {
            if let Some(id) = self.pop_free() {
                *self.seg_mut(id) = SegHeader { state: SEG_SPARE, ..SegHeader::EMPTY };
                self.meta_mut().spare = id;
            }
        } else if !wants && spare != NONE {
            self.meta_mut().spare = NONE;
            self.segments().push_free(spare);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::builder::Builder;

    use crate::clock::ManualClock;

    /// A flush that is due hides every item from reads before any write applies it; a new
    /// delayed flush must not bring them back until its own time.
    #[test]
    fn a_delayed_flush_after_a_due_one_does_not_bring_items_back() {
        let clock = ManualClock::new(1_700_000_000);
        let mut c = Builder::new().heap_size(4 << 20).clock(clock.clone()).build().unwrap();
        c.set(b"k", b"v", 0, Duration::ZERO).unwrap();
        c.flush_after(Duration::from_secs(2));
        clock.advance(2);
        assert!(c.get(b"k").is_none(), "flushed at its time");
        c.flush_after(Duration::from_secs(5));
        assert!(c.get(b"k").is_none(), "still gone");
        assert_eq!(c.stats().flushes, 1);
        c.set(b"new", b"v", 0, Duration::ZERO).unwrap();
        clock.advance(4);
        assert!(c.get(b"new").is_some(), "stored before the new flush's time");
        clock.advance(1);
        assert!(c.get(b"new").is_none(), "flushed at the new time");
    }
}
