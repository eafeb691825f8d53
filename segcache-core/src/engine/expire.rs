//! Expiring whole segments: all at once (`expire`), or a few at a time as writes go
//! (`expire_step`, from `prepare_write`, which starts every write), from the heads of the TTL
//! chains.

use crate::engine::Segcache;
use crate::ttl_buckets::expire::EXPIRE_PACE;
use crate::ttl_buckets::ttl;

impl Segcache {
    /// Start of every write: a due flush, and a step of expiry.
    #[inline]
    pub(crate) fn prepare_write(&mut self) -> u32 {
        // Only a lazily verified reopen leaves segments unchecked: the test stays here, the
        // checks out of line.
        if self.unchecked.is_some() {
            self.finish_checks();
        }
        let now = self.now();
        if self.flushed(now) {
            self.reset(false);
            self.meta_mut().flushes += 1;
        }
        // Most writes find this second's pass done and no large item's head broken: the tests
        // stay here, the work out of line.
        if now != self.meta().last_expire || self.expiry_pass < ttl::BUCKETS || self.large.has_broken() {
            self.write_chores(now);
        }
        now
    }

    /// `prepare_write` for a write to `key` (hash `h`): an item of the key on flash first comes
    /// back to DRAM (see `promote_flash`), so that the write finds the key there or nowhere; so do
    /// those that reads asked back (`promote_wanted`).
    #[inline]
    pub(crate) fn prepare_keyed_write(&mut self, key: &[u8], h: u64) -> u32 {
        let now = self.prepare_write();
        if self.tier.is_some() {
            self.promote_before_write(key, h, now);
        }
        now
    }

