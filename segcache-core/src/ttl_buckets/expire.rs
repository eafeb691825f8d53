//! Expiry: when an item expires, what flushes have removed, and how writes pace the freeing of
//! expired segments.

use std::time::Duration;

use crate::ttl_buckets::ttl;

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

/// Writes that pass between two segments freed by the expiry of writes: the number of items the
/// last one held, divided by this (see `Segcache::expire_step`). Freeing costs about 35 ns an
/// item, so while a mass expiry is freed each write carries about 0.5 us of it on average (a
/// server's request costs 10-15 us); with 4, freeing one took most of a 6M-operation run.
pub(crate) const EXPIRE_PACE: u64 = 16;
