//! Eviction listeners for C: `segcache_set_eviction_listener`.
//!
//! The engine tells its listener of a removal while the item's shard is locked for writing. A C
//! callback there could not call back into the cache (the shard's lock is not reentrant), so the
//! engine's listener only copies the item into a queue of the calling thread, and the entry
//! point that caused the removal hands the queue to the callbacks after the engine returned and
//! every lock is released (`deliver_pending`, called by `guard::run_with`).

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use segcache_core::{RemovalCause, RemovalListener};

use crate::error::Fail;
use crate::guard::run_with;
use crate::handle::segcache_t;
use crate::read::{meta, segcache_item_t, segcache_meta_t};
use crate::status::segcache_status_t;

/// Why an item left the cache (the `cause` of a `segcache_eviction_cb`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum segcache_removal_cause_t {
    /// Its TTL ran out.
    SEGCACHE_REMOVAL_EXPIRED = 0,
    /// Eviction made room for new items.
    SEGCACHE_REMOVAL_EVICTED = 1,
    /// The owner deleted it (`segcache_delete`, `segcache_delete_cas`, or a compute that removed it).
    SEGCACHE_REMOVAL_REMOVED = 2,
    /// A store wrote a new version of its key (a set, cas, append, incr, a compute that put a
    /// value, ...); the callback gets the old version.
    SEGCACHE_REMOVAL_REPLACED = 3,
}

impl From<RemovalCause> for segcache_removal_cause_t {
    fn from(c: RemovalCause) -> Self {
        match c {
            RemovalCause::Expired => segcache_removal_cause_t::SEGCACHE_REMOVAL_EXPIRED,
            RemovalCause::Evicted => segcache_removal_cause_t::SEGCACHE_REMOVAL_EVICTED,
            RemovalCause::Removed => segcache_removal_cause_t::SEGCACHE_REMOVAL_REMOVED,
            RemovalCause::Replaced => segcache_removal_cause_t::SEGCACHE_REMOVAL_REPLACED,
        }
    }
}

/// Callback of `segcache_set_eviction_listener`: told of one item that left the cache, with the
/// `user_data` given with it. `item` (its key, value and meta as they were) is valid only during
/// the call; copy what you keep. It runs on the thread whose call removed the item, after that
/// call finished its work and released every lock of the cache, just before the call returns: it
/// may call into the same cache, the same key included. It must not unwind (no C++ exception, no
/// longjmp).
pub type segcache_eviction_cb =
    Option<unsafe extern "C" fn(user_data: *mut c_void, item: *const segcache_item_t, cause: segcache_removal_cause_t)>;

/// A callback and its user pointer.
struct Callback {
    f: unsafe extern "C" fn(*mut c_void, *const segcache_item_t, segcache_removal_cause_t),
    user_data: *mut c_void,
}

// SAFETY: `user_data` is the caller's, handed back untouched on the thread that made a removal;
// `segcache_set_eviction_listener` documents that the callback may run on any thread that uses
// the cache, so the caller vouches that it and its data may be used from those threads.
unsafe impl Send for Callback {}
// SAFETY: as for Send; the library never dereferences `user_data`.
unsafe impl Sync for Callback {}

/// A removed item, copied under the shard's lock, waiting for its callback.
struct Removal {
    to: Arc<Callback>,
    key: Vec<u8>,
    value: Vec<u8>,
    meta: segcache_meta_t,
    cause: segcache_removal_cause_t,
}

thread_local! {
    /// Removals this thread's current call made, in order.
    static PENDING: RefCell<Vec<Removal>> = const { RefCell::new(Vec::new()) };
    /// Above 0 while this thread runs a callback under a shard's lock (a compute's): removals are
    /// then left queued for the call that holds it.
    static UNDER_LOCK: Cell<u32> = const { Cell::new(0) };
}

/// Set once any handle got a listener: until then no call looks at its thread's queue.
static EVER_SET: AtomicBool = AtomicBool::new(false);

