//! One small interface over every cache measured, so that each workload is written once and
//! runs the same loop for every library.
//!
//! Peers with a generic key/value type store `Box<[u8]>` keys and values: a byte cache with
//! keys and values of any length has to keep them on the heap, and `Box<[u8]>` is the leanest
//! owner of a byte string (no spare capacity word). Peers that hand out clones on a read
//! (`quick_cache`, `moka`) therefore allocate and copy on every hit; that is the cost of their API.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Duration;

use crate::keys::touch;

/// Heap key/value of the peers with generic types.
pub type Bytes = Box<[u8]>;

/// The libraries measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lib {
    /// `segcache_core::SharedCache` (this project, thread-safe handle).
    Ours,
    /// `segcache_core::Segcache` (this project, single owner; one thread only).
    OursSingle,
    /// The smallest get `SharedCache`'s layout allows (`SharedCache::floor_get`: no lock, no
    /// expiry, no state, no counters); its stores are `SharedCache`'s. Read-only runs only.
    Floor,
    /// `segcache` 0.4.4 (Pelikan's crate, thread-safe).
    Pelikan,
    /// `quick_cache::sync::Cache`.
    QuickCache,
    /// `moka::sync::Cache`.
    Moka,
    /// `lru::LruCache` behind a `std::sync::Mutex`.
    Lru,
}

impl Lib {
    /// Every library with a thread-safe handle.
    pub const SHARED: [Lib; 5] = [Lib::Ours, Lib::Pelikan, Lib::QuickCache, Lib::Moka, Lib::Lru];
    /// Every library, the single-owner engine included.
    pub const ALL: [Lib; 6] = [Lib::Ours, Lib::OursSingle, Lib::Pelikan, Lib::QuickCache, Lib::Moka, Lib::Lru];

    /// The name printed in tables.
    pub fn name(self) -> &'static str {
        match self {
            Lib::Ours => "segcache-core SharedCache",
            Lib::OursSingle => "segcache-core Segcache",
            Lib::Floor => "segcache-core layout floor (bench only)",
            Lib::Pelikan => "segcache 0.4.4 (Pelikan)",
            Lib::QuickCache => "quick_cache 0.7 sync",
            Lib::Moka => "moka 0.12 sync",
            Lib::Lru => "lru 0.19 + Mutex",
        }
    }

    /// The name on the command line (`--lib`).
    pub fn arg(self) -> &'static str {
        match self {
            Lib::Ours => "ours",
            Lib::OursSingle => "ours-single",
            Lib::Floor => "floor",
            Lib::Pelikan => "pelikan",
            Lib::QuickCache => "quick-cache",
            Lib::Moka => "moka",
            Lib::Lru => "lru",
        }
    }

    /// Whether the library is sized by a byte budget (true) or by an item count (false).
    pub fn has_byte_budget(self) -> bool {
        matches!(self, Lib::Ours | Lib::OursSingle | Lib::Floor | Lib::Pelikan)
    }
}

/// A cache used from one thread (`&mut self`).
pub trait Store {
    /// Reads `key`; on a hit returns a number computed from the value's bytes (see [`touch`]).
    fn get(&mut self, key: &[u8]) -> Option<usize>;
    /// Stores `key` -> `value` without expiry; false when the cache refused it.
    fn set(&mut self, key: &[u8], value: &[u8]) -> bool;
    /// Removes `key`; whether it was there.
    fn delete(&mut self, key: &[u8]) -> bool;
    /// Runs deferred maintenance (moka's pending evictions) before memory or hits are counted.
    fn settle(&mut self) {}
    /// Engine counters worth printing with a result (ours only; empty for the others).
    fn describe(&mut self) -> String {
        String::new()
    }
}

/// A cache shared between threads (`&self`).
pub trait SharedStore: Send + Sync {
    fn get(&self, key: &[u8]) -> Option<usize>;
    fn set(&self, key: &[u8], value: &[u8]) -> bool;
    fn delete(&self, key: &[u8]) -> bool;
    fn settle(&self) {}
    fn describe(&self) -> String {
        String::new()
    }
}

