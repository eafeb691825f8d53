//! memcached's expiry rules: how an exptime argument becomes an engine TTL.

use std::time::Duration;

/// memcached's boundary between a relative TTL and an absolute Unix time.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// An exptime resolved against the cache clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// `0`: never expires.
    Never,
    /// Expires after this long (whole seconds, at least one).
    After(Duration),
    /// Negative, or an absolute time not in the future: expired on arrival.
    Expired,
}

impl Expiry {
    /// memcached's rules: 0 never, negative expired, up to 30 days relative, beyond that an
    /// absolute Unix time (converted with the cache clock's `now`).
    pub fn from_exptime(exptime: i64, now: u32) -> Expiry {
        match exptime {
            0 => Expiry::Never,
            e if e < 0 => Expiry::Expired,
            e if e <= REALTIME_MAXDELTA => Expiry::After(Duration::from_secs(e as u64)),
            e if e <= i64::from(now) => Expiry::Expired,
            e => Expiry::After(Duration::from_secs((e - i64::from(now)) as u64)),
        }
    }

    /// The engine TTL (`ZERO` = never); `None` when expired.
    pub fn ttl(self) -> Option<Duration> {
        match self {
            Expiry::Never => Some(Duration::ZERO),
            Expiry::After(d) => Some(d),
            Expiry::Expired => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_rules() {
        let now = 1_700_000_000;
        assert_eq!(Expiry::from_exptime(0, now), Expiry::Never);
        assert_eq!(Expiry::from_exptime(-1, now), Expiry::Expired);
        assert_eq!(Expiry::from_exptime(10, now), Expiry::After(Duration::from_secs(10)));
        assert_eq!(
            Expiry::from_exptime(REALTIME_MAXDELTA, now),
            Expiry::After(Duration::from_secs(REALTIME_MAXDELTA as u64))
        );
        assert_eq!(Expiry::from_exptime(REALTIME_MAXDELTA + 1, now), Expiry::Expired);
        assert_eq!(Expiry::from_exptime(i64::from(now), now), Expiry::Expired);
        assert_eq!(Expiry::from_exptime(i64::from(now) + 100, now), Expiry::After(Duration::from_secs(100)));
    }
}
