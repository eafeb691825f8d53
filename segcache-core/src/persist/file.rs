//! The persistence file: header, lock, validation, graceful close.
//!
//! The file holds the whole region (see `layout`): header page, every shard's metadata (hash
//! table, segment headers, TTL buckets, counters) and every shard's heap. It is mapped shared, so
//! the running cache writes its state straight into it; nothing is copied at stop or start.
//!
//! - Graceful close: checksum of all metadata into the header, `clean = 1`, `msync`.
//! - Reopen, clean: header and metadata checksums, then every segment's records and record
//!   checksum sum are verified (in parallel), and the cache resumes as it was.
//! - Reopen, not clean (the process died): the index is rebuilt from the segments (`recover`).
//! - Anything unexpected is a [`Error::BadFile`] naming the problem, or, with
//!   `reset_bad_file(true)`, a warning and an empty cache over the same file.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::engine::meta::ShardMeta;
use crate::hashtable::bucket::Bucket;
use crate::layout::{Layout, FILE_HEADER_LEN};
use crate::persist::region::{advise_huge_pages, Region};
use crate::{Error, Result};

const MAGIC: [u8; 8] = *b"SEGCACHE";
/// Bumped whenever the meaning of any persisted byte changes.
/// 4: records carry a 32-bit CAS counter (`record`), shards a CAS counter (`ShardMeta::next_cas`).
pub const FORMAT_VERSION: u32 = 4;

/// The open, locked file behind a region.
#[derive(Debug)]
pub(crate) struct PersistFile {
    pub path: PathBuf,
    /// Held open for its advisory lock, released when the region is dropped.
    pub _file: File,
    /// Set once the contents were accepted (verified, rebuilt or fresh): only then may a close
    /// vouch for them. A file rejected at open is left exactly as it was found.
    pub active: std::sync::atomic::AtomicBool,
    pub closed: bool,
}

/// How a file was found at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// New or reset: lay out empty structures.
    Fresh,
    /// Closed gracefully and verified: use as is.
    Clean,
    /// Not closed: rebuild the index from the segments.
    Crashed,
}

/// The header's fields, in file order (little-endian, fixed offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub version: u32,
    pub segment_size: u64,
    pub segments_per_shard: u64,
    pub shards: u32,
    pub hash_power: u32,
    pub total_len: u64,
    pub clean: u32,
    pub meta_checksum: u64,
    pub closed_at: u32,
}

const HEADER_BYTES: usize = 8 + 4 + 8 + 8 + 4 + 4 + 8 + 4 + 8 + 4;

impl Header {
    fn for_layout(layout: &Layout) -> Header {
        Header {
            version: FORMAT_VERSION,
            segment_size: layout.geometry.segment_size as u64,
            segments_per_shard: layout.geometry.segments as u64,
            shards: layout.shards as u32,
            hash_power: u32::from(layout.geometry.hash_power),
            total_len: layout.total_len() as u64,
            clean: 0,
            meta_checksum: 0,
            closed_at: 0,
        }
    }

