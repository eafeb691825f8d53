//! The eviction listener's types: why an item left, and the function told of it (the engine
//! calls it from `engine::removal`).

use std::sync::Arc;

use crate::Item;

/// Why an item left the cache.
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
///     .eviction_listener(move |item, cause| log.lock().unwrap().push((item.key().to_vec(), cause)))
///     .build()?;
/// cache.set(b"k", b"v", 0, Duration::from_secs(5))?;
/// cache.set(b"gone", b"v", 0, Duration::ZERO)?;
/// cache.delete(b"gone")?; // a delete is the owner's doing: not reported
/// clock.advance(10);
/// cache.expire();
/// assert_eq!(*removed.lock().unwrap(), [(b"k".to_vec(), RemovalCause::Expired)]);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovalCause {
    /// Its TTL ran out (its segment expired).
    Expired,
    /// Eviction made room for new items.
    Evicted,
}

/// A function told of each item that expires or is evicted (see
/// [`Builder::eviction_listener`](crate::Builder::eviction_listener)). It runs while the item's
/// shard is locked for writing: keep it short, and do not call back into the cache.
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
pub struct RemovalListener(pub(crate) Arc<ListenerFn>);

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
        RemovalListener(Arc::new(f))
    }
}

impl std::fmt::Debug for RemovalListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemovalListener")
    }
}
