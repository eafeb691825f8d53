//! Throughput of each library's shared handle with 1, 2, ... threads on one cache of 1M items:
//! read-only (uniform and Zipf keys), 90:10 and 50:50 get:set (Zipf keys), and inserts of new
//! keys (every operation a set of a key never stored before: the cache fills, then evicts at
//! steady state; ours holds about 3x `--items` before it evicts). Plain std threads
//! time themselves for a fixed duration; each cell is the best of `--reps` runs, because the
//! machine may be shared and interference only ever lowers a figure. Prints markdown tables.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Parser;

use segcache_engine_benches::keys::{format_key, keys, Key, VALUE};
use segcache_engine_benches::store::{with_cache, Lib, SharedStore, Sizing, Store, Visit};
use segcache_engine_benches::workload::{ops, KeyDist, SET_BIT};

#[derive(Parser, Debug)]
#[command(about = "Multi-thread throughput of shared cache handles")]
struct Args {
    /// Thread counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Libraries, comma separated (ours-single runs at one thread only).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ours-single,ours,pelikan,quick-cache,moka,lru")]
    libs: Vec<Lib>,
    /// Items stored before timing (all keys exist; the key space is these items).
    #[arg(long, default_value_t = 1_000_000)]
    items: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 1.0)]
    secs: f64,
    /// Runs per cell; the best is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Only the workloads whose set percentage is in this list (e.g. `50` for the 50:50 mix
    /// alone, as when profiling one; `100` for the inserts of new keys); all of them when left out.
    #[arg(long, value_delimiter = ',')]
    set_pct: Vec<u32>,
    /// Ours: shards other than the default (exploration).
    #[arg(long)]
    shards: Option<usize>,
    /// Leave worker threads unpinned. By default worker i runs on core i (modulo the cores):
    /// a worker that the scheduler moves between cores mid-run loses its cache (one thread,
    /// unpinned, varied 3.1-5.1 Mops/s at 50:50 here; pinned, 4.3-5.2).
    #[arg(long = "no-pin", action = clap::ArgAction::SetFalse)]
    pin: bool,
    /// Pre-generated operations per thread (cycled).
    #[arg(long, default_value_t = 1 << 20)]
    ops_per_thread: usize,
}

/// One operation with its key inline, so that the stream is read sequentially and only the
/// cache's own memory accesses miss.
#[derive(Clone, Copy)]
struct Op {
    key: Key,
    set: bool,
}

struct Workload {
    name: &'static str,
    set_pct: u32,
    /// Every operation a set of a new key, formatted in the loop from a counter (`streams`
    /// empty): key numbers are handed out by `NEXT_NEW`, so no run repeats another's keys.
    fresh: bool,
    /// One stream per thread (for the largest thread count).
    streams: Vec<Vec<Op>>,
}

/// The set percentage that selects the new-key workload in `--set-pct`.
const INSERT_PCT: u32 = 100;

/// The first key number of the next run of new keys; each run takes `NEW_PER_RUN` per thread.
static NEXT_NEW: AtomicU64 = AtomicU64::new(1 << 40);
const NEW_PER_RUN: u64 = 1 << 36;

const WORKLOADS: [(&str, KeyDist, u32); 4] = [
    ("read-only, uniform", KeyDist::Uniform, 0),
    ("read-only, Zipf 0.99", KeyDist::Zipf(0.99), 0),
    ("90:10 get:set, Zipf 0.99", KeyDist::Zipf(0.99), 10),
    ("50:50 get:set, Zipf 0.99", KeyDist::Zipf(0.99), 50),
];

fn workloads(a: &Args, keys: &[Key]) -> Vec<Workload> {
    let max_t = a.threads.iter().copied().max().unwrap_or(1);
    let mut w: Vec<Workload> = WORKLOADS
        .iter()
        .enumerate()
        .filter(|(_, w)| a.set_pct.is_empty() || a.set_pct.contains(&w.2))
        .map(|(w, &(name, dist, set_pct))| {
            let streams = (0..max_t)
                .map(|t| {
                    ops(a.ops_per_thread, a.items, dist, set_pct, (w * 1000 + t) as u64 + 11)
                        .into_iter()
                        .map(|o| Op { key: keys[(o & !SET_BIT) as usize], set: o & SET_BIT != 0 })
                        .collect()
                })
                .collect();
            Workload { name, set_pct, fresh: false, streams }
        })
        .collect();
    if a.set_pct.is_empty() || a.set_pct.contains(&INSERT_PCT) {
        w.push(Workload { name: "insert new keys", set_pct: INSERT_PCT, fresh: true, streams: Vec::new() });
    }
    w
}

