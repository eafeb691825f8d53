//! The item state of memcached's meta protocol: reads that report and claim it (stale, won,
//! fetched, last access), invalidation, stores with a caller-chosen CAS value, and a delete that
//! compares the CAS value.

use std::time::Duration;

use segcache_core::{Item, ReadOptions, StoreMode, StoreOptions};

use crate::args::{self, put, put_opt};
use crate::error::Fail;
use crate::guard::run_keyed;
use crate::handle::segcache_t;
use crate::status::segcache_status_t::{self, *};

/// How `segcache_get_ex` treats the item's state. All zero (or a NULL pointer) is a plain read.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct segcache_read_options_t {
    /// Claim the item's recache token if it is up for grabs (memcached's `mg` with its `W`/`Z`
    /// answers): the item is stale (see `segcache_invalidate`) or has less than `recache_below`
    /// seconds left, and no read took the token since it was stored or invalidated. Exactly one
    /// such read gets `won`; the others see `token_sent`.
    pub claim_token: bool,
    /// Leave the fetched bit and the access time as they are (memcached's `u`).
    pub no_update: bool,
    /// With `claim_token`: an item with less than this many seconds left to live is up for
    /// grabs too (memcached's `R`). 0: only stale items are.
    pub recache_below: u32,
}

/// What `segcache_get_ex` found of an item: its metadata and its state before this read.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct segcache_item_info_t {
    /// The CAS value, unique per item version (or the one given to `segcache_store`).
    pub cas: u64,
    /// The 32-bit client flags given when it was stored.
    pub flags: u32,
    /// Seconds left to live (at least 1); 0 when the item never expires.
    pub ttl: u32,
    /// Absolute expiry, Unix seconds of the cache's clock; 0 when the item never expires.
    pub expire_at: u32,
    /// Seconds since the item was last stored or read, before this read (memcached's `l`):
    /// refreshed at most once a minute, and coarse.
    pub last_access_secs: u32,
    /// The item was read before, since it was stored (memcached's `h`).
    pub fetched: bool,
    /// The item was marked stale by `segcache_invalidate` and not stored since (memcached's `X`).
    pub stale: bool,
    /// This read won the recache token: the caller should recompute the value and store it
    /// (memcached's `W`).
    pub won: bool,
    /// Another read already holds the recache token (memcached's `Z`).
    pub token_sent: bool,
}

/// The condition a `segcache_store` puts on the key's current item, for
/// `segcache_store_options_t.mode`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum segcache_store_mode_t {
    /// Store whatever is there (as `segcache_set`).
    SEGCACHE_STORE_SET = 0,
    /// Store only if the key is absent (as `segcache_add`).
    SEGCACHE_STORE_ADD = 1,
    /// Store only if the key is present (as `segcache_replace`).
    SEGCACHE_STORE_REPLACE = 2,
    /// Store only if the item's CAS value is `compare_cas` (as `segcache_cas`).
    SEGCACHE_STORE_CAS = 3,
}

/// How `segcache_store` stores. All zero (or a NULL pointer) is a plain `segcache_set`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct segcache_store_options_t {
    /// A `segcache_store_mode_t` value (0: `SEGCACHE_STORE_SET`).
    pub mode: u32,
    /// With `SEGCACHE_STORE_CAS`: the CAS value the item must have.
    pub compare_cas: u64,
    /// The CAS value the new item takes (memcached's `E`), instead of the next one of the
    /// cache's counter; 0: the counter's. The caller then answers for its uniqueness.
    pub new_cas: u64,
    /// The writer holds the new item's recache token: reads that claim it see `token_sent` until
    /// the item is stored again or invalidated.
    pub won: bool,
    /// With `SEGCACHE_STORE_CAS`: when the item's CAS value is newer than `compare_cas`, store
    /// anyway, as a stale item that keeps the current TTL and token (memcached's `ms I`).
    pub invalidate: bool,
}

