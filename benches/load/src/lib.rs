//! segcache-bench: an open-loop load generator for memcache text-protocol servers.
//!
//! Requests are scheduled at a fixed rate and every latency is measured from the
//! *scheduled* send time, so a server that stalls is charged for the whole queue
//! that built up behind the stall (no coordinated omission).
//!
//! Modules, one job each:
//! - [`workload`]: keys, values, operation mix, key popularity (uniform / Zipf).
//! - [`protocol`]: request encoding and incremental response parsing.
//! - [`rate`]: the fixed-rate send schedule.
//! - [`timer`]: a high-resolution timerfd so a thread can sleep until the next send.
//! - [`histo`]: HDR histograms and their percentile summaries.
//! - [`client`]: the worker threads (mio event loops) and one measured step.
//! - [`prefill`]: the closed-loop fill phase.
//! - [`cpu`]: process CPU time from /proc.
//! - [`ramp`]: the stepwise ramp and the SLO search.
//! - [`report`]: JSON and markdown output.
//! - [`plot`]: PNG plots of latency against throughput.
//! - [`server`]: starting and stopping the servers under test.
//! - [`compare`]: the memcached vs segcache-server comparison.
//! - [`sweep`]: the connection-count sweep (tail latency vs connections, generator lateness);
//!   [`sweep_report`]: what it records.
//! - [`mock`]: a mock memcache server with an injected delay, for tests.

pub mod client;
pub mod compare;
pub mod cpu;
pub mod histo;
pub mod mock;
pub mod plot;
pub mod prefill;
pub mod protocol;
pub mod ramp;
pub mod rate;
pub mod report;
pub mod server;
pub mod sweep;
pub mod sweep_report;
pub mod timer;
pub mod workload;
