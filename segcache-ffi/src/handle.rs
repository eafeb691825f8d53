//! The opaque handle `segcache_t`: what a pointer from `segcache_open` points to, and how a live
//! one is told from a closed or foreign one. It depends on no other module of the crate, so that
//! argument checks (`args`), the call wrapper (`guard`) and opening (`open`) can all use it.

use std::sync::Arc;

use segcache_core::{ManualClock, SharedCache};

/// Marks a live handle; cleared when the handle is closed so that a stale copy of the pointer is
/// more likely to be refused than used.
pub(crate) const MAGIC: u64 = 0x5345_4743_4143_4845; // "SEGCACHE"

/// A cache: an opaque handle from `segcache_open`, released by `segcache_close`.
///
/// Thread safety: every function except `segcache_close` may be called on the same handle from
/// any number of threads at once (reads of one shard run in parallel; writes lock one shard).
///
/// Processes: a handle belongs to the process that opened it. In a `fork()` child every call on
/// an inherited handle returns `SEGCACHE_FORKED`, reads included; `segcache_close` there frees it
/// without touching the cache or its persistence file. Open a new cache in the child instead.
/// A handle opened with `multi_process` is the exception: a child joins the cache at its first
/// call, and its `segcache_close` leaves the cache as any other process's does.
pub struct segcache_t {
    pub(crate) magic: u64,
    pub(crate) cache: SharedCache,
    /// Set when the cache was opened with a manual clock (`manual_clock_start != 0`).
    pub(crate) clock: Option<Arc<ManualClock>>,
}

impl segcache_t {
    #[inline(always)]
    pub(crate) fn is_live(&self) -> bool {
        // Volatile: the compiler must not assume the value from an earlier read (close writes it).
        // SAFETY: `self.magic` is a valid, aligned u64 inside a live reference.
        unsafe { std::ptr::read_volatile(&self.magic) == MAGIC }
    }
}