    /// Frees every segment whose items have all expired, from the heads of the TTL chains.
    /// Returns the number of items removed. Writes free expired segments on their own, one at a
    /// time and spaced out; this frees them all at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// for i in 0..100 {
    ///     cache.set(format!("k{i}").as_bytes(), b"v", 0, Duration::from_secs(5))?;
    /// }
    /// cache.set(b"forever", b"v", 0, Duration::ZERO)?;
    /// clock.advance(10);
    /// assert_eq!(cache.expire(), 100); // a whole segment freed, no item scanned
    /// assert_eq!(cache.len(), 1);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn expire(&mut self) -> usize {
        if self.origin.forked() {
            return 0;
        }
        self.finish_checks();
        let before = self.meta().expired_items;
        self.start_expiry_pass();
        self.expire_some(usize::MAX);
        (self.meta().expired_items - before) as usize
    }

    /// What a write does now and then before its own work: a step of expiry, and the removal of
    /// large items' heads that reads found broken.
    #[cold]
    #[inline(never)]
    fn write_chores(&mut self, now: u32) {
        if now != self.meta().last_expire || self.expiry_pass < ttl::BUCKETS {
            self.expire_step(now);
        }
        if self.large.has_broken() {
            self.remove_broken_heads(now);
        }
    }

    /// The expiry that writes run. Once a second a pass over the heads of the TTL chains starts;
    /// a write frees at most one expired segment of it, and after each the next
    /// `items / EXPIRE_PACE` writes free none, so that freeing takes a bounded share of the
    /// writes' time however much expires at once. Freeing every expired segment in the second's
    /// first write stopped that write for as long as the lot took: 68-70 ms for 320 segments of
    /// 2 MiB in one shard (a heap stored with one TTL; `stalls --fill-ttl-s`). Expired items
    /// that wait to be freed are already gone for readers, and a write that needs a segment
    /// frees an expired one before it evicts anything (`alloc_segment`), so the pace never
    /// costs a live item.
    pub(crate) fn expire_step(&mut self, now: u32) {
        if now != self.meta().last_expire {
            self.start_expiry_pass();
            // Values of large items that reads assembled and handed out borrowed, freed by the
            // first write of each second (a write holds the engine: no borrow is alive); a
            // store of a large item frees them too (see `engine::large`).
            if self.large.holds() {
                self.large.release();
            }
        }
        if self.expiry_pass >= ttl::BUCKETS {
            return;
        }
        if self.expiry_wait > 0 {
            self.expiry_wait -= 1;
            return;
        }
        let before = self.meta().expired_items;
        if self.expire_some(1) > 0 {
            self.expiry_wait = (self.meta().expired_items - before) / EXPIRE_PACE;
        }
    }

    /// Starts a pass over the TTL chains at the clock's second.
    pub(crate) fn start_expiry_pass(&mut self) {
        let now = self.now();
        self.meta_mut().last_expire = now;
        // Chain 0 holds the items that never expire.
        self.expiry_pass = 1;
    }

    /// Frees up to `max` expired segments from the heads of the TTL chains, going on with the
    /// pass where it stopped; returns the number freed.
    pub(crate) fn expire_some(&mut self, max: usize) -> usize {
        let now = self.now();
        let mut freed = 0;
        while freed < max {
            let mut pass = self.expiry_pass;
            let next = {
                let (segments, buckets) = self.segments_and_ttl();
                buckets.next_expired(&mut pass, &segments, now)
            };
            self.expiry_pass = pass;
            let Some(head) = next else { break };
            self.clear_segment(head, true);
            freed += 1;
        }
        freed
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::builder::Builder;
    use crate::clock::ManualClock;
    use crate::engine::Segcache;
    use crate::eviction::policy::Policy;
    use crate::ttl_buckets::expire::EXPIRE_PACE;

    const VALUE: [u8; 1000] = [b'v'; 1000];

    fn forever(i: usize) -> Vec<u8> {
        format!("forever-{i:05}").into_bytes()
    }

    fn expiring(i: usize) -> Vec<u8> {
        format!("expiring-{i:05}").into_bytes()
    }

    /// A FIFO cache of 64 segments: a third of them hold items that expire in 10 s, then items
    /// that never expire until `free` segments are left; the clock is then 20 s on. Returns the
    /// cache, the expiring items, the segments they took and the never-expiring items.
    fn a_third_expired(free: u64) -> (Segcache, usize, u64, usize) {
        let clock = ManualClock::new(1_700_000_000);
        let mut c = Builder::new()
            .heap_size(4 << 20)
            .segment_size(64 << 10)
            .clock(clock.clone())
            .eviction(Policy::Fifo)
            .build()
            .unwrap();
        let mut n = 0;
        while c.stats().segments_free > 44 {
            c.set(&expiring(n), &VALUE, 0, Duration::from_secs(10)).unwrap();
            n += 1;
        }
        let segments = c.stats().segments_total - c.stats().segments_free;
        let mut m = 0;
        while c.stats().segments_free > free {
            c.set(&forever(m), &VALUE, 0, Duration::ZERO).unwrap();
            m += 1;
        }
        clock.advance(20);
        assert_eq!((c.stats().expired_segments, c.stats().evicted_segments), (0, 0));
        (c, n, segments, m)
    }

    /// The writes after a mass expiry free the expired segments one at a time, with
    /// `items / EXPIRE_PACE` writes between two, not all in the first write; expired items are
    /// gone for readers before their segments are freed.
    #[test]
    fn writes_free_expired_segments_one_at_a_time_and_spaced_out() {
        let (mut c, n, _, mut m) = a_third_expired(40);
        assert!(c.get(&expiring(0)).is_none(), "expired before its segment is freed");
        assert!(!c.contains(&expiring(n - 1)));
        let mut set_forever = |c: &mut Segcache| {
            c.set(&forever(m), &VALUE, 0, Duration::ZERO).unwrap();
            m += 1;
        };
        set_forever(&mut c);
        let s = c.stats();
        assert_eq!(s.expired_segments, 1, "the first write frees one expired segment");
        let wait = s.expired_items / EXPIRE_PACE;
        assert!(wait > 0);
        for _ in 0..wait {
            set_forever(&mut c);
            assert_eq!(c.stats().expired_segments, 1, "the writes after it free none");
        }
        set_forever(&mut c);
        assert_eq!(c.stats().expired_segments, 2, "then the next one is freed");
    }

    /// A write that needs a segment takes an expired one before evicting a live item, even when
    /// the pace lets the writes free none.
    #[test]
    fn writes_that_need_room_take_expired_segments_before_live_ones() {
        let (mut c, n, expired, mut m) = a_third_expired(0);
        c.expiry_wait = u64::MAX;
        while c.stats().evicted_segments == 0 {
            c.set(&forever(m), &VALUE, 0, Duration::ZERO).unwrap();
            m += 1;
        }
        assert_eq!(c.stats().expired_segments, expired);
        assert_eq!(c.stats().expired_items, n as u64);
    }
}