/// Hands this thread's queued removals to their callbacks, unless a shard's lock is held up the
/// stack. The last error is kept: a callback's own failing calls do not replace the message of
/// the call it runs in.
#[inline(always)]
pub(crate) fn deliver_pending() {
    if EVER_SET.load(Relaxed) {
        deliver_queued();
    }
}

#[inline(never)]
fn deliver_queued() {
    if UNDER_LOCK.with(Cell::get) > 0 {
        return;
    }
    // No unwind may reach C: a panic here (none is expected) drops the rest of the queue.
    let _ = std::panic::catch_unwind(deliver_all);
}

fn deliver_all() {
    loop {
        // Taken out before the callbacks run: a callback's own calls deliver what they remove.
        let batch = PENDING.with(|q| std::mem::take(&mut *q.borrow_mut()));
        if batch.is_empty() {
            return;
        }
        let kept = crate::error::take_last_error();
        for r in batch {
            let item = segcache_item_t {
                key: r.key.as_ptr(),
                key_len: r.key.len(),
                value: r.value.as_ptr(),
                value_len: r.value.len(),
                meta: r.meta,
            };
            // SAFETY: the caller of `segcache_set_eviction_listener` vouches for the callback and
            // its data; `item` and the bytes it points to live for the call.
            unsafe { (r.to.f)(r.to.user_data, &item, r.cause) };
        }
        crate::error::set_last_error(kept);
    }
}

/// Runs `f` (a callback called under a shard's lock) with removals held back for the call that
/// holds the lock.
pub(crate) fn under_lock<R>(f: impl FnOnce() -> R) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            UNDER_LOCK.with(|n| n.set(n.get() - 1));
        }
    }
    UNDER_LOCK.with(|n| n.set(n.get() + 1));
    let _leave = Leave;
    f()
}

/// Sets the function told of each item that leaves the cache: `callback(user_data, item,
/// cause)`, with the cause (`segcache_removal_cause_t`): expired, evicted, removed by a delete, or
/// replaced by a new version (not items a flush removes). `callback` NULL removes the listener.
/// Setting one replaces the one before.
///
/// The callback never runs while the library holds a lock: the item is copied when it leaves,
/// and the callback gets the copy on the same thread just before the call that removed it (a
/// set that evicted, a delete, ...) returns; the callback may call into the same cache (the same
/// key included), and its failing calls do not change what `segcache_last_error()` says of the
/// outer call. Items that leave during a `segcache_compute` callback are told of when
/// `segcache_compute` returns.
///
/// Returns `SEGCACHE_INVALID_ARGUMENT` for a NULL or closed handle.
/// Thread safety: any thread; the callback then runs on every thread that writes to the cache,
/// so it and `user_data` must be safe to use from those threads.
/// Ownership: `user_data` is passed through untouched; it must stay valid while the listener is
/// set (until it is replaced, removed, or the cache closed).
///
/// # Safety
/// `cache` is NULL or a live handle; `callback` does not unwind.
#[no_mangle]
pub unsafe extern "C" fn segcache_set_eviction_listener(
    cache: *const segcache_t,
    callback: segcache_eviction_cb,
    user_data: *mut c_void,
) -> segcache_status_t {
    let body = |h: &segcache_t| -> Result<(), Fail> {
        let Some(f) = callback else {
            h.cache.set_eviction_listener(None);
            return Ok(());
        };
        EVER_SET.store(true, Relaxed);
        let to = Arc::new(Callback { f, user_data });
        h.cache.set_eviction_listener(Some(RemovalListener::new(move |item, cause| {
            let r = Removal {
                to: Arc::clone(&to),
                key: item.key().to_vec(),
                value: item.value().to_vec(),
                meta: meta(item),
                cause: cause.into(),
            };
            // `try_with`: a removal during the thread's teardown has no call to deliver it.
            let _ = PENDING.try_with(|q| q.borrow_mut().push(r));
        })));
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_with(cache, body) }
}
