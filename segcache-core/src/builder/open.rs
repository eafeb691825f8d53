//! Opening a cache: the layout of the heap for the settings, then its memory, fresh or found
//! in a file; a file found is verified (closed cleanly) or rebuilt (after a crash).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::builder::Builder;
use crate::engine::migrate::Moved;
use crate::engine::EngineSettings;
use crate::engine::Segcache;
use crate::error::{Error, Result};
use crate::hashtable::slot::{self};
use crate::layout::MAPPED_SLOTS;
use crate::layout::{self, Geometry, Layout};
use crate::persist::file::{self, Found};
use crate::persist::file_layout::FileLayout;
use crate::persist::region::Region;
use crate::persist::share;
use crate::shared::handle::SharedCache;
use crate::sync::lock::ReaderSlot;
use crate::sync::mapped::MappedLock;
use crate::tier::file::TierFile;
use crate::tier::ids::Ids;
use crate::tier::meta::TierHeader;

impl Builder {
    /// A single-owner engine.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// assert_eq!(cache.get(b"k").unwrap().value(), b"v");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn build(self) -> Result<Segcache> {
        if self.multi_process {
            return Err(Error::InvalidConfig("multi_process needs the thread-safe handle: use build_shared".into()));
        }
        let mut engines = self.open_engines(1)?;
        Ok(engines.pop().expect("one engine"))
    }

    /// A thread-safe, sharded cache.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// std::thread::scope(|s| {
    ///     for t in 0..4 {
    ///         let cache = &cache;
    ///         s.spawn(move || cache.set(format!("thread{t}").as_bytes(), b"v", 0, Duration::ZERO).unwrap());
    ///     }
    /// });
    /// assert_eq!(cache.len(), 4);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn build_shared(self) -> Result<SharedCache> {
        let shards = self.shard_count()?;
        let mut cache = SharedCache::from_engines(self.open_engines(shards)?, self.multi_process);
        if self.touch_ahead {
            cache.start_touch_ahead();
        }
        Ok(cache)
    }

    fn layout(&self, shards: usize) -> Result<Layout> {
        self.validate()?;
        if layout::segments_per_shard(self.heap_size, shards, self.segment_size) < 2 {
            return Err(Error::InvalidConfig(format!(
                "heap_size {} holds fewer than 2 segments of {} bytes per shard ({shards} shards)",
                self.heap_size, self.segment_size
            )));
        }
        let segments = layout::segments_per_shard(self.laid_heap_size(), shards, self.segment_size);
        if segments * shards > slot::MAX_SEGMENTS {
            return Err(Error::InvalidConfig(format!(
                "a heap of {} bytes makes more than {} segments; use larger segments",
                self.laid_heap_size(),
                slot::MAX_SEGMENTS
            )));
        }
        if let Some((_, bytes)) = &self.tier {
            let flash = *bytes as usize / self.segment_size;
            if !flash.is_multiple_of(shards) || flash / shards < 2 || !Ids::fit(segments, flash / shards) {
                return Err(Error::InvalidConfig(format!(
                    "tier of {bytes} bytes: its {flash} segments must split evenly over {shards} shards, \
                     at least 2 each, and with the heap's {segments} per shard stay within {} segment ids",
                    slot::MAX_SEGMENTS
                )));
            }
        }
        // The table holds the flash tier's items too: sized for the bytes of both.
        let flash_bytes = self.tier.as_ref().map_or(0, |(_, bytes)| *bytes as usize / shards);
        let hash_power =
            self.hash_power.unwrap_or_else(|| layout::default_hash_power(segments * self.segment_size + flash_bytes));
        Ok(Layout { geometry: Geometry { hash_power, segment_size: self.segment_size, segments }, shards })
    }

    fn open_engines(&self, shards: usize) -> Result<Vec<Segcache>> {
        let layout = self.layout(shards)?;
        match &self.path {
            Some(path) if self.resize_file => self.open_resized(path, layout),
            _ => self.open_layout(layout),
        }
    }

    /// Opens the file at `path` with `layout`; first, if it was made with other sizes, or its
    /// tier file with another tier size (or a move was cut short: `PATH.resizing` is there),
    /// moves its items, those on its tier too, into a new file of these (and a new tier file).
    ///
    /// A crash at any point leaves the old cache or the new one: the heap file goes aside first,
    /// then the tier file (`TIER.resizing`); while the heap's is aside, what is at `path` and
    /// (once the tier's is aside) at the tier's path is a new cache being filled, thrown away by
    /// the next open, which moves the items again. The new cache holds the items once the heap's
    /// file aside is removed; the tier's goes after it (a tier file aside without the heap's is
    /// left by a crash between the two, and goes at the next open).
    fn open_resized(&self, path: &Path, layout: Layout) -> Result<Vec<Segcache>> {
        let aside = resizing_path(path);
        let tier_aside = self.tier.as_ref().map(|(tier, _)| resizing_path(tier));
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        if aside.exists() {
            // What is at `path` is a new file that the move was still filling.
            remove_if_there(path)?;
        } else {
            if let Some(tier_aside) = &tier_aside {
                // A move that was over but for this.
                remove_if_there(tier_aside)?;
            }
            // A file that is not readable as a segcache file is left to the plain open, which
            // refuses it or (`reset_bad_file`) starts over.
            match FileLayout::read(path).ok().flatten() {
                Some(found) if found != FileLayout::of(&layout) || self.tier_resized(&layout) => {
                    std::fs::rename(path, &aside).map_err(io)?
                }
                _ => return self.open_layout(layout),
            }
        }
        if let (Some((tier, _)), Some(tier_aside)) = (&self.tier, &tier_aside) {
            if tier_aside.exists() {
                // What is at the tier's path is a new tier file that the move was still filling.
                remove_if_there(tier)?;
            } else if tier.exists() {
                std::fs::rename(tier, tier_aside).map_err(|source| Error::Io { path: tier.clone(), source })?;
            }
        }
        let Some(found) = FileLayout::read(&aside)? else {
            std::fs::remove_file(&aside).map_err(io)?;
            if let Some(tier_aside) = &tier_aside {
                remove_if_there(tier_aside)?;
            }
            return self.open_layout(layout);
        };
        // The old tier, if the file aside is one of the old heap's sizes: its items move too.
        let old_tier = tier_aside.as_ref().and_then(|tier_aside| {
            let h = read_tier_header(tier_aside)?;
            let bytes = h.segment_size * u64::from(h.segments) * u64::from(h.shards);
            (h.segment_size == found.segment_size as u64 && h.shards as usize == found.shards && bytes > 0)
                .then(|| (tier_aside.clone(), bytes))
        });
        let mut old = Builder {
            heap_size: found.heap_size,
            max_heap_size: None,
            segment_size: found.segment_size,
            hash_power: Some(found.hash_power),
            shards: Some(found.shards),
            path: Some(aside.clone()),
            resize_file: false,
            listener: None,
            lazy_verify: false,
            prefault: false,
            tier: old_tier,
            moving_out: true,
            ..self.clone()
        }
        .open_engines(found.shards)?;
        let mut new = self.open_layout(layout)?;
        let last = old.iter().map(Segcache::last_cas).max().unwrap_or(0);
        new.iter_mut().for_each(|e| e.cas_above(last));
        let mut moved = Moved::default();
        for engine in &mut old {
            let m = engine.move_items_into(&mut new)?;
            (moved.items, moved.too_large) = (moved.items + m.items, moved.too_large + m.too_large);
        }
        drop(old);
        // The new files hold the items from here on: a crash now reopens them, or they are
        // verified. Every shard's tier images are written, then both files are synced.
        new.iter().try_for_each(Segcache::sync)?;
        std::fs::remove_file(&aside).map_err(|source| Error::Io { path: aside.clone(), source })?;
        if let Some(tier_aside) = &tier_aside {
            remove_if_there(tier_aside)?;
        }
        if moved.too_large > 0 {
            eprintln!(
                "segcache: warning: {}: {} item(s) larger than the new segments were left behind in the resize",
                path.display(),
                moved.too_large
            );
        }
        Ok(new)
    }

    /// Whether the tier file is there with a header of other sizes than `layout` and this tier
    /// size make: its items need a move, as a heap file's of other sizes do.
    fn tier_resized(&self, layout: &Layout) -> bool {
        let Some((tier, bytes)) = &self.tier else { return false };
        let Some(h) = read_tier_header(tier) else { return false };
        let segment_size = layout.geometry.segment_size as u64;
        let per = bytes / segment_size / layout.shards as u64;
        (h.segment_size, u64::from(h.segments), h.shards as usize) != (segment_size, per, layout.shards)
    }

    fn open_layout(&self, layout: Layout) -> Result<Vec<Segcache>> {
        let shards = layout.shards;
        let (region, found) = match &self.path {
            None => (Region::anonymous(layout)?, Found::Fresh),
            Some(path) => {
                let sharing = self.multi_process.then(|| share::settings_word(self.policy, self.pad_numbers));
                file::open(path, layout, self.reset_bad_file, sharing)?
            }
        };
        if self.prefault {
            region.prefault();
        }
        let region = Arc::new(region);
        let geo = layout.geometry;
        let settings = EngineSettings {
            policy: self.policy,
            clock: self.clock.clone(),
            pad_numbers: self.pad_numbers,
            listener: self.listener.clone(),
            multi_process: self.multi_process,
            max_item_size: self.max_item_size,
        };
        let mut engines: Vec<Segcache> =
            (0..shards).map(|i| Segcache::from_mem(region.shard(i), geo, &settings, found)).collect();
        match found {
            Found::Fresh | Found::Joined => {}
            Found::Clean => {
                // Metadata and segments are checked at once, the metadata first among the errors:
                // a corrupt segment header can make its segment look corrupt too.
                let checked = if self.lazy_verify {
                    file::check_metas(&region)
                } else {
                    std::thread::scope(|s| {
                        let metas = s.spawn(|| file::check_metas(&region));
                        let segments = verify_all(&engines);
                        metas.join().unwrap_or_else(|_| Err("metadata check panicked".into())).and(segments)
                    })
                };
                match checked {
                    Ok(()) => {
                        for e in &mut engines {
                            if self.lazy_verify {
                                e.defer_segment_checks();
                            }
                            e.fit_spare_to_policy();
                        }
                    }
                    Err(reason) => {
                        let path = self.path.clone().unwrap_or_default();
                        if !self.reset_bad_file {
                            return Err(Error::BadFile { path, reason });
                        }
                        eprintln!("segcache: warning: {}: {reason}; starting empty", path.display());
                        engines.iter_mut().for_each(|e| e.reset(false));
                    }
                }
            }
            Found::Crashed => {
                let corrupt: u64 = std::thread::scope(|s| {
                    let handles: Vec<_> = engines.iter_mut().map(|e| s.spawn(move || e.rebuild().1)).collect();
                    handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
                });
                if corrupt > 0 {
                    eprintln!(
                        "segcache: warning: {}: {corrupt} segment(s) failed their checks after a crash and were dropped",
                        self.path.as_deref().unwrap_or(std::path::Path::new("")).display()
                    );
                }
            }
        }
        if found != Found::Joined {
            // A memory limit is a setting of the running cache, not of the file: `heap_size`,
            // under room laid out to grow (0: the whole heap).
            let segments = layout::segments_per_shard(self.heap_size, shards, self.segment_size);
            let cap = if segments < geo.segments { segments as u32 } else { 0 };
            engines.iter_mut().for_each(|e| e.meta_mut().segment_cap = cap);
            if self.tier.is_none() {
                // No tier this time: its file may change without this heap, so it is not trusted
                // again.
                engines.iter_mut().for_each(|e| e.meta_mut().tier_id = 0);
            }
            if self.multi_process {
                init_locks(&region)
                    .map_err(|source| Error::Io { path: self.path.clone().unwrap_or_default(), source })?;
            }
            file::mark_open(&region);
        }
        file::opened(&region)?;
        if let Some((path, bytes)) = &self.tier {
            attach_tier(&mut engines, path, *bytes, self.tier_write_queue, found, !self.moving_out)?;
            for tier in engines.iter_mut().filter_map(|e| e.tier.as_deref_mut()) {
                tier.promote_after = self.tier_promote_after;
            }
        }
        // A file's chunks were stored by another process (or an earlier one): counted here,
        // so that item counts leave them out.
        if found != Found::Fresh && self.max_item_size.is_some() {
            engines.iter_mut().for_each(Segcache::recount_chunks);
        }
        Ok(engines)
    }
}

