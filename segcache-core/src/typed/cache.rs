//! [`TypedCache`]: a [`SharedCache`] whose keys and values are Rust types, with its reads,
//! stores and whole-cache calls.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use crate::engine::write::Mode as StoreMode;
use crate::engine::write::StoreOptions;
use crate::error::Error;
use crate::shared::handle::SharedCache;
use crate::typed::codec::{Codec, CodecError, Postcard};
use crate::typed::error::TypedError;

/// A typed handle over a [`SharedCache`]: keys of type `K`, values of type `V`, turned into bytes
/// by the codec `C` (by default [`Postcard`], for any serde type). It has the byte handle's
/// operations and semantics, its errors ([`TypedError::Cache`]), and its persistence: over a
/// cache built with [`Builder::path`](crate::Builder::path), the values come back after a
/// restart. Needs the `serde` feature.
///
/// # Keys are their encoding
/// The cache hashes and compares a key's *encoded bytes*, not the key: two keys are the same
/// key when they encode the same. So a store refuses, with [`TypedError::KeyNotCanonical`], a
/// key whose encoding decodes to a key that is not equal to it (a float NaN, or a type whose
/// `PartialEq` ignores what it encodes) or that encodes differently. The last catches a
/// `HashMap` or `HashSet`, whose order, so its encoding, changes from one map to the next, only
/// when the decoded copy happens to iterate in another order: nearly always for a dozen
/// entries, half the time for two. Do not put hash maps or sets in keys; use a `BTreeMap`,
/// `BTreeSet` or sorted `Vec`. Floats are compared by their
/// bits: `0.0` and `-0.0` are two keys. An encoded key is 1 to 250 bytes, as a byte key
/// ([`Error::EmptyKey`], [`Error::KeyTooLong`]). Reads make no such check: a key that cannot
/// be stored is simply not found.
///
/// # Values
/// The stored bytes hold no type: reading with another `V` (or codec) than the one written
/// fails with [`TypedError::Codec`] (or, for a type of the same shape, reads that type).
/// Values are stored with client flags 0. The byte handle stays reachable through
/// [`cache`](TypedCache::cache), for what the typed one does not offer (CAS, stats, scans).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{SharedCache, TypedCache};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, PartialEq, Debug)]
/// struct User { id: u64, name: String, score: f32 }
///
/// let cache: TypedCache<u64, User> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
/// cache.set(&7, &User { id: 7, name: "ann".into(), score: 0.5 }, Duration::from_secs(60))?;
/// assert_eq!(cache.get(&7)?.unwrap().name, "ann");
/// assert_eq!(cache.get(&8)?, None);
/// # Ok::<(), segcache_core::TypedError>(())
/// ```
pub struct TypedCache<K, V, C = Postcard> {
    cache: SharedCache,
    codec: C,
    /// The handle holds no `K` or `V`: it is `Send` and `Sync` whatever they are.
    types: PhantomData<fn(&K, &V) -> V>,
}

impl<K, V, C> fmt::Debug for TypedCache<K, V, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedCache").field("cache", &self.cache).finish_non_exhaustive()
    }
}

impl<K, V, C: Default> TypedCache<K, V, C> {
    /// A typed handle over `cache`, with the codec's default.
    ///
    /// ```
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<String, Vec<u32>> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// assert!(cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn new(cache: SharedCache) -> Self {
        TypedCache::with_codec(cache, C::default())
    }
}

