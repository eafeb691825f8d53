//! Key scans: a cursor over the hash table, for key dumps (memcached's `lru_crawler metadump`,
//! `stats cachedump`) and for callers that list what the cache holds.
//!
//! The cursor is a primary bucket index (for [`SharedCache`], shard and bucket folded into one
//! number). A step reads whole hash chains, starting at the cursor's, until it has seen `count`
//! items or reached the end of the table, and returns the index of the next chain. A key's chain
//! is fixed by its hash: writes that move its record (a rewrite, a merge, a compaction) change
//! the slot's location, never its chain, and removals that compact a chain move slots within it.
//! Hence, across steps taken while other threads write:
//!
//! - a key present (not deleted, not expired) for the whole scan is returned exactly once: by
//!   the one step that reads its chain;
//! - no key is invented, and every key returned was live when its chain was read;
//! - keys stored, deleted or expiring during the scan may or may not appear (at most once).
//!
//! The cursor starts at 0, and 0 comes back when the scan is complete (as Redis's `SCAN`).

use crate::engine::Segcache;
use crate::hashtable::table::Found;
use crate::item::Item;
use crate::large::is_chunk_key;

impl Segcache {
    /// Primary buckets of the hash table: the cursor range of [`Segcache::scan_with`].
    ///
    /// ```
    /// use segcache_core::Builder;
    /// let cache = Builder::new().heap_size(4 << 20).hash_power(8).build()?;
    /// assert_eq!(cache.scan_len(), 256);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn scan_len(&self) -> u64 {
        self.geo.primary_buckets() as u64
    }

    /// One step of a key scan from `cursor` (0 to start): calls `f` with every live item of
    /// the hash chains read, whole chains at a time until at least `count` items were seen (or
    /// the table ends), and returns the cursor of the next step, 0 once the table is done. See
    /// the module documentation of `keys` for what a scan guarantees.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// for i in 0..100 {
    ///     cache.set(format!("k{i}").as_bytes(), b"v", 0, Duration::ZERO)?;
    /// }
    /// let (mut cursor, mut bytes) = (0, 0);
    /// loop {
    ///     cursor = cache.scan_with(cursor, 10, |item| bytes += item.key().len() + item.value().len());
    ///     if cursor == 0 {
    ///         break;
    ///     }
    /// }
    /// assert_eq!(bytes, 10 * 2 + 90 * 3 + 100); // k0..k9, k10..k99, and one byte each of value
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn scan_with(&self, cursor: u64, count: usize, mut f: impl FnMut(Item<'_>)) -> u64 {
        let end = self.scan_len();
        if self.origin.forked() {
            return 0;
        }
        let now = self.now();
        let table = self.table();
        let mut seen = 0usize;
        let mut chain = cursor;
        while chain < end && seen < count.max(1) {
            // A chain's index serves as its hash: `head` only uses the masked bits.
            table.scan(chain, |slot, value| {
                // A large item's chunks are not items (their keys are longer than any user key).
                let item = self.item_of(Found { slot, value }, chain, now).filter(|(i, _)| !is_chunk_key(i.key));
                if let Some((item, _)) = item {
                    seen += 1;
                    f(item);
                }
                false
            });
            chain += 1;
        }
        if chain >= end {
            0
        } else {
            chain
        }
    }

    /// One step of a key scan (see [`Segcache::scan_with`]): the keys read and the next cursor.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// for i in 0..100 {
    ///     cache.set(format!("k{i}").as_bytes(), b"v", 0, Duration::ZERO)?;
    /// }
    /// let (mut cursor, mut keys) = (0, Vec::new());
    /// loop {
    ///     let (batch, next) = cache.scan(cursor, 16);
    ///     keys.extend(batch);
    ///     if next == 0 {
    ///         break;
    ///     }
    ///     cursor = next;
    /// }
    /// keys.sort();
    /// keys.dedup();
    /// assert_eq!(keys.len(), 100); // every key, once
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn scan(&self, cursor: u64, count: usize) -> (Vec<Vec<u8>>, u64) {
        let mut keys = Vec::new();
        let next = self.scan_with(cursor, count, |item| keys.push(item.key().to_vec()));
        (keys, next)
    }

    /// Every live key, in one pass (for tests and small caches; see [`Segcache::scan`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"a", b"1", 0, Duration::ZERO)?;
    /// cache.set(b"b", b"2", 0, Duration::ZERO)?;
    /// let mut keys = cache.keys();
    /// keys.sort();
    /// assert_eq!(keys, [b"a".to_vec(), b"b".to_vec()]);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn keys(&self) -> Vec<Vec<u8>> {
        self.scan(0, usize::MAX).0
    }

    /// The stored length of the record of a live item: key, value, flags and header, in bytes,
    /// with its CAS counter held narrow, as it mostly is (2 bytes less than a wide one, 6 less
    /// than a client-chosen CAS value, which a read does not report).
    pub(crate) fn record_len_of(item: &Item<'_>) -> usize {
        crate::record::record_len(item.key().len(), item.value().len(), item.flags(), crate::record::CasForm::Narrow)
    }
}

