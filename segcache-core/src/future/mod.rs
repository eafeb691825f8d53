//! Async single-flight loaders on [`SharedCache`] (the `async` feature): the counterparts of
//! [`SharedCache::get_or_insert_with`] and [`SharedCache::try_get_or_insert_with`] for code that
//! runs on an executor, any executor: they depend on no runtime, and a caller that waits for
//! another's load is a suspended task, not a parked thread.

mod flight;

use std::convert::Infallible;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

pub(crate) use flight::{single_flight, Failure, Loaded};

use crate::engine::write::StoreOptions;
use crate::engine::write::{check_key, Mode};
use crate::error::{Error, LoadError};
use crate::item::OwnedItem;
use crate::shared::handle::SharedCache;

impl SharedCache {
    /// The item under `key`; on a miss, the value `init` yields, stored with flags 0 and `ttl`
    /// (zero: never expires). Single flight across tasks: of the callers that miss on one key
    /// at once, one awaits its `init` and the others await its value without blocking their
    /// threads; their own `init` futures are dropped unpolled. If the loading caller is dropped
    /// (its task cancelled) before its `init` completes, or `init` panics, the next waiter runs
    /// its own `init`. See [`try_get_or_insert_with_async`](SharedCache::try_get_or_insert_with_async)
    /// for errors.
    ///
    /// Runs on any executor: the library depends on no runtime. A value the cache cannot keep
    /// (too large for a segment, no memory with eviction off) is still returned, with a CAS value
    /// of 0. Errors: only the cache's own ([`Error::EmptyKey`], [`Error::KeyTooLong`],
    /// [`Error::Forked`]). Async and blocking ([`get_or_insert_with`](SharedCache::get_or_insert_with))
    /// callers do not wait for each other: each kind has its own single flight. An `init` that
    /// awaits its own key waits for itself for ever: keep loaders acyclic.
    ///
    /// Needs the `async` feature.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let cache = segcache_core::Builder::new().heap_size(8 << 20).build_shared()?;
    /// let item = futures::executor::block_on(cache.get_or_insert_with_async(b"k", Duration::ZERO, async {
    ///     b"fetched".to_vec()
    /// }))?;
    /// assert_eq!(item.value, b"fetched");
    /// // A hit: the future is dropped unpolled.
    /// let again = futures::executor::block_on(cache.get_or_insert_with_async(b"k", Duration::ZERO, async {
    ///     unreachable!()
    /// }))?;
    /// assert_eq!(again.value, b"fetched");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub async fn get_or_insert_with_async(
        &self,
        key: &[u8],
        ttl: Duration,
        init: impl Future<Output = Vec<u8>>,
    ) -> Result<OwnedItem, Error> {
        let init = async { Loaded::<Infallible, Infallible>::Value(init.await) };
        match self.load_async(key, ttl, init).await {
            Ok(item) => Ok(item),
            Err(Failure::Cache(e)) => Err(e),
            Err(Failure::Loader(never)) => match *never {},
            Err(Failure::Withdrawn(never)) => match never {},
        }
    }

    /// [`get_or_insert_with_async`](SharedCache::get_or_insert_with_async) with a loader that may
    /// fail. An error is not cached: nothing is stored, and the loading caller and every caller
    /// waiting on it get the same error, [`LoadError::Loader`] with an `Arc` of it (as moka's
    /// `try_get_with` does). A later call loads again.
    ///
    /// A waiter gets the error only if its `E` is the loader's: a waiter that asks with another
    /// error type looks the key up again instead, and may run its own `init`.
    ///
    /// Needs the `async` feature.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::LoadError;
    /// use futures::executor::block_on;
    ///
    /// let cache = segcache_core::Builder::new().heap_size(8 << 20).build_shared()?;
    /// let r = block_on(cache.try_get_or_insert_with_async(b"k", Duration::ZERO, async {
    ///     Err::<Vec<u8>, _>("backend down")
    /// }));
    /// assert!(matches!(r, Err(LoadError::Loader(e)) if *e == "backend down"));
    /// assert!(cache.get(b"k").is_none()); // errors are not cached
    /// let item = block_on(cache.try_get_or_insert_with_async(b"k", Duration::ZERO, async {
    ///     Ok::<_, &str>(b"v".to_vec())
    /// }));
    /// assert_eq!(item.unwrap().value, b"v");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub async fn try_get_or_insert_with_async<E>(
        &self,
        key: &[u8],
        ttl: Duration,
        init: impl Future<Output = Result<Vec<u8>, E>>,
    ) -> Result<OwnedItem, LoadError<Arc<E>>>
    where
        E: Send + Sync + 'static,
    {
        let init = async {
            match init.await {
                Ok(value) => Loaded::<E, Infallible>::Value(value),
                Err(e) => Loaded::Failed(e),
            }
        };
        match self.load_async(key, ttl, init).await {
            Ok(item) => Ok(item),
            Err(Failure::Cache(e)) => Err(LoadError::Cache(e)),
            Err(Failure::Loader(e)) => Err(LoadError::Loader(e)),
            Err(Failure::Withdrawn(never)) => match never {},
        }
    }

    /// The async single flight over this cache, for every async loader (the typed cache's too).
    pub(crate) async fn load_async<E, W>(
        &self,
        key: &[u8],
        ttl: Duration,
        init: impl Future<Output = Loaded<E, W>>,
    ) -> Result<OwnedItem, Failure<E, W>>
    where
        E: Send + Sync + 'static,
    {
        check_key(key).map_err(Failure::Cache)?;
        self.check_fork().map_err(Failure::Cache)?;
        let lookup = || self.get(key);
        let store = |value: Vec<u8>| {
            // A store that panics (it should not) must not lose the value the waiters wait for.
            let stored = panic::catch_unwind(AssertUnwindSafe(|| {
                self.store_with(key, &value, 0, ttl, Mode::Set, StoreOptions::default()).ok()
            }))
            .ok()
            .flatten();
            OwnedItem::loaded(value, ttl, stored)
        };
        single_flight(self as *const SharedCache as usize, key, lookup, init, store).await
    }
}
