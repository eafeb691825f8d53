//! The longest single operations of `SharedCache` under the server sweep's workload (Momento's:
//! 80:20 get:set, uniform over 100,000 keys of 4 bytes with 256-byte values, in 64 MiB with the
//! server's 1 MiB segments), one thread: every operation is timed on its own, and the table
//! gives the tail of those times, the number of operations over 100 us and the time they took.
//! A server's worker runs these operations inline, so each long one holds up every request
//! queued behind it: this is where a server's tail can come from beside the network.
//!
//! Each configuration runs in a process of its own (as a server's heap is its process's first),
//! in a fresh cache filled with every key first; `--prefault all` (the default) runs each three
//! times: with the heap faulted in as the writers reach it (`off`), faulted in ahead of them by
//! a thread of its own (`ahead`: `SharedCache::touch_ahead`, as segcache-server does), and
//! faulted in at build (`on`: `Builder::prefault`). Times are wall-clock: on a busy machine a
//! preemption shows as a long operation too, so compare the rows of one run.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use segcache_core::{Builder, Policy, SharedCache};

#[derive(Parser, Debug)]
#[command(about = "The longest single operations of SharedCache under the server sweep's workload")]
struct Args {
    /// Eviction policies, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "merge,fifo")]
    policies: Vec<Policy>,
    /// Heap MiB.
    #[arg(long, default_value_t = 64)]
    heap_mib: usize,
    /// Segment KiB (the server's default for 1 MiB items is 1024).
    #[arg(long, default_value_t = 1024)]
    segment_kib: usize,
    /// Shards (a power of two) [default: chosen by the engine]. With one shard, the heap's
    /// segments are one engine's, as in a single-owner `Segcache`.
    #[arg(long)]
    shards: Option<usize>,
    /// Keys (4 bytes each while under 26^4).
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Value bytes.
    #[arg(long, default_value_t = 256)]
    value: usize,
    /// Operations timed per configuration.
    #[arg(long, default_value_t = 4_000_000)]
    ops: usize,
    /// The fill's items expire this many seconds after it (0: never); the timed sets store
    /// items that never expire. Shows what freeing a heap's worth of expired items costs.
    #[arg(long, default_value_t = 0)]
    fill_ttl_s: u64,
    /// Percent of operations that are sets.
    #[arg(long, default_value_t = 20)]
    set_pct: u64,
    /// Heap faulted in as the writers reach it (off), ahead of them (ahead), at build (on);
    /// both: off and on; all: the three.
    #[arg(long, value_enum, default_value = "all")]
    prefault: Prefault,
    /// Inner run: this one configuration (the first policy, one `--prefault`), one row.
    #[arg(long, hide = true)]
    row: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Prefault {
    Off,
    Ahead,
    On,
    Both,
    All,
}

/// Operations longer than this count as stalls.
const STALL: Duration = Duration::from_micros(100);

/// Key `i`: letters, base 26, at least 4 of them.
fn key(mut i: usize) -> Vec<u8> {
    let mut k = Vec::with_capacity(4);
    while k.len() < 4 || i > 0 {
        k.push(b'a' + (i % 26) as u8);
        i /= 26;
    }
    k
}

/// One configuration: ns per operation of each operation, in order.
fn run(a: &Args, policy: Policy, prefault: Prefault) -> Result<Vec<u64>, segcache_core::Error> {
    let mut builder = Builder::new()
        .heap_size(a.heap_mib << 20)
        .segment_size(a.segment_kib << 10)
        .eviction(policy)
        .prefault(prefault == Prefault::On);
    if let Some(n) = a.shards {
        builder = builder.shards(n);
    }
    let cache = builder.build_shared()?;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        if prefault == Prefault::Ahead {
            // As segcache-server's touch-ahead thread.
            s.spawn(|| {
                while !done.load(Relaxed) {
                    match cache.touch_ahead(2) {
                        None => return,
                        Some(0) => std::thread::sleep(Duration::from_millis(10)),
                        Some(_) => {}
                    }
                }
            });
        }
        let took = timed(a, &cache);
        done.store(true, Relaxed);
        took
    })
}

