//! Results as JSON and as markdown tables.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::client::{ClientConfig, StepResult};
use crate::prefill::PrefillResult;
use crate::ramp::{RampPlan, Slo};
use crate::workload::Workload;

/// The machine the run was on, as the README table names it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    Machine { cpu_model, cores: std::thread::available_parallelism().map_or(1, |n| n.get()), kernel }
}

/// One server's ramp on one workload.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServerRun {
    pub name: String,
    /// The server's command line.
    pub command: String,
    pub prefill: Option<PrefillResult>,
    pub steps: Vec<StepResult>,
    pub max_rate_within_slo: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkloadRun {
    pub workload: Option<Workload>,
    pub servers: Vec<ServerRun>,
}

/// A whole run: everything needed to redraw the table and the plot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub command: String,
    pub started_unix: u64,
    pub machine: Machine,
    pub client: ClientConfig,
    pub slo: Slo,
    pub plan: Option<RampPlan>,
    pub step_seconds: f64,
    pub workloads: Vec<WorkloadRun>,
}

pub fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(v)?;
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

pub fn read_report(path: &Path) -> Result<Report> {
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&s).with_context(|| format!("parsing {}", path.display()))
}

fn fmt_rate(r: Option<f64>) -> String {
    r.map_or("none".into(), |r| format!("{:.0}", r))
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// CPU per request at `rate` (the step with that target rate), if measured.
fn cpu_at(run: &ServerRun, rate: f64) -> Option<f64> {
    run.steps.iter().find(|s| s.target_rate == rate).and_then(|s| s.server_cpu_us_per_req)
}

/// The rate used to compare CPU per request: the highest rate every server passed,
/// else the lowest rate every server ran.
pub fn common_rate(w: &WorkloadRun, slo: &Slo) -> Option<f64> {
    let sets: Vec<Vec<(f64, bool)>> =
        w.servers.iter().map(|s| s.steps.iter().map(|st| (st.target_rate, slo.passes(st))).collect()).collect();
    let first = sets.first()?;
    let everyone =
        |rate: f64, need_pass: bool| sets.iter().all(|s| s.iter().any(|&(r, p)| r == rate && (p || !need_pass)));
    let passed = first
        .iter()
        .map(|&(r, _)| r)
        .filter(|&r| everyone(r, true))
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    passed.or_else(|| {
        first
            .iter()
            .map(|&(r, _)| r)
            .filter(|&r| everyone(r, false))
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))))
    })
}

/// The summary table: throughput inside the SLO and CPU per request, with ratios
/// against the first server (the baseline, memcached in a comparison).
pub fn summary_markdown(r: &Report) -> String {
    let slo_ms = r.slo.p999_us / 1000.0;
    let mut s = String::new();
    s.push_str(&format!(
        "| workload | server | max req/s with p99.9 <= {slo_ms} ms | x baseline | p99.9 there (ms) | server CPU us/req (at req/s) | x baseline | hit ratio | harness kept schedule |\n"
    ));
    s.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for w in &r.workloads {
        let name = w.workload.as_ref().map_or("-".into(), |w| w.name.clone());
        let common = common_rate(w, &r.slo);
        let base = w.servers.first();
        for run in &w.servers {
            let max = run.max_rate_within_slo;
            let ratio = match (max, base.and_then(|b| b.max_rate_within_slo)) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "-".into(),
            };
            let at_max = max.and_then(|m| run.steps.iter().find(|s| s.target_rate == m));
            let p999 = at_max.map(|s| s.latency.p999_us / 1000.0);
            let hit = at_max.or(run.steps.first()).and_then(|s| s.hit_ratio);
            let cpu = common.and_then(|c| cpu_at(run, c));
            let cpu_base = common.and_then(|c| base.and_then(|b| cpu_at(b, c)));
            let cpu_ratio = match (cpu, cpu_base) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "-".into(),
            };
            let kept = run.steps.iter().filter(|s| s.kept_schedule).count();
            s.push_str(&format!(
                "| {name} | {} | {} | {ratio} | {} | {} ({}) | {cpu_ratio} | {} | {kept}/{} steps |\n",
                run.name,
                fmt_rate(max),
                fmt_opt(p999, 3),
                fmt_opt(cpu, 1),
                fmt_rate(common),
                fmt_opt(hit, 3),
                run.steps.len(),
            ));
        }
    }
    s
}

/// Every step, for the record.
pub fn steps_markdown(r: &Report) -> String {
    let mut s = String::from(
        "| workload | server | target req/s | achieved | p50 ms | p99 ms | p99.9 ms | p99.99 ms | max ms | hit ratio | errors | timeouts | server us/req | harness CPU | harness lag p99.9 us | SLO |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for w in &r.workloads {
        let name = w.workload.as_ref().map_or("-".into(), |w| w.name.clone());
        for run in &w.servers {
            for st in &run.steps {
                let l = &st.latency;
                s.push_str(&format!(
                    "| {name} | {} | {:.0} | {:.0} | {} | {:.3} | {} | {} | {} | {} | {:.0}% | {:.0} | {:?} |\n",
                    run.name,
                    st.target_rate,
                    st.achieved_rate,
                    l.tail_cells_ms(),
                    l.max_us / 1000.0,
                    fmt_opt(st.hit_ratio, 3),
                    st.counters.errors,
                    st.counters.timeouts,
                    fmt_opt(st.server_cpu_us_per_req, 1),
                    st.client_cpu_util * 100.0,
                    st.send_lag.p999_us,
                    r.slo.judge(st),
                ));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Counters;

    fn step(rate: f64, p999: f64, cpu: f64) -> StepResult {
        let mut s = StepResult { target_rate: rate, achieved_rate: rate, ..Default::default() };
        s.latency.p999_us = p999;
        s.server_cpu_us_per_req = Some(cpu);
        s.counters = Counters { sent: 10, completed: 10, ..Default::default() };
        s
    }

    #[test]
    fn table_has_ratios_against_the_baseline() {
        let slo = Slo::default();
        let a = ServerRun {
            name: "memcached".into(),
            steps: vec![step(10_000.0, 500.0, 12.0), step(20_000.0, 2000.0, 12.0)],
            max_rate_within_slo: Some(10_000.0),
            ..Default::default()
        };
        let b = ServerRun {
            name: "segcache".into(),
            steps: vec![step(10_000.0, 300.0, 6.0), step(20_000.0, 600.0, 6.0)],
            max_rate_within_slo: Some(20_000.0),
            ..Default::default()
        };
        let w = WorkloadRun { workload: Some(Workload::momento()), servers: vec![a, b] };
        assert_eq!(common_rate(&w, &slo), Some(10_000.0));
        let r = Report {
            tool: "t".into(),
            command: "c".into(),
            started_unix: 0,
            machine: Machine::default(),
            client: ClientConfig::new("127.0.0.1:1".parse().unwrap()),
            slo,
            plan: None,
            step_seconds: 1.0,
            workloads: vec![w],
        };
        let md = summary_markdown(&r);
        let seg = md.lines().find(|l| l.contains("segcache")).unwrap();
        assert!(seg.contains("| 20000 | 2.00 |"), "{seg}");
        assert!(seg.contains("| 6.0 (10000) | 0.50 |"), "{seg}");
        assert!(steps_markdown(&r).lines().count() == 6);
        let json = serde_json::to_string(&r).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back.workloads[0].servers[1].steps.len(), 2);
    }
}
