//! Compute: `segcache_compute` and the setters its callback decides with.

use std::ffi::{c_int, c_void};
use std::time::Duration;

use segcache_core::{Computed, Op};

use crate::args::{self, put_opt};
use crate::error::Fail;
use crate::guard::run_keyed;
use crate::handle::segcache_t;
use crate::pending::under_lock;
use crate::read::{segcache_item_t, view};
use crate::status::segcache_status_t::{self, *};

/// Where a `segcache_compute_cb` puts its decision: pass it to `segcache_compute_put`,
/// `segcache_compute_remove` or `segcache_compute_keep`. It starts as "keep". Valid only during
/// the callback.
pub struct segcache_compute_t {
    op: Op,
}

/// What `segcache_compute` did.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum segcache_computed_t {
    /// There was no item, and none was stored.
    SEGCACHE_COMPUTED_STILL_ABSENT = 0,
    /// The item was kept as it was.
    SEGCACHE_COMPUTED_UNCHANGED = 1,
    /// There was no item; the callback's value was stored.
    SEGCACHE_COMPUTED_INSERTED = 2,
    /// The item was replaced by the callback's value.
    SEGCACHE_COMPUTED_REPLACED = 3,
    /// The item was removed.
    SEGCACHE_COMPUTED_REMOVED = 4,
}

/// Callback of `segcache_compute`: gets the key's current item (`current`, NULL when the key is
/// absent or expired; its pointers are valid only during the call) and decides with
/// `segcache_compute_put`, `segcache_compute_remove` or `segcache_compute_keep` on `decision`
/// (no call: keep). Returns 0 to have the decision carried out; any other value changes nothing
/// and makes `segcache_compute` return `SEGCACHE_LOAD_FAILED`.
///
/// It runs while the key's shard is locked for writing, so that no other writer of the key runs
/// between the read and the write: keep it short, and do not call into the same cache from it
/// (a key of the same shard would wait for itself forever). It must not unwind (no C++
/// exception, no longjmp).
pub type segcache_compute_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        current: *const segcache_item_t,
        decision: *mut segcache_compute_t,
    ) -> c_int,
>;

/// Decides that `segcache_compute` stores `value` (`value_len` bytes, copied; NULL allowed when
/// `value_len` is 0) with client flags `flags` and a TTL of `ttl` seconds (0: never expires). The
/// new item takes a new CAS value. Called again, the last decision wins.
///
/// Returns `SEGCACHE_INVALID_ARGUMENT` when `decision` is NULL or `value` is NULL with a non-zero
/// length. Thread safety: only from the callback that got `decision`, during that call.
/// Ownership: `value` is borrowed for the call; the library copies it.
///
/// # Safety
/// `decision` is NULL or the pointer the callback got; `value` points to `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn segcache_compute_put(
    decision: *mut segcache_compute_t,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: u32,
) -> segcache_status_t {
    crate::guard::run(|| {
        let decision = args::out(decision, c"decision is NULL")?;
        // SAFETY: the caller's contract.
        let v = unsafe { args::bytes(value, value_len, c"value is NULL but value_len is not 0") }?;
        let op = Op::Put { value: v.to_vec(), flags, ttl: Duration::from_secs(u64::from(ttl)) };
        // SAFETY: `decision` is the live, exclusively borrowed slot of the running callback.
        unsafe { (*decision).op = op };
        Ok(())
    })
}

/// Decides that `segcache_compute` removes the key's item (nothing happens when there is none).
/// Called after `segcache_compute_put`, it replaces that decision.
///
/// Returns `SEGCACHE_INVALID_ARGUMENT` when `decision` is NULL.
/// Thread safety: only from the callback that got `decision`, during that call.
///
/// # Safety
/// `decision` is NULL or the pointer the callback got.
#[no_mangle]
pub unsafe extern "C" fn segcache_compute_remove(decision: *mut segcache_compute_t) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe { decide(decision, Op::Remove) }
}

