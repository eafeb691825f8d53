//! Segments: appends, chains per TTL bucket, the free list, and scans.

pub(crate) mod append;
pub(crate) mod chain;
pub(crate) mod free;
pub(crate) mod header;
pub(crate) mod scan;
