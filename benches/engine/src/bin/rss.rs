//! Resident bytes per retained item: fills one library's cache, sized to a byte budget, with
//! `overfill` times more 80-byte items than the budget holds, then divides the process's
//! resident memory (VmRSS) by the items still retrievable (found by probing every key).
//!
//! Run once per library, each in its own process, so that no other cache's memory is counted.
//! Libraries without a byte budget hold `budget / 80` items (their data is the budget).

use clap::Parser;

use segcache_engine_benches::keys::{format_key, PAYLOAD, VALUE};
use segcache_engine_benches::mem::{mib, rss_bytes};
use segcache_engine_benches::store::{with_cache, Lib, SharedStore, Sizing, Store, Visit};

#[derive(Parser, Debug)]
#[command(about = "Resident bytes per retained item of one cache library")]
struct Args {
    #[arg(long, value_enum)]
    lib: Lib,
    /// Cache budget in MiB.
    #[arg(long, default_value_t = 256)]
    budget_mib: usize,
    /// Items inserted, as a multiple of the items that fit (budget / 80 bytes).
    #[arg(long, default_value_t = 4)]
    overfill: usize,
    /// Pelikan's hash power (log2 of its slots); by default the smallest that keeps the
    /// items its heap holds at most 85% of the slots.
    #[arg(long)]
    pelikan_hash_power: Option<u8>,
    /// Ours: hash power other than the default (exploration).
    #[arg(long)]
    hash_power: Option<u8>,
    /// Ours: shard count of the shared cache other than the default (exploration).
    #[arg(long)]
    shards: Option<usize>,
    /// Print our engine's counters (items held, live bytes, ...) to stderr.
    #[arg(long)]
    verbose: bool,
    /// Print the markdown table header first.
    #[arg(long)]
    header: bool,
}

struct Measure {
    inserted: u64,
    verbose: bool,
}

#[derive(Debug)]
struct Outcome {
    retained: u64,
    refused: u64,
    rss: u64,
}

impl Measure {
    fn run<S: Store>(&self, mut s: S) -> Outcome {
        let mut k = [0u8; 16];
        let mut refused = 0;
        for i in 0..self.inserted {
            format_key(i, &mut k);
            if !s.set(&k, &VALUE) {
                refused += 1;
            }
        }
        s.settle();
        let mut retained = 0;
        for i in 0..self.inserted {
            format_key(i, &mut k);
            if let Some(v) = s.get(&k) {
                // Count only intact values: a foreign or torn value is not a retained item.
                if v == segcache_engine_benches::keys::touch(&VALUE) {
                    retained += 1;
                }
            }
        }
        // Read the memory while the cache is still alive.
        let rss = rss_bytes().expect("VmRSS from /proc/self/status");
        if self.verbose {
            eprintln!("{}", s.describe());
        }
        Outcome { retained, refused, rss }
    }
}

impl Visit for &Measure {
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
    let fit = budget / PAYLOAD;
    let m = Measure { inserted: (fit * a.overfill) as u64, verbose: a.verbose };
    let base = rss_bytes().unwrap_or(0);
    let mut size = Sizing::equal_data(budget, PAYLOAD);
    size.pelikan_hash_power = a.pelikan_hash_power;
    (size.hash_power, size.shards) = (a.hash_power, a.shards);
    let o = with_cache(a.lib, &size, &m);
    if o.retained == 0 {
        eprintln!("{}: no item retained", a.lib.name());
        std::process::exit(1);
    }
    if a.header {
        println!("| library | budget | inserted | retained | refused sets | RSS MiB | RSS bytes per retained item | (RSS - start) per item |");
        println!("|---|---|---|---|---|---|---|---|");
    }
    println!(
        "| {} | {} MiB{} | {} | {} | {} | {:.1} | {:.1} | {:.1} |",
        a.lib.name(),
        a.budget_mib,
        if a.lib.has_byte_budget() { String::new() } else { format!(" ({fit} items)") },
        m.inserted,
        o.retained,
        o.refused,
        mib(o.rss),
        o.rss as f64 / o.retained as f64,
        (o.rss - base.min(o.rss)) as f64 / o.retained as f64,
    );
}
