//! `Segcache`: the single-owner engine over one shard of a region: the type, its construction
//! and teardown, the clock, and CAS values.

pub(crate) mod alloc;
pub(crate) mod append;
pub(crate) mod clear;
pub(crate) mod compact;
pub(crate) mod compute;
pub(crate) mod demote;
pub(crate) mod evict;
pub(crate) mod expire;
pub(crate) mod flash;
pub(crate) mod flush;
pub(crate) mod keys;
pub(crate) mod large;
pub(crate) mod load;
pub(crate) mod memory;
pub(crate) mod migrate;
pub(crate) mod read;
pub(crate) mod recover;
pub(crate) mod removal;
pub(crate) mod rewrite;
pub(crate) mod rmw;
pub(crate) mod shared_rewrite;
pub(crate) mod slots;
pub(crate) mod stats;
pub(crate) mod undo;
pub(crate) mod verify;
pub(crate) mod warm;
pub(crate) mod write;

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

use crate::builder::Builder;
use crate::clock::{system_now, Clock};
use crate::error::Result;
use crate::eviction::ghost::Ghost;
use crate::eviction::policy::Policy;
use crate::fork::Origin;
use crate::hashtable::bucket::Bucket;
use crate::hashtable::table::Table;
use crate::layout::Geometry;
use crate::persist::file::Found;
use crate::persist::region::ShardMem;
use crate::record::{self};

/// The engine: one shard's segments, hash table and TTL buckets. Writes take `&mut self`; reads
/// take `&self` and may run in parallel (the frequency counters they bump are atomic).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::Segcache;
///
/// let mut cache = Segcache::builder().heap_size(4 << 20).build()?;
/// cache.set(b"user:42", b"alice", 7, Duration::from_secs(60))?; // writes take `&mut self`
/// let item = cache.get(b"user:42").unwrap(); // reads take `&self` and copy nothing
/// assert_eq!((item.value(), item.flags()), (&b"alice"[..], 7));
/// # Ok::<(), segcache_core::Error>(())
/// ```
pub struct Segcache {
    pub(crate) mem: ShardMem,
    pub(crate) geo: Geometry,
    pub(crate) clock: Arc<dyn Clock>,
    /// `clock` is `SystemClock`, which `now` then calls directly, not through the trait object.
    pub(crate) system_clock: bool,
    pub(crate) policy: Policy,
    /// The shard's hash table: its buckets (primary, then the overflow pool) and the tag summary
    /// of each chain, in the region so that processes sharing the cache share them (the summary
    /// is rebuilt by the first process to open a file).
    pub(crate) table: Table<'static>,
    /// S3-FIFO's ghost of keys recently dropped from the small pool.
    pub(crate) ghost: Ghost,
    /// Holds an old value while its item is rewritten (append, incr, touch), since the rewrite
    /// may evict the segment it came from.
    pub(crate) scratch: Vec<u8>,
    /// File-backed: records carry the checksums that crash recovery checks. Anonymous memory
    /// does not outlive the process, so it skips them.
    pub(crate) durable: bool,
    /// `Builder::multi_process`: the shard's read lock is a mutex between processes, so what
    /// runs under it runs one at a time (see `rewrites_shared`).
    pub(crate) exclusive_reads: bool,
    /// After a lazily verified reopen (`Builder::lazy_verify`), each segment's check state
    /// (unchecked, good, bad: see `recover`) until every segment is checked: a read checks the
    /// segment it touches, the first write checks all the others. `None` otherwise.
    pub(crate) unchecked: Option<Box<[std::sync::atomic::AtomicU8]>>,
    /// The process that opened the cache (see `fork`).
    pub(crate) origin: Origin,
    /// The shard count and this shard's index: CAS values interleave the shards' counters
    /// (`cas_token`), so that two keys never share one.
    pub(crate) cas_stride: u64,
    pub(crate) cas_offset: u64,
    /// `Builder::pad_numbers`.
    pub(crate) pad_numbers: bool,
    /// Told of items that leave: expired, evicted, removed, replaced (`Builder::eviction_listener`).
    pub(crate) listener: Option<crate::listener::RemovalListener>,
    /// Segments dropped as corrupt since the open: by crash recovery, or by the checks of a
    /// lazily verified reopen.
    pub(crate) dropped_segments: u64,
    /// The next TTL chain whose head the expiry of writes looks at; `ttl::BUCKETS` once this
    /// second's pass is done (see `expire_step`).
    pub(crate) expiry_pass: usize,
    /// Writes to let pass before the expiry of writes frees another segment.
    pub(crate) expiry_wait: u64,
    /// The flash tier where evicted segments' items go (`Builder::tier`), if there is one.
    pub(crate) tier: Option<Box<crate::tier::Tier>>,
    /// Flash slots a crash rebuild set aside, each with its chain: a heap item of the same tag
    /// shares the chain, and only the tier (not yet attached then) can tell whether it is the
    /// same key (see `restore_flash_slots`).
    pub(crate) doubtful_flash: Vec<(u64, u64)>,
    /// Items larger than a segment holds: the largest allowed, and the values a `&self` read
    /// assembled (see `engine::large`).
    pub(crate) large: crate::large::Large,
}

