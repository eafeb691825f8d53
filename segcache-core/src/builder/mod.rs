//! `Builder`: every setting of the engine, checked once, in one place; `open` builds what it
//! describes.

mod open;

use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::eviction::policy::Policy;
use crate::listener::{RemovalCause, RemovalListener};

/// The bytes of flash segment images the tier's writer holds queued unless
/// [`Builder::tier_write_queue`] says otherwise.
///
/// ```
/// assert_eq!(segcache_core::DEFAULT_TIER_WRITE_QUEUE, 8 << 20);
/// ```
pub const DEFAULT_TIER_WRITE_QUEUE: usize = 8 << 20;
/// `tier_promote_after` unless set.
const DEFAULT_TIER_PROMOTE_AFTER: u8 = 0;

/// Smallest segment size. Slots address bytes within a segment with 22 bits.
///
/// ```
/// use segcache_core::{Builder, MIN_SEGMENT_SIZE};
/// assert!(Builder::new().heap_size(1 << 20).segment_size(MIN_SEGMENT_SIZE).build().is_ok());
/// assert!(Builder::new().heap_size(1 << 20).segment_size(MIN_SEGMENT_SIZE / 2).build().is_err());
/// ```
pub const MIN_SEGMENT_SIZE: usize = 4 << 10;
/// Largest segment size (and so, less a header, the largest item stored as one record: see
/// [`Builder::max_item_size`] for larger ones).
///
/// ```
/// use segcache_core::{Builder, MAX_SEGMENT_SIZE};
/// let cache = Builder::new().heap_size(8 << 20).segment_size(MAX_SEGMENT_SIZE).build()?;
/// assert!(cache.max_item_size() < MAX_SEGMENT_SIZE);
/// assert!(Builder::new().heap_size(32 << 20).segment_size(MAX_SEGMENT_SIZE * 2).build().is_err());
/// # Ok::<(), segcache_core::Error>(())
/// ```
pub const MAX_SEGMENT_SIZE: usize = 4 << 20;
/// The largest [`Builder::max_item_size`]: 1 GiB, memcached's largest `-I`.
///
/// ```
/// use segcache_core::{Builder, MAX_ITEM_SIZE};
/// assert!(Builder::new().max_item_size(MAX_ITEM_SIZE).build().is_ok());
/// assert!(Builder::new().max_item_size(MAX_ITEM_SIZE + 1).build().is_err());
/// ```
pub const MAX_ITEM_SIZE: usize = 1 << 30;
/// Heap size of `Builder::new()`.
///
/// ```
/// use segcache_core::{Builder, DEFAULT_HEAP_SIZE};
/// let cache = Builder::new().build()?;
/// assert_eq!(cache.stats().heap_bytes, DEFAULT_HEAP_SIZE as u64);
/// # Ok::<(), segcache_core::Error>(())
/// ```
pub const DEFAULT_HEAP_SIZE: usize = 64 << 20;
/// Segment size of `Builder::new()`.
///
/// ```
/// use segcache_core::{Builder, DEFAULT_SEGMENT_SIZE};
/// let cache = Builder::new().heap_size(4 << 20).build()?;
/// assert_eq!(cache.stats().segment_size, DEFAULT_SEGMENT_SIZE as u64);
/// # Ok::<(), segcache_core::Error>(())
/// ```
pub const DEFAULT_SEGMENT_SIZE: usize = 1 << 20;
/// Fewest segments a shard gets by default. Each shard holds about one to two segments that keep
/// no items (the unfilled part of its open segment, segments freed by a merge and not yet
/// written, and with a file, Merge's spare): with 8 segments per shard that was a quarter of the
/// memory (64 MiB over 8 shards, spare included: 66% of the heap live, hit ratio 0.870 on the
/// Zipf bench, against 0.883 with 4 shards of 16 and 0.891 unsharded). Fewer shards mean more
/// lock sharing between threads, so this only lowers the count for small heaps (at 1 MiB
/// segments: below 16 MiB per shard).
pub const MIN_SHARD_SEGMENTS: usize = 16;

