//! TTL buckets: the bucket math and expiry.

pub(crate) mod expire;
pub mod ttl;
