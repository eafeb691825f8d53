//! # segcache-core
//!
//! A cache storage engine after the Segcache design (Yang, Yue, Vinayak, NSDI'21): items are
//! appended to fixed-size segments of one pre-allocated heap, indexed by a compact chained hash
//! table of 64-byte buckets, grouped by TTL so that expiry frees whole segments, and evicted a
//! segment at a time; a rewrite of the same length goes where the old copy lies. The heap may
//! live in a file, so that a restart, graceful or after a crash, comes back warm.
//!
//! - [`Segcache`]: the single-owner engine (`&mut self` for writes, `&self` for reads).
//! - [`SharedCache`]: the thread-safe handle over sharded engines.
//! - [`Builder`]: every setting; `build()` or `build_shared()`.
//! - [`parse_size`]: a size written as text (`64MiB`, `512k`), read as every face of segcache
//!   reads it (each unit a power of 1024).
//! - [`SharedCache::get_or_insert_with`] / [`SharedCache::try_get_or_insert_with`]: single-flight
//!   loaders (one loader per missing key at a time; see [`LoadError`]).
//!
//! Two optional features, off by default:
//! - `serde`: `TypedCache`, a handle for keys and values of any serde type (a `Codec` turns
//!   them into bytes; the default is postcard's format).
//! - `async`: `SharedCache::get_or_insert_with_async` and `try_get_or_insert_with_async`,
//!   single-flight loaders that take a future and run on any executor.
//!
//! Both handles have the same operations, with memcached's semantics: reads
//! ([`SharedCache::get`], [`SharedCache::get_with`], [`SharedCache::get_many`]), stores
//! ([`SharedCache::set`], [`SharedCache::add`], [`SharedCache::replace`], [`SharedCache::cas`]),
//! read-modify-writes ([`SharedCache::append`], [`SharedCache::incr`], [`SharedCache::touch`],
//! ...), memcached's meta-command item state ([`ReadOptions`], [`StoreOptions`],
//! [`SharedCache::invalidate`]), key scans ([`SharedCache::scan`]) and whole-cache calls
//! ([`SharedCache::flush`], [`SharedCache::stats`], [`SharedCache::close`]). Every failure is a
//! variant of one [`Error`]. With [`Builder::path`] the heap lives in a file and comes back after
//! a restart, graceful or after a crash; [`Policy`] picks how a full heap makes room, and
//! [`Builder::eviction_listener`] tells you of each item that leaves, and why. The
//! repository's `docs/rust.md` is the user guide, and `docs/design.md` tells how it works.
//!
//! ```
//! use std::time::Duration;
//! let mut cache = segcache_core::Builder::new().heap_size(8 << 20).build()?;
//! cache.set(b"greeting", b"hello", 0, Duration::from_secs(60))?;
//! assert_eq!(cache.get(b"greeting").unwrap().value(), b"hello");
//! assert_eq!(cache.incr(b"greeting", 1).unwrap_err().to_string(), "cannot increment or decrement non-numeric value");
//! # Ok::<(), segcache_core::Error>(())
//! ```

#![warn(missing_docs)]

// A persistence file holds the engine's tables as the processor lays them out, and files move
// between machines: one byte order and one word size for every build keeps every file readable
// wherever the crate builds.
#[cfg(not(all(target_endian = "little", target_pointer_width = "64")))]
compile_error!("segcache-core builds for little-endian 64-bit targets only (x86-64, AArch64, RISC-V 64, ...)");

mod arena;
mod builder;
mod clock;
mod engine;
mod error;
mod eviction;
mod fork;
#[cfg(feature = "async")]
mod future;
mod hash;
mod hashtable;
mod item;
mod large;
mod layout;
mod listener;
mod meta;
mod persist;
mod prefetch;
mod record;
mod segments;
mod shared;
mod size;
mod stats;
mod sync;
mod tier;
mod ttl_buckets;
#[cfg(feature = "serde")]
mod typed;

pub use builder::{
    Builder, DEFAULT_HEAP_SIZE, DEFAULT_SEGMENT_SIZE, DEFAULT_TIER_WRITE_QUEUE, MAX_ITEM_SIZE, MAX_SEGMENT_SIZE,
    MIN_SEGMENT_SIZE,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::compute::{Computed, Op};
pub use engine::keys::record_size;
pub use engine::read::ReadOptions;
pub use engine::rmw::{parse_decimal, Delta, RmwOptions};
pub use engine::write::{Mode as StoreMode, StoreOptions};
pub use engine::Segcache;
pub use error::{Error, LoadError, Result};
pub use eviction::policy::Policy;
pub use item::{Item, OwnedItem};
pub use listener::{RemovalCause, RemovalListener};
pub use persist::file_layout::FileLayout;
pub use persist::header::FORMAT_VERSION;
pub use record::MAX_KEY_LEN;
pub use shared::handle::SharedCache;

pub use size::{parse_size, SizeError};
pub use stats::{Figure, FigureKind, Stats};
pub use ttl_buckets::ttl;
#[cfg(feature = "serde")]
pub use typed::{Codec, CodecError, Postcard, TypedCache, TypedError};
