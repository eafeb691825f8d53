//! Appending records: choosing the segment an item goes to, and writing and publishing it.

use crate::engine::memory::prefetch;
use crate::hashtable::slot::Loc;
use crate::record::{self};
use crate::segments::header::{SegHeader, NONE, POOL_SMALL, SEG_OPEN, SEG_SEALED};
use crate::Segcache;
use crate::{ttl, Result};

/// Whether an item expiring at `expire_at` (0: never) may go to segment `s`, where `width` is the
/// width of the item's TTL bucket: it must not outlive its TTL, nor expire a width or more early.
pub(crate) fn expiry_fits(s: &SegHeader, expire_at: u32, width: u32) -> bool {
    if s.expire_at == 0 {
        expire_at == 0
    } else {
        expire_at >= s.expire_at && expire_at - s.expire_at < width
    }
}

impl Segcache {
    /// Appends a record to the open segment of its TTL bucket (and pool), opening a new segment
    /// when it is full or its expiry window has passed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn append_record(
        &mut self,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        stamp: record::Stamp,
        len: usize,
        ttl: u32,
        expire_at: u32,
        pool: u8,
        now: u32,
    ) -> Result<Loc> {
        let seg = self.segment_for(len, ttl, expire_at, pool, now)?;
        let access = record::access_code(now.saturating_sub(self.seg(seg).create_at));
        let stamp = record::Stamp { access, ..stamp };
        Ok(self.write_record(seg, |dst| record::write(dst, key, value, flags, stamp), len))
    }

    /// The segment a record of `len` bytes expiring at `expire_at` goes to: the open segment of
    /// its TTL bucket (and pool), or a new one when that is full or its expiry window has passed.
    pub(crate) fn segment_for(&mut self, len: usize, ttl: u32, expire_at: u32, pool: u8, now: u32) -> Result<u32> {
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

    pub(crate) fn accepts(&self, seg: u32, len: usize, expire_at: u32, width: u32) -> bool {
        let s = self.seg(seg);
        s.state == SEG_OPEN
            && s.write_offset as usize + len <= self.geo.segment_size
            && expiry_fits(s, expire_at, width)
    }

    /// Writes a record at the segment's write offset and publishes it: the bytes first, then the
    /// offset and the checksum, so that a crash leaves either the whole record or none.
    pub(crate) fn write_record(&mut self, seg: u32, fill: impl FnOnce(&mut [u8]), len: usize) -> Loc {
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

    /// Re-expresses the access byte of the record just copied to `new` from a segment created at
    /// `old_create` (access bytes count from their segment's creation; a copy is not an access).
    pub(crate) fn rebase_access(&mut self, new: Loc, old_create: u32) {
        let new_create = self.seg(new.seg).create_at;
        if new_create == old_create {
            return;
        }
        let at = new.offset as usize + record::ACCESS_AT;
        let space = self.seg_space(new.seg);
        let access = old_create.saturating_add(record::access_age(space[at]));
        space[at] = record::access_code(access.saturating_sub(new_create));
    }

    pub(crate) fn next_seq(&mut self) -> u64 {
        let m = self.meta_mut();
        m.next_seq += 1;
        m.next_seq
    }
}
