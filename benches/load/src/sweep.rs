//! The connection-count sweep: one rate, several connection counts, every server at each
//! count (alternating which goes first), with the tail percentiles, the server's CPU per
//! request and resident set, how long it waited for its core, and whether the generator
//! itself kept its schedule; repeated `--rounds` times, with medians over the rounds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;

use crate::client::{run_step, ClientConfig, StepResult, LATE_NS};
use crate::compare::{now_unix, progress_bar, say};
use crate::cpu;
use crate::prefill::prefill;
use crate::report;
use crate::server::{Running, ServerSpec};
pub use crate::sweep_report::{
    median, summaries, CountSummary, GeneratorVerdict, IdleRss, Interference, Nofile, SweepPoint, SweepReport,
    SweepServer,
};
use crate::workload::Workload;

/// More sends than this fraction over [`LATE_NS`] late and a step's p99.9 measures the
/// generator's lateness as much as the server: the step is marked as not kept.
pub const MAX_LATE_FRACTION: f64 = 0.001;

/// File descriptors the harness keeps for itself beside its connections.
pub const SPARE_FDS: u64 = 256;

/// Parses a connection list such as "16,1k,5000,10k".
pub fn parse_conns(s: &str) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim) {
        let (num, mult) = match part.strip_suffix(['k', 'K']) {
            Some(n) => (n, 1000),
            None => (part, 1),
        };
        let n: usize = num.parse().with_context(|| format!("bad connection count {part:?} in {s:?}"))?;
        let n = n.checked_mul(mult).with_context(|| format!("connection count {part:?} is too large"))?;
        if n == 0 {
            bail!("connection counts must be positive, got {part:?}");
        }
        if v.contains(&n) {
            bail!("connection count {n} appears twice in {s:?}");
        }
        v.push(n);
    }
    Ok(v)
}

/// The rate of each of `n` counts: one rate for all, or one each; all positive.
pub fn rates_per_count(rates: &[f64], n: usize) -> Result<Vec<f64>> {
    if let Some(r) = rates.iter().find(|r| !(**r > 0.0 && r.is_finite())) {
        bail!("rates must be positive, got {r}");
    }
    match rates.len() {
        1 => Ok(vec![rates[0]; n]),
        k if k == n => Ok(rates.to_vec()),
        k => bail!("{k} rates for {n} connection counts: give one rate, or one per count"),
    }
}

/// Judges the generator's own timeliness in `step` at `conns` connections with `threads`
/// worker threads: it must have sent every scheduled request (within one per thread, the
/// schedule's rounding) and sent at most [`MAX_LATE_FRACTION`] of them more than 1 ms late.
pub fn judge_generator(step: &StepResult, conns: usize, threads: usize) -> GeneratorVerdict {
    let scheduled = (step.target_rate * step.duration_s).round() as u64;
    let sent = step.counters.sent;
    let short = sent + (threads as u64) < scheduled;
    let late = step.late_fraction > MAX_LATE_FRACTION;
    let kept = !short && !late;
    let late_ms = LATE_NS as f64 / 1e6;
    let mut why = Vec::new();
    if late {
        why.push(format!(
            "{:.2}% of requests sent more than {late_ms} ms late (limit {:.1}%), send lag p99.9 {:.3} ms",
            step.late_fraction * 100.0,
            MAX_LATE_FRACTION * 100.0,
            step.send_lag.p999_us / 1000.0
        ));
    }
    if short {
        why.push(format!("sent {sent} of {scheduled} scheduled requests"));
    }
    let note = if kept {
        format!(
            "generator kept its schedule at {conns} connections ({:.3}% sent > {late_ms} ms late, lag p99.9 {:.3} ms, {:.0}% of a core)",
            step.late_fraction * 100.0,
            step.send_lag.p999_us / 1000.0,
            step.client_cpu_util * 100.0
        )
    } else {
        format!(
            "GENERATOR COULD NOT KEEP UP at {conns} connections and {:.0} req/s: {} ({:.0}% of a core); this step's tail includes the generator's lateness",
            step.target_rate,
            why.join("; "),
            step.client_cpu_util * 100.0
        )
    };
    GeneratorVerdict {
        kept,
        scheduled,
        sent,
        lag_p999_us: step.send_lag.p999_us,
        late_fraction: step.late_fraction,
        cpu_util: step.client_cpu_util,
        note,
    }
}

