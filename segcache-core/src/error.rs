//! The one error type every operation returns.

use std::convert::Infallible;
use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong in the engine, one variant per outcome a caller may handle.
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, Error};
///
/// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
/// match cache.add(b"k", b"v", 0, Duration::ZERO) {
///     Ok(()) => {}
///     Err(Error::NotStored) => unreachable!("the key is new"),
///     Err(e) => return Err(e),
/// }
/// let err = cache.add(b"k", b"v", 0, Duration::ZERO).unwrap_err();
/// assert!(matches!(err, Error::NotStored));
/// assert_eq!(err.to_string(), "not stored");
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is absent, expired or flushed.
    #[error("not found")]
    NotFound,
    /// `cas` saw a CAS value other than the one given: the item changed since it was read.
    #[error("exists: the item changed since its CAS value was read")]
    Exists,
    /// `add` on a present key, `replace`/`append`/`prepend` on an absent one.
    #[error("not stored")]
    NotStored,
    /// The item (header, key and value) does not fit in one segment.
    #[error("item too large: {size} bytes, at most {max} fit in a segment")]
    TooLarge {
        /// The key and value's size.
        size: usize,
        /// The most that fits.
        max: usize,
    },
    /// Keys are 1 to 250 bytes, as in memcached.
    #[error("key too long: {len} bytes, at most 250")]
    KeyTooLong {
        /// The key's length.
        len: usize,
    },
    /// The key is empty.
    #[error("empty key")]
    EmptyKey,
    /// No segment could be freed: the heap is full and the eviction policy is `None`.
    #[error("out of memory: the heap is full and eviction is off")]
    NoMemory,
    /// `incr`/`decr` on a value that is not a decimal number that fits in 64 bits.
    #[error("cannot increment or decrement non-numeric value")]
    NotNumeric,
    /// A builder setting is out of range; the message names it.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The persistence file could not be opened, sized, mapped or flushed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The persistence file is not usable: truncated, corrupt, foreign, of another format version
    /// or made with another configuration. The message names the problem.
    #[error("bad persistence file {path}: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The filesystem of the persistence file has no room for the whole heap. The file's blocks
    /// are reserved when it is opened, so a cache never runs out of space later (writing to a
    /// page of a mapped file that the filesystem cannot back kills the process with `SIGBUS`).
    #[error(
        "no space for the persistence file {path}: the heap needs {needed} bytes there, the filesystem has {free} free"
    )]
    NoSpace {
        /// The file.
        path: PathBuf,
        /// The bytes the file takes.
        needed: u64,
        /// The bytes the filesystem had free for it (besides those the file held already).
        free: u64,
    },
    /// Another process (or another cache in this process) holds the persistence file open, and
    /// the two do not both share it between processes (`Builder::multi_process`).
    #[error("persistence file {path} is in use by another cache")]
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The handle was opened in another process and inherited across `fork()`: open a new cache
    /// in this process instead, or share the file between processes (`Builder::multi_process`).
    /// (Using it would share a file's mapping without its locks, or a private copy of an
    /// anonymous heap that no other process sees.)
    #[error("cache used in a child process after fork(): open a new cache in this process")]
    Forked,
    /// Anonymous memory for the heap could not be mapped.
    #[error("cannot map {bytes} bytes of memory: {source}")]
    Map {
        /// The size asked for.
        bytes: usize,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with this crate's [`Error`].
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Result, SharedCache};
///
/// fn remember(cache: &SharedCache, key: &str) -> Result<u64> {
///     cache.set(key.as_bytes(), b"0", 0, Duration::ZERO)?;
///     cache.incr(key.as_bytes(), 1)
/// }
///
/// let cache = SharedCache::builder().heap_size(8 << 20).build_shared()?;
/// assert_eq!(remember(&cache, "visits")?, 1);
/// # Ok::<(), segcache_core::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What [`SharedCache::try_get_or_insert_with`](crate::SharedCache::try_get_or_insert_with) returns on failure: the cache refused the call,
/// or this caller's loader failed.
///
/// # Examples
/// ```
/// use segcache_core::{Error, LoadError};
/// let e: LoadError<std::io::Error> = LoadError::Cache(Error::EmptyKey);
/// assert_eq!(e.to_string(), "empty key");
/// ```
#[derive(Debug)]
pub enum LoadError<E> {
    /// The cache refused the call (an empty or too long key, a handle used after `fork()`).
    Cache(Error),
    /// The loader returned this error. Nothing was stored.
    Loader(E),
}

impl<E: fmt::Display> fmt::Display for LoadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Cache(e) => e.fmt(f),
            LoadError::Loader(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for LoadError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Cache(e) => Some(e),
            LoadError::Loader(e) => Some(e),
        }
    }
}

impl<E> From<Error> for LoadError<E> {
    fn from(e: Error) -> Self {
        LoadError::Cache(e)
    }
}

/// The error of a load whose loader cannot fail.
pub(crate) fn cache_error(e: LoadError<Infallible>) -> Error {
    match e {
        LoadError::Cache(e) => e,
        LoadError::Loader(never) => match never {},
    }
}
