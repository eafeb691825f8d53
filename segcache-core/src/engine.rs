//! `Segcache`: the single-owner engine over one shard of a region.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::config::MAX_KEY_LEN;
use crate::fork::Origin;
use crate::hash::hash;
use crate::layout::*;
use crate::record::{self, Record};
use crate::region::ShardMem;
use crate::table::{self, Loc, Table};
use crate::{ttl, Builder, Error, Item, Policy, Result, Stats};

/// The engine: one shard's segments, hash table and TTL buckets. Writes take `&mut self`; reads
/// take `&self` and may run in parallel (the frequency counters they bump are atomic).
pub struct Segcache {
    pub(crate) mem: ShardMem,
    pub(crate) geo: Geometry,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) policy: Policy,
    /// The shard's buckets (primary, then the overflow pool).
    buckets: &'static [Bucket],
    /// The tag summary of each chain (see `table`): in process memory, not in the region, since
    /// it is rebuilt on every open. Leaked from a `Box` so that tables can be `'static` like the
    /// buckets; `Drop` takes it back.
    summary: &'static [AtomicU8],
    /// S3-FIFO ghost: fingerprints of keys recently dropped from the small pool, direct-mapped.
    ghost: Vec<u32>,
    /// Holds an old value while its item is rewritten (append, incr, touch), since the rewrite
    /// may evict the segment it came from.
    scratch: Vec<u8>,
    /// File-backed: records carry the checksums that crash recovery checks. Anonymous memory
    /// does not outlive the process, so it skips them.
    pub(crate) durable: bool,
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
    pad_numbers: bool,
}

thread_local! {
    /// Live items of the segments being merged. One buffer per thread, not per engine: it grows
    /// to a few segments' worth of entries (about 1.2 MiB for 4 segments of 1 MiB holding 85-byte
    /// items), and a shared cache has many engines (its shards) but few threads writing at once.
    static MOVES: std::cell::Cell<Vec<Move>> = const { std::cell::Cell::new(Vec::new()) };
}

// SAFETY: the raw pointers in `mem` point into the region that `mem` keeps alive; all mutation
// goes through `&mut self`, except to atomics and `rewrite_shared`'s (see there).
unsafe impl Send for Segcache {}
// SAFETY: as above.
unsafe impl Sync for Segcache {}

/// Whether an item expiring at `expire_at` (0: never) may go to segment `s`, where `width` is the
/// width of the item's TTL bucket: it must not outlive its TTL, nor expire a width or more early.
pub(crate) fn expiry_fits(s: &SegHeader, expire_at: u32, width: u32) -> bool {
    if s.expire_at == 0 {
        expire_at == 0
    } else {
        expire_at >= s.expire_at && expire_at - s.expire_at < width
    }
}

/// Whether `later`'s items may share a merge with `first`'s in TTL bucket `b`: both never expire,
/// or `later` expires less than one bucket width after `first`.
fn same_expiry_window(first: &SegHeader, later: &SegHeader, b: usize) -> bool {
    (first.expire_at == 0) == (later.expire_at == 0)
        && later.expire_at.saturating_sub(first.expire_at) < ttl::width_of_bucket(b)
}

impl Drop for Segcache {
    /// A file-backed engine takes its segments' checksums for the next open (the region, once
    /// its last engine is gone, then seals the file: see `persist::close`).
    fn drop(&mut self) {
        if !self.origin.forked() && self.mem.region.file.as_ref().is_some_and(|f| f.active.load(Relaxed)) {
            self.seal_for_close();
        }
        let summary: &'static [AtomicU8] = std::mem::take(&mut self.summary);
        // SAFETY: `summary` came from `Box::leak` in `from_mem` and is released once, here; the
        // tables that borrowed it are temporaries of this engine's methods, all finished.
        drop(unsafe { Box::from_raw(summary as *const [AtomicU8] as *mut [AtomicU8]) });
    }
}

impl std::fmt::Debug for Segcache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segcache").field("geometry", &self.geo).field("policy", &self.policy).finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy)]
struct Move {
    loc: Loc,
    hash: u64,
    freq: u8,
    len: u32,
}

/// What a store requires of the key's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Set,
    Add,
    Replace,
    Cas(u64),
}

/// Segments merged at once by `Merge`. Two, not the paper's four: each merge then frees exactly
/// one segment, the one about to be written, instead of two of which one waits on the free list
/// (a segment per shard holding nothing; with 8 shards of 32 segments 3% of the heap), and
/// keeps a little more (the last destination is continued by the next merge, so the smaller
/// merges do not leave partly filled segments). Zipf bench, 64 MiB: 0.8920 -> 0.8922 unsharded,
/// 0.8837 -> 0.8852 with 4 shards, for as many items copied.
const MERGE_SOURCES: usize = 2;
/// Items ahead in a merge's moves whose buckets are prefetched.
const MOVE_AHEAD: usize = 8;
/// Segments promoted at once by `S3Fifo` (with 2, too little of the small pool's read items
/// would be kept: 0.79 against 0.86 on the Zipf bench).
const PROMOTE_SOURCES: usize = 4;

/// When an item stored at `now` with a TTL of `ttl` seconds expires (0: never).
pub(crate) fn expiry_of(ttl: u32, now: u32) -> u32 {
    if ttl == 0 {
        0
    } else {
        now.saturating_add(ttl::rounded(ttl))
    }
}

/// `TooLarge` when `old` joined with `added` under `key` would be over `max` (see `max_item_size`).
fn fits_joined(key: &[u8], old: &[u8], added: &[u8], max: usize) -> Result<()> {
    let size = key.len().saturating_add(old.len()).saturating_add(added.len());
    if size > max {
        return Err(Error::TooLarge { size, max });
    }
    Ok(())
}

pub(crate) fn ttl_secs(ttl: Duration) -> u32 {
    let s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    u32::try_from(s).unwrap_or(u32::MAX)
}

impl Segcache {
    /// A [`Builder`] with every setting at its default.
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// An engine over `mem`; `fresh` lays out empty structures, otherwise they are used as found
    /// (a reopened file, already validated or rebuilt).
    pub(crate) fn from_mem(mem: ShardMem, geo: Geometry, builder: &Builder, fresh: bool) -> Segcache {
        let n = geo.primary_buckets() + geo.overflow_buckets();
        // SAFETY: `mem.buckets` points at `n` buckets inside the region that `mem` keeps alive
        // for as long as this engine exists; buckets are atomics, so shared references are sound.
        let buckets: &'static [Bucket] = unsafe { std::slice::from_raw_parts(mem.buckets, n) };
        let summary: &'static [AtomicU8] = Box::leak((0..geo.primary_buckets()).map(|_| AtomicU8::new(0)).collect());
        let ghost_len = if builder.policy == Policy::S3Fifo {
            (geo.segments * geo.segment_size / 10 / 64).next_power_of_two().max(64)
        } else {
            0
        };
        let durable = mem.region.file.is_some();
        let origin = mem.region.origin;
        let (cas_stride, cas_offset) = (mem.region.layout.shards as u64, mem.index as u64);
        let mut engine = Segcache {
            durable,
            unchecked: None,
            cas_stride,
            cas_offset,
            mem,
            geo,
            clock: builder.clock.clone(),
            policy: builder.policy,
            pad_numbers: builder.pad_numbers,
            buckets,
            summary,
            ghost: vec![0; ghost_len],
            scratch: Vec::new(),
            origin,
        };
        // Metadata found in a file is left untouched until it is verified or rebuilt.
        if fresh {
            engine.reset(true);
        } else {
            engine.table().rebuild_summary();
        }
        engine
    }

    // ---- access to the shard's memory -------------------------------------------------------

