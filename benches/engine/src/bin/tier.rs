//! Hit ratio with a flash tier: a DRAM heap alone, the same heap over a tier file, and an
//! all-DRAM cache as large as both, on Zipf keys over a key space many times the DRAM heap,
//! with a 90:10 get:set mix and cache-aside fill (a get that misses is followed by a set of that
//! key). For each DRAM size and value size it prints the hit ratios and the resident memory of
//! each configuration, then the latency of reads served from the tier beside the floor of a bare
//! 4 KiB random read of the same file (both after the file's pages are dropped from the page
//! cache), and writes the hit ratios against DRAM size as a CSV and an SVG plot.
//!
//! Each configuration runs in its own process (this program again, with `--child`), so that its
//! resident memory is its cache's own. The tier file goes in `--dir`: put it on the disk to be
//! measured, not on tmpfs.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use segcache_core::{Builder, Segcache};
use segcache_engine_benches::keys::{format_key, Key, KEY_LEN};
use segcache_engine_benches::loopback::{self, Served};
use segcache_engine_benches::mem::{mib, rss_bytes};
use segcache_engine_benches::workload::{KeyDist, KeyGen};

#[derive(Parser, Debug)]
#[command(about = "Hit ratio and read latency with the flash tier, against DRAM alone and all-DRAM")]
struct Args {
    /// DRAM heap sizes in MiB, comma separated (one row of the table, one point of the plot each).
    #[arg(long, value_delimiter = ',', default_value = "16,32,64")]
    dram_mib: Vec<usize>,
    /// The tier file's size in MiB.
    #[arg(long, default_value_t = 1024)]
    tier_mib: usize,
    /// Value sizes in bytes, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "64,1024")]
    values: Vec<usize>,
    /// The key space's size in MiB of keys and values: the number of distinct keys is this over
    /// the key and value length.
    #[arg(long, default_value_t = 1024)]
    key_space_mib: usize,
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Percentage of requests that are sets.
    #[arg(long, default_value_t = 10)]
    set_pct: u32,
    /// Requests before counting starts, as a multiple of the number of keys.
    #[arg(long, default_value_t = 2.0)]
    warmup_x: f64,
    /// Requests counted, as a multiple of the number of keys.
    #[arg(long, default_value_t = 2.0)]
    ops_x: f64,
    /// Tier reads timed, and bare reads of the floor.
    #[arg(long, default_value_t = 20_000)]
    samples: usize,
    /// Folder for the tier file (on the disk to be measured).
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// Write the hit ratios against DRAM size here, as CSV and (with the extension `.svg`) a plot.
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Eviction policy other than the default, for every configuration.
    #[arg(long)]
    policy: Option<segcache_core::Policy>,
    /// Also run memcached with extstore (`-o ext_path`) and segcache-server with its tier, at
    /// the same DRAM and tier sizes, over loopback: this memcached binary.
    #[arg(long)]
    memcached: Option<PathBuf>,
    /// The segcache-server binary for `--memcached`'s comparison.
    #[arg(long, default_value = "target/release/segcache-server")]
    server: PathBuf,
    /// Instead of the comparison, run the tier alone with each of these `tier_promote_after`
    /// settings (comma separated; 0: no promotion on read), and print what each costs and
    /// saves: hit ratio, the share of gets the tier served (one device read each), promotions,
    /// and bytes written to the tier.
    #[arg(long, value_delimiter = ',')]
    promote_after: Vec<u8>,
    /// Inner run: one configuration ("dram", "tier", "tier+N" for the tier with
    /// `tier_promote_after(N)`, or "all"), one DRAM size, one value size.
    #[arg(long, hide = true, num_args = 3, value_names = ["CONFIG", "DRAM_MIB", "VALUE"])]
    child: Option<Vec<String>>,
}

/// What one configuration measured.
#[derive(Debug, Default, Clone, Copy)]
struct Outcome {
    hit_ratio: f64,
    rss: u64,
    /// Tier reads (p50, p99) and the bare read floor (p50, p99), in microseconds.
    latency: Option<[f64; 4]>,
    /// Of the counted gets: those the tier served, and promotions; bytes written to the tier.
    flash_hits: u64,
    promoted: u64,
    flash_written: u64,
    gets: u64,
}

impl Outcome {
    fn line(&self) -> String {
        let l = self.latency.unwrap_or([f64::NAN; 4]);
        format!(
            "{} {} {} {} {} {} {} {} {} {}",
            self.hit_ratio,
            self.rss,
            l[0],
            l[1],
            l[2],
            l[3],
            self.flash_hits,
            self.promoted,
            self.flash_written,
            self.gets
        )
    }

