//! One-thread latency of each cache, criterion, all libraries in the same run:
//! get hit (random order; also chained, each key depending on the last get's result), get
//! miss, set of a present key (key formatting included), 16-key batch reads, and insert (a key
//! never stored before, at steady state: see `bench_insert`).
//!
//! `BENCH_ITEMS` (default 1,000,000) sets the item count; every cache is sized to hold all of
//! them, filled once, and checked to return every one before it is timed.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

use segcache_core::{Item, Segcache, SharedCache};
use segcache_engine_benches::keys::{format_key, keys, touch, Key, VALUE};
use segcache_engine_benches::store::{self, Lib, Sizing, Store};
use segcache_engine_benches::workload::shuffled;

/// Keys per batch read.
const BATCH: usize = 16;

fn items() -> usize {
    std::env::var("BENCH_ITEMS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000)
}

/// The data every benchmark walks: hits and misses in a random order, laid out in that order
/// so that walking them is sequential and only the cache's own memory accesses miss.
struct Data {
    /// Every key, in the order the caches are filled: another random order than `hits`. Read in
    /// the order they were stored, the items of every cache that lays them out as they come (our
    /// segments, the allocator's nodes for the peers) would stream from memory, which a real
    /// workload's reads do not.
    fill: Vec<Key>,
    hits: Vec<Key>,
    misses: Vec<Key>,
    /// Key numbers of the present keys in a random order, formatted inside the `set` loop.
    set_order: Vec<u32>,
}

impl Data {
    fn new(n: usize) -> Self {
        let all = keys(0, n);
        let fill = shuffled(n, 4).into_iter().map(|i| all[i as usize]).collect();
        let hits = shuffled(n, 1).into_iter().map(|i| all[i as usize]).collect();
        let misses = shuffled(n, 2).into_iter().map(|i| all[i as usize]).map(|k| miss_key(&k)).collect();
        Data { fill, hits, misses, set_order: shuffled(n, 3) }
    }
}

/// A key of the same length and shape that is never stored (`m` for `k`).
fn miss_key(k: &Key) -> Key {
    let mut m = *k;
    m[0] = b'm';
    m
}

/// Fills `s` with every key and checks that every one reads back.
fn fill<S: Store>(lib: Lib, s: &mut S, d: &Data) {
    for k in &d.fill {
        s.set(k, &VALUE);
    }
    s.settle();
    let found = d.hits.iter().filter(|k| s.get(&k[..]).is_some()).count();
    // A cache sized to hold every item may still refuse a few (Pelikan's table does not chain);
    // more than 0.1% would make "get hit" a mix of hits and misses.
    assert!(found * 1000 >= d.hits.len() * 999, "{} keeps only {found} of {} items", lib.name(), d.hits.len());
    if found < d.hits.len() {
        eprintln!("{}: {} of {} items kept", lib.name(), found, d.hits.len());
    }
}

/// Walks `v` forever, one element per call.
struct Cycle<'a, T> {
    v: &'a [T],
    i: usize,
}

impl<'a, T> Cycle<'a, T> {
    fn new(v: &'a [T]) -> Self {
        Cycle { v, i: 0 }
    }
    #[inline]
    fn next(&mut self) -> &'a T {
        let x = &self.v[self.i];
        self.i += 1;
        if self.i == self.v.len() {
            self.i = 0;
        }
        x
    }
    /// The element `skip` places after the next one (`skip` is 0 in practice: it makes the
    /// element's address depend on a value).
    #[inline]
    fn next_after(&mut self, skip: usize) -> &'a T {
        self.i = (self.i + skip) % self.v.len();
        self.next()
    }
    /// The next `n` elements (restarting at the front when fewer than `n` are left).
    #[inline]
    fn next_n(&mut self, n: usize) -> &'a [T] {
        if self.i + n > self.v.len() {
            self.i = 0;
        }
        let x = &self.v[self.i..self.i + n];
        self.i += n;
        x
    }
}