/// Whole seconds of `d`, saturated to `u32`.
#[inline(always)]
fn secs32(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

fn info_of(item: &Item<'_>) -> segcache_item_info_t {
    segcache_item_info_t {
        cas: item.cas(),
        flags: item.flags(),
        ttl: item.ttl().map_or(0, |d| secs32(d).max(1)),
        expire_at: item.expire_at().unwrap_or(0),
        last_access_secs: secs32(item.last_access()),
        fetched: item.fetched(),
        stale: item.is_stale(),
        won: item.won(),
        token_sent: item.token_sent(),
    }
}

/// `Some(x)` unless `x` is 0 (the C API's "none" for CAS values and seconds).
#[inline(always)]
fn nonzero(x: u64) -> Option<u64> {
    (x != 0).then_some(x)
}

/// Looks `key` up as `segcache_get` does, with `opts` for the item's state, and reports the
/// state in `*info`: whether the item is stale, was fetched before, when it was last accessed,
/// and whether this read won its recache token (stale-while-revalidate: after
/// `segcache_invalidate`, the first read with `opts->claim_token` gets `won` and should
/// recompute the value and store it; the others get `stale` and `token_sent` and may serve the
/// stale value meanwhile).
///
/// - Hit and `buf_len` large enough: `SEGCACHE_OK`, the value is in `buf[0..*value_len]`.
/// - Hit but `buf_len` too small: `SEGCACHE_BUFFER_TOO_SMALL`, the needed length in
///   `*value_len`, `buf` untouched. The read still happened: `*info` is written, and a token
///   this read won is taken (`info->won`) even so; retry without `claim_token` if needed.
/// - Miss: `SEGCACHE_NOT_FOUND`, nothing written.
///
/// `opts` may be NULL (a plain read); `info` may be NULL (not wanted); `buf` may be NULL with
/// `buf_len` 0 to ask the length.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes; `opts` is NULL or
/// readable; `buf` points to `buf_len` writable bytes (or is NULL with 0); `value_len` and `info`
/// are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_get_ex(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    opts: *const segcache_read_options_t,
    buf: *mut u8,
    buf_len: usize,
    value_len: *mut usize,
    info: *mut segcache_item_info_t,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        // SAFETY: the caller's contract: `opts` is NULL or readable.
        let o = unsafe { args::opt_in(opts, c"opts is misaligned") }?.unwrap_or_default();
        // SAFETY: the caller's contract: `buf` points to `buf_len` writable bytes.
        let dest = unsafe { args::buffer(buf, buf_len) }?;
        let len_out = args::out(value_len, c"value_len is NULL or misaligned")?;
        let info_out = args::opt_out(info, c"info is misaligned")?;
        let ro = ReadOptions {
            claim_token: o.claim_token,
            recache_below: nonzero(u64::from(o.recache_below)).map(Duration::from_secs),
            no_update: o.no_update,
        };
        let copied = h.cache.get_with_options(key, ro, |item| {
            let v = item.value();
            // SAFETY: out-pointers checked above, writable per the contract.
            unsafe {
                put(len_out, v.len());
                put_opt(info_out, info_of(&item));
            }
            match dest.get_mut(..v.len()) {
                Some(d) => {
                    d.copy_from_slice(v);
                    true
                }
                None => false,
            }
        });
        match copied {
            Some(true) => Ok(()),
            Some(false) => Err(Fail::of(SEGCACHE_BUFFER_TOO_SMALL)),
            None => Err(Fail::of(SEGCACHE_NOT_FOUND)),
        }
    };
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}

