//! S3-FIFO's ghost: fingerprints of keys recently dropped from the small pool, direct-mapped, so
//! that a key that returns soon after goes straight to the main pool.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

/// The ghost's entries, in the region so that processes sharing the cache share it. Empty under
/// other policies. Entries are single atomic words: a lost or overwritten fingerprint only moves
/// a key to the other pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ghost {
    entries: &'static [AtomicU32],
}

impl Ghost {
    /// `entries.len()` is zero or a power of two.
    pub(crate) fn new(entries: &'static [AtomicU32]) -> Ghost {
        debug_assert!(entries.len() & entries.len().wrapping_sub(1) == 0);
        Ghost { entries }
    }

    /// The entry of key hash `h`, and the fingerprint it holds when `h` is remembered (never 0,
    /// the empty entry).
    fn slot(&self, h: u64) -> Option<(usize, u32)> {
        let n = self.entries.len();
        (n > 0).then(|| (((h >> 20) as usize) & (n - 1), (h as u32) | 1))
    }

    /// Whether the key of hash `h` was dropped from the small pool lately.
    pub(crate) fn remembers(&self, h: u64) -> bool {
        self.slot(h).is_some_and(|(i, fp)| self.entries[i].load(Relaxed) == fp)
    }

    pub(crate) fn remember(&self, h: u64) {
        if let Some((i, fp)) = self.slot(h) {
            self.entries[i].store(fp, Relaxed);
        }
    }

    pub(crate) fn forget_all(&self) {
        self.entries.iter().for_each(|e| e.store(0, Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ghost(n: usize) -> Ghost {
        Ghost::new(Box::leak((0..n).map(|_| AtomicU32::new(0)).collect::<Vec<_>>().into_boxed_slice()))
    }

    #[test]
    fn remembers_a_key_until_one_with_the_same_entry_replaces_it() {
        let g = ghost(16);
        let (a, b) = (0x1234_5678_9abc_def0u64, 0x1234_5678_9abc_def0u64 ^ 0xff);
        assert!(!g.remembers(a));
        g.remember(a);
        assert!(g.remembers(a) && !g.remembers(b), "same entry, other fingerprint");
        g.remember(b);
        assert!(g.remembers(b) && !g.remembers(a));
        g.forget_all();
        assert!(!g.remembers(b));
    }

    #[test]
    fn an_empty_ghost_remembers_nothing() {
        let g = ghost(0);
        g.remember(7);
        assert!(!g.remembers(7));
    }
}
