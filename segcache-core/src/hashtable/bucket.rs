//! A bucket of the hash table (one cache line of slots), and the overflow pool's bookkeeping:
//! the table's parts that lie in the file as they are.

use std::sync::atomic::AtomicU64;

/// One cache line: slot 0 of a chain's head is the bucket info, the rest are item slots; slot 7
/// links to the next bucket when the chain goes on.
#[repr(C, align(64))]
pub struct Bucket {
    pub slots: [AtomicU64; 8],
}

/// The overflow pool's bookkeeping: buckets handed out so far (a high-water mark), and the head
/// of the list of buckets given back (bucket index + 1; 0 for none), linked through slot 0.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    pub used: u32,
    pub free: u32,
}
