//! Reads: copy into the caller's buffer, zero-copy through a callback, many keys at once.

use std::ffi::c_void;
use std::time::Duration;

use segcache_core::Item;

use crate::args::{self, put, put_opt};
use crate::error::Fail;
use crate::guard::{run_keyed, run_with};
use crate::handle::segcache_t;
use crate::status::segcache_status_t::{self, *};

/// An item's metadata.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct segcache_meta_t {
    /// The CAS value to pass to `segcache_cas`.
    pub cas: u64,
    /// The 32-bit client flags given when it was stored.
    pub flags: u32,
    /// Seconds left to live (at least 1); 0 when the item never expires.
    pub ttl: u32,
    /// Absolute expiry, Unix seconds of the cache's clock; 0 when the item never expires.
    pub expire_at: u32,
}

/// A borrowed view of a stored item, given to a callback. `key` and `value` point into the cache
/// and are valid only until the callback returns; copy what you keep.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct segcache_item_t {
    /// The key's bytes.
    pub key: *const u8,
    /// The key's length.
    pub key_len: usize,
    /// The value's bytes; non-NULL even when `value_len` is 0.
    pub value: *const u8,
    /// The value's length.
    pub value_len: usize,
    /// Flags, CAS and expiry.
    pub meta: segcache_meta_t,
}

/// Callback of `segcache_get_with`. An item of up to 512 bytes is handed over as a copy taken
/// without the lock; a larger one straight from the cache, while the key's shard is locked for
/// reading: keep the callback short, do not call into the same cache from it (that may
/// deadlock), and do not unwind out of it (no C++ exception, no longjmp).
pub type segcache_get_cb = Option<unsafe extern "C" fn(user_data: *mut c_void, item: *const segcache_item_t)>;

/// Callback of `segcache_get_many`: called once per hit with the index of the key in `keys`, in
/// no particular order. Same rules as `segcache_get_cb`.
pub type segcache_get_many_cb =
    Option<unsafe extern "C" fn(user_data: *mut c_void, index: usize, item: *const segcache_item_t)>;

/// `segcache_meta_t.ttl` of a time left to live: whole seconds, at least 1; 0 for never.
#[inline(always)]
fn ttl_secs(ttl: Option<Duration>) -> u32 {
    ttl.map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX).max(1))
}

#[inline(always)]
pub(crate) fn meta(item: &Item<'_>) -> segcache_meta_t {
    segcache_meta_t {
        cas: item.cas(),
        flags: item.flags(),
        ttl: ttl_secs(item.ttl()),
        expire_at: item.expire_at().unwrap_or(0),
    }
}

#[inline(always)]
pub(crate) fn view(item: &Item<'_>) -> segcache_item_t {
    let (k, v) = (item.key(), item.value());
    segcache_item_t { key: k.as_ptr(), key_len: k.len(), value: v.as_ptr(), value_len: v.len(), meta: meta(item) }
}

/// Where a copying read (`segcache_get`, `segcache_get_and_touch`) puts its result: the caller's
/// buffer and out-pointers, checked.
struct Dest<'a> {
    buf: &'a mut [u8],
    value_len: *mut usize,
    meta_out: Option<*mut segcache_meta_t>,
}

impl Dest<'_> {
    /// Checks `buf`, `value_len` and `meta`, in that order.
    ///
    /// # Safety
    /// `buf` points to `buf_len` writable bytes (or is NULL with 0); `value_len` and `meta` are
    /// NULL or valid for writes until the returned `Dest` is used.
    #[inline(always)]
    unsafe fn check(
        buf: *mut u8,
        buf_len: usize,
        value_len: *mut usize,
        meta: *mut segcache_meta_t,
    ) -> Result<Self, Fail> {
        // SAFETY: the function's contract.
        let buf = unsafe { args::buffer(buf, buf_len) }?;
        let value_len = args::out(value_len, c"value_len is NULL")?;
        let meta_out = args::opt_out(meta, c"meta is misaligned")?;
        Ok(Dest { buf, value_len, meta_out })
    }

    /// Reports the value's length and (when asked) its metadata, and copies it into `buf` when it
    /// fits; returns whether it did. Small result on purpose: this runs inside the engine's read
    /// closure, and keeping it lean lets the compiler inline the engine's lookup around it.
    ///
    /// # Safety
    /// `value_len` and `meta_out` (when Some) are still valid for writes (as `check` required).
    #[inline(always)]
    unsafe fn deliver(self, value: &[u8], m: impl FnOnce() -> segcache_meta_t) -> bool {
        // SAFETY: the function's contract.
        unsafe {
            put(self.value_len, value.len());
            // The metadata is computed only when asked for: most reads want just the value.
            if let Some(p) = self.meta_out {
                put(p, m());
            }
        }
        match self.buf.get_mut(..value.len()) {
            Some(dst) => {
                dst.copy_from_slice(value);
                true
            }
            None => false,
        }
    }
}