/// The stored size of an item's record (for dumps that print one).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{record_size, Builder};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// cache.set(b"key", b"value", 0, Duration::ZERO)?;
/// let size = record_size(&cache.get(b"key").unwrap());
/// assert!(size > b"key".len() + b"value".len()); // and a header of a few bytes
/// assert_eq!(cache.stats().bytes, size as u64);
/// # Ok::<(), segcache_core::Error>(())
/// ```
pub fn record_size(item: &Item<'_>) -> usize {
    Segcache::record_len_of(item)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use crate::builder::Builder;

    use crate::eviction::policy::Policy;

    #[test]
    fn a_scan_returns_every_live_key_once_in_small_steps() {
        let mut c = Builder::new().heap_size(4 << 20).segment_size(64 << 10).hash_power(8).build().unwrap();
        for i in 0..300 {
            c.set(format!("k{i}").as_bytes(), b"v", 0, Duration::ZERO).unwrap();
        }
        c.delete(b"k7").unwrap();
        let (mut cursor, mut seen) = (0, Vec::new());
        loop {
            let (keys, next) = c.scan(cursor, 5);
            seen.extend(keys);
            if next == 0 {
                break;
            }
            assert!(next > cursor);
            cursor = next;
        }
        let set: HashSet<_> = seen.iter().cloned().collect();
        assert_eq!(set.len(), seen.len(), "no key twice");
        assert_eq!(set.len(), 299);
        assert!(!set.contains(&b"k7"[..]));
        assert_eq!(c.keys().len(), 299);
    }

    #[test]
    fn a_scan_skips_expired_and_flushed_items() {
        let clock = crate::clock::ManualClock::new(1_000);
        let mut c = Builder::new().heap_size(4 << 20).segment_size(64 << 10).clock(clock.clone()).build().unwrap();
        c.set(b"short", b"v", 0, Duration::from_secs(5)).unwrap();
        c.set(b"long", b"v", 0, Duration::ZERO).unwrap();
        clock.advance(10);
        assert_eq!(c.keys(), vec![b"long".to_vec()]);
        c.flush();
        assert!(c.keys().is_empty());
    }

    #[test]
    fn shared_scan_crosses_shards() {
        let c = Builder::new().heap_size(16 << 20).segment_size(64 << 10).shards(4).eviction(Policy::None);
        let c = c.build_shared().unwrap();
        for i in 0..1000 {
            c.set(format!("key-{i}").as_bytes(), b"value", 0, Duration::ZERO).unwrap();
        }
        let (mut cursor, mut seen) = (0, Vec::new());
        loop {
            let (keys, next) = c.scan(cursor, 64);
            seen.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let set: HashSet<_> = seen.iter().cloned().collect();
        assert_eq!((set.len(), seen.len()), (1000, 1000));
        let (bytes, power) = c.table_size();
        assert!(bytes > 0 && power > 0);
        assert_eq!(1u64 << power, c.scan_len());
    }
}
