//! `SharedCache`: the thread-safe handle.
//!
//! # Design and trade-offs
//! The heap is split into N independent shards (a power of two, by default 8x the cores), each a
//! complete [`Segcache`] engine with its own segments, hash table and TTL buckets, behind its own
//! reader-writer lock. A key's shard comes from hash bits (44..52) that the shard's hash table does
//! not use for bucket choice, so keys spread evenly and each shard's table stays dense.
//!
//! - Reads of items up to 512 bytes take no lock ([`crate::shared::peek`]): the reader notes the shard's
//!   write sequence number, looks the key up and copies the record to its stack, and keeps the
//!   copy only if no writer ran in the shard meanwhile (a seqlock); otherwise it reads again, and
//!   after two overlapped tries takes the lock. Such a read writes no memory another core uses,
//!   and neither waits for writers nor makes them wait. Larger items, `contains`, and `get_many`
//!   in a file-backed cache take the shard's lock shared: any number of threads read one shard at
//!   once. The lock ([`crate::sync::lock::ShardLock`]) counts each thread's readers on a cache
//!   line of that thread's own, so those reads on different cores scale without passing a lock
//!   word between them; the price is a writer that checks every reader slot (twice the cores)
//!   before it goes on, and a slot that lock-free reads leave untouched costs it no cache miss. Hits and misses are counted
//!   in the reader's slot, on a line of their own. The frequency counter that eviction uses is
//!   raised only now and then once it is high, so hot keys rarely write their slot: with a plain
//!   store under the lock, with a compare-and-swap without it (the slot may have been reused);
//!   concurrent readers may lose an increment, which only makes that counter approximate.
//! - A `set` of an existing key whose record keeps its length (the same key, flags present or
//!   not as before, a value of the same length) and whose segment's expiry suits the new TTL is
//!   rewritten in place ([`crate::engine::rewrite`]) under the shard's lock taken *shared*, with the lock
//!   bit of the key's hash chain keeping out other rewrites of that chain. It writes no line but
//!   the chain's bucket and the record, so two cores rewriting keys of one shard do not pass the
//!   shard's lock line between them, and stores of existing keys on different cores do not
//!   queue behind one another. Lock-free reads check the chain's info word as well as the
//!   shard's sequence number; reads under the shared lock copy small items the same way, since
//!   a rewrite may run beside them. With a file, rewrites run one at a time
//!   per shard (see [`crate::engine::undo`]): under the exclusive lock, or under the shard's
//!   mutex where processes share the file.
//! - Other writes take the shard's lock exclusively for the append and the slot update only (a
//!   few hundred nanoseconds); writers on different shards never meet. CAS, incr/decr, append
//!   and prepend are atomic because the read-modify-write happens under that one exclusive lock;
//!   a rewrite in place is atomic under its chain's lock.
//! - Values are either copied out ([`SharedCache::get`]) or handed to a closure
//!   ([`SharedCache::get_with`]) that sees the reader's copy, or for a large item (which is
//!   never rewritten in place) runs under the shared lock: no reference into the cache outlives
//!   the lock.
//! - Memory cost of sharding: each shard keeps one partly written segment open per TTL bucket in
//!   use (and, with `Merge` on a file, one spare segment), so up to
//!   `shards x (open TTL buckets + 1)` segments are partly empty. With many shards, use smaller
//!   segments or a larger heap; the default shard count is lowered so that each shard keeps at
//!   least 16 segments (`builder::MIN_SHARD_SEGMENTS`).
//! - Hot keys: one key always maps to one shard. Reads of it proceed in parallel without
//!   writing shared lines; writes to a hot key serialise on its chain (rewrites in place) or its
//!   shard (everything else), as they must for CAS, and each one moves the key's bucket and
//!   record (and for an exclusive write, the shard's lock) between the cores that use it.
//! - Eviction and expiry are per shard, so a shard evicts by its own policy view; with keys spread
//!   evenly this approximates the global policy.

use std::convert::Infallible;
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::builder::Builder;
use crate::engine::read::{access_due, token_due, ReadOptions};
use crate::engine::rmw::RmwOptions;
use crate::engine::write::{check_key, Mode, StoreOptions};
use crate::engine::Segcache;
use crate::error::cache_error;
use crate::error::{Error, LoadError, Result};
use crate::fork::Origin;
use crate::hash::{hash, shard_of};
use crate::hashtable::bucket::Bucket;
use crate::hashtable::table::Table;
use crate::item::{Item, OwnedItem};
use crate::layout;
use crate::listener::RemovalListener;
use crate::meta::{bump, ReadCounters};
use crate::persist::file;
use crate::persist::region::Region;
use crate::persist::share::Entry;
use crate::prefetch::prefetch;
use crate::shared::loader::single_flight;
use crate::shared::peek::{self, PeekBuf, Peeked, ShardView, PEEK_WORDS};
use crate::shared::toucher::{touch_ahead_in, Shards, Toucher};
use crate::stats::Stats;
use crate::sync::lock::{self, ShardLock};

/// A cache handle that is `Send + Sync`: share it with `Arc` (or `&`) between threads.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use segcache_core::SharedCache;
///
/// let cache = Arc::new(SharedCache::builder().heap_size(8 << 20).build_shared()?);
/// let writer = {
///     let cache = Arc::clone(&cache);
///     std::thread::spawn(move || cache.set(b"k", b"from a thread", 0, Duration::ZERO))
/// };
/// writer.join().unwrap()?;
/// assert_eq!(cache.get(b"k").unwrap().value, b"from a thread");
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug)]
pub struct SharedCache {
    shards: Box<[ShardLock<Segcache>]>,
    /// Where each shard's memory lies, for reads that take no lock (`peek`), and for
    /// prefetching a key's bucket before taking the lock: the memory miss then overlaps the
    /// lock's atomics, and the lock is held a miss shorter.
    views: Box<[ShardView]>,
    /// The process that opened the cache (see `fork`): checked before any lock is taken, since a
    /// `fork()` child may have inherited a lock held by one of its parent's threads.
    origin: Origin,
    /// The memory of every shard (dropped after the engines over it).
    region: Arc<Region>,
    /// Held by a `fork()` child while it joins a cache shared between processes.
    joining: Mutex<()>,
    /// The thread that faults the heap in ahead of the writers (`Builder::touch_ahead`): it
    /// reads `shards` and `region`, and is stopped before they drop.
    toucher: Option<Toucher>,
}

/// Lock-free read attempts that a writer may overlap before the reader takes the lock: after two
/// in a row, the shard is busy with writes.
const PEEK_TRIES: u32 = 2;
/// Keys whose lines `get_many_with` fetches before it reads any of them: enough misses in flight
/// to keep the memory system busy, few enough that the first lines are still cached when read.
const READ_BATCH: usize = 16;

impl SharedCache {
    /// A [`Builder`] with every setting at its default.
    ///
    /// ```
    /// use segcache_core::SharedCache;
    /// let cache = SharedCache::builder().heap_size(8 << 20).build_shared()?;
    /// assert!(cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// The handle over `engines`; `multi_process`: their locks are those in the mapping.
    pub(crate) fn from_engines(engines: Vec<Segcache>, multi_process: bool) -> Self {
        let slots = lock::default_slots();
        let views: Box<[ShardView]> = engines.iter().map(ShardView::of).collect();
        let origin = engines[0].origin.clone();
        let region = Arc::clone(&engines[0].mem.region);
        let lock = |e: Segcache| {
            if !multi_process {
                return ShardLock::new(e, slots);
            }
            // SAFETY: the lock and slots lie in the mapping (`Layout`), which the engine keeps
            // alive as long as the `ShardLock` that holds both; the first process set them up.
            let (lock, slots) =
                unsafe { (&*e.mem.lock, std::slice::from_raw_parts(e.mem.slots, layout::MAPPED_SLOTS)) };
            ShardLock::mapped(e, lock, slots, Segcache::repair_after_death)
        };
        let shards: Box<[ShardLock<Segcache>]> = engines.into_iter().map(lock).collect();
        // `at` indexes both without a bounds check.
        assert!(shards.len().is_power_of_two() && views.len() == shards.len(), "{} shards", shards.len());
        // Under the lock: processes that share the file may be changing the headers.
        shards.iter().for_each(|s| s.read().mark_segments_in_use());
        SharedCache { shards, views, origin, region, joining: Mutex::new(()), toucher: None }
    }

