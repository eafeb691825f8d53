//! Expiry: when an item expires, what flushes have removed, and expiring whole segments.

use std::time::Duration;

use crate::segments::header::NONE;
use crate::ttl;
use crate::Segcache;

/// When an item stored at `now` with a TTL of `ttl` seconds expires (0: never).
pub(crate) fn expiry_of(ttl: u32, now: u32) -> u32 {
    if ttl == 0 {
        0
    } else {
        now.saturating_add(ttl::rounded(ttl))
    }
}

pub(crate) fn ttl_secs(ttl: Duration) -> u32 {
    let s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    u32::try_from(s).unwrap_or(u32::MAX)
}

/// Whether a flush set for `flush_at` (0: none) has removed, by `now`, what was stored before it.
#[inline]
pub(crate) fn flushed_by(flush_at: u32, now: u32) -> bool {
    flush_at != 0 && now >= flush_at
}

/// Whether the items of a segment expiring at `expire_at` (0: never) are still live at `now`.
#[inline]
pub(crate) fn live_until(expire_at: u32, now: u32) -> bool {
    expire_at == 0 || now < expire_at
}

impl Segcache {
    /// Frees every segment whose items have all expired, from the heads of the TTL chains.
    /// Returns the number of items removed. Writes call it at most once a second.
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
        let now = self.now();
        self.meta_mut().last_expire = now;
        let before = self.meta().expired_items;
        for b in 1..ttl::BUCKETS {
            loop {
                let head = self.ttl_bucket(b).head;
                if head == NONE {
                    break;
                }
                let exp = self.seg(head).expire_at;
                if exp == 0 || now < exp {
                    break;
                }
                self.clear_segment(head, true);
            }
        }
        (self.meta().expired_items - before) as usize
    }
}
