//! The eviction listener's types: why an item left, and the function told of it (the engine
//! calls it from `engine::removal`).

use std::sync::Arc;

use crate::item::Item;

/// Why an item left the cache, as far as the engine knows it.
///
/// The engine tells of every item that expires or is evicted, of every item a delete removes,
/// and of every item a store (a set, an append, an increment, a compute) replaces with a new
/// version. It does not tell of items a flush removes, nor of items whose expiry passed but whose
/// segment still holds them (a read misses on those; they are told of when the segment goes).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use segcache_core::{Builder, ManualClock, RemovalCause};
///
/// let clock = ManualClock::new(1_000);
/// let removed = Arc::new(Mutex::new(Vec::new()));
/// let log = Arc::clone(&removed);
/// let mut cache = Builder::new()
///     .heap_size(4 << 20)
///     .clock(clock.clone())
///     .eviction_listener(move |item, cause| {
///         log.lock().unwrap().push((item.key().to_vec(), item.value().to_vec(), cause))
///     })
///     .build()?;
/// cache.set(b"k", b"v", 0, Duration::from_secs(5))?;
/// cache.set(b"gone", b"old", 0, Duration::ZERO)?;
/// cache.set(b"gone", b"new", 0, Duration::ZERO)?; // the old version is replaced
/// cache.delete(b"gone")?; // the owner removed it
/// clock.advance(10);
/// cache.expire();
/// assert_eq!(
///     *removed.lock().unwrap(),
///     [
///         (b"gone".to_vec(), b"old".to_vec(), RemovalCause::Replaced),
///         (b"gone".to_vec(), b"new".to_vec(), RemovalCause::Removed),
///         (b"k".to_vec(), b"v".to_vec(), RemovalCause::Expired),
///     ]
/// );
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovalCause {
    /// Its TTL ran out (its segment expired).
    Expired,
    /// Eviction made room for new items.
    Evicted,
    /// The owner deleted it (`delete`, `delete_cas`, or a compute that chose to remove it).
    Removed,
    /// A store wrote a new version of its key (`set`, `cas`, `append`, `incr`, a compute that
    /// put a value, ...): the listener gets the old version.
    Replaced,
}

impl RemovalCause {
    /// The cause in lower case, as the C and Python faces name it: `"expired"`, `"evicted"`,
    /// `"removed"` or `"replaced"`.
    ///
    /// ```
    /// use segcache_core::RemovalCause;
    /// assert_eq!(RemovalCause::Replaced.name(), "replaced");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            RemovalCause::Expired => "expired",
            RemovalCause::Evicted => "evicted",
            RemovalCause::Removed => "removed",
            RemovalCause::Replaced => "replaced",
        }
    }
}

/// A function told of each item that leaves the cache, with the [`RemovalCause`] (see
/// [`Builder::eviction_listener`](crate::Builder::eviction_listener)). It runs while the item's
/// shard is locked for writing: keep it short, and do not call back into the cache (copy what
/// it needs and act on it after the call that removed the item returns, as the C and Python
/// faces do).
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use segcache_core::{Builder, ManualClock, RemovalListener};
///
/// let clock = ManualClock::new(1_000);
/// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
/// let expired = Arc::new(AtomicUsize::new(0));
/// let count = Arc::clone(&expired);
/// cache.set_eviction_listener(Some(RemovalListener::new(move |_item, _cause| {
///     count.fetch_add(1, Relaxed);
/// })));
/// cache.set(b"k", b"v", 0, Duration::from_secs(5))?;
/// clock.advance(10);
/// cache.expire();
/// assert_eq!(expired.load(Relaxed), 1);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Clone)]
pub struct RemovalListener(pub(crate) Arc<ListenerFn>, pub(crate) Hears);

/// Which removals a [`RemovalListener`] is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hears {
    /// Every cause.
    All,
    /// Only [`RemovalCause::Expired`] and [`RemovalCause::Evicted`].
    EngineOnly,
}

/// What a [`RemovalListener`] calls.
type ListenerFn = dyn Fn(&Item<'_>, RemovalCause) + Send + Sync;

impl RemovalListener {
    /// Wraps `f`.
    ///
    /// ```
    /// use segcache_core::{RemovalCause, RemovalListener};
    /// let listener = RemovalListener::new(|item, cause| {
    ///     if cause == RemovalCause::Evicted {
    ///         eprintln!("evicted {:?}", item.key());
    ///     }
    /// });
    /// assert_eq!(format!("{listener:?}"), "RemovalListener");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn new(f: impl Fn(&Item<'_>, RemovalCause) + Send + Sync + 'static) -> RemovalListener {
        RemovalListener(Arc::new(f), Hears::All)
    }

    /// Wraps `f`, to be told only of items that leave on the engine's own initiative
    /// ([`RemovalCause::Expired`], [`RemovalCause::Evicted`]). Deletes and replacements then cost
    /// what they cost with no listener set (a listener told of replacements takes every set of an
    /// existing key through the shard's exclusive lock, to see the old version).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock, RemovalCause, RemovalListener};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let cache = Builder::new().heap_size(8 << 20).clock(clock.clone()).build_shared()?;
    /// let heard = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&heard);
    /// cache.set_eviction_listener(Some(RemovalListener::expired_or_evicted(move |item, cause| {
    ///     log.lock().unwrap().push((item.key().to_vec(), cause));
    /// })));
    /// cache.set(b"k", b"1", 0, Duration::from_secs(5))?;
    /// cache.set(b"k", b"2", 0, Duration::from_secs(5))?; // a replacement: not told of
    /// cache.set(b"d", b"1", 0, Duration::ZERO)?;
    /// cache.delete(b"d")?; // a delete: not told of
    /// clock.advance(10);
    /// cache.expire();
    /// assert_eq!(*heard.lock().unwrap(), [(b"k".to_vec(), RemovalCause::Expired)]);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn expired_or_evicted(f: impl Fn(&Item<'_>, RemovalCause) + Send + Sync + 'static) -> RemovalListener {
        RemovalListener(Arc::new(f), Hears::EngineOnly)
    }
}

impl std::fmt::Debug for RemovalListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemovalListener")
    }
}
