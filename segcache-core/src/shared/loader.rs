//! Single-flight loaders: [`SharedCache::get_or_insert_with`] and
//! [`SharedCache::try_get_or_insert_with`] (and the single-owner [`Segcache`] versions).
//!
//! # Design
//! On a miss, the first caller for a key becomes its *loader*: it registers a flight in a
//! process-wide in-flight map (64 mutex-guarded shards, each a short list of the loads in
//! progress, found by the cache's address and the key)
//! and runs its closure with no cache lock held. Other callers for the same key on the same cache
//! find the flight and wait on its condition variable; a hit never touches the map. When the
//! loader's closure returns a value, the value is stored (flags 0, the given TTL) and handed to
//! every waiter, stored or not (too large for a segment, no memory). When the closure fails or
//! panics, the flight ends without a value: the failing caller gets its error (or its panic),
//! and the waiters look the key up again, one of them becoming the next loader with its own
//! closure. So no waiter is left stuck, and an error is never cached.
//!
//! - Re-entrancy: a loader that asks for its *own* key again on the same thread (directly or
//!   through other calls) does not wait for itself: that inner call runs its closure at once,
//!   without single flight, and stores the result. Loaders for *other* keys nest freely.
//! - Two threads whose loaders wait for each other's keys (A loads `x` and asks for `y` while B
//!   loads `y` and asks for `x`) deadlock, as with any lock-per-key scheme (moka's `get_with`
//!   documents the same): keep loaders acyclic.
//! - Single flight is per process: two processes sharing a cache file may both load a key.

use std::convert::Infallible;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};
use std::time::Duration;

use crate::engine::write::{check_key, Mode};
use crate::fork::Origin;
use crate::hash::hash;
use crate::{Error, OwnedItem, Segcache, SharedCache, StoreOptions};

/// What [`SharedCache::try_get_or_insert_with`] returns on failure: the cache refused the call,
/// or this caller's loader failed.
///
/// # Examples
/// ```
/// use segcache_core::{Error, LoadError};
/// let e: LoadError<std::io::Error> = LoadError::Cache(Error::EmptyKey);
/// assert_eq!(e.to_string(), "empty key");
/// ```
#[derive(Debug)]
pub enum LoadError<E> {
    /// The cache refused the call (an empty or too long key, a handle used after `fork()`).
    Cache(Error),
    /// The loader returned this error. Nothing was stored.
    Loader(E),
}

impl<E: fmt::Display> fmt::Display for LoadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Cache(e) => e.fmt(f),
            LoadError::Loader(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for LoadError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Cache(e) => Some(e),
            LoadError::Loader(e) => Some(e),
        }
    }
}

impl<E> From<Error> for LoadError<E> {
    fn from(e: Error) -> Self {
        LoadError::Cache(e)
    }
}

/// The error of a load whose loader cannot fail.
fn cache_error(e: LoadError<Infallible>) -> Error {
    match e {
        LoadError::Cache(e) => e,
        LoadError::Loader(never) => match never {},
    }
}

/// Shards of the in-flight map.
const FLIGHT_SHARDS: usize = 64;

/// A cache (by address) and a key. The address is unique while the cache is borrowed, which a
/// flight's loader does for as long as the flight is registered.
type FlightKey = (usize, Vec<u8>);

/// One shard of the in-flight map: the loads in progress whose keys hash to it, few at a time
/// (searched in turn; no hashing, and an idle shard keeps only its list's spare capacity).
type FlightShard = Mutex<Vec<(FlightKey, Arc<Flight>)>>;

static FLIGHTS: LazyLock<Box<[FlightShard]>> =
    LazyLock::new(|| (0..FLIGHT_SHARDS).map(|_| Mutex::new(Vec::new())).collect());

/// Loads that ended with a value, per shard of the in-flight map. A caller reads its shard's count
/// before its first lookup; if it becomes the loader and the count has not moved, no load of this
/// shard delivered a value since that lookup missed, so the key is still absent and the caller
/// need not look again (a second lookup would count a second miss in the stats).
static DELIVERED: [AtomicU64; FLIGHT_SHARDS] = [const { AtomicU64::new(0) }; FLIGHT_SHARDS];

fn flight_shard(key: &[u8]) -> usize {
    (hash(key) as usize) % FLIGHT_SHARDS
}

/// One load in progress.
struct Flight {
    /// The loading thread, to tell a re-entrant call from a waiter.
    owner: ThreadId,
    /// The process that registered it: a `fork()` child's copy of the map may hold its parent's
    /// flights, which no thread of the child will end, and the child ignores them.
    origin: Origin,
    /// `None` while loading; then `Some(Some(item))` with the value, `Some(None)` on failure.
    outcome: Mutex<Option<Option<OwnedItem>>>,
    done: Condvar,
}

