//! # segcache C API
//!
//! `libsegcache.so` / `libsegcache.a` expose the thread-safe [`segcache_core::SharedCache`] to C and
//! to every language with a C FFI. The header `bindings/c/include/segcache.h` is generated from
//! this crate by cbindgen (see `cbindgen.toml`); the doc comments here are its documentation.
//!
//! Conventions of every function (after rustls-ffi):
//! - The return value is a `segcache_status_t`; results come back through out-pointers, which are
//!   written only as each function says.
//! - A NULL pointer where one is required, a zero-length key, a buffer pointer that is NULL with a
//!   non-zero length, or an unknown enum value returns `SEGCACHE_INVALID_ARGUMENT`.
//! - No Rust panic crosses the boundary: a panic becomes `SEGCACHE_PANIC`.
//! - Any status other than `SEGCACHE_OK` leaves a message for `segcache_last_error()` on the
//!   calling thread.
//! - Keys, values and paths are borrowed for the duration of the call only; the library copies what
//!   it keeps.
//! - A handle used in a `fork()` child of the process that opened it returns `SEGCACHE_FORKED`
//!   from every call (`segcache_close` frees it there and leaves the cache's file alone), unless
//!   it was opened with `multi_process`: then the child joins the cache at its first call.
#![warn(missing_docs)]
#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]

mod ahead;
mod args;
mod error;
mod guard;
mod handle;
mod open;
mod pending;
mod read;
mod scan;
mod state;
mod stats;
mod status;
mod write;
// Last, so that cbindgen appends their items to the header after the others.
mod compute;
mod listener;
mod load;

pub use ahead::segcache_touch_ahead;
pub use compute::{
    segcache_compute, segcache_compute_cb, segcache_compute_keep, segcache_compute_put, segcache_compute_remove,
    segcache_compute_t, segcache_computed_t,
};
pub use error::{segcache_last_error, segcache_strerror};
pub use guard::segcache_debug_panic;
pub use handle::segcache_t;
pub use listener::{segcache_eviction_cb, segcache_removal_cause_t, segcache_set_eviction_listener};
pub use load::{segcache_get_or_load, segcache_load_cb, segcache_load_set, segcache_load_t};
pub use open::{
    segcache_advance_clock, segcache_close, segcache_config_default, segcache_config_t, segcache_open,
    segcache_policy_t,
};
pub use read::{
    segcache_contains, segcache_get, segcache_get_and_touch, segcache_get_cb, segcache_get_many, segcache_get_many_cb,
    segcache_get_with, segcache_item_t, segcache_meta_t,
};
pub use scan::{segcache_scan, segcache_scan_cb};
pub use state::{
    segcache_delete_cas, segcache_get_ex, segcache_invalidate, segcache_item_info_t, segcache_read_options_t,
    segcache_store, segcache_store_mode_t, segcache_store_options_t,
};
pub use stats::{segcache_len, segcache_now, segcache_stats, segcache_stats_t};
pub use status::segcache_status_t;
pub use write::{
    segcache_add, segcache_append, segcache_cas, segcache_decr, segcache_delete, segcache_expire, segcache_flush,
    segcache_flush_after, segcache_incr, segcache_prepend, segcache_replace, segcache_set, segcache_touch,
};

/// Longest key in bytes (as in memcached). Keys are 1 to `SEGCACHE_MAX_KEY_LEN` bytes of any value.
pub const SEGCACHE_MAX_KEY_LEN: usize = 250;
const _: () = assert!(SEGCACHE_MAX_KEY_LEN == segcache_core::MAX_KEY_LEN);

/// Major version of the C ABI; the shared library's SONAME is `libsegcache.so.<major>`.
pub const SEGCACHE_ABI_VERSION: u32 = 0;

/// The library's version, e.g. "0.1.0".
///
/// Ownership: a static NUL-terminated string; do not free it. Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn segcache_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
