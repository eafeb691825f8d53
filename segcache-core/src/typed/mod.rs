//! Typed keys and values over the byte cache (the `serde` feature): [`TypedCache`], the
//! [`Codec`] that turns its types into bytes, and its error.
//!
//! Nothing here changes the byte path: a typed call encodes the key, calls the
//! [`SharedCache`](crate::SharedCache) method, and decodes what it read.

mod cache;
mod codec;
mod error;
mod load;

pub use cache::TypedCache;
pub use codec::{Codec, CodecError, Postcard};
pub use error::TypedError;
