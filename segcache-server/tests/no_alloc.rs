//! The hot path allocates nothing: once a connection's buffers are warm, retrieval requests
//! (get, gets, mg, multi-get, misses) run without a single heap allocation. Counted with a
//! global allocator wrapper, so this file holds only this test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use segcache_core::Builder;
use segcache_server::{Ctx, Session, Settings, Shared};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn retrieval_requests_do_not_allocate() {
    let cache = Builder::new().heap_size(8 << 20).segment_size(1 << 20).build_shared().unwrap();
    let shared = Shared::new(cache, Settings { threads: 1, ..Settings::default() });
    let ctx = Ctx::new(&shared, 0);
    let mut session = Session::new();
    let mut out = Vec::with_capacity(1 << 16);
    let setup = b"set k1 0 0 5\r\nhello\r\nset k2 7 0 3\r\nabc\r\n";
    assert_eq!(session.process(setup, &mut out, &ctx).consumed, setup.len());
    let hot: &[u8] =
        b"get k1\r\ngets k2\r\nget k1 k2 missing\r\nmg k1 v f c t s k Oxyz\r\nmg missing v\r\nmn\r\nversion\r\n";
    // Warm up: the output buffer reaches its working size.
    out.clear();
    session.process(hot, &mut out, &ctx);
    let expected = out.clone();
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..1000 {
        out.clear();
        let p = session.process(hot, &mut out, &ctx);
        assert_eq!(p.consumed, hot.len());
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(out, expected);
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 0, "allocations on the retrieval path");
}
