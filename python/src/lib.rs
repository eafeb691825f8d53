//! `segcache._segcache`: the native half of the `segcache` Python package.
//!
//! - [`cache`]: `segcache.Cache`, a thread-safe cache over `segcache_core::SharedCache`.
//! - [`clock`]: `segcache.ManualClock`, a clock that tests move by hand.
//! - [`convert`]: turning Python arguments (keys, values, TTLs, sizes) into engine arguments.
//! - [`item`]: `segcache.Item`, an item and its state as `Cache.get_state` read it.
//! - [`errors`]: engine errors as the exceptions of `segcache._errors`.
//!
//! The Python half (`python/segcache/`) re-exports these and adds `memoize`.

use pyo3::prelude::*;

mod cache;
mod clock;
mod convert;
mod errors;
mod item;

/// `gil_used = true`: the abi3 wheel targets GIL-enabled CPython (the limited API does not exist on
/// free-threaded builds). The cache itself keeps all state behind locks and is safe under
/// `threading`; bytes-like arguments other than `bytes` are copied under the GIL, which is what
/// keeps them from changing under us.
#[pymodule(gil_used = true)]
fn _segcache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<cache::Cache>()?;
    m.add_class::<clock::ManualClock>()?;
    m.add_class::<item::Item>()?;
    m.add("MAX_KEY_LEN", segcache_core::MAX_KEY_LEN)?;
    m.add("MIN_SEGMENT_SIZE", segcache_core::MIN_SEGMENT_SIZE)?;
    m.add("MAX_SEGMENT_SIZE", segcache_core::MAX_SEGMENT_SIZE)?;
    m.add("MAX_TTL", convert::MAX_TTL_SECS)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
