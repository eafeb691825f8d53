//! The wrapper every entry point runs its body in: turns failures into a status plus a
//! last-error message, and panics into `SEGCACHE_PANIC` so that no unwind reaches C.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{set_last_error, Fail};
use crate::status::segcache_status_t;

/// Runs `body`; `Ok` -> `SEGCACHE_OK`, `Err(fail)` -> its status (message recorded), a panic ->
/// `SEGCACHE_PANIC` (message recorded).
#[inline(always)]
pub(crate) fn run(body: impl FnOnce() -> Result<(), Fail>) -> segcache_status_t {
    // AssertUnwindSafe: after a panic the caller only gets a status; the shard locks (parking_lot)
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
            let fail = Fail::owned(
                segcache_status_t::SEGCACHE_PANIC,
                format!("panic in segcache: {what}"),
            );
            set_last_error(fail.msg);
            // Drop the payload here, still inside Rust, in case its destructor panics.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            segcache_status_t::SEGCACHE_PANIC
        }
    }
}

/// Panics inside the library on purpose and returns `SEGCACHE_PANIC`: lets callers and tests
/// check that a Rust panic comes back as a status (with a message in `segcache_last_error()`)
/// and never unwinds into C. Has no other effect.
///
/// Thread safety: any thread, any time.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
#[no_mangle]
pub extern "C" fn segcache_debug_panic() -> segcache_status_t {
    run(|| panic!("segcache_debug_panic was called"))
}
