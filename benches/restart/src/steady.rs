//! Steady-state get and set, one thread, on a file-backed heap or anonymous memory: the cost of
//! persistence while serving. 16-byte keys, 64-byte values, random order.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use segcache_core::Builder;

use crate::clock::mono_ns;
use crate::data::{key, value};

#[derive(Debug, clap::Args)]
pub struct SteadyArgs {
    /// File for the heap; anonymous memory when left out.
    #[arg(long)]
    pub path: Option<PathBuf>,
    #[arg(long, default_value_t = 1_000_000)]
    pub items: u64,
    /// Heap size: large enough that the items are not evicted.
    #[arg(long, default_value = "256MiB", value_parser = crate::data::size_arg)]
    pub heap: usize,
}

pub fn steady(a: &SteadyArgs) -> Result<()> {
    let mut b = Builder::new().heap_size(a.heap);
    if let Some(p) = &a.path {
        let _ = std::fs::remove_file(p);
        b = b.path(p);
    }
    let cache = b.build_shared().context("opening the cache")?;
    let keys: Vec<[u8; 16]> = (0..a.items).map(key).collect();
    let vals: Vec<[u8; 64]> = (0..a.items).map(value).collect();
    let mut order: Vec<u32> = (0..a.items as u32).collect();
    order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(42));
    let n = order.len() as f64;

    let t = mono_ns();
    for &i in &order {
        cache.set(&keys[i as usize], &vals[i as usize], 0, Duration::ZERO)?;
    }
    let insert_ns = (mono_ns() - t) as f64 / n;
    if cache.len() as u64 != a.items {
        bail!("heap too small: {} of {} items retained", cache.len(), a.items);
    }
    order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(7));
    let t = mono_ns();
    let mut hits = 0u64;
    for &i in &order {
        hits += u64::from(cache.get_with(&keys[i as usize], |it| it.value().len() == 64).unwrap_or(false));
    }
    let get_ns = (mono_ns() - t) as f64 / n;
    if hits != a.items {
        bail!("only {hits} of {} gets hit", a.items);
    }
    order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(9));
    let t = mono_ns();
    for &i in &order {
        cache.set(&keys[i as usize], &vals[(i as usize + 1) % vals.len()], 0, Duration::ZERO)?;
    }
    let set_ns = (mono_ns() - t) as f64 / n;
    println!(
        "steady heap={} items={} insert_ns={insert_ns:.0} get_ns={get_ns:.0} set_ns={set_ns:.0}",
        a.path.as_ref().and_then(|p| p.parent()).map_or("anon".into(), |d| format!("file-in:{}", d.display())),
        a.items
    );
    cache.close()?;
    if let Some(p) = &a.path {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}
