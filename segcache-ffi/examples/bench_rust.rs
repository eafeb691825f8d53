//! The Rust twin of bindings/c/bench/bench.c: the same gets (hit, copied into a caller buffer)
//! and sets, in the same random order, on `SharedCache` directly. The difference from the C
//! program's figures is what the C API adds per operation.
//!
//! `bench_rust [items=1000000] [reps=5]` prints
//! `rust set_ns=<median> get_ns=<median> get_owned_ns=<median>`.

use std::time::{Duration, Instant};

use segcache_core::{Builder, SharedCache};

const KEY_LEN: usize = 16;
const VALUE_LEN: usize = 64;

struct Rng(u64);
impl Rng {
    // xorshift64*, the same as in bench.c.
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn shuffle(&mut self, a: &mut [u32]) {
        for i in (1..a.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            a.swap(i, j);
        }
    }
}

fn key(keys: &[u8], i: u32) -> &[u8] {
    &keys[i as usize * KEY_LEN..(i as usize + 1) * KEY_LEN]
}

/// The timed loops are functions of their own (never inlined) so that
/// `valgrind --tool=callgrind --toggle-collect='*run_gets*'` can count their instructions alone.
#[inline(never)]
fn run_sets(c: &SharedCache, keys: &[u8], order: &[u32], value: &[u8]) {
    for &i in order {
        c.set(key(keys, i), value, 0, Duration::ZERO).expect("set");
    }
}

#[inline(never)]
fn run_gets(c: &SharedCache, keys: &[u8], order: &[u32], checksum: &mut u64) -> usize {
    let mut buf = [0u8; VALUE_LEN];
    let mut hits = 0usize;
    for &i in order {
        // The same work as segcache_get: copy the value into the caller's buffer.
        let got = c.get_with(key(keys, i), |item| {
            let v = item.value();
            let dst = buf.get_mut(..v.len())?;
            dst.copy_from_slice(v);
            Some(v.len())
        });
        if let Some(Some(len)) = got {
            hits += 1;
            *checksum += u64::from(buf[len - 1]);
        }
    }
    hits
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5).clamp(1, 100);
    let keys: Vec<u8> = (0..n).flat_map(|i| format!("key-{i:012}").into_bytes()).collect();
    let mut rng = Rng(0x9E3779B97F4A7C15);
    let mut set_order: Vec<u32> = (0..n as u32).collect();
    let mut get_order = set_order.clone();
    rng.shuffle(&mut set_order);
    rng.shuffle(&mut get_order);
    let value: Vec<u8> = (0..VALUE_LEN).map(|i| b'a' + (i % 26) as u8).collect();

    let (mut set_ns, mut get_ns, mut owned_ns) = (Vec::new(), Vec::new(), Vec::new());
    let mut checksum = 0u64;
    for _ in 0..reps {
        let c = Builder::new().heap_size(512 << 20).segment_size(1 << 20).shards(8).build_shared().expect("open");
        let t0 = Instant::now();
        run_sets(&c, &keys, &set_order, &value);
        let t1 = Instant::now();
        let hits = run_gets(&c, &keys, &get_order, &mut checksum);
        let t2 = Instant::now();
        for &i in &get_order {
            if let Some(item) = c.get(key(&keys, i)) {
                checksum += u64::from(item.value[VALUE_LEN - 1]);
            }
        }
        let t3 = Instant::now();
        assert_eq!(hits, n, "every get must hit");
        set_ns.push((t1 - t0).as_nanos() as f64 / n as f64);
        get_ns.push((t2 - t1).as_nanos() as f64 / n as f64);
        owned_ns.push((t3 - t2).as_nanos() as f64 / n as f64);
        c.close().expect("close");
    }
    println!(
        "rust set_ns={:.1} get_ns={:.1} get_owned_ns={:.1} checksum={checksum}",
        median(set_ns),
        median(get_ns),
        median(owned_ns)
    );
}
