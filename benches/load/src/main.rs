//! segcache-bench: open-loop memcache load generator. See docs/load.md.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use segcache_bench::client::{run_step, ClientConfig};
use segcache_bench::compare::{self, progress_bar, CompareConfig};
use segcache_bench::mock::{MockConfig, MockServer};
use segcache_bench::prefill::prefill;
use segcache_bench::ramp::{run_ramp, RampPlan, Slo};
use segcache_bench::report::{self, Report, ServerRun, WorkloadRun};
use segcache_bench::server;
use segcache_bench::sweep;
use segcache_bench::workload::{parse_ratio, parse_value_len, Workload};

#[derive(Parser)]
#[command(
    name = "segcache-bench",
    version,
    about = "Open-loop memcache load generator: fixed-rate, latency from the scheduled send time"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One step at a fixed rate against one server.
    Run(RunArgs),
    /// Raise the rate in steps; report the highest rate whose p99.9 stays under the SLO.
    Ramp(RampArgs),
    /// Start memcached and segcache-server and ramp both on the Momento, Twitter and Zipf workloads.
    Compare(CompareArgs),
    /// A mock memcache server with an injected reply delay (for trying the harness).
    Mock(MockArgs),
    /// Redraw the table and plot from a results.json, or from a sweep's sweep.json.
    Report {
        json: PathBuf,
        #[arg(long)]
        out: Option<PathBuf>,
        /// Judge the steps again against this p99.9 SLO (e.g. 2 for Momento's 2 ms SLO).
        #[arg(long)]
        slo_ms: Option<f64>,
    },
}

#[derive(Args, Clone)]
struct ClientArgs {
    /// Connections in all.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Client worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Requests in flight per connection (pipelining depth).
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Reply timeout, from the scheduled send time.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// Pin client threads to these cores, e.g. "1" or "2,3".
    #[arg(long, value_delimiter = ',')]
    pin_cores: Vec<usize>,
    /// Reporting interval.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print every interval's percentiles.
    #[arg(long)]
    verbose: bool,
    /// SCHED_FIFO priority for the client threads (and, in compare, the servers) so other
    /// processes on a shared machine do not preempt the measurement. Needs root.
    #[arg(long)]
    rt_priority: Option<i32>,
    /// Speak TLS to the server (segcache-server -Z, memcached -Z), checking its certificate
    /// against this CA file (PEM); the certificate must name the server's IP address.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
}

#[derive(Args, Clone)]
struct WorkloadArgs {
    /// Preset: momento (4 B keys, 256 B values, 80:20), twitter (64 B keys and values, 95:5),
    /// zipf (Zipf 0.99 over 10x the server memory). Flags below override it.
    #[arg(long, default_value = "momento")]
    workload: String,
    #[arg(long)]
    keys: Option<u64>,
    #[arg(long)]
    key_len: Option<usize>,
    /// Value length: "256" or a range "64-1024".
    #[arg(long)]
    value_len: Option<String>,
    /// get:set or get:set:delete, e.g. "80:20".
    #[arg(long)]
    ratio: Option<String>,
    /// Zipf exponent for key popularity (0 = uniform).
    #[arg(long)]
    zipf: Option<f64>,
    /// Keys per get.
    #[arg(long)]
    mget: Option<usize>,
    /// TTL in seconds for sets (0 = never expires).
    #[arg(long)]
    ttl: Option<u32>,
    /// Server memory in MiB (sizes the zipf preset's key space).
    #[arg(long, default_value_t = 64)]
    memory_mb: u64,
}

impl WorkloadArgs {
    fn build(&self) -> Result<Workload> {
        let mut w = Workload::preset(&self.workload, self.memory_mb)?;
        if let Some(k) = self.keys {
            w.keys = k;
        }
        if let Some(k) = self.key_len {
            w.key_len = k;
        }
        if let Some(v) = &self.value_len {
            (w.value_min, w.value_max) = parse_value_len(v)?;
        }
        if let Some(r) = &self.ratio {
            (w.get, w.set, w.delete) = parse_ratio(r)?;
        }
        if let Some(z) = self.zipf {
            w.zipf = (z != 0.0).then_some(z);
        }
        if let Some(m) = self.mget {
            w.mget = m;
        }
        if let Some(t) = self.ttl {
            w.ttl = t;
        }
        w.validate()?;
        Ok(w)
    }
}