impl<T: SharedStore + ?Sized> Store for &T {
    #[inline]
    fn get(&mut self, key: &[u8]) -> Option<usize> {
        SharedStore::get(*self, key)
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) -> bool {
        SharedStore::set(*self, key, value)
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        SharedStore::delete(*self, key)
    }
    fn settle(&mut self) {
        SharedStore::settle(*self)
    }
    fn describe(&mut self) -> String {
        SharedStore::describe(*self)
    }
}

impl<S: Store + ?Sized> Store for &mut S {
    #[inline]
    fn get(&mut self, key: &[u8]) -> Option<usize> {
        (**self).get(key)
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) -> bool {
        (**self).set(key, value)
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        (**self).delete(key)
    }
    fn settle(&mut self) {
        (**self).settle()
    }
    fn describe(&mut self) -> String {
        (**self).describe()
    }
}

impl Store for segcache_core::Segcache {
    #[inline]
    fn get(&mut self, key: &[u8]) -> Option<usize> {
        segcache_core::Segcache::get(self, key).map(|i| touch(i.value()))
    }
    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8]) -> bool {
        segcache_core::Segcache::set(self, key, value, 0, Duration::ZERO).is_ok()
    }
    #[inline]
    fn delete(&mut self, key: &[u8]) -> bool {
        segcache_core::Segcache::delete(self, key).is_ok()
    }
    fn describe(&mut self) -> String {
        describe_ours(&self.stats())
    }
}

/// The engine's item count, live bytes, and how full its segments and table are.
fn describe_ours(s: &segcache_core::Stats) -> String {
    format!(
        "policy {} shards {} items {} live bytes {} ({:.1}% of heap) free segments {} overflow buckets {} evicted {} merged {}",
        s.policy,
        s.shards,
        s.items,
        s.bytes,
        100.0 * s.bytes as f64 / s.heap_bytes.max(1) as f64,
        s.segments_free,
        s.overflow_buckets,
        s.evicted_items,
        s.merged_items
    )
}

impl SharedStore for segcache_core::SharedCache {
    /// Zero-copy read under the shard's read lock (`get_with`), as the server uses it.
    #[inline]
    fn get(&self, key: &[u8]) -> Option<usize> {
        self.get_with(key, |i| touch(i.value()))
    }
    #[inline]
    fn set(&self, key: &[u8], value: &[u8]) -> bool {
        segcache_core::SharedCache::set(self, key, value, 0, Duration::ZERO).is_ok()
    }
    #[inline]
    fn delete(&self, key: &[u8]) -> bool {
        segcache_core::SharedCache::delete(self, key).is_ok()
    }
    fn describe(&self) -> String {
        describe_ours(&self.stats())
    }
}

/// `SharedCache` read through its floor (`Lib::Floor`).
pub struct Floor(pub segcache_core::SharedCache);

impl SharedStore for Floor {
    #[inline]
    fn get(&self, key: &[u8]) -> Option<usize> {
        // SAFETY: the benchmarks run `Lib::Floor` read-only, from one thread at a time: no store
        // runs beside a read.
        unsafe { self.0.floor_get(key, touch) }
    }
    #[inline]
    fn set(&self, key: &[u8], value: &[u8]) -> bool {
        SharedStore::set(&self.0, key, value)
    }
    #[inline]
    fn delete(&self, key: &[u8]) -> bool {
        SharedStore::delete(&self.0, key)
    }
}

/// Pelikan's value may be a byte string or a `u64`; the benchmarks store byte strings only.
#[inline]
fn pelikan_touch(v: segcache::Value<'_>) -> usize {
    match v {
        segcache::Value::Bytes(b) => touch(b),
        segcache::Value::U64(n) => n as usize,
    }
}

