//! Thread-safe access: the `SharedCache` handle over sharded engines (each behind its
//! `sync::lock::ShardLock`), reads that take no lock, stores that rewrite in place under the read
//! lock, and the thread that faults the heap in ahead of the writers.

pub(crate) mod handle;
pub(crate) mod loader;
pub(crate) mod peek;
pub(crate) mod toucher;
