//! Compute: read a key's item, let the caller decide, and write the decision, all under one
//! exclusive hold of the shard, so that no other writer of the key runs in between.

use std::time::Duration;

use crate::engine::write::{check_key, Mode};
use crate::engine::Segcache;
use crate::error::Result;
use crate::hash::hash;
use crate::item::Item;
use crate::ttl_buckets::expire::ttl_secs;

/// What a compute's function decides to do with the key (see [`Segcache::compute`]).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::Op;
///
/// let put = Op::put(b"v".to_vec());
/// assert_eq!(put, Op::Put { value: b"v".to_vec(), flags: 0, ttl: Duration::ZERO });
/// assert_eq!(Op::put(b"v".to_vec()).with_ttl(Duration::from_secs(5)).with_flags(3),
///            Op::Put { value: b"v".to_vec(), flags: 3, ttl: Duration::from_secs(5) });
/// assert_eq!(Op::Keep.with_ttl(Duration::from_secs(5)), Op::Keep); // only a put has a TTL
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Leave the key as it is (absent, or its current item untouched).
    Keep,
    /// Store `value` as the key's new item, with client flags `flags` and `ttl` (zero: never
    /// expires). It takes a new CAS value.
    Put {
        /// The new value.
        value: Vec<u8>,
        /// The new item's client flags.
        flags: u32,
        /// The new item's TTL (zero: never expires).
        ttl: Duration,
    },
    /// Remove the key's item (nothing happens when there is none).
    Remove,
}

impl Op {
    /// `Op::Put` of `value` with flags 0 and no expiry.
    ///
    /// ```
    /// use segcache_core::Op;
    /// assert!(matches!(Op::put(b"1".to_vec()), Op::Put { flags: 0, .. }));
    /// ```
    pub fn put(value: impl Into<Vec<u8>>) -> Op {
        Op::Put { value: value.into(), flags: 0, ttl: Duration::ZERO }
    }

    /// This `Op::Put` with `ttl` (zero: never expires); any other op unchanged.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Op;
    /// let op = Op::put(b"1".to_vec()).with_ttl(Duration::from_secs(60));
    /// assert!(matches!(op, Op::Put { ttl, .. } if ttl == Duration::from_secs(60)));
    /// ```
    pub fn with_ttl(self, ttl: Duration) -> Op {
        match self {
            Op::Put { value, flags, .. } => Op::Put { value, flags, ttl },
            other => other,
        }
    }

    /// This `Op::Put` with client flags `flags`; any other op unchanged.
    ///
    /// ```
    /// use segcache_core::Op;
    /// assert!(matches!(Op::put(b"1".to_vec()).with_flags(7), Op::Put { flags: 7, .. }));
    /// ```
    pub fn with_flags(self, flags: u32) -> Op {
        match self {
            Op::Put { value, ttl, .. } => Op::Put { value, flags, ttl },
            other => other,
        }
    }
}

/// What a compute did (see [`Segcache::compute`]).
///
/// ```
/// use segcache_core::{Builder, Computed, Op};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// assert_eq!(cache.compute(b"k", |_| Op::Keep)?, Computed::StillAbsent);
/// let Computed::Inserted { cas } = cache.compute(b"k", |_| Op::put(b"1".to_vec()))? else { panic!() };
/// assert_eq!(cache.get(b"k").unwrap().cas(), cas);
/// assert_eq!(cache.compute(b"k", |_| Op::Keep)?, Computed::Unchanged { cas });
/// assert!(matches!(cache.compute(b"k", |_| Op::put(b"2".to_vec()))?, Computed::Replaced { .. }));
/// assert_eq!(cache.compute(b"k", |_| Op::Remove)?, Computed::Removed);
/// assert_eq!(cache.compute(b"k", |_| Op::Remove)?, Computed::StillAbsent);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Computed {
    /// There was no item, and none was stored.
    StillAbsent,
    /// The item was kept as it was; `cas` is its CAS value.
    Unchanged {
        /// The item's CAS value.
        cas: u64,
    },
    /// There was no item; the put one has CAS value `cas`.
    Inserted {
        /// The new item's CAS value.
        cas: u64,
    },
    /// The item was replaced by the put one, which has CAS value `cas`.
    Replaced {
        /// The new item's CAS value.
        cas: u64,
    },
    /// The item was removed.
    Removed,
}

impl Computed {
    /// The CAS value of the key's item after the compute, or `None` when it has none.
    ///
    /// ```
    /// use segcache_core::Computed;
    /// assert_eq!(Computed::Replaced { cas: 9 }.cas(), Some(9));
    /// assert_eq!(Computed::Removed.cas(), None);
    /// ```
    pub fn cas(self) -> Option<u64> {
        match self {
            Computed::Unchanged { cas } | Computed::Inserted { cas } | Computed::Replaced { cas } => Some(cas),
            Computed::StillAbsent | Computed::Removed => None,
        }
    }
}

