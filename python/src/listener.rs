//! `Cache(eviction_listener=fn)`: telling a Python callable of each item that leaves the cache.
//!
//! The engine tells its listener of a removal while the item's shard is locked for writing, and
//! maybe with the GIL released (a large value's store). A Python callable cannot run there: it
//! needs the GIL, and it may call back into the cache. So the engine's listener only copies the
//! item into a queue of the calling thread, and `Cache::with` hands the queue to the callable
//! once the engine call returned, with no engine lock held and the GIL taken ([`deliver`]).

use std::cell::RefCell;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use segcache_core::{RemovalCause, RemovalListener};

/// A removed item, copied under the shard's lock, waiting for its callable.
struct Removal {
    to: Arc<Py<PyAny>>,
    key: Vec<u8>,
    value: Vec<u8>,
    cause: RemovalCause,
}

thread_local! {
    /// Removals this thread's current call made, in order.
    static PENDING: RefCell<Vec<Removal>> = const { RefCell::new(Vec::new()) };
}

/// The engine's listener for `callable`: queues a copy of each removed item on the thread that
/// removed it.
pub fn queueing(to: Arc<Py<PyAny>>) -> RemovalListener {
    RemovalListener::new(move |item, cause| {
        let r = Removal { to: Arc::clone(&to), key: item.key().to_vec(), value: item.value().to_vec(), cause };
        // `try_with`: a removal during the thread's teardown has no call left to deliver it.
        let _ = PENDING.try_with(|q| q.borrow_mut().push(r));
    })
}

/// Calls `fn(key, value, cause)` for each removal this thread queued, in order, with the GIL
/// held and no engine lock. An exception a callable raises goes to `sys.unraisablehook` (as
/// a weakref callback's does) and the next removal is told of all the same.
pub fn deliver() {
    if PENDING.with(|q| q.borrow().is_empty()) {
        return;
    }
    Python::attach(|py| loop {
        // Taken out before the callables run: a callable's own calls deliver what they remove.
        let batch = PENDING.with(|q| std::mem::take(&mut *q.borrow_mut()));
        if batch.is_empty() {
            return;
        }
        for r in batch {
            let to = r.to.bind(py);
            let args = (PyBytes::new(py, &r.key), PyBytes::new(py, &r.value), r.cause.name());
            if let Err(e) = to.call1(args) {
                e.write_unraisable(py, Some(to));
            }
        }
    })
}
