//! # segcache-server
//!
//! A memcached-compatible server on the segcache engine: the text, meta and binary protocols
//! of memcached 1.6, memcached's flags and `stats`, pinned worker threads with their own
//! event loops, Prometheus metrics on an optional admin port, and a graceful stop that persists
//! the cache for a warm restart. See docs/server.md.
//!
//! - [`protocol`]: the tokenizer, the request parser and the reply spellings; it imports nothing
//!   else of this crate (no allocation; used by the fuzz target).
//! - `exec`: expiry rules, the text and meta handlers that call the engine, `stats` and metrics.
//! - [`Session`]: one connection's protocol state machine, socket-free; a connection's first
//!   byte chooses text or binary, as in memcached.
//! - [`Server`]: acceptor, workers, lifecycle.
//! - [`auth`]: the users of `-Y` and `-S`, and their constant-time check.
//! - [`bus_error`]: the last line logged when the persistence file stops backing the heap.

pub mod auth;
pub mod bus_error;
mod config;
mod exec;
mod listen;
pub mod logger;
pub mod observe;
pub mod protocol;
mod ratelimit;
mod server;
mod session;
mod state;
mod tls;
mod worker;

pub use config::{parse_extended, Cli, ConfigError, Extended, Protocol, Settings};
pub use server::{start_kind, start_line, Opened, Server, StartKind, StopHandle};
pub use session::{Progress, Session};
pub use state::{Ctx, Shared};
pub use tls::{MinVersion, Tls, TlsSettings, VerifyMode};