/// Raises the soft RLIMIT_NOFILE to `want` (at most the hard limit). The servers the harness
/// starts inherit it.
pub fn raise_nofile(want: u64) -> Result<Nofile> {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: rl is a valid rlimit on our stack for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        bail!("getrlimit(RLIMIT_NOFILE): {}", std::io::Error::last_os_error());
    }
    let before: u64 = rl.rlim_cur;
    let hard: u64 = rl.rlim_max;
    let target = want.min(hard);
    if target > before {
        rl.rlim_cur = target;
        // SAFETY: rl is a valid rlimit; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
            bail!("setrlimit(RLIMIT_NOFILE, {target}): {}", std::io::Error::last_os_error());
        }
    }
    Ok(Nofile { soft_before: before, soft: target.max(before), hard })
}

pub struct SweepConfig {
    pub out: PathBuf,
    pub workload: Workload,
    /// The first server is the baseline the ratios are taken against.
    pub servers: Vec<ServerSpec>,
    /// Its `connections` is replaced by each count of the sweep.
    pub client: ClientConfig,
    pub conns: Vec<usize>,
    /// One rate for every count, or one per count.
    pub rates: Vec<f64>,
    pub step: Duration,
    /// Passes over the counts (at least 1): a step's tail on a shared machine moves a lot from
    /// one run to the next, so the summary takes medians over rounds.
    pub rounds: usize,
    pub prefill_conns: usize,
    /// Idle connections for the resident-set measurement (0: skip it).
    pub idle_conns: usize,
    pub command: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Opens `n` connections to `addr`, has each answer one `version`, and measures `pid`'s
/// resident set before and with them open.
pub fn idle_rss(name: &str, addr: SocketAddr, pid: u32, n: usize) -> Result<IdleRss> {
    let before = cpu::process_rss_kb(pid).context("reading the server's VmRSS")?;
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .with_context(|| format!("idle connection {i} of {n} to {name}"))?;
        s.set_nodelay(true)?;
        s.write_all(b"version\r\n")?;
        conns.push(s);
    }
    let mut buf = [0u8; 128];
    for (i, s) in conns.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let k = s.read(&mut buf).with_context(|| format!("{name}: no reply on idle connection {i}"))?;
        if !buf[..k].starts_with(b"VERSION") {
            bail!("{name}: unexpected reply on idle connection {i}: {:?}", String::from_utf8_lossy(&buf[..k]));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let idle = cpu::process_rss_kb(pid).context("reading the server's VmRSS")?;
    drop(conns);
    Ok(IdleRss {
        server: name.into(),
        connections: n,
        rss_before_kb: before,
        rss_idle_kb: idle,
        bytes_per_conn: (idle as f64 - before as f64) * 1024.0 / n as f64,
    })
}

pub fn run_sweep(cfg: &SweepConfig) -> Result<SweepReport> {
    if cfg.servers.is_empty() || cfg.conns.is_empty() {
        bail!("need at least one server and one connection count");
    }
    let rates = rates_per_count(&cfg.rates, cfg.conns.len())?;
    cfg.workload.validate()?;
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    let most = cfg.conns.iter().copied().max().unwrap_or(0).max(cfg.idle_conns) as u64;
    // The harness holds every connection; each server holds as many, plus its own.
    let nofile = raise_nofile(most + SPARE_FDS)?;
    let fits = |n: usize| n as u64 + SPARE_FDS <= nofile.soft;
    let mut r = SweepReport {
        tool: format!("segcache-bench {}", env!("CARGO_PKG_VERSION")),
        command: cfg.command.clone(),
        started_unix: now_unix(),
        machine: report::machine(),
        loadavg_start: loadavg(),
        nofile: nofile.clone(),
        workload: Some(cfg.workload.clone()),
        rates: rates.clone(),
        step_seconds: cfg.step.as_secs_f64(),
        rounds: cfg.rounds.max(1),
        threads: cfg.client.threads,
        servers: cfg.servers.iter().map(|s| SweepServer { name: s.name.clone(), command: s.command_line() }).collect(),
        ..Default::default()
    };
    let rounds = cfg.rounds.max(1);
    let pb = progress_bar((rounds * cfg.conns.len() * cfg.servers.len()) as u64);
    for &n in &cfg.conns {
        if !fits(n) {
            let why = format!(
                "{n} connections skipped: the open-file limit is {} (hard {}), {n} + {SPARE_FDS} needed",
                nofile.soft, nofile.hard
            );
            say(&pb, why.clone());
            r.skipped.push(why);
        }
    }
    let mut running = Vec::new();
    for spec in &cfg.servers {
        let log = cfg.out.join(format!("{}-sweep.log", spec.name));
        running.push(spec.start(&log)?);
    }
    for srv in &running {
        pb.set_message(format!("prefilling {} ({} keys)", srv.name, cfg.workload.keys));
        let p = prefill(srv.addr, &cfg.workload, cfg.prefill_conns, cfg.client.seed)
            .with_context(|| format!("prefilling {}", srv.name))?;
        say(&pb, format!("prefilled {} with {} keys in {:.1} s", srv.name, p.stored, p.seconds));
    }
    // Idle connections first, on fresh servers (after the prefill): once a step has held
    // thousands of busy connections, the allocator keeps what it freed and the difference shows nothing.
    if cfg.idle_conns > 0 {
        if fits(cfg.idle_conns) {
            for srv in running.iter_mut() {
                pb.set_message(format!("{}: RSS with {} idle connections", srv.name, cfg.idle_conns));
                let idle = idle_rss(&srv.name, srv.addr, srv.pid, cfg.idle_conns)?;
                say(
                    &pb,
                    format!(
                        "{}: RSS {:.1} MiB -> {:.1} MiB with {} idle connections ({:.0} bytes each)",
                        idle.server,
                        idle.rss_before_kb as f64 / 1024.0,
                        idle.rss_idle_kb as f64 / 1024.0,
                        idle.connections,
                        idle.bytes_per_conn
                    ),
                );
                r.idle.push(idle);
                std::thread::sleep(Duration::from_millis(300));
            }
        } else {
            r.skipped.push(format!(
                "idle RSS with {} connections skipped: the open-file limit is {}",
                cfg.idle_conns, nofile.soft
            ));
        }
    }
    let ns = cfg.servers.len();
    for round in 0..rounds {
        for (i, &conns) in cfg.conns.iter().enumerate() {
            if !fits(conns) {
                pb.inc(ns as u64);
                continue;
            }
            // Which server goes first alternates from count to count and from round to round.
            let order: Vec<usize> =
                if (round + i).is_multiple_of(2) { (0..ns).collect() } else { (0..ns).rev().collect() };
            for s in order {
                let spec_core = cfg.servers[s].core;
                let point = run_point(cfg, &mut running[s], spec_core, conns, rates[i], round, &pb)?;
                r.points.push(point);
                pb.inc(1);
                // The connections close and the server settles between steps.
                std::thread::sleep(Duration::from_millis(500));
            }
            // Partial results survive a later failure.
            write_sweep(&cfg.out, &r)?;
        }
    }
    drop(running);
    r.loadavg_end = loadavg();
    pb.finish_and_clear();
    write_sweep(&cfg.out, &r)?;
    Ok(r)
}

/// One step: `srv` at `conns` connections and `rate`, with the generator's verdict and how
/// long the server waited for its core.
fn run_point(
    cfg: &SweepConfig,
    srv: &mut Running,
    core: Option<usize>,
    conns: usize,
    rate: f64,
    round: usize,
    pb: &ProgressBar,
) -> Result<SweepPoint> {
    if !srv.alive() {
        bail!("{} died during the sweep (see its log in {})", srv.name, cfg.out.display());
    }
    let mut client = cfg.client.clone();
    client.addr = srv.addr;
    client.connections = conns.max(client.threads);
    let label = format!("{} at {conns} connections, {rate:.0} req/s", srv.name);
    pb.set_message(label.clone());
    let before = (cpu::process_schedstat(srv.pid), core.and_then(cpu::core_steal));
    let step = run_step(&client, &cfg.workload, rate, cfg.step, Some(srv.pid), |iv| {
        pb.set_message(format!("{label}: p99.9 {:.3} ms", iv.latency.p999_us / 1000.0));
    })
    .with_context(|| label.clone())?;
    let after = (cpu::process_schedstat(srv.pid), core.and_then(cpu::core_steal));
    let interference = interference(before, after, &step);
    let generator = judge_generator(&step, conns, client.threads);
    let l = &step.latency;
    say(
        pb,
        format!(
            "{label}: achieved {:.0}, p50 {:.3} p99 {:.3} p99.9 {:.3} p99.99 {:.3} ms, server {} us/req, RSS {} MiB{}; {}",
            step.achieved_rate,
            l.p50_us / 1000.0,
            l.p99_us / 1000.0,
            l.p999_us / 1000.0,
            l.p9999_us / 1000.0,
            step.server_cpu_us_per_req.map_or("-".into(), |c| format!("{c:.1}")),
            step.server_rss_kb.map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
            interference.as_ref().map_or(String::new(), |i| format!(
                ", waited for its core {:.1} ms/s{}",
                i.runq_wait_ms_per_s,
                i.steal_ms_per_s.map_or(String::new(), |s| format!(" (steal {s:.1})"))
            )),
            generator.note
        ),
    );
    Ok(SweepPoint { connections: conns, server: srv.name.clone(), round, step, generator, interference })
}

/// Schedstats and steal ticks read before and after a step.
pub type Waits = (Option<(u64, u64)>, Option<u64>);

/// The server's run-queue wait and its core's steal between `before` and `after`, per second
/// of `step`.
pub fn interference(before: Waits, after: Waits, step: &StepResult) -> Option<Interference> {
    let secs = step.duration_s.max(1e-9);
    let (Some((_, w0)), Some((_, w1))) = (before.0, after.0) else { return None };
    let steal = match (before.1, after.1) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 * 1000.0 / cpu::clk_tck() as f64 / secs),
        _ => None,
    };
    Some(Interference { runq_wait_ms_per_s: w1.saturating_sub(w0) as f64 / 1e6 / secs, steal_ms_per_s: steal })
}