    fn parse(line: &str) -> Option<Outcome> {
        let v: Vec<f64> = line.split_whitespace().map(|s| s.parse().ok()).collect::<Option<_>>()?;
        let [hit_ratio, rss, a, b, c, d, flash_hits, promoted, flash_written, gets] = v[..] else { return None };
        let latency = (!a.is_nan()).then_some([a, b, c, d]);
        Some(Outcome {
            hit_ratio,
            rss: rss as u64,
            latency,
            flash_hits: flash_hits as u64,
            promoted: promoted as u64,
            flash_written: flash_written as u64,
            gets: gets as u64,
        })
    }
}

fn keys_for(a: &Args, value: usize) -> usize {
    (a.key_space_mib << 20) / (KEY_LEN + value)
}

impl Args {
    /// The network runs' workload, as the in-process runs draw it.
    fn workload(&self, value: usize) -> loopback::Workload {
        let n = keys_for(self, value);
        loopback::Workload {
            keys: n,
            zipf: self.zipf,
            set_pct: self.set_pct,
            value,
            warmup: (self.warmup_x * n as f64) as u64,
            ops: (self.ops_x * n as f64) as u64,
            seed: self.seed,
        }
    }
}

fn tier_path(a: &Args) -> PathBuf {
    a.dir.join(format!("segcache-tier-bench-{}.tier", std::process::id()))
}

/// Runs one configuration in this process and measures it.
fn child(a: &Args, config: &str, dram_mib: usize, value_len: usize) -> Outcome {
    let path = tier_path(a);
    let promote = config.strip_prefix("tier+").map(|n| n.parse::<u8>().expect("tier+N"));
    let tier = config == "tier" || promote.is_some();
    let heap = match config {
        "all" => (dram_mib + a.tier_mib) << 20,
        _ => dram_mib << 20,
    };
    let mut b = Builder::new().heap_size(heap);
    if let Some(p) = a.policy {
        b = b.eviction(p);
    }
    if tier {
        b = b.tier(&path, (a.tier_mib as u64) << 20);
    }
    if let Some(n) = promote {
        b = b.tier_promote_after(n);
    }
    let mut cache = b.build().expect("cache");
    let n = keys_for(a, value_len);
    let value = vec![b'v'; value_len];
    let gen = KeyGen::new(n, KeyDist::Zipf(a.zipf));
    let mut rng = SmallRng::seed_from_u64(a.seed);
    let (warmup, ops) = ((a.warmup_x * n as f64) as u64, (a.ops_x * n as f64) as u64);
    let (mut gets, mut hits) = (0u64, 0u64);
    let mut k: Key = [0; KEY_LEN];
    let mut at_warm = cache.stats();
    for i in 0..warmup + ops {
        if i == warmup {
            at_warm = cache.stats();
        }
        format_key(gen.sample(&mut rng), &mut k);
        if rng.gen_range(0..100) < a.set_pct {
            cache.set(&k, &value, 0, Duration::ZERO).expect("set");
            continue;
        }
        let hit = cache.get_with(&k, |item| item.value().len() == value_len) == Some(true);
        if !hit {
            cache.set(&k, &value, 0, Duration::ZERO).expect("set");
        }
        if i >= warmup {
            gets += 1;
            hits += u64::from(hit);
        }
    }
    let rss = rss_bytes().expect("VmRSS from /proc/self/status");
    let end = cache.stats();
    let latency = (config == "tier").then(|| tier_latency(a, &cache, &gen, &path));
    drop(cache);
    if tier {
        let _ = std::fs::remove_file(&path);
    }
    Outcome {
        hit_ratio: hits as f64 / gets.max(1) as f64,
        rss,
        latency,
        flash_hits: end.flash_hits - at_warm.flash_hits,
        promoted: end.flash_promoted - at_warm.flash_promoted,
        flash_written: end.flash_bytes_written - at_warm.flash_bytes_written,
        gets,
    }
}

/// Drops the file's pages from the page cache, so that reads go to the device.
fn drop_cached(path: &Path) {
    let f = File::open(path).expect("tier file");
    f.sync_all().expect("sync the tier file");
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor; advice only, which the kernel may ignore.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// p50 and p99 of `v`, in microseconds.
fn percentiles(v: &mut [Duration]) -> [f64; 2] {
    v.sort_unstable();
    let at = |q: f64| v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1))).copied();
    let us = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
    [us(at(0.50)), us(at(0.99))]
}