/// The status of a copying read from `deliver`'s outcome (`None`: a miss).
#[inline(always)]
fn copied(outcome: Option<bool>) -> Result<(), Fail> {
    match outcome {
        Some(true) => Ok(()),
        Some(false) => Err(Fail::of(SEGCACHE_BUFFER_TOO_SMALL)),
        None => Err(Fail::of(SEGCACHE_NOT_FOUND)),
    }
}

/// Looks `key` up and copies its value into `buf`.
///
/// - Hit and `buf_len` large enough: returns `SEGCACHE_OK`, the value is in `buf[0..*value_len]`.
/// - Hit but `buf_len < value length`: returns `SEGCACHE_BUFFER_TOO_SMALL`, writes the needed
///   length to `*value_len` and leaves `buf` untouched (call again with a larger buffer; each
///   call counts as one read in the stats). `buf` may be NULL with `buf_len` 0 to ask the length.
/// - Miss: `SEGCACHE_NOT_FOUND`, nothing written.
/// - `*meta` (optional, may be NULL) receives flags, CAS and TTL on a hit.
///
/// Ownership: all pointers are the caller's, borrowed for the call. Thread safety: any thread.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes; `buf` to
/// `buf_len` writable bytes (or NULL with 0); `value_len` and `meta` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_get(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    buf_len: usize,
    value_len: *mut usize,
    meta: *mut segcache_meta_t,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        // SAFETY: the caller's contract, documented above.
        let dest = unsafe { Dest::check(buf, buf_len, value_len, meta) }?;
        // SAFETY: out-pointers checked above, writable per the contract.
        copied(h.cache.get_with(key, |item| unsafe { dest.deliver(item.value(), || self::meta(&item)) }))
    };
    // SAFETY: the caller's contract, documented above.
    unsafe { run_keyed(cache, key, key_len, body) }
}

/// Looks `key` up and calls `callback(user_data, &item)` on a hit, without copying the value.
/// Returns `SEGCACHE_OK` after the callback ran, `SEGCACHE_NOT_FOUND` on a miss (no call).
///
/// The item's pointers are valid only during the callback; see `segcache_get_cb` for its rules.
/// Thread safety: any thread; the callback runs on the calling thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes; `callback` is a
/// function that does not unwind; `user_data` is passed through untouched.
#[no_mangle]
pub unsafe extern "C" fn segcache_get_with(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    callback: segcache_get_cb,
    user_data: *mut c_void,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        let cb = callback.ok_or_else(|| Fail::invalid(c"callback is NULL"))?;
        h.cache
            .get_with(key, |item| {
                let v = view(&item);
                // SAFETY: `v` borrows the item, which lives (under the shard lock) for the call.
                unsafe { cb(user_data, &v) };
            })
            .ok_or_else(|| Fail::of(SEGCACHE_NOT_FOUND))
    };
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}

