//! The configuration struct and policy enum, and opening and closing a cache.

use std::ffi::{c_char, CStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use segcache_core::{Builder, ManualClock, Policy};

use crate::args::{self, put};
use crate::error::Fail;
use crate::guard::{run, run_with};
use crate::handle::{segcache_t, MAGIC};
use crate::status::segcache_status_t;

/// Eviction policies for `segcache_config_t.eviction` (how a segment is freed when the heap is
/// full).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum segcache_policy_t {
    /// Never evict: writes fail with `SEGCACHE_NO_MEMORY` when the heap is full.
    SEGCACHE_POLICY_NONE = 0,
    /// Evict a random segment.
    SEGCACHE_POLICY_RANDOM = 1,
    /// Evict the oldest segment of a random TTL bucket.
    SEGCACHE_POLICY_RANDOM_FIFO = 2,
    /// Evict the oldest segment.
    SEGCACHE_POLICY_FIFO = 3,
    /// Evict the segment closest to expiration.
    SEGCACHE_POLICY_CTE = 4,
    /// Evict the segment with the fewest live bytes.
    SEGCACHE_POLICY_UTIL = 5,
    /// Merge neighbouring segments, keeping the most read items (the Segcache paper's; default).
    SEGCACHE_POLICY_MERGE = 6,
    /// S3-FIFO at segment granularity.
    SEGCACHE_POLICY_S3FIFO = 7,
}

const _: () = {
    assert!(segcache_policy_t::SEGCACHE_POLICY_NONE as u8 == Policy::None as u8);
    assert!(segcache_policy_t::SEGCACHE_POLICY_RANDOM_FIFO as u8 == Policy::RandomFifo as u8);
    assert!(segcache_policy_t::SEGCACHE_POLICY_MERGE as u8 == Policy::Merge as u8);
    assert!(segcache_policy_t::SEGCACHE_POLICY_S3FIFO as u8 == Policy::S3Fifo as u8);
};