impl<K, V, C> TypedCache<K, V, C> {
    /// A typed handle over `cache` with the codec `codec`.
    ///
    /// ```
    /// use segcache_core::{Postcard, SharedCache, TypedCache};
    /// let bytes = SharedCache::builder().heap_size(8 << 20).build_shared()?;
    /// let cache: TypedCache<u32, String> = TypedCache::with_codec(bytes, Postcard);
    /// assert_eq!(cache.len(), 0);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn with_codec(cache: SharedCache, codec: C) -> Self {
        TypedCache { cache, codec, types: PhantomData }
    }

    /// The byte handle underneath: every typed item is there under its encoded key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<u32, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.set(&1, &300, Duration::ZERO)?;
    /// assert_eq!(cache.cache().get(&[1]).unwrap().value, [0xac, 0x02]); // postcard's varints
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn cache(&self) -> &SharedCache {
        &self.cache
    }

    /// The byte handle, the typed one given up.
    ///
    /// ```
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<u32, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// let bytes: SharedCache = cache.into_inner();
    /// assert!(bytes.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn into_inner(self) -> SharedCache {
        self.cache
    }

    /// Live items (see [`SharedCache::len`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<u32, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.set(&1, &10, Duration::ZERO)?;
    /// cache.set(&2, &20, Duration::ZERO)?;
    /// assert_eq!(cache.len(), 2);
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether no item is live.
    ///
    /// ```
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<u32, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// assert!(cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Removes every item (see [`SharedCache::flush`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<u32, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.set(&1, &10, Duration::ZERO)?;
    /// cache.flush();
    /// assert_eq!(cache.get(&1)?, None);
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn flush(&self) {
        self.cache.flush()
    }

    /// Writes the heap to stable storage (see [`SharedCache::sync`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-typed-sync", std::process::id()));
    /// let cache: TypedCache<String, u64> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).path(&path).build_shared()?);
    /// cache.set(&"order:17".to_string(), &1999, Duration::ZERO)?;
    /// cache.sync()?;
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn sync(&self) -> Result<(), Error> {
        self.cache.sync()
    }

    /// Graceful stop (see [`SharedCache::close`]): with a file, the next open finds every item.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-typed-close", std::process::id()));
    /// let open = || SharedCache::builder().heap_size(8 << 20).path(&path).build_shared();
    /// let cache: TypedCache<(u32, String), Vec<f64>> = TypedCache::new(open()?);
    /// cache.set(&(1, "a".into()), &vec![0.5, 1.5], Duration::ZERO)?;
    /// cache.close()?;
    /// let cache: TypedCache<(u32, String), Vec<f64>> = TypedCache::new(open()?);
    /// assert_eq!(cache.get(&(1, "a".into()))?, Some(vec![0.5, 1.5]));
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn close(self) -> Result<(), Error> {
        self.cache.close()
    }
}