/// Looks up `n` keys (`keys[i]`, `key_lens[i]` bytes) and calls `callback(user_data, i, &item)`
/// for each hit, in no particular order; misses get no call. Keys in the same shard are looked
/// up under one lock acquisition. Writes the number of hits to `*hits` (optional, may be NULL).
///
/// Every key is checked before any lookup: a NULL or empty key gives `SEGCACHE_INVALID_ARGUMENT`,
/// a long one `SEGCACHE_KEY_TOO_LONG`, and then no callback runs. `n` may be 0 (then `keys` and
/// `key_lens` may be NULL). Returns `SEGCACHE_OK` whether or not anything was found.
///
/// Thread safety: any thread; callbacks run on the calling thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `keys` and `key_lens` point to `n` readable elements (or are NULL with `n` 0), each key to
/// `key_lens[i]` readable bytes; `callback` does not unwind; `hits` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_get_many(
    cache: *const segcache_t,
    keys: *const *const u8,
    key_lens: *const usize,
    n: usize,
    callback: segcache_get_many_cb,
    user_data: *mut c_void,
    hits: *mut usize,
) -> segcache_status_t {
    let body = |h: &segcache_t| {
        let cb = callback.ok_or_else(|| Fail::invalid(c"callback is NULL"))?;
        let hits_out = args::opt_out(hits, c"hits is misaligned")?;
        let mut list: Vec<&[u8]> = Vec::new();
        if n > 0 {
            if keys.is_null() || key_lens.is_null() {
                return Err(Fail::invalid(c"keys or key_lens is NULL but n is not 0"));
            }
            if !keys.is_aligned() || !key_lens.is_aligned() || n > isize::MAX as usize / 8 {
                return Err(Fail::invalid(c"keys or key_lens is misaligned, or n is too large"));
            }
            // SAFETY: non-NULL, aligned, `n` readable elements per the contract.
            let (ptrs, lens) =
                unsafe { (std::slice::from_raw_parts(keys, n), std::slice::from_raw_parts(key_lens, n)) };
            list.reserve_exact(n);
            for (&p, &l) in ptrs.iter().zip(lens) {
                // SAFETY: each key points to its length of readable bytes per the contract.
                list.push(unsafe { args::key(p, l) }?);
            }
        }
        let mut found = 0usize;
        h.cache.get_many_with(&list, |i, item| {
            found += 1;
            let v = view(&item);
            // SAFETY: `v` borrows the item, alive under the shard lock for the call.
            unsafe { cb(user_data, i, &v) };
        });
        // SAFETY: checked non-NULL and aligned; writable per the contract.
        unsafe { put_opt(hits_out, found) };
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_with(cache, body) }
}

/// `SEGCACHE_OK` if `key` is present (and not expired), `SEGCACHE_NOT_FOUND` if not.
/// Copies nothing; the engine may count it as a read in the stats.
/// Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn segcache_contains(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe {
        run_keyed(
            cache,
            key,
            key_len,
            |h, key| {
                if h.cache.contains(key) {
                    Ok(())
                } else {
                    Err(Fail::of(SEGCACHE_NOT_FOUND))
                }
            },
        )
    }
}

/// Sets the item's TTL to `ttl` seconds (0: never expires) and reads it in one step (memcached
/// `gat`). Buffer rules as in `segcache_get`; on `SEGCACHE_BUFFER_TOO_SMALL` the TTL was still
/// changed. `SEGCACHE_NOT_FOUND` on a miss.
/// Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// As for `segcache_get`.
#[no_mangle]
pub unsafe extern "C" fn segcache_get_and_touch(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    ttl: u32,
    buf: *mut u8,
    buf_len: usize,
    value_len: *mut usize,
    meta: *mut segcache_meta_t,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        // SAFETY: the caller's contract.
        let dest = unsafe { Dest::check(buf, buf_len, value_len, meta) }?;
        let item =
            h.cache.get_and_touch(key, Duration::from_secs(ttl.into())).ok_or_else(|| Fail::of(SEGCACHE_NOT_FOUND))?;
        let secs = ttl_secs(item.ttl);
        let now = h.cache.now();
        let m = segcache_meta_t {
            cas: item.cas,
            flags: item.flags,
            ttl: secs,
            expire_at: if secs == 0 { 0 } else { now.saturating_add(secs) },
        };
        // SAFETY: out-pointers checked above.
        copied(Some(unsafe { dest.deliver(&item.value, || m) }))
    };
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}