    /// Starts the thread that faults the heap in ahead of the writers (`Builder::touch_ahead`).
    pub(crate) fn start_touch_ahead(&mut self) {
        self.toucher = Toucher::spawn(&self.shards, &self.region);
    }

    /// Whether the `Builder::touch_ahead` thread runs.
    #[cfg(test)]
    pub(crate) fn touch_ahead_running(&self) -> bool {
        self.toucher.as_ref().is_some_and(Toucher::running)
    }

    /// `Ok` in the process that opened the cache. In a `fork()` child, a cache shared between
    /// processes joins the file as this process's own; any other fails with `Error::Forked`.
    #[inline]
    fn attach(&self) -> Result<()> {
        if self.origin.forked() {
            return self.join_after_fork();
        }
        Ok(())
    }

    /// `attach().is_ok()`, written out so that the usual case builds no `Result`: dropping one
    /// is an out-of-line call (`Error` owns heap data), about 20 instructions on every read.
    #[inline]
    fn attached(&self) -> bool {
        !self.origin.forked() || self.join_after_fork().is_ok()
    }

    #[cold]
    fn join_after_fork(&self) -> Result<()> {
        let Some(sharing) = self.region.file.as_ref().and_then(|f| f.sharing.as_ref()) else {
            return Err(Error::Forked);
        };
        let _joining = self.joining.lock().unwrap_or_else(|e| e.into_inner());
        if !self.origin.forked() {
            return Ok(());
        }
        if sharing.join_after_fork()? == Entry::First {
            // The parent closed the file meanwhile, leaving it as it was: in use again.
            file::check_joined(&self.region)?;
            file::mark_open(&self.region);
        } else {
            file::check_joined(&self.region)?;
        }
        sharing.opened()?;
        self.origin.adopt();
        Ok(())
    }

    /// The key's hash and shard index.
    #[inline]
    fn index(&self, key: &[u8]) -> (u64, usize) {
        let h = hash(key);
        (h, shard_of(h, self.shards.len()))
    }
    /// `index`, with the key's bucket prefetched.
    #[inline]
    fn locate(&self, key: &[u8]) -> (u64, usize) {
        let (h, i) = self.index(key);
        prefetch(self.at(i).1.table().head(h) as *const Bucket as *const u8);
        (h, i)
    }

    /// Shard `i`'s lock and view, `i` taken modulo the shard count (as `index` gives it): no
    /// bounds check on the paths every operation takes.
    #[inline(always)]
    fn at(&self, i: usize) -> (&ShardLock<Segcache>, &ShardView) {
        let i = i & (self.shards.len() - 1);
        // SAFETY: `from_engines` checked that the shards are a power of two (one at least) and
        // that there is a view per shard, so `i` masked by their count less one is below both
        // lengths.
        unsafe { (self.shards.get_unchecked(i), self.views.get_unchecked(i)) }
    }
    #[inline]
    fn shard(&self, key: &[u8]) -> &ShardLock<Segcache> {
        self.at(self.locate(key).1).0
    }

    /// [`Error::Forked`](crate::Error::Forked) when this process is a `fork()` child of the one
    /// that opened the cache: there, reads miss and every write fails with that error. A cache
    /// shared between processes ([`Builder::multi_process`]) instead joins the file as this
    /// process's own, which every operation also does at its first use in the child: call this
    /// right after `fork()` to have it done, and any error reported, at a time of your choosing.
    ///
    /// ```
    /// use segcache_core::SharedCache;
    /// let cache = SharedCache::builder().heap_size(8 << 20).build_shared()?;
    /// assert!(cache.check_fork().is_ok()); // this process opened it
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    #[inline]
    pub fn check_fork(&self) -> Result<()> {
        self.attach()
    }

    /// Number of shards.
    ///
    /// ```
    /// use segcache_core::Builder;
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(8).build_shared()?;
    /// assert_eq!(cache.shard_count(), 8);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Shard `i`'s lock (for scans that visit the shards in turn).
    pub(crate) fn shard_at(&self, i: usize) -> &ShardLock<Segcache> {
        &self.shards[i]
    }

    /// Each shard's [`Segcache::verify`], under its read lock: the first inconsistency found.
    /// Walks every table: for tests and soaks only.
    #[doc(hidden)]
    pub fn verify(&self) -> Result<(), String> {
        self.shards.iter().enumerate().try_for_each(|(i, s)| s.read().verify().map_err(|e| format!("shard {i}: {e}")))
    }

    /// Every shard's lock.
    pub(crate) fn shards(&self) -> &[ShardLock<Segcache>] {
        &self.shards
    }

    /// The mapping that holds every shard.
    pub(crate) fn region(&self) -> &Region {
        &self.region
    }

    /// Whether this process may not use the cache: a `fork()` child of the one that opened it,
    /// unless it could join a cache shared between processes.
    pub(crate) fn origin_forked(&self) -> bool {
        !self.attached()
    }

