//! Running requests: memcached's expiry rules, the text and meta handlers (what calls the
//! engine), and the `stats` and Prometheus reports.

mod expiry;
mod meta;
mod report;
mod text;

pub use report::prometheus;
pub use text::{execute, Flow};
