//! TTL buckets: 1024 buckets in 4 tiers of growing width. Items whose TTLs fall in one bucket go
//! to that bucket's chain of segments, so a segment's items expire within one bucket width of each
//! other and expiry frees whole segments from the head of a chain.
//!
//! | tier | TTLs (s)          | width (s) |
//! |------|-------------------|-----------|
//! | 0    | 1 .. 256          | 1         |
//! | 1    | 256 .. 4096       | 16        |
//! | 2    | 4096 .. 65536     | 256       |
//! | 3    | 65536 and longer  | 4096      |
//!
//! Bucket 0 holds items that never expire. An item's TTL is rounded down to its bucket's width,
//! and a segment takes items whose expiry is less than one width after its own, so an item can
//! expire early, by less than two widths (three after a merge), and never late.
//!
//! ```
//! use segcache_core::ttl;
//!
//! // A TTL of 300 s lies in tier 1: buckets 16 s wide, so it is applied as 288 s.
//! assert_eq!((ttl::width_of(300), ttl::rounded(300)), (16, 288));
//! assert_eq!(ttl::bucket_of(300), 256 + 300 / 16);
//! ```

/// Number of TTL buckets.
///
/// ```
/// use segcache_core::ttl;
/// assert_eq!(ttl::bucket_of(u32::MAX), ttl::BUCKETS - 1);
/// ```
pub const BUCKETS: usize = 1024;
const TIER_BUCKETS: u32 = 256;

/// The bucket index of a TTL in seconds (0 = never expires).
///
/// ```
/// use segcache_core::ttl;
/// assert_eq!(ttl::bucket_of(0), 0); // never expires
/// assert_eq!(ttl::bucket_of(100), 100);
/// assert_eq!(ttl::bucket_of(300), ttl::bucket_of(303)); // one 16 s bucket
/// ```
#[inline]
pub fn bucket_of(ttl: u32) -> usize {
    let (tier, shift) = tier_of(ttl);
    let idx = (ttl >> shift).min(TIER_BUCKETS - 1);
    (tier * TIER_BUCKETS + idx) as usize
}

/// Width in seconds of the bucket that holds this TTL.
///
/// ```
/// use segcache_core::ttl;
/// assert_eq!(ttl::width_of(100), 1);
/// assert_eq!(ttl::width_of(300), 16);
/// assert_eq!(ttl::width_of(5_000), 256);
/// assert_eq!(ttl::width_of(100_000), 4096);
/// ```
#[inline]
pub fn width_of(ttl: u32) -> u32 {
    1 << tier_of(ttl).1
}

/// The TTL the engine applies: rounded down to its bucket's width.
///
/// ```
/// use segcache_core::ttl;
/// assert_eq!(ttl::rounded(100), 100);
/// assert_eq!(ttl::rounded(300), 288); // never longer than asked
/// ```
#[inline]
pub fn rounded(ttl: u32) -> u32 {
    ttl & !(width_of(ttl) - 1)
}

/// Width in seconds of bucket `index`.
///
/// ```
/// use segcache_core::ttl;
/// assert_eq!(ttl::width_of_bucket(ttl::bucket_of(300)), ttl::width_of(300));
/// ```
#[inline]
pub fn width_of_bucket(index: usize) -> u32 {
    1 << (4 * (index as u32 / TIER_BUCKETS))
}

#[inline]
fn tier_of(ttl: u32) -> (u32, u32) {
    match ttl {
        0..=255 => (0, 0),
        256..=4095 => (1, 4),
        4096..=65535 => (2, 8),
        _ => (3, 12),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_and_bounds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 1);
        assert_eq!(bucket_of(255), 255);
        assert_eq!(bucket_of(256), 256 + 16);
        assert_eq!(bucket_of(4095), 511);
        assert_eq!(bucket_of(4096), 512 + 16);
        assert_eq!(bucket_of(65536), 768 + 16);
        assert_eq!(bucket_of(u32::MAX), BUCKETS - 1);
        assert_eq!(width_of(100), 1);
        assert_eq!(width_of(300), 16);
        assert_eq!(rounded(300), 288);
        assert_eq!(rounded(70_000), 69_632);
    }

    #[test]
    fn rounding_never_lengthens_and_loses_less_than_a_width() {
        for ttl in (1..2_000_000u32).step_by(97) {
            let r = rounded(ttl);
            assert!(r <= ttl && ttl - r < width_of(ttl), "ttl {ttl} rounded {r}");
            assert!(r > 0, "a TTL never becomes 'never expires'");
            assert_eq!(width_of_bucket(bucket_of(ttl)), width_of(ttl));
            assert!(bucket_of(ttl) < BUCKETS);
        }
        // Buckets are ordered by TTL.
        let mut last = 0;
        for ttl in 1..300_000u32 {
            let b = bucket_of(ttl);
            assert!(b >= last);
            last = b;
        }
    }
}