/// Settings for `segcache_open`. Fill it with `segcache_config_default()` first, then change
/// the fields you need: that keeps code working when fields are added.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct segcache_config_t {
    /// Total heap bytes, rounded down to whole segments. Default 64 MiB.
    pub heap_size: usize,
    /// Bytes per segment: a power of two from 4 KiB to 4 MiB; the largest item stored as one
    /// record is a segment less its header (see `max_item_size`). Default 1 MiB.
    pub segment_size: usize,
    /// log2 of the hash buckets per shard, 4 to 32; 0 (default) sizes the table for the heap.
    pub hash_power: u8,
    /// A `segcache_policy_t` value. Default `SEGCACHE_POLICY_MERGE`.
    pub eviction: u32,
    /// Shards (independently locked parts): a power of two up to 256; 0 (default) picks from
    /// the core count.
    pub shards: u32,
    /// Persistence file for warm restart (NUL-terminated), or NULL (default) for anonymous memory.
    /// Borrowed during `segcache_open` only.
    pub path: *const c_char,
    /// When the persistence file is unusable: false (default) fails with `SEGCACHE_BAD_FILE`;
    /// true starts empty over it.
    pub reset_bad_file: bool,
    /// Reopening a gracefully closed file: false (default) checks the whole heap before
    /// `segcache_open` returns; true serves at once and checks each segment at its first use
    /// (a damaged one is then dropped with a warning on stderr instead of `SEGCACHE_BAD_FILE`).
    pub lazy_verify: bool,
    /// 0 (default): the system clock. Otherwise the cache runs on a manual clock that starts at
    /// this Unix time and moves only with `segcache_advance_clock` (for tests and simulations).
    pub manual_clock_start: u32,
    /// Share the cache between processes (default false): every process that opens the same
    /// `path` with this set reads and writes one cache, with the guarantees threads have on one
    /// handle. A handle opened before `fork()` works in the children (pre-fork servers): each
    /// child joins the file at its first call. A process killed at any instant, even inside a
    /// call, costs the others at most its write in flight. Needs `path`; not with `lazy_verify`
    /// (`SEGCACHE_INVALID_CONFIG`). Settings that differ from those of the processes using the
    /// file (sizes, shards, eviction) give `SEGCACHE_BAD_FILE`; a cache opened without this
    /// setting while they use the file gets `SEGCACHE_LOCKED`, and so does one opened with it
    /// while a single-process cache holds the file. The last process to close leaves the file
    /// clean for a warm restart. Linux only.
    pub multi_process: bool,
    /// Fault the heap and the hash table into memory before `segcache_open` returns (default
    /// false: they are faulted in as the cache fills). Then no later write waits while the
    /// kernel provides a new segment's pages (milliseconds on some virtual machines), and the
    /// resident memory is the whole heap from the start. A persistence file is read in, unchanged.
    pub prefault: bool,
    /// A persistence file made with other sizes (heap, segments, shards, hash power): false
    /// (default) fails with `SEGCACHE_BAD_FILE` and leaves it as it was; true moves its items
    /// into a heap of these sizes (values, flags and expiry kept; the newest kept when the new
    /// heap is smaller). The old file waits beside the new one as `PATH.resizing` until the move
    /// is done; a crash meanwhile restarts the move at the next open. Not with `multi_process`
    /// (`SEGCACHE_INVALID_CONFIG`).
    pub resize_file: bool,
    /// Room to grow: the most heap `segcache_set_memory_limit` may raise the limit to while the
    /// cache runs, which starts at `heap_size`. 0 (default): `heap_size`, a limit that can
    /// shrink but not grow. The heap and hash table are laid out for this size (memory is taken
    /// only as segments are first written; the hash table, sized for it, is about an eighth of
    /// it; a file is made this large). Less than `heap_size`, or with `prefault`:
    /// `SEGCACHE_INVALID_CONFIG`.
    pub max_heap_size: usize,
    /// A flash tier's file (NUL-terminated), or NULL (default) for none: eviction writes the
    /// items it gives up there, and reads of them come back from it (see `Builder::tier` in the
    /// Rust docs and docs/c.md). Borrowed during `segcache_open` only. Not the same file as
    /// `path`, and not with `multi_process` (`SEGCACHE_INVALID_CONFIG`).
    pub tier_path: *const c_char,
    /// The tier file's size in bytes: a whole number of segments, at least two per shard, split
    /// evenly over the shards (`SEGCACHE_INVALID_CONFIG` otherwise). Needs `tier_path`; 0
    /// (default) with it is `SEGCACHE_INVALID_CONFIG` too.
    pub tier_size: u64,
    /// The largest item (key and value bytes) a store accepts, up to 1 GiB; 0 (default): what
    /// one segment holds. An item larger than a segment holds is stored as chunks behind a head
    /// record and read whole (`segcache_get` copies it into the caller's buffer) or not at all;
    /// it must fit in its shard's heap less four segments (`SEGCACHE_TOO_LARGE` otherwise).
    pub max_item_size: usize,
    /// With a tier: the reads an item must have had, the read on the tier included, for a read
    /// on the tier to bring it back to memory (at the shard's next write); 0 (default): reads
    /// leave items on the tier, a write brings one back. See `Builder::tier_promote_after` in
    /// the Rust docs.
    pub tier_promote_after: u8,
    /// With a tier: the bytes of flash segment images its writer thread may hold queued, so
    /// that no eviction waits for the device (8 MiB by default); a process killed loses what
    /// waits there. 0: each eviction writes what it demoted itself, before it returns, and a
    /// kill loses at most the items of an eviction it interrupts. See
    /// `Builder::tier_write_queue` in the Rust docs.
    pub tier_write_queue: usize,
}

/// Fills `*config` with the defaults (64 MiB heap, 1 MiB segments, automatic hash size and shard
/// count, merge eviction, no persistence file, system clock, not shared between processes, not
/// prefaulted, no flash tier).
///
/// Returns `SEGCACHE_INVALID_ARGUMENT` when `config` is NULL.
/// Ownership: `config` is the caller's. Thread safety: any thread.
///
/// # Safety
/// `config` is NULL or valid for writing a `segcache_config_t`.
#[no_mangle]
pub unsafe extern "C" fn segcache_config_default(config: *mut segcache_config_t) -> segcache_status_t {
    run(|| {
        let config = args::out(config, c"config is NULL")?;
        let defaults = segcache_config_t {
            heap_size: segcache_core::DEFAULT_HEAP_SIZE as _,
            segment_size: segcache_core::DEFAULT_SEGMENT_SIZE as _,
            hash_power: 0,
            eviction: Policy::default() as u32,
            shards: 0,
            path: std::ptr::null(),
            reset_bad_file: false,
            lazy_verify: false,
            manual_clock_start: 0,
            multi_process: false,
            prefault: false,
            resize_file: false,
            max_heap_size: 0,
            tier_path: std::ptr::null(),
            tier_size: 0,
            max_item_size: 0,
            tier_promote_after: 0,
            tier_write_queue: segcache_core::DEFAULT_TIER_WRITE_QUEUE,
        };
        // SAFETY: checked non-NULL and aligned; the caller vouches it is writable.
        unsafe { put(config, defaults) };
        Ok(())
    })
}

