//! The binary protocol's hot path allocates nothing either: once a connection's buffers are
//! warm, GET, GETK and their quiet forms (hits and misses), NOOP and VERSION run without a
//! single heap allocation. Counted with a global allocator wrapper, so this file holds only
//! this test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use segcache_core::Builder;
use segcache_server::protocol::binary::op;
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

fn packet(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
    let mut v = vec![0x80, opcode];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    v.extend_from_slice(&opaque.to_be_bytes());
    v.extend_from_slice(&0u64.to_be_bytes());
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

#[test]
fn binary_retrieval_requests_do_not_allocate() {
    let cache = Builder::new().heap_size(8 << 20).segment_size(1 << 20).build_shared().unwrap();
    let shared = Shared::new(cache, Settings { threads: 1, ..Settings::default() });
    let ctx = Ctx::new(&shared, 0);
    let mut session = Session::new();
    let mut out = Vec::with_capacity(1 << 16);
    let setup =
        [packet(op::SET, b"k1", &[0; 8], b"hello", 0), packet(op::SET, b"k2", &[0, 0, 0, 7, 0, 0, 0, 0], b"abc", 0)]
            .concat();
    assert_eq!(session.process(&setup, &mut out, &ctx).consumed, setup.len());
    let hot = [
        packet(op::GET, b"k1", &[], &[], 1),
        packet(op::GETK, b"k2", &[], &[], 2),
        packet(op::GETQ, b"k1", &[], &[], 3),
        packet(op::GETKQ, b"missing", &[], &[], 4),
        packet(op::GET, b"missing", &[], &[], 5),
        packet(op::GETK, b"missing", &[], &[], 6),
        packet(op::VERSION, &[], &[], &[], 7),
        packet(op::NOOP, &[], &[], &[], 8),
    ]
    .concat();
    // Warm up: the output buffer reaches its working size.
    out.clear();
    session.process(&hot, &mut out, &ctx);
    let expected = out.clone();
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..1000 {
        out.clear();
        let p = session.process(&hot, &mut out, &ctx);
        assert_eq!(p.consumed, hot.len());
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(out, expected);
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 0, "allocations on the binary retrieval path");
}
