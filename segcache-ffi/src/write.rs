//! Writes: store, conditional store, read-modify-write, delete, TTL changes, flush and expiry.

use std::time::Duration;

use segcache_core::{Result, SharedCache};

use crate::args::{self, put_opt};
use crate::guard::{run_keyed, run_with};
use crate::handle::segcache_t;
use crate::status::segcache_status_t;

#[inline(always)]
fn secs(ttl: u32) -> Duration {
    Duration::from_secs(u64::from(ttl))
}

/// The body of every store (set, add, replace, cas, append, prepend): checks the handle, the key
/// and the value in that order, then runs `op` on them.
///
/// # Safety
/// As for `segcache_set`: `cache` is NULL or a live handle; `key`/`value` point to
/// `key_len`/`value_len` readable bytes.
#[inline(always)]
unsafe fn store(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    op: impl FnOnce(&SharedCache, &[u8], &[u8]) -> Result<()>,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        // SAFETY: the function's contract.
        let value = unsafe { args::bytes(value, value_len, c"value is NULL but value_len is not 0") }?;
        Ok(op(&h.cache, key, value)?)
    };
    // SAFETY: the function's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}

/// The body of `segcache_incr` and `segcache_decr`: checks the handle, the key and `new_value`,
/// runs `op` and writes its result to `*new_value` when given.
///
/// # Safety
/// As for `segcache_incr`.
#[inline(always)]
unsafe fn arith(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    new_value: *mut u64,
    op: impl FnOnce(&SharedCache, &[u8]) -> Result<u64>,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        let out = args::opt_out(new_value, c"new_value is misaligned")?;
        let v = op(&h.cache, key)?;
        // SAFETY: checked non-NULL and aligned; writable per the contract.
        unsafe { put_opt(out, v) };
        Ok(())
    };
    // SAFETY: the function's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}

/// Stores `value` under `key` with client `flags` and a TTL of `ttl` seconds (0: never expires),
/// replacing any previous item.
///
/// Returns `SEGCACHE_OK`, `SEGCACHE_TOO_LARGE`, `SEGCACHE_KEY_TOO_LONG`, `SEGCACHE_NO_MEMORY`
/// (heap full, eviction off) or `SEGCACHE_INVALID_ARGUMENT`. `value` may be NULL when
/// `value_len` is 0. The library copies key and value. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `key`/`value` point to `key_len`/`value_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn segcache_set(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: u32,
) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `store`'s.
    unsafe { store(cache, key, key_len, value, value_len, |c, k, v| c.set(k, v, flags, secs(ttl))) }
}

/// Like `segcache_set`, but only when `key` is absent; `SEGCACHE_NOT_STORED` when present.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread, concurrently with other calls on the same handle.
///
/// # Safety
/// As for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_add(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: u32,
) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `store`'s.
    unsafe { store(cache, key, key_len, value, value_len, |c, k, v| c.add(k, v, flags, secs(ttl))) }
}

/// Like `segcache_set`, but only when `key` is present; `SEGCACHE_NOT_STORED` when absent.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread, concurrently with other calls on the same handle.
///
/// # Safety
/// As for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_replace(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: u32,
) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `store`'s.
    unsafe { store(cache, key, key_len, value, value_len, |c, k, v| c.replace(k, v, flags, secs(ttl))) }
}

/// Compare-and-swap: stores like `segcache_set` only if the item's CAS value (from
/// `segcache_meta_t.cas`) is still `cas`. `SEGCACHE_EXISTS` when it changed since,
/// `SEGCACHE_NOT_FOUND` when the key is absent. Atomic with respect to other writers.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread, concurrently with other calls on the same handle.
///
/// # Safety
/// As for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_cas(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: u32,
    cas: u64,
) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `store`'s.
    unsafe { store(cache, key, key_len, value, value_len, |c, k, v| c.cas(k, v, flags, secs(ttl), cas)) }
}