/// The builder for `cfg`, and its manual clock if it asks for one.
///
/// # Safety
/// `cfg.path` and `cfg.tier_path` are NULL or NUL-terminated strings readable for the call.
unsafe fn builder(cfg: &segcache_config_t) -> Result<(Builder, Option<Arc<ManualClock>>), Fail> {
    let policy = u8::try_from(cfg.eviction).ok().and_then(Policy::from_u8).ok_or_else(|| {
        Fail::owned(segcache_status_t::SEGCACHE_INVALID_ARGUMENT, format!("unknown eviction policy {}", cfg.eviction))
    })?;
    let mut b = Builder::new()
        .heap_size(cfg.heap_size)
        .segment_size(cfg.segment_size)
        .eviction(policy)
        .reset_bad_file(cfg.reset_bad_file)
        .lazy_verify(cfg.lazy_verify)
        .multi_process(cfg.multi_process)
        .prefault(cfg.prefault)
        .resize_file(cfg.resize_file);
    if cfg.hash_power != 0 {
        b = b.hash_power(cfg.hash_power);
    }
    if cfg.max_heap_size != 0 {
        b = b.max_heap_size(cfg.max_heap_size);
    }
    if cfg.max_item_size != 0 {
        b = b.max_item_size(cfg.max_item_size);
    }
    if cfg.shards != 0 {
        b = b.shards(cfg.shards as usize);
    }
    // SAFETY: the caller promises `path` is NULL or NUL-terminated.
    match unsafe { path_arg(cfg.path) } {
        None => {}
        Some(Err(())) => return Err(Fail::invalid(c"config path is an empty string (use NULL for no file)")),
        Some(Ok(path)) => b = b.path(path),
    }
    // SAFETY: the caller promises `tier_path` is NULL or NUL-terminated.
    match (unsafe { path_arg(cfg.tier_path) }, cfg.tier_size) {
        (None, 0) => {}
        (None, _) => {
            return Err(Fail::new(
                segcache_status_t::SEGCACHE_INVALID_CONFIG,
                c"tier_size is set but tier_path is NULL",
            ))
        }
        (Some(_), 0) => {
            return Err(Fail::new(segcache_status_t::SEGCACHE_INVALID_CONFIG, c"tier_path is set but tier_size is 0"))
        }
        (Some(Err(())), _) => return Err(Fail::invalid(c"config tier_path is an empty string (use NULL for no tier)")),
        (Some(Ok(path)), size) => {
            b = b.tier(path, size).tier_promote_after(cfg.tier_promote_after).tier_write_queue(cfg.tier_write_queue)
        }
    }
    let clock = (cfg.manual_clock_start != 0).then(|| ManualClock::new(cfg.manual_clock_start));
    if let Some(c) = &clock {
        b = b.clock(c.clone());
    }
    Ok((b, clock))
}

/// The path a config's string field names: `None` for NULL, `Err` for an empty string.
///
/// # Safety
/// `raw` is NULL or a NUL-terminated string readable for the call.
unsafe fn path_arg(raw: *const c_char) -> Option<Result<PathBuf, ()>> {
    if raw.is_null() {
        return None;
    }
    // SAFETY: non-NULL; the caller promises a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(raw) }.to_bytes();
    Some(match bytes.is_empty() {
        true => Err(()),
        false => Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes))),
    })
}

