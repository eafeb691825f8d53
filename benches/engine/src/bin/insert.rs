//! Inserts of new keys, one thread, each library in turn: `--items` keys never stored before
//! into a freshly built cache sized to hold them all ("1M into a big heap": the first
//! touch of the heap included), then (`--steady`) as many again into a cache that is full and
//! evicting. The full caches hold equal data: the byte-budget caches (ours, Pelikan) get the heap
//! that holds `items / 4` with room to spare, and the count-sized peers as many items as that heap
//! holds of 80-byte payloads, so that every library evicts from a cache about as full of items
//! (sized by count at `items / 4`, quick_cache held 312k items where ours held 757k).
//!
//! Prints ns per insert (the thread's on-CPU time, see `cpu_ns`). Small and self-contained so
//! that `perf record -g` / `perf stat` can be pointed at one library (`--libs ours`).

use std::hint::black_box;
use std::time::Instant;

use clap::Parser;

use segcache_engine_benches::keys::{format_key, Key, PAYLOAD, VALUE};
use segcache_engine_benches::store::{with_cache, Lib, SharedStore, Sizing, Store, Visit};
use segcache_engine_benches::workload::shuffled;

#[derive(Parser, Debug)]
#[command(about = "One-thread inserts of new keys")]
struct Args {
    /// Libraries, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ours-single,ours,pelikan,quick-cache,moka,lru")]
    libs: Vec<Lib>,
    /// New keys inserted per phase.
    #[arg(long, default_value_t = 1_000_000)]
    items: usize,
    /// Also time a phase in a full cache (equal data, see above; pre-filled with `4 x items` keys).
    #[arg(long)]
    steady: bool,
    /// Ours: shards other than the default (exploration).
    #[arg(long)]
    shards: Option<usize>,
    /// Ours: eviction policy other than the default (exploration).
    #[arg(long)]
    policy: Option<segcache_core::Policy>,
    /// Rounds; each phase reports the median.
    #[arg(long, default_value_t = 1)]
    reps: usize,
}

/// This thread's time on a CPU so far, ns (`/proc/thread-self/schedstat`; Linux): unlike wall
/// time, it leaves out the time other processes of a busy machine held the core.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Inserts keys `base + order[i]`; returns ns per insert, on-CPU time where the system has it,
/// else wall time.
fn insert<S: Store>(mut s: S, base: u64, order: &[u32]) -> f64 {
    let mut k: Key = [0; 16];
    let cpu = cpu_ns();
    let t = Instant::now();
    let mut ok = 0usize;
    for &i in order {
        format_key(base + u64::from(i), &mut k);
        ok += usize::from(s.set(&k, &VALUE));
    }
    let wall = t.elapsed().as_nanos() as f64;
    let ns = match (cpu, cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64,
        _ => wall,
    } / order.len() as f64;
    black_box(ok);
    ns
}

struct Phase<'a> {
    order: &'a [u32],
    /// Keys inserted before the timed ones (untimed), from key number 1e9 up.
    warm: usize,
}

impl Visit for &Phase<'_> {
    type Out = (f64, String);
    fn shared<S: SharedStore + 'static>(self, _: Lib, cache: S) -> (f64, String) {
        run(&cache, self)
    }
    fn single(self, _: Lib, mut cache: segcache_core::Segcache) -> (f64, String) {
        run(&mut cache, self)
    }
}

fn run<S: Store>(mut s: S, p: &Phase<'_>) -> (f64, String) {
    let mut k: Key = [0; 16];
    for i in 0..p.warm as u64 {
        format_key(1_000_000_000 + i, &mut k);
        s.set(&k, &VALUE);
    }
    s.settle();
    let ns = insert(&mut s, 0, p.order);
    s.settle();
    (ns, s.describe())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let a = Args::parse();
    let order = shuffled(a.items, 7);
    println!("| library | fresh heap ns/insert |{}", if a.steady { " full cache ns/insert |" } else { "" });
    println!("|---|---|{}", if a.steady { "---|" } else { "" });
    for &lib in &a.libs {
        let mut fresh = Sizing::holding(a.items);
        (fresh.shards, fresh.policy) = (a.shards, a.policy);
        let mut full = Sizing::equal_data(Sizing::holding(a.items / 4).budget, PAYLOAD);
        (full.shards, full.policy) = (a.shards, a.policy);
        let mut f = Vec::new();
        let mut st = Vec::new();
        for _ in 0..a.reps.max(1) {
            let (ns, d) = with_cache(lib, &fresh, &Phase { order: &order, warm: 0 });
            if !d.is_empty() {
                eprintln!("{} fresh: {d}", lib.arg());
            }
            f.push(ns);
            if a.steady {
                let (ns, d) = with_cache(lib, &full, &Phase { order: &order, warm: 4 * a.items });
                if !d.is_empty() {
                    eprintln!("{} full: {d}", lib.arg());
                }
                st.push(ns);
            }
        }
        let mut line = format!("| {} | {:.0} |", lib.name(), median(f));
        if a.steady {
            line += &format!(" {:.0} |", median(st));
        }
        println!("{line}");
    }
}
