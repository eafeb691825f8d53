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
//!   and neither waits for writers nor makes them wait. Larger items, `get_many` and `contains`
//!   take the shard's lock shared: any number of threads read one shard at once. The lock
//!   ([`crate::shared::lock::ShardLock`]) counts each thread's readers on a cache line of that thread's
//!   own, so those reads on different cores scale without passing a lock word between them; the
//!   price is a writer that checks every reader slot (twice the cores) before it goes on, and a
//!   slot that lock-free reads leave untouched costs it no cache miss. Hits and misses are counted
//!   in the reader's slot, on a line of their own. The frequency counter that eviction uses is
//!   raised only now and then once it is high, so hot keys rarely write their slot: with a plain
//!   store under the lock, with a compare-and-swap without it (the slot may have been reused);
//!   concurrent readers may lose an increment, which only makes that counter approximate.
//! - A `set` of an existing key whose record keeps its length (the same key, flags present or
//!   not as before, a value of the same length) and whose segment's expiry suits the new TTL is
//!   rewritten in place ([`crate::engine::rewrite`]) under the shard's lock taken *shared*, with the lock
//!   bit of the key's hash chain keeping out other rewrites of that chain. It writes no line but
//!   the chain's bucket and the record, so two cores rewriting keys of one shard do not pass the
//!   shard's lock line between them (50:50 on two threads: 1.7x one thread's throughput, against
//!   1.4-1.5x when every set took the lock exclusively). Lock-free reads check the chain's info
//!   word as well as the shard's sequence number; reads under the shared lock copy small items
//!   the same way, since a rewrite may run beside them. Not with a file (see `rewrite`).
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
//!   least 16 segments (`config::MIN_SHARD_SEGMENTS`).
//! - Hot keys: one key always maps to one shard. Reads of it proceed in parallel without
//!   writing shared lines; writes to a hot key serialise on its chain (rewrites in place) or its
//!   shard (everything else), as they must for CAS, and each one moves the key's bucket and
//!   record (and for an exclusive write, the shard's lock) between the cores that use it.
//! - Eviction and expiry are per shard, so a shard evicts by its own policy view; with keys spread
//!   evenly this approximates the global policy.

use std::mem::MaybeUninit;
use std::time::Duration;

use crate::engine::memory::prefetch;
use crate::engine::meta::{bump, ReadCounters};
use crate::engine::read::{access_due, token_due, ReadOptions};
use crate::engine::write::{Mode, StoreOptions};
use crate::fork::Origin;
use crate::hash::{hash, shard_of};
use crate::hashtable::bucket::Bucket;
use crate::hashtable::table::Table;
use crate::shared::lock::{self, ShardLock};
use crate::shared::peek::{self, PeekBuf, Peeked, ShardView, PEEK_WORDS};
use crate::{Builder, Item, OwnedItem, RemovalListener, Result, RmwOptions, Segcache, Stats};

/// A cache handle that is `Send + Sync`: share it with `Arc` (or `&`) between threads.
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
}

/// Lock-free read attempts that a writer may overlap before the reader takes the lock: after two
/// in a row, the shard is busy with writes.
const PEEK_TRIES: u32 = 2;

impl SharedCache {
    /// A [`Builder`] with every setting at its default.
    pub fn builder() -> Builder {
        Builder::new()
    }

    pub(crate) fn from_engines(engines: Vec<Segcache>) -> Self {
        let slots = lock::default_slots();
        let views = engines.iter().map(ShardView::of).collect();
        let origin = engines[0].origin;
        SharedCache { shards: engines.into_iter().map(|e| ShardLock::new(e, slots)).collect(), views, origin }
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
        prefetch(self.views[i].table().head(h) as *const Bucket as *const u8);
        (h, i)
    }
    #[inline]
    fn shard(&self, key: &[u8]) -> &ShardLock<Segcache> {
        &self.shards[self.locate(key).1]
    }