    /// The cache clock's current time, Unix seconds.
    ///
    /// ```
    /// use segcache_core::{Builder, ManualClock};
    /// let clock = ManualClock::new(1_000);
    /// let cache = Builder::new().heap_size(8 << 20).clock(clock.clone()).build_shared()?;
    /// clock.advance(1);
    /// assert_eq!(cache.now(), 1_001);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn now(&self) -> u32 {
        self.shards[0].read().now()
    }

    /// Copies the item out (see `get_with`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 3, Duration::ZERO)?;
    /// let item = cache.get(b"k").unwrap();
    /// assert_eq!((item.value, item.flags, item.ttl), (b"v".to_vec(), 3, None));
    /// assert!(cache.get(b"absent").is_none());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get(&self, key: &[u8]) -> Option<OwnedItem> {
        self.get_with(key, |i| i.to_owned())
    }

    /// Runs `f` on the item. An item of up to 512 bytes is copied to the stack by a read that
    /// takes no lock (validated against the shard's writers, and done again if one ran); a
    /// larger one is handed to `f` without a copy, under the shard's read lock: keep `f` short
    /// then, as writers to this shard wait for it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"hello", 0, Duration::ZERO)?;
    /// let len = cache.get_with(b"k", |item| item.value().len()); // no allocation
    /// assert_eq!(len, Some(5));
    /// assert_eq!(cache.get_with(b"absent", |item| item.value().len()), None);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    #[inline]
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
        self.get_with_options(key, ReadOptions::default(), f)
    }

    /// `get_with`, with `opts` for the item's state (see [`Segcache::get_with_options`]). A read
    /// that changes a record (takes a recache token, or refreshes an access time, at most once a
    /// minute per item) takes the shard's read lock; the fetched bit is set without it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ReadOptions};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.invalidate(b"k", None, None, None)?;
    /// let claim = ReadOptions { claim_token: true, ..ReadOptions::default() };
    /// assert_eq!(cache.get_with_options(b"k", claim, |item| item.won()), Some(true));
    /// assert_eq!(cache.get_with_options(b"k", claim, |item| item.won()), Some(false));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    #[inline]
    pub fn get_with_options<R>(&self, key: &[u8], opts: ReadOptions, f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
        if !self.attached() {
            return None;
        }
        let (h, i) = self.locate(key);
        self.get_located(key, h, i, opts, f)
    }

    /// `get_with_options` of a key whose hash `h` and shard `i` are known.
    #[inline(always)]
    fn get_located<R>(
        &self,
        key: &[u8],
        h: u64,
        i: usize,
        opts: ReadOptions,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Option<R> {
        let (shard, view) = self.at(i);
        let mut buf: PeekBuf = [MaybeUninit::uninit(); PEEK_WORDS];
        if view.enabled() {
            let counters = &shard.own_slot().counters.reads;
            if !view.may_hold(h) {
                counters.miss(None);
                return None;
            }
            match shard.read_optimistic(PEEK_TRIES, || view.peek(key, h, &mut buf)) {
                Some(Peeked::Locked | Peeked::Busy) | None => {}
                Some(Peeked::Hit { found, header, expire_at, now, access, created, .. })
                    if {
                        let state = peek::state(found.value, &header, access, created);
                        (opts.claim_token && token_due(&opts, &state, expire_at, now))
                            || (!opts.no_update && access_due(&state, now))
                    } => {}
                Some(p) => return deliver(p, &buf, counters, h, &opts, f),
            }
        }
        self.get_locked(i, key, h, &mut buf, opts, f)
    }

    /// The smallest get this layout allows (see `ShardView::floor`), for the engine benchmarks
    /// to measure [`get_with`](Self::get_with) against. Not an API.
    ///
    /// # Safety
    /// No other thread or process may write to the cache while it runs.
    #[cfg(feature = "floor")]
    #[doc(hidden)]
    #[inline]
    pub unsafe fn floor_get<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let (h, i) = self.locate(key);
        self.at(i).1.floor(key, h, f)
    }

    /// `get_with` under the shard's read lock: for large items, and after lock-free tries that
    /// writers overlapped. Out of line, so that the lock-free path inlines `peek` alone.
    #[cold]
    #[inline(never)]
    fn get_locked<R>(
        &self,
        i: usize,
        key: &[u8],
        h: u64,
        buf: &mut PeekBuf,
        opts: ReadOptions,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Option<R> {
        // (`opts` by value: by reference, the lock-free path would build it in memory for this
        // call it rarely makes.)
        let opts = &opts;
        let (shard, view) = self.at(i);
        let engine = shard.read();
        view.mark_checked(&engine);
        let counters = &engine.slot().counters.reads;
        // Rewrites in place may run beside this reader: it copies small items as `peek` does.
        if view.rewrites() {
            match view.peek_settled(key, h, buf) {
                Peeked::Locked => {}
                Peeked::Hit { found, at, header, cas, expire_at, now, access, created } => {
                    let mut state = peek::state(found.value, &header, access, created);
                    // Under the read lock the record stays where it is: its state may change.
                    let coin = bump(&counters.hits);
                    engine.note_read(found, &mut state, expire_at, now, opts, coin ^ h);
                    // SAFETY: a hit's record, as `peek_settled` copied it.
                    return Some(f(unsafe { peek::item_in(buf, at, header, cas, expire_at, now, state) }));
                }
                p => return deliver(p, buf, counters, h, opts, f),
            }
        }
        if engine.tier.is_some() && engine.flash_token_due(key, h, opts) {
            // The recache token is handed out in DRAM only: the item comes back, then is read.
            drop(engine);
            let mut engine = shard.write();
            let now = engine.now();
            engine.promote_flash(key, h, now);
            drop(engine);
            return self.get_locked(i, key, h, buf, *opts, f);
        }
        engine.get_with_options_then(key, h, counters, opts, f)
    }

    /// Copies the value into `buf` (cleared first); returns the item's metadata with an empty
    /// value, or `None` on a miss. Reusing `buf` avoids an allocation per read.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"a", b"first", 1, Duration::ZERO)?;
    /// cache.set(b"b", b"second", 2, Duration::ZERO)?;
    /// let mut buf = Vec::new();
    /// let meta = cache.get_into(b"a", &mut buf).unwrap();
    /// assert_eq!((buf.as_slice(), meta.flags, meta.value.len()), (&b"first"[..], 1, 0));
    /// cache.get_into(b"b", &mut buf).unwrap(); // the buffer is reused
    /// assert_eq!(buf, b"second");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_into(&self, key: &[u8], buf: &mut Vec<u8>) -> Option<OwnedItem> {
        self.get_with(key, |item| {
            buf.clear();
            buf.extend_from_slice(item.value());
            OwnedItem { value: Vec::new(), flags: item.flags(), cas: item.cas(), ttl: item.ttl() }
        })
    }

    /// Whether the key is present (and not expired).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// assert!(cache.contains(b"k") && !cache.contains(b"absent"));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn contains(&self, key: &[u8]) -> bool {
        if !self.attached() {
            return false;
        }
        self.shard(key).read().contains(key)
    }

    /// Looks up every key; calls `f(index, item)` for each hit. Without a file, each key is read
    /// as `get_with` reads it, by batches of 16 whose buckets, then records, are prefetched
    /// first, so that their memory misses overlap. With one, keys are grouped by shard so that
    /// each shard's read lock is taken once and the engine can overlap the memory accesses of
    /// the keys in one shard (`f` then runs under that lock).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"a", b"1", 0, Duration::ZERO)?;
    /// cache.set(b"c", b"3", 0, Duration::ZERO)?;
    /// let mut total = 0;
    /// cache.get_many_with(&[b"a", b"b", b"c"], |_i, item| total += item.value().len());
    /// assert_eq!(total, 2);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_many_with(&self, keys: &[&[u8]], mut f: impl FnMut(usize, Item<'_>)) {
        if !self.attached() {
            return;
        }
        // Every shard lies in one region, so they all rewrite in place or none does.
        if self.views[0].rewrites() {
            // Rewrites in place may run beside readers that hold the lock, so small items are
            // copied: one lock-free read per key, by batches whose buckets, then records, are
            // fetched first, so that the batch's memory misses overlap.
            for (b, batch) in keys.chunks(READ_BATCH).enumerate() {
                let mut located = [(0, 0); READ_BATCH];
                for (at, k) in located.iter_mut().zip(batch) {
                    *at = self.locate(k);
                }
                for &(h, i) in &located[..batch.len()] {
                    self.views[i].prefetch_match(h);
                }
                for (j, (k, &(h, i))) in batch.iter().zip(&located).enumerate() {
                    self.get_located(k, h, i, ReadOptions::default(), |item| f(b * READ_BATCH + j, item));
                }
            }
            return;
        }
        if self.shards.len() == 1 {
            let engine = self.shards[0].read();
            let counters = &engine.slot().counters.reads;
            let mut on_tier = Vec::new();
            engine.get_many_counted_in(keys, counters, &mut on_tier, &mut f);
            for i in on_tier {
                engine.get_flash_with(keys[i], hash(keys[i]), counters, false, |item| f(i, item));
            }
            return;
        }
        let mut order: Vec<(usize, usize)> =
            keys.iter().enumerate().map(|(i, k)| (shard_of(hash(k), self.shards.len()), i)).collect();
        order.sort_unstable();
        let mut sub: Vec<&[u8]> = Vec::with_capacity(keys.len());
        let mut idx: Vec<usize> = Vec::with_capacity(keys.len());
        let mut on_tier = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let shard = order[start].0;
            let end = start + order[start..].iter().take_while(|(s, _)| *s == shard).count();
            sub.clear();
            idx.clear();
            for &(_, i) in &order[start..end] {
                sub.push(keys[i]);
                idx.push(i);
            }
            let engine = self.shards[shard].read();
            let counters = &engine.slot().counters.reads;
            on_tier.clear();
            engine.get_many_counted_in(&sub, counters, &mut on_tier, |j, item| f(idx[j], item));
            for &j in &on_tier {
                engine.get_flash_with(sub[j], hash(sub[j]), counters, false, |item| f(idx[j], item));
            }
            start = end;
        }
    }

    /// Copies out every hit; `None` for misses, in the order of `keys`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"a", b"1", 0, Duration::ZERO)?;
    /// let got = cache.get_many(&[b"a", b"b"]);
    /// assert_eq!(got[0].as_ref().unwrap().value, b"1");
    /// assert!(got[1].is_none());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_many(&self, keys: &[&[u8]]) -> Vec<Option<OwnedItem>> {
        let mut out = vec![None; keys.len()];
        self.get_many_with(keys, |i, item| out[i] = Some(item.to_owned()));
        out
    }

    /// Stores the item, replacing any other under `key` (`ttl` of zero: never expires).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::from_secs(60))?; // `&self`: from any thread
    /// assert_eq!(cache.get(b"k").unwrap().value, b"v");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn set(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, value, flags, ttl, Mode::Set).map(drop)
    }
    /// Stores the item only if `key` is absent ([`Error::NotStored`](crate::Error::NotStored) otherwise).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.add(b"k", b"first", 0, Duration::ZERO)?;
    /// assert!(matches!(cache.add(b"k", b"second", 0, Duration::ZERO), Err(Error::NotStored)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn add(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, value, flags, ttl, Mode::Add).map(drop)
    }
    /// Stores the item only if `key` is present ([`Error::NotStored`](crate::Error::NotStored) otherwise).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// assert!(matches!(cache.replace(b"k", b"v", 0, Duration::ZERO), Err(Error::NotStored)));
    /// cache.set(b"k", b"old", 0, Duration::ZERO)?;
    /// cache.replace(b"k", b"new", 0, Duration::ZERO)?;
    /// assert_eq!(cache.get(b"k").unwrap().value, b"new");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn replace(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, value, flags, ttl, Mode::Replace).map(drop)
    }
    /// Stores only if the item's CAS value is still `cas` ([`Error::Exists`](crate::Error::Exists) if it
    /// changed, [`Error::NotFound`](crate::Error::NotFound) if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v1", 0, Duration::ZERO)?;
    /// let token = cache.get(b"k").unwrap().cas;
    /// cache.cas(b"k", b"v2", 0, Duration::ZERO, token)?;
    /// assert!(matches!(cache.cas(b"k", b"v3", 0, Duration::ZERO, token), Err(Error::Exists)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn cas(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration, cas: u64) -> Result<()> {
        self.store(key, value, flags, ttl, Mode::Cas(cas)).map(drop)
    }
    /// Stores as `mode` requires, with `opts` for the item's state and CAS value; returns the
    /// CAS value it got (see [`Segcache::store_with`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, StoreMode, StoreOptions};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// let opts = StoreOptions { cas: Some(77), ..StoreOptions::default() };
    /// assert_eq!(cache.store_with(b"k", b"v", 0, Duration::ZERO, StoreMode::Set, opts)?, 77);
    /// assert_eq!(cache.get(b"k").unwrap().cas, 77);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn store_with(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        ttl: Duration,
        mode: Mode,
        opts: StoreOptions,
    ) -> Result<u64> {
        if opts == StoreOptions::default() {
            return self.store(key, value, flags, ttl, mode);
        }
        self.attach()?;
        self.shard(key).write().store_with(key, value, flags, ttl, mode, opts)
    }
    /// Removes the key if its CAS value is `cas` (see [`Segcache::delete_cas`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// let token = cache.get(b"k").unwrap().cas;
    /// assert!(matches!(cache.delete_cas(b"k", token + 1), Err(Error::Exists)));
    /// cache.delete_cas(b"k", token)?;
    /// assert!(!cache.contains(b"k"));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn delete_cas(&self, key: &[u8], cas: u64) -> Result<()> {
        self.attach()?;
        let (h, i) = self.locate(key);
        self.at(i).0.write().delete_hashed(key, h, Some(cas))
    }
    /// Marks the item stale (see [`Segcache::invalidate`]); returns its new CAS value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// let cas = cache.invalidate(b"k", Some(Duration::from_secs(30)), None, None)?;
    /// let stale = cache.get_with(b"k", |item| (item.is_stale(), item.cas())).unwrap();
    /// assert_eq!(stale, (true, cas));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn invalidate(&self, key: &[u8], ttl: Option<Duration>, compare: Option<u64>, cas: Option<u64>) -> Result<u64> {
        self.attach()?;
        self.shard(key).write().invalidate(key, ttl, compare, cas)
    }
    /// The key is hashed once, for its shard and its bucket. A `set` of an existing key whose
    /// record keeps its length is first tried in place under the shared lock
    /// (`Segcache::rewrite_shared`), which leaves the shard's lock line alone.
    #[inline]
    fn store(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration, mode: Mode) -> Result<u64> {
        self.attach()?;
        let (h, i) = self.index(key);
        let (shard, view) = self.at(i);
        let secs = crate::ttl_buckets::expire::ttl_secs(ttl);
        // A new key skips the shared lock: the summary and then the chain's tags, read without a
        // lock, are only a hint, and the exclusive path is complete on its own when it is stale.
        // The summary alone passes about half the new keys once chains are full (one bit of 8 per
        // item), and each of those would pay a read lock, a chain lock and a chain walk for nothing.
        if mode == Mode::Set && view.rewrites() && view.table().may_hold(h) {
            // Every line the exclusive path needs is fetched while the tags are compared.
            view.prefetch_store(h, secs);
            if view.table().may_hold_tag(h, |loc| view.prefetch_record(loc)) {
                let engine = shard.read();
                if let Some(cas) = engine.rewrite_shared(key, h, value, flags, secs) {
                    engine.slot().counters.sets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(cas);
                }
            }
        } else {
            view.prefetch_store(h, secs);
        }
        shard.write().store_hashed(key, h, value, flags, ttl, mode)
    }
    /// Appends to the value, keeping flags and expiry ([`Error::NotStored`](crate::Error::NotStored) if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"log", b"a", 0, Duration::ZERO)?;
    /// cache.append(b"log", b"b")?;
    /// assert_eq!(cache.get(b"log").unwrap().value, b"ab");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn append(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.attach()?;
        self.shard(key).write().append(key, value)
    }
    /// Prepends to the value, keeping flags and expiry ([`Error::NotStored`](crate::Error::NotStored) if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"log", b"b", 0, Duration::ZERO)?;
    /// cache.prepend(b"log", b"a")?;
    /// assert_eq!(cache.get(b"log").unwrap().value, b"ab");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn prepend(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.attach()?;
        self.shard(key).write().prepend(key, value)
    }
    /// Adds `delta` to a decimal value, wrapping at 2^64; returns the new value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// if let Err(Error::NotFound) = cache.incr(b"hits", 1) {
    ///     cache.add(b"hits", b"1", 0, Duration::ZERO)?;
    /// }
    /// assert_eq!(cache.incr(b"hits", 1)?, 2);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn incr(&self, key: &[u8], delta: u64) -> Result<u64> {
        self.attach()?;
        self.shard(key).write().incr(key, delta)
    }
    /// Subtracts `delta` from a decimal value, stopping at 0; returns the new value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"stock", b"2", 0, Duration::ZERO)?;
    /// assert_eq!(cache.decr(b"stock", 5)?, 0); // stops at zero
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn decr(&self, key: &[u8], delta: u64) -> Result<u64> {
        self.attach()?;
        self.shard(key).write().decr(key, delta)
    }
    /// `incr` or `decr`, also telling whether the result outgrew the old value (see
    /// [`Segcache::add_delta`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"n", b"99", 0, Duration::ZERO)?;
    /// let delta = cache.add_delta(b"n", true, 1)?;
    /// assert_eq!((delta.value, delta.grew), (100, true));
    /// assert_eq!(cache.get(b"n").unwrap().cas, delta.cas);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn add_delta(&self, key: &[u8], incr: bool, delta: u64) -> Result<crate::engine::rmw::Delta> {
        self.attach()?;
        self.shard(key).write().add_delta(key, incr, delta)
    }
    /// Sets (or with `None` removes) the function told of each item that leaves the cache, with why
    /// (see [`Builder::eviction_listener`]).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock, RemovalListener};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let cache = Builder::new().heap_size(8 << 20).clock(clock.clone()).build_shared()?;
    /// let expired = Arc::new(AtomicUsize::new(0));
    /// let count = Arc::clone(&expired);
    /// cache.set_eviction_listener(Some(RemovalListener::new(move |_, _| {
    ///     count.fetch_add(1, Relaxed);
    /// })));
    /// cache.set(b"k", b"v", 0, Duration::from_secs(5))?;
    /// clock.advance(10);
    /// cache.expire();
    /// assert_eq!(expired.load(Relaxed), 1);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn set_eviction_listener(&self, listener: Option<RemovalListener>) {
        for s in self.shards.iter() {
            s.write().set_eviction_listener(listener.clone());
        }
    }
    /// `append` under `opts`; returns the CAS value the item took (see
    /// [`Segcache::append_with`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error, RmwOptions};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"log", b"a", 0, Duration::ZERO)?;
    /// let token = cache.get(b"log").unwrap().cas;
    /// let only_if = RmwOptions { compare: Some(token), ..RmwOptions::default() };
    /// let cas = cache.append_with(b"log", b"b", only_if)?;
    /// assert!(matches!(cache.append_with(b"log", b"c", only_if), Err(Error::Exists)));
    /// assert_eq!(cache.get(b"log").unwrap().cas, cas);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn append_with(&self, key: &[u8], value: &[u8], opts: RmwOptions<'_>) -> Result<u64> {
        self.attach()?;
        self.shard(key).write().append_with(key, value, opts)
    }
    /// `prepend` under `opts`; returns the CAS value the item took (see
    /// [`Segcache::prepend_with`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, RmwOptions};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"b", 0, Duration::ZERO)?;
    /// let cas = cache.prepend_with(b"k", b"a", RmwOptions { cas: Some(500), ..RmwOptions::default() })?;
    /// let item = cache.get(b"k").unwrap();
    /// assert_eq!((item.value, item.cas, cas), (b"ab".to_vec(), 500, 500));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn prepend_with(&self, key: &[u8], value: &[u8], opts: RmwOptions<'_>) -> Result<u64> {
        self.attach()?;
        self.shard(key).write().prepend_with(key, value, opts)
    }
    /// `add_delta` under `opts` (see [`Segcache::add_delta_with`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error, RmwOptions};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"n", b"41", 0, Duration::ZERO)?;
    /// let token = cache.get(b"n").unwrap().cas;
    /// let only_if = RmwOptions { compare: Some(token), ..RmwOptions::default() };
    /// assert_eq!(cache.add_delta_with(b"n", true, 1, only_if)?.value, 42);
    /// assert!(matches!(cache.add_delta_with(b"n", true, 1, only_if), Err(Error::Exists)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn add_delta_with(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        opts: RmwOptions<'_>,
    ) -> Result<crate::engine::rmw::Delta> {
        self.attach()?;
        self.shard(key).write().add_delta_with(key, incr, delta, opts)
    }
    /// Reads `key`'s item, calls `f` with it (`None` when absent), and does what `f` decides
    /// ([`Op`](crate::Op): keep, put a value with flags and TTL, or remove); returns what
    /// happened (see [`Segcache::compute`]). The shard's write lock is held from the read to the
    /// write, so no other writer of the key, in this process or another sharing the file, runs
    /// in between: concurrent computes of one key run one after the other and lose no update. A
    /// put takes a new CAS value. `f` runs under that lock: keep it short, and do not call into
    /// this cache from it (a key of the same shard would wait for itself).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use segcache_core::{Builder, Computed, Op};
    ///
    /// let cache = Arc::new(Builder::new().heap_size(8 << 20).build_shared()?);
    /// let add_one = |cache: &segcache_core::SharedCache| {
    ///     cache.compute(b"hits", |current| {
    ///         let n: u64 = current.map_or(0, |item| std::str::from_utf8(item.value()).unwrap().parse().unwrap());
    ///         Op::put((n + 1).to_string())
    ///     })
    /// };
    /// let threads: Vec<_> = (0..4)
    ///     .map(|_| {
    ///         let cache = Arc::clone(&cache);
    ///         std::thread::spawn(move || (0..100).try_for_each(|_| add_one(&cache).map(drop)))
    ///     })
    ///     .collect();
    /// threads.into_iter().try_for_each(|t| t.join().unwrap())?;
    /// assert_eq!(cache.get(b"hits").unwrap().value, b"400");
    /// assert_eq!(cache.compute(b"hits", |_| Op::Remove)?, Computed::Removed);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn compute(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<Item<'_>>) -> crate::engine::compute::Op,
    ) -> Result<crate::engine::compute::Computed> {
        self.attach()?;
        let (h, i) = self.locate(key);
        self.at(i).0.write().compute_hashed(key, h, f)
    }
    /// Removes the key ([`Error::NotFound`](crate::Error::NotFound) if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.delete(b"k")?;
    /// assert!(matches!(cache.delete(b"k"), Err(Error::NotFound)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.attach()?;
        let (h, i) = self.locate(key);
        self.at(i).0.write().delete_hashed(key, h, None)
    }
    /// Sets a new TTL ([`Error::NotFound`](crate::Error::NotFound) if absent); the CAS value stays.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let cache = Builder::new().heap_size(8 << 20).clock(clock.clone()).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::from_secs(10))?;
    /// let cas = cache.get(b"k").unwrap().cas;
    /// cache.touch(b"k", Duration::from_secs(100))?;
    /// clock.advance(50);
    /// assert_eq!(cache.get(b"k").unwrap().cas, cas);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn touch(&self, key: &[u8], ttl: Duration) -> Result<()> {
        self.attach()?;
        self.shard(key).write().touch(key, ttl)
    }
    /// Sets a new TTL without counting as an access (see [`Segcache::set_ttl`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.set_ttl(b"k", Duration::from_secs(60))?;
    /// assert_eq!(cache.get_with(b"k", |item| item.fetched()), Some(false));
    /// assert!(cache.get(b"k").unwrap().ttl.is_some());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn set_ttl(&self, key: &[u8], ttl: Duration) -> Result<()> {
        self.attach()?;
        self.shard(key).write().set_ttl(key, ttl)
    }
    /// Reads the item and sets its TTL in one step (memcached `gat`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// let item = cache.get_and_touch(b"k", Duration::from_secs(60)).unwrap();
    /// assert_eq!(item.value, b"v");
    /// assert!(item.ttl.is_some_and(|t| t <= Duration::from_secs(60)));
    /// assert!(cache.get_and_touch(b"absent", Duration::ZERO).is_none());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_and_touch(&self, key: &[u8], ttl: Duration) -> Option<OwnedItem> {
        if !self.attached() {
            return None;
        }
        let mut engine = self.shard(key).write();
        engine.touch(key, ttl).ok()?;
        engine.get(key).map(|i| i.to_owned())
    }

    /// Limits the heap the cache uses to `bytes` (split evenly over the shards; see
    /// [`Segcache::set_memory_limit`]), or lifts the limit up to the whole heap.
    ///
    /// ```
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(4).build_shared()?;
    /// cache.set_memory_limit(8 << 20)?; // 2 MiB per shard
    /// assert_eq!(cache.memory_limit(), 8 << 20);
    /// assert!(cache.set_memory_limit(32 << 20).is_err());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn set_memory_limit(&self, bytes: usize) -> Result<()> {
        self.attach()?;
        let per_shard = bytes / self.shards.len();
        if per_shard > self.shards[0].read().geo.heap_len() {
            return Err(crate::error::Error::InvalidConfig(format!("memory limit {bytes} is more than the heap")));
        }
        for s in self.shards.iter() {
            s.write().set_memory_limit(per_shard)?;
        }
        Ok(())
    }

    /// The heap the cache may use now (see [`SharedCache::set_memory_limit`]).
    ///
    /// ```
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(4).build_shared()?;
    /// assert_eq!(cache.memory_limit(), 16 << 20);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn memory_limit(&self) -> usize {
        self.shards.iter().map(|s| s.read().memory_limit()).sum()
    }

    /// Removes every item now.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.flush();
    /// assert!(cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn flush(&self) {
        if !self.attached() {
            return;
        }
        for s in self.shards.iter() {
            s.write().flush();
        }
    }
    /// Removes every item stored before `delay` from now, at that time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let cache = Builder::new().heap_size(8 << 20).clock(clock.clone()).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.flush_after(Duration::from_secs(60));
    /// assert!(cache.contains(b"k"));
    /// clock.advance(60);
    /// assert!(!cache.contains(b"k"));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn flush_after(&self, delay: Duration) {
        if !self.attached() {
            return;
        }
        for s in self.shards.iter() {
            s.write().flush_after(delay);
        }
    }
    /// Frees expired segments in every shard; returns the number of items removed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let cache = Builder::new().heap_size(8 << 20).clock(clock.clone()).build_shared()?;
    /// for i in 0..100 {
    ///     cache.set(format!("k{i}").as_bytes(), b"v", 0, Duration::from_secs(5))?;
    /// }
    /// clock.advance(10);
    /// assert_eq!(cache.expire(), 100);
    /// assert!(cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn expire(&self) -> usize {
        if !self.attached() {
            return 0;
        }
        self.shards.iter().map(|s| s.write().expire()).sum()
    }

    /// Counters summed over the shards. Each shard's counters are read under its read lock,
    /// one shard at a time, so readers and writers elsewhere are not held up.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(4).build_shared()?;
    /// for i in 0..10 {
    ///     cache.set(format!("k{i}").as_bytes(), b"v", 0, Duration::ZERO)?;
    /// }
    /// let stats = cache.stats();
    /// assert_eq!((stats.items, stats.sets, stats.shards), (10, 10, 4));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        if !self.attached() {
            return Stats::default();
        }
        let mut total = Stats::default();
        for s in self.shards.iter() {
            let mut shard = s.read().stats();
            let ([hits, misses, expired, flushed], sets) = slot_counts(s);
            shard.get_hits += hits;
            shard.get_misses += misses;
            shard.get_expired += expired;
            shard.get_flushed += flushed;
            shard.sets += sets;
            total.merge(&shard);
        }
        total
    }

    /// Segments dropped as corrupt (with their items) since the cache was opened: by the
    /// rebuild after a crash, or by the checks of a lazily verified reopen (`Builder::lazy_verify`,
    /// which may drop some at the first write).
    ///
    /// # Examples
    /// ```
    /// let cache = segcache_core::Builder::new().heap_size(8 << 20).build_shared()?;
    /// assert_eq!(cache.dropped_segments(), 0); // a fresh cache dropped nothing
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn dropped_segments(&self) -> u64 {
        if !self.attached() {
            return 0;
        }
        self.shards.iter().map(|s| s.read().dropped_segments).sum()
    }

    /// Live items.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// cache.set(b"a", b"1", 0, Duration::ZERO)?;
    /// cache.set(b"b", b"2", 0, Duration::ZERO)?;
    /// assert_eq!(cache.len(), 2);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        if !self.attached() {
            return 0;
        }
        self.shards.iter().map(|s| s.read().len()).sum()
    }
    /// Whether no item is live.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
    /// assert!(cache.is_empty());
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// assert!(!cache.is_empty());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the heap to stable storage and returns once it is there, as [`Segcache::sync`]:
    /// every store that returned before the call survives a power loss after it returns. It
    /// takes no lock on the heap: stores go on meanwhile (and may or may not be written by it).
    /// With a [tier](crate::Builder::tier), each shard's queued images are written and the
    /// tier file synced first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-shared-sync", std::process::id()));
    /// let cache = Builder::new().heap_size(8 << 20).path(&path).build_shared()?;
    /// cache.set(b"order:17", b"paid", 0, Duration::ZERO)?;
    /// cache.sync()?;
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        for s in self.shards.iter() {
            s.read().sync_tier()?;
        }
        crate::persist::file::sync(&self.region)
    }

    /// Graceful stop: with a persistence path, writes everything needed for a warm restart and
    /// marks the file clean. Dropping the cache does the same but cannot report an error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-doc-{}-shared-close", std::process::id()));
    /// let cache = Builder::new().heap_size(8 << 20).path(&path).build_shared()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.close()?; // the file is clean: the next open is warm at once
    /// let cache = Builder::new().heap_size(8 << 20).path(&path).build_shared()?;
    /// assert_eq!(cache.get(b"k").unwrap().value, b"v");
    /// drop(cache);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn close(self) -> Result<()> {
        self.attach()?;
        let now = self.now();
        let region = Arc::clone(&self.region);
        drop(self);
        crate::persist::file::close_last(region, now)
    }

    /// Faults in the next `per_shard` free segments of each shard (the ones the next new
    /// segments will be), except those this process faulted in or wrote before. Returns how
    /// many it faulted in now, or `None` once there is nothing left to do: every segment of the
    /// heap was faulted in or taken by a writer (or the heap was prefaulted at build), or the
    /// kernel cannot populate memory (Linux before 5.14, other systems). Processes sharing a
    /// file each fault in for themselves, and see only their own writers' segments as taken.
    ///
    /// Meant for a thread of its own, beside the ones that use the cache: it takes each shard's
    /// lock shared for a moment only, and faults in with no lock held, so writers never wait
    /// for a fault they did not need. [`Builder::touch_ahead`](crate::Builder::touch_ahead)
    /// starts such a thread with the cache.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(4 << 20).segment_size(256 << 10).shards(2).build_shared()?;
    /// let background = std::thread::scope(|s| {
    ///     let toucher = s.spawn(|| {
    ///         let mut faulted = 0;
    ///         while let Some(n) = cache.touch_ahead(2) {
    ///             faulted += n;
    ///             if n == 0 {
    ///                 std::thread::sleep(Duration::from_millis(1));
    ///             }
    ///         }
    ///         faulted
    ///     });
    ///     for i in 0..20_000 {
    ///         cache.set(format!("key{i}").as_bytes(), &[7; 300], 0, Duration::ZERO).unwrap();
    ///     }
    ///     toucher.join().unwrap()
    /// });
    /// // The writers took every segment of the heap (16), some faulted in ahead by the toucher,
    /// // which then ended.
    /// assert!(background <= 16);
    /// assert_eq!(cache.touch_ahead(2), None);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn touch_ahead(&self, per_shard: usize) -> Option<usize> {
        if self.origin_forked() {
            return None;
        }
        touch_ahead_in(self.shards(), self.region(), per_shard, Shards::All)
    }

    /// The item under `key`; on a miss, the value `loader` makes, stored with flags 0 and `ttl`
    /// (zero: never expires). Single flight: of the threads that miss on one key at once, one
    /// runs its loader and the others wait for its value (see [`try_get_or_insert_with`]
    /// for errors, panics and re-entrancy).
    ///
    /// A value the cache cannot keep (too large for a segment, no memory with eviction off) is
    /// still returned, with a CAS value of 0. Errors: only the cache's own ([`Error::EmptyKey`],
    /// [`Error::KeyTooLong`], [`Error::Forked`]).
    ///
    /// [`try_get_or_insert_with`]: SharedCache::try_get_or_insert_with
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let cache = segcache_core::Builder::new().heap_size(8 << 20).build_shared()?;
    /// let item = cache.get_or_insert_with(b"k", Duration::from_secs(60), || b"computed".to_vec())?;
    /// assert_eq!(item.value, b"computed");
    /// // A hit: the loader does not run.
    /// let again = cache.get_or_insert_with(b"k", Duration::from_secs(60), || unreachable!())?;
    /// assert_eq!(again.value, b"computed");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_or_insert_with(
        &self,
        key: &[u8],
        ttl: Duration,
        loader: impl FnOnce() -> Vec<u8>,
    ) -> Result<OwnedItem, Error> {
        self.try_get_or_insert_with(key, ttl, || Ok::<_, Infallible>(loader())).map_err(cache_error)
    }

    /// [`get_or_insert_with`](SharedCache::get_or_insert_with) with a loader that may fail.
    ///
    /// - Single flight: while one thread runs its loader for `key`, other threads that miss on
    ///   `key` wait (blocking, with no cache lock held) and get its value.
    /// - A loader that returns `Err(e)` stores nothing; its caller gets [`LoadError::Loader`]`(e)`,
    ///   and the threads waiting on it try again: one of them runs its own loader. A loader that
    ///   panics does the same, its panic going on up its own caller's stack.
    /// - Re-entrancy: a loader that asks for its own key on its own thread does not wait for
    ///   itself; the inner call runs its loader directly (no single flight) and stores the
    ///   result. Loaders on two threads that each wait for the other's key deadlock: keep
    ///   loaders acyclic.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::LoadError;
    /// let cache = segcache_core::Builder::new().heap_size(8 << 20).build_shared()?;
    /// let r = cache.try_get_or_insert_with(b"k", Duration::ZERO, || Err::<Vec<u8>, _>("backend down"));
    /// assert!(matches!(r, Err(LoadError::Loader("backend down"))));
    /// assert!(cache.get(b"k").is_none()); // errors are not cached
    /// let item = cache.try_get_or_insert_with(b"k", Duration::ZERO, || Ok::<_, &str>(b"v".to_vec()));
    /// assert_eq!(item.unwrap().value, b"v");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn try_get_or_insert_with<E>(
        &self,
        key: &[u8],
        ttl: Duration,
        loader: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<OwnedItem, LoadError<E>> {
        check_key(key)?;
        self.check_fork()?;
        let lookup = || self.get(key);
        let load = || loader().map(|value| self.store_loaded(key, value, ttl));
        single_flight(self as *const SharedCache as usize, key, lookup, load)
    }

    fn store_loaded(&self, key: &[u8], value: Vec<u8>, ttl: Duration) -> OwnedItem {
        // A store that panics (it should not) must not lose the value the waiters wait for.
        let stored = panic::catch_unwind(AssertUnwindSafe(|| {
            self.store_with(key, &value, 0, ttl, Mode::Set, StoreOptions::default()).ok()
        }))
        .ok()
        .flatten();
        OwnedItem::loaded(value, ttl, stored)
    }

    /// The cursor range of [`SharedCache::scan_with`]: every shard's primary buckets.
    ///
    /// ```
    /// use segcache_core::Builder;
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(4).hash_power(8).build_shared()?;
    /// assert_eq!(cache.scan_len(), 4 * 256);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn scan_len(&self) -> u64 {
        self.shard_count() as u64 * self.per_shard()
    }

    fn per_shard(&self) -> u64 {
        self.shard_at(0).read().scan_len()
    }

    /// One step of a key scan from `cursor` (0 to start), as [`Segcache::scan_with`]: `f` sees
    /// every live item of the chains read, and the next cursor comes back, 0 once every shard
    /// is done. Each step takes one shard's lock exclusively while it reads at least `count`
    /// items' chains (and never more than one shard), so a scan never holds a lock between
    /// steps and a step holds up that shard's writers and lock-free readers only briefly;
    /// `f` runs under that lock, so keep it short. The exclusive lock keeps out rewrites in
    /// place too, so the values and CAS values `f` sees are whole.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(4).build_shared()?;
    /// for i in 0..100 {
    ///     cache.set(format!("k{i}").as_bytes(), b"v", 0, Duration::ZERO)?;
    /// }
    /// let (mut cursor, mut seen) = (0, 0);
    /// loop {
    ///     cursor = cache.scan_with(cursor, 10, |_item| seen += 1);
    ///     if cursor == 0 {
    ///         break;
    ///     }
    /// }
    /// assert_eq!(seen, 100);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn scan_with(&self, cursor: u64, count: usize, mut f: impl FnMut(Item<'_>)) -> u64 {
        if self.origin_forked() {
            return 0;
        }
        let per = self.per_shard();
        let (shard, bucket) = ((cursor / per) as usize, cursor % per);
        if shard >= self.shard_count() {
            return 0;
        }
        let engine = self.shard_at(shard).write();
        let next = engine.scan_with(bucket, count, &mut f);
        drop(engine);
        if next != 0 {
            shard as u64 * per + next
        } else if shard + 1 < self.shard_count() {
            (shard as u64 + 1) * per
        } else {
            0
        }
    }

    /// One step of a key scan (see [`SharedCache::scan_with`]): the keys read and the next cursor.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(4).build_shared()?;
    /// for i in 0..100 {
    ///     cache.set(format!("k{i}").as_bytes(), b"v", 0, Duration::ZERO)?;
    /// }
    /// let (mut cursor, mut keys) = (0, Vec::new());
    /// loop {
    ///     let (batch, next) = cache.scan(cursor, 16);
    ///     keys.extend(batch);
    ///     if next == 0 {
    ///         break;
    ///     }
    ///     cursor = next;
    /// }
    /// assert_eq!(keys.len(), 100);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn scan(&self, cursor: u64, count: usize) -> (Vec<Vec<u8>>, u64) {
        let mut keys = Vec::new();
        let next = self.scan_with(cursor, count, |item| keys.push(item.key().to_vec()));
        (keys, next)
    }

    /// Bytes of the hash tables (every shard's primary and overflow buckets), and log2 of the
    /// primary buckets of all shards together: memcached's `hash_bytes` and `hash_power_level`.
    ///
    /// ```
    /// use segcache_core::Builder;
    /// let cache = Builder::new().heap_size(16 << 20).segment_size(256 << 10).shards(4).hash_power(8).build_shared()?;
    /// let (bytes, power) = cache.table_size();
    /// assert_eq!(power, 10); // 4 shards of 2^8 primary buckets
    /// assert!(bytes >= 4 * 256 * 64); // 64-byte buckets, overflow pool included
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn table_size(&self) -> (u64, u32) {
        let engine = self.shard_at(0).read();
        let bytes = engine.geo.table_len() as u64 * self.shard_count() as u64;
        (bytes, self.scan_len().max(1).ilog2())
    }
}

