//! The memcached wire protocol: the tokenizer, the text-command and meta-flag parsers, the
//! binary protocol's parser and writers ([`binary`]), and the reply spellings. Nothing here
//! imports the rest of the crate (no engine, no server state), so it can be fuzzed and reused
//! alone.
//!
//! [`parse`] turns the bytes a client sent into one [`Request`] that borrows them, without
//! allocating or copying (a meta command's base64 key aside: it is decoded).

pub mod binary;
mod meta;
pub mod reply;
mod text;
mod token;

pub use meta::{parse_meta_flags, FlagOrder, MetaCmd, MetaFlags, MetaKey};
pub use reply::{put_i64, put_u64, FailKind};
pub use text::{
    check_key, get_head, parse, stalled_line, Admin, Detail, Fail, GetHead, Keys, Limits, Parse, Request, StoreKind,
    MAX_GET_LINE, MAX_LINE, MAX_RESPONSE, READ_BUFFER, WATCH_STREAMS,
};
pub use token::{next_token, parse_u64, MAX_TOKENS};