impl SharedStore for segcache::Segcache {
    #[inline]
    fn get(&self, key: &[u8]) -> Option<usize> {
        segcache::Segcache::get(self, key).map(|i| pelikan_touch(i.value()))
    }
    #[inline]
    fn set(&self, key: &[u8], value: &[u8]) -> bool {
        self.insert(key, value, None, Duration::ZERO).is_ok()
    }
    #[inline]
    fn delete(&self, key: &[u8]) -> bool {
        segcache::Segcache::delete(self, key)
    }
}

/// `quick_cache::sync::Cache` with heap keys and values.
pub type QuickCache = quick_cache::sync::Cache<Bytes, Bytes>;

impl SharedStore for QuickCache {
    #[inline]
    fn get(&self, key: &[u8]) -> Option<usize> {
        quick_cache::sync::Cache::get(self, key).map(|v| touch(&v))
    }
    #[inline]
    fn set(&self, key: &[u8], value: &[u8]) -> bool {
        self.insert(key.into(), value.into());
        true
    }
    #[inline]
    fn delete(&self, key: &[u8]) -> bool {
        self.remove(key).is_some()
    }
}

/// `moka::sync::Cache` with heap keys and values.
pub type MokaCache = moka::sync::Cache<Bytes, Bytes>;

impl SharedStore for MokaCache {
    #[inline]
    fn get(&self, key: &[u8]) -> Option<usize> {
        moka::sync::Cache::get(self, key).map(|v| touch(&v))
    }
    #[inline]
    fn set(&self, key: &[u8], value: &[u8]) -> bool {
        self.insert(key.into(), value.into());
        true
    }
    #[inline]
    fn delete(&self, key: &[u8]) -> bool {
        self.remove(key).is_some()
    }
    fn settle(&self) {
        self.run_pending_tasks();
    }
}

/// `lru::LruCache` behind one mutex: the usual way to share it.
pub struct LruMutex(pub Mutex<lru::LruCache<Bytes, Bytes>>);

impl SharedStore for LruMutex {
    #[inline]
    fn get(&self, key: &[u8]) -> Option<usize> {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        guard.get(key).map(|v| touch(v))
    }
    #[inline]
    fn set(&self, key: &[u8], value: &[u8]) -> bool {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        guard.put(key.into(), value.into());
        true
    }
    #[inline]
    fn delete(&self, key: &[u8]) -> bool {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        guard.pop(key).is_some()
    }
}

/// How big to make a cache.
#[derive(Debug, Clone, Copy)]
pub struct Sizing {
    /// Bytes of heap for libraries with a byte budget (ours, Pelikan).
    pub budget: usize,
    /// Items for libraries sized by count (quick_cache, moka, lru).
    pub capacity: usize,
    /// Items the byte-budget caches are expected to hold: sizes Pelikan's hash table, which
    /// does not chain and is not sized from the heap by itself.
    pub expected_items: usize,
    /// Pelikan's hash power, when not derived from `expected_items`.
    pub pelikan_hash_power: Option<u8>,
    /// Ours: eviction policy, shard count, hash power and segment size other than the defaults
    /// (exploration).
    pub policy: Option<segcache_core::Policy>,
    pub shards: Option<usize>,
    pub hash_power: Option<u8>,
    pub segment_size: Option<usize>,
}

impl Sizing {
    const DEFAULTS: Sizing = Sizing {
        budget: 0,
        capacity: 0,
        expected_items: 0,
        pelikan_hash_power: None,
        policy: None,
        shards: None,
        hash_power: None,
        segment_size: None,
    };

    /// Every library holds `budget` bytes of key+value payload: count-sized peers get
    /// `budget / payload` items (how the peer figures in `shared/peers.md` were made).
    pub fn equal_data(budget: usize, payload: usize) -> Self {
        // Pelikan stores an item in its payload + 6 header bytes, rounded up to 8 (88 here).
        Sizing {
            budget,
            capacity: budget / payload,
            expected_items: budget / (payload + 8),
            pelikan_hash_power: None,
            ..Self::DEFAULTS
        }
    }

