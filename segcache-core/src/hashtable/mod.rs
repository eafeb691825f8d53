//! The hash table: buckets of slots chained per key hash, with a tag summary per chain.

pub(crate) mod bucket;
pub(crate) mod slot;
pub(crate) mod summary;
pub(crate) mod table;