/// Opens a cache with `*config` and stores its handle in `*out`.
///
/// On failure `*out` is set to NULL and the status says why (`SEGCACHE_INVALID_CONFIG`,
/// `SEGCACHE_IO_ERROR`, `SEGCACHE_BAD_FILE`, `SEGCACHE_LOCKED`, `SEGCACHE_MAP_FAILED`,
/// `SEGCACHE_INVALID_ARGUMENT` for NULL pointers or an unknown policy); details in
/// `segcache_last_error()`. With a persistence file that holds a cleanly closed cache of the
/// same configuration, the items come back (warm restart).
///
/// Ownership: `config`, its `path` and its `tier_path` are borrowed for the call; the caller owns the returned
/// handle and must release it with `segcache_close` exactly once.
/// Thread safety: any thread; the handle may then be used from any thread.
///
/// # Safety
/// `config` is NULL or points to a readable `segcache_config_t` whose `path` is NULL or a
/// NUL-terminated string, and so is its `tier_path`; `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn segcache_open(
    config: *const segcache_config_t,
    out: *mut *mut segcache_t,
) -> segcache_status_t {
    run(|| {
        let out = args::out(out, c"out is NULL")?;
        // SAFETY: checked non-NULL and aligned; caller vouches it is writable.
        unsafe { put(out, std::ptr::null_mut()) };
        if config.is_null() || !config.is_aligned() {
            return Err(Fail::invalid(c"config is NULL"));
        }
        // SAFETY: non-NULL and aligned; the caller promises a readable config. Copied out at once.
        let cfg = unsafe { *config };
        // SAFETY: the caller promises `path` is NULL or NUL-terminated.
        let (b, clock) = unsafe { builder(&cfg) }?;
        let cache = b.build_shared()?;
        let handle = Box::new(segcache_t { magic: MAGIC, cache, clock });
        // SAFETY: as above.
        unsafe { put(out, Box::into_raw(handle)) };
        Ok(())
    })
}

/// Closes the cache and frees the handle. With a persistence file, writes what a warm restart
/// needs and marks the file clean; a failure there is returned (`SEGCACHE_IO_ERROR`), but the
/// handle is freed in every case except `SEGCACHE_INVALID_ARGUMENT` (NULL or not a live handle).
///
/// In a `fork()` child of the process that opened the cache it frees the child's copy of the
/// handle without writing to the cache or its file (the parent's stay as they were) and returns
/// `SEGCACHE_FORKED`. A cache opened with `multi_process` is the exception: there the child
/// leaves the cache as any process does (the last one to leave closes the file cleanly).
///
/// Ownership: takes the handle; it must not be used afterwards.
/// Thread safety: call it once, after every other call on this handle has returned.
///
/// # Safety
/// `cache` is NULL or a handle from `segcache_open` that is not used by any other thread and
/// has not been closed.
#[no_mangle]
pub unsafe extern "C" fn segcache_close(cache: *mut segcache_t) -> segcache_status_t {
    run(|| {
        // SAFETY: the caller's contract; checks NULL, alignment and magic.
        unsafe { args::handle(cache) }?;
        // SAFETY: a live handle from Box::into_raw in segcache_open, owned exclusively by this
        // call per the contract. Clear the magic first so that a stale pointer is refused if its
        // memory is read before being reused.
        let mut boxed = unsafe { Box::from_raw(cache) };
        // SAFETY: writing a u64 field of a live, exclusively owned value.
        unsafe { std::ptr::write_volatile(&mut boxed.magic, 0) };
        let segcache_t { cache, .. } = *boxed;
        cache.close()?;
        Ok(())
    })
}

/// Writes the heap of a cache opened with a `path` to stable storage (`msync`, then `fsync`) and
/// returns once it is there: every store that returned before the call then survives a power
/// loss or a kernel crash, not only the death of the process (which loses nothing without it).
/// A reopen after a power loss rebuilds the index from the file, as after a crash. Stores made
/// during the call may or may not be written by it. Without a `path`: `SEGCACHE_OK`, nothing
/// to write. A failure of the disk is `SEGCACHE_IO_ERROR`, with the system's message.
/// Thread safety: any thread, while others read and write.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segcache_sync(cache: *const segcache_t) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe { run_with(cache, |h| Ok(h.cache.sync()?)) }
}

/// Moves the manual clock of a cache opened with `manual_clock_start != 0` forward by `secs`
/// seconds; items whose TTL has run out are then misses.
///
/// Returns `SEGCACHE_INVALID_ARGUMENT` when the cache runs on the system clock.
/// Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segcache_advance_clock(cache: *const segcache_t, secs: u32) -> segcache_status_t {
    // SAFETY: the caller's contract.
    unsafe {
        run_with(cache, |h| {
            let clock = h.clock.as_ref().ok_or_else(|| {
                Fail::invalid(c"cache runs on the system clock; open it with manual_clock_start != 0")
            })?;
            clock.advance(secs);
            Ok(())
        })
    }
}
