//! The calling thread's queue of eviction listener calls not made yet.
//!
//! The engine tells its listener of a removal while the item's shard is locked for writing. A C
//! callback there could not call back into the cache (the shard's lock is not reentrant), so the
//! listener (`listener`) only queues the call, with a copy of the item, on the thread that made
//! the removal; the entry point that caused it makes the queued calls after the engine returned
//! and every lock is released (`deliver_pending`, called by `guard::run_with`).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// A listener call, with what it tells.
pub(crate) type Call = Box<dyn FnOnce()>;

thread_local! {
    /// The calls this thread's current entry point queued, in order.
    static PENDING: RefCell<Vec<Call>> = const { RefCell::new(Vec::new()) };
    /// Above 0 while this thread runs a callback under a shard's lock (a compute's): queued calls
    /// then wait for the entry point that holds it.
    static UNDER_LOCK: Cell<u32> = const { Cell::new(0) };
}

/// Set once any call was queued: until then no entry point looks at its thread's queue.
static EVER_QUEUED: AtomicBool = AtomicBool::new(false);

/// Queues `call` on this thread (dropped if the thread is being torn down: no entry point is
/// left to make it).
pub(crate) fn queue(call: Call) {
    if !EVER_QUEUED.load(Relaxed) {
        EVER_QUEUED.store(true, Relaxed);
    }
    let _ = PENDING.try_with(|q| q.borrow_mut().push(call));
}

/// Makes this thread's queued calls, unless a shard's lock is held up the stack. The last error
/// is kept: a callback's own failing calls do not replace the message of the call it runs in.
#[inline(always)]
pub(crate) fn deliver_pending() {
    if EVER_QUEUED.load(Relaxed) {
        deliver_queued();
    }
}

#[inline(never)]
fn deliver_queued() {
    if UNDER_LOCK.with(Cell::get) > 0 {
        return;
    }
    // No unwind may reach C: a panic here (none is expected) drops the rest of the queue.
    let _ = std::panic::catch_unwind(deliver_all);
}

fn deliver_all() {
    loop {
        // Taken out before the calls run: a callback's own calls deliver what they remove.
        let batch = PENDING.with(|q| std::mem::take(&mut *q.borrow_mut()));
        if batch.is_empty() {
            return;
        }
        let kept = crate::error::take_last_error();
        batch.into_iter().for_each(|call| call());
        crate::error::set_last_error(kept);
    }
}

/// Runs `f` (a callback called under a shard's lock) with queued calls held back for the entry
/// point that holds the lock.
pub(crate) fn under_lock<R>(f: impl FnOnce() -> R) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            UNDER_LOCK.with(|n| n.set(n.get() - 1));
        }
    }
    UNDER_LOCK.with(|n| n.set(n.get() + 1));
    let _leave = Leave;
    f()
}