/// Appends `value` to the present item's value, keeping its flags and TTL; `SEGCACHE_NOT_STORED`
/// when absent, `SEGCACHE_TOO_LARGE` when the result would not fit. Atomic.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread, concurrently with other calls on the same handle.
///
/// # Safety
/// As for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_append(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `store`'s.
    unsafe { store(cache, key, key_len, value, value_len, |c, k, v| c.append(k, v)) }
}

/// Prepends `value` to the present item's value; otherwise as `segcache_append`.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread, concurrently with other calls on the same handle.
///
/// # Safety
/// As for `segcache_set`.
#[no_mangle]
pub unsafe extern "C" fn segcache_prepend(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `store`'s.
    unsafe { store(cache, key, key_len, value, value_len, |c, k, v| c.prepend(k, v)) }
}

/// Adds `delta` to the item's value read as an unsigned decimal number (wrapping at 2^64, as
/// memcached does) and stores the result as decimal text; writes it to `*new_value` (optional).
/// `SEGCACHE_NOT_FOUND` when absent, `SEGCACHE_NOT_NUMERIC` when the value is not a number.
/// Atomic with respect to other writers. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes; `new_value` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_incr(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    delta: u64,
    new_value: *mut u64,
) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `arith`'s.
    unsafe { arith(cache, key, key_len, new_value, |c, k| c.incr(k, delta)) }
}

/// Subtracts `delta`, stopping at 0 (as memcached does); otherwise as `segcache_incr`.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread, concurrently with other calls on the same handle.
///
/// # Safety
/// As for `segcache_incr`.
#[no_mangle]
pub unsafe extern "C" fn segcache_decr(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    delta: u64,
    new_value: *mut u64,
) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `arith`'s.
    unsafe { arith(cache, key, key_len, new_value, |c, k| c.decr(k, delta)) }
}

/// Removes `key`; `SEGCACHE_NOT_FOUND` when it was absent. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn segcache_delete(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, |h, key| Ok(h.cache.delete(key)?)) }
}

/// Sets the TTL of a present item to `ttl` seconds from now (0: never expires);
/// `SEGCACHE_NOT_FOUND` when absent. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn segcache_touch(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    ttl: u32,
) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, |h, key| Ok(h.cache.touch(key, secs(ttl))?)) }
}

/// Removes every item now. Thread safety: any thread (locks each shard in turn).
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segcache_flush(cache: *const segcache_t) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe {
        run_with(cache, |h| {
            h.cache.flush();
            Ok(())
        })
    }
}

/// Removes, `delay` seconds from now, every item stored before that time (memcached
/// `flush_all <delay>`); 0 flushes now. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segcache_flush_after(cache: *const segcache_t, delay: u32) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe {
        run_with(cache, |h| {
            if delay == 0 {
                h.cache.flush();
            } else {
                h.cache.flush_after(secs(delay));
            }
            Ok(())
        })
    }
}

/// Sets the heap the cache may use to `bytes` (split evenly over the shards), at once: a lower
/// limit evicts as new items need room, a higher one, up to the heap laid out
/// (`max_heap_size`, else `heap_size`), keeps every item and adds room. More than that:
/// `SEGCACHE_INVALID_CONFIG`, the limit unchanged. Thread safety: any thread (locks each shard
/// in turn).
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segcache_set_memory_limit(cache: *const segcache_t, bytes: usize) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe { run_with(cache, |h| Ok(h.cache.set_memory_limit(bytes)?)) }
}

/// Frees the memory of expired items now (reads already treat them as misses); writes the
/// number of items removed to `*removed` (optional). Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `removed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_expire(cache: *const segcache_t, removed: *mut usize) -> segcache_status_t {
    let body = |h: &segcache_t| {
        let out = args::opt_out(removed, c"removed is misaligned")?;
        let n = h.cache.expire();
        // SAFETY: checked non-NULL and aligned; writable per the contract.
        unsafe { put_opt(out, n) };
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_with(cache, body) }
}
