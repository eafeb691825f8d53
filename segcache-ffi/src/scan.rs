//! Key enumeration: a cursor over the cache's hash table (`SharedCache::scan_with`).

use std::ffi::c_void;

use crate::args::{self, put};
use crate::error::Fail;
use crate::guard::run_with;
use crate::handle::segcache_t;
use crate::status::segcache_status_t;

/// Callback of `segcache_scan`: called once per key with the key's bytes, which point into the
/// cache and are valid only until the callback returns (copy what you keep). It runs while the
/// key's shard is locked exclusively: keep it short, do not call into the same cache from it
/// (that deadlocks), and do not unwind out of it (no C++ exception, no longjmp).
pub type segcache_scan_cb = Option<unsafe extern "C" fn(user_data: *mut c_void, key: *const u8, key_len: usize)>;

/// One step of a key scan: calls `callback(user_data, key, key_len)` for the live keys of the
/// next stretch of the hash table from `cursor`, and writes the cursor of the next step to
/// `*next_cursor`. Start with `cursor` 0; the scan is complete when `*next_cursor` is 0.
///
/// A step reads whole hash chains of one shard until it has seen at least `count` keys (0 counts
/// as 1) or that shard ends, so it may call back more than `count` times, or not at all (an empty
/// stretch) while `*next_cursor` is not yet 0: keep calling until it is.
///
/// Across the steps of one scan, while other threads write: a key present for the whole scan is
/// called back exactly once; no key is invented; a key stored, deleted or expiring during the
/// scan may or may not be, at most once. No lock is held between steps, so writing to the cache
/// between steps (deleting the keys seen, say) is allowed.
///
/// Returns `SEGCACHE_OK`; `SEGCACHE_INVALID_ARGUMENT` when `callback` or `next_cursor` is NULL
/// (then nothing is called or written).
///
/// Thread safety: any thread; the callback runs on the calling thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `callback` does not unwind; `user_data` is passed through
/// untouched; `next_cursor` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_scan(
    cache: *const segcache_t,
    cursor: u64,
    callback: segcache_scan_cb,
    user_data: *mut c_void,
    count: usize,
    next_cursor: *mut u64,
) -> segcache_status_t {
    let body = |h: &segcache_t| {
        let cb = callback.ok_or_else(|| Fail::invalid(c"callback is NULL"))?;
        let next_out = args::out(next_cursor, c"next_cursor is NULL or misaligned")?;
        let next = h.cache.scan_with(cursor, count, |item| {
            let key = item.key();
            // SAFETY: `key` borrows the item, alive under the shard lock for the call.
            unsafe { cb(user_data, key.as_ptr(), key.len()) };
        });
        // SAFETY: checked non-NULL and aligned above; writable per the contract.
        unsafe { put(next_out, next) };
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_with(cache, body) }
}
