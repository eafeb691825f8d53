//! The typed cache's error: the engine's [`Error`], a codec's, a refused key, or a loader's.

use std::convert::Infallible;
use std::fmt;

use crate::error::Error;
use crate::typed::codec::CodecError;

/// What a [`TypedCache`](crate::TypedCache) call returns on failure. `E` is a loader's error
/// type, for the `try_get_or_insert_with` calls; elsewhere it is [`Infallible`].
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Error, SharedCache, TypedCache, TypedError};
///
/// let cache: TypedCache<String, u32> = TypedCache::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
/// cache.set(&"a".to_string(), &1, Duration::ZERO)?;
/// let err = cache.add(&"a".to_string(), &2, Duration::ZERO).unwrap_err();
/// assert!(matches!(err, TypedError::Cache(Error::NotStored)));
/// assert_eq!(err.to_string(), "not stored");
/// # Ok::<(), TypedError>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum TypedError<E = Infallible> {
    /// The engine refused or failed the call, as it would for bytes.
    Cache(Error),
    /// The codec could not encode the key or value, or decode the stored value.
    Codec(CodecError),
    /// A key whose encoding does not identify it: it decodes to a key that is not equal to it
    /// (a float NaN), or to one that encodes differently (a hash map or set whose decoded copy
    /// iterates in another order). A cache compares keys by their encoding, so such a key could
    /// not be found again.
    KeyNotCanonical,
    /// The loader failed. Nothing was stored.
    Loader(E),
}

impl<E: fmt::Display> fmt::Display for TypedError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypedError::Cache(e) => e.fmt(f),
            TypedError::Codec(e) => e.fmt(f),
            TypedError::KeyNotCanonical => {
                f.write_str("key refused: its encoding does not decode to an equal key that encodes the same")
            }
            TypedError::Loader(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for TypedError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TypedError::Cache(e) => Some(e),
            TypedError::Codec(e) => Some(e),
            TypedError::KeyNotCanonical => None,
            TypedError::Loader(e) => Some(e),
        }
    }
}

impl<E> From<Error> for TypedError<E> {
    fn from(e: Error) -> Self {
        TypedError::Cache(e)
    }
}

impl<E> From<CodecError> for TypedError<E> {
    fn from(e: CodecError) -> Self {
        TypedError::Codec(e)
    }
}

impl TypedError {
    /// This error as one of a call with a loader error type `E` (it is none of `Loader`).
    pub(crate) fn widen<E>(self) -> TypedError<E> {
        match self {
            TypedError::Cache(e) => TypedError::Cache(e),
            TypedError::Codec(e) => TypedError::Codec(e),
            TypedError::KeyNotCanonical => TypedError::KeyNotCanonical,
            TypedError::Loader(never) => match never {},
        }
    }
}
