//! The engine's settings: the heap (`-m`), the largest item (`-I`) and the segment size that
//! holds it, the eviction policy, the persistence file and the layout it was made with, and the
//! engine's `Builder` they make.

use segcache_core::{FileLayout, Policy, DEFAULT_SEGMENT_SIZE, MAX_ITEM_SIZE, MAX_SEGMENT_SIZE};

use super::cli::Cli;
use super::error::ConfigError;
use super::file::FileConfig;
use super::memcached_opts::Extended;
use super::settings::{EngineSettings, Settings};
use super::size;

/// The largest `-I`, memcached's: 1 GiB. An item larger than a segment holds is stored by the
/// engine as chunks (`segcache_core::Builder::max_item_size`).
pub const MAX_ITEM_SIZE_LIMIT: usize = MAX_ITEM_SIZE;

/// An item larger than a segment lies in one shard: the shards are made few enough that each
/// shard's heap holds this many of the largest, so that storing one evicts a part of a shard,
/// not all of it.
const LARGEST_ITEMS_PER_SHARD: usize = 4;

/// `-I` unless told: memcached's default largest item, 1 MiB.
pub const DEFAULT_MAX_ITEM_SIZE: u64 = 1 << 20;

/// `-m` unless told: memcached's default, 64 megabytes, so that a command line written for
/// memcached sizes the cache as memcached would. The engine's own default heap
/// (`segcache_core::DEFAULT_HEAP_SIZE`) is the same 64 MiB today; this one follows memcached,
/// not the engine, should the two part.
pub const DEFAULT_MEMORY_MB: u64 = 64;

/// `-I` over the file's `max_item_size`, checked as memcached checks it: from 1k to 1 GiB, and
/// at most half of the memory limit (`-m`).
pub fn max_item_size(cli: &Cli, file: &FileConfig) -> Result<usize, ConfigError> {
    let n = match (&cli.max_item_size, &file.max_item_size) {
        (Some(s), _) => size::bytes(s)?,
        (None, Some(s)) => s.bytes()?,
        (None, None) => DEFAULT_MAX_ITEM_SIZE,
    };
    let memory_mb = cli.memory_mb.or(file.memory_mb).unwrap_or(DEFAULT_MEMORY_MB);
    let max = (MAX_ITEM_SIZE_LIMIT as u64).min(memory_mb.saturating_mul(1 << 20) / 2);
    if n < 1024 || n > max {
        return Err(ConfigError::MaxItemSize { got: n, max: max as usize });
    }
    Ok(n as usize)
}

/// The heap, the segments that hold items of `max_item_size`, the eviction policy and the
/// persistence file: flags over the file's `[engine]` table, and what a setting leaves open taken
/// from the layout the persistence file was made with.
pub fn resolve(
    cli: &Cli,
    ext: &Extended,
    file: &FileConfig,
    max_item_size: usize,
) -> Result<EngineSettings, ConfigError> {
    let e = &file.engine;
    let memory_mb = cli.memory_mb.or(file.memory_mb).unwrap_or(DEFAULT_MEMORY_MB);
    let memory_bytes = memory_bytes(memory_mb)?;
    let max_memory_bytes = match cli.max_memory_mb.or(file.max_memory_mb) {
        Some(max) if max < memory_mb => return Err(ConfigError::MaxMemoryBelowLimit { max, memory: memory_mb }),
        Some(max) => Some(self::memory_bytes(max)?),
        None => None,
    };
    let path = cli.persist.clone().or_else(|| cli.memory_file.clone()).or_else(|| e.path.clone());
    let made = layout_made(path.as_deref(), max_memory_bytes.unwrap_or(memory_bytes));
    // The smallest segment that holds every item `-I` admits (see the default below).
    let fits_items = max_item_size.next_power_of_two();
    let segment_size = match (&cli.segment_size, &e.segment_size) {
        (Some(s), _) => size::bytes(s)? as usize,
        (None, Some(s)) => s.bytes()? as usize,
        // The file's, unless its segments are too small for `-I`. Else the smallest power of
        // two that holds every item `-I` admits, at least the engine's default segment (1 MiB).
        // `-I` counts memcached's item header (at least 59 bytes) where a record's is at most 18,
        // so `-I` bytes of segment hold the largest item. No larger: a merge stops the writer
        // for as long as reading two segments' records takes (`target/release/stalls`: at
        // 1 MiB, half as many operations over 100 us as at 2 MiB, a quarter of their time).
        (None, None) => made
            .map(|m| m.segment_size)
            .filter(|&s| s >= fits_items)
            .unwrap_or_else(|| fits_items.clamp(DEFAULT_SEGMENT_SIZE, MAX_SEGMENT_SIZE)),
    };
    let eviction = eviction(cli, file)?;
    Ok(EngineSettings {
        memory_bytes,
        max_memory_bytes,
        segment_size,
        eviction,
        shards: cli.shards.or(e.shards).or(made.map(|m| m.shards)).or(large_item_shards(
            memory_bytes,
            segment_size,
            max_item_size,
        )),
        hash_power: cli.hash_power.or(ext.hash_power).or(e.hash_power).or(made.map(|m| m.hash_power)),
        path,
        reset_bad_file: cli.reset_bad_file || e.reset_bad_file.unwrap_or(false),
        lazy_verify: cli.lazy_verify || e.lazy_verify.unwrap_or(false),
        resize_file: cli.resize_file || e.resize_file.unwrap_or(false),
        prefault: cli.large_pages || e.prefault.unwrap_or(false),
        touch_ahead: ext.touch_ahead.or(e.touch_ahead).unwrap_or(true),
        tier: match (&ext.ext_path, &e.tier_path, &e.tier_size) {
            (Some(tier), _, _) => Some(tier.clone()),
            (None, Some(path), Some(size)) => Some((path.clone(), size.bytes()?)),
            (None, None, None) => None,
            (None, _, _) => return Err(ConfigError::TierHalf),
        },
        tier_promote_after: ext.tier_promote_after.or(e.tier_promote_after).unwrap_or(0),
        tier_write_queue: match (ext.tier_write_queue, &e.tier_write_queue) {
            (Some(bytes), _) => Some(bytes as usize),
            (None, Some(size)) => Some(size.bytes()? as usize),
            (None, None) => None,
        },
    })
}

