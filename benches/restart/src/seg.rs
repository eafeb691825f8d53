//! The segcache side: `fill` (write until the heap is full, then stop gracefully or wait to be
//! killed) and `reopen` (open the file again, time the first hit, count what came back). Each runs
//! in its own process, started by the driver (`compare`) or by hand.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use segcache_core::{Builder, Error, Policy, SharedCache};

use crate::clock::{mono_ns, ms, process_start_ns};
use crate::data::{key, value};

/// The cache configuration; `fill` and `reopen` must agree on it (the file records it).
#[derive(Debug, Clone, clap::Args)]
pub struct CacheArgs {
    /// The persistence file (tmpfs, e.g. /dev/shm/..., or a regular file).
    #[arg(long)]
    pub path: PathBuf,
    /// Heap size, e.g. 256MiB or 1GiB.
    #[arg(long, default_value = "1GiB", value_parser = crate::data::size_arg)]
    pub heap: usize,
    /// Segment size, e.g. 1MiB (the engine's default).
    #[arg(long, default_value = "1MiB", value_parser = crate::data::size_arg)]
    pub segment: usize,
    /// Eviction policy. `none` by default: the fill stops at the first write refused for lack
    /// of memory, so every acknowledged key is still in the heap at the stop. With an evicting
    /// policy it stops at the first eviction and the items left are counted.
    #[arg(long, default_value = "none")]
    pub policy: Policy,
    /// Shards (power of two); the engine chooses from the core count when left out.
    #[arg(long)]
    pub shards: Option<usize>,
    /// Reopen with `Builder::lazy_verify`: segments are checked at first use, not at open.
    #[arg(long)]
    pub lazy_verify: bool,
    /// A flash tier file beside the heap (`Builder::tier`), with `--tier-size`. The fill then
    /// goes on until the tier too is full (its first reclaimed segment), with an evicting policy.
    #[arg(long, requires = "tier_size")]
    pub tier: Option<PathBuf>,
    /// The flash tier's size, e.g. 8GiB.
    #[arg(long, value_parser = crate::data::size_arg)]
    pub tier_size: Option<usize>,
    /// The tier writer's queue (`Builder::tier_write_queue`), e.g. 8MiB; 0: evictions write
    /// their images themselves.
    #[arg(long, value_parser = crate::data::size_arg)]
    pub tier_write_queue: Option<usize>,
    /// Check every this-many-th key after a reopen (1: all of them).
    #[arg(long, default_value_t = 1)]
    pub stride: u64,
}

impl CacheArgs {
    pub fn builder(&self) -> Builder {
        let mut b = Builder::new()
            .heap_size(self.heap)
            .segment_size(self.segment)
            .eviction(self.policy)
            .path(&self.path)
            .lazy_verify(self.lazy_verify);
        if let Some(s) = self.shards {
            b = b.shards(s);
        }
        if let (Some(path), Some(size)) = (&self.tier, self.tier_size) {
            b = b.tier(path, size as u64);
        }
        if let Some(q) = self.tier_write_queue {
            b = b.tier_write_queue(q);
        }
        b
    }
}

#[derive(Debug, clap::Args)]
pub struct FillArgs {
    #[command(flatten)]
    pub cache: CacheArgs,
    /// After filling, close gracefully (the default).
    #[arg(long, conflicts_with = "then_wait")]
    pub graceful: bool,
    /// After filling, print the count and wait to be killed (the driver sends SIGKILL).
    #[arg(long)]
    pub then_wait: bool,
    /// Print `acked keys=N` (keys 0..N acknowledged) every this many writes, so that a parent may
    /// kill the fill under load and still know what must come back. 0: never.
    #[arg(long, default_value_t = 0)]
    pub progress_every: u64,
}

