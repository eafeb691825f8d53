//! How typed keys and values become bytes: the [`Codec`] trait, its error, and the serde-based
//! default, [`Postcard`].

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Turns values of type `T` into bytes and back, for a [`TypedCache`](crate::TypedCache).
///
/// A codec is also what makes two keys the same: the cache compares keys by their encoded bytes,
/// so a key codec should encode equal keys to equal bytes. [`Postcard`] does this for every serde
/// type whose serialization is deterministic (not for hash maps and sets, whose order varies).
///
/// ```
/// use segcache_core::{Codec, CodecError};
///
/// /// Stores strings as their UTF-8 bytes, nothing more.
/// struct Utf8;
///
/// impl Codec<String> for Utf8 {
///     fn encode(&self, value: &String, out: &mut Vec<u8>) -> Result<(), CodecError> {
///         out.extend_from_slice(value.as_bytes());
///         Ok(())
///     }
///     fn decode(&self, bytes: &[u8]) -> Result<String, CodecError> {
///         String::from_utf8(bytes.to_vec()).map_err(CodecError::decode)
///     }
/// }
///
/// let mut out = Vec::new();
/// Utf8.encode(&"hé".to_string(), &mut out)?;
/// assert_eq!(out, "hé".as_bytes());
/// assert_eq!(Utf8.decode(&out)?, "hé");
/// assert!(Utf8.decode(&[0xff]).is_err());
/// # Ok::<(), CodecError>(())
/// ```
pub trait Codec<T> {
    /// Appends `value`'s encoding to `out`.
    ///
    /// ```
    /// use segcache_core::{Codec, Postcard};
    /// let mut out = vec![9];
    /// Postcard.encode(&300u32, &mut out)?;
    /// assert_eq!(out, [9, 0xac, 0x02]); // appended, as a varint
    /// # Ok::<(), segcache_core::CodecError>(())
    /// ```
    fn encode(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CodecError>;

    /// The value `bytes` encode; an error if they are not exactly one value of type `T`.
    ///
    /// ```
    /// use segcache_core::{Codec, Postcard};
    /// let n: u32 = Postcard.decode(&[0xac, 0x02])?;
    /// assert_eq!(n, 300);
    /// assert!(Codec::<u32>::decode(&Postcard, &[0xac, 0x02, 0]).is_err()); // a byte too many
    /// # Ok::<(), segcache_core::CodecError>(())
    /// ```
    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError>;

    /// Runs `f` on `value`'s encoding. The typed cache encodes keys this way; the default
    /// encodes into a new `Vec`, and a codec may override it to encode into a buffer on the
    /// stack ([`Postcard`] does, for encodings of up to 256 bytes).
    ///
    /// ```
    /// use segcache_core::{Codec, Postcard};
    /// let len = Postcard.encode_with(&"key".to_string(), |bytes| bytes.len())?;
    /// assert_eq!(len, 4); // a length byte, then the UTF-8
    /// # Ok::<(), segcache_core::CodecError>(())
    /// ```
    fn encode_with<R>(&self, value: &T, f: impl FnOnce(&[u8]) -> R) -> Result<R, CodecError> {
        let mut out = Vec::new();
        self.encode(value, &mut out)?;
        Ok(f(&out))
    }
}

/// The stack buffer of [`Postcard`]'s `encode_with`: longer than any key (250 bytes).
const STACK_ENCODING: usize = 256;

/// A codec's failure: a value it cannot encode, or bytes it cannot decode (written by another
/// type, another codec, or a byte-level user of the same cache).
///
/// ```
/// use segcache_core::{Codec, Postcard};
/// let err = Codec::<String>::decode(&Postcard, &[5, b'a']).unwrap_err();
/// assert!(err.is_decode());
/// assert!(err.to_string().starts_with("cannot decode the stored bytes: "));
/// ```
#[derive(Debug)]
pub struct CodecError {
    decoding: bool,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl CodecError {
    /// A failure to encode, with its cause.
    ///
    /// ```
    /// let err = segcache_core::CodecError::encode("sequence of unknown length");
    /// assert!(!err.is_decode());
    /// assert_eq!(err.to_string(), "cannot encode the value: sequence of unknown length");
    /// ```
    pub fn encode(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> CodecError {
        CodecError { decoding: false, source: cause.into() }
    }

    /// A failure to decode, with its cause.
    ///
    /// ```
    /// let err = segcache_core::CodecError::decode("truncated");
    /// assert!(err.is_decode());
    /// assert_eq!(err.to_string(), "cannot decode the stored bytes: truncated");
    /// ```
    pub fn decode(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> CodecError {
        CodecError { decoding: true, source: cause.into() }
    }

    /// Whether decoding failed (else encoding did).
    ///
    /// ```
    /// assert!(segcache_core::CodecError::decode("truncated").is_decode());
    /// ```
    pub fn is_decode(&self) -> bool {
        self.decoding
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.decoding { "cannot decode the stored bytes" } else { "cannot encode the value" };
        write!(f, "{what}: {}", self.source)
    }
}

impl std::error::Error for CodecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// The default codec: any serde type, in [postcard](https://docs.rs/postcard)'s format.
///
/// Postcard is compact (integers as varints, no field names, no padding: a small struct takes
/// a few bytes more than its strings), fast, and its wire format is stable and specified for
/// its whole 1.x line, which a cache file reopened by a later build relies on. It is not
/// self-describing: the stored bytes hold no type, so reading with another type than the one
/// written fails to decode or, for types of the same shape, reads the other type.
///
/// ```
/// use segcache_core::{Codec, Postcard};
/// #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
/// struct User { id: u64, name: String }
///
/// let mut out = Vec::new();
/// Postcard.encode(&User { id: 7, name: "ann".into() }, &mut out)?;
/// assert_eq!(out, [7, 3, b'a', b'n', b'n']);
/// let back: User = Postcard.decode(&out)?;
/// assert_eq!(back, User { id: 7, name: "ann".into() });
/// # Ok::<(), segcache_core::CodecError>(())
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Postcard;

impl<T: Serialize + DeserializeOwned> Codec<T> for Postcard {
    fn encode(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let buf = std::mem::take(out);
        *out = postcard::to_extend(value, buf).map_err(CodecError::encode)?;
        Ok(())
    }

    fn encode_with<R>(&self, value: &T, f: impl FnOnce(&[u8]) -> R) -> Result<R, CodecError> {
        let mut buf = [0u8; STACK_ENCODING];
        match postcard::to_slice(value, &mut buf) {
            Ok(bytes) => Ok(f(bytes)),
            // Longer than the buffer: encoded again, into the heap.
            Err(postcard::Error::SerializeBufferFull) => {
                let mut out = Vec::new();
                self.encode(value, &mut out)?;
                Ok(f(&out))
            }
            Err(e) => Err(CodecError::encode(e)),
        }
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError> {
        match postcard::take_from_bytes(bytes) {
            Ok((value, [])) => Ok(value),
            Ok((_, rest)) => Err(CodecError::decode(format!("{} bytes left over after the value", rest.len()))),
            Err(e) => Err(CodecError::decode(e)),
        }
    }
}
