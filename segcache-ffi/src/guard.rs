//! The wrapper every entry point runs its body in: turns failures into a status plus a
//! last-error message, and panics into `SEGCACHE_PANIC` so that no unwind reaches C.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::args;
use crate::error::{set_last_error, Fail};
use crate::handle::segcache_t;
use crate::status::segcache_status_t;

/// Runs `body`; `Ok` -> `SEGCACHE_OK`, `Err(fail)` -> its status (message recorded), a panic ->
/// `SEGCACHE_PANIC` (message recorded).
#[inline(always)]
pub(crate) fn run(body: impl FnOnce() -> Result<(), Fail>) -> segcache_status_t {
    // AssertUnwindSafe: after a panic the caller only gets a status; the shard locks (`ShardLock`)
    // are released by unwinding and do not poison, and no partially updated state of ours is
    // observed afterwards because each entry point borrows its arguments only for the call.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => segcache_status_t::SEGCACHE_OK,
        Ok(Err(fail)) => {
            set_last_error(fail.msg);
            fail.status
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown payload".to_string());
            let fail = Fail::owned(segcache_status_t::SEGCACHE_PANIC, format!("panic in segcache: {what}"));
            set_last_error(fail.msg);
            // Drop the payload here, still inside Rust, in case its destructor panics.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            segcache_status_t::SEGCACHE_PANIC
        }
    }
}

/// [`run`] with the handle checked first: `body` gets the live handle behind `cache`, or the call
/// returns `SEGCACHE_FORKED` in a `fork()` child of the process that opened it (before `body`
/// runs, so that a read there is refused rather than answered as a miss). Then, with no lock
/// of the cache held any more, the eviction listener's callbacks get the items `body` removed.
///
/// # Safety
/// `cache` is NULL or a live handle (see [`args::handle`]).
#[inline(always)]
pub(crate) unsafe fn run_with(
    cache: *const segcache_t,
    body: impl FnOnce(&segcache_t) -> Result<(), Fail>,
) -> segcache_status_t {
    let status = run(|| {
        // SAFETY: the function's contract.
        let h = unsafe { args::handle(cache) }?;
        h.cache.check_fork()?;
        body(h)
    });
    crate::pending::deliver_pending();
    status
}

/// [`run_with`], then the key checked: `body` gets the live handle and the key.
///
/// # Safety
/// As for [`run_with`]; `key` points to `key_len` readable bytes (see [`args::key`]).
#[inline(always)]
pub(crate) unsafe fn run_keyed(
    cache: *const segcache_t,
    key: *const u8,
    key_len: usize,
    body: impl FnOnce(&segcache_t, &[u8]) -> Result<(), Fail>,
) -> segcache_status_t {
    let keyed = |h: &segcache_t| {
        // SAFETY: the function's contract.
        let key = unsafe { args::key(key, key_len) }?;
        body(h, key)
    };
    // SAFETY: the function's contract.
    unsafe { run_with(cache, keyed) }
}

/// Panics inside the library on purpose and returns `SEGCACHE_PANIC`: lets callers and tests
/// check that a Rust panic comes back as a status (with a message in `segcache_last_error()`)
/// and never unwinds into C. Has no other effect.
///
/// Thread safety: any thread, any time.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
#[no_mangle]
pub extern "C" fn segcache_debug_panic() -> segcache_status_t {
    // `resume_unwind` unwinds as a panic does but skips the panic hook, whose report on stderr
    // ("thread ... panicked at ...") would read as a bug in the caller's logs: this one is asked for.
    run(|| std::panic::resume_unwind(Box::new("segcache_debug_panic was called")))
}
