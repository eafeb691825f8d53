//! Single flight for the async loaders: the in-flight map, and waiting on a load without
//! parking a thread.
//!
//! # Design
//! As the threads' loader (`shared::loader`), the first caller to miss on a key becomes its
//! *loader*: it registers a flight in an in-flight map (64 mutex-guarded shards, each a short
//! list of the loads in progress, found by the cache's address and the key) and awaits its own
//! future with no cache lock held. Other callers that miss on the key find the flight and await
//! its [`Event`]: their task is suspended, its thread free to run others; a hit never touches the
//! map. The flight ends in one of three ways:
//!
//! - the loader's future yields a value: it is stored (flags 0, the given TTL) and every waiter
//!   gets a copy, stored or not (too large for a segment, no memory);
//! - the loader's future fails: every waiter gets the same error, behind an `Arc`, and nothing is
//!   stored (a waiter whose error type differs looks the key up again and may load it itself);
//! - the loader's future is dropped (its task cancelled) or panics, or the loader withdraws (the
//!   typed cache could not encode the value): the waiters look the key up again, and the first
//!   to miss becomes the next loader, running its own future.
//!
//! A waiter that is dropped leaves nothing behind: its listener unregisters itself. The flights
//! of these loaders and of the threads' blocking loaders are apart: a blocking and an async
//! caller may both load one key at once. A loader whose future awaits its own key waits for
//! itself for ever: keep loaders acyclic, as with any lock per key.

use std::any::Any;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use event_listener::Event;

use crate::error::Error;
use crate::fork::Origin;
use crate::hash::hash;
use crate::item::OwnedItem;

/// Shards of the in-flight map.
const FLIGHT_SHARDS: usize = 64;

/// A cache (by address) and a key. The address is unique while the cache is borrowed, which a
/// flight's loader does for as long as the flight is registered.
type FlightKey = (usize, Vec<u8>);

/// One shard of the in-flight map: the loads in progress whose keys hash to it, few at a time.
type FlightShard = Mutex<Vec<(FlightKey, Arc<Flight>)>>;

static FLIGHTS: LazyLock<Box<[FlightShard]>> =
    LazyLock::new(|| (0..FLIGHT_SHARDS).map(|_| Mutex::new(Vec::new())).collect());

/// Loads that ended with a value, per shard of the in-flight map: a caller that becomes the
/// loader looks the key up again only if a load of its shard delivered since its first lookup
/// missed (a second lookup would count a second miss in the stats).
static DELIVERED: [AtomicU64; FLIGHT_SHARDS] = [const { AtomicU64::new(0) }; FLIGHT_SHARDS];

fn flight_shard(key: &[u8]) -> usize {
    (hash(key) as usize) % FLIGHT_SHARDS
}

/// Locks, ignoring poison: every critical section here leaves its data consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a flight ended.
#[derive(Clone)]
enum Outcome {
    /// The loaded item.
    Value(OwnedItem),
    /// The loader's error: an `Arc<E>` of the loader's error type.
    Failed(Arc<dyn Any + Send + Sync>),
    /// No value and no error to share: the waiters look again.
    Vacated,
}

/// One load in progress.
struct Flight {
    /// The process that registered it: a `fork()` child ignores its parent's flights.
    origin: Origin,
    /// `None` while loading.
    outcome: Mutex<Option<Outcome>>,
    /// Notified, all listeners at once, when `outcome` is set.
    done: Event,
}

impl Flight {
    fn outcome(&self) -> Option<Outcome> {
        lock(&self.outcome).clone()
    }

    /// Waits for the outcome without blocking the thread.
    async fn wait(&self) -> Outcome {
        loop {
            if let Some(o) = self.outcome() {
                return o;
            }
            // Listening before the second look: an outcome set in between notifies this listener.
            let listener = self.done.listen();
            if let Some(o) = self.outcome() {
                return o;
            }
            listener.await;
        }
    }
}

/// Held by the loading caller: ends the flight when dropped, as vacated unless `end` ran first,
/// so that a loader whose future is dropped or panics hands the key on.
struct Leader {
    ended: bool,
    shard: usize,
    flight: Arc<Flight>,
}