#[derive(Args)]
struct TargetArgs {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:11211")]
    server: String,
    /// Server process id, to measure its CPU per request from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Set every key once before measuring.
    #[arg(long)]
    prefill: bool,
    #[arg(long, default_value_t = 4)]
    prefill_conns: usize,
    /// Prefill through this (plain) address instead of --server: the prefill speaks no TLS,
    /// so with --tls-ca give the server's `notls:` listener here.
    #[arg(long)]
    prefill_server: Option<String>,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    client: ClientArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Requests per second.
    #[arg(long, default_value_t = 10_000.0)]
    rate: f64,
    #[arg(long, default_value_t = 5.0)]
    duration_s: f64,
    /// Write the step as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Clone)]
struct RampPlanArgs {
    #[arg(long, default_value_t = 10_000.0)]
    start: f64,
    #[arg(long, default_value_t = 10_000.0)]
    step: f64,
    #[arg(long, default_value_t = 200_000.0)]
    stop: f64,
    /// Seconds per rate.
    #[arg(long, default_value_t = 5.0)]
    step_duration_s: f64,
    /// Stop after this many failed steps in a row.
    #[arg(long, default_value_t = 2)]
    stop_after_fails: usize,
    /// p99.9 SLO in milliseconds.
    #[arg(long, default_value_t = 1.0)]
    slo_ms: f64,
    /// Fraction of the target rate the server must deliver.
    #[arg(long, default_value_t = 0.95)]
    min_achieved: f64,
    /// Largest (errors + timeouts) / requests that still passes.
    #[arg(long, default_value_t = 0.0)]
    max_error_ratio: f64,
}

impl RampPlanArgs {
    fn plan(&self) -> RampPlan {
        RampPlan { start: self.start, step: self.step, stop: self.stop, stop_after_fails: self.stop_after_fails }
    }
    fn slo(&self) -> Result<Slo> {
        if self.slo_ms.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            || !(0.0..=1.0).contains(&self.min_achieved)
            || !(0.0..=1.0).contains(&self.max_error_ratio)
        {
            bail!("--slo-ms must be positive, --min-achieved and --max-error-ratio within 0..1");
        }
        Ok(Slo {
            p999_us: self.slo_ms * 1000.0,
            min_achieved: self.min_achieved,
            max_error_ratio: self.max_error_ratio,
        })
    }
    fn step_duration(&self) -> Result<Duration> {
        duration(self.step_duration_s)
    }
}

#[derive(Args)]
struct RampArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    client: ClientArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    plan: RampPlanArgs,
    /// Server name in the results.
    #[arg(long, default_value = "server")]
    name: String,
    /// Folder for results.json, results.md and latency.png.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct CompareArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[command(flatten)]
    plan: RampPlanArgs,
    /// Results folder.
    #[arg(long, default_value = "results/compare")]
    out: PathBuf,
    /// Workload presets to run.
    #[arg(long, value_delimiter = ',', default_value = "momento,twitter,zipf")]
    workloads: Vec<String>,
    /// Servers to run; the first is the baseline. NAME=PATH adds another segcache-server
    /// binary under that name (a before/after in the same run).
    #[arg(long, value_delimiter = ',', default_value = "memcached,segcache")]
    servers: Vec<String>,
    #[arg(long, default_value = "memcached")]
    memcached: PathBuf,
    #[arg(long, default_value = "target/release/segcache-server")]
    segcache: PathBuf,
    /// Worker threads for every server.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// Memory for every server, MiB.
    #[arg(long, default_value_t = 64)]
    memory_mb: u64,
    /// Start every segcache-server with -L: its heap is faulted in at start, as a server's is
    /// once its log has gone round the heap. Without it, the first pass of the log over the heap
    /// falls in the measured steps and each segment it opens first waits for its pages.
    #[arg(long)]
    prefault: bool,
    /// Core the servers are pinned to (taskset); -1 for none.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    server_core: i64,
    /// First port; servers take consecutive ports.
    #[arg(long, default_value_t = 22122)]
    base_port: u16,
    #[arg(long, default_value_t = 4)]
    prefill_conns: usize,
    /// Connection-count sweep instead of the ramp, e.g. "16,1k,5k,10k": one step per count at
    /// --rate on the first of --workloads, every server at each count; writes sweep.json,
    /// sweep.md and sweep.png (p99.9 and p99.99 vs connections).
    #[arg(long)]
    conns: Option<String>,
    /// The sweep's request rate (req/s): one for every count, or one per count ("40000,40000,40000,20000").
    #[arg(long, value_delimiter = ',', default_value = "40000")]
    rate: Vec<f64>,
    /// The sweep's idle connections for the servers' RSS (default: the largest count; 0 skips it).
    #[arg(long)]
    idle_conns: Option<usize>,
    /// Passes of the sweep over its counts; with more than one, sweep.md adds medians over the
    /// rounds and the plot shows them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
}

