//! Raw access to the shard's memory: the hash table, metadata, segment headers and data, TTL
//! buckets and records.

use crate::engine::Segcache;
use crate::hashtable::slot::Loc;
use crate::hashtable::table::Table;
use crate::meta::ShardMeta;
use crate::record::{self, Record};
use crate::segments::header::SegHeader;
use crate::segments::Segments;
use crate::ttl_buckets::bucket::TtlBucket;
use crate::ttl_buckets::ttl;
use crate::ttl_buckets::TtlBuckets;

impl Segcache {
    #[inline]
    pub(crate) fn table(&self) -> Table<'static> {
        self.table
    }

    /// The shard's segments, as a view (see `Segments`).
    #[inline]
    pub(crate) fn segments(&mut self) -> Segments<'_> {
        self.segments_and_ttl().0
    }

    /// The shard's segments and its TTL buckets together: what links a segment into a chain, or
    /// out of one, changes both.
    #[inline]
    pub(crate) fn segments_and_ttl(&mut self) -> (Segments<'_>, TtlBuckets<'_>) {
        // SAFETY: the headers (`segments` of them), the metadata and the TTL buckets
        // (`ttl::BUCKETS`) lie apart inside the live region, and the heap holds `segments`
        // segments of `segment_size` bytes; `&mut self` makes these the only accesses until the
        // view is dropped (readers change the heap only through atomics).
        unsafe {
            let headers = std::slice::from_raw_parts_mut(self.mem.segs, self.geo.segments);
            let buckets = std::slice::from_raw_parts_mut(self.mem.ttl, ttl::BUCKETS);
            let meta = &mut *self.mem.meta;
            (Segments::new(headers, self.mem.heap, self.geo.segment_size, meta, self.durable), TtlBuckets::new(buckets))
        }
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

    /// Every segment header, read only.
    pub(crate) fn headers(&self) -> &[SegHeader] {
        // SAFETY: `segments` headers inside the live region; writers need `&mut self`.
        unsafe { std::slice::from_raw_parts(self.mem.segs, self.geo.segments) }
    }

    /// Every TTL bucket, read only.
    pub(crate) fn ttl_buckets(&self) -> &[TtlBucket] {
        // SAFETY: `ttl::BUCKETS` buckets inside the live region; writers need `&mut self`.
        unsafe { std::slice::from_raw_parts(self.mem.ttl, ttl::BUCKETS) }
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

    /// All of a segment's bytes, whatever its header says: for a record that a merge is about
    /// to drop from a segment it drains in place (whose header is already the destination's).
    #[inline]
    pub(crate) fn seg_bytes(&self, id: u32) -> &[u8] {
        assert!((id as usize) < self.geo.segments);
        // SAFETY: in bounds (checked): segment `id` spans `segment_size` bytes of the heap inside
        // the live region; writers need `&mut self`, so nothing changes it meanwhile.
        unsafe {
            std::slice::from_raw_parts(self.mem.heap.add(id as usize * self.geo.segment_size), self.geo.segment_size)
        }
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
    pub(crate) fn record(&self, loc: Loc) -> Option<Record<'_>> {
        if loc.seg as usize >= self.geo.segments || !self.readable_segment(loc.seg) {
            return None;
        }
        // SAFETY: header `loc.seg` < `segments` (checked above) of the live region; writers need
        // `&mut self`. (`seg` would check the bound again: every keyed read and write comes here.)
        let seg = unsafe { &*self.mem.segs.add(loc.seg as usize) };
        let len = (seg.write_offset as usize).min(self.geo.segment_size);
        let offset = loc.offset as usize;
        if offset >= len {
            return None;
        }
        // SAFETY: segment `loc.seg` (< segments, checked above) spans `segment_size` bytes of
        // the heap inside the live region, of which its first `len` hold records; writers need
        // `&mut self`, so nothing changes them meanwhile.
        let rest = unsafe {
            std::slice::from_raw_parts(
                self.mem.heap.add(loc.seg as usize * self.geo.segment_size + offset),
                len - offset,
            )
        };
        record::parse(rest, seg.cas_base)
    }

    /// Byte `at` of the record at `loc`, as an atomic: the control and access bytes, which
    /// readers change (the won bit, the access time) while others read.
    #[inline]
    pub(crate) fn record_byte(&self, loc: Loc, at: usize) -> &std::sync::atomic::AtomicU8 {
        let pos = loc.seg as usize * self.geo.segment_size + loc.offset as usize + at;
        assert!(pos < self.geo.segments * self.geo.segment_size);
        // SAFETY: in bounds of the heap (checked), which the region keeps alive as long as the
        // engine; `AtomicU8` has `u8`'s layout. Concurrent readers change these bytes only
        // through atomics; writers that write them plainly hold the engine exclusively.
        unsafe { std::sync::atomic::AtomicU8::from_ptr(self.mem.heap.add(pos)) }
    }

    /// The record at `loc`, if it is `key`'s.
    #[inline]
    pub(crate) fn keyed_record(&self, loc: Loc, key: &[u8]) -> Option<Record<'_>> {
        self.record(loc).filter(|r| record::same_key(r.key, key))
    }

    #[inline]
    pub(crate) fn key_at(&self, loc: Loc, key: &[u8]) -> bool {
        self.keyed_record(loc, key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::hash::hash;
    use crate::hashtable::slot::{slot_loc, Loc};
    use crate::Builder;

    /// `record` reads a slot's location in place after one look at its segment header: a
    /// location at or past what the segment holds, or in a segment the heap lacks, is no record.
    #[test]
    fn a_record_is_read_only_inside_what_its_segment_holds() {
        let mut c = Builder::new().heap_size(1 << 20).segment_size(64 << 10).build().unwrap();
        c.set(b"k", b"value", 7, Duration::ZERO).unwrap();
        let (found, _) = c.find_record(b"k", hash(b"k")).unwrap();
        let loc = slot_loc(found.value);
        let r = c.record(loc).unwrap();
        assert_eq!((r.key, r.value, r.client_flags), (&b"k"[..], &b"value"[..], 7));
        let held = c.seg(loc.seg).write_offset;
        assert!(c.record(Loc { seg: loc.seg, offset: held }).is_none());
        assert!(c.record(Loc { seg: loc.seg, offset: 64 << 10 }).is_none());
        assert!(c.record(Loc { seg: c.geo.segments as u32, offset: 0 }).is_none());
    }
}
