//! The free list of segments.

use crate::segments::header::{SegHeader, NONE};
use crate::segments::Segments;

impl Segments<'_> {
    /// Resets segment `id`'s header and puts it at the head of the free list.
    pub(crate) fn push_free(&mut self, id: u32) {
        let head = self.meta.free_head;
        *self.header_mut(id) = SegHeader { next: head, ..SegHeader::EMPTY };
        self.meta.free_head = id;
        self.meta.free_count += 1;
    }

    /// Takes the free list's head, if any.
    pub(crate) fn pop_free(&mut self) -> Option<u32> {
        let id = self.meta.free_head;
        if id == NONE {
            return None;
        }
        let next = self.header(id).next;
        self.meta.free_head = next;
        self.meta.free_count -= 1;
        Some(id)
    }
}