/// The shard count when `-I` is above what a segment holds and nothing else sets it: the
/// engine's default (at most 256, from the cores), lowered until each shard's heap holds
/// `LARGEST_ITEMS_PER_SHARD` of the largest items (each shard's heap is `-m` over the shards,
/// and an item larger than a segment must fit in one shard). `None`: the engine's default.
fn large_item_shards(memory_bytes: usize, segment_size: usize, max_item_size: usize) -> Option<usize> {
    if max_item_size <= segment_size {
        return None;
    }
    let mut n = segcache_core::Builder::new().heap_size(memory_bytes).segment_size(segment_size).shard_count().ok()?;
    while n > 1 && memory_bytes / n < LARGEST_ITEMS_PER_SHARD * max_item_size {
        n /= 2;
    }
    Some(n)
}

/// `-m`'s megabytes in bytes.
fn memory_bytes(memory_mb: u64) -> Result<usize, ConfigError> {
    if memory_mb == 0 {
        return Err(ConfigError::NoMemory);
    }
    usize::try_from(memory_mb.saturating_mul(1 << 20)).map_err(|_| ConfigError::MemoryTooLarge(memory_mb))
}

/// The layout the persistence file at `path` was made with, when it has a heap of
/// `memory_bytes` (the room laid out, with `--max-memory-limit`).
///
/// A persistence file opens only with the layout it was made with: what is not set here comes
/// from the file, so that a default that changed since, or a shard count chosen for other cores,
/// does not turn a warm restart away. Not from a file of another heap size, which cannot open
/// anyway (and `--reset-bad-file` then starts over with settings for this heap). A file that
/// cannot be read is reported by the engine's open.
fn layout_made(path: Option<&std::path::Path>, memory_bytes: usize) -> Option<FileLayout> {
    path.and_then(|p| FileLayout::read(p).ok().flatten()).filter(|m| m.has_heap_of(memory_bytes))
}

/// `-M` (no eviction), else `--eviction` over the file's, else merge.
fn eviction(cli: &Cli, file: &FileConfig) -> Result<Policy, ConfigError> {
    let name = match cli.disable_evictions {
        true => "none".to_string(),
        false => cli.eviction.clone().or_else(|| file.engine.eviction.clone()).unwrap_or_else(|| "merge".into()),
    };
    name.parse().map_err(|source| ConfigError::Eviction { name, source })
}

impl Settings {
    /// The engine builder these settings describe.
    pub fn builder(&self) -> segcache_core::Builder {
        let e = &self.engine;
        let mut b = segcache_core::Builder::new()
            .heap_size(e.memory_bytes)
            .segment_size(e.segment_size)
            .eviction(e.eviction)
            .reset_bad_file(e.reset_bad_file)
            .lazy_verify(e.lazy_verify)
            .resize_file(e.resize_file)
            .prefault(e.prefault)
            .touch_ahead(e.touch_ahead)
            // Clients see memcached's bytes for a number that got shorter.
            .pad_numbers(true)
            // Items above what a segment holds are chunked, up to `-I` (the protocol layer
            // refuses larger ones first, counting memcached's item header).
            .max_item_size(self.max_item_size);
        if let Some(max) = e.max_memory_bytes {
            b = b.max_heap_size(max);
        }
        if let Some(s) = e.shards {
            b = b.shards(s);
        }
        if let Some(h) = e.hash_power {
            b = b.hash_power(h);
        }
        if let Some(p) = &e.path {
            b = b.path(p);
        }
        if let Some((path, _)) = &e.tier {
            let bytes = self.tier_size(&b).unwrap_or_default();
            b = b.tier(path, bytes).tier_promote_after(e.tier_promote_after);
            if let Some(queue) = e.tier_write_queue {
                b = b.tier_write_queue(queue);
            }
        }
        b
    }

    /// The flash tier's size: `ext_path`'s, rounded down to whole segments that split evenly over
    /// the shards, as memcached rounds it down to whole pages. A size too small for two segments
    /// per shard is left as given, for the engine to refuse it naming it. `None` without a tier.
    pub fn tier_size(&self, b: &segcache_core::Builder) -> Option<u64> {
        let (_, asked) = self.engine.tier.as_ref()?;
        // A shard count the engine refuses is reported when it opens; any unit does until then.
        let shards = b.shard_count().unwrap_or(1) as u64;
        let unit = self.engine.segment_size as u64 * shards;
        let whole = asked / unit * unit;
        Some(if whole >= 2 * unit { whole } else { *asked })
    }
}