    /// Room for `items` items in every library, so that none is evicted: count-based peers get
    /// 25% spare items; the byte-budget caches 192 bytes of heap per item (a power of two), which
    /// covers the per-item header, each shard's partly filled segments, and the dead copies that
    /// overwrites leave until a segment is reclaimed (with less, ours keeps every item after a
    /// fill but its merge eviction drops some under the mixed workloads' overwrites: 91-93% hits
    /// at 50:50 with 96 bytes per item, against 100% for the peers).
    pub fn holding(items: usize) -> Self {
        let capacity = items + items / 4;
        let budget = (items * 192).max(16 << 20).next_power_of_two();
        // Pelikan's table fails inserts once an unlucky bucket pair is full; its own benchmark
        // keeps it at 25% load so that every key stays, and so do we here.
        let power = pelikan_hash_power_at(items, 0.25);
        Sizing { budget, capacity, expected_items: items, pelikan_hash_power: Some(power), ..Self::DEFAULTS }
    }
}

/// Pelikan's table has 2^power slots in buckets of 8 with two-choice placement and no overflow
/// chaining: a bucket pair that is full makes the insert fail. Two-choice placement keeps
/// failures rare up to about 90% load; size it for at most 85%, the smallest table that does.
pub fn pelikan_hash_power(expected_items: usize) -> u8 {
    pelikan_hash_power_at(expected_items, 0.85)
}

/// The smallest power whose table holds `items` at most at `load` (0..1].
pub fn pelikan_hash_power_at(items: usize, load: f64) -> u8 {
    let slots = (items as f64 / load).ceil().max(128.0) as u64;
    (64 - (slots - 1).leading_zeros()) as u8
}

/// Our builder at the budget, with the exploration overrides of `s` (defaults otherwise).
pub fn ours_builder(s: &Sizing) -> segcache_core::Builder {
    let mut b = segcache_core::Builder::new().heap_size(s.budget);
    if let Some(p) = s.policy {
        b = b.eviction(p);
    }
    if let Some(n) = s.shards {
        b = b.shards(n);
    }
    if let Some(h) = s.hash_power {
        b = b.hash_power(h);
    }
    if let Some(size) = s.segment_size {
        b = b.segment_size(size);
    }
    b
}

pub fn build_ours(s: &Sizing) -> segcache_core::SharedCache {
    ours_builder(s).build_shared().expect("segcache-core SharedCache")
}

pub fn build_ours_single(s: &Sizing) -> segcache_core::Segcache {
    ours_builder(s).build().expect("segcache-core Segcache")
}

/// Pelikan segcache with 1 MiB segments and its default eviction (random).
pub fn build_pelikan(s: &Sizing) -> segcache::Segcache {
    segcache::Segcache::builder()
        .heap_size(s.budget)
        .segment_size(1 << 20)
        .hash_power(s.pelikan_hash_power.unwrap_or_else(|| pelikan_hash_power(s.expected_items)))
        .build()
        .expect("Pelikan segcache")
}

pub fn build_quick(s: &Sizing) -> QuickCache {
    QuickCache::new(s.capacity.max(1))
}

pub fn build_moka(s: &Sizing) -> MokaCache {
    MokaCache::new(s.capacity.max(1) as u64)
}

pub fn build_lru(s: &Sizing) -> LruMutex {
    let cap = NonZeroUsize::new(s.capacity.max(1)).expect("non-zero");
    LruMutex(Mutex::new(lru::LruCache::new(cap)))
}

/// Something to do with a freshly built cache of any library: the workload code is generic, so
/// each library's loop is compiled (and inlined) for that library.
pub trait Visit {
    type Out;
    /// A thread-safe cache.
    fn shared<S: SharedStore + 'static>(self, lib: Lib, cache: S) -> Self::Out;
    /// The single-owner engine.
    fn single(self, lib: Lib, cache: segcache_core::Segcache) -> Self::Out;
}

