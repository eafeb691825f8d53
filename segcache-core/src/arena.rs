//! Buffers that a read through `&self` hands out: `Segcache::get` returns an item that borrows the
//! engine, so the bytes read from flash (or a large item's value, assembled from its chunks) must
//! live as long as that borrow. They are kept until the next call that holds the engine
//! exclusively (`clear`), when no such borrow can be alive.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

/// Most buffers held between two exclusive calls; a flash hit past it is served as a miss, so a
/// long run of reads without a write holds bounded memory.
const MAX_HELD: usize = 1 << 16;
/// Most bytes held between two exclusive calls.
const MAX_BYTES: usize = 64 << 20;

#[derive(Debug)]
pub(crate) struct Arena {
    held: Mutex<(Vec<Vec<u8>>, usize)>,
    /// Most bytes held (`MAX_BYTES` unless made `with_limit`).
    max_bytes: usize,
    /// Something is held: a relaxed load tells a writer whether `clear` has work, without the
    /// mutex.
    used: AtomicBool,
}

impl Default for Arena {
    fn default() -> Self {
        Arena::with_limit(MAX_BYTES)
    }
}

impl Arena {
    /// An arena that holds at most `max_bytes` between two exclusive calls.
    pub(crate) fn with_limit(max_bytes: usize) -> Arena {
        Arena { held: Mutex::default(), max_bytes, used: AtomicBool::new(false) }
    }

    /// Whether anything is held since the last `clear`.
    #[inline(always)]
    pub(crate) fn in_use(&self) -> bool {
        self.used.load(Relaxed)
    }

    /// Keeps `bytes` until `clear` and returns them, borrowed for as long as the arena is; `None`
    /// when the arena is full.
    pub(crate) fn hold(&self, mut bytes: Vec<u8>) -> Option<&[u8]> {
        // A read's buffer has whole blocks' room; only the record is kept.
        bytes.shrink_to_fit();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.0.len() >= MAX_HELD || held.1 + bytes.len() > self.max_bytes {
            return None;
        }
        self.used.store(true, Relaxed);
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        held.1 += len;
        held.0.push(bytes);
        // SAFETY: a `Vec`'s buffer stays where it is when the `Vec` moves (into `held`, or as
        // `held` grows) and is never written again; it is freed only by `clear` or the arena's
        // drop, which both need the arena exclusively, so not while this shared borrow lives.
        Some(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// Frees what was held: the caller holds the arena exclusively, so no buffer is borrowed.
    #[inline]
    pub(crate) fn clear(&mut self) {
        let held = self.held.get_mut().unwrap_or_else(PoisonError::into_inner);
        if !held.0.is_empty() {
            *held = (Vec::new(), 0);
        }
        *self.used.get_mut() = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_bytes_stay_put_while_more_are_held_and_a_full_arena_holds_no_more() {
        let mut arena = Arena::default();
        let first = arena.hold(b"first".to_vec()).unwrap();
        let views: Vec<&[u8]> = (0..100).map(|i| arena.hold(vec![i as u8; 16]).unwrap()).collect();
        assert_eq!(first, b"first");
        assert!(views.iter().enumerate().all(|(i, v)| v.iter().all(|&b| b == i as u8)));
        assert!(arena.hold(vec![0; MAX_BYTES]).is_none());
        assert!(arena.in_use());
        arena.clear();
        assert!(!arena.in_use());
        assert!(arena.hold(vec![0; MAX_BYTES]).is_some());
    }
}