    /// [`Error::Forked`](crate::Error::Forked) when this process is a `fork()` child of the one
    /// that opened the cache: there, reads miss and every write fails with that error.
    #[inline]
    pub fn check_fork(&self) -> Result<()> {
        self.origin.check()
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Shard `i`'s lock (for scans that visit the shards in turn).
    pub(crate) fn shard_at(&self, i: usize) -> &ShardLock<Segcache> {
        &self.shards[i]
    }

    /// Whether this process is a `fork()` child of the one that opened the cache.
    pub(crate) fn origin_forked(&self) -> bool {
        self.origin.forked()
    }

    /// The cache clock's current time, Unix seconds.
    pub fn now(&self) -> u32 {
        self.shards[0].read().now()
    }

    /// Copies the item out (see `get_with`).
    pub fn get(&self, key: &[u8]) -> Option<OwnedItem> {
        self.get_with(key, |i| i.to_owned())
    }

    /// Runs `f` on the item. An item of up to 512 bytes is copied to the stack by a read that
    /// takes no lock (validated against the shard's writers, and done again if one ran); a
    /// larger one is handed to `f` without a copy, under the shard's read lock: keep `f` short
    /// then, as writers to this shard wait for it.
    #[inline]
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
        self.get_with_options(key, ReadOptions::default(), f)
    }

