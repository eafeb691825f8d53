//! Faulting the heap in ahead of the writers, from a thread of the caller's.

use crate::args::{self, put_opt};
use crate::guard::run_with;
use crate::handle::segcache_t;
use crate::status::segcache_status_t;

/// Faults in the next `per_shard` free segments of each shard, the ones the writers take next,
/// so that no write waits for a segment's first page faults (milliseconds on some virtual
/// machines): call it in a loop from a thread of its own, sleeping a few milliseconds whenever
/// `*faulted` is 0. Writes how many segments it faulted in now to `*faulted`, and to `*done`
/// whether there is nothing left to do (every segment was used or faulted in once, the cache
/// was opened with `prefault`, or the kernel cannot populate memory: Linux before 5.14); then
/// the thread can end. Both outputs are optional. Thread safety: any thread; it holds each
/// shard's lock shared for a moment only, and none while it faults memory in.
/// Ownership: every pointer argument is borrowed for the call only.
///
/// # Safety
/// `cache` is NULL or a live handle; `faulted` and `done` are each NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_touch_ahead(
    cache: *const segcache_t,
    per_shard: usize,
    faulted: *mut usize,
    done: *mut bool,
) -> segcache_status_t {
    let body = |h: &segcache_t| {
        let faulted = args::opt_out(faulted, c"faulted is misaligned")?;
        let done = args::opt_out(done, c"done is misaligned")?;
        let now = h.cache.touch_ahead(per_shard);
        // SAFETY: checked non-NULL and aligned; writable per the contract.
        unsafe {
            put_opt(faulted, now.unwrap_or(0));
            put_opt(done, now.is_none());
        }
        Ok(())
    };
    // SAFETY: the caller's contract.
    unsafe { run_with(cache, body) }
}
