//! Checks and conversions of the raw arguments C passes in. Each returns `INVALID_ARGUMENT` (or
//! `KEY_TOO_LONG`) with a message instead of trusting a NULL, empty or oversized input.

use std::ffi::CStr;

use crate::error::Fail;
use crate::handle::segcache_t;
use crate::status::segcache_status_t;
use crate::SEGCACHE_MAX_KEY_LEN;

/// The live handle behind `ptr`.
///
/// # Safety
/// `ptr` is NULL or points to memory readable as a `segcache_t` for the call (a handle from
/// `segcache_open` not yet closed). NULL, misaligned pointers and live objects that are not a
/// segcache handle (wrong magic) are refused; a freed handle cannot be detected reliably.
#[inline(always)]
pub(crate) unsafe fn handle<'a>(ptr: *const segcache_t) -> Result<&'a segcache_t, Fail> {
    if ptr.is_null() {
        return Err(Fail::invalid(c"cache handle is NULL"));
    }
    if !ptr.is_aligned() {
        return Err(Fail::invalid(c"cache handle is misaligned: not a segcache_t"));
    }
    // SAFETY: non-NULL and aligned; the caller promises it points to a segcache_t for the call.
    let h = unsafe { &*ptr };
    if !h.is_live() {
        return Err(Fail::invalid(c"cache handle is not a live segcache_t (closed or foreign)"));
    }
    Ok(h)
}

/// A key: non-NULL, 1 to `SEGCACHE_MAX_KEY_LEN` bytes.
///
/// # Safety
/// When `ptr` is non-NULL it points to `len` readable bytes that are not written during the call.
#[inline(always)]
pub(crate) unsafe fn key<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], Fail> {
    if ptr.is_null() {
        return Err(Fail::invalid(c"key is NULL"));
    }
    if len == 0 {
        return Err(Fail::invalid(c"key is empty (key_len is 0)"));
    }
    if len > SEGCACHE_MAX_KEY_LEN {
        return Err(Fail::owned(
            segcache_status_t::SEGCACHE_KEY_TOO_LONG,
            format!("key too long: {len} bytes, at most {SEGCACHE_MAX_KEY_LEN}"),
        ));
    }
    // SAFETY: non-NULL, len <= 250 (so within isize::MAX), readable per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A byte string that may be empty; NULL is allowed only when `len` is 0.
///
/// # Safety
/// When `len > 0`, `ptr` points to `len` readable bytes not written during the call.
#[inline(always)]
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &'static CStr) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Fail::invalid(what));
    }
    if len > isize::MAX as usize {
        return Err(Fail::invalid(c"length exceeds the address space"));
    }
    // SAFETY: non-NULL, len within isize::MAX, readable per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A writable buffer that may be empty; NULL is allowed only when `len` is 0.
///
/// # Safety
/// When `len > 0`, `ptr` points to `len` writable bytes not otherwise accessed during the call.
#[inline(always)]
pub(crate) unsafe fn buffer<'a>(ptr: *mut u8, len: usize) -> Result<&'a mut [u8], Fail> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Fail::invalid(c"buf is NULL but buf_len is not 0"));
    }
    if len > isize::MAX as usize {
        return Err(Fail::invalid(c"buf_len exceeds the address space"));
    }
    // SAFETY: non-NULL, len within isize::MAX, writable and unaliased per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// A required out-pointer: non-NULL and aligned.
#[inline(always)]
pub(crate) fn out<T>(ptr: *mut T, what: &'static CStr) -> Result<*mut T, Fail> {
    if ptr.is_null() || !ptr.is_aligned() {
        return Err(Fail::invalid(what));
    }
    Ok(ptr)
}

/// An optional out-pointer: NULL means "not wanted"; misaligned is refused.
#[inline(always)]
pub(crate) fn opt_out<T>(ptr: *mut T, what: &'static CStr) -> Result<Option<*mut T>, Fail> {
    if ptr.is_null() {
        return Ok(None);
    }
    if !ptr.is_aligned() {
        return Err(Fail::invalid(what));
    }
    Ok(Some(ptr))
}

/// Writes `v` through an out-pointer checked by [`out`] / [`opt_out`].
///
/// # Safety
/// `ptr` is valid for a write of `T` (non-NULL and aligned were checked; the caller vouches for
/// the rest).
#[inline(always)]
pub(crate) unsafe fn put<T>(ptr: *mut T, v: T) {
    // SAFETY: see the function's contract; `write` does not drop the old (maybe uninitialised) value.
    unsafe { ptr.write(v) }
}

/// Writes `v` through an optional out-pointer checked by [`opt_out`]; nothing when it is `None`.
///
/// # Safety
/// As for [`put`] when `ptr` is `Some`.
#[inline(always)]
pub(crate) unsafe fn put_opt<T>(ptr: Option<*mut T>, v: T) {
    if let Some(p) = ptr {
        // SAFETY: the function's contract.
        unsafe { put(p, v) }
    }
}

/// An optional in-pointer to a struct, copied: NULL gives `None`; misaligned is refused.
///
/// # Safety
/// When non-NULL, `ptr` points to a readable, initialised `T`.
#[inline(always)]
pub(crate) unsafe fn opt_in<T: Copy>(ptr: *const T, what: &'static CStr) -> Result<Option<T>, Fail> {
    if ptr.is_null() {
        return Ok(None);
    }
    if !ptr.is_aligned() {
        return Err(Fail::invalid(what));
    }
    // SAFETY: non-NULL and aligned; readable and initialised per the caller's contract.
    Ok(Some(unsafe { ptr.read() }))
}
