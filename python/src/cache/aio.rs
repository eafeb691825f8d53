//! The asyncio face of `segcache.Cache`: `aget_or_set` (its single flight is Python code,
//! `segcache/_aio.py`, over the two helpers here) and the `memoize` method.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict};
use segcache_core::Error;

use super::Cache;
use crate::convert::{self, key, value, Value};
use crate::errors::engine_error;

/// The function `name` of the Python module `module` (imported once).
fn function<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || py.import(module)?.getattr(name).map(Bound::unbind)).map(|f| f.bind(py).clone())
}

#[pymethods]
impl Cache {
    /// `await cache.aget_or_set(key, loader, ttl=None)`: the value of `key`; on a miss, the value
    /// of `await loader()`, stored with `ttl` and returned. Of the tasks of one event loop that
    /// miss on `key` at once, one awaits its loader and the others await its result (see
    /// `segcache/_aio.py`).
    #[pyo3(signature = (key, loader, ttl=None))]
    fn aget_or_set<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        loader: &Bound<'py, PyAny>,
        ttl: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static GET_OR_SET: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        if !loader.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "aget_or_set: loader must be a coroutine function (or return an awaitable), not {}",
                convert::type_name(loader)
            )));
        }
        let none = py.None().into_bound(py);
        function(py, &GET_OR_SET, "segcache._aio", "get_or_set")?.call1((slf, key, loader, ttl.unwrap_or(&none)))
    }

    /// For `aget_or_set`: encodes `value` as a store would, stores it under `key` with `ttl`
    /// (a value too large to store, or refused for lack of memory, is still returned), and
    /// returns the stored bytes, which `_decode` turns into each waiter's value.
    #[pyo3(signature = (key, value, ttl=None))]
    fn _store_loaded<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        ttl: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = self::key(key)?;
        let ttl = convert::ttl(ttl, self.default_ttl)?;
        let encoded = self.encode(value)?;
        let raw = match self::value(&encoded, usize::MAX)? {
            Value::Borrowed(_) => encoded.clone().cast_into::<PyBytes>()?,
            Value::Owned(b) => b,
        };
        self.with(|c| {
            let v = raw.as_bytes();
            let r = if v.len() >= super::ops::BIG { py.detach(|| c.set(&k, v, 0, ttl)) } else { c.set(&k, v, 0, ttl) };
            match r {
                Ok(()) | Err(Error::TooLarge { .. }) | Err(Error::NoMemory) => Ok(()),
                Err(e) => Err(engine_error(e)),
            }
        })?;
        Ok(raw)
    }

    /// For `aget_or_set`: the value that stored bytes `raw` stand for (the serializer's `loads`,
    /// or `raw` itself).
    fn _decode<'py>(&self, raw: Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyAny>> {
        self.decode(raw)
    }

    /// `@cache.memoize(ttl=None, *, serializer=None, typed=False, key_prefix=None, lock=True)`:
    /// the same decorator as `segcache.memoize(cache, ...)`, for sync and async functions.
    #[pyo3(signature = (ttl=None, *, serializer=None, typed=false, key_prefix=None, lock=true))]
    fn memoize<'py>(
        slf: &Bound<'py, Self>,
        ttl: Option<&Bound<'py, PyAny>>,
        serializer: Option<&Bound<'py, PyAny>>,
        typed: bool,
        key_prefix: Option<&Bound<'py, PyAny>>,
        lock: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        static MEMOIZE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item("serializer", serializer)?;
        kwargs.set_item("typed", typed)?;
        kwargs.set_item("key_prefix", key_prefix)?;
        kwargs.set_item("lock", lock)?;
        function(py, &MEMOIZE, "segcache._memoize", "memoize")?.call((slf, ttl), Some(&kwargs))
    }
}
