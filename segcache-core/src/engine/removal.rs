//! Telling the owner about items that leave on the engine's own initiative: expired with their
//! segment, or evicted (a segment evicted or merged away, or a full hash chain).

use std::sync::Arc;

use crate::engine::read::state_of;
use crate::hashtable::slot::Loc;
use crate::record;
use crate::{Item, Segcache};

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

impl Segcache {
    /// Sets (or with `None` removes) the function told of each item that expires or is evicted.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock, RemovalListener};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// let told = Arc::new(AtomicUsize::new(0));
    /// let count = Arc::clone(&told);
    /// cache.set_eviction_listener(Some(RemovalListener::new(move |_, _| {
    ///     count.fetch_add(1, Relaxed);
    /// })));
    /// cache.set(b"a", b"v", 0, Duration::from_secs(5))?;
    /// clock.advance(10);
    /// cache.expire();
    /// cache.set_eviction_listener(None); // no one is told any more
    /// cache.set(b"b", b"v", 0, Duration::from_secs(5))?;
    /// clock.advance(10);
    /// cache.expire();
    /// assert_eq!(told.load(Relaxed), 1);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn set_eviction_listener(&mut self, listener: Option<RemovalListener>) {
        self.listener = listener;
    }

    /// Tells the listener, if there is one, of the item in `loc`, whose slot holds `slot_value`.
    #[inline]
    pub(crate) fn tell_removal(&self, loc: Loc, slot_value: u64, cause: RemovalCause) {
        if let Some(listener) = &self.listener {
            self.tell(listener, loc, slot_value, cause);
        }
    }

    #[cold]
    fn tell(&self, listener: &RemovalListener, loc: Loc, slot_value: u64, cause: RemovalCause) {
        // (Not `record`: a merge that drains a segment in place drops records from it after
        // its header became the destination's.)
        let Some(r) = self.seg_bytes(loc.seg).get(loc.offset as usize..).and_then(record::parse) else { return };
        let now = self.now();
        let seg = self.seg(loc.seg);
        let item = Item {
            key: r.key,
            value: r.value,
            flags: r.client_flags,
            cas: r.explicit_cas().unwrap_or_else(|| self.cas_of(r.stamp.cas)),
            expire_at: seg.expire_at,
            now,
            state: state_of(&r.stamp, seg.create_at, slot_value, now),
        };
        (listener.0)(&item, cause);
    }
}
