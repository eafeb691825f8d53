//! Running requests: memcached's expiry rules, the engine calls, the text and meta handlers,
//! and the `stats` and Prometheus reports.
//!
//! Within: `text` (the dispatcher) uses `meta` and `report`; both handlers use `engine`, which
//! uses `expiry`.

mod admin;
mod engine;
mod expiry;
mod meta;
mod report;
mod text;

pub use admin::dump_more;
pub use report::prometheus;
pub use text::{execute, Flow};