    #[inline]
    pub(crate) fn table(&self) -> Table<'static> {
        Table { buckets: self.buckets, summary: self.summary, mask: self.geo.primary_buckets() as u64 - 1 }
    }
    #[inline]
    pub(crate) fn meta(&self) -> &ShardMeta {
        // SAFETY: points into the live region; see `Send`/`Sync` above.
        unsafe { &*self.mem.meta }
    }
    #[inline]
    pub(crate) fn meta_mut(&mut self) -> &mut ShardMeta {
        // SAFETY: as above, and `&mut self` makes this the only access.
        unsafe { &mut *self.mem.meta }
    }
    #[inline]
    pub(crate) fn seg(&self, id: u32) -> &SegHeader {
        assert!((id as usize) < self.geo.segments);
        // SAFETY: in bounds (checked), inside the live region.
        unsafe { &*self.mem.segs.add(id as usize) }
    }
    #[inline]
    pub(crate) fn seg_mut(&mut self, id: u32) -> &mut SegHeader {
        assert!((id as usize) < self.geo.segments);
        // SAFETY: in bounds (checked), and `&mut self` makes this the only access.
        unsafe { &mut *self.mem.segs.add(id as usize) }
    }
    #[inline]
    pub(crate) fn ttl_bucket(&self, b: usize) -> &TtlBucket {
        assert!(b < ttl::BUCKETS);
        // SAFETY: in bounds (checked), inside the live region.
        unsafe { &*self.mem.ttl.add(b) }
    }
    #[inline]
    pub(crate) fn ttl_bucket_mut(&mut self, b: usize) -> &mut TtlBucket {
        assert!(b < ttl::BUCKETS);
        // SAFETY: in bounds (checked), and `&mut self` makes this the only access.
        unsafe { &mut *self.mem.ttl.add(b) }
    }
    /// The written bytes of a segment.
    #[inline]
    pub(crate) fn seg_data(&self, id: u32) -> &[u8] {
        let len = (self.seg(id).write_offset as usize).min(self.geo.segment_size);
        // SAFETY: segment `id` (< segments, checked by `seg`) spans `segment_size` bytes of the
        // heap inside the live region; writers need `&mut self`, so nothing changes it meanwhile.
        unsafe { std::slice::from_raw_parts(self.mem.heap.add(id as usize * self.geo.segment_size), len) }
    }
    #[inline]
    pub(crate) fn seg_space(&mut self, id: u32) -> &mut [u8] {
        assert!((id as usize) < self.geo.segments);
        // SAFETY: in bounds (checked); `&mut self` makes this the only access to the heap.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.mem.heap.add(id as usize * self.geo.segment_size),
                self.geo.segment_size,
            )
        }
    }
    #[inline]
    pub(crate) fn record_at(&self, loc: Loc) -> Option<Record<'_>> {
        self.record(loc)
    }
    #[inline]
    fn record(&self, loc: Loc) -> Option<Record<'_>> {
        if loc.seg as usize >= self.geo.segments || !self.readable_segment(loc.seg) {
            return None;
        }
        record::parse(self.seg_data(loc.seg).get(loc.offset as usize..)?)
    }
    #[inline]
    pub(crate) fn key_at(&self, loc: Loc, key: &[u8]) -> bool {
        self.record(loc).is_some_and(|r| r.key == key)
    }

    /// [`Error::Forked`] when this process is a `fork()` child of the one that opened the cache:
    /// there, reads miss and every write fails with that error.
    #[inline]
    pub fn check_fork(&self) -> Result<()> {
        self.origin.check()
    }

    /// The cache clock, Unix seconds. Never earlier than the last expiry run (which every
    /// second's first write starts): a clock that steps back does not bring back what expired or
    /// was flushed.
    pub fn now(&self) -> u32 {
        self.clock.now().max(self.meta().last_expire)
    }

    /// Takes the shard's next CAS counter, for an item being stored or modified. The counter is
    /// 32 bits, stored in the record, and wraps after 2^32 modifications in a shard: only then
    /// can a value come back (a `cas` holding a token that old could match again).
    #[inline]
    pub(crate) fn next_cas(&self) -> u32 {
        self.meta().next_cas.fetch_add(1, Relaxed)
    }

    /// `next_cas` for a writer that holds the engine exclusively: no locked instruction.
    #[inline]
    fn next_cas_mut(&mut self) -> u32 {
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

    /// Largest item (key + value, without client flags) that fits in a segment.
    pub fn max_item_size(&self) -> usize {
        (self.geo.segment_size - record::HEADER_LEN - 4).min(record::MAX_VALUE_LEN)
    }

    // ---- reads ------------------------------------------------------------------------------

    #[inline]
    fn flushed(&self, now: u32) -> bool {
        flushed_by(self.meta().flush_at, now)
    }

    #[inline]
    fn live_expiry(&self, seg: u32, now: u32) -> Option<u32> {
        let exp = self.seg(seg).expire_at;
        live_until(exp, now).then_some(exp)
    }

    /// Looks the key up; `None` if absent, expired or flushed.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<Item<'_>> {
        self.get_counted_in(key, hash(key), &self.meta().reads)
    }

    /// `get` for a caller that has the key's hash and counts the read in its own `counters`
    /// (`SharedCache` counts in each reader's own slot, so a read writes no line another core uses).
    #[inline]
    pub(crate) fn get_counted_in(&self, key: &[u8], h: u64, counters: &ReadCounters) -> Option<Item<'_>> {
        match self.lookup_lazily(key, h) {
            Some((item, found)) => {
                let coin = bump(&counters.hits);
                Table::bump_freq(found.slot, found.value, coin ^ h);
                Some(item)
            }
            None => {
                bump(&counters.misses);
                None
            }
        }
    }

    #[inline]
    fn lookup(&self, key: &[u8], h: u64, now: u32) -> Option<(Item<'_>, table::Found<'static>)> {
        self.item_of(self.find_key(key, h)?, h, now)
    }

    /// `lookup`, reading the clock only once the key's slot is found: a miss needs no time.
    #[inline]
    fn lookup_lazily(&self, key: &[u8], h: u64) -> Option<(Item<'_>, table::Found<'static>)> {
        self.item_of(self.find_key(key, h)?, h, self.now())
    }

    /// The key's slot, whatever the item's expiry and any flush: needs no clock.
    #[inline]
    fn find_key(&self, key: &[u8], h: u64) -> Option<table::Found<'static>> {
        check_key(key).ok()?;
        self.table().find(h, |loc| self.key_at(loc, key))
    }

    /// The item in the key's slot `found`, unless it expired or was flushed.
    #[inline]
    pub(crate) fn item_of(
        &self,
        found: table::Found<'static>,
        _h: u64,
        now: u32,
    ) -> Option<(Item<'_>, table::Found<'static>)> {
        // A `fork()` child reads nothing: its parent may be writing a shared file meanwhile.
        if self.flushed(now) || self.origin.forked() {
            return None;
        }
        let loc = table::slot_loc(found.value);
        let expire_at = self.live_expiry(loc.seg, now)?;
        let r = self.record(loc)?;
        let cas = self.cas_of(r.cas);
        Some((Item { key: r.key, value: r.value, flags: r.client_flags, cas, expire_at, now }, found))
    }

    /// Whether the key is present; does not count as a read.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.lookup_lazily(key, hash(key)).is_some()
    }

    /// Where the key's record lies (segment id, byte offset), if present: for tests that check
    /// what a write moved. Not part of the stable API.
    #[doc(hidden)]
    pub fn record_location(&self, key: &[u8]) -> Option<(u32, u32)> {
        let loc = table::slot_loc(self.lookup_lazily(key, hash(key))?.1.value);
        Some((loc.seg, loc.offset))
    }

    /// Looks up many keys, calling `f(index, item)` for each hit. The buckets of a batch and then
    /// its items are prefetched before any is read, so the memory misses overlap.
    pub fn get_many_with<'a>(&'a self, keys: &[&[u8]], f: impl FnMut(usize, Item<'a>)) {
        self.get_many_counted_in(keys, &self.meta().reads, f)
    }

    /// `get_many_with` counting hits and misses in `counters` (see `get_counted_in`).
    pub(crate) fn get_many_counted_in<'a>(
        &'a self,
        keys: &[&[u8]],
        counters: &ReadCounters,
        mut f: impl FnMut(usize, Item<'a>),
    ) {
        const BATCH: usize = 16;
        let now = self.now();
        let t = self.table();
        let mut hashes = [0u64; BATCH];
        // The first slot whose tag matches: almost always the key's, so the last pass reads the
        // record there without scanning the chain again.
        let mut first_match: [Option<table::Found<'static>>; BATCH] = [None; BATCH];
        for (chunk_no, chunk) in keys.chunks(BATCH).enumerate() {
            for (h, k) in hashes.iter_mut().zip(chunk) {
                *h = hash(k);
                prefetch(t.head(*h) as *const Bucket as *const u8);
            }
            for (h, candidate) in hashes[..chunk.len()].iter().zip(&mut first_match) {
                let tag = table::tag_of(*h);
                *candidate = t.find(*h, |_| true).filter(|f| table::slot_tag(f.value) == tag);
                if let Some(found) = candidate {
                    let loc = table::slot_loc(found.value);
                    if (loc.seg as usize) < self.geo.segments {
                        // SAFETY: in-bounds address inside the heap; prefetch never faults.
                        let at = unsafe {
                            self.mem.heap.add(loc.seg as usize * self.geo.segment_size + loc.offset as usize)
                        };
                        prefetch(at);
                        // Small items straddle two lines more often than not.
                        prefetch(at.wrapping_add(64));
                    }
                }
            }
            for (i, k) in chunk.iter().enumerate() {
                let h = hashes[i];
                let hit = match first_match[i] {
                    Some(f) if self.key_at(table::slot_loc(f.value), k) => self.item_of(f, h, now),
                    _ => self.lookup(k, h, now),
                };
                match hit {
                    Some((item, found)) => {
                        let coin = bump(&counters.hits);
                        Table::bump_freq(found.slot, found.value, coin ^ h);
                        f(chunk_no * BATCH + i, item)
                    }
                    None => {
                        bump(&counters.misses);
                    }
                }
            }
        }
    }

    /// Looks up many keys; `None` for each miss, in the order of `keys`.
    pub fn get_many<'a>(&'a self, keys: &[&[u8]]) -> Vec<Option<Item<'a>>> {
        let mut out = vec![None; keys.len()];
        self.get_many_with(keys, |i, item| out[i] = Some(item));
        out
    }

    // ---- writes -----------------------------------------------------------------------------

    /// Stores the item, replacing any other under `key` (`ttl` of zero: never expires).
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Set)
    }
    /// Stores only if the key is absent (else [`Error::NotStored`]).
    pub fn add(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Add)
    }
    /// Stores only if the key is present (else [`Error::NotStored`]).
    pub fn replace(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Replace)
    }
    /// Stores only if the item's CAS value is still `cas` ([`Error::Exists`] if it changed,
    /// [`Error::NotFound`] if it is gone).
    pub fn cas(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration, cas: u64) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Cas(cas))
    }
    /// Appends to the value, keeping flags and expiry ([`Error::NotStored`] if absent).
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let max = self.joined_size_limit(key, value)?;
        self.rewrite(key, Error::NotStored, |old, out| {
            fits_joined(key, old, value, max)?;
            out.extend_from_slice(old);
            out.extend_from_slice(value);
            Ok(())
        })
        .map(drop)
    }
    /// Prepends to the value, keeping flags and expiry ([`Error::NotStored`] if absent).
    pub fn prepend(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let max = self.joined_size_limit(key, value)?;
        self.rewrite(key, Error::NotStored, |old, out| {
            fits_joined(key, old, value, max)?;
            out.extend_from_slice(value);
            out.extend_from_slice(old);
            Ok(())
        })
        .map(drop)
    }
    /// The largest item an append or prepend of `value` to `key` may make, or `TooLarge` when
    /// `value` alone is over it: checked before anything is copied, so that an oversized argument
    /// costs no allocation of its size.
    fn joined_size_limit(&self, key: &[u8], value: &[u8]) -> Result<usize> {
        let max = self.max_item_size();
        fits_joined(key, &[], value, max)?;
        Ok(max)
    }
    /// Adds `delta` to a decimal value, wrapping at 2^64; returns the new value.
    pub fn incr(&mut self, key: &[u8], delta: u64) -> Result<u64> {
        self.arith(key, |n| n.wrapping_add(delta))
    }
    /// Subtracts `delta` from a decimal value, stopping at 0; returns the new value.
    pub fn decr(&mut self, key: &[u8], delta: u64) -> Result<u64> {
        self.arith(key, |n| n.saturating_sub(delta))
    }
    /// Sets a new TTL ([`Error::NotFound`] if absent), keeping the value, flags and CAS value.
    ///
    /// An item's expiry is its segment's. If that segment's expiry suits the new TTL as it would
    /// suit an append (`expiry_fits`: not later than asked, less than a TTL bucket width
    /// earlier), nothing changes; otherwise the record moves once, copied heap to heap into the
    /// open segment of the new TTL's bucket, and is published like any append.
    pub fn touch(&mut self, key: &[u8], ttl: Duration) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_write();
        self.touch_at(key, hash(key), ttl_secs(ttl), now)
    }

    fn touch_at(&mut self, key: &[u8], h: u64, ttl: u32, now: u32) -> Result<()> {
        let Some((item, found)) = self.lookup(key, h, now) else {
            return Err(Error::NotFound);
        };
        let len = record::record_len(item.key.len(), item.value.len(), item.flags);
        let (expire_at, width) = (expiry_of(ttl, now), ttl::width_of(ttl));
        let seg = table::slot_loc(found.value).seg;
        if expiry_fits(self.seg(seg), expire_at, width) {
            return Ok(());
        }
        let pool = if self.policy == Policy::S3Fifo { self.seg(seg).pool } else { POOL_MAIN };
        let dest = self.segment_for(len, ttl, expire_at, pool, now)?;
        // Opening a segment may have evicted the record or moved it (a merge): look again.
        let Some(found) = self.find_key(key, h) else {
            return Ok(());
        };
        let old = table::slot_loc(found.value);
        debug_assert!(old.seg != dest && self.record(old).is_some_and(|r| r.len == len));
        let at = |seg: u32, offset: u32| seg as usize * self.geo.segment_size + offset as usize;
        let (from, to) = (at(old.seg, old.offset), at(dest, self.seg(dest).write_offset));
        // SAFETY: both ranges lie in the heap: the live record inside its segment (as parsed),
        // the destination at its segment's write offset, below its end (`segment_for` found room
        // for `len`). The record lies below its own segment's write offset, so the ranges do not
        // overlap (`copy` would allow it anyway); no reference to either is alive.
        unsafe { std::ptr::copy(self.mem.heap.add(from), self.mem.heap.add(to), len) };
        let new = self.write_record(dest, |_| {}, len);
        // Published as `store_at` publishes a replacement, so a crash keeps one of the copies.
        if self.durable {
            let meta = self.meta_mut();
            meta.intent_seg = new.seg;
            meta.intent_offset = new.offset;
        }
        self.kill(old);
        Table::relocate(found.slot, found.value, table::slot_freq(found.value), new);
        self.table().touch_info(h, now);
        if self.durable {
            self.meta_mut().intent_seg = NONE;
        }
        Ok(())
    }

    fn arith(&mut self, key: &[u8], op: impl FnOnce(u64) -> u64) -> Result<u64> {
        let (mut result, pad) = (0, self.pad_numbers);
        self.rewrite(key, Error::NotFound, |old, out| {
            let n = parse_decimal(old).ok_or(Error::NotNumeric)?;
            result = op(n);
            let mut buf = [0; 20];
            let digits = format_decimal(result, &mut buf);
            out.extend_from_slice(digits);
            if pad {
                // As memcached: a number that got shorter keeps the old length, padded with
                // spaces (memcached writes it in place; here too the record keeps its size).
                out.resize(old.len().max(digits.len()), b' ');
            }
            Ok(())
        })?;
        Ok(result)
    }

    fn rewrite(
        &mut self,
        key: &[u8],
        missing: Error,
        build: impl FnOnce(&[u8], &mut Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        self.rewrite_with_ttl(key, missing, None, build)
    }

    /// Reads the item, builds its new value in `scratch`, and stores it with the same flags and
    /// expiry (or a new TTL).
    fn rewrite_with_ttl(
        &mut self,
        key: &[u8],
        missing: Error,
        new_ttl: Option<u32>,
        build: impl FnOnce(&[u8], &mut Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_write();
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let h = hash(key);
        let (flags, expire_at) = match self.lookup(key, h, now) {
            None => {
                self.scratch = scratch;
                return Err(missing);
            }
            Some((item, _)) => {
                if let Err(e) = build(item.value, &mut scratch) {
                    self.scratch = scratch;
                    return Err(e);
                }
                (item.flags, item.expire_at)
            }
        };
        let ttl = match new_ttl {
            Some(t) => t,
            None if expire_at == 0 => 0,
            None => expire_at.saturating_sub(now).max(1),
        };
        let res = self.store_at(key, h, &[&scratch], flags, ttl, Mode::Set, now);
        self.scratch = scratch;
        res
    }

    /// Removes the key ([`Error::NotFound`] if absent).
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_write();
        let h = hash(key);
        let Some((_, found)) = self.lookup(key, h, now) else {
            return Err(Error::NotFound);
        };
        let loc = table::slot_loc(found.value);
        self.kill(loc);
        self.remove_slot(h, found.slot);
        self.table().touch_info(h, now);
        self.meta_mut().deletes += 1;
        Ok(())
    }

    /// `set`, `add`, `replace` or `cas` (by `mode`) for a caller that has the key's hash `h`
    /// (`SharedCache` hashes to choose the shard).
    #[inline]
    pub(crate) fn store_hashed(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[u8],
        flags: u32,
        ttl: Duration,
        mode: Mode,
    ) -> Result<()> {
        self.store(key, h, &[value], flags, ttl_secs(ttl), mode)
    }

    fn store(&mut self, key: &[u8], h: u64, value: &[&[u8]], flags: u32, ttl: u32, mode: Mode) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_write();
        self.store_at(key, h, value, flags, ttl, mode, now)
    }

    #[allow(clippy::too_many_arguments)]
    fn store_at(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[&[u8]],
        flags: u32,
        ttl: u32,
        mode: Mode,
        now: u32,
    ) -> Result<()> {
        let value_len: usize = value.iter().map(|v| v.len()).sum();
        let len = record::record_len(key.len(), value_len, flags);
        if len > self.geo.segment_size || value_len > record::MAX_VALUE_LEN {
            return Err(Error::TooLarge { size: key.len() + value_len, max: self.max_item_size() });
        }
        // The bucket's miss overlaps the append; the lookup after it finds the line in cache.
        prefetch(self.table().head(h) as *const Bucket as *const u8);
        // A plain set needs the current copy only to replace it, which the lookup after the
        // append does (S3-FIFO also wants its pool).
        let existing = if mode == Mode::Set && self.policy != Policy::S3Fifo {
            None
        } else {
            self.lookup(key, h, now).map(|(item, found)| (item.cas, found.value))
        };
        match (mode, existing) {
            (Mode::Add, Some(_)) | (Mode::Replace, None) => return Err(Error::NotStored),
            (Mode::Cas(_), None) => return Err(Error::NotFound),
            (Mode::Cas(c), Some((cas, _))) if c != cas => return Err(Error::Exists),
            _ => {}
        }
        // New keys go to S3-FIFO's small pool unless the ghost remembers them; rewrites stay put.
        let pool = match existing {
            _ if self.policy != Policy::S3Fifo => POOL_MAIN,
            Some((_, v)) => self.seg(table::slot_loc(v).seg).pool,
            None if self.ghost_hit(h) => POOL_MAIN,
            None => POOL_SMALL,
        };
        let expire_at = expiry_of(ttl, now);
        let cas = self.next_cas_mut();
        if self.overwrite_in_place(key, h, value, flags, cas, len, ttl, expire_at, now) {
            self.meta_mut().sets += 1;
            return Ok(());
        }
        let loc = self.append_record(key, value, flags, cas, len, ttl, expire_at, pool, now)?;
        // Appending may have evicted or moved the old copy: look it up again.
        let t = self.table();
        let old = t.find(h, |l| l != loc && self.key_at(l, key));
        // Only a file outlives a crash; the metadata line stays clean otherwise, since lock-free
        // readers on other cores read it (the flush time).
        if self.durable {
            let meta = self.meta_mut();
            meta.intent_seg = loc.seg;
            meta.intent_offset = loc.offset;
        }
        let freq = old.as_ref().map_or(0, |f| table::slot_freq(f.value));
        let new = table::pack(table::tag_of(h), freq, loc);
        match old {
            Some(f) => {
                self.kill(table::slot_loc(f.value));
                t.put(h, f.slot, new);
            }
            None => {
                let mut pool = self.meta().overflow;
                let slot = match t.empty_slot(h, &mut pool) {
                    Some(s) => s,
                    None => self.make_room_in_chain(h)?,
                };
                if pool != self.meta().overflow {
                    self.meta_mut().overflow = pool;
                }
                t.put(h, slot, new);
            }
        }
        t.touch_info(h, now);
        let durable = self.durable;
        let meta = self.meta_mut();
        if durable {
            meta.intent_seg = NONE;
        }
        meta.sets += 1;
        Ok(())
    }

    /// The chain is full and the overflow pool is spent: drop its least used item, unless
    /// eviction is off.
    fn make_room_in_chain(&mut self, h: u64) -> Result<&'static std::sync::atomic::AtomicU64> {
        if self.policy == Policy::None {
            return Err(Error::NoMemory);
        }
        let victim = self.table().least_used(h).ok_or(Error::NoMemory)?;
        self.kill(table::slot_loc(victim.value));
        self.meta_mut().evicted_items += 1;
        victim.slot.store(0, Relaxed);
        Ok(victim.slot)
    }

    /// Empties a slot, keeping its chain compact (see `Table::remove`).
    fn remove_slot(&mut self, h: u64, slot: &std::sync::atomic::AtomicU64) {
        let mut pool = self.meta().overflow;
        self.table().remove(h, slot, &mut pool);
        self.meta_mut().overflow = pool;
    }

    pub(crate) fn kill_at(&mut self, loc: Loc) {
        self.kill(loc)
    }

    /// Sets the record's dead bit without touching counts (it was never counted live).
    pub(crate) fn mark_dead_only(&mut self, loc: Loc) {
        let off = loc.offset as usize + record::FLAGS_BYTE;
        self.seg_space(loc.seg)[off] |= record::DEAD;
    }

    /// Counts a record as live in its segment and the shard.
    pub(crate) fn count_live(&mut self, seg: u32, len: u32) {
        let s = self.seg_mut(seg);
        s.live_items += 1;
        s.live_bytes += len;
        let m = self.meta_mut();
        m.items += 1;
        m.bytes += u64::from(len);
    }

    /// Marks the record at `loc` dead and takes it out of the live counts.
    fn kill(&mut self, loc: Loc) {
        let len = match self.record(loc) {
            Some(r) if !r.dead => r.len as u32,
            _ => return,
        };
        let off = loc.offset as usize + record::FLAGS_BYTE;
        self.seg_space(loc.seg)[off] |= record::DEAD;
        let s = self.seg_mut(loc.seg);
        s.live_items = s.live_items.saturating_sub(1);
        s.live_bytes = s.live_bytes.saturating_sub(len);
        let m = self.meta_mut();
        m.items = m.items.saturating_sub(1);
        m.bytes = m.bytes.saturating_sub(u64::from(len));
    }

    /// Appends a record to the open segment of its TTL bucket (and pool), opening a new segment
    /// when it is full or its expiry window has passed.
    #[allow(clippy::too_many_arguments)]
    fn append_record(
        &mut self,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        cas: u32,
        len: usize,
        ttl: u32,
        expire_at: u32,
        pool: u8,
        now: u32,
    ) -> Result<Loc> {
        let seg = self.segment_for(len, ttl, expire_at, pool, now)?;
        Ok(self.write_record(seg, |dst| record::write(dst, key, value, flags, cas), len))
    }

    /// The segment a record of `len` bytes expiring at `expire_at` goes to: the open segment of
    /// its TTL bucket (and pool), or a new one when that is full or its expiry window has passed.
    fn segment_for(&mut self, len: usize, ttl: u32, expire_at: u32, pool: u8, now: u32) -> Result<u32> {
        let b = ttl::bucket_of(ttl);
        let width = ttl::width_of(ttl);
        let open = self.ttl_bucket(b).open[pool as usize];
        let seg = if open != NONE && self.accepts(open, len, expire_at, width) {
            open
        } else {
            let id = self.alloc_segment()?;
            // Allocation may have evicted or merged away the old open segment.
            let open = self.ttl_bucket(b).open[pool as usize];
            if open != NONE && self.seg(open).state == SEG_OPEN {
                self.seg_mut(open).state = SEG_SEALED;
            }
            let seq = self.next_seq();
            *self.seg_mut(id) = SegHeader {
                seq,
                create_at: now,
                expire_at,
                ttl_bucket: b as u16,
                state: SEG_OPEN,
                pool,
                ..SegHeader::EMPTY
            };
            self.link_tail(b, id);
            self.ttl_bucket_mut(b).open[pool as usize] = id;
            if pool == POOL_SMALL {
                self.meta_mut().small_segments += 1;
            }
            id
        };
        Ok(seg)
    }

    fn accepts(&self, seg: u32, len: usize, expire_at: u32, width: u32) -> bool {
        let s = self.seg(seg);
        s.state == SEG_OPEN
            && s.write_offset as usize + len <= self.geo.segment_size
            && expiry_fits(s, expire_at, width)
    }

    /// Writes a record at the segment's write offset and publishes it: the bytes first, then the
    /// offset and the checksum, so that a crash leaves either the whole record or none.
    fn write_record(&mut self, seg: u32, fill: impl FnOnce(&mut [u8]), len: usize) -> Loc {
        let offset = self.seg(seg).write_offset as usize;
        let durable = self.durable;
        let space = self.seg_space(seg);
        // The next append writes just past this record: fetching those lines now keeps its
        // stores from waiting on memory. A shared cache's lock (a locked instruction) waits for
        // every earlier store to complete, so a store that misses would stall the next write.
        let next = offset + len;
        prefetch(space[next.min(space.len() - 1)..].as_ptr());
        prefetch(space[(next + 64).min(space.len() - 1)..].as_ptr());
        let dst = &mut space[offset..offset + len];
        fill(dst);
        let sum = if durable { record::checksum(dst) } else { 0 };
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
        let s = self.seg_mut(seg);
        s.write_offset = (offset + len) as u32;
        s.sum = s.sum.wrapping_add(sum);
        s.live_items += 1;
        s.live_bytes += len as u32;
        let m = self.meta_mut();
        m.items += 1;
        m.bytes += len as u64;
        Loc { seg, offset: offset as u32 }
    }

    fn next_seq(&mut self) -> u64 {
        let m = self.meta_mut();
        m.next_seq += 1;
        m.next_seq
    }

    // ---- segments and chains ----------------------------------------------------------------

    pub(crate) fn link_tail(&mut self, b: usize, id: u32) {
        let tail = self.ttl_bucket(b).tail;
        {
            let s = self.seg_mut(id);
            s.prev = tail;
            s.next = NONE;
        }
        if tail == NONE {
            self.ttl_bucket_mut(b).head = id;
        } else {
            self.seg_mut(tail).next = id;
        }
        let tb = self.ttl_bucket_mut(b);
        tb.tail = id;
        tb.segments += 1;
    }

    /// Puts `id` into the chain of bucket `b` right before `before` (or at the tail).
    fn link_before(&mut self, b: usize, id: u32, before: u32) {
        if before == NONE {
            return self.link_tail(b, id);
        }
        let prev = self.seg(before).prev;
        {
            let s = self.seg_mut(id);
            s.prev = prev;
            s.next = before;
        }
        self.seg_mut(before).prev = id;
        if prev == NONE {
            self.ttl_bucket_mut(b).head = id;
        } else {
            self.seg_mut(prev).next = id;
        }
        self.ttl_bucket_mut(b).segments += 1;
    }

    pub(crate) fn unlink(&mut self, id: u32) {
        let (prev, next, b, pool) = {
            let s = self.seg(id);
            (s.prev, s.next, s.ttl_bucket as usize, s.pool)
        };
        if prev == NONE {
            self.ttl_bucket_mut(b).head = next;
        } else {
            self.seg_mut(prev).next = next;
        }
        if next == NONE {
            self.ttl_bucket_mut(b).tail = prev;
        } else {
            self.seg_mut(next).prev = prev;
        }
        let tb = self.ttl_bucket_mut(b);
        tb.segments = tb.segments.saturating_sub(1);
        if tb.open[pool as usize] == id {
            tb.open[pool as usize] = NONE;
        }
        if pool == POOL_SMALL {
            let m = self.meta_mut();
            m.small_segments = m.small_segments.saturating_sub(1);
        }
    }

    pub(crate) fn push_free(&mut self, id: u32) {
        let head = self.meta().free_head;
        *self.seg_mut(id) = SegHeader { next: head, ..SegHeader::EMPTY };
        let m = self.meta_mut();
        m.free_head = id;
        m.free_count += 1;
    }

    fn pop_free(&mut self) -> Option<u32> {
        let id = self.meta().free_head;
        if id == NONE {
            return None;
        }
        let next = self.seg(id).next;
        let m = self.meta_mut();
        m.free_head = next;
        m.free_count -= 1;
        Some(id)
    }

    /// A free segment: from the free list, else by expiring, else by evicting.
    fn alloc_segment(&mut self) -> Result<u32> {
        if let Some(id) = self.pop_free() {
            return Ok(id);
        }
        if self.expire() > 0 || self.meta().free_head != NONE {
            if let Some(id) = self.pop_free() {
                return Ok(id);
            }
        }
        // Merges and promotions can free nothing when they keep everything; a bounded number of
        // rounds, then plain FIFO, which always frees a segment.
        for round in 0..=(2 * self.geo.segments) {
            if let Some(id) = self.pop_free() {
                return Ok(id);
            }
            if round == 2 * self.geo.segments {
                self.evict_simple(Policy::Fifo)?;
            } else {
                self.evict()?;
            }
        }
        self.pop_free().ok_or(Error::NoMemory)
    }

    /// Calls `f` with the location, key hash and length of every record of segment `id` that is
    /// not marked dead, in order. Segments scanned whole (eviction, expiry, recovery) are mostly
    /// old and out of cache, and a scan that waited on each record's line, then on its bucket,
    /// was bound by memory latency (73% of a merge's first pass went to each record's first
    /// byte). So the records are parsed in batches, with the segment's lines prefetched ahead of
    /// the parse, and each batch's buckets are prefetched before `f` sees the first of them.
    pub(crate) fn for_each_live(&mut self, id: u32, mut f: impl FnMut(&mut Self, Loc, u64, u32)) {
        const BATCH: usize = 16;
        /// Bytes ahead of the parse that are prefetched: a batch of typical records.
        const AHEAD: usize = 1024;
        let mut batch = [(Loc { seg: 0, offset: 0 }, 0u64, 0u32); BATCH];
        let mut off = 0usize;
        loop {
            let mut n = 0;
            let data = self.seg_data(id);
            while n < BATCH {
                prefetch(data.as_ptr().wrapping_add(off + AHEAD));
                let Some(r) = data.get(off..).and_then(record::parse) else { break };
                if !r.dead {
                    let h = hash(r.key);
                    prefetch(self.table().head(h) as *const Bucket as *const u8);
                    batch[n] = (Loc { seg: id, offset: off as u32 }, h, r.len as u32);
                    n += 1;
                }
                off += r.len;
            }
            for &(loc, h, len) in &batch[..n] {
                f(self, loc, h, len);
            }
            if n < BATCH {
                return;
            }
        }
    }

    /// Removes a segment's live items from the table and returns it to the free list.
    fn clear_segment(&mut self, id: u32, expired: bool) {
        let mut removed = 0u64;
        let t = self.table();
        self.for_each_live(id, |s, loc, h, _| {
            if let Some(f) = t.find_loc(h, loc) {
                s.remove_slot(h, f.slot);
                removed += 1;
            }
        });
        let (items, bytes) = {
            let s = self.seg(id);
            (u64::from(s.live_items), u64::from(s.live_bytes))
        };
        self.unlink(id);
        self.push_free(id);
        let m = self.meta_mut();
        m.items = m.items.saturating_sub(items);
        m.bytes = m.bytes.saturating_sub(bytes);
        if expired {
            m.expired_items += removed;
            m.expired_segments += 1;
        } else {
            m.evicted_items += removed;
            m.evicted_segments += 1;
        }
    }

    /// Frees every segment whose items have all expired, from the heads of the TTL chains.
    /// Returns the number of items removed. Writes call it at most once a second.
    pub fn expire(&mut self) -> usize {
        if self.origin.forked() {
            return 0;
        }
        self.finish_checks();
        let now = self.now();
        self.meta_mut().last_expire = now;
        let before = self.meta().expired_items;
        for b in 1..ttl::BUCKETS {
            loop {
                let head = self.ttl_bucket(b).head;
                if head == NONE {
                    break;
                }
                let exp = self.seg(head).expire_at;
                if exp == 0 || now < exp {
                    break;
                }
                self.clear_segment(head, true);
            }
        }
        (self.meta().expired_items - before) as usize
    }

    /// Start of every write: a due flush, and expiry once a second.
    fn prepare_write(&mut self) -> u32 {
        self.finish_checks();
        let now = self.now();
        if self.flushed(now) {
            self.reset(false);
            self.meta_mut().flushes += 1;
        }
        if now != self.meta().last_expire {
            self.expire();
        }
        now
    }

    // ---- eviction ---------------------------------------------------------------------------

    /// Frees at least one segment's worth of space, or fails with `NoMemory` when eviction is off.
    fn evict(&mut self) -> Result<()> {
        match self.policy {
            Policy::None => Err(Error::NoMemory),
            Policy::Merge => self.evict_merge(),
            Policy::S3Fifo => self.evict_s3fifo(),
            p => self.evict_simple(p),
        }
    }

    fn is_candidate(&self, id: u32, allow_open: bool) -> bool {
        let st = self.seg(id).state;
        st == SEG_SEALED || (allow_open && st == SEG_OPEN)
    }

    /// Picks and clears one segment by a simple policy. Sealed segments first; open ones only
    /// when nothing else is left.
    fn evict_simple(&mut self, policy: Policy) -> Result<()> {
        for allow_open in [false, true] {
            if let Some(id) = self.pick_victim(policy, allow_open) {
                self.clear_segment(id, false);
                return Ok(());
            }
        }
        Err(Error::NoMemory)
    }

    fn pick_victim(&mut self, policy: Policy, allow_open: bool) -> Option<u32> {
        let n = self.geo.segments as u32;
        match policy {
            Policy::Random => {
                for _ in 0..64 {
                    let id = (self.rand() % u64::from(n)) as u32;
                    if self.is_candidate(id, allow_open) {
                        return Some(id);
                    }
                }
                (0..n).find(|&id| self.is_candidate(id, allow_open))
            }
            Policy::RandomFifo => {
                let start = (self.rand() % ttl::BUCKETS as u64) as usize;
                (0..ttl::BUCKETS)
                    .map(|i| (start + i) % ttl::BUCKETS)
                    .flat_map(|b| self.chain_head_candidate(b, allow_open))
                    .next()
            }
            Policy::Cte => (0..ttl::BUCKETS)
                .flat_map(|b| self.chain_head_candidate(b, allow_open))
                .filter(|&id| self.seg(id).expire_at != 0)
                .min_by_key(|&id| self.seg(id).expire_at)
                .or_else(|| self.pick_victim(Policy::Fifo, allow_open)),
            Policy::Util => {
                (0..n).filter(|&id| self.is_candidate(id, allow_open)).min_by_key(|&id| self.seg(id).live_bytes)
            }
            // Fifo, and the fallback of the others.
            _ => (0..ttl::BUCKETS)
                .flat_map(|b| self.chain_head_candidate(b, allow_open))
                .min_by_key(|&id| self.seg(id).seq),
        }
    }

    /// The oldest evictable segment of a chain.
    fn chain_head_candidate(&self, b: usize, allow_open: bool) -> Option<u32> {
        let mut id = self.ttl_bucket(b).head;
        while id != NONE {
            if self.is_candidate(id, allow_open) {
                return Some(id);
            }
            id = self.seg(id).next;
        }
        None
    }

    fn rand(&mut self) -> u64 {
        // xorshift64*: eviction only needs cheap, decent randomness.
        let m = self.meta_mut();
        let mut x = m.rng | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        m.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Merge eviction (the Segcache paper): take `MERGE_SOURCES` neighbouring sealed segments of a
    /// TTL chain, where the chain's sweep stands, copy their most frequently read items into the
    /// previous merge's last destination and the spare segment, which take their place, and free
    /// the sources. Retained items have their counters halved.
    ///
    /// Before that, space that overwrites and deletes left dead is reclaimed without loss: if two
    /// neighbouring segments' live items fit in one, the emptiest such pair is merged, keeping
    /// all. Without this, a sweep that reaches segments still densely live (keys written once and
    /// never again) drops their least read items even while the heap holds dead space elsewhere.
    fn evict_merge(&mut self) -> Result<()> {
        if let Some((b, pair)) = self.lossless_pair() {
            if pair.contains(&self.ttl_bucket(b).merge_next) {
                self.ttl_bucket_mut(b).merge_next = self.seg(pair[1]).next;
            }
            return self.compact(&pair, 0, POOL_MAIN, None);
        }
        let start = self.meta().merge_cursor as usize;
        for i in 0..ttl::BUCKETS {
            let b = (start + i) % ttl::BUCKETS;
            if self.ttl_bucket(b).head == NONE {
                continue;
            }
            // Merges sweep each chain from where the last one stopped, wrapping at the tail (as
            // in the paper): every segment is merged once per sweep, so the frequencies compared
            // were all gathered over one sweep. Restarting at the head instead would merge the
            // last merge's destinations again at once, with counters just halved, and would keep
            // only the very hottest items (no better than FIFO).
            let next = self.ttl_bucket(b).merge_next;
            let from_cursor =
                if next != NONE && self.seg(next).ttl_bucket as usize == b && self.seg(next).state == SEG_SEALED {
                    self.merge_sources(b, None, next, MERGE_SOURCES)
                } else {
                    Vec::new()
                };
            let sources = if from_cursor.len() >= 2 {
                from_cursor
            } else {
                self.merge_sources(b, None, self.ttl_bucket(b).head, MERGE_SOURCES)
            };
            if sources.len() >= 2 {
                self.meta_mut().merge_cursor = ((b + 1) % ttl::BUCKETS) as u32;
                let last = *sources.last().expect("two sources");
                let after = self.seg(last).next;
                let cont = self.merge_continuation(sources[0]);
                self.compact(&sources, 0, POOL_MAIN, cont)?;
                self.ttl_bucket_mut(b).merge_next = after;
                return Ok(());
            }
        }
        self.evict_simple(Policy::Fifo)
    }

    /// The two neighbouring sealed segments (as `merge_sources` picks them) with the fewest live
    /// bytes between them, and their TTL bucket, if those fit in seven eighths of a segment: room
    /// for the records not packing a destination to the last byte, so merging them keeps every item.
    fn lossless_pair(&self) -> Option<(usize, [u32; 2])> {
        let limit = (self.geo.segment_size - self.geo.segment_size / 8) as u64;
        let mut best: Option<(u64, usize, [u32; 2])> = None;
        for b in 0..ttl::BUCKETS {
            let mut id = self.ttl_bucket(b).head;
            while id != NONE {
                let (s, next) = (self.seg(id), self.seg(id).next);
                if next == NONE {
                    break;
                }
                let n = self.seg(next);
                let neighbours = s.state == SEG_SEALED
                    && n.state == SEG_SEALED
                    && s.pool == POOL_MAIN
                    && n.pool == POOL_MAIN
                    && same_expiry_window(s, n, b);
                let live = u64::from(s.live_bytes) + u64::from(n.live_bytes);
                if neighbours && live <= limit && best.is_none_or(|(l, ..)| live < l) {
                    best = Some((live, b, [id, next]));
                }
                id = next;
            }
        }
        best.map(|(_, b, pair)| (b, pair))
    }

    /// The segment right before `first` in its chain, if the sources starting at `first` can
    /// go on filling it: sealed, of the same pool, with room for a few items, and with an expiry
    /// window that takes the sources' items (its expiry is no later than theirs, and no more
    /// than one bucket width earlier).
    fn merge_continuation(&self, first: u32) -> Option<u32> {
        let f = self.seg(first);
        let prev = f.prev;
        if prev == NONE {
            return None;
        }
        let p = self.seg(prev);
        let width = ttl::width_of_bucket(f.ttl_bucket as usize);
        let fits_expiry = if p.expire_at == 0 {
            f.expire_at == 0
        } else {
            f.expire_at >= p.expire_at && f.expire_at - p.expire_at < width / 2
        };
        (p.state == SEG_SEALED
            && p.pool == f.pool
            && p.ttl_bucket == f.ttl_bucket
            && fits_expiry
            && (p.write_offset as usize) + 1024 <= self.geo.segment_size)
            .then_some(prev)
    }

    /// Up to `max` sealed segments of chain `b` (of `pool`, if given) from `from` on, whose
    /// expiry lies within one bucket width of the first one's.
    fn merge_sources(&self, b: usize, pool: Option<u8>, from: u32, max: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(max);
        let mut id = from;
        while id != NONE && out.len() < max {
            let s = self.seg(id);
            if pool.is_some_and(|p| s.pool != p) {
                id = s.next;
                continue;
            }
            if s.state != SEG_SEALED {
                break;
            }
            if out.first().is_some_and(|&first| !same_expiry_window(self.seg(first), s, b)) {
                break;
            }
            out.push(id);
            id = s.next;
        }
        out
    }

    /// Copies the live items of `sources` (neighbours in one TTL chain) that are worth keeping
    /// into at most half as many new destination segments, which take the sources' place in the
    /// chain, in `pool`; the rest are evicted and the sources freed.
    ///
    /// `cont` is a sealed segment right before the sources in the chain, with room left (the last
    /// destination of the previous merge of a sweep): it is filled first, so that consecutive
    /// merges pack their destinations full instead of leaving each one's last partly empty.
    ///
    /// What is kept: every live item when they fit (so dead space is compacted away without
    /// losing anything), else the most frequently read ones down to a cut-off (and, of the
    /// items at the cut-off, the newest that still fit), and never items read fewer than
    /// `min_freq` times. Kept items have their counters halved. Items leaving S3-FIFO's small
    /// pool unread are remembered in the ghost.
    ///
    /// Destinations need no extra memory. With a file, the first new one is the spare segment
    /// and the next ones are sources already emptied. Crash safety: a destination is linked into
    /// the chain before a source is reused, and a reused source is re-initialised as a spare
    /// first, so a crash leaves every kept item in a linked segment (possibly twice, with the
    /// same value). Without a file nothing has to survive a crash, so no spare is kept (one
    /// segment less idle per shard): the source being drained is compacted in place, each kept
    /// record moving to an offset no higher than its own, so nothing not yet read is overwritten.
    fn compact(&mut self, sources: &[u32], min_freq: u8, pool: u8, cont: Option<u32>) -> Result<()> {
        let mut spare = self.meta().spare;
        let in_place = !self.durable;
        if (spare == NONE && !in_place) || sources.is_empty() {
            return self.evict_simple(Policy::Fifo);
        }
        // Newest source first: among items read equally often, the newer ones are kept (they have
        // had less time to prove themselves); and drained sources become destinations.
        let order: Vec<u32> = sources.iter().rev().copied().collect();
        // Read before a source becomes a destination (and takes `pool`).
        let from_small: Vec<bool> = order.iter().map(|&s| self.seg(s).pool == POOL_SMALL).collect();
        // Gather live items and their frequencies.
        let mut moves = MOVES.take();
        moves.clear();
        let t = self.table();
        let mut hist = [0u64; 256];
        for &src in &order {
            self.for_each_live(src, |_, loc, h, len| {
                if let Some(f) = t.find_loc(h, loc) {
                    let freq = table::slot_freq(f.value);
                    hist[freq as usize] += u64::from(len);
                    moves.push(Move { loc, hash: h, freq, len });
                }
            });
        }
        // At most half the sources' space is newly used: each merge frees at least half its
        // sources.
        let max_dests = sources.len().div_ceil(2);
        let room = cont.map_or(0, |c| self.geo.segment_size - self.seg(c).write_offset as usize);
        let budget = (room + max_dests * self.geo.segment_size) as u64;
        let mut cutoff = 256usize;
        let mut kept = 0u64;
        while cutoff > usize::from(min_freq) && kept + hist[cutoff - 1] <= budget {
            cutoff -= 1;
            kept += hist[cutoff];
        }
        // Bytes left for the items one step below the cut-off, newest first. Less a record's
        // length per destination: items do not pack destinations to the last byte, and the
        // items above the cut-off (which may come later) must still find room.
        let longest = moves.iter().map(|m| u64::from(m.len)).max().unwrap_or(0);
        let mut partial = budget.saturating_sub(kept + (max_dests as u64 + 1) * longest);
        let first = sources[0];
        let (b, expire_at, create_at) = {
            let s = self.seg(first);
            (s.ttl_bucket as usize, s.expire_at, s.create_at)
        };
        // Destinations go where the first source was: before the first non-source after it.
        let mut before = self.seg(first).next;
        while before != NONE && sources.contains(&before) {
            before = self.seg(before).next;
        }
        // Every live item of the sources leaves the counts now; kept ones come back as written.
        let (mut items, mut bytes) = (0u64, 0u64);
        for &src in sources {
            items += u64::from(self.seg(src).live_items);
            bytes += u64::from(self.seg(src).live_bytes);
        }
        let m = self.meta_mut();
        m.items = m.items.saturating_sub(items);
        m.bytes = m.bytes.saturating_sub(bytes);

        let header = |seq: u64| SegHeader {
            seq,
            create_at,
            expire_at,
            ttl_bucket: b as u16,
            state: SEG_SPARE,
            pool,
            ..SegHeader::EMPTY
        };
        let mut reused = 0usize; // order[..reused] became destinations
                                 // The destination being filled; `cont` is already in the chain, new ones are not yet.
        let mut dest = match cont {
            Some(c) => c,
            None => self.next_dest(&mut spare, &order, &mut reused, header),
        };
        let mut new_dests = usize::from(cont.is_none()); // spare and reused sources taken
        let (mut copied, mut dropped) = (0u64, 0u64);
        let mut ghosts = Vec::new();
        let mut current = 0usize; // index in `order` of the segment being drained
        for (i, m) in moves.iter().enumerate() {
            // The buckets were read in the first pass, a few segments' worth of lines ago.
            if let Some(ahead) = moves.get(i + MOVE_AHEAD) {
                prefetch(t.head(ahead.hash) as *const Bucket as *const u8);
            }
            while order[current] != m.loc.seg {
                current += 1;
            }
            let Some(slot) = t.find_loc(m.hash, m.loc) else { continue };
            let mut keep = m.freq >= min_freq
                && (usize::from(m.freq) >= cutoff
                    || (usize::from(m.freq) + 1 == cutoff && partial >= u64::from(m.len) && {
                        partial -= u64::from(m.len);
                        true
                    }));
            if keep && self.seg(dest).write_offset as usize + m.len as usize > self.geo.segment_size {
                let free = spare != NONE || reused < current || (in_place && reused == current);
                if new_dests < max_dests && free {
                    // Seal this destination into the chain, then drain into the next.
                    if Some(dest) != cont {
                        self.seal_dest(dest, b, before, pool);
                    }
                    dest = self.next_dest(&mut spare, &order, &mut reused, header);
                    new_dests += 1;
                } else {
                    keep = false;
                }
            }
            if keep {
                let at = |seg: u32, offset: u32| seg as usize * self.geo.segment_size + offset as usize;
                let (from, to) = (at(m.loc.seg, m.loc.offset), at(dest, self.seg(dest).write_offset));
                let len = m.len as usize;
                // SAFETY: both ranges lie in the heap: the source record inside its segment (as
                // parsed), the destination below its segment's end (checked above). They overlap
                // when a segment is compacted in place, which `copy` allows; no reference to
                // either is alive.
                unsafe { std::ptr::copy(self.mem.heap.add(from), self.mem.heap.add(to), len) };
                let new = self.write_record(dest, |_| {}, len);
                Table::relocate(slot.slot, slot.value, m.freq / 2, new);
                copied += 1;
            } else {
                self.remove_slot(m.hash, slot.slot);
                dropped += 1;
                if from_small[current] && pool == POOL_MAIN {
                    ghosts.push(m.hash);
                }
            }
        }
        MOVES.set(moves);
        for h in ghosts {
            self.ghost_insert(h);
        }
        // The last new destination joins the chain if anything went into it; otherwise it is
        // spare again.
        let mut leftover = Vec::new();
        if Some(dest) != cont {
            if self.seg(dest).write_offset > 0 {
                self.seal_dest(dest, b, before, pool);
            } else {
                leftover.push(dest);
                new_dests -= 1;
            }
        }
        for &src in &order[reused..] {
            self.unlink(src);
            leftover.push(src);
        }
        // One freed segment becomes the next spare (if the spare was used and the shard keeps
        // one), the rest go to the free list.
        let need_spare = self.meta().spare == NONE && self.wants_spare();
        for (i, id) in leftover.into_iter().enumerate() {
            if i == 0 && need_spare {
                *self.seg_mut(id) = SegHeader { state: SEG_SPARE, ..SegHeader::EMPTY };
                self.meta_mut().spare = id;
            } else {
                self.push_free(id);
            }
        }
        let m = self.meta_mut();
        m.evicted_items += dropped;
        m.merged_items += copied;
        m.evicted_segments += (sources.len() - new_dests.min(sources.len())) as u64;
        Ok(())
    }

    /// The next new destination of a merge (see `compact`), initialised by `header` and out of
    /// its chain: the spare while it is unused, else the first source not yet reused (drained,
    /// or being drained when compacting in place).
    fn next_dest(
        &mut self,
        spare: &mut u32,
        order: &[u32],
        reused: &mut usize,
        header: impl Fn(u64) -> SegHeader,
    ) -> u32 {
        let next = if *spare != NONE {
            self.meta_mut().spare = NONE;
            std::mem::replace(spare, NONE)
        } else {
            let next = order[*reused];
            *reused += 1;
            self.unlink(next);
            next
        };
        let seq = self.next_seq();
        *self.seg_mut(next) = header(seq);
        next
    }

    /// Links a filled merge destination into chain `b` before `before`, as sealed.
    fn seal_dest(&mut self, dest: u32, b: usize, before: u32, pool: u8) {
        self.seg_mut(dest).state = SEG_SEALED;
        self.link_before(b, dest, before);
        if pool == POOL_SMALL {
            self.meta_mut().small_segments += 1;
        }
    }

    /// S3-FIFO at segment granularity: while the small pool holds more than a tenth of the
    /// segments, its oldest segments are promoted (items read at least once move to the main
    /// pool, the rest leave a ghost); otherwise the main pool's oldest are merged as by `Merge`.
    fn evict_s3fifo(&mut self) -> Result<()> {
        let small_target = (self.geo.segments as u64 / 10).max(1);
        let small = self.meta().small_segments;
        let pool = if small > small_target { POOL_SMALL } else { POOL_MAIN };
        let oldest = (0..self.geo.segments as u32)
            .filter(|&id| {
                let s = self.seg(id);
                s.state == SEG_SEALED && s.pool == pool
            })
            .min_by_key(|&id| self.seg(id).seq);
        let Some(oldest) = oldest else {
            return self.evict_simple(Policy::Fifo);
        };
        let b = self.seg(oldest).ttl_bucket as usize;
        let mut sources = self.merge_sources(b, Some(pool), self.ttl_bucket(b).head, PROMOTE_SOURCES);
        if !sources.contains(&oldest) {
            sources = vec![oldest];
        }
        // Small: promote what was read. Main: reinsert what was read, counters halved.
        self.compact(&sources, 1, POOL_MAIN, None)
    }

    fn ghost_slot(&self, h: u64) -> Option<(usize, u32)> {
        let n = self.ghost.len();
        (n > 0).then(|| (((h >> 20) as usize) & (n - 1), (h as u32) | 1))
    }
    fn ghost_hit(&self, h: u64) -> bool {
        self.ghost_slot(h).is_some_and(|(i, fp)| self.ghost[i] == fp)
    }
    fn ghost_insert(&mut self, h: u64) {
        if let Some((i, fp)) = self.ghost_slot(h) {
            self.ghost[i] = fp;
        }
    }

    // ---- whole-cache operations -------------------------------------------------------------

    /// Removes every item now.
    pub fn flush(&mut self) {
        if self.origin.forked() {
            return;
        }
        self.reset(false);
        self.meta_mut().flushes += 1;
    }

    /// Removes every item stored before `delay` from now, at that time (`ZERO`: now).
    pub fn flush_after(&mut self, delay: Duration) {
        if delay.is_zero() {
            return self.flush();
        }
        if self.origin.forked() {
            return;
        }
        let at = self.now().saturating_add(ttl_secs(delay));
        self.meta_mut().flush_at = at;
    }

    /// Empties the shard: every segment free, the table cleared (CAS values go on increasing).
    /// `zeroed`: the region is fresh, all zero, so the table need not be written (writing it
    /// would make every page of it resident before the first item).
    pub(crate) fn reset(&mut self, zeroed: bool) {
        // Every segment is about to be freed: none is left to check.
        self.unchecked = None;
        // Segments allocated before now belong to the flushed cache, whatever a crash leaves;
        // recorded first, so that a crash in the middle of the reset cannot bring them back.
        let m = self.meta_mut();
        m.flushed_below = m.next_seq;
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        if !zeroed {
            self.table().clear();
        }
        for b in 0..ttl::BUCKETS {
            *self.ttl_bucket_mut(b) = TtlBucket::EMPTY;
        }
        let n = self.geo.segments as u32;
        for id in 0..n {
            *self.seg_mut(id) = SegHeader { next: if id + 1 < n { id + 1 } else { NONE }, ..SegHeader::EMPTY };
        }
        let m = self.meta_mut();
        m.free_head = 0;
        m.free_count = n;
        m.spare = NONE;
        m.overflow = Default::default();
        m.flush_at = 0;
        m.intent_seg = NONE;
        m.items = 0;
        m.bytes = 0;
        m.small_segments = 0;
        if m.rng == 0 {
            m.rng = 0x9e37_79b9_7f4a_7c15;
        }
        self.ghost.fill(0);
        self.fit_spare_to_policy();
    }

    /// Merge and S3-FIFO keep one spare segment to copy into when the heap is a file (see
    /// `compact`); other policies, and caches without a file, need none.
    fn wants_spare(&self) -> bool {
        self.durable && matches!(self.policy, Policy::Merge | Policy::S3Fifo)
    }

    pub(crate) fn fit_spare_to_policy(&mut self) {
        let wants = self.wants_spare();
        let spare = self.meta().spare;
        if wants && spare == NONE {
            if let Some(id) = self.pop_free() {
                *self.seg_mut(id) = SegHeader { state: SEG_SPARE, ..SegHeader::EMPTY };
                self.meta_mut().spare = id;
            }
        } else if !wants && spare != NONE {
            self.meta_mut().spare = NONE;
            self.push_free(spare);
        }
    }

    /// The engine's counters and gauges.
    pub fn stats(&self) -> Stats {
        let m = self.meta();
        Stats {
            items: m.items,
            bytes: m.bytes,
            heap_bytes: self.geo.heap_len() as u64,
            segment_size: self.geo.segment_size as u64,
            segments_total: self.geo.segments as u64,
            segments_free: u64::from(m.free_count),
            get_hits: m.reads.hits.load(Relaxed),
            get_misses: m.reads.misses.load(Relaxed),
            sets: m.sets,
            deletes: m.deletes,
            evicted_items: m.evicted_items,
            evicted_segments: m.evicted_segments,
            expired_items: m.expired_items,
            expired_segments: m.expired_segments,
            merged_items: m.merged_items,
            flushes: m.flushes,
            overflow_buckets: u64::from(m.overflow.used),
            shards: 1,
            policy: self.policy,
        }
    }

    /// Adds reads and stores counted elsewhere (in `SharedCache`'s reader slots) to this shard's
    /// counters.
    pub(crate) fn count_slots(&mut self, hits: u64, misses: u64, sets: u64) {
        let reads = &self.meta().reads;
        reads.hits.fetch_add(hits, Relaxed);
        reads.misses.fetch_add(misses, Relaxed);
        self.meta_mut().sets += sets;
    }

    /// Live items (expired ones count until their segment is freed).
    pub fn len(&self) -> usize {
        self.meta().items as usize
    }
    /// Whether no item is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Graceful stop: with a persistence path, writes what a warm restart needs and marks the
    /// file clean. Dropping the engine does the same but cannot report an error.
    pub fn close(self) -> Result<()> {
        self.origin.check()?;
        let region = std::sync::Arc::clone(&self.mem.region);
        let now = self.now();
        drop(self);
        crate::region::close(region, now)
    }
}

