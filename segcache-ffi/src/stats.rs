//! Counters and gauges, item count and the cache's clock.

use segcache_core::{SharedCache, Stats};

use crate::args::{self, put};
use crate::guard::run_with;
use crate::handle::segcache_t;
use crate::status::segcache_status_t;

/// A snapshot of the cache's counters (monotonic since open) and gauges, summed over shards.
///
/// Fields are only ever added at the end, so each field keeps its offset: a program built
/// against an older header reads the fields it knows and ignores the rest.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct segcache_stats_t {
    /// Live items (gauge).
    pub items: u64,
    /// Bytes of live items, headers included (gauge).
    pub bytes: u64,
    /// Heap size in bytes (configuration).
    pub heap_bytes: u64,
    /// Segment size in bytes (configuration).
    pub segment_size: u64,
    /// Segments in all (gauge).
    pub segments_total: u64,
    /// Free segments (gauge).
    pub segments_free: u64,
    /// Reads that found the key.
    pub get_hits: u64,
    /// Reads that did not.
    pub get_misses: u64,
    /// Misses that found the key's item expired (memcached's `get_expired`).
    pub get_expired: u64,
    /// Misses that found the key's item flushed (memcached's `get_flushed`).
    pub get_flushed: u64,
    /// Successful writes of every kind (set, add, replace, cas, append, prepend, incr, decr).
    pub sets: u64,
    /// Deletes that removed an item.
    pub deletes: u64,
    /// Items removed by eviction.
    pub evicted_items: u64,
    /// Segments evicted or merged away.
    pub evicted_segments: u64,
    /// Items removed because they expired.
    pub expired_items: u64,
    /// Items expired that no read had fetched since they were stored.
    pub expired_unfetched: u64,
    /// Items evicted that no read had fetched since they were stored.
    pub evicted_unfetched: u64,
    /// Whole segments freed by expiry.
    pub expired_segments: u64,
    /// Items kept by merge eviction.
    pub merged_items: u64,
    /// Flushes that took effect.
    pub flushes: u64,
    /// Overflow hash buckets in use (gauge).
    pub overflow_buckets: u64,
    /// Number of shards.
    pub shards: u64,
    /// The eviction policy, a `segcache_policy_t` value.
    pub policy: u32,
    /// Items on the flash tier (gauge).
    pub flash_items: u64,
    /// Items written to the flash tier by eviction.
    pub flash_demoted: u64,
    /// Reads served from the flash tier.
    pub flash_hits: u64,
    /// Reads of the flash tier that failed or did not check: misses.
    pub flash_bad_reads: u64,
    /// Flash segments reclaimed to make room for newer ones.
    pub flash_reclaimed_segments: u64,
    /// Items eviction dropped instead of writing them to the flash tier: its write queue was full
    /// (the device was behind), or the write failed.
    pub flash_demotions_dropped: u64,
    /// Bytes written to the flash tier (entries' heads included).
    pub flash_bytes_written: u64,
    /// Bytes of the items that reads served from the flash tier.
    pub flash_bytes_read: u64,
    /// Items that reads on the flash tier brought back to DRAM.
    pub flash_promoted: u64,
}

/// The C struct of core's [`Stats`]: the same fields in the order of `Stats::figures`, with the
/// policy, as its `segcache_policy_t` value, after `shards`, where the struct first ended
/// (checked by tests/header.rs).
#[inline(always)]
fn c_stats(s: Stats) -> segcache_stats_t {
    segcache_stats_t {
        items: s.items,
        bytes: s.bytes,
        heap_bytes: s.heap_bytes,
        segment_size: s.segment_size,
        segments_total: s.segments_total,
        segments_free: s.segments_free,
        get_hits: s.get_hits,
        get_misses: s.get_misses,
        get_expired: s.get_expired,
        get_flushed: s.get_flushed,
        sets: s.sets,
        deletes: s.deletes,
        evicted_items: s.evicted_items,
        evicted_segments: s.evicted_segments,
        expired_items: s.expired_items,
        expired_unfetched: s.expired_unfetched,
        evicted_unfetched: s.evicted_unfetched,
        expired_segments: s.expired_segments,
        merged_items: s.merged_items,
        flushes: s.flushes,
        overflow_buckets: s.overflow_buckets,
        shards: s.shards,
        policy: s.policy as u32,
        flash_items: s.flash_items,
        flash_demoted: s.flash_demoted,
        flash_hits: s.flash_hits,
        flash_bad_reads: s.flash_bad_reads,
        flash_reclaimed_segments: s.flash_reclaimed_segments,
        flash_demotions_dropped: s.flash_demotions_dropped,
        flash_bytes_written: s.flash_bytes_written,
        flash_bytes_read: s.flash_bytes_read,
        flash_promoted: s.flash_promoted,
    }
}

/// The body of a call that writes one figure of the cache to `*out` (required).
///
/// # Safety
/// `cache` is NULL or a live handle; `out` is NULL or writable.
#[inline(always)]
unsafe fn report<T>(
    cache: *const segcache_t,
    out: *mut T,
    figure: impl FnOnce(&SharedCache) -> T,
) -> segcache_status_t {
    let body = |h: &segcache_t| {
        let out = args::out(out, c"out is NULL")?;
        let v = figure(&h.cache);
        // SAFETY: checked non-NULL and aligned; writable per the contract.
        unsafe { put(out, v) };
        Ok(())
    };
    // SAFETY: the function's contract.
    unsafe { run_with(cache, body) }
}

/// Writes a snapshot of the counters to `*out`. Each shard is read under its own read lock in
/// turn, so the sum is not one atomic snapshot while writers run. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_stats(cache: *const segcache_t, out: *mut segcache_stats_t) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `report`'s.
    unsafe { report(cache, out, |c| c_stats(c.stats())) }
}

/// Writes the number of live items to `*out`. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_len(cache: *const segcache_t, out: *mut usize) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `report`'s.
    unsafe { report(cache, out, SharedCache::len) }
}

/// Writes the heap the cache may use now to `*out`: `segcache_set_memory_limit`'s, else
/// `heap_size`. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_memory_limit(cache: *const segcache_t, out: *mut usize) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `report`'s.
    unsafe { report(cache, out, SharedCache::memory_limit) }
}

/// Writes the cache clock's current time (Unix seconds) to `*out`. Thread safety: any thread.
/// Ownership: every pointer argument is borrowed for the call only; the library copies what it keeps.
///
/// # Safety
/// `cache` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segcache_now(cache: *const segcache_t, out: *mut u32) -> segcache_status_t {
    // SAFETY: the caller's contract, which is `report`'s.
    unsafe { report(cache, out, SharedCache::now) }
}
