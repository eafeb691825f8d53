//! The segment eviction policies.

use std::fmt;
use std::str::FromStr;

/// How the engine frees a segment when the heap is full.
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, Policy};
///
/// let mut cache = Builder::new().heap_size(1 << 20).segment_size(64 << 10).eviction(Policy::Merge).build()?;
/// for i in 0..20_000 {
///     cache.set(format!("key{i}").as_bytes(), &[0; 100], 0, Duration::ZERO)?; // never fails
/// }
/// let stats = cache.stats();
/// assert!(stats.evicted_segments > 0 && stats.merged_items > 0);
/// assert_eq!("s3-fifo".parse::<Policy>()?, Policy::S3Fifo);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Policy {
    /// Never evict: writes fail with [`crate::Error::NoMemory`] when the heap is full.
    None = 0,
    /// Evict a random segment.
    Random = 1,
    /// Evict the oldest segment of a random TTL bucket.
    RandomFifo = 2,
    /// Evict the oldest segment.
    Fifo = 3,
    /// Evict the segment closest to expiration.
    Cte = 4,
    /// Evict the segment with the fewest live bytes.
    Util = 5,
    /// Merge a few neighbouring segments into one, keeping the most frequently read items
    /// (the Segcache paper's policy).
    #[default]
    Merge = 6,
    /// S3-FIFO at segment granularity: new items enter a small probationary FIFO; items read
    /// while there move to the main FIFO, the rest leave a ghost so a quick return goes to main.
    S3Fifo = 7,
}

impl Policy {
    /// Every policy, in declaration order.
    ///
    /// ```
    /// use segcache_core::Policy;
    /// assert_eq!(Policy::ALL.len(), 8);
    /// assert!(Policy::ALL.iter().enumerate().all(|(i, p)| *p as usize == i));
    /// ```
    pub const ALL: [Policy; 8] = [
        Policy::None,
        Policy::Random,
        Policy::RandomFifo,
        Policy::Fifo,
        Policy::Cte,
        Policy::Util,
        Policy::Merge,
        Policy::S3Fifo,
    ];

    /// The lower-case name that [`FromStr`] accepts.
    ///
    /// ```
    /// use segcache_core::Policy;
    /// assert_eq!(Policy::RandomFifo.name(), "random-fifo");
    /// assert_eq!(Policy::RandomFifo.to_string(), "random-fifo");
    /// assert_eq!("random-fifo".parse::<Policy>()?, Policy::RandomFifo);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::Random => "random",
            Policy::RandomFifo => "random-fifo",
            Policy::Fifo => "fifo",
            Policy::Cte => "cte",
            Policy::Util => "util",
            Policy::Merge => "merge",
            Policy::S3Fifo => "s3fifo",
        }
    }

    /// The policy with this `repr(u8)` value.
    ///
    /// ```
    /// use segcache_core::Policy;
    /// assert_eq!(Policy::from_u8(Policy::S3Fifo as u8), Some(Policy::S3Fifo));
    /// assert_eq!(Policy::from_u8(200), None);
    /// ```
    pub fn from_u8(v: u8) -> Option<Policy> {
        Policy::ALL.get(v as usize).copied()
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = crate::error::Error;

    /// Case-insensitive; `-` and `_` are ignored (`random_fifo`, `RandomFifo`, `s3-fifo`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm: String = s.chars().filter(|c| *c != '-' && *c != '_').map(|c| c.to_ascii_lowercase()).collect();
        Policy::ALL
            .into_iter()
            .find(|p| p.name().replace('-', "") == norm)
            .ok_or_else(|| {
                crate::error::Error::InvalidConfig(format!(
                    "unknown eviction policy {s:?}; expected one of none, random, random-fifo, fifo, cte, util, merge, s3fifo"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Policy::ALL {
            assert_eq!(p.name().parse::<Policy>().unwrap(), p);
            assert_eq!(Policy::from_u8(p as u8), Some(p));
        }
        assert_eq!("RandomFifo".parse::<Policy>().unwrap(), Policy::RandomFifo);
        assert_eq!("S3_FIFO".parse::<Policy>().unwrap(), Policy::S3Fifo);
        assert!("lru".parse::<Policy>().is_err());
    }
}
