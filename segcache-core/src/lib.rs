//! # segcache-core
//!
//! A cache storage engine after the Segcache design (Yang, Yue, Vinayak, NSDI'21): items are
//! appended to fixed-size segments of one pre-allocated heap, indexed by a compact chained hash
//! table of 64-byte buckets, grouped by TTL so that expiry frees whole segments, and evicted a
//! segment at a time. The heap may live in a file for warm restart.
//!
//! - [`Segcache`]: the single-owner engine (`&mut self` for writes).
//! - [`SharedCache`]: the thread-safe handle over sharded engines.
//! - [`Builder`]: every setting; `build()` or `build_shared()`.

mod clock;
mod config;
mod engine;
mod error;
pub mod hash;
mod item;
mod policy;
mod shared;
mod stats;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{Builder, MAX_KEY_LEN, MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE};
pub use engine::Segcache;
pub use error::{Error, Result};
pub use item::{Item, OwnedItem};
pub use policy::Policy;
pub use shared::SharedCache;
pub use stats::Stats;

impl Builder {
    /// A single-owner engine.
    pub fn build(self) -> Result<Segcache> {
        Segcache::new(&self)
    }

    /// A thread-safe, sharded cache.
    pub fn build_shared(self) -> Result<SharedCache> {
        self.validate()?;
        let n = self.shard_count()?;
        let mut per = self.clone();
        per.heap_size = self.heap_size / n;
        let engines = (0..n).map(|_| Segcache::new(&per)).collect::<Result<Vec<_>>>()?;
        Ok(SharedCache::from_engines(engines))
    }
}