    /// `get_with`, with `opts` for the item's state (see [`Segcache::get_with_options`]). A read
    /// that changes a record (takes a recache token, or refreshes an access time, at most once a
    /// minute per item) takes the shard's read lock; the fetched bit is set without it.
    #[inline]
    pub fn get_with_options<R>(&self, key: &[u8], opts: ReadOptions, f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
        if self.origin.forked() {
            return None;
        }
        let (h, i) = self.locate(key);
        let (shard, view) = (&self.shards[i], &self.views[i]);
        let mut buf: PeekBuf = [MaybeUninit::uninit(); PEEK_WORDS];
        if view.enabled() {
            let counters = &shard.own_slot().counters.reads;
            match shard.read_optimistic(PEEK_TRIES, || view.peek(key, h, &mut buf)) {
                Some(Peeked::Locked | Peeked::Busy) | None => {}
                Some(Peeked::Hit { expire_at, now, state, .. })
                    if token_due(&opts, &state, expire_at, now)
                        || (!opts.no_update && access_due(state.last_access, now)) => {}
                Some(p) => return deliver(p, &buf, counters, h, &opts, f),
            }
        }
        self.get_locked(i, key, h, &mut buf, &opts, f)
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
        opts: &ReadOptions,
        f: impl FnOnce(Item<'_>) -> R,
    ) -> Option<R> {
        let (shard, view) = (&self.shards[i], &self.views[i]);
        let engine = shard.read();
        view.mark_checked(&engine);
        let counters = &engine.slot().counters.reads;
        // Rewrites in place may run beside this reader: it copies small items as `peek` does.
        if view.rewrites() {
            match view.peek_settled(key, h, buf) {
                Peeked::Locked => {}
                Peeked::Hit { found, at, header, cas, expire_at, now, mut state } => {
                    // Under the read lock the record stays where it is: its state may change.
                    let coin = bump(&counters.hits);
                    engine.note_read(found, &mut state, expire_at, now, opts, coin ^ h);
                    return Some(f(peek::item_in(buf, at, header, cas, expire_at, now, state)));
                }
                p => return deliver(p, buf, counters, h, opts, f),
            }
        }
        engine.get_with_options_in(key, h, counters, opts).map(f)
    }

    /// Copies the value into `buf` (cleared first); returns the item's metadata with an empty
    /// value, or `None` on a miss. Reusing `buf` avoids an allocation per read.
    pub fn get_into(&self, key: &[u8], buf: &mut Vec<u8>) -> Option<OwnedItem> {
        self.get_with(key, |item| {
            buf.clear();
            buf.extend_from_slice(item.value());
            OwnedItem { value: Vec::new(), flags: item.flags(), cas: item.cas(), ttl: item.ttl() }
        })
    }

    /// Whether the key is present (and not expired).
    pub fn contains(&self, key: &[u8]) -> bool {
        if self.origin.forked() {
            return false;
        }
        self.shard(key).read().contains(key)
    }

    /// Looks up every key; calls `f(index, item)` for each hit. Without a file, each key is read
    /// as `get_with` reads it, after every key's bucket has been prefetched. With one, keys are
    /// grouped by shard so that each shard's read lock is taken once and the engine can overlap
    /// the memory accesses of the keys in one shard (`f` then runs under that lock).
    pub fn get_many_with(&self, keys: &[&[u8]], mut f: impl FnMut(usize, Item<'_>)) {
        if self.origin.forked() {
            return;
        }
        // Every shard lies in one region, so they all rewrite in place or none does.
        if self.views[0].rewrites() {
            // Rewrites in place may run beside readers that hold the lock, so small items are
            // copied: one lock-free read per key, with every bucket fetched first.
            for &k in keys {
                let (h, i) = self.locate(k);
                prefetch(self.views[i].table().head(h) as *const Bucket as *const u8);
            }
            for (i, k) in keys.iter().enumerate() {
                self.get_with(k, |item| f(i, item));
            }
            return;
        }
        if self.shards.len() == 1 {
            let engine = self.shards[0].read();
            engine.get_many_counted_in(keys, &engine.slot().counters.reads, &mut f);
            return;
        }
        let mut order: Vec<(usize, usize)> =
            keys.iter().enumerate().map(|(i, k)| (shard_of(hash(k), self.shards.len()), i)).collect();
        order.sort_unstable();
        let mut sub: Vec<&[u8]> = Vec::with_capacity(keys.len());
        let mut idx: Vec<usize> = Vec::with_capacity(keys.len());
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
            engine.get_many_counted_in(&sub, &engine.slot().counters.reads, |j, item| f(idx[j], item));
            start = end;
        }
    }

    /// Copies out every hit; `None` for misses, in the order of `keys`.
    pub fn get_many(&self, keys: &[&[u8]]) -> Vec<Option<OwnedItem>> {
        let mut out = vec![None; keys.len()];
        self.get_many_with(keys, |i, item| out[i] = Some(item.to_owned()));
        out
    }

    /// Stores the item, replacing any other under `key` (`ttl` of zero: never expires).
    pub fn set(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, value, flags, ttl, Mode::Set).map(drop)
    }
    /// Stores the item only if `key` is absent ([`Error::NotStored`](crate::Error::NotStored) otherwise).
    pub fn add(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, value, flags, ttl, Mode::Add).map(drop)
    }
    /// Stores the item only if `key` is present ([`Error::NotStored`](crate::Error::NotStored) otherwise).
    pub fn replace(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, value, flags, ttl, Mode::Replace).map(drop)
    }
    /// Stores only if the item's CAS value is still `cas` ([`Error::Exists`](crate::Error::Exists) if it
    /// changed, [`Error::NotFound`](crate::Error::NotFound) if absent).
    pub fn cas(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration, cas: u64) -> Result<()> {
        self.store(key, value, flags, ttl, Mode::Cas(cas)).map(drop)
    }
    /// Stores as `mode` requires, with `opts` for the item's state and CAS value; returns the
    /// CAS value it got (see [`Segcache::store_with`]).
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
        self.origin.check()?;
        self.shard(key).write().store_with(key, value, flags, ttl, mode, opts)
    }
    /// Removes the key if its CAS value is `cas` (see [`Segcache::delete_cas`]).
    pub fn delete_cas(&self, key: &[u8], cas: u64) -> Result<()> {
        self.origin.check()?;
        self.shard(key).write().delete_cas(key, cas)
    }
    /// Marks the item stale (see [`Segcache::invalidate`]); returns its new CAS value.
    pub fn invalidate(&self, key: &[u8], ttl: Option<Duration>, compare: Option<u64>, cas: Option<u64>) -> Result<u64> {
        self.origin.check()?;
        self.shard(key).write().invalidate(key, ttl, compare, cas)
    }
    /// The key is hashed once, for its shard and its bucket. A `set` of an existing key whose
    /// record keeps its length is first tried in place under the shared lock
    /// (`Segcache::rewrite_shared`), which leaves the shard's lock line alone.
    #[inline]
    fn store(&self, key: &[u8], value: &[u8], flags: u32, ttl: Duration, mode: Mode) -> Result<u64> {
        self.origin.check()?;
        let (h, i) = self.index(key);
        let (shard, view) = (&self.shards[i], &self.views[i]);
        let secs = crate::ttl_buckets::expire::ttl_secs(ttl);
        // A new key skips the shared lock: the summary and then the chain's tags, read without a
        // lock, are only a hint, and the exclusive path is complete on its own when it is stale.
        // The summary alone passes about half the new keys once chains are full (one bit of 8 per
        // item), and each then paid a read lock, a chain lock and a chain walk for nothing.
        if mode == Mode::Set && view.rewrites() && view.table().may_hold(h) {
            // Every line the exclusive path needs is fetched while the tags are compared.
            view.prefetch_store(h, secs);
            if view.table().may_hold_tag(h) {
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
    pub fn append(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.origin.check()?;
        self.shard(key).write().append(key, value)
    }
    /// Prepends to the value, keeping flags and expiry ([`Error::NotStored`](crate::Error::NotStored) if absent).
    pub fn prepend(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.origin.check()?;
        self.shard(key).write().prepend(key, value)
    }
    /// Adds `delta` to a decimal value, wrapping at 2^64; returns the new value.
    pub fn incr(&self, key: &[u8], delta: u64) -> Result<u64> {
        self.origin.check()?;
        self.shard(key).write().incr(key, delta)
    }
    /// Subtracts `delta` from a decimal value, stopping at 0; returns the new value.
    pub fn decr(&self, key: &[u8], delta: u64) -> Result<u64> {
        self.origin.check()?;
        self.shard(key).write().decr(key, delta)
    }
    /// `incr` or `decr`, also telling whether the result outgrew the old value (see
    /// [`Segcache::add_delta`]).
    pub fn add_delta(&self, key: &[u8], incr: bool, delta: u64) -> Result<crate::Delta> {
        self.origin.check()?;
        self.shard(key).write().add_delta(key, incr, delta)
    }
    /// Sets (or with `None` removes) the function told of each item that expires or is evicted
    /// (see [`Builder::eviction_listener`]).
    pub fn set_eviction_listener(&self, listener: Option<RemovalListener>) {
        for s in self.shards.iter() {
            s.write().set_eviction_listener(listener.clone());
        }
    }
    /// `append` under `opts`; returns the CAS value the item took (see
    /// [`Segcache::append_with`]).
    pub fn append_with(&self, key: &[u8], value: &[u8], opts: RmwOptions<'_>) -> Result<u64> {
        self.origin.check()?;
        self.shard(key).write().append_with(key, value, opts)
    }
    /// `prepend` under `opts`; returns the CAS value the item took (see
    /// [`Segcache::prepend_with`]).
    pub fn prepend_with(&self, key: &[u8], value: &[u8], opts: RmwOptions<'_>) -> Result<u64> {
        self.origin.check()?;
        self.shard(key).write().prepend_with(key, value, opts)
    }
    /// `add_delta` under `opts` (see [`Segcache::add_delta_with`]).
    pub fn add_delta_with(&self, key: &[u8], incr: bool, delta: u64, opts: RmwOptions<'_>) -> Result<crate::Delta> {
        self.origin.check()?;
        self.shard(key).write().add_delta_with(key, incr, delta, opts)
    }
    /// Removes the key ([`Error::NotFound`](crate::Error::NotFound) if absent).
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.origin.check()?;
        self.shard(key).write().delete(key)
    }
    /// Sets a new TTL ([`Error::NotFound`](crate::Error::NotFound) if absent); the CAS value stays.
    pub fn touch(&self, key: &[u8], ttl: Duration) -> Result<()> {
        self.origin.check()?;
        self.shard(key).write().touch(key, ttl)
    }
    /// Sets a new TTL without counting as an access (see [`Segcache::set_ttl`]).
    pub fn set_ttl(&self, key: &[u8], ttl: Duration) -> Result<()> {
        self.origin.check()?;
        self.shard(key).write().set_ttl(key, ttl)
    }
    /// Reads the item and sets its TTL in one step (memcached `gat`).
    pub fn get_and_touch(&self, key: &[u8], ttl: Duration) -> Option<OwnedItem> {
        if self.origin.forked() {
            return None;
        }
        let mut engine = self.shard(key).write();
        engine.touch(key, ttl).ok()?;
        engine.get(key).map(|i| i.to_owned())
    }

    /// Limits the heap the cache uses to `bytes` (split evenly over the shards; see
    /// [`Segcache::set_memory_limit`]), or lifts the limit up to the whole heap.
    pub fn set_memory_limit(&self, bytes: usize) -> Result<()> {
        self.origin.check()?;
        let per_shard = bytes / self.shards.len();
        if per_shard > self.shards[0].read().geo.heap_len() {
            return Err(crate::Error::InvalidConfig(format!("memory limit {bytes} is more than the heap")));
        }
        for s in self.shards.iter() {
            s.write().set_memory_limit(per_shard)?;
        }
        Ok(())
    }

    /// The heap the cache may use now (see [`SharedCache::set_memory_limit`]).
    pub fn memory_limit(&self) -> usize {
        self.shards.iter().map(|s| s.read().memory_limit()).sum()
    }

    /// Removes every item now.
    pub fn flush(&self) {
        if self.origin.forked() {
            return;
        }
        for s in self.shards.iter() {
            s.write().flush();
        }
    }
    /// Removes every item stored before `delay` from now, at that time.
    pub fn flush_after(&self, delay: Duration) {
        if self.origin.forked() {
            return;
        }
        for s in self.shards.iter() {
            s.write().flush_after(delay);
        }
    }
    /// Frees expired segments in every shard; returns the number of items removed.
    pub fn expire(&self) -> usize {
        if self.origin.forked() {
            return 0;
        }
        self.shards.iter().map(|s| s.write().expire()).sum()
    }

    /// Counters summed over the shards. Each shard's counters are read under its read lock,
    /// one shard at a time, so readers and writers elsewhere are not held up.
    pub fn stats(&self) -> Stats {
        if self.origin.forked() {
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

    /// Live items.
    pub fn len(&self) -> usize {
        if self.origin.forked() {
            return 0;
        }
        self.shards.iter().map(|s| s.read().len()).sum()
    }
    /// Whether no item is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Graceful stop: with a persistence path, writes everything needed for a warm restart and
    /// marks the file clean. Dropping the cache does the same but cannot report an error.
    pub fn close(self) -> Result<()> {
        self.origin.check()?;
        let now = self.now();
        let region = std::sync::Arc::clone(&self.shards[0].read().mem.region);
        drop(self);
        crate::persist::file::close_last(region, now)
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
        Peeked::Hit { found, at, header, cas, expire_at, now, state } => {
            let coin = bump(&counters.hits);
            if !opts.no_update {
                Table::bump_freq_unlocked(found.slot, found.value, coin ^ h);
            }
            Some(f(peek::item_in(buf, at, header, cas, expire_at, now, state)))
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
    /// file-backed cache keeps across a restart.
    fn drop(&mut self) {
        for shard in self.shards.iter_mut() {
            let (reads, sets) = slot_counts(shard);
            shard.get_mut().count_slots(reads, sets);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ManualClock;

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