    fn encode(&self) -> [u8; HEADER_BYTES + 8] {
        let mut b = [0u8; HEADER_BYTES + 8];
        let mut w = Writer { buf: &mut b, at: 0 };
        w.put(&MAGIC);
        w.put(&self.version.to_le_bytes());
        w.put(&self.segment_size.to_le_bytes());
        w.put(&self.segments_per_shard.to_le_bytes());
        w.put(&self.shards.to_le_bytes());
        w.put(&self.hash_power.to_le_bytes());
        w.put(&self.total_len.to_le_bytes());
        w.put(&self.clean.to_le_bytes());
        w.put(&self.meta_checksum.to_le_bytes());
        w.put(&self.closed_at.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&b[..HEADER_BYTES]);
        b[HEADER_BYTES..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses and checks the magic, version and checksum; the message says what is wrong.
    fn decode(b: &[u8]) -> std::result::Result<Header, String> {
        if b.len() < MAGIC.len() || b[..8] != MAGIC {
            return Err("not a segcache file (no SEGCACHE magic number)".into());
        }
        if b.len() < HEADER_BYTES + 8 {
            return Err("file is shorter than its header (truncated)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version} is not supported (this build reads version {FORMAT_VERSION})"
            ));
        }
        if u64_at(HEADER_BYTES) != xxhash_rust::xxh3::xxh3_64(&b[..HEADER_BYTES]) {
            return Err("header checksum mismatch (corrupt header)".into());
        }
        Ok(Header {
            version,
            segment_size: u64_at(12),
            segments_per_shard: u64_at(20),
            shards: u32_at(28),
            hash_power: u32_at(32),
            total_len: u64_at(36),
            clean: u32_at(44),
            meta_checksum: u64_at(48),
            closed_at: u32_at(56),
        })
    }

    /// Names the first setting in which the file differs from the configuration.
    fn mismatch(&self, want: &Header) -> Option<String> {
        let checks: [(&str, u64, u64); 4] = [
            ("segment size", self.segment_size, want.segment_size),
            ("shard count", u64::from(self.shards), u64::from(want.shards)),
            ("heap size (segments per shard)", self.segments_per_shard, want.segments_per_shard),
            ("hash power", u64::from(self.hash_power), u64::from(want.hash_power)),
        ];
        checks.iter().find(|(_, have, want)| have != want).map(|(name, have, want)| {
            format!("made with another configuration: {name} is {have} in the file, {want} in this cache")
        })
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}
impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::BadFile { path: path.to_path_buf(), reason: reason.into() }
}

/// Opens (or creates) and locks the file, checks its header and maps it. The caller verifies or
/// rebuilds the contents according to the returned [`Found`], and on a content problem calls
/// [`reset`] or gives up.
pub(crate) fn open(path: &Path, layout: Layout, reset_bad: bool) -> Result<(Region, Found)> {
    let file =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io_err(path))?;
    lock(&file, path)?;
    let want = Header::for_layout(&layout);
    let len = file.metadata().map_err(io_err(path))?.len();
    let found = if len == 0 {
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
    if found == Found::Fresh {
        // Zero the whole file: a sparse file costs nothing until written.
        file.set_len(0).map_err(io_err(path))?;
        file.set_len(layout.total_len() as u64).map_err(io_err(path))?;
    }
    // No MAP_POPULATE: it faults the whole file in on one thread before anything else can run;
    // the verification or rebuild that follows reads every page anyway, on every core, and the
    // kernel maps the neighbours of each faulting page in the same fault.
    let map = memmap2::MmapOptions::new().map_raw(&file).map_err(io_err(path))?;
    advise_huge_pages(&map, &layout);
    let region = Region {
        map,
        layout,
        file: Some(PersistFile {
            path: path.to_path_buf(),
            _file: file,
            active: std::sync::atomic::AtomicBool::new(false),
            closed: false,
        }),
        origin: crate::fork::Origin::here(),
    };
    Ok((region, found))
}

/// The contents are accepted: mark the file in use (not clean until the next graceful close).
pub(crate) fn mark_open(region: &Region) {
    if let Some(pf) = region.file.as_ref() {
        write_header(region, &Header::for_layout(&region.layout));
        pf.active.store(true, std::sync::atomic::Ordering::Relaxed);
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
pub(crate) fn close(region: &mut Region, now: u32) -> Result<()> {
    let Some(pf) = region.file.as_ref() else { return Ok(()) };
    if pf.closed || !pf.active.load(std::sync::atomic::Ordering::Relaxed) {
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

/// An advisory exclusive lock for as long as the file is open: a second cache (in this process
/// or another) gets [`Error::Locked`].
fn lock(file: &File, path: &Path) -> Result<()> {
    // SAFETY: flock on a valid, open descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(Error::Locked { path: path.to_path_buf() })
    } else {
        Err(Error::Io { path: path.to_path_buf(), source: err })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Geometry;

    fn layout() -> Layout {
        Layout { geometry: Geometry { hash_power: 6, segment_size: 64 << 10, segments: 4 }, shards: 2 }
    }

    #[test]
    fn header_round_trips_and_detects_damage() {
        let h = Header::for_layout(&layout());
        let b = h.encode();
        assert_eq!(Header::decode(&b).unwrap(), h);
        for i in 0..HEADER_BYTES + 8 {
            let mut d = b;
            d[i] ^= 0x40;
            assert!(Header::decode(&d).is_err(), "flip at byte {i} went unnoticed");
        }
        let mut v2 = h;
        v2.version = FORMAT_VERSION + 1;
        let mut enc = v2.encode();
        assert!(Header::decode(&enc).unwrap_err().contains(&format!("version {}", FORMAT_VERSION + 1)));
        enc[..8].copy_from_slice(b"NOTACACH");
        assert!(Header::decode(&enc).unwrap_err().contains("not a segcache file"));
    }

    #[test]
    fn configuration_mismatch_is_named() {
        let a = Header::for_layout(&layout());
        let mut l = layout();
        l.shards = 4;
        assert!(a.mismatch(&Header::for_layout(&l)).unwrap().contains("shard count"));
        let mut l = layout();
        l.geometry.segment_size = 128 << 10;
        assert!(a.mismatch(&Header::for_layout(&l)).unwrap().contains("segment size"));
        assert!(a.mismatch(&a).is_none());
    }
}
