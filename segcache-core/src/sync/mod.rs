//! The locks of a shard, below everything that takes them: `ShardLock` (the reader-writer lock
//! with a reader slot per thread and a sequence number for reads that take no lock) and
//! `MappedLock` (the lock that lies in the mapping of a cache processes share, and survives the
//! death of the process that held it).

pub(crate) mod lock;
pub(crate) mod mapped;