impl<K, V, C> TypedCache<K, V, C>
where
    K: PartialEq,
    C: Codec<K> + Codec<V>,
{
    /// Runs `f` on `key`'s encoding, for a read.
    pub(crate) fn with_key<R>(&self, key: &K, f: impl FnOnce(&[u8]) -> R) -> Result<R, CodecError> {
        self.codec.encode_with(key, f)
    }

    /// Runs `f` on `key`'s encoding, for a store: refuses a key the encoding does not identify.
    pub(crate) fn with_stored_key<R>(&self, key: &K, f: impl FnOnce(&[u8]) -> R) -> Result<R, TypedError> {
        self.with_key(key, |bytes| {
            let decoded: K = self.codec.decode(bytes)?;
            if decoded != *key {
                return Err(TypedError::KeyNotCanonical);
            }
            let mut again = Vec::with_capacity(bytes.len());
            self.codec.encode(&decoded, &mut again)?;
            if again != bytes {
                return Err(TypedError::KeyNotCanonical);
            }
            Ok(f(bytes))
        })?
    }

    pub(crate) fn encode_value(&self, value: &V) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::new();
        self.codec.encode(value, &mut out)?;
        Ok(out)
    }

    pub(crate) fn decode_value(&self, bytes: &[u8]) -> Result<V, CodecError> {
        self.codec.decode(bytes)
    }

    /// The value under `key`, or `None` when it is absent or expired. The value is decoded
    /// straight from the read, as [`SharedCache::get_with`] runs its closure: a value of over
    /// 512 bytes is decoded under its shard's read lock, so a `Deserialize` must not write to
    /// the same cache.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<String, String> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.set(&"greeting".into(), &"hello".into(), Duration::ZERO)?;
    /// assert_eq!(cache.get(&"greeting".into())?.as_deref(), Some("hello"));
    /// assert_eq!(cache.get(&"absent".into())?, None);
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn get(&self, key: &K) -> Result<Option<V>, TypedError> {
        let value = self.with_key(key, |k| self.cache.get_with(k, |item| self.decode_value(item.value())))?;
        Ok(value.transpose()?)
    }

    /// Whether `key` is present (and not expired).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<u32, ()> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.set(&1, &(), Duration::ZERO)?;
    /// assert!(cache.contains(&1)? && !cache.contains(&2)?);
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn contains(&self, key: &K) -> Result<bool, TypedError> {
        Ok(self.with_key(key, |k| self.cache.contains(k))?)
    }

    /// The values under `keys`, in their order, `None` for each one absent. The keys are looked
    /// up together as [`SharedCache::get_many_with`] does; a value that does not decode fails the
    /// call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache};
    /// let cache: TypedCache<u32, String> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.set(&1, &"one".to_string(), Duration::ZERO)?;
    /// cache.set(&3, &"three".to_string(), Duration::ZERO)?;
    /// let got = cache.get_many(&[1, 2, 3])?;
    /// assert_eq!(got, [Some("one".to_string()), None, Some("three".to_string())]);
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn get_many<'k>(&self, keys: impl IntoIterator<Item = &'k K>) -> Result<Vec<Option<V>>, TypedError>
    where
        K: 'k,
    {
        // Every key encoded into one buffer, then sliced.
        let mut encoded = Vec::new();
        let mut ends = Vec::new();
        for key in keys {
            self.codec.encode(key, &mut encoded)?;
            ends.push(encoded.len());
        }
        let slices: Vec<&[u8]> =
            ends.iter().scan(0, |start, &end| Some(&encoded[std::mem::replace(start, end)..end])).collect();
        let mut found: Vec<Option<Vec<u8>>> = vec![None; slices.len()];
        self.cache.get_many_with(&slices, |i, item| found[i] = Some(item.value().to_vec()));
        let values = found.into_iter().map(|bytes| bytes.map(|b| self.decode_value(&b)).transpose());
        Ok(values.collect::<Result<_, _>>()?)
    }

    fn store(&self, key: &K, value: &V, ttl: Duration, mode: StoreMode) -> Result<(), TypedError> {
        let value = self.encode_value(value)?;
        self.with_stored_key(key, |k| self.cache.store_with(k, &value, 0, ttl, mode, StoreOptions::default()))??;
        Ok(())
    }

    /// Stores `value` under `key` for `ttl` (zero: never expires), replacing what was there.
    ///
    /// ```
    /// use std::collections::HashSet;
    /// use std::time::Duration;
    /// use segcache_core::{SharedCache, TypedCache, TypedError};
    /// let cache: TypedCache<f64, u8> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.set(&0.5, &1, Duration::from_secs(60))?;
    /// assert_eq!(cache.get(&0.5)?, Some(1));
    /// // NaN is not equal to itself: no key could find it again.
    /// assert!(matches!(cache.set(&f64::NAN, &2, Duration::ZERO), Err(TypedError::KeyNotCanonical)));
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn set(&self, key: &K, value: &V, ttl: Duration) -> Result<(), TypedError> {
        self.store(key, value, ttl, StoreMode::Set)
    }

    /// Stores the value only if `key` is absent (else [`Error::NotStored`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Error, SharedCache, TypedCache, TypedError};
    /// let cache: TypedCache<u32, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.add(&1, &10, Duration::ZERO)?;
    /// assert!(matches!(cache.add(&1, &11, Duration::ZERO), Err(TypedError::Cache(Error::NotStored))));
    /// assert_eq!(cache.get(&1)?, Some(10));
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn add(&self, key: &K, value: &V, ttl: Duration) -> Result<(), TypedError> {
        self.store(key, value, ttl, StoreMode::Add)
    }

    /// Stores the value only if `key` is present (else [`Error::NotStored`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Error, SharedCache, TypedCache, TypedError};
    /// let cache: TypedCache<u32, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// assert!(matches!(cache.replace(&1, &10, Duration::ZERO), Err(TypedError::Cache(Error::NotStored))));
    /// cache.set(&1, &10, Duration::ZERO)?;
    /// cache.replace(&1, &11, Duration::ZERO)?;
    /// assert_eq!(cache.get(&1)?, Some(11));
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn replace(&self, key: &K, value: &V, ttl: Duration) -> Result<(), TypedError> {
        self.store(key, value, ttl, StoreMode::Replace)
    }

    /// Removes `key` ([`Error::NotFound`] if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Error, SharedCache, TypedCache, TypedError};
    /// let cache: TypedCache<u32, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
    /// cache.set(&1, &10, Duration::ZERO)?;
    /// cache.delete(&1)?;
    /// assert!(matches!(cache.delete(&1), Err(TypedError::Cache(Error::NotFound))));
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn delete(&self, key: &K) -> Result<(), TypedError> {
        Ok(self.with_key(key, |k| self.cache.delete(k))??)
    }

    /// Sets a new TTL ([`Error::NotFound`] if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock, TypedCache};
    /// let clock = ManualClock::new(1_000);
    /// let cache: TypedCache<u32, u32> = TypedCache::new(Builder::new().heap_size(8 << 20).clock(clock.clone()).build_shared()?);
    /// cache.set(&1, &10, Duration::from_secs(10))?;
    /// cache.touch(&1, Duration::from_secs(100))?;
    /// clock.advance(50);
    /// assert_eq!(cache.get(&1)?, Some(10));
    /// # Ok::<(), segcache_core::TypedError>(())
    /// ```
    pub fn touch(&self, key: &K, ttl: Duration) -> Result<(), TypedError> {
        Ok(self.with_key(key, |k| self.cache.touch(k, ttl))??)
    }
}