/// The fill, then the timed operations.
fn timed(a: &Args, cache: &SharedCache) -> Result<Vec<u64>, segcache_core::Error> {
    let keys: Vec<Vec<u8>> = (0..a.keys).map(key).collect();
    let value = vec![b'v'; a.value];
    for k in &keys {
        cache.set(k, &value, 0, Duration::from_secs(a.fill_ttl_s))?;
    }
    let mut rng = SmallRng::seed_from_u64(7);
    let mut took = Vec::with_capacity(a.ops);
    for _ in 0..a.ops {
        let r: u64 = rng.gen();
        let k = &keys[(r % keys.len() as u64) as usize];
        let set = (r >> 32) % 100 < a.set_pct;
        let t = Instant::now();
        if set {
            cache.set(k, &value, 0, Duration::ZERO)?;
        } else {
            std::hint::black_box(cache.get_with(k, |i| i.value().len()));
        }
        took.push(t.elapsed().as_nanos() as u64);
    }
    Ok(took)
}

/// Runs one configuration and prints its row.
fn row(a: &Args, policy: Policy, prefault: Prefault) -> Result<(), segcache_core::Error> {
    let took = run(a, policy, prefault)?;
    let mut sorted = took.clone();
    sorted.sort_unstable();
    let q = |p: f64| sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)];
    let stalls: Vec<u64> = took.iter().copied().filter(|&t| t > STALL.as_nanos() as u64).collect();
    println!(
        "| {policy:?} | {} | {:.0} | {} | {} | {} | {:.0} | {} | {:.1} |",
        prefault.to_possible_value().expect("a value").get_name(),
        took.iter().sum::<u64>() as f64 / took.len() as f64,
        q(0.99),
        q(0.999),
        q(0.9999),
        *sorted.last().unwrap_or(&0) as f64 / 1e3,
        stalls.len(),
        stalls.iter().sum::<u64>() as f64 / 1e6,
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    if a.row {
        let policy = *a.policies.first().ok_or("no policy")?;
        return Ok(row(&a, policy, a.prefault)?);
    }
    let faults: &[&str] = match a.prefault {
        Prefault::Off => &["off"],
        Prefault::Ahead => &["ahead"],
        Prefault::On => &["on"],
        Prefault::Both => &["off", "on"],
        Prefault::All => &["off", "ahead", "on"],
    };
    let shards = a.shards.map_or("the default".to_string(), |n| n.to_string());
    println!(
        "SharedCache, one thread, {} ops per row: {}% sets, {} keys, {}-byte values, {} MiB heap, {} KiB segments, {shards} shards, the fill's items expiring after {} s\n",
        a.ops, a.set_pct, a.keys, a.value, a.heap_mib, a.segment_kib, a.fill_ttl_s
    );
    println!("| eviction | prefault | ns/op | p99 ns | p99.9 ns | p99.99 ns | longest us | ops over 100 us | their time ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let me = std::env::current_exe()?;
    for policy in &a.policies {
        for prefault in faults {
            let mut settings = vec![
                ("--heap-mib", a.heap_mib.to_string()),
                ("--segment-kib", a.segment_kib.to_string()),
                ("--keys", a.keys.to_string()),
                ("--value", a.value.to_string()),
                ("--ops", a.ops.to_string()),
                ("--set-pct", a.set_pct.to_string()),
                ("--fill-ttl-s", a.fill_ttl_s.to_string()),
                ("--policies", policy.to_string()),
                ("--prefault", prefault.to_string()),
            ];
            if let Some(n) = a.shards {
                settings.push(("--shards", n.to_string()));
            }
            let status =
                Command::new(&me).args(settings.iter().flat_map(|(k, v)| [*k, v.as_str()])).arg("--row").status()?;
            if !status.success() {
                return Err(format!("{policy} with prefault {prefault}: {status}").into());
            }
        }
    }
    Ok(())
}