fn bench_store<S: Store>(c: &mut Criterion, lib: Lib, s: &mut S, d: &Data) {
    let name = lib.arg();
    let mut g = c.benchmark_group("get_hit");
    let mut ks = Cycle::new(&d.hits);
    g.bench_function(name, |b| b.iter(|| black_box(s.get(ks.next()))));
    g.finish();

    // Each key depends on the previous get's result, so one get cannot start before the last
    // one ends: the latency a caller that waits for each answer sees. The dependency is a shift
    // that is always 0. `black_box` hides the result from the compiler, which would otherwise
    // bound a peer's inlined result (a sum of two bytes), fold the shift to 0 and drop the
    // dependency. In `get_hit` the processor overlaps consecutive gets' cache misses, as far as
    // its reorder buffer reaches.
    let mut g = c.benchmark_group("get_hit_chained");
    let mut ks = Cycle::new(&d.hits);
    let mut carry = 0;
    g.bench_function(name, |b| {
        b.iter(|| {
            let r = s.get(ks.next_after(carry)).unwrap_or(0);
            carry = black_box(r) >> 60;
            r
        })
    });
    g.finish();

    let mut g = c.benchmark_group("get_miss");
    let mut ks = Cycle::new(&d.misses);
    g.bench_function(name, |b| b.iter(|| black_box(s.get(ks.next()))));
    g.finish();

    let mut g = c.benchmark_group("set");
    let mut order = Cycle::new(&d.set_order);
    g.bench_function(name, |b| {
        b.iter(|| {
            let mut k = [0u8; 16];
            format_key(u64::from(*order.next()), &mut k);
            black_box(s.set(&k, &VALUE))
        })
    });
    g.finish();

    // Peers have no batch read: a batch is 16 single gets.
    let mut g = batch_group(c);
    let mut ks = Cycle::new(&d.hits);
    g.bench_function(name, |b| {
        b.iter(|| {
            let mut acc = 0;
            for k in ks.next_n(BATCH) {
                acc += s.get(k).unwrap_or(0);
            }
            black_box(acc)
        })
    });
    g.finish();
}

/// The smallest get `SharedCache`'s layout allows (`SharedCache::floor_get`: the chain, the
/// record, the key compared; no lock, no expiry, no state, no counters), over the same filled
/// cache, in the two read groups: what a get would cost with nothing but the layout's memory
/// accesses and the key check.
fn bench_floor(c: &mut Criterion, shared: &SharedCache, d: &Data) {
    let name = Lib::Floor.arg();
    // SAFETY: nothing writes to `shared` while these groups run.
    let get = |k: &Key| unsafe { shared.floor_get(k, touch) };
    let mut g = c.benchmark_group("get_hit");
    let mut ks = Cycle::new(&d.hits);
    g.bench_function(name, |b| b.iter(|| black_box(get(ks.next()))));
    g.finish();
    let mut g = c.benchmark_group("get_hit_chained");
    let mut ks = Cycle::new(&d.hits);
    let mut carry = 0;
    g.bench_function(name, |b| {
        b.iter(|| {
            let r = get(ks.next_after(carry)).unwrap_or(0);
            carry = black_box(r) >> 60;
            r
        })
    });
    g.finish();
}

/// Keys inserted per item before `insert` is timed: enough that every cache is full and evicting
/// (ours and Pelikan hold about 3x the items in the heap `Sizing::holding` gives them; the
/// count-sized peers 1.25x).
const INSERT_WARM: usize = 4;

/// Inserts of new keys: each iteration stores a key never stored before (formatting included,
/// as in `set`), into a cache that is full and evicting (steady state, not first touch of a
/// fresh heap: the `insert` binary times that too). Runs last on a cache: it evicts the items
/// the other groups read.
fn bench_insert<S: Store>(c: &mut Criterion, lib: Lib, s: &mut S, n: usize) {
    // Key numbers from 10^12 on: never among the filled ones.
    let mut next = 1_000_000_000_000u64;
    let mut k = [0u8; 16];
    for _ in 0..INSERT_WARM * n {
        format_key(next, &mut k);
        s.set(&k, &VALUE);
        next += 1;
    }
    s.settle();
    let mut g = c.benchmark_group("insert");
    g.bench_function(lib.arg(), |b| {
        b.iter(|| {
            let mut k = [0u8; 16];
            format_key(next, &mut k);
            next += 1;
            black_box(s.set(&k, &VALUE))
        })
    });
    g.finish();
}

fn batch_group(c: &mut Criterion) -> BenchmarkGroup<'_, WallTime> {
    let mut g = c.benchmark_group("get_many16");
    g.throughput(Throughput::Elements(BATCH as u64));
    g
}

/// The key slices of `keys`, for the batch-read APIs.
fn refs(keys: &[Key]) -> Vec<&[u8]> {
    keys.iter().map(|k| &k[..]).collect()
}

