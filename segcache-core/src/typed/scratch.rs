//! Per-thread buffers that the typed cache encodes keys into and copies values out to, so that
//! a typed read allocates nothing of its own.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Past this capacity a buffer is dropped after use: one large key or value does not pin its
/// memory to the thread.
const KEEP_CAPACITY: usize = 4096;

thread_local! {
    pub(crate) static KEY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    pub(crate) static VALUE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with `slot`'s buffer, cleared; with a fresh one when `f` runs inside another use of
/// the same slot (a loader or a `Deserialize` that calls the cache again).
pub(crate) fn with<R>(slot: &'static LocalKey<RefCell<Vec<u8>>>, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    slot.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let r = f(&mut buf);
            if buf.capacity() > KEEP_CAPACITY {
                *buf = Vec::new();
            }
            r
        }
        Err(_) => f(&mut Vec::new()),
    })
}