/// Builds a [`crate::Segcache`] (single owner) or a [`crate::SharedCache`] (thread-safe).
///
/// ```
/// use segcache_core::{Builder, Policy};
/// let cache = Builder::new().heap_size(16 << 20).segment_size(1 << 20).eviction(Policy::Merge).build_shared()?;
/// cache.set(b"k", b"v", 0, std::time::Duration::ZERO)?;
/// assert_eq!(cache.get(b"k").unwrap().value, b"v");
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    pub(crate) heap_size: usize,
    pub(crate) max_heap_size: Option<usize>,
    pub(crate) segment_size: usize,
    pub(crate) hash_power: Option<u8>,
    pub(crate) policy: Policy,
    pub(crate) shards: Option<usize>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) path: Option<PathBuf>,
    pub(crate) reset_bad_file: bool,
    pub(crate) lazy_verify: bool,
    pub(crate) pad_numbers: bool,
    pub(crate) listener: Option<RemovalListener>,
    pub(crate) multi_process: bool,
    pub(crate) prefault: bool,
    pub(crate) touch_ahead: bool,
    pub(crate) resize_file: bool,
    /// The flash tier's file and its size in bytes (`tier`).
    pub(crate) tier: Option<(PathBuf, u64)>,
    /// Bytes of images the tier's writer may hold queued (`tier_write_queue`).
    pub(crate) tier_write_queue: usize,
    /// `tier_promote_after`.
    pub(crate) tier_promote_after: u8,
    /// `max_item_size`: the largest item's key and value, in bytes; `None` for what one segment
    /// holds.
    pub(crate) max_item_size: Option<usize>,
    /// The cache is opened only for its items to move out (`resize_file`): its heap file and tier
    /// file keep their shared identity, so that a crash while it opens leaves the pair as it was.
    pub(crate) moving_out: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// Defaults: 64 MiB heap, 1 MiB segments, hash table sized for the heap, `Merge` eviction,
    /// shards chosen from the core count, the system clock, anonymous memory.
    ///
    /// ```
    /// use segcache_core::{Builder, Policy, DEFAULT_HEAP_SIZE};
    /// let cache = Builder::new().build()?;
    /// let stats = cache.stats();
    /// assert_eq!((stats.heap_bytes, stats.policy), (DEFAULT_HEAP_SIZE as u64, Policy::Merge));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn new() -> Self {
        Builder {
            heap_size: DEFAULT_HEAP_SIZE,
            max_heap_size: None,
            segment_size: DEFAULT_SEGMENT_SIZE,
            hash_power: None,
            policy: Policy::default(),
            shards: None,
            resize_file: false,
            clock: Arc::new(SystemClock),
            path: None,
            reset_bad_file: false,
            lazy_verify: false,
            pad_numbers: false,
            listener: None,
            multi_process: false,
            prefault: false,
            touch_ahead: false,
            tier: None,
            tier_write_queue: DEFAULT_TIER_WRITE_QUEUE,
            tier_promote_after: DEFAULT_TIER_PROMOTE_AFTER,
            max_item_size: None,
            moving_out: false,
        }
    }
    /// Total heap bytes, rounded down to whole segments (of every shard).
    ///
    /// ```
    /// use segcache_core::Builder;
    /// // 10 MiB in segments of 4 MiB: two whole segments.
    /// let cache = Builder::new().heap_size(10 << 20).segment_size(4 << 20).build()?;
    /// assert_eq!(cache.stats().heap_bytes, 8 << 20);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn heap_size(mut self, bytes: usize) -> Self {
        self.heap_size = bytes;
        self
    }

    /// Room to grow: the most heap a later [`set_memory_limit`](crate::SharedCache::set_memory_limit)
    /// may give the cache, which starts with `heap_size`. The segments and the hash table are
    /// laid out for this size at build, so the limit moves up and down while the cache runs and
    /// keeps every item; a segment takes memory only once it is first written, so the room above
    /// the limit costs address space (and, in a file, file space) and a hash table sized for
    /// it, not the heap's memory. A file is made, and reopens, with this size. Default:
    /// `heap_size`, a limit that can shrink but not grow. Not with [`prefault`](Self::prefault),
    /// which writes the whole heap at build.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(4 << 20).max_heap_size(16 << 20).segment_size(64 << 10).build_shared()?;
    /// assert_eq!(cache.memory_limit(), 4 << 20);
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.set_memory_limit(16 << 20)?; // online, the items kept
    /// assert_eq!(cache.memory_limit(), 16 << 20);
    /// assert_eq!(cache.get(b"k").unwrap().value, b"v");
    /// assert!(cache.set_memory_limit(32 << 20).is_err()); // past the room laid out
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn max_heap_size(mut self, bytes: usize) -> Self {
        self.max_heap_size = Some(bytes);
        self
    }

    /// The heap the layout holds: `max_heap_size`, else `heap_size`.
    pub(crate) fn laid_heap_size(&self) -> usize {
        self.max_heap_size.unwrap_or(self.heap_size).max(self.heap_size)
    }
    /// Bytes per segment: a power of two from 4 KiB to 4 MiB. The largest item is a segment less
    /// its header.
    ///
    /// ```
    /// use segcache_core::{Builder, Error};
    /// let cache = Builder::new().heap_size(4 << 20).segment_size(64 << 10).build()?;
    /// assert_eq!(cache.stats().segment_size, 64 << 10);
    /// assert!(cache.max_item_size() < 64 << 10);
    /// let odd = Builder::new().segment_size(3000).build();
    /// assert!(matches!(odd, Err(Error::InvalidConfig(_))));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn segment_size(mut self, bytes: usize) -> Self {
        self.segment_size = bytes;
        self
    }

    /// The largest item (key and value bytes) a store accepts, up to [`MAX_ITEM_SIZE`] (1 GiB,
    /// memcached's largest `-I`). Unset, it is what one segment holds. An item larger than a
    /// segment holds is stored as chunks, each a record of its own, behind a head record under
    /// the key (see [`Segcache::max_item_size`](crate::Segcache::max_item_size)); it must fit in
    /// its shard's heap, less four segments. Items that fit a segment are stored and read as without it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(64 << 20).segment_size(1 << 20).max_item_size(8 << 20).build()?;
    /// let big = vec![7u8; 5 << 20]; // five segments' worth
    /// cache.set(b"big", &big, 0, Duration::ZERO)?;
    /// assert_eq!(cache.get(b"big").unwrap().value(), &big[..]);
    /// assert!(Builder::new().max_item_size((1 << 30) + 1).build().is_err());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn max_item_size(mut self, bytes: usize) -> Self {
        self.max_item_size = Some(bytes);
        self
    }
    /// log2 of the number of primary hash buckets (7 items each), per shard. By default it is
    /// chosen so that the table holds the heap's worth of ~100-byte items at about 80% load.
    ///
    /// ```
    /// use segcache_core::Builder;
    /// let cache = Builder::new().heap_size(4 << 20).hash_power(10).build()?;
    /// assert_eq!(cache.scan_len(), 1 << 10); // the primary buckets
    /// assert!(Builder::new().hash_power(40).build().is_err());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn hash_power(mut self, power: u8) -> Self {
        self.hash_power = Some(power);
        self
    }
    /// How a full heap makes room (see [`Policy`]); `Merge` by default.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Policy};
    ///
    /// let mut cache = Builder::new().heap_size(1 << 20).segment_size(64 << 10).eviction(Policy::Fifo).build()?;
    /// for i in 0..10_000 {
    ///     cache.set(format!("key{i}").as_bytes(), &[0; 100], 0, Duration::ZERO)?;
    /// }
    /// assert!(cache.stats().evicted_segments > 0);
    /// assert!(cache.get(b"key9999").is_some()); // FIFO keeps the newest
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn eviction(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }
    /// Shards of a [`crate::SharedCache`]: a power of two. Ignored by [`Builder::build`].
    ///
    /// ```
    /// use segcache_core::Builder;
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(4).build_shared()?;
    /// assert_eq!(cache.shard_count(), 4);
    /// assert!(Builder::new().shards(3).build_shared().is_err());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }
    /// The time source for TTLs and expiry: the system clock by default, a [`crate::ManualClock`]
    /// in tests.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// cache.set(b"k", b"v", 0, Duration::from_secs(30))?;
    /// clock.advance(20);
    /// assert_eq!(cache.now(), 1_020);
    /// assert!(cache.get(b"k").unwrap().ttl().unwrap() <= Duration::from_secs(10));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Keep the heap and its index in this file (warm restart). Without it the heap is anonymous.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-path", std::process::id()));
    /// let cache = Builder::new().heap_size(4 << 20).path(&path).build_shared()?;
    /// cache.set(b"k", b"kept", 0, Duration::ZERO)?;
    /// cache.close()?;
    ///
    /// // Another process, or this one later: the items are back.
    /// let cache = Builder::new().heap_size(4 << 20).path(&path).build_shared()?;
    /// assert_eq!(cache.get(b"k").unwrap().value, b"kept");
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }
    /// When the persistence file is unusable (corrupt, foreign, other configuration): `false`
    /// (default) fails with [`Error::BadFile`]; `true` starts empty over it, with a warning on
    /// stderr.
    ///
    /// ```
    /// use segcache_core::{Builder, Error};
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-reset", std::process::id()));
    /// std::fs::write(&path, b"not a cache file").unwrap();
    /// let refused = Builder::new().heap_size(4 << 20).path(&path).build();
    /// assert!(matches!(refused, Err(Error::BadFile { .. })));
    ///
    /// let cache = Builder::new().heap_size(4 << 20).path(&path).reset_bad_file(true).build()?;
    /// assert!(cache.is_empty());
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn reset_bad_file(mut self, reset: bool) -> Self {
        self.reset_bad_file = reset;
        self
    }

    /// Share the cache file between processes (default `false`): any number of processes that
    /// open the same [`Builder::path`] with `build_shared` read and write one cache, with the
    /// guarantees threads have on one [`SharedCache`](crate::SharedCache). Pre-fork servers
    /// (gunicorn, uWSGI, php-fpm, `multiprocessing` pools) keep one copy of the cache instead of
    /// one per worker.
    ///
    /// - Every lock, sequence number, counter, tag summary and S3-FIFO ghost lives in the mapping. A process
    ///   killed at any instant, even holding a shard's lock, costs the others at most its
    ///   write in flight: the next process to take that lock rebuilds the shard from its
    ///   segments (a warning on stderr), and nobody waits on the dead process.
    /// - A handle opened before `fork()` works in the children: each joins the file as a
    ///   process of its own at its first use (or at [`SharedCache::check_fork`](crate::SharedCache::check_fork)).
    /// - The first process to open the file verifies it (or rebuilds it after a crash), as a
    ///   single process would; the last to close it closes it cleanly, for a warm restart. A
    ///   process whose settings differ from those of the processes using the file (layout,
    ///   policy, `pad_numbers`) gets [`Error::BadFile`](crate::Error::BadFile), and a cache
    ///   opened without this setting [`Error::Locked`](crate::Error::Locked) while they use it.
    /// - Readers that need a shard's lock (values over 512 bytes, `get_many`) take it
    ///   exclusively; smaller reads take no lock, as with threads. Needs a `path`; not with
    ///   `lazy_verify`. Linux only.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-multi", std::process::id()));
    /// let builder = Builder::new().heap_size(8 << 20).path(&path).multi_process(true);
    /// let a = builder.clone().build_shared()?; // as two processes would
    /// let b = builder.build_shared()?;
    /// a.set(b"k", b"v", 0, Duration::ZERO)?;
    /// assert_eq!(b.get(b"k").unwrap().value, b"v");
    /// drop((a, b)); // the last to close leaves the file clean
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn multi_process(mut self, shared: bool) -> Self {
        self.multi_process = shared;
        self
    }

    /// Reopening a gracefully closed file: `false` (default) checks every segment against its
    /// checksum before the open returns, so that any damage fails the open with
    /// [`Error::BadFile`] (or starts empty, with [`Builder::reset_bad_file`]). `true` checks only
    /// the header and the metadata (hash table, segment headers) at open, so the cache serves
    /// at once; a segment is checked when it is first read, and a shard checks the rest at its
    /// first write, at `expire` or at close. A segment found damaged then is dropped with its
    /// items (they read as misses) and a warning on stderr: no wrong value is served either way.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-lazy", std::process::id()));
    /// let builder = Builder::new().heap_size(4 << 20).path(&path);
    /// let cache = builder.clone().build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.close()?;
    ///
    /// let cache = builder.lazy_verify(true).build_shared()?; // serves at once
    /// assert_eq!(cache.get(b"k").unwrap().value, b"v");
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn lazy_verify(mut self, lazy: bool) -> Self {
        self.lazy_verify = lazy;
        self
    }

    /// Whether the build faults the heap and the hash table's buckets into memory before it
    /// returns, as memcached's `-L` preallocates its memory. Off (default), pages are faulted in
    /// as the log first reaches them: a write that opens a segment never used before waits for
    /// the kernel to zero it (a 2 MiB huge page at a time), and on a virtual machine for the host
    /// to back it, which can take milliseconds. On, the build takes that time up front and the
    /// resident memory is the whole heap from the start. A file-backed heap is read in (its
    /// contents are untouched). Where the kernel cannot populate a range at once (before Linux
    /// 5.14), each page is touched instead. Between the two, [`crate::SharedCache::touch_ahead`]
    /// faults in, from a thread of the caller's, only the segments the writers take next.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).prefault(true).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?; // no page fault on the heap
    /// assert_eq!(cache.get(b"k").unwrap().value, b"v");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn prefault(mut self, prefault: bool) -> Self {
        self.prefault = prefault;
        self
    }

    /// Whether [`build_shared`](Builder::build_shared) starts a thread that faults the heap in a
    /// little ahead of the writers (off by default): it runs
    /// [`SharedCache::touch_ahead`](crate::SharedCache::touch_ahead) for two segments per shard
    /// that holds items, at idle priority (`SCHED_IDLE` on Linux: only on a core that nothing else
    /// wants), sleeping while the writers take nothing new. Then no write but a shard's first
    /// waits for a new segment's pages, and the memory still grows with the items, unlike
    /// `prefault`: a new cache faults nothing in. A file reopened warm has its written shards'
    /// next segments faulted in before the build returns. The thread (named `segcache-ahead`)
    /// ends by itself once every segment has been used once, and with the cache; a `fork()`
    /// child does not have it. With `prefault`, or where the kernel cannot populate memory
    /// (before Linux 5.14), none starts. No effect on [`build`](Builder::build).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).touch_ahead(true).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?; // its segment was faulted in ahead
    /// assert_eq!(cache.get(b"k").unwrap().value, b"v");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn touch_ahead(mut self, on: bool) -> Self {
        self.touch_ahead = on;
        self
    }

    /// Whether a file made with other sizes (heap, segments, shards or hash power) is reopened
    /// with this builder's by moving its items into a new heap (off by default: such a file is
    /// refused with [`Error::BadFile`](crate::Error::BadFile)). The items keep their values,
    /// client flags and expiry, and take new CAS values, above any the old cache handed out; a
    /// smaller heap keeps the newest. Until the move is done the old file waits beside the new
    /// one, as `PATH.resizing`: a crash meanwhile leaves it there, and the next open with this
    /// option starts the move again from it. Needs the disk room of both files for that time.
    /// Not with [`multi_process`](Builder::multi_process): every process sharing a file uses
    /// its sizes.
    ///
    /// With a [`tier`](Builder::tier), the items on flash move too (the oldest first, read and
    /// checked as reads check them), and a tier file of another size is a reason to move as a
    /// heap file of other sizes is: the new heap's eviction demotes into a new tier file, and a
    /// smaller pair keeps the newest. The old tier file waits aside as `TIER.resizing` with the
    /// heap's, and a crash at any point leaves the old pair or the new one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-resize-{}.seg", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// let cache = Builder::new().heap_size(4 << 20).segment_size(64 << 10).path(&path).build_shared()?;
    /// cache.set(b"k", b"v", 7, Duration::from_secs(600))?;
    /// drop(cache);
    /// let bigger = Builder::new().heap_size(16 << 20).segment_size(64 << 10).path(&path);
    /// assert!(bigger.clone().build_shared().is_err()); // other sizes: refused
    /// let cache = bigger.resize_file(true).build_shared()?;
    /// let item = cache.get(b"k").unwrap();
    /// assert_eq!((&item.value[..], item.flags), (&b"v"[..], 7));
    /// assert_eq!(cache.stats().heap_bytes, 16 << 20);
    /// # drop(cache);
    /// # std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn resize_file(mut self, resize: bool) -> Self {
        self.resize_file = resize;
        self
    }

    /// Whether `incr`/`decr` keep a number that got shorter at the old value's length, padded
    /// with trailing spaces, as memcached does when it writes the result in place (`"10"`
    /// decremented reads back as `"9 "`). Off by default: the value is exactly the number. The
    /// server turns it on, so that its clients see memcached's bytes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut padded = Builder::new().heap_size(4 << 20).pad_numbers(true).build()?;
    /// padded.set(b"n", b"10", 0, Duration::ZERO)?;
    /// assert_eq!(padded.decr(b"n", 1)?, 9);
    /// assert_eq!(padded.get(b"n").unwrap().value(), b"9 ");
    ///
    /// let mut exact = Builder::new().heap_size(4 << 20).build()?;
    /// exact.set(b"n", b"10", 0, Duration::ZERO)?;
    /// exact.decr(b"n", 1)?;
    /// assert_eq!(exact.get(b"n").unwrap().value(), b"9");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn pad_numbers(mut self, pad: bool) -> Self {
        self.pad_numbers = pad;
        self
    }

    /// A flash tier: a file at `path` of `bytes` (a whole number of segments, at least two per
    /// shard), cut into flash segments. A segment that eviction frees has its live items written
    /// there, whole, instead of dropped; their slots stay in the hash table and point to flash, and
    /// a read of one reads and checks just that item (a read that fails its check is a miss). When
    /// the tier is full its oldest segment is reclaimed. Every eviction policy feeds it: those
    /// that clear a whole segment (`Fifo`, `Random`, `RandomFifo`, `Cte`, `Util`) write all its
    /// live items, `Merge` and `S3Fifo` the items a merge or promotion does not keep in DRAM.
    /// A policy chooses what stays in DRAM as it would without a tier.
    ///
    /// Reads of flash items take the shard's lock (a [`SharedCache`](crate::SharedCache) reads
    /// DRAM items without it). A write to a key on flash (`set`, `add`, `cas`, `append`,
    /// `delete`, ...) first brings its item back to DRAM, so it sees the item as if it had never
    /// left. Each flash segment is written whole, once, with one positioned write, by a thread
    /// of the tier's own, so that no eviction waits for the device (see
    /// [`tier_write_queue`](Self::tier_write_queue)); an item is read with one positioned read
    /// of the blocks that hold it, and checked against an XXH3 checksum that covers its
    /// segment's generation and place: a torn, stale or corrupt entry is a miss (counted in
    /// `flash_bad_reads`), never a wrong value.
    ///
    /// With a persistent heap ([`Builder::path`]), the tier comes back warm: the file starts with
    /// a metadata area (each flash segment's generation, place in the ring and bytes written,
    /// updated as segments are written and reclaimed, so it is `bytes` plus a few blocks long),
    /// and a reopen of the same heap file with the same tier file and sizes, after a graceful
    /// close or a crash of the process, keeps the items on flash. A tier file written beside
    /// another heap file (or another state of this one), of other sizes, or whose metadata does
    /// not check, starts cold: its items are dropped, never misread (one of other sizes is said
    /// so on stderr; [`resize_file`](Builder::resize_file) moves its items instead). Without `path` every open
    /// starts it cold. The file must not be the heap's `path`.
    /// Not with `multi_process`. The figures `flash_items`, `flash_demoted`, `flash_hits`,
    /// `flash_bad_reads`, `flash_reclaimed_segments` and `flash_demotions_dropped` of
    /// [`Stats`](crate::Stats) tell how it is used.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Policy};
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-tier", std::process::id()));
    /// let mut cache = Builder::new()
    ///     .heap_size(256 << 10)
    ///     .segment_size(64 << 10)
    ///     .eviction(Policy::Fifo)
    ///     .tier(&path, 4 << 20)
    ///     .build()?;
    /// for i in 0..4_000u32 {
    ///     cache.set(&i.to_le_bytes(), &[7; 200], 0, Duration::ZERO)?; // ~10x the heap
    /// }
    /// assert!(cache.stats().flash_demoted > 0);
    /// assert_eq!(cache.get(&0u32.to_le_bytes()).unwrap().value(), &[7; 200][..]); // from flash
    /// assert!(Builder::new().heap_size(1 << 20).tier(&path, 1000).build().is_err()); // not whole segments
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn tier(mut self, path: impl Into<PathBuf>, bytes: u64) -> Self {
        self.tier = Some((path.into(), bytes));
        self
    }

    /// How many bytes of flash segment images the [tier](Self::tier)'s writer may hold queued
    /// (8 MiB by default; at least one image always fits). Evictions hand their images to a
    /// thread that writes them, so that no eviction waits for the device; until an image is
    /// written, reads of its items are served from it in memory. When the queue is full the
    /// device is behind, and eviction drops what it takes out of DRAM, as without a tier,
    /// rather than wait: `flash_demotions_dropped` counts those items.
    ///
    /// A process killed while images wait in the queue loses the items in them (a graceful
    /// stop writes them first): at most the queue's bytes of the items eviction took out of
    /// DRAM last. 0 turns the queue off: each eviction writes what it demoted itself, before it
    /// returns, and waits for the device (the flash segment it was filling stays open for the
    /// next eviction, so segments still fill whole); a process killed loses none of what
    /// evictions demoted but the items of one it interrupts.
    ///
    /// ```
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-queue", std::process::id()));
    /// let cache = Builder::new()
    ///     .heap_size(256 << 10)
    ///     .segment_size(64 << 10)
    ///     .tier(&path, 4 << 20)
    ///     .tier_write_queue(1 << 20)
    ///     .build()?;
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn tier_write_queue(mut self, bytes: usize) -> Self {
        self.tier_write_queue = bytes;
        self
    }

    /// When a read on the [tier](Self::tier) brings its item back to DRAM: once the item has
    /// been read `reads` times, this read included (its frequency counter, which reads raise
    /// in DRAM and on flash alike, and which stops counting every read past 16). 0, the default,
    /// leaves items on flash until they are written to: measured on Zipf 0.99 keys, promotion
    /// saves a few percent of the tier's reads and costs hit ratio and tier writes, since the
    /// flash copy keeps its room until its segment is reclaimed while the DRAM copy pushes
    /// another item out (docs/benchmarks.md, "Flash tier"). It pays where a read of the device
    /// costs much more than a miss's share of the hit ratio.
    ///
    /// A read holds the cache shared and cannot store: it leaves the key to the shard's next
    /// write to any key, which brings the item back first (unless it was written or dropped
    /// meanwhile). The item then takes DRAM room as a new one would, and its flash copy is
    /// forgotten. `flash_promoted` of [`Stats`](crate::Stats) counts these.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Policy};
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-promote", std::process::id()));
    /// let mut cache = Builder::new()
    ///     .heap_size(256 << 10)
    ///     .segment_size(64 << 10)
    ///     .eviction(Policy::Fifo)
    ///     .tier(&path, 4 << 20)
    ///     .tier_promote_after(1) // every read on flash
    ///     .build()?;
    /// for i in 0..4_000u32 {
    ///     cache.set(&i.to_le_bytes(), &[7; 200], 0, Duration::ZERO)?;
    /// }
    /// assert!(cache.get(&0u32.to_le_bytes()).is_some()); // from flash
    /// cache.set(b"next write", b"", 0, Duration::ZERO)?;
    /// assert_eq!(cache.stats().flash_promoted, 1);
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn tier_promote_after(mut self, reads: u8) -> Self {
        self.tier_promote_after = reads;
        self
    }

    /// A function told of each item that leaves the cache: expired, evicted, deleted or replaced
    /// by a new version (not flushed; see [`RemovalCause`]). It gets the item as it was and why it went,
    /// and runs while the item's shard is locked for writing: keep it short (hand the item to a
    /// queue, count it) and do not call back into the cache.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    /// use std::sync::Arc;
    /// use segcache_core::{Builder, Policy, RemovalCause};
    ///
    /// let evicted = Arc::new(AtomicUsize::new(0));
    /// let count = evicted.clone();
    /// let mut cache = Builder::new()
    ///     .heap_size(1 << 20)
    ///     .segment_size(64 << 10)
    ///     .eviction(Policy::Fifo)
    ///     .eviction_listener(move |_item, cause| {
    ///         if cause == RemovalCause::Evicted {
    ///             count.fetch_add(1, Relaxed);
    ///         }
    ///     })
    ///     .build()?;
    /// for i in 0..50_000u32 {
    ///     cache.set(&i.to_le_bytes(), &[0; 40], 0, std::time::Duration::ZERO)?;
    /// }
    /// assert_eq!(evicted.load(Relaxed) as u64, cache.stats().evicted_items);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn eviction_listener(
        mut self,
        f: impl Fn(&crate::item::Item<'_>, RemovalCause) + Send + Sync + 'static,
    ) -> Self {
        self.listener = Some(RemovalListener::new(f));
        self
    }

    /// The shard count that [`Builder::build_shared`] makes: the one set with [`Builder::shards`]
    /// (an error if it is not a power of two up to 256), or 8x the cores rounded up to a power of
    /// two, lowered so that each shard keeps at least `MIN_SHARD_SEGMENTS` segments. What must
    /// split evenly over the shards, a [`Builder::tier`]'s size, can be sized with it.
    ///
    /// Writers to one shard wait for each other, and two threads meet in a shard about once in
    /// `shards` writes, so the count is well above the cores: at 50:50 get:set on two threads,
    /// 16 shards gave 8-10% more throughput than 8 (reads and 90:10 unchanged). Each shard keeps
    /// about one segment partly written, which costs memory on small heaps: 3.4% more bytes per
    /// retained item at 256 MiB with 16 shards than with 8.
    ///
    /// ```
    /// use segcache_core::Builder;
    ///
    /// assert_eq!(Builder::new().shards(4).shard_count()?, 4);
    /// assert!(Builder::new().shards(3).shard_count().is_err());
    /// let picked = Builder::new().heap_size(64 << 20).shard_count()?;
    /// assert!(picked.is_power_of_two() && picked <= 256);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn shard_count(&self) -> Result<usize> {
        let segments = self.heap_size / self.segment_size.max(1);
        match self.shards {
            Some(n) if n == 0 || !n.is_power_of_two() || n > 256 => {
                Err(Error::InvalidConfig(format!("shards must be a power of two from 1 to 256, got {n}")))
            }
            Some(n) => Ok(n),
            None => {
                let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
                let mut n = (cores * 8).next_power_of_two().min(256);
                while n > 1 && segments / n < MIN_SHARD_SEGMENTS {
                    n /= 2;
                }
                Ok(n)
            }
        }
    }

    /// Checks the settings that do not depend on the shard count.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(max) = self.max_item_size.filter(|&m| m == 0 || m > MAX_ITEM_SIZE) {
            return Err(Error::InvalidConfig(format!(
                "max_item_size must be from 1 byte to {MAX_ITEM_SIZE}, got {max}"
            )));
        }
        let s = self.segment_size;
        if !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&s) || !s.is_power_of_two() {
            return Err(Error::InvalidConfig(format!(
                "segment_size must be a power of two from {MIN_SEGMENT_SIZE} to {MAX_SEGMENT_SIZE} bytes, got {s}"
            )));
        }
        if self.heap_size < 2 * s {
            return Err(Error::InvalidConfig(format!(
                "heap_size must hold at least 2 segments of {s} bytes, got {}",
                self.heap_size
            )));
        }
        if let Some(max) = self.max_heap_size {
            if max < self.heap_size {
                return Err(Error::InvalidConfig(format!(
                    "max_heap_size {max} is less than heap_size {}",
                    self.heap_size
                )));
            }
            if self.prefault && max > self.heap_size {
                return Err(Error::InvalidConfig(
                    "prefault writes the whole heap at build, so it cannot be combined with room to grow (max_heap_size above heap_size)".into(),
                ));
            }
        }
        if let Some(p) = self.hash_power {
            if !(4..=32).contains(&p) {
                return Err(Error::InvalidConfig(format!("hash_power must be from 4 to 32, got {p}")));
            }
        }
        if self.multi_process && self.path.is_none() {
            return Err(Error::InvalidConfig("multi_process needs a path: processes share the cache's file".into()));
        }
        if self.multi_process && self.resize_file {
            return Err(Error::InvalidConfig(
                "resize_file cannot be combined with multi_process: every process sharing a file uses its sizes".into(),
            ));
        }
        if let Some((tier_path, bytes)) = &self.tier {
            if self.path.as_ref() == Some(tier_path) {
                return Err(Error::InvalidConfig(format!(
                    "the tier's file {} is the cache's persistence file: each needs its own",
                    tier_path.display()
                )));
            }
            let s = s as u64;
            if *bytes % s != 0 || *bytes < 2 * s {
                return Err(Error::InvalidConfig(format!(
                    "tier size must be a whole number of segments of {s} bytes, at least 2, got {bytes}"
                )));
            }
            if self.multi_process {
                return Err(Error::InvalidConfig(
                    "a tier cannot be combined with multi_process: its metadata is the process's own".into(),
                ));
            }
        }
        if self.multi_process && self.lazy_verify {
            return Err(Error::InvalidConfig(
                "lazy_verify cannot be combined with multi_process: the first process verifies the file for all".into(),
            ));
        }
        Ok(())
    }
}
