//! Segments: the headers and the heap, appends, the free list, and scans.
//!
//! `Segments` is a view over one shard's segment headers, its heap and the metadata fields the
//! segments keep (the free list, the live item and byte counts, the sequence numbers), built by
//! the engine for a call (`Segcache::segments`). The parts above it take it as an argument where
//! they change segments too (the TTL buckets' chains link headers); what changes the hash table
//! at the same time stays in the engine.

pub(crate) mod append;
pub(crate) mod check;
pub(crate) mod free;
pub(crate) mod header;
pub(crate) mod scan;

use std::marker::PhantomData;

use crate::meta::ShardMeta;
use crate::segments::header::{SegHeader, POOL_SMALL};

/// A view of one shard's segments: `headers.len()` segments of `segment_size` bytes each, laid
/// end to end in the heap, and the shard's metadata. Held with the engine exclusively.
pub(crate) struct Segments<'a> {
    headers: &'a mut [SegHeader],
    heap: *mut u8,
    segment_size: usize,
    meta: &'a mut ShardMeta,
    /// File-backed: records carry the checksums that crash recovery checks.
    durable: bool,
    _heap: PhantomData<&'a mut [u8]>,
}

impl<'a> Segments<'a> {
    /// # Safety
    ///
    /// `heap` points to `headers.len() * segment_size` bytes that stay mapped for `'a` and that
    /// nothing else writes meanwhile, except through atomics (readers' access bytes).
    #[inline]
    pub(crate) unsafe fn new(
        headers: &'a mut [SegHeader],
        heap: *mut u8,
        segment_size: usize,
        meta: &'a mut ShardMeta,
        durable: bool,
    ) -> Self {
        Segments { headers, heap, segment_size, meta, durable, _heap: PhantomData }
    }

    /// The number of segments.
    #[inline]
    pub(crate) fn count(&self) -> usize {
        self.headers.len()
    }

    #[inline]
    pub(crate) fn segment_size(&self) -> usize {
        self.segment_size
    }

    /// Segments in S3-FIFO's small pool (kept as segments join and leave the TTL chains).
    #[inline]
    pub(crate) fn small_count(&self) -> u64 {
        self.meta.small_segments
    }

    /// Counts segment `id` (its header's `pool` set) as it joins a TTL chain.
    pub(crate) fn count_joining(&mut self, id: u32) {
        if self.header(id).pool == POOL_SMALL {
            self.meta.small_segments += 1;
        }
    }

    /// Counts segment `id` as it leaves its TTL chain.
    pub(crate) fn count_leaving(&mut self, id: u32) {
        if self.header(id).pool == POOL_SMALL {
            self.meta.small_segments = self.meta.small_segments.saturating_sub(1);
        }
    }

    #[inline]
    pub(crate) fn header(&self, id: u32) -> &SegHeader {
        &self.headers[id as usize]
    }

    #[inline]
    pub(crate) fn header_mut(&mut self, id: u32) -> &mut SegHeader {
        &mut self.headers[id as usize]
    }

    /// The written bytes of a segment.
    #[inline]
    pub(crate) fn data(&self, id: u32) -> &[u8] {
        let len = (self.header(id).write_offset as usize).min(self.segment_size);
        // SAFETY: segment `id` (in bounds, checked by `header`) spans `segment_size` bytes of the
        // heap (see `new`); `&self` keeps every writer of this view away meanwhile.
        unsafe { std::slice::from_raw_parts(self.heap.add(id as usize * self.segment_size), len) }
    }

    /// All of a segment's bytes, whatever its header says.
    #[inline]
    pub(crate) fn bytes(&self, id: u32) -> &[u8] {
        assert!((id as usize) < self.headers.len());
        // SAFETY: in bounds (checked); see `data`.
        unsafe { std::slice::from_raw_parts(self.heap.add(id as usize * self.segment_size), self.segment_size) }
    }

    #[inline]
    fn space(&mut self, id: u32) -> &mut [u8] {
        assert!((id as usize) < self.headers.len());
        // SAFETY: in bounds (checked); `&mut self` makes this the only access through the view,
        // and the view is held with the engine exclusively (see `new`).
        unsafe { std::slice::from_raw_parts_mut(self.heap.add(id as usize * self.segment_size), self.segment_size) }
    }
}
