//! The free list of segments, and allocation.

use crate::segments::header::{SegHeader, NONE};
use crate::Segcache;
use crate::{Error, Policy, Result};

impl Segcache {
    pub(crate) fn push_free(&mut self, id: u32) {
        let head = self.meta().free_head;
        *self.seg_mut(id) = SegHeader { next: head, ..SegHeader::EMPTY };
        let m = self.meta_mut();
        m.free_head = id;
        m.free_count += 1;
    }

    pub(crate) fn pop_free(&mut self) -> Option<u32> {
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
    pub(crate) fn alloc_segment(&mut self) -> Result<u32> {
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
}
