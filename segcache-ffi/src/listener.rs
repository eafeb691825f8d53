//! Eviction listeners for C: `segcache_set_eviction_listener`. The engine's listener copies each
//! removed item and queues the C callback's call on the calling thread (`pending`), to be made
//! once the entry point's locks are released.

use std::ffi::c_void;
use std::sync::Arc;

use segcache_core::{RemovalCause, RemovalListener};

use crate::error::Fail;
use crate::guard::run_with;
use crate::handle::segcache_t;
use crate::pending;
use crate::read::{meta, segcache_item_t};
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
        let to = Arc::new(Callback { f, user_data });
        h.cache.set_eviction_listener(Some(RemovalListener::new(move |item, removal_cause| {
            let (to, key, value, meta) = (Arc::clone(&to), item.key().to_vec(), item.value().to_vec(), meta(item));
            let cause = segcache_removal_cause_t::from(removal_cause);
            pending::queue(Box::new(move || {
                let item = segcache_item_t {
                    key: key.as_ptr(),
                    key_len: key.len(),
                    value: value.as_ptr(),
                    value_len: value.len(),
                    meta,
                };
                // SAFETY: the caller of `segcache_set_eviction_listener` vouches for the callback
                // and its data; `item` and the bytes it points to live for the call.
                unsafe { (to.f)(to.user_data, &item, cause) };
            }));
        })));
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_with(cache, body) }
}