/// Writes keys 0, 1, 2, ... until the heap is full: the first write refused for lack of memory, or
/// the first eviction (checked every 1024 writes). Every key counted was acknowledged.
pub fn fill(a: &FillArgs) -> Result<()> {
    // Fresh files: the benchmark is about a full heap written by this run.
    for path in std::iter::once(&a.cache.path).chain(&a.cache.tier) {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", path.display()))
            }
            _ => {}
        }
    }
    let cache = a.cache.builder().build_shared().context("opening the cache")?;
    let t = mono_ns();
    let mut written = 0u64;
    let mut out = std::io::stdout().lock();
    let mut until_progress = a.progress_every;
    'fill: loop {
        for _ in 0..1024 {
            match cache.set(&key(written), &value(written), 0, Duration::ZERO) {
                Ok(()) => written += 1,
                Err(Error::NoMemory) => break 'fill,
                Err(e) => bail!("set of key {written} failed: {e}"),
            }
            if until_progress > 0 {
                until_progress -= 1;
                if until_progress == 0 {
                    writeln!(out, "acked keys={written}")?;
                    out.flush()?;
                    until_progress = a.progress_every;
                }
            }
        }
        let s = cache.stats();
        let full = match a.cache.tier {
            // Eviction feeds the tier: full once the tier reclaims. What the tier's writer dropped
            // while the device was behind (`flash_demotions_dropped`) is counted, not waited for.
            Some(_) => s.flash_reclaimed_segments > 0,
            None => s.evicted_items + s.evicted_segments + s.merged_items > 0,
        };
        if full {
            break;
        }
    }
    let fill_ms = ms(t, mono_ns());
    let s = cache.stats();
    writeln!(
        out,
        "fill keys={written} items={} flash_items={} bytes={} heap={} shards={} fill_ms={fill_ms:.1} evicted={} \
         flash_dropped={}",
        s.items, s.flash_items, s.bytes, s.heap_bytes, s.shards, s.evicted_items, s.flash_demotions_dropped
    )?;
    out.flush()?;
    drop(out);
    if a.then_wait {
        // The driver kills us with SIGKILL; the file is left not clean.
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let t = mono_ns();
    cache.close().context("graceful close")?;
    println!("closed close_ms={:.1}", ms(t, mono_ns()));
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct ReopenArgs {
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Keys written by `fill` (keys 0..N are checked).
    #[arg(long)]
    pub keys: u64,
    /// CLOCK_MONOTONIC nanoseconds taken by the driver just before it spawned this process;
    /// without it, the process start time from /proc/self/stat (10 ms resolution).
    #[arg(long)]
    pub t0_ns: Option<u64>,
}

/// Opens the file, times the first served hit from process start, then counts the keys served
/// with the right value, served with a wrong one (must be 0), and missed.
pub fn reopen(a: &ReopenArgs) -> Result<()> {
    let main_at = mono_ns();
    let start = a.t0_ns.or_else(process_start_ns).unwrap_or(main_at);
    if a.keys == 0 {
        bail!("--keys must be at least 1");
    }
    if !a.cache.path.exists() {
        bail!("{} does not exist: run fill first", a.cache.path.display());
    }
    let t = mono_ns();
    let cache = a.cache.builder().build_shared().context("reopening the cache")?;
    let opened = mono_ns();
    // The newest key is the likeliest survivor of eviction; walk back until one is served.
    let mut first = None;
    for i in (0..a.keys).rev().take(1 << 16) {
        if cache.get_with(&key(i), |it| it.value() == value(i)).is_some() {
            first = Some(i);
            break;
        }
    }
    let hit_at = mono_ns();
    // With a tier, the oldest keys are on flash: the first of them served, timed too.
    let flash_hit_at = a.cache.tier.as_ref().map(|_| {
        let served =
            (0..a.keys).take(1 << 16).find(|&i| cache.get_with(&key(i), |it| it.value() == value(i)).is_some());
        (served, mono_ns())
    });
    let (served, wrong, missed) = count(&cache, a.keys, a.cache.stride);
    let heap = cache.stats().heap_bytes;
    let open_s = (opened - t) as f64 / 1e9;
    let stats = cache.stats();
    let flash = flash_hit_at.map_or(String::new(), |(i, at)| {
        format!(
            " flash_items={} first_flash_hit={} first_flash_hit_ms={:.1}",
            stats.flash_items,
            i.map_or(-1, |i| i as i64),
            ms(start, at)
        )
    });
    println!(
        "reopen keys={} checked_every={} served={served} wrong={wrong} missed={missed} items={} first_hit={} \
         exec_ms={:.1} open_ms={:.1} first_hit_ms={:.1} scan_gib_s={:.2}{flash}",
        a.keys,
        a.cache.stride,
        cache.len(),
        first.map_or(-1, |i| i as i64),
        ms(start, main_at),
        open_s * 1e3,
        ms(start, hit_at),
        heap as f64 / (1u64 << 30) as f64 / open_s.max(1e-9),
    );
    cache.close().context("closing")?;
    Ok(())
}

/// Served with the right value, served with a wrong value, missed, over every `stride`-th key
/// of 0..n.
pub fn count(cache: &SharedCache, n: u64, stride: u64) -> (u64, u64, u64) {
    let (mut served, mut wrong, mut missed) = (0, 0, 0);
    for i in (0..n).step_by(stride.max(1) as usize) {
        match cache.get_with(&key(i), |it| it.value() == value(i) && it.flags() == 0) {
            Some(true) => served += 1,
            Some(false) => wrong += 1,
            None => missed += 1,
        }
    }
    (served, wrong, missed)
}
