//! A typed get hit against the byte get it rests on, plus the codec's own decode: the cost that
//! the typed handle adds of its own is `typed - (byte get + decode)`.
//!
//! One thread; `--keys` users (`{ id: u64, name: String, score: f32 }`) under `u64` keys in a
//! `TypedCache`. Each round times, in turn over every key: the byte `get` of the encoded key
//! (`SharedCache::get`, the value copied out), the byte `get_with` (no copy), postcard decoding
//! of the stored bytes alone, and the typed `get`. Prints each one's median ns per call over the
//! rounds; the phases alternate within every round, so drift of the machine hits them alike.
//!
//! `cargo run --release -p segcache-engine-benches --features typed --bin typed`

use std::hint::black_box;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};

use segcache_core::{Codec, Postcard, SharedCache, TypedCache};

#[derive(Parser, Debug)]
#[command(about = "Typed get hit against byte get plus decode")]
struct Args {
    /// Keys read per phase.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Rounds; each phase reports its median.
    #[arg(long, default_value_t = 21)]
    rounds: usize,
    /// Times this phase alone (for callgrind: `--toggle-collect='typed::per_call*'` counts the
    /// instructions of the timed calls only).
    #[arg(long, value_enum)]
    only: Option<Phase>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Get,
    GetWith,
    Decode,
    Typed,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct User {
    id: u64,
    name: String,
    score: f32,
}

/// Nanoseconds per call of `f` over `0..n`. Out of line, so that callgrind can count it alone.
#[inline(never)]
fn per_call(n: u64, mut f: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        f(i);
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cache: TypedCache<u64, User> = TypedCache::new(SharedCache::builder().heap_size(256 << 20).build_shared()?);
    for id in 0..args.keys {
        let user = User { id, name: format!("user number {id}"), score: id as f32 / 3.0 };
        cache.set(&id, &user, Duration::ZERO)?;
    }
    let encoded: Vec<Vec<u8>> = (0..args.keys)
        .map(|id| {
            let mut k = Vec::new();
            Postcard.encode(&id, &mut k).map(|()| k)
        })
        .collect::<Result<_, _>>()?;
    let stored: Vec<Vec<u8>> =
        encoded.iter().map(|k| cache.cache().get(k).map(|i| i.value)).collect::<Option<_>>().ok_or("missing")?;
    let bytes = cache.cache();
    let (mut get, mut get_with, mut decode, mut typed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let runs = |phase| !matches!(args.only, Some(only) if only != phase);
    for _ in 0..args.rounds {
        get.push(per_call(if runs(Phase::Get) { args.keys } else { 0 }, |i| {
            black_box(bytes.get(black_box(&encoded[i as usize])));
        }));
        get_with.push(per_call(if runs(Phase::GetWith) { args.keys } else { 0 }, |i| {
            black_box(bytes.get_with(black_box(&encoded[i as usize]), |item| item.value().len()));
        }));
        decode.push(per_call(if runs(Phase::Decode) { args.keys } else { 0 }, |i| {
            let user: User = Postcard.decode(black_box(&stored[i as usize])).unwrap();
            black_box(user);
        }));
        typed.push(per_call(if runs(Phase::Typed) { args.keys } else { 0 }, |i| {
            black_box(cache.get(black_box(&i)).unwrap());
        }));
    }
    let (get, get_with, decode, typed) = (median(get), median(get_with), median(decode), median(typed));
    if let Some(only) = args.only {
        let ns = [get, get_with, decode, typed].into_iter().find(|ns| !ns.is_nan()).unwrap_or(f64::NAN);
        println!("{only:?}: median {ns:.1} ns per call over {} keys, {} rounds", args.keys, args.rounds);
        return Ok(());
    }
    println!("keys {}, rounds {}: median ns per call", args.keys, args.rounds);
    println!("  byte get (copied out)   {get:7.1}");
    println!("  byte get_with (no copy) {get_with:7.1}");
    println!("  postcard decode         {decode:7.1}");
    println!("  byte get + decode       {:7.1}", get + decode);
    println!("  typed get               {typed:7.1}  ({:.2}x byte get + decode)", typed / (get + decode));
    Ok(())
}