/// Locks, ignoring poison: every critical section here leaves its data consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Flight {
    /// Waits for the outcome: the item, or `None` when the loader failed.
    fn wait(&self) -> Option<OwnedItem> {
        let mut outcome = lock(&self.outcome);
        loop {
            if let Some(o) = outcome.as_ref() {
                return o.clone();
            }
            outcome = self.done.wait(outcome).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Held by the loading caller: ends the flight when dropped, as failed unless `finish` ran first
/// (so a panicking loader wakes its waiters too).
struct Leader {
    ended: bool,
    shard: usize,
    flight: Arc<Flight>,
}

impl Leader {
    /// Ends the flight with `item`, which each waiter gets a copy of.
    fn finish(mut self, item: &OwnedItem) {
        self.end(Some(item));
    }

    fn end(&mut self, item: Option<&OwnedItem>) {
        if !std::mem::replace(&mut self.ended, true) {
            if item.is_some() {
                // Before the flight leaves the map: a caller that then finds no flight sees the
                // new count (the map's mutex orders the two).
                DELIVERED[self.shard].fetch_add(1, Ordering::Release);
            }
            let mut map = lock(&FLIGHTS[self.shard]);
            if let Some(i) = map.iter().position(|(_, f)| Arc::ptr_eq(f, &self.flight)) {
                map.swap_remove(i);
            }
            drop(map);
            // Out of the map, the flight gains no waiter: with none, nobody needs the outcome.
            if Arc::strong_count(&self.flight) > 1 {
                *lock(&self.flight.outcome) = Some(item.cloned());
                self.flight.done.notify_all();
            }
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.end(None);
    }
}

/// What a caller that missed finds in the in-flight map.
enum Joined {
    /// No load in progress: this caller loads.
    Leader(Leader),
    /// Another thread loads: wait for it.
    Waiter(Arc<Flight>),
    /// This thread is already loading the key (a re-entrant call).
    Reentrant,
}

fn join(cache: usize, key: &[u8], shard: usize) -> Joined {
    let me = thread::current().id();
    let mut map = lock(&FLIGHTS[shard]);
    if let Some((_, f)) = map.iter().find(|((c, k), f)| *c == cache && k.as_slice() == key && !f.origin.forked()) {
        return if f.owner == me { Joined::Reentrant } else { Joined::Waiter(Arc::clone(f)) };
    }
    let flight =
        Arc::new(Flight { owner: me, origin: Origin::here(), outcome: Mutex::new(None), done: Condvar::new() });
    map.push(((cache, key.to_vec()), Arc::clone(&flight)));
    Joined::Leader(Leader { ended: false, shard, flight })
}

/// The item a loaded value becomes: stored when the cache takes it (its CAS value then), or
/// handed back unstored (CAS value 0).
fn loaded(value: Vec<u8>, ttl: Duration, stored: Option<u64>) -> OwnedItem {
    OwnedItem { value, flags: 0, cas: stored.unwrap_or(0), ttl: (!ttl.is_zero()).then_some(ttl) }
}

impl SharedCache {
    /// The item under `key`; on a miss, the value `loader` makes, stored with flags 0 and `ttl`
    /// (zero: never expires). Single flight: of the threads that miss on one key at once, one
    /// runs its loader and the others wait for its value (see [`try_get_or_insert_with`]
    /// for errors, panics and re-entrancy).
    ///
    /// A value the cache cannot keep (too large for a segment, no memory with eviction off) is
    /// still returned, with a CAS value of 0. Errors: only the cache's own ([`Error::EmptyKey`],
    /// [`Error::KeyTooLong`], [`Error::Forked`]).
    ///
    /// [`try_get_or_insert_with`]: SharedCache::try_get_or_insert_with
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let cache = segcache_core::Builder::new().heap_size(8 << 20).build_shared()?;
    /// let item = cache.get_or_insert_with(b"k", Duration::from_secs(60), || b"computed".to_vec())?;
    /// assert_eq!(item.value, b"computed");
    /// // A hit: the loader does not run.
    /// let again = cache.get_or_insert_with(b"k", Duration::from_secs(60), || unreachable!())?;
    /// assert_eq!(again.value, b"computed");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_or_insert_with(
        &self,
        key: &[u8],
        ttl: Duration,
        loader: impl FnOnce() -> Vec<u8>,
    ) -> Result<OwnedItem, Error> {
        self.try_get_or_insert_with(key, ttl, || Ok::<_, Infallible>(loader())).map_err(cache_error)
    }

    /// [`get_or_insert_with`](SharedCache::get_or_insert_with) with a loader that may fail.
    ///
    /// - Single flight: while one thread runs its loader for `key`, other threads that miss on
    ///   `key` wait (blocking, with no cache lock held) and get its value.
    /// - A loader that returns `Err(e)` stores nothing; its caller gets [`LoadError::Loader`]`(e)`,
    ///   and the threads waiting on it try again: one of them runs its own loader. A loader that
    ///   panics does the same, its panic going on up its own caller's stack.
    /// - Re-entrancy: a loader that asks for its own key on its own thread does not wait for
    ///   itself; the inner call runs its loader directly (no single flight) and stores the
    ///   result. Loaders on two threads that each wait for the other's key deadlock: keep
    ///   loaders acyclic.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::LoadError;
    /// let cache = segcache_core::Builder::new().heap_size(8 << 20).build_shared()?;
    /// let r = cache.try_get_or_insert_with(b"k", Duration::ZERO, || Err::<Vec<u8>, _>("backend down"));
    /// assert!(matches!(r, Err(LoadError::Loader("backend down"))));
    /// assert!(cache.get(b"k").is_none()); // errors are not cached
    /// let item = cache.try_get_or_insert_with(b"k", Duration::ZERO, || Ok::<_, &str>(b"v".to_vec()));
    /// assert_eq!(item.unwrap().value, b"v");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn try_get_or_insert_with<E>(
        &self,
        key: &[u8],
        ttl: Duration,
        loader: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<OwnedItem, LoadError<E>> {
        check_key(key)?;
        self.check_fork()?;
        let shard = flight_shard(key);
        let mut delivered = DELIVERED[shard].load(Ordering::Acquire);
        if let Some(item) = self.get(key) {
            return Ok(item);
        }
        let id = self as *const SharedCache as usize;
        loop {
            match join(id, key, shard) {
                Joined::Leader(leader) => {
                    // A load that ended between the miss above and `join` stored the value.
                    if DELIVERED[shard].load(Ordering::Acquire) != delivered {
                        if let Some(item) = self.get(key) {
                            leader.finish(&item);
                            return Ok(item);
                        }
                    }
                    // `leader` is dropped (failing the flight) if the loader panics.
                    let value = loader().map_err(LoadError::Loader)?;
                    let item = self.store_loaded(key, value, ttl);
                    leader.finish(&item);
                    return Ok(item);
                }
                Joined::Reentrant => {
                    let value = loader().map_err(LoadError::Loader)?;
                    return Ok(self.store_loaded(key, value, ttl));
                }
                Joined::Waiter(flight) => {
                    if let Some(item) = flight.wait() {
                        return Ok(item);
                    }
                    // The loader failed: look again, then load or wait for the next loader.
                    delivered = DELIVERED[shard].load(Ordering::Acquire);
                    if let Some(item) = self.get(key) {
                        return Ok(item);
                    }
                }
            }
        }
    }

    fn store_loaded(&self, key: &[u8], value: Vec<u8>, ttl: Duration) -> OwnedItem {
        // A store that panics (it should not) must not lose the value the waiters wait for.
        let stored = panic::catch_unwind(AssertUnwindSafe(|| {
            self.store_with(key, &value, 0, ttl, Mode::Set, StoreOptions::default()).ok()
        }))
        .ok()
        .flatten();
        loaded(value, ttl, stored)
    }
}

impl Segcache {
    /// The single-owner form of [`SharedCache::get_or_insert_with`]: the item under `key`, or the
    /// value `loader` makes, stored with flags 0 and `ttl` (returned with CAS value 0 if the cache
    /// cannot keep it). With `&mut self` no other caller can miss meanwhile, so there is nothing
    /// to wait for; a loader cannot reach this cache.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let mut cache = segcache_core::Builder::new().heap_size(8 << 20).build()?;
    /// let item = cache.get_or_insert_with(b"k", Duration::ZERO, || b"v".to_vec())?;
    /// assert_eq!((item.value.as_slice(), item.ttl), (&b"v"[..], None));
    /// assert_eq!(cache.get(b"k").unwrap().value(), b"v");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_or_insert_with(
        &mut self,
        key: &[u8],
        ttl: Duration,
        loader: impl FnOnce() -> Vec<u8>,
    ) -> Result<OwnedItem, Error> {
        self.try_get_or_insert_with(key, ttl, || Ok::<_, Infallible>(loader())).map_err(cache_error)
    }

    /// The single-owner form of [`SharedCache::try_get_or_insert_with`]: a failing loader's
    /// error comes back as [`LoadError::Loader`] and nothing is stored.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let mut cache = segcache_core::Builder::new().heap_size(8 << 20).build()?;
    /// let r = cache.try_get_or_insert_with(b"k", Duration::ZERO, || Err::<Vec<u8>, _>(42));
    /// assert!(matches!(r, Err(segcache_core::LoadError::Loader(42))));
    /// assert!(cache.get(b"k").is_none());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn try_get_or_insert_with<E>(
        &mut self,
        key: &[u8],
        ttl: Duration,
        loader: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<OwnedItem, LoadError<E>> {
        check_key(key)?;
        self.check_fork()?;
        if let Some(item) = self.get(key) {
            return Ok(item.to_owned());
        }
        let value = loader().map_err(LoadError::Loader)?;
        let stored = self.store_with(key, &value, 0, ttl, Mode::Set, StoreOptions::default()).ok();
        Ok(loaded(value, ttl, stored))
    }
}
