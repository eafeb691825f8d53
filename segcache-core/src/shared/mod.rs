//! Thread-safe access: the `SharedCache` handle over sharded engines, the shard lock, and reads
//! that take no lock.

pub(crate) mod handle;
pub(crate) mod lock;
pub(crate) mod peek;