/// Sets new keys `first, first + 1, ...` until `dur` has passed; returns as `worker` does.
fn inserter<S: Store>(mut s: S, first: u64, dur: Duration) -> (u64, u64, Duration) {
    let start = Instant::now();
    let deadline = start + dur;
    let mut k: Key = [0; 16];
    let mut n = 0u64;
    loop {
        for _ in 0..1024 {
            format_key(first + n, &mut k);
            s.set(&k, &VALUE);
            n += 1;
        }
        if Instant::now() >= deadline {
            return (n, 0, start.elapsed());
        }
    }
}

/// One thread's share of a run: the workload's stream, or new keys from `first`.
fn work<S: Store>(s: S, w: &Workload, t: usize, first: u64, dur: Duration) -> (u64, u64, Duration) {
    if w.fresh {
        inserter(s, first + t as u64 * NEW_PER_RUN, dur)
    } else {
        worker(s, &w.streams[t], dur)
    }
}

/// Runs `ops` (cycled) until `dur` has passed; returns (operations, hits, elapsed).
fn worker<S: Store>(mut s: S, ops: &[Op], dur: Duration) -> (u64, u64, Duration) {
    let start = Instant::now();
    let deadline = start + dur;
    let (mut n, mut hits, mut acc) = (0u64, 0u64, 0usize);
    loop {
        for chunk in ops.chunks(1024) {
            for op in chunk {
                if op.set {
                    s.set(&op.key, &VALUE);
                } else if let Some(v) = s.get(&op.key) {
                    hits += 1;
                    acc = acc.wrapping_add(v);
                }
            }
            n += chunk.len() as u64;
            if Instant::now() >= deadline {
                black_box(acc);
                return (n, hits, start.elapsed());
            }
        }
    }
}

/// Result of one cell: Mops/s and the hit share of the gets.
#[derive(Clone, Copy, Default)]
struct Cell {
    mops: f64,
    hit_ratio: f64,
}

/// Pins the calling thread to core `t` (modulo the cores) when `pin` is set.
fn pin_to(pin: bool, t: usize) {
    if pin {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        if !cores.is_empty() {
            core_affinity::set_for_current(cores[t % cores.len()]);
        }
    }
}

fn run_shared<S: SharedStore>(s: &S, w: &Workload, threads: usize, dur: Duration, pin: bool) -> Cell {
    let barrier = Barrier::new(threads);
    let first = NEXT_NEW.fetch_add(threads as u64 * NEW_PER_RUN, Relaxed);
    let results: Vec<(u64, u64, Duration)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let b = &barrier;
                sc.spawn(move || {
                    pin_to(pin, t);
                    b.wait();
                    work(s, w, t, first, dur)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker thread")).collect()
    });
    summarise(&results, w)
}

fn summarise(r: &[(u64, u64, Duration)], w: &Workload) -> Cell {
    let mops = r.iter().map(|(n, _, d)| *n as f64 / d.as_secs_f64() / 1e6).sum();
    let ops: u64 = r.iter().map(|x| x.0).sum();
    let gets = ops as f64 * (100 - w.set_pct) as f64 / 100.0;
    let hits: u64 = r.iter().map(|x| x.1).sum();
    Cell { mops, hit_ratio: hits as f64 / gets.max(1.0) }
}

fn best(reps: usize, mut f: impl FnMut() -> Cell) -> Cell {
    (0..reps.max(1)).map(|_| f()).fold(Cell::default(), |a, c| if c.mops > a.mops { c } else { a })
}

struct Measure<'a> {
    a: &'a Args,
    keys: &'a [Key],
    wl: &'a [Workload],
}

/// Cells of one library: `[workload][thread count index]` (None where not run).
type Grid = Vec<Vec<Option<Cell>>>;

impl Measure<'_> {
    fn dur(&self) -> Duration {
        Duration::from_secs_f64(self.a.secs)
    }
    fn fill<S: Store>(&self, lib: Lib, mut s: S) {
        let t = Instant::now();
        for k in self.keys {
            s.set(k, &VALUE);
        }
        s.settle();
        let kept = self.keys.iter().filter(|k| s.get(&k[..]).is_some()).count();
        eprintln!(
            "{}: {} of {} items kept after fill ({:.1} s)",
            lib.name(),
            kept,
            self.keys.len(),
            t.elapsed().as_secs_f64()
        );
    }
}

