//! `segcache._segcache`: the native half of the `segcache` Python package.
//!
//! - [`cache`]: `segcache.Cache`, a thread-safe cache over `segcache_core::SharedCache`.
//! - [`clock`]: `segcache.ManualClock`, a clock that tests move by hand.
//! - [`convert`]: turning Python arguments (keys, values, TTLs, sizes) into engine arguments.
//! - [`item`]: `segcache.Item`, an item and its state as `Cache.get_state` read it.
//! - [`listener`]: telling `Cache(eviction_listener=...)` of removed items, outside the engine's locks.
//! - [`serializer`]: `Cache(serializer=...)`, the encoding of values other than bytes.
//! - [`errors`]: engine errors as the exceptions of `segcache._errors`.
//!
//! The Python half (`python/segcache/`) re-exports these and adds `memoize`.

use pyo3::prelude::*;

mod cache;
mod clock;
mod convert;
mod errors;
mod item;
mod listener;
mod serializer;

/// `gil_used = false`: on a free-threaded CPython (3.13t and later) importing the module leaves
/// the GIL off. The abi3 wheel is for GIL builds (they have no limited API); built by such an
/// interpreter, pyo3 makes a version-specific module instead, and this is what it declares. It
/// holds without the GIL because:
/// - pyo3 compiles no `#[pyclass]` that is not `Sync` (and none here is `unsendable`), and
///   `Cache` is a frozen class whose state is `Sync` on its own: the engine (`SharedCache`, sharded,
///   a reader-writer lock per shard) behind a `parking_lot::RwLock`, the closing flag and the
///   `popitem` hint atomics, the rest fixed at open (the serializer's callables included;
///   `aget_or_set`'s dict of flights is a Python dict, which locks itself without the GIL). `ManualClock` (an `Arc` of the core's
///   atomic clock) and `Item` (read-only fields) are frozen too.
/// - `KeyIterator`, the only class with `&mut self` methods, relies on pyo3's per-object borrow
///   flag, an atomic: two threads advancing one iterator get a
///   `RuntimeError` (already borrowed), never a shared `&mut`.
/// - No `static` but `PyOnceLock`s (the `segcache._errors` and `segcache._views` modules,
///   `datetime.timedelta`), which initialise once under their own lock.
/// - The one raw pointer handed to another thread (`SendPtr` in a large `get`) points into a
///   `bytes` object that this call has just created and not yet shared.
/// - `bytearray` and other buffer arguments are copied by `PyBytes_FromObject`, which holds a
///   buffer export for the copy: the object cannot be resized meanwhile; a concurrent write into
///   it can tear the copied value, as it can for any reader of a shared `bytearray` there.
#[pymodule(gil_used = false)]
fn _segcache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<cache::Cache>()?;
    m.add_class::<clock::ManualClock>()?;
    m.add_class::<item::Item>()?;
    cache::register_compute(m)?;
    m.add("MAX_KEY_LEN", segcache_core::MAX_KEY_LEN)?;
    m.add("MIN_SEGMENT_SIZE", segcache_core::MIN_SEGMENT_SIZE)?;
    m.add("MAX_SEGMENT_SIZE", segcache_core::MAX_SEGMENT_SIZE)?;
    m.add("MAX_TTL", convert::MAX_TTL_SECS)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
