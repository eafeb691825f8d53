//! The entry points called from Rust through the rlib, as C would call them: statuses, the
//! per-thread last error, and that a panic comes back as SEGCACHE_PANIC.

use std::ffi::CStr;
use std::ptr;

use segcache::*;
use segcache_status_t::*;

fn last_error() -> String {
    // SAFETY: segcache_last_error always returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(segcache_last_error()) }.to_string_lossy().into_owned()
}

fn open() -> *mut segcache_t {
    let mut cfg = std::mem::MaybeUninit::<segcache_config_t>::uninit();
    // SAFETY: valid pointers to local storage.
    unsafe {
        assert_eq!(segcache_config_default(cfg.as_mut_ptr()), SEGCACHE_OK);
        let mut cfg = cfg.assume_init();
        cfg.heap_size = 4 << 20;
        cfg.segment_size = 256 << 10;
        cfg.shards = 2;
        let mut h = ptr::null_mut();
        assert_eq!(segcache_open(&cfg, &mut h), SEGCACHE_OK);
        h
    }
}

#[test]
fn round_trip_and_statuses() {
    let h = open();
    let mut buf = [0u8; 8];
    let mut len = 0usize;
    // SAFETY: live handle, valid buffers.
    unsafe {
        assert_eq!(segcache_set(h, b"k".as_ptr(), 1, b"value".as_ptr(), 5, 3, 0), SEGCACHE_OK);
        assert_eq!(segcache_get(h, b"k".as_ptr(), 1, buf.as_mut_ptr(), 8, &mut len, ptr::null_mut()), SEGCACHE_OK);
        assert_eq!(&buf[..len], b"value");
        assert_eq!(
            segcache_get(h, b"k".as_ptr(), 1, buf.as_mut_ptr(), 2, &mut len, ptr::null_mut()),
            SEGCACHE_BUFFER_TOO_SMALL
        );
        assert_eq!(len, 5);
        assert_eq!(
            segcache_get(h, b"x".as_ptr(), 1, buf.as_mut_ptr(), 8, &mut len, ptr::null_mut()),
            SEGCACHE_NOT_FOUND
        );
        assert_eq!(last_error(), "not found");
        assert_eq!(segcache_set(h, ptr::null(), 1, ptr::null(), 0, 0, 0), SEGCACHE_INVALID_ARGUMENT);
        assert_eq!(last_error(), "key is NULL");
        assert_eq!(segcache_close(h), SEGCACHE_OK);
    }
}

#[test]
fn panic_becomes_a_status() {
    assert_eq!(segcache_debug_panic(), SEGCACHE_PANIC);
    assert!(last_error().contains("segcache_debug_panic was called"), "{}", last_error());
}

#[test]
fn last_error_is_per_thread() {
    // SAFETY: NULL handle is refused before any dereference.
    assert_eq!(unsafe { segcache_flush(ptr::null()) }, SEGCACHE_INVALID_ARGUMENT);
    let other = std::thread::spawn(|| {
        let before = last_error();
        // SAFETY: as above.
        assert_eq!(unsafe { segcache_len(ptr::null(), ptr::null_mut()) }, SEGCACHE_INVALID_ARGUMENT);
        (before, last_error())
    })
    .join()
    .unwrap();
    assert_eq!(other.0, "");
    assert_eq!(other.1, "cache handle is NULL");
    assert_eq!(last_error(), "cache handle is NULL");
}

#[test]
fn strerror_accepts_any_int() {
    let past_last = segcache_status_t::ALL.len() as i32;
    for v in [-1, past_last, i32::MAX, i32::MIN] {
        // SAFETY: static string.
        assert_eq!(unsafe { CStr::from_ptr(segcache_strerror(v)) }.to_str().unwrap(), "unknown status");
    }
    // SAFETY: static string.
    assert_eq!(unsafe { CStr::from_ptr(segcache_strerror(0)) }.to_str().unwrap(), "ok");
}

/// The fields of `segcache_stats_t` that C programs were first built against keep their
/// offsets: 22 counters and gauges of 8 bytes, then the policy; later fields follow it.
#[test]
fn stats_fields_keep_their_offsets() {
    use std::mem::offset_of;
    assert_eq!(offset_of!(segcache_stats_t, items), 0);
    assert_eq!(offset_of!(segcache_stats_t, merged_items), 18 * 8);
    assert_eq!(offset_of!(segcache_stats_t, flushes), 19 * 8);
    assert_eq!(offset_of!(segcache_stats_t, shards), 21 * 8);
    assert_eq!(offset_of!(segcache_stats_t, policy), 22 * 8);
    assert!(offset_of!(segcache_stats_t, flash_items) > offset_of!(segcache_stats_t, policy));
}