impl Segcache {
    /// Reads `key`'s item, calls `f` with it (`None` when absent or expired), and does what `f`
    /// decides: keep, put a new value, or remove. Nothing else writes the key between the read
    /// and the write. A put takes a new CAS value, as any store does, so a memcached client's
    /// CAS token read before the compute no longer matches.
    ///
    /// A put of a value the cache cannot hold fails as `set` would ([`crate::Error::TooLarge`],
    /// [`crate::Error::NoMemory`]) and leaves the current item as it was.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Computed, Op};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// // A counter kept as a little-endian u64, created at 1.
    /// for _ in 0..3 {
    ///     cache.compute(b"visits", |current| {
    ///         let n = current.map_or(0, |item| u64::from_le_bytes(item.value().try_into().unwrap()));
    ///         Op::put((n + 1).to_le_bytes().to_vec()).with_ttl(Duration::from_secs(3600))
    ///     })?;
    /// }
    /// assert_eq!(cache.get(b"visits").unwrap().value(), 3u64.to_le_bytes());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn compute(&mut self, key: &[u8], f: impl FnOnce(Option<Item<'_>>) -> Op) -> Result<Computed> {
        self.compute_hashed(key, hash(key), f)
    }

    /// `compute` for a caller that has the key's hash `h` (`SharedCache` hashes to choose the
    /// shard).
    pub(crate) fn compute_hashed(
        &mut self,
        key: &[u8],
        h: u64,
        f: impl FnOnce(Option<Item<'_>>) -> Op,
    ) -> Result<Computed> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_keyed_write(key, h);
        let current = self.lookup(key, h, now).map(|(item, _)| item);
        let had = current.as_ref().map(|item| item.cas);
        match (f(current), had) {
            (Op::Keep, None) | (Op::Remove, None) => Ok(Computed::StillAbsent),
            (Op::Keep, Some(cas)) => Ok(Computed::Unchanged { cas }),
            (Op::Remove, Some(_)) => {
                self.delete_at(key, h, now, None)?;
                Ok(Computed::Removed)
            }
            (Op::Put { value, flags, ttl }, had) => {
                // Through `store`, as `set` goes, so that `store_at` stays inlined into `set` (one
                // caller more tips the compiler into calling it out of line). The `prepare_write`
                // that `store` repeats is harmless: at most one expiry step more.
                let cas = self.store(key, h, &[&value], flags, ttl_secs(ttl), Mode::Set)?;
                Ok(if had.is_some() { Computed::Replaced { cas } } else { Computed::Inserted { cas } })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::builder::Builder;

    use crate::engine::compute::{Computed, Op};

    use crate::error::Error;

    use crate::clock::ManualClock;

    #[test]
    fn compute_sees_the_current_item_and_its_decision_is_stored() {
        let clock = ManualClock::new(1_000);
        let mut c = Builder::new().heap_size(4 << 20).clock(clock.clone()).build().unwrap();
        c.set(b"k", b"old", 7, Duration::ZERO).unwrap();
        let before = c.get(b"k").unwrap().cas();
        let mut seen = None;
        let done = c
            .compute(b"k", |item| {
                let item = item.unwrap();
                seen = Some((item.value().to_vec(), item.flags(), item.cas()));
                Op::put(b"new".to_vec()).with_flags(9).with_ttl(Duration::from_secs(10))
            })
            .unwrap();
        assert_eq!(seen, Some((b"old".to_vec(), 7, before)));
        let Computed::Replaced { cas } = done else { panic!("{done:?}") };
        assert_ne!(cas, before, "a compute that writes gives a new CAS value");
        let item = c.get(b"k").unwrap();
        assert_eq!((item.value(), item.flags(), item.cas()), (&b"new"[..], 9, cas));
        clock.advance(11);
        assert!(c.get(b"k").is_none(), "the put's TTL holds");
        assert_eq!(
            c.compute(b"k", |item| if item.is_none() { Op::Keep } else { Op::Remove }).unwrap(),
            Computed::StillAbsent
        );
    }

    #[test]
    fn a_put_that_cannot_be_stored_fails_and_keeps_the_item() {
        let mut c = Builder::new().heap_size(4 << 20).segment_size(64 << 10).build().unwrap();
        c.set(b"k", b"v", 0, Duration::ZERO).unwrap();
        let res = c.compute(b"k", |_| Op::put(vec![0; 100 << 10]));
        assert!(matches!(res, Err(Error::TooLarge { .. })), "{res:?}");
        assert_eq!(c.get(b"k").unwrap().value(), b"v");
        assert!(matches!(c.compute(b"", |_| Op::Keep), Err(Error::EmptyKey)));
    }
}