/// Stores `value` under `key` with client `flags` and a TTL of `ttl` seconds (0: never
/// expires), as `opts` says: the condition on the current item (`mode`), a caller-chosen CAS
/// value (`new_cas`), the recache token (`won`), and `invalidate`. Writes the CAS value the item
/// got to `*cas_out` (optional).
///
/// Returns `SEGCACHE_OK`; `SEGCACHE_NOT_STORED` (`ADD` on a present key, `REPLACE` on an absent
/// one), `SEGCACHE_EXISTS` / `SEGCACHE_NOT_FOUND` (`CAS`: changed / absent), or as `segcache_set`.
/// An unknown `mode` is `SEGCACHE_INVALID_ARGUMENT`. `opts` may be NULL: a plain set.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread.
///
/// # Safety
/// `cache` is NULL or a live handle; `key`/`value` point to `key_len`/`value_len` readable bytes
/// (`value` may be NULL with 0); `opts` is NULL or readable; `cas_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_store(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: u32,
    ttl: u32,
    opts: *const segcache_store_options_t,
    cas_out: *mut u64,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        // SAFETY: the caller's contract: `value` points to `value_len` readable bytes.
        let value = unsafe { args::bytes(value, value_len, c"value is NULL but value_len is not 0") }?;
        // SAFETY: the caller's contract: `opts` is NULL or readable.
        let o = unsafe { args::opt_in(opts, c"opts is misaligned") }?.unwrap_or_default();
        let out = args::opt_out(cas_out, c"cas_out is misaligned")?;
        let mode = match o.mode {
            0 => StoreMode::Set,
            1 => StoreMode::Add,
            2 => StoreMode::Replace,
            3 => StoreMode::Cas(o.compare_cas),
            m => return Err(Fail::owned(SEGCACHE_INVALID_ARGUMENT, format!("unknown store mode {m}"))),
        };
        let so = StoreOptions { cas: nonzero(o.new_cas), won: o.won, invalidate: o.invalidate };
        let ttl = Duration::from_secs(u64::from(ttl));
        let cas = h.cache.store_with(key, value, flags, ttl, mode, so)?;
        // SAFETY: checked aligned; writable per the contract.
        unsafe { put_opt(out, cas) };
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}

/// Marks the item stale (memcached's `md key I`): its value and flags stay, it takes a new CAS
/// value (`new_cas`, or the cache's next when 0), and `ttl` seconds to live when `ttl >= 0`
/// (0: never expires; -1 keeps its TTL). The next read with `claim_token` wins the recache
/// token (see `segcache_get_ex`); a store makes it fresh again. With `compare_cas` non-zero,
/// only if the item's CAS value is that one. Writes the new CAS value to `*cas_out` (optional).
///
/// Returns `SEGCACHE_OK`, `SEGCACHE_NOT_FOUND` (absent), `SEGCACHE_EXISTS` (`compare_cas`
/// differs), or `SEGCACHE_INVALID_ARGUMENT` (`ttl` below -1, or a bad pointer).
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes; `cas_out` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_invalidate(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    ttl: i64,
    compare_cas: u64,
    new_cas: u64,
    cas_out: *mut u64,
) -> segcache_status_t {
    let body = |h: &segcache_t, key: &[u8]| {
        let out = args::opt_out(cas_out, c"cas_out is misaligned")?;
        let ttl = match ttl {
            -1 => None,
            t => Some(Duration::from_secs(
                u64::try_from(t).map_err(|_| Fail::invalid(c"ttl is below -1 (-1 keeps the TTL)"))?,
            )),
        };
        let cas = h.cache.invalidate(key, ttl, nonzero(compare_cas), nonzero(new_cas))?;
        // SAFETY: checked aligned; writable per the contract.
        unsafe { put_opt(out, cas) };
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, body) }
}

/// Removes `key` only if its CAS value is `cas` (memcached's `md key C<cas>`):
/// `SEGCACHE_EXISTS` when it differs (nothing removed), `SEGCACHE_NOT_FOUND` when absent.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
/// Thread safety: any thread.
///
/// # Safety
/// `cache` is NULL or a live handle; `key` points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn segcache_delete_cas(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    cas: u64,
) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe { run_keyed(cache, key, key_len, |h, key| Ok(h.cache.delete_cas(key, cas)?)) }
}