impl Visit for &Measure<'_> {
    type Out = Grid;
    fn shared<S: SharedStore + 'static>(self, lib: Lib, cache: S) -> Grid {
        self.fill(lib, &cache);
        self.wl
            .iter()
            .map(|w| {
                self.a
                    .threads
                    .iter()
                    .map(|&t| {
                        let c = best(self.a.reps, || run_shared(&cache, w, t, self.dur(), self.a.pin));
                        eprintln!(
                            "  {:<28} {:<26} {t} threads: {:7.2} Mops/s, hits {:.3}",
                            lib.name(),
                            w.name,
                            c.mops,
                            c.hit_ratio
                        );
                        Some(c)
                    })
                    .collect()
            })
            .collect()
    }
    fn single(self, lib: Lib, mut cache: segcache_core::Segcache) -> Grid {
        self.fill(lib, &mut cache);
        self.wl
            .iter()
            .map(|w| {
                self.a
                    .threads
                    .iter()
                    .map(|&t| {
                        (t == 1).then(|| {
                            let run = |cache: &mut segcache_core::Segcache| {
                                let first = NEXT_NEW.fetch_add(NEW_PER_RUN, Relaxed);
                                std::thread::scope(|sc| {
                                    sc.spawn(|| {
                                        pin_to(self.a.pin, 0);
                                        work(cache, w, 0, first, self.dur())
                                    })
                                    .join()
                                    .expect("worker thread")
                                })
                            };
                            let c = best(self.a.reps, || summarise(&[run(&mut cache)], w));
                            eprintln!(
                                "  {:<28} {:<26} 1 thread:  {:7.2} Mops/s, hits {:.3}",
                                lib.name(),
                                w.name,
                                c.mops,
                                c.hit_ratio
                            );
                            c
                        })
                    })
                    .collect()
            })
            .collect()
    }
}

fn fmt(c: Option<Cell>) -> String {
    c.map(|c| format!("{:.2}", c.mops)).unwrap_or_else(|| "-".into())
}

fn main() {
    let a = Args::parse();
    let keys = keys(0, a.items);
    let wl = workloads(&a, &keys);
    let m = Measure { a: &a, keys: &keys, wl: &wl };
    let mut size = Sizing::holding(a.items);
    size.shards = a.shards;
    let grids: Vec<(Lib, Grid)> = a.libs.iter().map(|&lib| (lib, with_cache(lib, &size, &m))).collect();

    // Table 1: Mops/s per library, workload and thread count.
    let mut head = "| workload | library |".to_string();
    let mut rule = "|---|---|".to_string();
    for t in &a.threads {
        head += &format!(" {t} thr Mops/s |");
        rule += "---|";
    }
    if a.threads.len() > 1 {
        head += &format!(" {}/{} thr |", a.threads[a.threads.len() - 1], a.threads[0]);
        rule += "---|";
    }
    println!("{head}\n{rule}");
    for (wi, w) in wl.iter().enumerate() {
        for (lib, g) in &grids {
            let row = &g[wi];
            let mut line = format!("| {} | {} |", w.name, lib.name());
            for c in row {
                line += &format!(" {} |", fmt(*c));
            }
            if a.threads.len() > 1 {
                line += &match (row[0], row[row.len() - 1]) {
                    (Some(x), Some(y)) => format!(" {:.2}x |", y.mops / x.mops),
                    _ => " - |".into(),
                };
            }
            println!("{line}");
        }
    }

    // Table 2: ours against the best peer in each cell.
    let ours = grids.iter().find(|(l, _)| *l == Lib::Ours);
    let peers: Vec<_> = grids.iter().filter(|(l, _)| !matches!(l, Lib::Ours | Lib::OursSingle)).collect();
    if let (Some((_, og)), false) = (ours, peers.is_empty()) {
        println!(
            "\n| workload | threads | SharedCache Mops/s | best peer | its Mops/s | ratio |\n|---|---|---|---|---|---|"
        );
        for (wi, w) in wl.iter().enumerate() {
            for (ti, t) in a.threads.iter().enumerate() {
                let bestp = peers.iter().filter_map(|(l, g)| g[wi][ti].map(|c| (l, c.mops))).fold(
                    None,
                    |acc: Option<(&Lib, f64)>, x| match acc {
                        Some(b) if b.1 >= x.1 => Some(b),
                        _ => Some(x),
                    },
                );
                if let (Some(o), Some((pl, pm))) = (og[wi][ti], bestp) {
                    println!("| {} | {t} | {:.2} | {} | {:.2} | {:.2}x |", w.name, o.mops, pl.name(), pm, o.mops / pm);
                }
            }
        }
    }

    // Table 3: the cost of the shared handle over the single-owner engine, one thread.
    let single = grids.iter().find(|(l, _)| *l == Lib::OursSingle);
    let t1 = a.threads.iter().position(|&t| t == 1);
    if let (Some((_, sg)), Some((_, og)), Some(t1)) = (single, ours, t1) {
        println!(
            "\n| workload (1 thread) | Segcache Mops/s | SharedCache Mops/s | SharedCache cost |\n|---|---|---|---|"
        );
        for (wi, w) in wl.iter().enumerate() {
            if let (Some(s), Some(o)) = (sg[wi][t1], og[wi][t1]) {
                println!("| {} | {:.2} | {:.2} | {:+.1}% |", w.name, s.mops, o.mops, (s.mops / o.mops - 1.0) * 100.0);
            }
        }
    }
}
