//! Get or load for the single owner: the item under a key, or the value a loader makes, stored.
//! With `&mut self` no other caller can miss meanwhile, so there is no flight to share (see
//! `shared::loader` for the thread-safe handle's).

use std::convert::Infallible;
use std::time::Duration;

use crate::engine::write::StoreOptions;
use crate::engine::write::{check_key, Mode};
use crate::engine::Segcache;
use crate::error::cache_error;
use crate::error::{Error, LoadError};
use crate::item::OwnedItem;

impl Segcache {
    /// The single-owner form of
    /// [`SharedCache::get_or_insert_with`](crate::SharedCache::get_or_insert_with): the item
    /// under `key`, or the value `loader` makes, stored with flags 0 and `ttl` (returned with CAS
    /// value 0 if the cache cannot keep it). With `&mut self` no other caller can miss meanwhile, so there is nothing
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

    /// The single-owner form of
    /// [`SharedCache::try_get_or_insert_with`](crate::SharedCache::try_get_or_insert_with): a
    /// failing loader's error comes back as [`LoadError::Loader`] and nothing is stored.
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
        Ok(OwnedItem::loaded(value, ttl, stored))
    }
}