/// Our batch reads: `get_many_with` of 16 keys (the engine overlaps their memory accesses).
fn bench_ours_batches(c: &mut Criterion, single: &Segcache, shared: &SharedCache, d: &Data) {
    let r = refs(&d.hits);
    let mut g = batch_group(c);
    let mut ks = Cycle::new(&r);
    g.bench_function("ours-single get_many_with", |b| {
        b.iter(|| {
            let mut acc = 0;
            single.get_many_with(ks.next_n(BATCH), |_, item: Item<'_>| acc += touch(item.value()));
            black_box(acc)
        })
    });
    let mut ks = Cycle::new(&r);
    g.bench_function("ours get_many_with", |b| {
        b.iter(|| {
            let mut acc = 0;
            shared.get_many_with(ks.next_n(BATCH), |_, item| acc += touch(item.value()));
            black_box(acc)
        })
    });
    g.finish();

    // `SharedCache::get` copies the value out (an allocation), as quick_cache and moka do.
    let mut g = c.benchmark_group("get_hit");
    let mut ks = Cycle::new(&d.hits);
    g.bench_function("ours get (copy)", |b| b.iter(|| black_box(shared.get(ks.next()))));
    g.finish();
}

fn engine(c: &mut Criterion) {
    let n = items();
    let d = Data::new(n);
    let size = Sizing::holding(n);
    eprintln!(
        "{n} items of 16-byte keys and 64-byte values; heap {} MiB (ours, Pelikan); {} items (count-based peers)",
        size.budget >> 20,
        size.capacity
    );

    // Each cache is built, filled, measured and dropped in turn, so that the others' memory does
    // not crowd the one being measured.
    let mut single = store::build_ours_single(&size);
    fill(Lib::OursSingle, &mut single, &d);
    bench_store(c, Lib::OursSingle, &mut single, &d);
    let shared = store::build_ours(&size);
    fill(Lib::Ours, &mut &shared, &d);
    bench_store(c, Lib::Ours, &mut &shared, &d);
    bench_floor(c, &shared, &d);
    bench_ours_batches(c, &single, &shared, &d);
    bench_insert(c, Lib::OursSingle, &mut single, n);
    bench_insert(c, Lib::Ours, &mut &shared, n);
    drop((single, shared));

    let p = store::build_pelikan(&size);
    fill(Lib::Pelikan, &mut &p, &d);
    bench_store(c, Lib::Pelikan, &mut &p, &d);
    bench_insert(c, Lib::Pelikan, &mut &p, n);
    drop(p);
    let q = store::build_quick(&size);
    fill(Lib::QuickCache, &mut &q, &d);
    bench_store(c, Lib::QuickCache, &mut &q, &d);
    bench_insert(c, Lib::QuickCache, &mut &q, n);
    drop(q);
    let m = store::build_moka(&size);
    fill(Lib::Moka, &mut &m, &d);
    bench_store(c, Lib::Moka, &mut &m, &d);
    bench_insert(c, Lib::Moka, &mut &m, n);
    drop(m);
    let l = store::build_lru(&size);
    fill(Lib::Lru, &mut &l, &d);
    bench_store(c, Lib::Lru, &mut &l, &d);
    bench_insert(c, Lib::Lru, &mut &l, n);
}

/// The floor: one dependent DRAM miss, a pointer chase through `BENCH_CHASE_MIB` (default 512)
/// MiB of 64-byte nodes linked in one random cycle, so that each step waits for the previous
/// load and none is prefetched. Ordinary 4 KiB pages, so each step may also miss the TLB.
fn dram_miss(c: &mut Criterion) {
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    const LINE: usize = 64 / std::mem::size_of::<u64>();
    let mib: usize = std::env::var("BENCH_CHASE_MIB").ok().and_then(|s| s.parse().ok()).unwrap_or(512);
    let nodes = (mib << 20) / 64;
    // Sattolo's shuffle: a random permutation that is a single cycle through every node.
    let mut perm: Vec<u32> = (0..nodes as u32).collect();
    let mut rng = SmallRng::seed_from_u64(5);
    for i in (1..nodes).rev() {
        perm.swap(i, rng.gen_range(0..i));
    }
    let mut next = vec![0u64; nodes * LINE];
    for (i, &p) in perm.iter().enumerate() {
        next[i * LINE] = p as u64 * LINE as u64;
    }
    drop(perm);
    let mut g = c.benchmark_group("dram_miss");
    let mut p = 0usize;
    g.bench_function("pointer chase", |b| {
        b.iter(|| {
            p = next[p] as usize;
            black_box(p)
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the machine is small and shared. Override with `-- --measurement-time N`.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = dram_miss, engine
}
criterion_main!(benches);
