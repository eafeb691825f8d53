//! An oversized value costs no allocation of its size: every store through the C API refuses it
//! by its length (`SEGCACHE_TOO_LARGE`) before anything is copied. The old `segcache_append`
//! allocated the old value plus the argument first (a 1 GiB argument took 1 GiB; a larger one
//! aborted the process).
//!
//! One test in this binary, so that the counting allocator sees only its own thread's calls.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use segcache::*;
use segcache_status_t::*;

/// The system allocator, recording the largest single request since the last reset.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to `System` unchanged; the counter is a side effect only.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Largest = Largest;

#[test]
fn oversized_values_are_refused_without_an_allocation_of_their_size() {
    const SEGMENT: usize = 256 << 10;
    let mut cfg = std::mem::MaybeUninit::<segcache_config_t>::uninit();
    let mut h = ptr::null_mut();
    // SAFETY: valid pointers to local storage.
    unsafe {
        assert_eq!(segcache_config_default(cfg.as_mut_ptr()), SEGCACHE_OK);
        let mut cfg = cfg.assume_init();
        cfg.heap_size = 4 << 20;
        cfg.segment_size = SEGMENT;
        cfg.shards = 1;
        assert_eq!(segcache_open(&cfg, &mut h), SEGCACHE_OK);
    }
    // Eight segments' worth: the largest allocation a refusal may make stays far below it.
    let big = vec![b'x'; 8 * SEGMENT];
    let (k, v) = (b"k", b"old");
    // SAFETY: a live handle; every pointer is valid for its length.
    unsafe {
        assert_eq!(segcache_set(h, k.as_ptr(), 1, v.as_ptr(), 3, 5, 0), SEGCACHE_OK);
        LARGEST.store(0, Relaxed);
        let cas = 1;
        let refused = [
            segcache_append(h, k.as_ptr(), 1, big.as_ptr(), big.len()),
            segcache_prepend(h, k.as_ptr(), 1, big.as_ptr(), big.len()),
            segcache_append(h, b"absent".as_ptr(), 6, big.as_ptr(), big.len()),
            segcache_set(h, k.as_ptr(), 1, big.as_ptr(), big.len(), 0, 0),
            segcache_set(h, b"new".as_ptr(), 3, big.as_ptr(), big.len(), 0, 0),
            segcache_add(h, b"new".as_ptr(), 3, big.as_ptr(), big.len(), 0, 0),
            segcache_replace(h, k.as_ptr(), 1, big.as_ptr(), big.len(), 0, 0),
            segcache_cas(h, k.as_ptr(), 1, big.as_ptr(), big.len(), 0, 0, cas),
        ];
        let largest = LARGEST.load(Relaxed);
        assert!(refused.iter().all(|&s| s == SEGCACHE_TOO_LARGE), "{refused:?}");
        assert!(largest < SEGMENT, "a refused store allocated {largest} bytes for a {} byte value", big.len());
        let mut buf = [0u8; 8];
        let mut len = 0usize;
        let mut meta = segcache_meta_t::default();
        let got = segcache_get(h, k.as_ptr(), 1, buf.as_mut_ptr(), 8, &mut len, &mut meta);
        assert_eq!(got, SEGCACHE_OK);
        assert_eq!((&buf[..len], meta.flags), (&b"old"[..], 5));
        assert_eq!(segcache_close(h), SEGCACHE_OK);
    }
}