/// Latency of reads that the tier serves (keys drawn as the workload draws them, kept if they
/// live on the tier: present, but not in a DRAM segment), then of bare 4 KiB reads at random
/// aligned offsets of the same file, each after the file's pages are dropped.
fn tier_latency(a: &Args, cache: &Segcache, gen: &KeyGen, path: &Path) -> [f64; 4] {
    let mut rng = SmallRng::seed_from_u64(a.seed ^ 0x5eed);
    let mut k: Key = [0; KEY_LEN];
    let mut on_tier = Vec::new();
    for _ in 0..a.samples * 50 {
        if on_tier.len() == a.samples {
            break;
        }
        format_key(gen.sample(&mut rng), &mut k);
        if cache.record_location(&k).is_none() && cache.contains(&k) {
            on_tier.push(k);
        }
    }
    drop_cached(path);
    let mut tier: Vec<Duration> = on_tier
        .iter()
        .map(|k| {
            let t = Instant::now();
            let hit = cache.get_with(k, |_| ()).is_some();
            let d = t.elapsed();
            assert!(hit, "a key on the tier was not served");
            d
        })
        .collect();
    drop_cached(path);
    let f = File::open(path).expect("tier file");
    let blocks = f.metadata().expect("tier file size").len() / 4096;
    let mut buf = vec![0u8; 4096];
    let mut floor: Vec<Duration> = (0..a.samples)
        .map(|_| {
            let at = rng.gen_range(0..blocks) * 4096;
            let t = Instant::now();
            f.read_exact_at(&mut buf, at).expect("read the tier file");
            t.elapsed()
        })
        .collect();
    let [t50, t99] = percentiles(&mut tier);
    let [f50, f99] = percentiles(&mut floor);
    [t50, t99, f50, f99]
}

/// The tier alone under each `--promote-after` setting: what promotion on read saves in device
/// reads and costs in writes.
fn promotion_table(a: &Args) -> Result<(), String> {
    println!("| value | DRAM | promote after | hit ratio | gets served by the tier | promotions per 1k gets | MiB written to the tier per 1M gets |");
    println!("|---|---|---|---|---|---|---|");
    for &v in &a.values {
        for &d in &a.dram_mib {
            for &n in &a.promote_after {
                let o = run(&format!("tier+{n}"), d, v)?;
                let per_get = |x: u64| x as f64 / o.gets.max(1) as f64;
                let setting = if n == 0 { "never".to_string() } else { format!("{n} reads") };
                println!(
                    "| {v} B | {d} MiB | {setting} | {:.4} | {:.1}% | {:.1} | {:.1} |",
                    o.hit_ratio,
                    100.0 * per_get(o.flash_hits),
                    1000.0 * per_get(o.promoted),
                    per_get(o.flash_written) * 1e6 / (1 << 20) as f64
                );
            }
        }
    }
    Ok(())
}

/// Runs one configuration in a child process.
fn run(config: &str, dram_mib: usize, value: usize) -> Result<Outcome, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(me);
    cmd.args(std::env::args_os().skip(1)).args(["--child", config, &dram_mib.to_string(), &value.to_string()]);
    let out = cmd.output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{config} {dram_mib} MiB {value} B: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Outcome::parse(text.trim()).ok_or_else(|| format!("{config}: unreadable result {text:?}"))
}

/// The plot: hit ratio against DRAM size, one line per configuration and value size.
fn svg(rows: &[(usize, usize, [Outcome; 3])], values: &[usize]) -> String {
    let (w, h, pad) = (640.0, 400.0, 50.0);
    let max_d = rows.iter().map(|r| r.1).max().unwrap_or(1) as f64;
    let x = |d: usize| pad + (w - 2.0 * pad) * d as f64 / max_d;
    let y = |r: f64| h - pad - (h - 2.0 * pad) * r;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">DRAM heap (MiB)</text>\n\
         <text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">hit ratio</text>\n",
        h - pad,
        w - pad,
        h - pad,
        h - pad,
        w / 2.0,
        h - 10.0,
        h / 2.0,
        h / 2.0
    );
    for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
        s += &format!("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{tick}</text>\n", pad - 4.0, y(tick) + 4.0);
    }
    for r in rows.iter().filter(|r| r.0 == values[0]) {
        s += &format!("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x(r.1), h - pad + 16.0, r.1);
    }
    let colors = ["#1f77b4", "#d62728", "#2ca02c"];
    let names = ["DRAM only", "DRAM + tier", "all DRAM"];
    let mut legend = 0;
    for (vi, &v) in values.iter().enumerate() {
        for (ci, name) in names.iter().enumerate() {
            let pts: Vec<String> = rows
                .iter()
                .filter(|r| r.0 == v)
                .map(|r| format!("{:.1},{:.1}", x(r.1), y(r.2[ci].hit_ratio)))
                .collect();
            let dash = if vi == 0 { "" } else { " stroke-dasharray=\"6 4\"" };
            s += &format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash} points=\"{}\"/>\n",
                colors[ci],
                pts.join(" ")
            );
            s += &format!(
                "<text x=\"{}\" y=\"{}\" fill=\"{}\">{name}, {v} B values{}</text>\n",
                pad + 10.0,
                // Below the lines: hit ratios under a half are rare.
                h / 2.0 + 14.0 * (legend + 1) as f64,
                colors[ci],
                if vi == 0 { "" } else { " (dashed)" }
            );
            legend += 1;
        }
    }
    s + "</svg>\n"
}