// SAFETY: the raw pointers in `mem` point into the region that `mem` keeps alive; all mutation
// goes through `&mut self`, except to atomics and `rewrite_shared`'s (see there).
unsafe impl Send for Segcache {}
// SAFETY: as above.
unsafe impl Sync for Segcache {}

impl Drop for Segcache {
    /// A file-backed engine takes its segments' checksums for the next open (the region, once
    /// its last engine is gone, then seals the file: see `persist::close`).
    fn drop(&mut self) {
        let sealing = self
            .mem
            .region
            .file
            .as_ref()
            .is_some_and(|f| f.active.load(Relaxed) && f.sharing.as_ref().is_none_or(|s| s.is_last()));
        if self.origin.forked() {
            return;
        }
        // What evictions demoted into the image still open goes to the file, for the next open.
        if self.durable {
            self.close_image();
        }
        if sealing {
            self.seal_for_close();
        }
    }
}

impl std::fmt::Debug for Segcache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segcache").field("geometry", &self.geo).field("policy", &self.policy).finish_non_exhaustive()
    }
}

/// The settings an engine runs with (the `Builder`'s that concern one shard).
pub(crate) struct EngineSettings {
    pub(crate) policy: Policy,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) pad_numbers: bool,
    pub(crate) listener: Option<crate::listener::RemovalListener>,
    pub(crate) multi_process: bool,
    /// `Builder::max_item_size`.
    pub(crate) max_item_size: Option<usize>,
}

/// The CAS value a read hands out for a record's counter `c`, in shard `offset` of `stride`:
/// the shards' counters interleaved, so that no two keys share a value, counting up from 1.
#[inline]
pub(crate) fn cas_token(stride: u64, offset: u64, c: u32) -> u64 {
    u64::from(c) * stride + offset + 1
}

impl Segcache {
    /// A [`Builder`] with every setting at its default.
    ///
    /// ```
    /// use segcache_core::Segcache;
    /// let cache = Segcache::builder().heap_size(4 << 20).build()?;
    /// assert!(cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// An engine over `mem`; `fresh` lays out empty structures, otherwise they are used as found
    /// (a reopened file, already validated or rebuilt).
    pub(crate) fn from_mem(mem: ShardMem, geo: Geometry, settings: &EngineSettings, found: Found) -> Segcache {
        let n = geo.primary_buckets() + geo.overflow_buckets();
        // SAFETY: `mem.buckets` points at `n` buckets inside the region that `mem` keeps alive
        // for as long as this engine exists; buckets are atomics, so shared references are sound.
        let buckets: &'static [Bucket] = unsafe { std::slice::from_raw_parts(mem.buckets, n) };
        // SAFETY: as for the buckets: `mem.summary` points at one atomic byte per primary bucket.
        let summary: &'static [AtomicU8] = unsafe { std::slice::from_raw_parts(mem.summary, geo.primary_buckets()) };
        let ghost_len = if settings.policy == Policy::S3Fifo { geo.ghost_entries() } else { 0 };
        // SAFETY: as for the buckets: `mem.ghost` points at `ghost_entries` atomic words.
        let ghost = Ghost::new(unsafe { std::slice::from_raw_parts(mem.ghost, ghost_len) });
        let durable = mem.region.file.is_some();
        let origin = mem.region.origin.clone();
        let (cas_stride, cas_offset) = (mem.region.layout.shards as u64, mem.index as u64);
        let mut engine = Segcache {
            durable,
            exclusive_reads: settings.multi_process,
            unchecked: None,
            cas_stride,
            cas_offset,
            mem,
            geo,
            clock: settings.clock.clone(),
            system_clock: settings.clock.is_system(),
            policy: settings.policy,
            pad_numbers: settings.pad_numbers,
            listener: settings.listener.clone(),
            dropped_segments: 0,
            expiry_pass: crate::ttl_buckets::ttl::BUCKETS,
            expiry_wait: 0,
            tier: None,
            doubtful_flash: Vec::new(),
            large: crate::large::Large::new(settings.max_item_size),
            table: Table::new(buckets, summary, geo.primary_buckets()),
            ghost,
            scratch: Vec::new(),
            origin,
        };
        // Metadata found in a file is left untouched until it is verified or rebuilt; a file that
        // other processes use is live.
        match found {
            Found::Fresh => engine.reset(true),
            Found::Clean | Found::Crashed => engine.table().rebuild_summary(),
            Found::Joined => {}
        }
        engine
    }

