//! The status every entry point returns, and the mapping from engine errors to it.

/// The outcome of a call. `SEGCACHE_OK` is 0; every other value is a distinct outcome that
/// `segcache_strerror()` names and `segcache_last_error()` details.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum segcache_status_t {
    /// Success.
    SEGCACHE_OK = 0,
    /// The key is absent, expired or flushed (or `cas`/`incr`/`decr`/`touch`/`delete` on such a key).
    SEGCACHE_NOT_FOUND = 1,
    /// `segcache_cas`: the item changed since its CAS value was read.
    SEGCACHE_EXISTS = 2,
    /// `add` on a present key; `replace`, `append` or `prepend` on an absent one.
    SEGCACHE_NOT_STORED = 3,
    /// The item (key, value and header) does not fit in one segment.
    SEGCACHE_TOO_LARGE = 4,
    /// The key is longer than `SEGCACHE_MAX_KEY_LEN` bytes.
    SEGCACHE_KEY_TOO_LONG = 5,
    /// The heap is full and the eviction policy is `SEGCACHE_POLICY_NONE`.
    SEGCACHE_NO_MEMORY = 6,
    /// `incr`/`decr` on a value that is not a decimal number fitting in 64 bits.
    SEGCACHE_NOT_NUMERIC = 7,
    /// A NULL or misaligned pointer, a zero-length key, a NULL buffer with a non-zero length, an
    /// unknown enum value, or a handle that is not a live `segcache_t`.
    SEGCACHE_INVALID_ARGUMENT = 8,
    /// A configuration value is out of range; `segcache_last_error()` names it.
    SEGCACHE_INVALID_CONFIG = 9,
    /// The persistence file could not be opened, sized, mapped or flushed.
    SEGCACHE_IO_ERROR = 10,
    /// The persistence file is corrupt, foreign, of another version or another configuration
    /// (set `reset_bad_file` to start empty over it instead).
    SEGCACHE_BAD_FILE = 11,
    /// Another cache holds the persistence file open.
    SEGCACHE_LOCKED = 12,
    /// The operating system refused memory for the heap.
    SEGCACHE_MAP_FAILED = 13,
    /// The caller's buffer is shorter than the value; the needed length was written to
    /// `*value_len`.
    SEGCACHE_BUFFER_TOO_SMALL = 14,
    /// A bug: the library panicked. The call had no effect or a partial one; the handle stays
    /// usable. Please report `segcache_last_error()`.
    SEGCACHE_PANIC = 15,
    /// An engine error this version of the C API does not know.
    SEGCACHE_INTERNAL_ERROR = 16,
    /// The handle was opened in another process and inherited across `fork()`. In the child,
    /// every call on it returns this, reads included; `segcache_close` there frees the handle
    /// without touching the cache or its persistence file (and returns this too). Open a new
    /// cache in the child instead. Not for a cache opened with `multi_process`: its children
    /// join it.
    SEGCACHE_FORKED = 17,
    /// A callback returned non-zero: `segcache_get_or_load`'s loader (or it set no value), or
    /// `segcache_compute`'s callback; nothing was stored or changed. `segcache_last_error()`
    /// names the code.
    SEGCACHE_LOAD_FAILED = 18,
    /// The filesystem of the persistence file has no room for the whole heap (its blocks are
    /// reserved at open); `segcache_last_error()` names the path, the bytes needed and free.
    SEGCACHE_NO_SPACE = 19,
}

use segcache_status_t::*;

impl segcache_status_t {
    /// Every status, by value.
    pub const ALL: [segcache_status_t; 20] = [
        SEGCACHE_OK,
        SEGCACHE_NOT_FOUND,
        SEGCACHE_EXISTS,
        SEGCACHE_NOT_STORED,
        SEGCACHE_TOO_LARGE,
        SEGCACHE_KEY_TOO_LONG,
        SEGCACHE_NO_MEMORY,
        SEGCACHE_NOT_NUMERIC,
        SEGCACHE_INVALID_ARGUMENT,
        SEGCACHE_INVALID_CONFIG,
        SEGCACHE_IO_ERROR,
        SEGCACHE_BAD_FILE,
        SEGCACHE_LOCKED,
        SEGCACHE_MAP_FAILED,
        SEGCACHE_BUFFER_TOO_SMALL,
        SEGCACHE_PANIC,
        SEGCACHE_INTERNAL_ERROR,
        SEGCACHE_FORKED,
        SEGCACHE_LOAD_FAILED,
        SEGCACHE_NO_SPACE,
    ];

