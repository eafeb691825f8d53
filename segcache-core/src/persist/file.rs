//! The persistence file: open and lock, metadata checks, graceful close (its header format: `header`).
//!
//! The file holds the whole region (see `layout`): header page, every shard's metadata (hash
//! table, segment headers, TTL buckets, counters) and every shard's heap. It is mapped shared, so
//! the running cache writes its state straight into it; nothing is copied at stop or start.
//!
//! - Graceful close: checksum of all metadata into the header, `clean = 1`, `msync`.
//! - Reopen, clean: header and metadata checksums, then every segment's records and record
//!   checksum sum are verified (in parallel), and the cache resumes as it was.
//! - Reopen, not clean (the process died): the index is rebuilt from the segments (`recover`).
//! - Open: the file's blocks are reserved, or the open fails with [`Error::NoSpace`] (`space`).
//! - Anything unexpected is a [`Error::BadFile`] naming the problem, or, with
//!   `reset_bad_file(true)`, a warning and an empty cache over the same file.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::hashtable::bucket::Bucket;
use crate::layout::{Layout, FILE_HEADER_LEN};
use crate::meta::ShardMeta;
use crate::persist::header::Header;
use crate::persist::held::HeldFile;
use crate::persist::region::{advise_huge_pages, PersistFile, Region};
use crate::persist::share::{self, Entry, Sharing};
use crate::persist::space;

/// How a file was found at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// New or reset: lay out empty structures.
    Fresh,
    /// Closed gracefully and verified: use as is.
    Clean,
    /// Not closed: rebuild the index from the segments.
    Crashed,
    /// Live, in use by other processes (`Builder::multi_process`): use as is.
    Joined,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::BadFile { path: path.to_path_buf(), reason: reason.into() }
}

/// Opens (or creates) and locks the file, checks its header and maps it. The caller verifies or
/// rebuilds the contents according to the returned [`Found`], and on a content problem calls
/// [`reset`] or gives up. `sharing`: the settings word of a process that shares the file with
/// others (`Builder::multi_process`); the caller ends the opening with [`opened`].
pub(crate) fn open(path: &Path, layout: Layout, reset_bad: bool, sharing: Option<u32>) -> Result<(Region, Found)> {
    let held = HeldFile::open(path)?;
    let file = held.file();
    let (sharing, entry) = match sharing {
        None => {
            held.lock(path)?;
            (None, Entry::First)
        }
        Some(settings) => {
            let (s, entry) = Sharing::enter(path, settings)?;
            (Some(s), entry)
        }
    };
    let want = Header::for_layout(&layout);
    let len = file.metadata().map_err(io_err(path))?.len();
    let found = if entry == Entry::Join {
        let mut head = vec![0u8; FILE_HEADER_LEN.min(len as usize)];
        file.read_exact_at(&mut head, 0).map_err(io_err(path))?;
        let h = Header::decode(&head).map_err(|reason| bad(path, reason))?;
        if let Some(reason) = h.mismatch(&want) {
            return Err(bad(path, reason));
        }
        let settings = sharing.as_ref().map_or(0, |s| s.settings);
        if h.sharing != settings {
            return Err(bad(
                path,
                format!(
                    "in use by processes with other settings: {} there, {} here",
                    share::describe(h.sharing),
                    share::describe(settings)
                ),
            ));
        }
        Found::Joined
    } else if len == 0 {
        Found::Fresh
    } else {
        let mut head = vec![0u8; FILE_HEADER_LEN.min(len as usize)];
        file.read_exact_at(&mut head, 0).map_err(io_err(path))?;
        // A process that died while creating the file leaves it zero-filled (the header is
        // written last): there is nothing in it to lose.
        let problem = if head.iter().all(|&b| b == 0) {
            None
        } else {
            match Header::decode(&head) {
                Err(reason) => Some(reason),
                Ok(h) => h.mismatch(&want).or_else(|| {
                    (len != h.total_len)
                        .then(|| format!("file is {len} bytes, expected {} (truncated or resized)", h.total_len))
                }),
            }
        };
        match (problem, Header::decode(&head)) {
            (Some(reason), _) if reset_bad => {
                eprintln!("segcache: warning: {}: {reason}; starting empty", path.display());
                Found::Fresh
            }
            (Some(reason), _) => return Err(bad(path, reason)),
            (None, Ok(h)) if h.clean == 1 => Found::Clean,
            (None, Ok(_)) => Found::Crashed,
            (None, Err(_)) => Found::Fresh,
        }
    };
    let total = layout.total_len() as u64;
    if found == Found::Fresh {
        // Zero the whole file (cheaply: truncating it drops its blocks), then reserve them.
        file.set_len(0).map_err(io_err(path))?;
        file.set_len(total).map_err(io_err(path))?;
    }
    // The first process to open the file reserves its blocks (a file from before may be sparse);
    // those that join find them reserved.
    if found != Found::Joined {
        if let Err(e) = space::reserve(file, path, total) {
            if found == Found::Fresh {
                // Nothing of value is in it: leave an empty file, not a sparse one that looks
                // like a heap.
                let _ = file.set_len(0);
            }
            return Err(e);
        }
    }
    // No MAP_POPULATE: it faults the whole file in on one thread before anything else can run;
    // the verification or rebuild that follows reads every page anyway, on every core, and the
    // kernel maps the neighbours of each faulting page in the same fault.
    let map = memmap2::MmapOptions::new().map_raw(file).map_err(io_err(path))?;
    advise_huge_pages(&map, &layout);
    let region = Region {
        map,
        layout,
        file: Some(PersistFile {
            path: path.to_path_buf(),
            held,
            active: std::sync::atomic::AtomicBool::new(found == Found::Joined),
            closed: false,
            sharing,
        }),
        origin: crate::fork::Origin::here(),
        resident: crate::persist::resident::Resident::new(layout.heap_segments()),
    };
    Ok((region, found))
}