/// Whether a flush set for `flush_at` (0: none) has removed, by `now`, what was stored before it.
#[inline]
pub(crate) fn flushed_by(flush_at: u32, now: u32) -> bool {
    flush_at != 0 && now >= flush_at
}

/// Whether the items of a segment expiring at `expire_at` (0: never) are still live at `now`.
#[inline]
pub(crate) fn live_until(expire_at: u32, now: u32) -> bool {
    expire_at == 0 || now < expire_at
}

/// The CAS value a read hands out for a record's counter `c`, in shard `offset` of `stride`:
/// the shards' counters interleaved, so that no two keys share a value, counting up from 1.
#[inline]
pub(crate) fn cas_token(stride: u64, offset: u64, c: u32) -> u64 {
    u64::from(c) * stride + offset + 1
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        Err(Error::EmptyKey)
    } else if key.len() > MAX_KEY_LEN {
        Err(Error::KeyTooLong { len: key.len() })
    } else {
        Ok(())
    }
}

/// A decimal ASCII unsigned 64-bit number, as memcached's incr/decr accept it (`safe_strtoull`
/// over the value, which memcached stores followed by "\r\n"): leading white space and a sign
/// allowed, at least one digit, no overflow, then white space, a NUL or the end; a minus sign
/// only when the result is below 2^63 read as signed (so "-0" is 0, "-1" is refused). memcached's
/// `incr` leaves a shrunk number padded with spaces ("5 "), which reads back as 5.
pub(crate) fn parse_decimal(v: &[u8]) -> Option<u64> {
    // C's isspace in the "C" locale.
    let space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let i = v.iter().position(|&c| !space(c))?;
    let (negative, i) = match v[i] {
        b'-' => (true, i + 1),
        b'+' => (false, i + 1),
        _ => (false, i),
    };
    let digits = v[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let n = v[i..i + digits].iter().try_fold(0u64, |n, &c| n.checked_mul(10)?.checked_add(u64::from(c - b'0')))?;
    match v.get(i + digits) {
        None | Some(0) => {}
        Some(&c) if space(c) => {}
        Some(_) => return None,
    }
    if negative {
        let n = n.wrapping_neg();
        return ((n as i64) >= 0).then_some(n);
    }
    Some(n)
}

/// `n` in decimal ASCII, written into the end of `buf`.
fn format_decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint that never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two keys in one chain with the same tag: the first tag match is not always the key, so
    /// the batched read must compare keys and fall back to a full scan.
    #[test]
    fn batched_reads_tell_apart_keys_that_share_bucket_and_tag() {
        let mut c = Builder::new()
            .heap_size(4 << 20)
            .segment_size(1 << 20)
            .hash_power(4)
            .eviction(Policy::None)
            .build()
            .unwrap();
        let mask = c.geo.primary_buckets() as u64 - 1;
        let key = |i: u32| format!("collide-{i}").into_bytes();
        let (first, h0) = (key(0), hash(&key(0)));
        let twin = (1..)
            .map(key)
            .find(|k| {
                let h = hash(k);
                table::tag_of(h) == table::tag_of(h0) && h & mask == h0 & mask
            })
            .unwrap();
        c.set(&first, b"first", 0, Duration::ZERO).unwrap();
        c.set(&twin, b"twin", 0, Duration::ZERO).unwrap();
        let got: Vec<Option<Vec<u8>>> =
            c.get_many(&[&twin, &first, b"absent"]).into_iter().map(|i| i.map(|i| i.value().to_vec())).collect();
        assert_eq!(got, [Some(b"twin".to_vec()), Some(b"first".to_vec()), None]);
        c.delete(&first).unwrap();
        let got: Vec<Option<Vec<u8>>> =
            c.get_many(&[&first, &twin]).into_iter().map(|i| i.map(|i| i.value().to_vec())).collect();
        assert_eq!(got, [None, Some(b"twin".to_vec())]);
        assert_eq!(c.get(&twin).map(|i| i.value().to_vec()), Some(b"twin".to_vec()));
    }
}
