//! Telling the owner about items that leave: expired with their segment, evicted (a segment
//! evicted or merged away, or a full hash chain), deleted, or replaced by a new version.

use crate::engine::read::state_of;
use crate::engine::Segcache;
use crate::hashtable::slot::Loc;
use crate::item::Item;
use crate::listener::{Hears, RemovalCause, RemovalListener};
use crate::record;

impl Segcache {
    /// Sets (or with `None` removes) the function told of each item that leaves the cache (see
    /// [`RemovalCause`](crate::RemovalCause)): expired, evicted, removed or replaced.
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
            self.tell(listener, loc, slot_value, cause, self.seg(loc.seg).cas_base);
        }
    }

    /// `tell_removal` of the owner's doing (`Removed`, `Replaced`), for a listener that hears those.
    #[inline]
    pub(crate) fn tell_owner_removal(&self, loc: Loc, slot_value: u64, cause: RemovalCause) {
        if let Some(listener) = self.listener.as_ref().filter(|l| l.1 == Hears::All) {
            self.tell(listener, loc, slot_value, cause, self.seg(loc.seg).cas_base);
        }
    }

    /// Whether a listener is told of replacements, which it must see before the old version's
    /// bytes are overwritten (so a rewrite in place under the shared lock is not made then).
    #[inline]
    pub(crate) fn hears_replacements(&self) -> bool {
        self.listener.as_ref().is_some_and(|l| l.1 == Hears::All)
    }

    /// `tell_removal` of a record written for CAS base `cas_base`: one that a merge drops from a
    /// segment it drains in place, whose header (and base) is already the destination's.
    pub(crate) fn tell_removal_based(&self, loc: Loc, slot_value: u64, cause: RemovalCause, cas_base: u32) {
        if let Some(listener) = &self.listener {
            self.tell(listener, loc, slot_value, cause, cas_base);
        }
    }

    #[cold]
    fn tell(&self, listener: &RemovalListener, loc: Loc, slot_value: u64, cause: RemovalCause, cas_base: u32) {
        // (Not `record`: a merge that drains a segment in place drops records from it after
        // its header became the destination's.)
        let Some(r) = self.seg_bytes(loc.seg).get(loc.offset as usize..).and_then(|src| record::parse(src, cas_base))
        else {
            return;
        };
        // A large item's chunks are not items; its head is told with an empty value (its
        // chunks may be gone already).
        if crate::large::is_chunk_key(r.key) {
            return;
        }
        let now = self.now();
        let seg = self.seg(loc.seg);
        let item = Item {
            key: r.key,
            value: if r.stamp.large { &[] } else { r.value },
            flags: r.client_flags,
            cas: r.explicit_cas().unwrap_or_else(|| self.cas_of(r.stamp.cas)),
            expire_at: seg.expire_at,
            now,
            state: state_of(&r.stamp, seg.create_at, slot_value),
        };
        (listener.0)(&item, cause);
    }
}
