//! Failures inside the library, the per-thread last-error message, and `segcache_strerror`.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

use crate::status::{segcache_status_t, status_of};

/// A failure's message: static for the common outcomes so that a miss allocates nothing.
#[derive(Debug)]
pub(crate) enum Msg {
    Static(&'static CStr),
    Owned(CString),
}

/// What a failed entry point returns (`status`) and leaves for `segcache_last_error` (`msg`).
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) status: segcache_status_t,
    pub(crate) msg: Msg,
}

impl Fail {
    #[cold]
    pub(crate) fn new(status: segcache_status_t, msg: &'static CStr) -> Self {
        Fail { status, msg: Msg::Static(msg) }
    }

    #[cold]
    pub(crate) fn owned(status: segcache_status_t, msg: String) -> Self {
        // Interior NULs would truncate the C string; replace them so the message stays whole.
        let msg = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
        Fail { status, msg: Msg::Owned(msg) }
    }

    #[cold]
    pub(crate) fn invalid(msg: &'static CStr) -> Self {
        Fail::new(segcache_status_t::SEGCACHE_INVALID_ARGUMENT, msg)
    }

    #[cold]
    pub(crate) fn of(status: segcache_status_t) -> Self {
        Fail::new(status, status.describe())
    }
}

impl From<segcache_core::Error> for Fail {
    fn from(e: segcache_core::Error) -> Self {
        use segcache_core::Error as E;
        let status = status_of(&e);
        match e {
            // Frequent, expected outcomes: no allocation.
            E::NotFound | E::Exists | E::NotStored | E::NoMemory | E::NotNumeric => Fail::of(status),
            E::EmptyKey => Fail::invalid(c"key is empty"),
            E::Forked => {
                Fail::new(status, c"cache used in a child process after fork(): open a new cache in this process")
            }
            other => Fail::owned(status, other.to_string()),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Msg> = const { RefCell::new(Msg::Static(c"")) };
}

/// Takes this thread's last error, leaving an empty one (to put back with `set_last_error`).
pub(crate) fn take_last_error() -> Msg {
    LAST_ERROR
        .try_with(|slot| slot.try_borrow_mut().map(|mut m| std::mem::replace(&mut *m, Msg::Static(c""))).ok())
        .ok()
        .flatten()
        .unwrap_or(Msg::Static(c""))
}

/// Records `msg` as this thread's last error.
pub(crate) fn set_last_error(msg: Msg) {
    // `try_with`: during thread teardown the slot may be gone; the status still says what happened.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = msg;
        }
    });
}

/// The message of the most recent call on this thread that returned a status other than
/// `SEGCACHE_OK` (e.g. "invalid configuration: segment_size must be a power of two ...");
/// an empty string when there was none. A successful call does not clear it.
///
/// Ownership: the string belongs to the library and stays valid until the next failing
/// segcache call on the same thread (or the thread's exit); copy it to keep it. Do not free it.
/// Thread safety: each thread has its own message; any thread may call this at any time.
#[no_mangle]
pub extern "C" fn segcache_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| match slot.try_borrow() {
            Ok(m) => match &*m {
                Msg::Static(s) => s.as_ptr(),
                // The CString's heap buffer does not move while it sits in the slot.
                Msg::Owned(s) => s.as_ptr(),
            },
            Err(_) => c"".as_ptr(),
        })
        .unwrap_or(c"".as_ptr())
}

/// A short static description of `status` (e.g. "not found"); "unknown status" for a value that
/// is not a `segcache_status_t`. `status` is an `int` so that any value is safe to pass.
///
/// Ownership: a static NUL-terminated string; do not free it. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn segcache_strerror(status: c_int) -> *const c_char {
    usize::try_from(status)
        .ok()
        .and_then(|i| segcache_status_t::ALL.get(i))
        .map_or(c"unknown status", |s| s.describe())
        .as_ptr()
}
