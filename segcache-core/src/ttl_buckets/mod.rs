//! TTL buckets: the bucket math and expiry.

pub(crate) mod bucket;
pub(crate) mod expire;
pub mod ttl;