/// Builds `lib` sized by `s` and hands it to `v`.
pub fn with_cache<V: Visit>(lib: Lib, s: &Sizing, v: V) -> V::Out {
    match lib {
        Lib::Ours => v.shared(lib, build_ours(s)),
        Lib::OursSingle => v.single(lib, build_ours_single(s)),
        Lib::Floor => v.shared(lib, Floor(build_ours(s))),
        Lib::Pelikan => v.shared(lib, build_pelikan(s)),
        Lib::QuickCache => v.shared(lib, build_quick(s)),
        Lib::Moka => v.shared(lib, build_moka(s)),
        Lib::Lru => v.shared(lib, build_lru(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{key, VALUE};

    fn roundtrip<S: Store>(mut s: S) {
        assert!(s.set(&key(1), &VALUE));
        assert_eq!(s.get(&key(1)), Some(touch(&VALUE)));
        assert_eq!(s.get(&key(2)), None);
        s.settle();
    }

    struct Check;
    impl Visit for Check {
        type Out = ();
        fn shared<S: SharedStore + 'static>(self, _: Lib, cache: S) {
            roundtrip(&cache);
        }
        fn single(self, _: Lib, cache: segcache_core::Segcache) {
            roundtrip(cache);
        }
    }

    #[test]
    fn every_library_stores_and_reads_back() {
        let s = Sizing::holding(1000);
        for lib in Lib::ALL {
            with_cache(lib, &s, Check);
        }
    }

    /// The floor reads what `SharedCache` stored, and nothing else: a hit gives the value, an
    /// absent key and a key whose tag matches another's (same chain, other key) give nothing.
    #[test]
    fn the_floor_reads_back_what_was_stored() {
        use crate::keys::{format_key, Key};
        let s = Sizing::holding(20_000);
        let floor = Floor(build_ours(&s));
        let mut k: Key = Default::default();
        for i in 0..20_000u64 {
            format_key(i, &mut k);
            assert!(SharedStore::set(&floor, &k, &VALUE));
        }
        for i in 0..40_000u64 {
            format_key(i, &mut k);
            let want = (i < 20_000).then(|| touch(&VALUE));
            assert_eq!(SharedStore::get(&floor, &k), want, "key {i}");
            assert_eq!(SharedStore::get(&floor, &k), SharedStore::get(&floor.0, &k), "key {i}");
        }
    }

    /// Sets keys 0..n into `s`, then counts those that read back.
    fn kept<S: Store>(mut s: S, n: usize) -> usize {
        use crate::keys::{format_key, Key};
        let mut k: Key = Default::default();
        for i in 0..n as u64 {
            format_key(i, &mut k);
            assert!(s.set(&k, &VALUE), "set {i} refused");
        }
        (0..n as u64)
            .filter(|&i| {
                format_key(i, &mut k);
                s.get(&k).is_some()
            })
            .count()
    }

    /// Ours, sized by `holding(n)`, keeps all the `n + n/4` items the count-based peers have room
    /// for, without evicting any, at the benchmarks' sizes (both handles).
    #[test]
    fn ours_holds_the_peers_capacity() {
        for items in [20_000, 1_000_000] {
            let s = Sizing::holding(items);
            let heap = s.budget >> 20;
            let mut single = build_ours_single(&s);
            assert_eq!(kept(&mut single, s.capacity), s.capacity, "Segcache, {items} items, {heap} MiB");
            assert_eq!(single.stats().evicted_items, 0);
            drop(single);
            let shared = build_ours(&s);
            assert_eq!(kept(&shared, s.capacity), s.capacity, "SharedCache, {items} items, {heap} MiB");
            let st = shared.stats();
            assert_eq!((st.evicted_items, st.merged_items), (0, 0), "SharedCache, {items} items");
            eprintln!(
                "{items} items: {heap} MiB heap holds {} with {} of {} segments free",
                s.capacity, st.segments_free, st.segments_total
            );
        }
    }

    #[test]
    fn pelikan_power_keeps_load_at_most_85_percent() {
        assert_eq!(pelikan_hash_power(10), 7);
        let p = pelikan_hash_power(1_000_000);
        assert!((1u64 << p) as f64 * 0.85 >= 1_000_000.0);
        assert!((1u64 << (p - 1)) as f64 * 0.85 < 1_000_000.0);
    }
}
