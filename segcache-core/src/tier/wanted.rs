//! The keys that reads found on flash and want back in DRAM. A read holds the engine shared and
//! cannot store, so it leaves the key here; the shard's next keyed write, which holds it
//! exclusively, brings the items back (`Segcache::promote_wanted`).
//!
//! The list is bounded, and a read that finds it full leaves its key out: a promotion is a
//! hint, and a hot item is read again soon enough to ask once more.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

/// Keys at most in the list.
const MAX_KEYS: usize = 64;

#[derive(Debug, Default)]
pub(crate) struct Wanted {
    keys: Mutex<Vec<(u64, Box<[u8]>)>>,
    /// The list holds a key: a relaxed load tells a writer whether to look, without the mutex.
    any: AtomicBool,
}

impl Wanted {
    /// Asks for `key` (hash `h`) to come back to DRAM; `false` when the list was full or held it already.
    pub(crate) fn push(&self, h: u64, key: &[u8]) -> bool {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if keys.len() >= MAX_KEYS || keys.iter().any(|(kh, k)| *kh == h && **k == *key) {
            return false;
        }
        keys.push((h, key.into()));
        self.any.store(true, Relaxed);
        true
    }

    /// Whether any key waits.
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.any.load(Relaxed)
    }

    /// Every key that waits, oldest first; the list is left empty.
    pub(crate) fn take(&mut self) -> Vec<(u64, Box<[u8]>)> {
        *self.any.get_mut() = false;
        std::mem::take(self.keys.get_mut().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_wait_once_each_up_to_the_bound_and_leave_together() {
        let mut w = Wanted::default();
        assert!(!w.any());
        assert!(w.push(1, b"a"));
        assert!(!w.push(1, b"a"), "a key already waiting is not added twice");
        assert!(w.push(1, b"b"), "another key of the same hash is");
        for i in 2..MAX_KEYS as u64 {
            assert!(w.push(i, b"k"));
        }
        assert!(!w.push(999, b"z"), "a full list takes no more");
        assert!(w.any());
        let keys = w.take();
        assert_eq!(keys.len(), MAX_KEYS);
        assert_eq!((keys[0].0, &*keys[0].1), (1, &b"a"[..]));
        assert!(!w.any() && w.take().is_empty());
    }
}
