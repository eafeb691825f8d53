//! A bucket of the hash table: one cache line of slots.

use std::sync::atomic::AtomicU64;

/// One cache line: slot 0 of a chain's head is the bucket info, the rest are item slots; slot 7
/// links to the next bucket when the chain goes on.
#[repr(C, align(64))]
pub struct Bucket {
    pub slots: [AtomicU64; 8],
}
