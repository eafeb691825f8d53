//! Hit ratio of one library on Zipf(0.99) keys with a 90:10 get:set mix and cache-aside fill
//! (a get that misses is followed by a set of that key), and the process's resident memory.
//! Run once per library, each in its own process, so that the RSS is the cache's own.

use clap::Parser;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use segcache_engine_benches::keys::{format_key, PAYLOAD, VALUE};
use segcache_engine_benches::mem::{mib, rss_bytes};
use segcache_engine_benches::store::{with_cache, Lib, SharedStore, Sizing, Store, Visit};
use segcache_engine_benches::workload::{KeyDist, KeyGen};

#[derive(Parser, Debug)]
#[command(about = "Hit ratio at a memory budget on a Zipf workload with cache-aside fill")]
struct Args {
    #[arg(long, value_enum)]
    lib: Lib,
    /// Budget in MiB (heap of ours and Pelikan; `budget / 80 bytes` items for the others
    /// unless --capacity is given).
    #[arg(long, default_value_t = 64)]
    budget_mib: usize,
    /// Item capacity of the count-sized libraries (overrides the budget for them): use it to
    /// give them the same resident memory as ours.
    #[arg(long)]
    capacity: Option<usize>,
    /// Distinct keys.
    #[arg(long, default_value_t = 2_000_000)]
    keys: usize,
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Percentage of requests that are sets.
    #[arg(long, default_value_t = 10)]
    set_pct: u32,
    /// Requests counted, after the warm-up.
    #[arg(long, default_value_t = 8_000_000)]
    ops: u64,
    /// Requests before counting starts.
    #[arg(long, default_value_t = 4_000_000)]
    warmup: u64,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Pelikan's hash power (log2 of its slots); by default the smallest that keeps the
    /// items its heap holds at most 85% of the slots.
    #[arg(long)]
    pelikan_hash_power: Option<u8>,
    /// Ours: eviction policy other than the default (exploration).
    #[arg(long)]
    policy: Option<segcache_core::Policy>,
    /// Ours: shard count of the shared cache other than the default (exploration).
    #[arg(long)]
    shards: Option<usize>,
    /// Ours: hash power other than the default (exploration).
    #[arg(long)]
    hash_power: Option<u8>,
    /// Ours: segment KiB other than the default (exploration).
    #[arg(long)]
    segment_kib: Option<usize>,
    /// Print our engine's counters (items held, live bytes, ...) to stderr.
    #[arg(long)]
    verbose: bool,
    /// Print the markdown table header first.
    #[arg(long)]
    header: bool,
}

struct Run<'a> {
    a: &'a Args,
}

struct Outcome {
    gets: u64,
    hits: u64,
    rss: u64,
}

impl Run<'_> {
    fn run<S: Store>(&self, mut s: S) -> Outcome {
        let a = self.a;
        let gen = KeyGen::new(a.keys, KeyDist::Zipf(a.zipf));
        let mut rng = SmallRng::seed_from_u64(a.seed);
        let (mut gets, mut hits) = (0u64, 0u64);
        let mut k = [0u8; 16];
        for n in 0..a.warmup + a.ops {
            format_key(gen.sample(&mut rng), &mut k);
            if rng.gen_range(0..100) < a.set_pct {
                s.set(&k, &VALUE);
                continue;
            }
            let hit = s.get(&k).is_some();
            if !hit {
                // Cache-aside: the caller fetched the value elsewhere and stores it.
                s.set(&k, &VALUE);
            }
            if n >= a.warmup {
                gets += 1;
                hits += u64::from(hit);
            }
        }
        s.settle();
        if a.verbose {
            eprintln!("{}", s.describe());
        }
        Outcome { gets, hits, rss: rss_bytes().expect("VmRSS from /proc/self/status") }
    }
}

impl Visit for Run<'_> {
    type Out = Outcome;
    fn shared<S: SharedStore + 'static>(self, _: Lib, cache: S) -> Outcome {
        self.run(&cache)
    }
    fn single(self, _: Lib, cache: segcache_core::Segcache) -> Outcome {
        self.run(cache)
    }
}

fn main() {
    let a = Args::parse();
    let budget = a.budget_mib << 20;
    let mut size = Sizing::equal_data(budget, PAYLOAD);
    size.pelikan_hash_power = a.pelikan_hash_power;
    (size.policy, size.shards, size.hash_power) = (a.policy, a.shards, a.hash_power);
    size.segment_size = a.segment_kib.map(|k| k << 10);
    if let Some(c) = a.capacity {
        size.capacity = c;
    }
    let o = with_cache(a.lib, &size, Run { a: &a });
    if a.header {
        println!("| library | size | hit ratio | RSS MiB |");
        println!("|---|---|---|---|");
    }
    let sized =
        if a.lib.has_byte_budget() { format!("{} MiB heap", a.budget_mib) } else { format!("{} items", size.capacity) };
    println!("| {} | {} | {:.4} | {:.1} |", a.lib.name(), sized, o.hits as f64 / o.gets.max(1) as f64, mib(o.rss));
}