/// Reads (as `ReadCounters::totals`) and stores counted in a shard's reader slots.
fn slot_counts(shard: &ShardLock<Segcache>) -> ([u64; 4], u64) {
    use std::sync::atomic::Ordering::Relaxed;
    shard.slots().iter().fold(([0; 4], 0), |(mut reads, sets), s| {
        let c = &s.counters;
        for (r, n) in reads.iter_mut().zip(c.reads.totals()) {
            *r += n;
        }
        (reads, sets + c.sets.load(Relaxed))
    })
}

/// Hands a lock-free read's result (a hit or a miss) to `f`, counting it in `counters`.
#[inline(always)]
fn deliver<R>(
    p: Peeked,
    buf: &PeekBuf,
    counters: &ReadCounters,
    h: u64,
    opts: &ReadOptions,
    f: impl FnOnce(Item<'_>) -> R,
) -> Option<R> {
    match p {
        Peeked::Hit { found, at, header, cas, expire_at, now, access, created } => {
            let coin = bump(&counters.hits);
            if !opts.no_update {
                Table::bump_freq_unlocked(found.slot, found.value, coin ^ h);
            }
            let state = peek::state(found.value, &header, access, created);
            // SAFETY: a hit's record, as `peek` copied it.
            Some(f(unsafe { peek::item_in(buf, at, header, cas, expire_at, now, state) }))
        }
        Peeked::Gone(why) => {
            counters.miss(Some(why));
            None
        }
        _ => {
            counters.miss(None);
            None
        }
    }
}

impl Drop for SharedCache {
    /// Moves the reads counted in reader slots into each engine's own counters, which a
    /// file-backed cache keeps across a restart. A process sharing the cache with others first
    /// finds out whether it is the last to leave: only the last moves the counts (the slots are
    /// everybody's), and its engines and region, dropped next, close the file cleanly.
    fn drop(&mut self) {
        if let Some(t) = self.toucher.take() {
            t.stop();
        }
        if self.origin.forked() {
            return;
        }
        if let Some(sharing) = self.region.file.as_ref().and_then(|f| f.sharing.as_ref()) {
            sharing.leave();
            if !sharing.is_last() {
                return;
            }
        }
        for shard in self.shards.iter_mut() {
            let (reads, sets) = slot_counts(shard);
            shard.get_mut().count_slots(reads, sets);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    /// `at` indexes the shards and their views unchecked, modulo their count: with every shard
    /// count a cache may have, each key is stored, read lock-free, read under the lock and
    /// deleted in its own shard, and every shard holds some.
    #[test]
    fn every_shard_of_every_count_serves_its_keys() {
        for shards in [1, 2, 4, 16, 64] {
            let heap = (shards * (2 << 20)).max(16 << 20);
            let c = Builder::new().heap_size(heap).segment_size(256 << 10).shards(shards).build_shared().unwrap();
            assert_eq!(c.shard_count(), shards);
            let key = |i: u32| format!("key-{i}").into_bytes();
            let n = 40 * shards as u32;
            for i in 0..n {
                c.set(&key(i), &i.to_le_bytes(), 0, Duration::ZERO).unwrap();
            }
            let mut used = vec![0; shards];
            for i in 0..n {
                used[c.index(&key(i)).1] += 1;
                assert_eq!(c.get_with(&key(i), |item| item.value().to_vec()), Some(i.to_le_bytes().to_vec()));
                // A read that claims a token takes the lock.
                let claim = ReadOptions { claim_token: true, ..ReadOptions::default() };
                assert_eq!(c.get_with_options(&key(i), claim, |item| item.value().len()), Some(4));
            }
            assert!(used.iter().all(|&u| u > 0), "{shards} shards: {used:?}");
            for i in 0..n {
                c.delete(&key(i)).unwrap();
                assert!(c.get(&key(i)).is_none());
            }
        }
    }

    /// A lock-free get answers a miss from its chain's summary alone, with no sequence number to
    /// validate it: right only if no write leaves a present key's bit clear, even for a moment.
    /// Keys that stay stored are read, without one miss, while a writer churns other keys
    /// through the same few chains: growing them into overflow buckets, compacting them as keys
    /// leave, and so refreshing their summaries.
    #[test]
    fn keys_that_stay_are_never_missed_while_their_chains_churn() {
        let c = Arc::new(
            Builder::new()
                .heap_size(16 << 20)
                .segment_size(64 << 10)
                .shards(1)
                .hash_power(4)
                .eviction(crate::eviction::policy::Policy::None)
                .build_shared()
                .unwrap(),
        );
        let stay = |i: u32| format!("stay-{i:04}").into_bytes();
        for i in 0..40 {
            c.set(&stay(i), b"stays", 0, Duration::ZERO).unwrap();
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (c, done) = (Arc::clone(&c), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) || reads < 1000 {
                        let i = (reads as u32 * 7 + r) % 40;
                        assert_eq!(c.get_with(&stay(i), |item| item.value().len()), Some(5), "key {i} missed");
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let churn = |i: u32| format!("churn-{i:06}").into_bytes();
        let mut overflowed = false;
        for i in 0..100_000u32 {
            c.set(&churn(i), b"passing", 0, Duration::ZERO).unwrap();
            if i >= 100 {
                c.delete(&churn(i - 100)).unwrap();
            }
            overflowed |= i % 1000 == 0 && c.stats().overflow_buckets > 0;
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(overflowed, "the churn grew chains into overflow buckets");
        assert!(reads >= 2000);
        assert!((0..40).all(|i| c.contains(&stay(i))));
    }

    /// `set` sends a key that its chain's tags say is absent straight to the exclusive lock;
    /// a present key must still be rewritten in place under the shared lock, also in chains
    /// that span overflow buckets and whose summary lets most tags through.
    #[test]
    fn present_keys_in_long_chains_are_still_rewritten_under_the_shared_lock() {
        // One shard, 16 chains (and 16 overflow buckets): 150 items put about 9 in each.
        let c = Builder::new()
            .heap_size(4 << 20)
            .segment_size(64 << 10)
            .shards(1)
            .hash_power(4)
            .clock(ManualClock::new(1_700_000_000))
            .build_shared()
            .unwrap();
        let key = |i: u32| format!("key-{i:06}");
        let n = 150;
        for i in 0..n {
            c.set(key(i).as_bytes(), b"value-0", 0, Duration::ZERO).unwrap();
        }
        let s = c.stats();
        assert_eq!((s.items, s.evicted_items), (n as u64, 0));
        assert!(s.overflow_buckets > 0, "some chains span overflow buckets");
        let before = c.shards[0].writes();
        for i in 0..n {
            c.set(key(i).as_bytes(), b"value-1", 0, Duration::ZERO).unwrap();
        }
        assert_eq!(c.shards[0].writes(), before, "every rewrite of a present key took the shared lock");
        assert!((0..n).all(|i| c.get(key(i).as_bytes()).unwrap().value == b"value-1"));
        // New keys take the exclusive lock (their tags are in no slot of their chain).
        for i in n..n + 10 {
            c.set(key(i).as_bytes(), b"value-2", 0, Duration::ZERO).unwrap();
        }
        assert_eq!(c.shards[0].writes(), before + 10);
        assert!((n..n + 10).all(|i| c.get(key(i).as_bytes()).unwrap().value == b"value-2"));
    }
}