    /// A short static description, NUL-terminated for C.
    pub(crate) fn describe(self) -> &'static std::ffi::CStr {
        match self {
            SEGCACHE_OK => c"ok",
            SEGCACHE_NOT_FOUND => c"not found",
            SEGCACHE_EXISTS => c"exists: the item changed since its CAS value was read",
            SEGCACHE_NOT_STORED => c"not stored",
            SEGCACHE_TOO_LARGE => c"item too large for the cache",
            SEGCACHE_KEY_TOO_LONG => c"key too long",
            SEGCACHE_NO_MEMORY => c"out of memory: the heap is full and eviction is off",
            SEGCACHE_NOT_NUMERIC => c"cannot increment or decrement non-numeric value",
            SEGCACHE_INVALID_ARGUMENT => c"invalid argument",
            SEGCACHE_INVALID_CONFIG => c"invalid configuration",
            SEGCACHE_IO_ERROR => c"i/o error on the persistence file",
            SEGCACHE_BAD_FILE => c"bad persistence file",
            SEGCACHE_LOCKED => c"persistence file in use by another cache",
            SEGCACHE_MAP_FAILED => c"cannot map memory for the heap",
            SEGCACHE_BUFFER_TOO_SMALL => c"buffer too small for the value",
            SEGCACHE_PANIC => c"internal panic (a bug in segcache)",
            SEGCACHE_INTERNAL_ERROR => c"internal error",
            SEGCACHE_FORKED => c"cache handle used in a child process after fork()",
            SEGCACHE_LOAD_FAILED => c"the callback failed",
            SEGCACHE_NO_SPACE => c"no space on the filesystem for the persistence file",
        }
    }
}

/// The status an engine error maps to.
pub(crate) fn status_of(e: &segcache_core::Error) -> segcache_status_t {
    use segcache_core::Error as E;
    match e {
        E::NotFound => SEGCACHE_NOT_FOUND,
        E::Exists => SEGCACHE_EXISTS,
        E::NotStored => SEGCACHE_NOT_STORED,
        E::TooLarge { .. } => SEGCACHE_TOO_LARGE,
        E::KeyTooLong { .. } => SEGCACHE_KEY_TOO_LONG,
        E::EmptyKey => SEGCACHE_INVALID_ARGUMENT,
        E::NoMemory => SEGCACHE_NO_MEMORY,
        E::NotNumeric => SEGCACHE_NOT_NUMERIC,
        E::InvalidConfig(_) => SEGCACHE_INVALID_CONFIG,
        E::Io { .. } => SEGCACHE_IO_ERROR,
        E::BadFile { .. } => SEGCACHE_BAD_FILE,
        E::Locked { .. } => SEGCACHE_LOCKED,
        E::NoSpace { .. } => SEGCACHE_NO_SPACE,
        E::Map { .. } => SEGCACHE_MAP_FAILED,
        E::Forked => SEGCACHE_FORKED,
        _ => SEGCACHE_INTERNAL_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use segcache_core::Error as E;
    use std::path::PathBuf;

    #[test]
    fn values_are_dense_and_descriptions_distinct() {
        for (i, s) in segcache_status_t::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            for t in &segcache_status_t::ALL[..i] {
                assert_ne!(s.describe(), t.describe());
            }
        }
    }

    #[test]
    fn every_engine_error_has_its_own_status() {
        let io = || std::io::Error::other("x");
        let cases = [
            (E::NotFound, SEGCACHE_NOT_FOUND),
            (E::Exists, SEGCACHE_EXISTS),
            (E::NotStored, SEGCACHE_NOT_STORED),
            (E::TooLarge { size: 2, max: 1 }, SEGCACHE_TOO_LARGE),
            (E::KeyTooLong { len: 251 }, SEGCACHE_KEY_TOO_LONG),
            (E::EmptyKey, SEGCACHE_INVALID_ARGUMENT),
            (E::NoMemory, SEGCACHE_NO_MEMORY),
            (E::NotNumeric, SEGCACHE_NOT_NUMERIC),
            (E::InvalidConfig("x".into()), SEGCACHE_INVALID_CONFIG),
            (E::Io { path: PathBuf::from("/p"), source: io() }, SEGCACHE_IO_ERROR),
            (E::BadFile { path: PathBuf::from("/p"), reason: "r".into() }, SEGCACHE_BAD_FILE),
            (E::Locked { path: PathBuf::from("/p") }, SEGCACHE_LOCKED),
            (E::NoSpace { path: PathBuf::from("/p"), needed: 2, free: 1 }, SEGCACHE_NO_SPACE),
            (E::Map { bytes: 1, source: io() }, SEGCACHE_MAP_FAILED),
            (E::Forked, SEGCACHE_FORKED),
        ];
        for (e, want) in cases {
            assert_eq!(status_of(&e), want, "{e:?}");
        }
    }
}