/// Replaces the value of `flag` in `args`, or appends the pair.
fn set_arg(args: &mut Vec<String>, flag: &str, value: String) {
    match args.iter().position(|a| a == flag) {
        Some(i) if i + 1 < args.len() => args[i + 1] = value,
        _ => args.extend([flag.to_string(), value]),
    }
}

#[derive(Args)]
struct MockArgs {
    #[arg(long, default_value_t = 11311)]
    port: u16,
    /// Reply delay in microseconds.
    #[arg(long, default_value_t = 0)]
    delay_us: u64,
}

fn duration(secs: f64) -> Result<Duration> {
    if !(secs > 0.0 && secs.is_finite()) {
        bail!("durations must be positive seconds, got {secs}");
    }
    Ok(Duration::from_secs_f64(secs))
}

fn resolve(s: &str) -> Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("bad server address {s:?}"))?
        .next()
        .with_context(|| format!("{s:?} resolves to no address"))
}

fn client_config(addr: SocketAddr, a: &ClientArgs) -> Result<ClientConfig> {
    let mut c = ClientConfig::new(addr);
    c.connections = a.connections;
    c.threads = a.threads;
    c.depth = a.depth;
    c.timeout_ms = a.timeout_ms;
    c.pin_cores = a.pin_cores.clone();
    c.interval_ms = a.interval_ms;
    c.seed = a.seed;
    c.rt_priority = a.rt_priority;
    c.tls_ca = a.tls_ca.clone();
    c.validate()?;
    Ok(c)
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn print_interval(verbose: bool, iv: &segcache_bench::client::IntervalResult) {
    if verbose {
        let l = &iv.latency;
        eprintln!(
            "t={:>5.1}s rate={:>8.0} p50={:.3} p90={:.3} p99={:.3} p99.9={:.3} p99.99={:.3} max={:.3} ms hit={} err={} timeout={}",
            iv.t_s,
            iv.rate,
            l.p50_us / 1e3,
            l.p90_us / 1e3,
            l.p99_us / 1e3,
            l.p999_us / 1e3,
            l.p9999_us / 1e3,
            l.max_us / 1e3,
            iv.hit_ratio.map_or("-".into(), |h| format!("{h:.3}")),
            iv.counters.errors,
            iv.counters.timeouts
        );
    }
}

fn do_prefill(t: &TargetArgs, addr: SocketAddr, w: &Workload, seed: u64) -> Result<()> {
    if t.prefill {
        let addr = match &t.prefill_server {
            Some(s) => resolve(s)?,
            None => addr,
        };
        let p = prefill(addr, w, t.prefill_conns, seed)?;
        eprintln!("prefill: {} keys stored, {} rejected, {:.1} s", p.stored, p.rejected, p.seconds);
    }
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run(a) => {
            let addr = resolve(&a.target.server)?;
            let w = a.workload.build()?;
            let c = client_config(addr, &a.client)?;
            do_prefill(&a.target, addr, &w, c.seed)?;
            let pb = progress_bar(1);
            pb.set_message(format!("{:.0} req/s for {} s", a.rate, a.duration_s));
            let verbose = a.client.verbose;
            let step = run_step(&c, &w, a.rate, duration(a.duration_s)?, a.target.server_pid, |iv| {
                pb.set_message(format!("t={:.0}s p99.9 {:.3} ms", iv.t_s, iv.latency.p999_us / 1e3));
                pb.suspend(|| print_interval(verbose, iv));
            })?;
            pb.finish_and_clear();
            let json = serde_json::to_string_pretty(&step)?;
            if let Some(p) = &a.json {
                std::fs::write(p, &json).with_context(|| format!("writing {}", p.display()))?;
            }
            println!("{json}");
        }
        Cmd::Ramp(a) => {
            let addr = resolve(&a.target.server)?;
            let w = a.workload.build()?;
            let c = client_config(addr, &a.client)?;
            let (plan, slo, dur) = (a.plan.plan(), a.plan.slo()?, a.plan.step_duration()?);
            plan.validate()?;
            do_prefill(&a.target, addr, &w, c.seed)?;
            let pb = progress_bar(plan.rates().len() as u64);
            let verbose = a.client.verbose;
            let steps = run_ramp(&plan, &slo, |rate| {
                pb.set_message(format!("{rate:.0} req/s"));
                let s = run_step(&c, &w, rate, dur, a.target.server_pid, |iv| {
                    pb.set_message(format!("{rate:.0} req/s: p99.9 {:.3} ms", iv.latency.p999_us / 1e3));
                    pb.suspend(|| print_interval(verbose, iv));
                })?;
                compare::say(
                    &pb,
                    format!(
                        "{rate:.0} req/s: achieved {:.0}, p99.9 {:.3} ms -> {:?}",
                        s.achieved_rate,
                        s.latency.p999_us / 1e3,
                        slo.judge(&s)
                    ),
                );
                pb.inc(1);
                Ok(s)
            })?;
            pb.finish_and_clear();
            let max = slo.highest_passing(&steps);
            let r = Report {
                tool: format!("segcache-bench {}", env!("CARGO_PKG_VERSION")),
                command: command_line(),
                started_unix: compare::now_unix(),
                machine: report::machine(),
                client: c,
                slo: slo.clone(),
                plan: Some(plan),
                step_seconds: dur.as_secs_f64(),
                workloads: vec![WorkloadRun {
                    workload: Some(w),
                    servers: vec![ServerRun {
                        name: a.name,
                        command: String::new(),
                        prefill: None,
                        steps,
                        max_rate_within_slo: max,
                    }],
                }],
            };
            if let Some(out) = &a.out {
                compare::write_outputs(out, &r)?;
                eprintln!("wrote {}/results.json, results.md, latency.png", out.display());
            }
            println!("{}", report::summary_markdown(&r));
        }
        Cmd::Compare(a) => {
            let core = (a.server_core >= 0).then_some(a.server_core as usize);
            let mut servers = Vec::new();
            for (i, name) in a.servers.iter().enumerate() {
                let port = a.base_port + i as u16;
                servers.push(match name.as_str() {
                    "memcached" => server::memcached(&a.memcached, port, a.server_threads, a.memory_mb, core),
                    "segcache" => server::segcache(&a.segcache, port, a.server_threads, a.memory_mb, core, a.prefault),
                    other => match other.split_once('=') {
                        // Another segcache-server build beside the first, for a before/after.
                        Some((label, path)) if !label.is_empty() && !path.is_empty() => {
                            let mut s = server::segcache(
                                Path::new(path),
                                port,
                                a.server_threads,
                                a.memory_mb,
                                core,
                                a.prefault,
                            );
                            s.name = label.to_string();
                            s
                        }
                        _ => bail!(
                            "unknown server {other:?} (expected memcached, segcache or NAME=PATH of a segcache-server)"
                        ),
                    },
                });
            }
            for s in servers.iter_mut() {
                s.rt_priority = a.client.rt_priority;
            }
            if let Some(list) = &a.conns {
                let conns = sweep::parse_conns(list)?;
                let most = conns.iter().copied().max().unwrap_or(0);
                let idle_conns = a.idle_conns.unwrap_or(most);
                for s in servers.iter_mut() {
                    // Both servers' connection limit (-c) must admit the largest count, and
                    // both take a listen backlog (-b).
                    set_arg(&mut s.args, "-c", (most.max(idle_conns) + 1024).to_string());
                    set_arg(&mut s.args, "-b", "4096".to_string());
                }
                let name = a.workloads.first().map_or("momento", |w| w.as_str());
                let cfg = sweep::SweepConfig {
                    out: a.out.clone(),
                    workload: Workload::preset(name, a.memory_mb)?,
                    servers,
                    client: client_config(SocketAddr::from(([127, 0, 0, 1], a.base_port)), &a.client)?,
                    conns,
                    rates: a.rate.clone(),
                    step: a.plan.step_duration()?,
                    rounds: a.rounds as usize,
                    prefill_conns: a.prefill_conns,
                    idle_conns,
                    command: command_line(),
                };
                let r = sweep::run_sweep(&cfg)?;
                println!("{}", sweep::sweep_markdown(&r));
                for p in r.points.iter().filter(|p| !p.generator.kept) {
                    println!("{}: {}", p.server, p.generator.note);
                }
                eprintln!("wrote {}/sweep.json, sweep.md, sweep.png", a.out.display());
                return Ok(());
            }
            let workloads = a.workloads.iter().map(|n| Workload::preset(n, a.memory_mb)).collect::<Result<Vec<_>>>()?;
            let cfg = CompareConfig {
                out: a.out.clone(),
                workloads,
                servers,
                client: client_config(SocketAddr::from(([127, 0, 0, 1], a.base_port)), &a.client)?,
                plan: a.plan.plan(),
                slo: a.plan.slo()?,
                step: a.plan.step_duration()?,
                prefill_conns: a.prefill_conns,
                command: command_line(),
            };
            let r = compare::run_compare(&cfg)?;
            println!("{}", report::summary_markdown(&r));
            eprintln!("wrote {}/results.json, results.md, latency.png", a.out.display());
        }
        Cmd::Mock(a) => {
            let m = MockServer::start(
                MockConfig { delay: Duration::from_micros(a.delay_us), stall: None, close_after: None },
                a.port,
            )?;
            eprintln!("mock memcache server on {} (delay {} us); Ctrl-C to stop", m.addr(), a.delay_us);
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        Cmd::Report { json, out, slo_ms } => {
            let out = out.unwrap_or_else(|| json.parent().map(PathBuf::from).unwrap_or_default());
            if json.file_name().is_some_and(|n| n == "sweep.json") {
                if slo_ms.is_some() {
                    bail!("--slo-ms applies to a ramp's results.json, not to a sweep");
                }
                let r = sweep::read_sweep(&json)?;
                sweep::write_sweep(&out, &r)?;
                println!("{}", sweep::sweep_markdown(&r));
                return Ok(());
            }
            let mut r = report::read_report(&json)?;
            if let Some(ms) = slo_ms {
                if ms.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                    bail!("--slo-ms must be positive");
                }
                r.slo.p999_us = ms * 1000.0;
                for w in r.workloads.iter_mut() {
                    for s in w.servers.iter_mut() {
                        s.max_rate_within_slo = r.slo.highest_passing(&s.steps);
                    }
                }
            }
            compare::write_outputs(&out, &r)?;
            println!("{}", report::summary_markdown(&r));
        }
    }
    Ok(())
}
