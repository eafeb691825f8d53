//! What a connection sweep (`sweep`) records: its points, the generator's verdicts and the
//! servers' idle memory, as written to sweep.json and read back by the plot.

use serde::{Deserialize, Serialize};

use crate::client::StepResult;
use crate::report::Machine;
use crate::workload::Workload;

/// Whether the generator kept its schedule in one step, and why not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GeneratorVerdict {
    pub kept: bool,
    pub scheduled: u64,
    pub sent: u64,
    pub lag_p999_us: f64,
    pub late_fraction: f64,
    pub cpu_util: f64,
    /// One line for people: what went wrong, or that it kept up.
    pub note: String,
}

/// The open-file limit, before and after the harness raised its soft limit.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Nofile {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

/// One server at one connection count.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SweepPoint {
    pub connections: usize,
    pub server: String,
    pub step: StepResult,
    pub generator: GeneratorVerdict,
}

/// A server's resident set with many idle connections open (each has served one `version`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IdleRss {
    pub server: String,
    pub connections: usize,
    pub rss_before_kb: u64,
    pub rss_idle_kb: u64,
    pub bytes_per_conn: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SweepServer {
    pub name: String,
    pub command: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SweepReport {
    pub tool: String,
    pub command: String,
    pub started_unix: u64,
    pub machine: Machine,
    /// The 1-minute load average when the sweep started (other work on the machine).
    pub loadavg_start: String,
    pub loadavg_end: String,
    pub nofile: Nofile,
    pub workload: Option<Workload>,
    /// The rate of each connection count, in the order of the counts.
    pub rates: Vec<f64>,
    pub step_seconds: f64,
    pub threads: usize,
    pub servers: Vec<SweepServer>,
    pub points: Vec<SweepPoint>,
    /// Connection counts not run, and why (the open-file limit).
    pub skipped: Vec<String>,
    pub idle: Vec<IdleRss>,
}