/// The contents are accepted: mark the file in use (not clean until the next graceful close).
pub(crate) fn mark_open(region: &Region) {
    if let Some(pf) = region.file.as_ref() {
        let mut h = Header::for_layout(&region.layout);
        h.sharing = pf.sharing.as_ref().map_or(0, |s| s.settings);
        write_header(region, &h);
        pf.active.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A `fork()` child joining a shared file: the file is still the one its handle was made for
/// (the processes using it now may have reopened it with other settings).
pub(crate) fn check_joined(region: &Region) -> Result<()> {
    let Some(pf) = region.file.as_ref() else { return Ok(()) };
    let h = read_header(region).map_err(|reason| bad(&pf.path, reason))?;
    let settings = pf.sharing.as_ref().map_or(0, |s| s.settings);
    match h.mismatch(&Header::for_layout(&region.layout)) {
        Some(reason) => Err(bad(&pf.path, reason)),
        None if h.sharing != settings && h.clean == 0 => Err(bad(
            &pf.path,
            format!(
                "in use by processes with other settings: {} there, {} here",
                share::describe(h.sharing),
                share::describe(settings)
            ),
        )),
        None => Ok(()),
    }
}

/// The opening is over: a process sharing the file lets the next one in.
pub(crate) fn opened(region: &Region) -> Result<()> {
    match region.file.as_ref().and_then(|pf| pf.sharing.as_ref()) {
        Some(s) => s.opened(),
        None => Ok(()),
    }
}

/// After a graceful close: the metadata still matches the checksum the header vouches for.
pub(crate) fn check_metas(region: &Region) -> std::result::Result<(), String> {
    let h = read_header(region)?;
    if metas_checksum(region) != h.meta_checksum {
        return Err("metadata checksum mismatch (corrupt hash table, segment headers or counters)".into());
    }
    Ok(())
}

/// Checksum of every shard's metadata in use: counters, TTL buckets, segment headers, primary
/// buckets and the overflow buckets handed out (the rest of the pool is zeroed when taken, so it
/// carries nothing). Shards are hashed in parallel.
fn metas_checksum(region: &Region) -> u64 {
    let layout = region.layout;
    let g = layout.geometry;
    let shard_sum = |i: usize| {
        let start = layout.meta_start(i);
        // SAFETY: the shard's metadata lies inside the mapping; no engine runs during open/close.
        let meta = unsafe { &*(region.base().add(start) as *const ShardMeta) };
        let used = (meta.overflow.used as usize).min(g.overflow_buckets());
        let table_len = (g.primary_buckets() + used) * std::mem::size_of::<Bucket>();
        // SAFETY: both ranges lie inside the shard's metadata and table (`Geometry::meta_len`,
        // `Geometry::table_len`), which lie inside the mapping.
        let (meta, table) = unsafe {
            (
                std::slice::from_raw_parts(region.base().add(start), g.meta_len()),
                std::slice::from_raw_parts(region.base().add(layout.table_start(i)), table_len),
            )
        };
        xxhash_rust::xxh3::xxh3_64_with_seed(table, xxhash_rust::xxh3::xxh3_64(meta))
    };
    let sums: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..layout.shards).map(|i| s.spawn(move || shard_sum(i))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    });
    let bytes: Vec<u8> = sums.iter().flat_map(|s| s.to_le_bytes()).collect();
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

fn read_header(region: &Region) -> std::result::Result<Header, String> {
    // SAFETY: the header page is the first `FILE_HEADER_LEN` bytes of the mapping.
    let b = unsafe { std::slice::from_raw_parts(region.base(), FILE_HEADER_LEN) };
    Header::decode(b)
}

fn write_header(region: &Region, h: &Header) {
    let b = h.encode();
    // SAFETY: the header page is inside the mapping and only open/close write it.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), region.base(), b.len()) };
}

/// Graceful close: checksum of the metadata, mark clean, flush to the file. Idempotent.
fn close_region(region: &mut Region, now: u32) -> Result<()> {
    let Some(pf) = region.file.as_ref() else { return Ok(()) };
    if pf.closed
        || !pf.active.load(std::sync::atomic::Ordering::Relaxed)
        || pf.sharing.as_ref().is_some_and(|s| !s.is_last())
    {
        return Ok(());
    }
    let path = pf.path.clone();
    let mut h = Header::for_layout(&region.layout);
    h.meta_checksum = metas_checksum(region);
    h.clean = 1;
    h.closed_at = now;
    // Data and metadata first, then the header that vouches for them.
    region.map.flush().map_err(io_err(&path))?;
    write_header(region, &h);
    region.map.flush_range(0, FILE_HEADER_LEN).map_err(io_err(&path))?;
    if let Some(pf) = region.file.as_mut() {
        pf.closed = true;
    }
    Ok(())
}

/// Writes the heap's dirty pages and the file's metadata to stable storage, returning once they
/// are there. Nothing is marked clean: a reopen after a power loss rebuilds the index from the
/// segments, as after a crash. A heap without a file has nothing to write.
pub(crate) fn sync(region: &Region) -> Result<()> {
    region.origin.check()?;
    let Some(pf) = region.file.as_ref() else { return Ok(()) };
    region.map.flush().map_err(io_err(&pf.path))?;
    pf.held.file().sync_all().map_err(io_err(&pf.path))
}

// A region closes its file when the last engine over it drops it. This lives beside the close it
// runs, so that `region` needs nothing from this file.
impl Drop for Region {
    fn drop(&mut self) {
        if self.origin.forked() {
            return;
        }
        let now = crate::clock::Clock::now(&crate::clock::SystemClock);
        if let Err(e) = close_region(self, now) {
            eprintln!("segcache: warning: graceful close failed: {e}");
        }
        if let Some(s) = self.file.as_ref().and_then(|pf| pf.sharing.as_ref()) {
            s.release();
        }
    }
}

/// Closes the region if `region` is its last holder (every engine over it is gone).
pub(crate) fn close_last(region: Arc<Region>, now: u32) -> Result<()> {
    region.origin.check()?;
    match Arc::try_unwrap(region) {
        Ok(mut r) => close_region(&mut r, now),
        Err(_) => Ok(()),
    }
}