impl Leader {
    fn end(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        if matches!(outcome, Outcome::Value(_)) {
            // Before the flight leaves the map: a caller that then finds no flight sees the new
            // count (the map's mutex orders the two).
            DELIVERED[self.shard].fetch_add(1, Ordering::Release);
        }
        let mut map = lock(&FLIGHTS[self.shard]);
        if let Some(i) = map.iter().position(|(_, f)| Arc::ptr_eq(f, &self.flight)) {
            map.swap_remove(i);
        }
        drop(map);
        *lock(&self.flight.outcome) = Some(outcome);
        self.flight.done.notify(usize::MAX);
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.end(Outcome::Vacated);
    }
}

/// What a caller that missed finds in the in-flight map.
enum Joined {
    /// No load in progress: this caller loads.
    Leader(Leader),
    /// Another caller loads: await it.
    Waiter(Arc<Flight>),
}

fn join(cache: usize, key: &[u8], shard: usize) -> Joined {
    let mut map = lock(&FLIGHTS[shard]);
    if let Some((_, f)) = map.iter().find(|((c, k), f)| *c == cache && k.as_slice() == key && !f.origin.forked()) {
        return Joined::Waiter(Arc::clone(f));
    }
    let flight = Arc::new(Flight { origin: Origin::here(), outcome: Mutex::new(None), done: Event::new() });
    map.push(((cache, key.to_vec()), Arc::clone(&flight)));
    Joined::Leader(Leader { ended: false, shard, flight })
}

/// What a loader's future yields.
pub(crate) enum Loaded<E, W> {
    /// The value to store and hand to every waiter.
    Value(Vec<u8>),
    /// The loader's error, handed to every waiter.
    Failed(E),
    /// Neither: the waiters look again, and the caller gets `W`. Only the typed cache withdraws.
    #[cfg_attr(not(feature = "serde"), allow(dead_code))]
    Withdrawn(W),
}

/// Why an async single-flight load returned no item.
pub(crate) enum Failure<E, W> {
    /// The cache refused the call.
    Cache(Error),
    /// The loader failed: this caller's, or the one this caller waited for.
    Loader(Arc<E>),
    /// This caller's loader withdrew.
    Withdrawn(W),
}

/// Single flight for `key` of the cache at address `cache`: the item `lookup` finds, or the one
/// `load` (awaited by one caller at a time, with no cache lock held) yields and `store` stores;
/// the other callers that miss meanwhile await its outcome (see the module docs).
pub(crate) async fn single_flight<E, W>(
    cache: usize,
    key: &[u8],
    lookup: impl Fn() -> Option<OwnedItem>,
    load: impl Future<Output = Loaded<E, W>>,
    store: impl FnOnce(Vec<u8>) -> OwnedItem,
) -> Result<OwnedItem, Failure<E, W>>
where
    E: Send + Sync + 'static,
{
    let shard = flight_shard(key);
    let mut delivered = DELIVERED[shard].load(Ordering::Acquire);
    if let Some(item) = lookup() {
        return Ok(item);
    }
    // Awaited at most once: the caller that becomes the loader returns when it is done.
    let mut load = std::pin::pin!(load);
    loop {
        match join(cache, key, shard) {
            Joined::Leader(mut leader) => {
                // A load that ended between the miss above and `join` stored the value.
                if DELIVERED[shard].load(Ordering::Acquire) != delivered {
                    if let Some(item) = lookup() {
                        leader.end(Outcome::Value(item.clone()));
                        return Ok(item);
                    }
                }
                // `leader` is dropped, vacating the flight, if this future is dropped here or the
                // loader panics.
                return match load.as_mut().await {
                    Loaded::Value(value) => {
                        let item = store(value);
                        leader.end(Outcome::Value(item.clone()));
                        Ok(item)
                    }
                    Loaded::Failed(e) => {
                        let e = Arc::new(e);
                        leader.end(Outcome::Failed(Arc::clone(&e) as Arc<dyn Any + Send + Sync>));
                        Err(Failure::Loader(e))
                    }
                    Loaded::Withdrawn(w) => Err(Failure::Withdrawn(w)),
                };
            }
            Joined::Waiter(flight) => {
                match flight.wait().await {
                    Outcome::Value(item) => return Ok(item),
                    Outcome::Failed(e) => {
                        if let Ok(e) = e.downcast::<E>() {
                            return Err(Failure::Loader(e));
                        }
                    }
                    Outcome::Vacated => {}
                }
                // No value for this caller: look again, then load or await the next loader.
                delivered = DELIVERED[shard].load(Ordering::Acquire);
                if let Some(item) = lookup() {
                    return Ok(item);
                }
            }
        }
    }
}
