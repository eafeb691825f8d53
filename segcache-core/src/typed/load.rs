//! The typed cache's single-flight loaders: blocking, and with the `async` feature, async.

use std::convert::Infallible;
use std::time::Duration;

use crate::error::LoadError;
use crate::typed::cache::TypedCache;
use crate::typed::codec::{Codec, CodecError};
use crate::typed::error::TypedError;

/// What the byte loader under a typed one fails with.
enum Failed<E> {
    Loader(E),
    /// The loaded value could not be encoded.
    Codec(CodecError),
}

impl<K, V, C> TypedCache<K, V, C>
where
    K: PartialEq,
    C: Codec<K> + Codec<V>,
{
    /// The value under `key`; on a miss, the one `loader` makes, stored for `ttl` (zero: never
    /// expires). Single flight, as [`SharedCache::get_or_insert_with`](crate::SharedCache::get_or_insert_with):
    /// of the threads that miss on one key at once, one runs its loader and the others get its
    /// value. The caller that loaded gets its value back as made; the others decode it. The key
    /// is checked as a store checks it ([`TypedError::KeyNotCanonical`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<u32, String> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// let v = cache.get_or_insert_with(&1, Duration::ZERO, || "computed".to_string())?;
    /// assert_eq!(v, "computed");
    /// let again = cache.get_or_insert_with(&1, Duration::ZERO, || unreachable!())?;
    /// assert_eq!(again, "computed");
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn get_or_insert_with(&self, key: &K, ttl: Duration, loader: impl FnOnce() -> V) -> Result<V, TypedError> {
        self.try_get_or_insert_with(key, ttl, || Ok::<V, Infallible>(loader()))
    }

    /// [`get_or_insert_with`](TypedCache::get_or_insert_with) with a loader that may fail: as
    /// [`SharedCache::try_get_or_insert_with`](crate::SharedCache::try_get_or_insert_with), its
    /// error ([`TypedError::Loader`]) goes to its own caller only, nothing is stored, and the
    /// threads waiting on it try again.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache, TypedError};
    /// let cache: TypedCache<u32, String> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// let r = cache.try_get_or_insert_with(&1, Duration::ZERO, || Err("backend down"));
    /// assert!(matches!(r, Err(TypedError::Loader("backend down"))));
    /// assert_eq!(cache.get(&1)?, None);
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn try_get_or_insert_with<E>(
        &self,
        key: &K,
        ttl: Duration,
        loader: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, TypedError<E>> {
        let mut made = None;
        let load = || {
            let value = loader().map_err(Failed::Loader)?;
            let bytes = self.encode_value(&value).map_err(Failed::Codec)?;
            made = Some(value);
            Ok(bytes)
        };
        let item = self
            .with_stored_key(key, |k| self.cache().try_get_or_insert_with(k, ttl, load))
            .map_err(TypedError::widen)?
            .map_err(|e| match e {
                LoadError::Cache(e) => TypedError::Cache(e),
                LoadError::Loader(Failed::Loader(e)) => TypedError::Loader(e),
                LoadError::Loader(Failed::Codec(e)) => TypedError::Codec(e),
            })?;
        match made {
            Some(value) => Ok(value),
            None => Ok(self.decode_value(&item.value)?),
        }
    }
}

#[cfg(feature = "async")]
mod future {
    use std::future::Future;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::future::{Failure, Loaded};
    use crate::typed::cache::TypedCache;
    use crate::typed::codec::Codec;
    use crate::typed::error::TypedError;

    impl<K, V, C> TypedCache<K, V, C>
    where
        K: PartialEq,
        C: Codec<K> + Codec<V>,
    {
        /// The value under `key`; on a miss, the one `init` yields, stored for `ttl`. Single
        /// flight across tasks, on any executor, as
        /// [`SharedCache::get_or_insert_with_async`](crate::SharedCache::get_or_insert_with_async):
        /// one caller awaits its `init`, the others await its value without blocking their
        /// threads, and a loading caller that is dropped hands the key to the next. A value that
        /// cannot be encoded fails its own caller ([`TypedError::Codec`]); the waiters then try
        /// again. Needs the `serde` and `async` features.
        ///
        /// ```
        /// use std::time::Duration;
        /// use segcache_core::{SharedCache, TypedCache};
        /// let cache: TypedCache<u32, String> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
        /// let v = futures::executor::block_on(cache.get_or_insert_with_async(&1, Duration::ZERO, async {
        ///     "fetched".to_string()
        /// }))?;
        /// assert_eq!(v, "fetched");
        /// assert_eq!(cache.get(&1)?.as_deref(), Some("fetched"));
        /// # Ok::<(), segcache_core::TypedError>(())
        /// ```
        pub async fn get_or_insert_with_async(
            &self,
            key: &K,
            ttl: Duration,
            init: impl Future<Output = V>,
        ) -> Result<V, TypedError> {
            match self
                .try_get_or_insert_with_async(key, ttl, async { Ok::<_, std::convert::Infallible>(init.await) })
                .await
            {
                Ok(v) => Ok(v),
                Err(TypedError::Cache(e)) => Err(TypedError::Cache(e)),
                Err(TypedError::Codec(e)) => Err(TypedError::Codec(e)),
                Err(TypedError::KeyNotCanonical) => Err(TypedError::KeyNotCanonical),
                Err(TypedError::Loader(never)) => match *never {},
            }
        }

        /// [`get_or_insert_with_async`](TypedCache::get_or_insert_with_async) with a loader that
        /// may fail: its error reaches the loading caller and every caller waiting on it, as
        /// [`TypedError::Loader`] with an `Arc` of it; nothing is stored. Needs the `serde` and
        /// `async` features.
        ///
        /// ```
        /// use std::time::Duration;
        /// use segcache_core::{SharedCache, TypedCache, TypedError};
        /// let cache: TypedCache<u32, String> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
        /// let r = futures::executor::block_on(cache.try_get_or_insert_with_async(&1, Duration::ZERO, async {
        ///     Err::<String, _>("backend down")
        /// }));
        /// assert!(matches!(r, Err(TypedError::Loader(e)) if *e == "backend down"));
        /// # Ok::<(), segcache_core::TypedError>(())
        /// ```
        pub async fn try_get_or_insert_with_async<E>(
            &self,
            key: &K,
            ttl: Duration,
            init: impl Future<Output = Result<V, E>>,
        ) -> Result<V, TypedError<Arc<E>>>
        where
            E: Send + Sync + 'static,
        {
            // Checked as a store checks it, and owned: the encoding lives across the awaits.
            let key_bytes = self.with_stored_key(key, <[u8]>::to_vec).map_err(TypedError::widen)?;
            let mut made = None;
            let init = async {
                match init.await {
                    Ok(value) => match self.encode_value(&value) {
                        Ok(bytes) => {
                            made = Some(value);
                            Loaded::Value(bytes)
                        }
                        Err(e) => Loaded::Withdrawn(e),
                    },
                    Err(e) => Loaded::Failed(e),
                }
            };
            let item = self.cache().load_async(&key_bytes, ttl, init).await.map_err(|e| match e {
                Failure::Cache(e) => TypedError::Cache(e),
                Failure::Loader(e) => TypedError::Loader(e),
                Failure::Withdrawn(e) => TypedError::Codec(e),
            })?;
            match made {
                Some(value) => Ok(value),
                None => Ok(self.decode_value(&item.value)?),
            }
        }
    }
}
