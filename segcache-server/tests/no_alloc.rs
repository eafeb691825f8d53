//! The hot path allocates nothing: once a connection's buffers are warm, retrieval requests
//! (text: get, gets, mg, multi-get, misses; binary: GET, GETK and their quiet forms, hits and
//! misses, NOOP, VERSION) run without a single heap allocation. Counted with a global allocator
//! wrapper, per thread, so that the tests of this file may run at once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use segcache_core::Builder;
use segcache_server::protocol::binary::{op, request as packet};
use segcache_server::{Ctx, Session, Settings, Shared};

struct Counting;

thread_local! {
    // Const-initialised, no destructor: reading them never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    if COUNTING.get() {
        ALLOCS.set(ALLOCS.get() + 1);
    }
}

/// Runs `f` and returns how many allocations this thread made during it.
fn allocations(f: impl FnOnce()) -> usize {
    ALLOCS.set(0);
    COUNTING.set(true);
    f();
    COUNTING.set(false);
    ALLOCS.get()
}

// SAFETY: forwards every call to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
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
    let n = allocations(|| {
        for _ in 0..1000 {
            out.clear();
            let p = session.process(hot, &mut out, &ctx);
            assert_eq!(p.consumed, hot.len());
        }
    });
    assert_eq!(out, expected);
    assert_eq!(n, 0, "allocations on the retrieval path");
}

#[test]
fn binary_retrieval_requests_do_not_allocate() {
    let cache = Builder::new().heap_size(8 << 20).segment_size(1 << 20).build_shared().unwrap();
    let shared = Shared::new(cache, Settings { threads: 1, ..Settings::default() });
    let ctx = Ctx::new(&shared, 0);
    let mut session = Session::new();
    let mut out = Vec::with_capacity(1 << 16);
    let setup = [
        packet(op::SET, b"k1", &[0; 8], b"hello", 0, 0),
        packet(op::SET, b"k2", &[0, 0, 0, 7, 0, 0, 0, 0], b"abc", 0, 0),
    ]
    .concat();
    assert_eq!(session.process(&setup, &mut out, &ctx).consumed, setup.len());
    let hot = [
        packet(op::GET, b"k1", &[], &[], 1, 0),
        packet(op::GETK, b"k2", &[], &[], 2, 0),
        packet(op::GETQ, b"k1", &[], &[], 3, 0),
        packet(op::GETKQ, b"missing", &[], &[], 4, 0),
        packet(op::GET, b"missing", &[], &[], 5, 0),
        packet(op::GETK, b"missing", &[], &[], 6, 0),
        packet(op::VERSION, &[], &[], &[], 7, 0),
        packet(op::NOOP, &[], &[], &[], 8, 0),
    ]
    .concat();
    // Warm up: the output buffer reaches its working size.
    out.clear();
    session.process(&hot, &mut out, &ctx);
    let expected = out.clone();
    let n = allocations(|| {
        for _ in 0..1000 {
            out.clear();
            let p = session.process(&hot, &mut out, &ctx);
            assert_eq!(p.consumed, hot.len());
        }
    });
    assert_eq!(out, expected);
    assert_eq!(n, 0, "allocations on the binary retrieval path");
}
