//! Single-flight loads: `segcache_get_or_load` and the setter its callback fills a value with.

use std::ffi::{c_int, c_void};

use segcache_core::{LoadError, OwnedItem};

use crate::args::{self, put, put_opt};
use crate::error::Fail;
use crate::guard::run_keyed;
use crate::handle::segcache_t;
use crate::read::segcache_meta_t;
use crate::status::segcache_status_t::{self, *};

/// Where a `segcache_load_cb` puts the value it made: pass it to `segcache_load_set`. Valid only
/// during the callback.
pub struct segcache_load_t {
    value: Option<Vec<u8>>,
}

/// Callback of `segcache_get_or_load`: makes the value of `key` (`key_len` bytes, valid during the
/// call) and hands it over with `segcache_load_set(load, value, value_len)`, which copies it.
/// Returns 0 on success; any other value is a failure that `segcache_get_or_load` reports to its
/// caller as `SEGCACHE_LOAD_FAILED`, storing nothing. Returning 0 without calling
/// `segcache_load_set` is a failure too. It runs on the calling thread with no lock of the cache
/// held, so it may use the cache (a call for its own key does not wait for itself: it loads
/// directly). It must not unwind (no C++ exception, no longjmp).
pub type segcache_load_cb = Option<
    unsafe extern "C" fn(user_data: *mut c_void, key: *const u8, key_len: usize, load: *mut segcache_load_t) -> c_int,
>;

/// Hands the value a `segcache_load_cb` made to `segcache_get_or_load`: copies `value_len` bytes
/// from `value` (NULL allowed when `value_len` is 0). Called again, the last value wins.
///
/// Returns `SEGCACHE_INVALID_ARGUMENT` when `load` is NULL or `value` is NULL with a non-zero
/// length. Thread safety: only from the callback that got `load`, during that call.
/// Ownership: `value` is borrowed for the call; the library copies it.
///
/// # Safety
/// `load` is NULL or the pointer the callback got; `value` points to `value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn segcache_load_set(
    load: *mut segcache_load_t,
    value: *const u8,
    value_len: usize,
) -> segcache_status_t {
    crate::guard::run(|| {
        let load = args::out(load, c"load is NULL")?;
        // SAFETY: the caller's contract.
        let v = unsafe { args::bytes(value, value_len, c"value is NULL but value_len is not 0") }?;
        // SAFETY: `load` is the live, exclusively borrowed slot of the running callback.
        unsafe { (*load).value = Some(v.to_vec()) };
        Ok(())
    })
}

/// Why a load failed: the callback's return code, or no value set.
enum LoadFailure {
    Code(c_int),
    NoValue,
}

/// Looks `key` up; on a miss, calls `loader(loader_data, key, key_len, load)` to make the value,
/// stores it with flags 0 and a TTL of `ttl` seconds (0: never expires) and returns it. Single
/// flight: of the threads that miss on one key at once, one runs its loader and the others wait
/// for its value (blocking, with no lock held).
///
/// - The value comes back as from `segcache_get`: in `buf[0..*value_len]` with `SEGCACHE_OK`, or
///   `SEGCACHE_BUFFER_TOO_SMALL` with the needed length in `*value_len` (the value was stored
///   all the same, when the cache could keep it: ask again with a larger buffer). `*meta`
///   (optional) gets its CAS value, flags and TTL.
/// - A value the cache cannot keep (larger than a segment, no memory with eviction off) is still
///   returned, with CAS value 0; a later call loads it again.
/// - The loader returns non-zero (or sets no value): `SEGCACHE_LOAD_FAILED`, nothing stored,
///   `segcache_last_error()` names the code. Threads waiting for that load then try again, one of
///   them running its own loader.
/// - `loader` NULL: `SEGCACHE_INVALID_ARGUMENT`. Key and handle checks as for `segcache_get`.
/// - Loaders of two threads that each ask for the other's key deadlock: keep loaders acyclic.
///
/// Thread safety: any thread; the loader runs on the calling thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes; `buf` to `buf_len`
/// writable bytes (or NULL with 0); `value_len` and `meta` are NULL or writable; `loader` does
/// not unwind; `loader_data` is passed through untouched.
#[no_mangle]
pub unsafe extern "C" fn segcache_get_or_load(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    ttl: u32,
    loader: segcache_load_cb,
    loader_data: *mut c_void,
    buf: *mut u8,
    buf_len: usize,
    value_len: *mut usize,
    meta: *mut segcache_meta_t,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        let cb = loader.ok_or_else(|| Fail::invalid(c"loader is NULL"))?;
        // SAFETY: the caller's contract.
        let buf = unsafe { args::buffer(buf, buf_len) }?;
        let value_len = args::out(value_len, c"value_len is NULL")?;
        let meta_out = args::opt_out(meta, c"meta is misaligned")?;
        let ttl_d = std::time::Duration::from_secs(u64::from(ttl));
        let load = || {
            let mut slot = segcache_load_t { value: None };
            // SAFETY: the caller vouches for `cb` and `loader_data`; `key` and `slot` live for the call.
            let rc = unsafe { cb(loader_data, key.as_ptr(), key.len(), &mut slot) };
            match (rc, slot.value) {
                (0, Some(v)) => Ok(v),
                (0, None) => Err(LoadFailure::NoValue),
                (code, _) => Err(LoadFailure::Code(code)),
            }
        };
        let item = h.cache.try_get_or_insert_with(key, ttl_d, load).map_err(|e| match e {
            LoadError::Cache(e) => Fail::from(e),
            LoadError::Loader(LoadFailure::Code(code)) => {
                Fail::owned(SEGCACHE_LOAD_FAILED, format!("loader failed: it returned {code}"))
            }
            LoadError::Loader(LoadFailure::NoValue) => {
                Fail::new(SEGCACHE_LOAD_FAILED, c"loader failed: it returned 0 without calling segcache_load_set")
            }
        })?;
        let m = meta_of(&item, h.cache.now());
        // SAFETY: out-pointers checked above, writable per the contract.
        unsafe {
            put(value_len, item.value.len());
            put_opt(meta_out, m);
        }
        match buf.get_mut(..item.value.len()) {
            Some(dst) => {
                dst.copy_from_slice(&item.value);
                Ok(())
            }
            None => Err(Fail::of(SEGCACHE_BUFFER_TOO_SMALL)),
        }
    };
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}

fn meta_of(item: &OwnedItem, now: u32) -> segcache_meta_t {
    let ttl = item.ttl.map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX).max(1));
    segcache_meta_t {
        cas: item.cas,
        flags: item.flags,
        ttl,
        expire_at: if ttl == 0 { 0 } else { now.saturating_add(ttl) },
    }
}