/// Opens the tier file at `path` and gives each engine its slice. The flash slots the heap kept
/// are trusted when the file's header names the identity every shard of the heap names (and the
/// same sizes); otherwise the tier starts cold. Either way the pair takes a new identity, in the
/// file's header first, then in the heap: a copy of either taken before this open no longer
/// matches the other, and a crash between the two writes leaves them apart, so that the next open
/// starts cold. Without `rekey` (a cache opened only for its items to move out), a warm pair
/// keeps its identity: nothing is written that a crash could leave apart.
fn attach_tier(
    engines: &mut [Segcache],
    path: &Path,
    bytes: u64,
    queue: usize,
    found: Found,
    rekey: bool,
) -> Result<()> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let geo = engines.first().map(|e| e.geo).ok_or_else(|| Error::InvalidConfig("no shards".into()))?;
    let (files, header) = TierFile::open(path, bytes, geo.segment_size, engines.len(), queue)?;
    let warm =
        header.is_some_and(|h| found != Found::Fresh && h.id != 0 && engines.iter().all(|e| e.meta().tier_id == h.id));
    let segments = files.first().map_or(0, TierFile::segments);
    // Each shard walks its whole table to count the slots into each flash segment: spread over
    // the cores, as the heap's checks are.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = engines.len().div_ceil(threads).max(1);
    let mut files = files.into_iter();
    std::thread::scope(|s| {
        let handles: Vec<_> = engines
            .chunks_mut(per_thread)
            .map(|chunk| {
                let mine: Vec<TierFile> = files.by_ref().take(chunk.len()).collect();
                s.spawn(move || chunk.iter_mut().zip(mine).try_for_each(|(e, f)| e.attach_tier(f, warm)))
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Err(std::io::Error::other("attaching the tier panicked"))))
    })
    .map_err(io)?;
    if warm && !rekey {
        return Ok(());
    }
    let old = header.map_or(0, |h| h.id);
    let id = std::iter::repeat_with(crate::engine::warm::random)
        .map(|r| r as u32)
        .find(|&id| id != 0 && id != old)
        .unwrap_or(1);
    let header = TierHeader { id, segment_size: geo.segment_size as u64, segments, shards: engines.len() as u32 };
    if let Some(tier) = engines.first().and_then(|e| e.tier.as_deref()) {
        tier.file.write_header(&header).map_err(io)?;
    }
    engines.iter_mut().for_each(|e| e.meta_mut().tier_id = id);
    Ok(())
}

