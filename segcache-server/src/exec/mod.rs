//! Running requests: memcached's expiry rules, the engine calls, the text, meta and binary
//! handlers, and the `stats` and Prometheus reports.
//!
//! Within: `text` (the dispatcher) uses `meta` and `report`; both handlers use `engine`, which
//! uses `expiry`. `binary` (the binary protocol's dispatcher) uses `engine`, `expiry` and
//! `report` the same way.

mod admin;
mod binary;
mod engine;
mod expiry;
mod meta;
mod report;
mod text;

pub use admin::dump_more;
pub use binary::execute as execute_binary;
pub use report::prometheus;
pub use text::{execute, Flow, GetStream};
