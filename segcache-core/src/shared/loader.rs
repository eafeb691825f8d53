//! Single flight for [`SharedCache::get_or_insert_with`](crate::SharedCache::get_or_insert_with)
//! and [`SharedCache::try_get_or_insert_with`](crate::SharedCache::try_get_or_insert_with).
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

use crate::error::LoadError;
use crate::fork::Origin;
use crate::hash::hash;
use crate::item::OwnedItem;

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

/// Single flight for `key` of the cache at address `cache`: the item `lookup` finds, or the one
/// `load` (run by one caller at a time, with no cache lock held) makes and stores; the other
/// callers that miss meanwhile wait for its item (see the module docs).
pub(crate) fn single_flight<E>(
    cache: usize,
    key: &[u8],
    lookup: impl Fn() -> Option<OwnedItem>,
    load: impl FnOnce() -> Result<OwnedItem, E>,
) -> Result<OwnedItem, LoadError<E>> {
    let shard = flight_shard(key);
    let mut delivered = DELIVERED[shard].load(Ordering::Acquire);
    if let Some(item) = lookup() {
        return Ok(item);
    }
    loop {
        match join(cache, key, shard) {
            Joined::Leader(leader) => {
                // A load that ended between the miss above and `join` stored the value.
                if DELIVERED[shard].load(Ordering::Acquire) != delivered {
                    if let Some(item) = lookup() {
                        leader.finish(&item);
                        return Ok(item);
                    }
                }
                // `leader` is dropped (failing the flight) if the loader panics.
                let item = load().map_err(LoadError::Loader)?;
                leader.finish(&item);
                return Ok(item);
            }
            Joined::Reentrant => return load().map_err(LoadError::Loader),
            Joined::Waiter(flight) => {
                if let Some(item) = flight.wait() {
                    return Ok(item);
                }
                // The loader failed: look again, then load or wait for the next loader.
                delivered = DELIVERED[shard].load(Ordering::Acquire);
                if let Some(item) = lookup() {
                    return Ok(item);
                }
            }
        }
    }
}
