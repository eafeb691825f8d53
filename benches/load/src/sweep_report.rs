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
    /// Which pass over the counts (`--rounds`), from 0.
    #[serde(default)]
    pub round: usize,
    pub step: StepResult,
    pub generator: GeneratorVerdict,
    /// How much the server waited for its core during the step (None where the kernel keeps
    /// no schedstats).
    #[serde(default)]
    pub interference: Option<Interference>,
}

/// How long, per second of a step, the server was ready to run but did not: a tail set by
/// stalls shows here when another task held the server's core, as steal when the hypervisor did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interference {
    /// Its threads' time waiting on a run queue while another task ran (kernel threads such as
    /// kdamond or ksoftirqd, other processes, its own other threads), ms per s.
    pub runq_wait_ms_per_s: f64,
    /// The hypervisor's steal on the server's core, ms per s (a pinned server only).
    pub steal_ms_per_s: Option<f64>,
}

/// One server at one connection count over every round of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct CountSummary {
    pub connections: usize,
    pub server: String,
    pub rounds: usize,
    /// Rounds whose generator kept its schedule: only those count below.
    pub kept: usize,
    /// Medians over the kept rounds.
    pub p999_us: Option<f64>,
    pub p9999_us: Option<f64>,
    /// Median over the rounds where both kept their schedule of this server's p99.9 over the
    /// baseline's in the same round (steps of one round run minutes apart at most).
    pub p999_ratio: Option<f64>,
    /// Median over the rounds of CPU per request over the baseline's.
    pub cpu_ratio: Option<f64>,
}

/// The median of `v` (the mean of the middle two for an even count); None when empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

/// The median p99.9 and p99.99 (us) of the steps among `points` that completed requests.
pub fn tail_medians<'a>(points: impl Iterator<Item = &'a SweepPoint>) -> (Option<f64>, Option<f64>) {
    let (p999, p9999): (Vec<f64>, Vec<f64>) =
        points.filter(|p| p.step.latency.count > 0).map(|p| (p.step.latency.p999_us, p.step.latency.p9999_us)).unzip();
    (median(p999), median(p9999))
}

/// Every server at every count, over the rounds, against the first server (the baseline).
pub fn summaries(r: &SweepReport) -> Vec<CountSummary> {
    let base = r.servers.first().map(|s| s.name.as_str()).unwrap_or("");
    let mut counts: Vec<usize> = Vec::new();
    for p in &r.points {
        if !counts.contains(&p.connections) {
            counts.push(p.connections);
        }
    }
    let at = |n: usize, server: &str, round: usize| {
        r.points.iter().find(|p| p.connections == n && p.server == server && p.round == round)
    };
    let mut out = Vec::new();
    for &n in &counts {
        for srv in &r.servers {
            let mine: Vec<&SweepPoint> =
                r.points.iter().filter(|p| p.connections == n && p.server == srv.name).collect();
            if mine.is_empty() {
                continue;
            }
            let kept: Vec<&&SweepPoint> = mine.iter().filter(|p| p.generator.kept).collect();
            let (mut ratios, mut cpu) = (Vec::new(), Vec::new());
            for p in &mine {
                let Some(b) = at(n, base, p.round) else { continue };
                if p.generator.kept && b.generator.kept && b.step.latency.p999_us > 0.0 {
                    ratios.push(p.step.latency.p999_us / b.step.latency.p999_us);
                }
                if let (Some(a), Some(b)) = (p.step.server_cpu_us_per_req, b.step.server_cpu_us_per_req) {
                    if b > 0.0 {
                        cpu.push(a / b);
                    }
                }
            }
            let (p999_us, p9999_us) = tail_medians(kept.iter().map(|p| **p));
            out.push(CountSummary {
                connections: n,
                server: srv.name.clone(),
                rounds: mine.len(),
                kept: kept.len(),
                p999_us,
                p9999_us,
                p999_ratio: median(ratios),
                cpu_ratio: median(cpu),
            });
        }
    }
    out
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
    /// Passes over the counts (`--rounds`); 0 in files written before rounds existed.
    #[serde(default)]
    pub rounds: usize,
    pub threads: usize,
    pub servers: Vec<SweepServer>,
    pub points: Vec<SweepPoint>,
    /// Connection counts not run, and why (the open-file limit).
    pub skipped: Vec<String>,
    pub idle: Vec<IdleRss>,
}
