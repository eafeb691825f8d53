//! The comparison: the same ramps against several servers (memcached first, as the
//! baseline), alternating step by step so that machine drift hits every server alike.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::client::{run_step, ClientConfig};
use crate::plot;
use crate::prefill::prefill;
use crate::ramp::{RampPlan, RampState, Slo};
use crate::report::{self, Report, ServerRun, WorkloadRun};
use crate::server::ServerSpec;
use crate::workload::Workload;

pub struct CompareConfig {
    pub out: PathBuf,
    pub workloads: Vec<Workload>,
    /// The first server is the baseline the ratios are taken against.
    pub servers: Vec<ServerSpec>,
    pub client: ClientConfig,
    pub plan: RampPlan,
    pub slo: Slo,
    pub step: Duration,
    pub prefill_conns: usize,
    pub command: String,
}

pub fn progress_bar(len: u64) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} steps  {msg}")
            .expect("static template is valid")
            .progress_chars("=> "),
    );
    pb
}

/// Prints a line above the bar, or to stderr when the bar is hidden (no terminal),
/// so logs of non-interactive runs still show every step.
pub fn say(pb: &ProgressBar, msg: String) {
    if pb.is_hidden() {
        eprintln!("{msg}");
    } else {
        pb.println(msg);
    }
}

/// Writes results.json, results.md and latency.png into `out`.
pub fn write_outputs(out: &Path, r: &Report) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    report::write_json(&out.join("results.json"), r)?;
    let md = format!(
        "# Load test results\n\nCommand: `{}`\n\nMachine: {} ({} cores, kernel {})\n\nSLO: p99.9 <= {} ms, achieved >= {:.0}% of target, error+timeout ratio <= {}; {} s per step.\n\n## Summary\n\n{}\n## Every step\n\n{}",
        r.command,
        r.machine.cpu_model,
        r.machine.cores,
        r.machine.kernel,
        r.slo.p999_us / 1000.0,
        r.slo.min_achieved * 100.0,
        r.slo.max_error_ratio,
        r.step_seconds,
        report::summary_markdown(r),
        report::steps_markdown(r)
    );
    std::fs::write(out.join("results.md"), md)?;
    plot::plot(&out.join("latency.png"), &plot::panels_from_report(r), r.slo.p999_us)?;
    Ok(())
}

pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub fn run_compare(cfg: &CompareConfig) -> Result<Report> {
    cfg.plan.validate()?;
    if cfg.servers.is_empty() || cfg.workloads.is_empty() {
        bail!("need at least one server and one workload");
    }
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    let mut report = Report {
        tool: format!("segcache-bench {}", env!("CARGO_PKG_VERSION")),
        command: cfg.command.clone(),
        started_unix: now_unix(),
        machine: report::machine(),
        client: cfg.client.clone(),
        slo: cfg.slo.clone(),
        plan: Some(cfg.plan.clone()),
        step_seconds: cfg.step.as_secs_f64(),
        workloads: Vec::new(),
    };
    let rates = cfg.plan.rates().len();
    let pb = progress_bar((cfg.workloads.len() * cfg.servers.len() * rates) as u64);
    for wl in &cfg.workloads {
        wl.validate()?;
        let mut running = Vec::new();
        for spec in &cfg.servers {
            let log = cfg.out.join(format!("{}-{}.log", spec.name, wl.name));
            running.push(spec.start(&log)?);
        }
        let mut runs: Vec<ServerRun> = cfg
            .servers
            .iter()
            .map(|s| ServerRun { name: s.name.clone(), command: s.command_line(), ..Default::default() })
            .collect();
        for (i, srv) in running.iter().enumerate() {
            pb.set_message(format!("{}: prefilling {} ({} keys)", wl.name, srv.name, wl.keys));
            let p = prefill(srv.addr, wl, cfg.prefill_conns, cfg.client.seed)
                .with_context(|| format!("prefilling {}", srv.name))?;
            say(
                &pb,
                format!(
                    "{}: prefilled {} with {} keys in {:.1} s ({} rejected)",
                    wl.name, srv.name, p.stored, p.seconds, p.rejected
                ),
            );
            runs[i].prefill = Some(p);
        }
        let mut states: Vec<RampState> = cfg.servers.iter().map(|_| RampState::new(&cfg.plan)).collect();
        let n = cfg.servers.len();
        let mut round = 0usize;
        loop {
            // Alternate the order each round too, so neither server always goes first.
            let order: Vec<usize> = if round.is_multiple_of(2) { (0..n).collect() } else { (0..n).rev().collect() };
            let mut ran = false;
            for i in order {
                let Some(rate) = states[i].next_rate() else { continue };
                ran = true;
                let srv = &mut running[i];
                if !srv.alive() {
                    bail!("{} died during the {} workload (see its log in {})", srv.name, wl.name, cfg.out.display());
                }
                let mut client = cfg.client.clone();
                client.addr = srv.addr;
                let label = format!("{}: {} at {rate:.0} req/s", wl.name, srv.name);
                pb.set_message(label.clone());
                let step = run_step(&client, wl, rate, cfg.step, Some(srv.pid), |iv| {
                    pb.set_message(format!("{label}: p99.9 {:.3} ms", iv.latency.p999_us / 1000.0));
                })
                .with_context(|| label.clone())?;
                let verdict = cfg.slo.judge(&step);
                say(
                    &pb,
                    format!(
                    "{label}: achieved {:.0}, p50 {:.3} ms, p99.9 {:.3} ms, server {} us/req, hit {} -> {verdict:?}",
                    step.achieved_rate,
                    step.latency.p50_us / 1000.0,
                    step.latency.p999_us / 1000.0,
                    step.server_cpu_us_per_req.map_or("-".into(), |c| format!("{c:.1}")),
                    step.hit_ratio.map_or("-".into(), |h| format!("{h:.3}")),
                ),
                );
                states[i].record(cfg.slo.passes(&step));
                runs[i].steps.push(step);
                pb.inc(1);
                // Let the server settle between steps.
                std::thread::sleep(Duration::from_millis(200));
            }
            if !ran {
                break;
            }
            round += 1;
        }
        for r in runs.iter_mut() {
            pb.inc((rates - r.steps.len()) as u64);
            r.max_rate_within_slo = cfg.slo.highest_passing(&r.steps);
        }
        drop(running); // stops the servers
        report.workloads.push(WorkloadRun { workload: Some(wl.clone()), servers: runs });
        // Partial results survive a later failure.
        write_outputs(&cfg.out, &report)?;
    }
    pb.finish_and_clear();
    Ok(report)
}