/// The header of the tier file at `path`, if it holds one that checks.
fn read_tier_header(path: &Path) -> Option<TierHeader> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).ok()?;
    let mut b = [0u8; crate::tier::meta::HEADER_LEN];
    file.read_exact_at(&mut b, 0).ok()?;
    TierHeader::decode(&b)
}

/// Removes the file at `path`, if there is one.
fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io { path: path.to_path_buf(), source: e }),
        _ => Ok(()),
    }
}

/// Where a file waits while its items move into a file of other sizes.
pub(crate) fn resizing_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".resizing");
    PathBuf::from(name)
}

/// Sets up every shard's lock and empties its reader slots in the mapping, for the processes that
/// will share the file; the first of them does it, holding the door (see `share`).
fn init_locks(region: &Region) -> std::io::Result<()> {
    let layout = region.layout;
    for i in 0..layout.shards {
        // SAFETY: both lie inside the mapping (`Layout`), and no other process uses them until
        // this one opens the door; a zeroed reader slot is an empty one.
        unsafe {
            MappedLock::init(region.base().add(layout.lock_start(i)) as *mut MappedLock)?;
            std::ptr::write_bytes(
                region.base().add(layout.slots_start(i)),
                0,
                MAPPED_SLOTS * std::mem::size_of::<ReaderSlot>(),
            );
        }
    }
    Ok(())
}

/// Verifies every engine's segments, spread over the available cores.
fn verify_all(engines: &[Segcache]) -> std::result::Result<(), String> {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let per_engine = engines.first().map_or(0, |e| e.geo.segments as u32);
    let jobs: Vec<(usize, std::ops::Range<u32>)> = {
        let chunks = threads.div_ceil(engines.len()).max(1) as u32;
        let step = per_engine.div_ceil(chunks).max(1);
        (0..engines.len())
            .flat_map(|e| (0..per_engine).step_by(step as usize).map(move |s| (e, s..(s + step).min(per_engine))))
            .collect()
    };
    std::thread::scope(|s| {
        let per_thread = jobs.len().div_ceil(threads);
        let handles: Vec<_> = jobs
            .chunks(per_thread.max(1))
            .map(|chunk| s.spawn(move || chunk.iter().try_for_each(|(e, r)| engines[*e].verify_segments(r.clone()))))
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err("verification panicked".into())))
    })
}
