//! # segcache-server
//!
//! A memcached-compatible server on the segcache engine: the text protocol and the meta
//! protocol of memcached 1.6, memcached's flags and `stats`, pinned worker threads with their own
//! event loops, Prometheus metrics on an optional admin port, and a graceful stop that persists
//! the cache for a warm restart. See docs/server.md.
//!
//! - [`parse`]: the request parser (no allocation; used by the fuzz target).
//! - [`session::Session`]: one connection's protocol state machine, socket-free.
//! - [`server::Server`]: acceptor, workers, lifecycle.

pub mod admin;
pub mod config;
pub mod exec;
pub mod logger;
pub mod meta;
pub mod parse;
pub mod report;
pub mod server;
pub mod session;
pub mod state;
pub mod stats;
pub mod worker;

pub use config::{Cli, Settings};
pub use server::{Server, StopHandle};
pub use session::{Progress, Session};
pub use state::{Ctx, Shared};
