//! A TTL bucket: its chain of segments and open segments.

use crate::segments::header::NONE;

/// A TTL bucket: the chain of segments (oldest at head) and the open segment of each pool.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TtlBucket {
    pub head: u32,
    pub tail: u32,
    pub open: [u32; 2],
    pub segments: u32,
    /// Where `Merge` goes on in this chain: the segment after the last merge's sources (a hint,
    /// checked before use; `NONE`: start at the head).
    pub merge_next: u32,
}

impl TtlBucket {
    pub const EMPTY: TtlBucket = TtlBucket { head: NONE, tail: NONE, open: [NONE; 2], segments: 0, merge_next: NONE };
}
