//! Benchmarks of `segcache-core` against Pelikan's `segcache` 0.4.4, `quick_cache`, `moka` and
//! `lru`: shared pieces of the criterion benchmark (`benches/engine.rs`) and of the binaries that
//! measure memory (`rss`), hit ratio (`hitratio`) and thread scaling (`threads`).

pub mod keys;
pub mod loopback;
pub mod mem;
pub mod store;
pub mod workload;