fn main() -> Result<(), String> {
    let a = Args::parse();
    if let Some(c) = &a.child {
        let dram: usize = c[1].parse().map_err(|_| "DRAM_MIB")?;
        let value: usize = c[2].parse().map_err(|_| "VALUE")?;
        println!("{}", child(&a, &c[0], dram, value).line());
        return Ok(());
    }
    println!(
        "Zipf {} over {} MiB of keys and values, {}:{} get:set with cache-aside fill; tier {} MiB in {}\n",
        a.zipf,
        a.key_space_mib,
        100 - a.set_pct,
        a.set_pct,
        a.tier_mib,
        a.dir.display()
    );
    if !a.promote_after.is_empty() {
        return promotion_table(&a);
    }
    println!("| value | DRAM | hit ratio: DRAM only | DRAM + tier | all DRAM | tier / all DRAM | RSS MiB: DRAM + tier | all DRAM | tier read p50 / p99 µs | bare 4 KiB read p50 / p99 µs |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut net = Vec::new();
    let mut rows = Vec::new();
    for &v in &a.values {
        for &d in &a.dram_mib {
            let o = [run("dram", d, v)?, run("tier", d, v)?, run("all", d, v)?];
            let l = o[1].latency.unwrap_or([f64::NAN; 4]);
            println!(
                "| {v} B | {d} MiB | {:.4} | {:.4} | {:.4} | {:.3}x | {:.0} | {:.0} | {:.0} / {:.0} | {:.0} / {:.0} |",
                o[0].hit_ratio,
                o[1].hit_ratio,
                o[2].hit_ratio,
                o[1].hit_ratio / o[2].hit_ratio,
                mib(o[1].rss),
                mib(o[2].rss),
                l[0],
                l[1],
                l[2],
                l[3]
            );
            rows.push((v, d, o));
            if let Some(mc) = &a.memcached {
                let served = |name: &str, program: &Path| -> Result<Served, String> {
                    let path = a.dir.join(format!("segcache-tier-bench-{}-{name}.ext", std::process::id()));
                    let ext = format!("ext_path={}:{}m", path.display(), a.tier_mib);
                    let args = ["-m".to_string(), d.to_string(), "-t".into(), "1".into(), "-o".into(), ext];
                    let r = loopback::run(program, &args, &a.workload(v));
                    let _ = std::fs::remove_file(&path);
                    r
                };
                net.push((v, d, served("memcached", mc)?, served("segcache", &a.server)?));
            }
        }
    }
    if !net.is_empty() {
        println!(
            "\nThe same workload over loopback (one connection, batches of 16 requests), same DRAM and tier sizes:\n"
        );
        println!("| value | DRAM | hit ratio: memcached + extstore | segcache-server + tier | RSS MiB: memcached | segcache-server |");
        println!("|---|---|---|---|---|---|");
        for (v, d, mc, sc) in &net {
            println!(
                "| {v} B | {d} MiB | {:.4} | {:.4} | {:.0} | {:.0} |",
                mc.hit_ratio,
                sc.hit_ratio,
                mib(mc.rss),
                mib(sc.rss)
            );
        }
    }
    if let Some(out) = &a.out {
        let mut csv = String::from("value,dram_mib,dram_only,dram_and_tier,all_dram,rss_tier,rss_all\n");
        for (v, d, o) in &rows {
            csv += &format!(
                "{v},{d},{},{},{},{},{}\n",
                o[0].hit_ratio, o[1].hit_ratio, o[2].hit_ratio, o[1].rss, o[2].rss
            );
        }
        std::fs::write(out.with_extension("csv"), csv).map_err(|e| e.to_string())?;
        std::fs::write(out.with_extension("svg"), svg(&rows, &a.values)).map_err(|e| e.to_string())?;
    }
    Ok(())
}
