//! Appending records to a segment: whether an item fits an open segment, and writing, copying
//! and publishing its record.

use crate::hashtable::slot::Loc;
use crate::prefetch::prefetch;
use crate::record;
use crate::segments::header::{SegHeader, SEG_OPEN};
use crate::segments::Segments;

/// Whether an item expiring at `expire_at` (0: never) may go to segment `s`, where `width` is the
/// width of the item's TTL bucket: it must not outlive its TTL, nor expire a width or more early.
pub(crate) fn expiry_fits(s: &SegHeader, expire_at: u32, width: u32) -> bool {
    if s.expire_at == 0 {
        expire_at == 0
    } else {
        expire_at >= s.expire_at && expire_at - s.expire_at < width
    }
}

impl Segments<'_> {
    /// Whether open segment `seg` takes a record of `len` bytes expiring at `expire_at`.
    #[inline]
    pub(crate) fn accepts(&self, seg: u32, len: usize, expire_at: u32, width: u32) -> bool {
        let s = self.header(seg);
        s.state == SEG_OPEN && s.write_offset as usize + len <= self.segment_size && expiry_fits(s, expire_at, width)
    }

    /// Writes a record at the segment's write offset and publishes it: the bytes first, then the
    /// offset and the checksum, so that a crash leaves either the whole record or none.
    #[inline]
    pub(crate) fn write_record(&mut self, seg: u32, fill: impl FnOnce(&mut [u8]), len: usize) -> Loc {
        let offset = self.header(seg).write_offset as usize;
        let durable = self.durable;
        let space = self.space(seg);
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
        let s = self.header_mut(seg);
        s.write_offset = (offset + len) as u32;
        s.sum = s.sum.wrapping_add(sum);
        s.live_items += 1;
        s.live_bytes += len as u32;
        self.meta.items += 1;
        self.meta.bytes += len as u64;
        Loc { seg, offset: offset as u32 }
    }

    /// Copies the live record at `from` (in a segment whose CAS base is `from_base` and created
    /// at `from_create`) to segment `dest`'s write offset, where `moved_len` bytes must fit, and
    /// publishes it (`write_record`). A copy is neither a modification nor an access: its CAS
    /// value is re-expressed for `dest`'s base (narrow where it fits, else wide: the copy may be 2
    /// bytes longer or shorter) and its access byte for `dest`'s creation time.
    ///
    /// `from` may lie in `dest` itself (a merge compacting a segment in place), at or past its
    /// write offset: `dest`'s base must then be the one the record was written for, so that the
    /// copy is no longer and moves no byte forward.
    pub(crate) fn move_record(&mut self, from: Loc, from_base: u32, from_create: u32, dest: u32) -> Loc {
        let (key_len, value_len, flags, mut stamp, form, old_len) = {
            let src = &self.bytes(from.seg)[from.offset as usize..];
            let r = record::parse(src, from_base).expect("a record that was parsed");
            (r.key.len(), r.value.len(), r.client_flags, r.stamp, r.form(), r.len)
        };
        let (dest_base, dest_create, offset) = {
            let d = self.header(dest);
            (d.cas_base, d.create_at, d.write_offset as usize)
        };
        if dest_create != from_create {
            let access = from_create.saturating_add(record::access_age(stamp.access));
            stamp.access = record::access_code(access.saturating_sub(dest_create));
        }
        let form = form.moved(stamp.cas, dest_base);
        let mut head = [0u8; record::MAX_ANY_HEADER_LEN + 8];
        let width = record::width_for(&stamp, value_len);
        let head_len = record::write_header_in(&mut head, width, key_len, value_len, flags, stamp, form, dest_base);
        let (body, len) = (key_len + value_len, head_len + key_len + value_len);
        let at = |seg: u32, offset: usize| seg as usize * self.segment_size + offset;
        let (from_body, to) = (at(from.seg, from.offset as usize + old_len - body), at(dest, offset));
        assert!(offset + len <= self.segment_size, "room for the copy");
        // In place, the body moves back (or stays), the header lands before it.
        assert!(from.seg != dest || to + head_len <= from_body, "a copy in place moves no byte forward");
        // SAFETY: both ranges lie in the heap: the source record inside its segment (as parsed),
        // the destination below its segment's end (checked). They overlap only when a segment is
        // compacted in place, which `copy` allows for the body; the header goes below the body's
        // new place and at or below its old one (checked), over bytes already read. No reference
        // to either is alive.
        unsafe {
            std::ptr::copy(self.heap.add(from_body), self.heap.add(to + head_len), body);
            std::ptr::copy_nonoverlapping(head.as_ptr(), self.heap.add(to), head_len);
        }
        self.write_record(dest, |_| {}, len)
    }

    /// The next allocation sequence number.
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.meta.next_seq += 1;
        self.meta.next_seq
    }
}