    /// [`Error::Forked`](crate::Error::Forked) when this process is a `fork()` child of the one
    /// that opened the cache: there, reads miss and every write fails with that error.
    ///
    /// ```
    /// use segcache_core::Segcache;
    /// let cache = Segcache::builder().heap_size(4 << 20).build()?;
    /// assert!(cache.check_fork().is_ok()); // this process opened it
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    #[inline]
    pub fn check_fork(&self) -> Result<()> {
        self.origin.check()
    }

    /// The cache clock, Unix seconds. Never earlier than the last expiry run (which every
    /// second's first write starts): a clock that steps back does not bring back what expired or
    /// was flushed.
    ///
    /// ```
    /// use segcache_core::{Builder, ManualClock};
    /// let clock = ManualClock::new(1_000);
    /// let cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// clock.advance(5);
    /// assert_eq!(cache.now(), 1_005);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn now(&self) -> u32 {
        let now = if self.system_clock { system_now() } else { self.clock.now() };
        now.max(self.meta().last_expire)
    }

    /// Takes the shard's next CAS counter, for an item being stored or modified. The counter is
    /// 32 bits, stored in the record (mostly as 2 bytes above its segment's base: see
    /// `record::CasForm`), and wraps after 2^32 modifications in a shard: only then
    /// can a value come back (a `cas` holding a token that old could match again).
    #[inline]
    pub(crate) fn next_cas(&self) -> u32 {
        self.meta().next_cas.fetch_add(1, Relaxed)
    }

    /// `next_cas` for a writer that holds the engine exclusively: no locked instruction.
    #[inline]
    pub(crate) fn next_cas_mut(&mut self) -> u32 {
        let c = self.meta_mut().next_cas.get_mut();
        let cas = *c;
        *c = cas.wrapping_add(1);
        cas
    }

    /// The CAS value clients see for a record's counter `c` (see `cas_token`).
    #[inline]
    pub(crate) fn cas_of(&self, c: u32) -> u64 {
        cas_token(self.cas_stride, self.cas_offset, c)
    }

    /// Largest item (key + value) a store accepts: [`Builder::max_item_size`] when set above what
    /// a segment holds, else what fits in a segment whatever its client flags. (An item with
    /// small or no flags has a shorter header, so a few bytes more may fit a segment;
    /// [`crate::Error::TooLarge`] reports this bound.) An item larger than a segment holds must
    /// also fit in its shard's heap less four segments.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(1 << 20).segment_size(64 << 10).build()?;
    /// let max = cache.max_item_size();
    /// cache.set(b"k", &vec![0; max - 1], u32::MAX, Duration::ZERO)?; // key and value: `max` bytes
    /// let over = cache.set(b"k", &vec![0; max + 64], 0, Duration::ZERO);
    /// assert!(matches!(over, Err(Error::TooLarge { .. })));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn max_item_size(&self) -> usize {
        self.segment_item_size().max(self.large_max())
    }

    /// The largest item that fits in one segment whatever its client flags.
    #[inline]
    pub(crate) fn segment_item_size(&self) -> usize {
        (self.geo.segment_size - record::MAX_HEADER_LEN - 4).min(record::MAX_VALUE_LEN)
    }

    /// Writes the heap to stable storage and returns once it is there (`msync`, then `fsync`):
    /// for a file-backed cache that must survive a power loss or a kernel crash, not only the
    /// death of the process (which loses nothing without it). Every store that returned before
    /// the call is then on disk; a reopen after a power loss rebuilds the index from the file,
    /// as after `kill -9`. Stores made during or after the call may or may not be there. A
    /// cache without a file has nothing to write: `Ok`. With a [tier](crate::Builder::tier),
    /// the images its writer holds queued are written and the tier file synced too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-sync", std::process::id()));
    /// let mut cache = Builder::new().heap_size(4 << 20).path(&path).build()?;
    /// cache.set(b"order:17", b"paid", 0, Duration::ZERO)?;
    /// cache.sync()?; // on disk now, whatever happens to the machine
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        self.sync_tier()?;
        crate::persist::file::sync(&self.mem.region)
    }

    /// Graceful stop: with a persistence path, writes what a warm restart needs and marks the
    /// file clean. Dropping the engine does the same but cannot report an error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-close", std::process::id()));
    /// let mut cache = Builder::new().heap_size(4 << 20).path(&path).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.close()?;
    /// let cache = Builder::new().heap_size(4 << 20).path(&path).build()?;
    /// assert_eq!(cache.get(b"k").unwrap().value(), b"v");
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn close(self) -> Result<()> {
        self.origin.check()?;
        let region = std::sync::Arc::clone(&self.mem.region);
        let now = self.now();
        drop(self);
        crate::persist::file::close_last(region, now)
    }
}

/// Runs test `name` of this test binary again in a child process, with `env` set to `value`,
/// and asserts that it succeeded: for tests whose child ends without closing its cache, as a
/// killed process would.
#[cfg(test)]
pub(crate) fn run_child_test(name: &str, env: &str, value: &str) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact"])
        .env(env, value)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{name} in a child process: {status}");
}
