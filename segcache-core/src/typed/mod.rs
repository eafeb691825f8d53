//! Typed keys and values over the byte cache (the `serde` feature): [`TypedCache`], the
//! [`Codec`] that turns its types into bytes, and its error.
//!
//! Nothing here changes the byte path: a typed call encodes the key (into a per-thread buffer),
//! calls the [`SharedCache`](crate::SharedCache) method, and decodes what it read.

mod cache;
mod codec;
mod error;
mod load;
mod scratch;

pub use cache::TypedCache;
pub use codec::{Codec, CodecError, Postcard};
pub use error::TypedError;