/// Decides that `segcache_compute` leaves the key as it is (the decision a callback starts with).
///
/// Returns `SEGCACHE_INVALID_ARGUMENT` when `decision` is NULL.
/// Thread safety: only from the callback that got `decision`, during that call.
///
/// # Safety
/// `decision` is NULL or the pointer the callback got.
#[no_mangle]
pub unsafe extern "C" fn segcache_compute_keep(decision: *mut segcache_compute_t) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe { decide(decision, Op::Keep) }
}

/// # Safety
/// `decision` is NULL or the live slot of a running callback.
unsafe fn decide(decision: *mut segcache_compute_t, op: Op) -> segcache_status_t {
    crate::guard::run(|| {
        let decision = args::out(decision, c"decision is NULL")?;
        // SAFETY: the caller's contract: the live, exclusively borrowed slot of the callback.
        unsafe { (*decision).op = op };
        Ok(())
    })
}

/// Reads `key`'s item, calls `callback(user_data, current, decision)` with it, and carries out
/// what the callback decided: keep it, store a new value (with flags and TTL), or remove it.
/// The key's shard stays locked for writing from the read to the write, so no other writer of
/// the key runs in between: computes of one key from many threads run one after another and
/// lose no update. A stored value takes a new CAS value (memcached's CAS tokens read before no
/// longer match).
///
/// - `*outcome` (optional) gets what happened (`segcache_computed_t`); `*cas` (optional) the CAS
///   value of the key's item afterwards, 0 when it has none.
/// - The callback returns non-zero: nothing changes, `SEGCACHE_LOAD_FAILED` (and
///   `segcache_last_error()` names the code); the out-pointers are not written.
/// - A value the cache cannot store: `SEGCACHE_TOO_LARGE` or `SEGCACHE_NO_MEMORY`, as
///   `segcache_set` would, and the current item stays as it was.
/// - `callback` NULL: `SEGCACHE_INVALID_ARGUMENT`. Key and handle checks as for `segcache_set`.
///
/// The callback runs on the calling thread with the key's shard locked: it must not call into
/// the same cache (a key of the same shard would deadlock). Eviction listener callbacks for items
/// removed meanwhile run after the lock is released, before this returns.
///
/// Thread safety: any thread; the callback runs on the calling thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes; `outcome` and
/// `cas` are NULL or writable; `callback` does not unwind; `user_data` is passed through untouched.
#[no_mangle]
pub unsafe extern "C" fn segcache_compute(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    callback: segcache_compute_cb,
    user_data: *mut c_void,
    outcome: *mut segcache_computed_t,
    cas: *mut u64,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        let cb = callback.ok_or_else(|| Fail::invalid(c"callback is NULL"))?;
        let outcome = args::opt_out(outcome, c"outcome is misaligned")?;
        let cas_out = args::opt_out(cas, c"cas is misaligned")?;
        let mut failed = 0;
        let done = h.cache.compute(key, |current| {
            let item = current.as_ref().map(view);
            let current = item.as_ref().map_or(std::ptr::null(), |i| i as *const segcache_item_t);
            let mut decision = segcache_compute_t { op: Op::Keep };
            // SAFETY: the caller vouches for `cb` and `user_data`; `current` and `decision` live
            // for the call.
            let rc = under_lock(|| unsafe { cb(user_data, current, &mut decision) });
            if rc != 0 {
                failed = rc;
                return Op::Keep;
            }
            decision.op
        })?;
        if failed != 0 {
            return Err(Fail::owned(SEGCACHE_LOAD_FAILED, format!("compute callback failed: it returned {failed}")));
        }
        let what = match done {
            Computed::StillAbsent => segcache_computed_t::SEGCACHE_COMPUTED_STILL_ABSENT,
            Computed::Unchanged { .. } => segcache_computed_t::SEGCACHE_COMPUTED_UNCHANGED,
            Computed::Inserted { .. } => segcache_computed_t::SEGCACHE_COMPUTED_INSERTED,
            Computed::Replaced { .. } => segcache_computed_t::SEGCACHE_COMPUTED_REPLACED,
            Computed::Removed => segcache_computed_t::SEGCACHE_COMPUTED_REMOVED,
        };
        // SAFETY: out-pointers checked above, writable per the contract.
        unsafe {
            put_opt(outcome, what);
            put_opt(cas_out, done.cas().unwrap_or(0));
        }
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}