/// The median over the step's intervals of their p99.9 (microseconds): a tail that one stall
/// of the shared machine in one interval does not set. None without intervals.
pub fn median_interval_p999(step: &StepResult) -> Option<f64> {
    median(step.intervals.iter().filter(|i| i.latency.count > 0).map(|i| i.latency.p999_us).collect())
}

/// The table: one row per step (connection count, server and, with several rounds, round),
/// with ratios of p99.9 and CPU per request against the first (baseline) server at the same
/// count in the same round; with several rounds, the medians over them first.
pub fn sweep_markdown(r: &SweepReport) -> String {
    let base = r.servers.first().map(|s| s.name.as_str()).unwrap_or("");
    let rounds = r.points.iter().map(|p| p.round + 1).max().unwrap_or(1) > 1;
    let mut s = String::new();
    if rounds {
        s.push_str(&summary_markdown(r, base));
        s.push('\n');
    }
    let round_col = if rounds { " round |" } else { "" };
    s.push_str(&format!(
        "| connections | server |{round_col} target req/s | achieved req/s | p50 ms | p99 ms | p99.9 ms | p99.99 ms | p99.9 x {base} | median 1 s p99.9 ms | server us/req | CPU x {base} | server RSS MiB | waited for its core ms/s (steal) | generator lag p99.9 ms | sent > 1 ms late | generator kept schedule |\n|---|---|{}---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        if rounds { "---|" } else { "" }
    ));
    let mut points: Vec<&SweepPoint> = r.points.iter().collect();
    let count_order = |n: usize| r.points.iter().position(|p| p.connections == n).unwrap_or(0);
    let server_order = |name: &str| r.servers.iter().position(|s| s.name == name).unwrap_or(0);
    points.sort_by_key(|p| (count_order(p.connections), p.round, server_order(&p.server)));
    for p in points {
        let n = p.connections;
        let b = r.points.iter().find(|b| b.server == base && b.connections == n && b.round == p.round);
        let st = &p.step;
        let l = &st.latency;
        let ratio = |a: f64, b: Option<f64>| match b {
            Some(b) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        let cpu_ratio = match (st.server_cpu_us_per_req, b.and_then(|b| b.step.server_cpu_us_per_req)) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        let round = if rounds { format!(" {} |", p.round + 1) } else { String::new() };
        s.push_str(&format!(
            "| {n} | {} |{round} {:.0} | {:.0} | {} | {} | {} | {} | {cpu_ratio} | {} | {} | {:.3} | {:.3}% | {} |\n",
            p.server,
            st.target_rate,
            st.achieved_rate,
            l.tail_cells_ms(),
            ratio(l.p999_us, b.map(|b| b.step.latency.p999_us)),
            median_interval_p999(st).map_or("-".into(), |m| format!("{:.3}", m / 1000.0)),
            st.server_cpu_us_per_req.map_or("-".into(), |c| format!("{c:.1}")),
            st.server_rss_kb.map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
            p.interference.as_ref().map_or("-".into(), |i| format!(
                "{:.1}{}",
                i.runq_wait_ms_per_s,
                i.steal_ms_per_s.map_or(String::new(), |s| format!(" ({s:.1})"))
            )),
            st.send_lag.p999_us / 1000.0,
            st.late_fraction * 100.0,
            if p.generator.kept { "yes" } else { "**NO**" },
        ));
    }
    s
}

/// The medians over the rounds: one row per count and server.
fn summary_markdown(r: &SweepReport, base: &str) -> String {
    let ms = |us: Option<f64>| us.map_or("-".into(), |u| format!("{:.3}", u / 1000.0));
    let x = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let mut s = format!(
        "Medians over the rounds (p99.9 and p99.99 over the rounds whose generator kept its schedule; the ratios are taken within each round):\n\n| connections | server | rounds kept / run | median p99.9 ms | median p99.99 ms | median p99.9 x {base} | median CPU x {base} |\n|---|---|---|---|---|---|---|\n"
    );
    for c in summaries(r) {
        s.push_str(&format!(
            "| {} | {} | {} / {} | {} | {} | {} | {} |\n",
            c.connections,
            c.server,
            c.kept,
            c.rounds,
            ms(c.p999_us),
            ms(c.p9999_us),
            x(c.p999_ratio),
            x(c.cpu_ratio)
        ));
    }
    s
}

fn full_markdown(r: &SweepReport) -> String {
    let mut md = format!(
        "# Connection sweep\n\nCommand: `{}`\n\nMachine: {} ({} cores, kernel {}); load average {} at the start, {} at the end.\n\nOpen files: soft limit {} (was {}), hard {}.\n\n{:?} req/s, {} s per step, {} round(s), {} generator thread(s); the servers alternate which goes first at each count and round.\n\n",
        r.command,
        r.machine.cpu_model,
        r.machine.cores,
        r.machine.kernel,
        r.loadavg_start,
        r.loadavg_end,
        r.nofile.soft,
        r.nofile.soft_before,
        r.nofile.hard,
        r.rates,
        r.step_seconds,
        r.rounds.max(1),
        r.threads,
    );
    md.push_str(&sweep_markdown(r));
    let notes: Vec<&SweepPoint> = r.points.iter().filter(|p| !p.generator.kept).collect();
    if !notes.is_empty() {
        md.push_str("\nGenerator verdicts:\n\n");
        for p in notes {
            md.push_str(&format!("- {}: {}\n", p.server, p.generator.note));
        }
    }
    if !r.idle.is_empty() {
        md.push_str("\n| server | idle connections | RSS before MiB | RSS with them MiB | bytes per connection |\n|---|---|---|---|---|\n");
        for i in &r.idle {
            md.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {:.0} |\n",
                i.server,
                i.connections,
                i.rss_before_kb as f64 / 1024.0,
                i.rss_idle_kb as f64 / 1024.0,
                i.bytes_per_conn
            ));
        }
    }
    for s in &r.skipped {
        md.push_str(&format!("\nSkipped: {s}\n"));
    }
    md
}

/// Writes sweep.json, sweep.md and sweep.png into `out`.
pub fn write_sweep(out: &Path, r: &SweepReport) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    report::write_json(&out.join("sweep.json"), r)?;
    std::fs::write(out.join("sweep.md"), full_markdown(r))?;
    if !r.points.is_empty() {
        crate::plot::plot_sweep(&out.join("sweep.png"), r)?;
    }
    Ok(())
}

pub fn read_sweep(path: &Path) -> Result<SweepReport> {
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&s).with_context(|| format!("parsing {}", path.display()))
}
