//! The `MutableMapping` protocol of `segcache.Cache`: `cache[key]`, `del`, `in`, `len`, the
//! `keys`/`values`/`items` views, `pop`, `popitem`, `setdefault`, `update`, `clear`.

use std::sync::atomic::Ordering;

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use super::ops::Store;
use super::Cache;
use crate::convert::key;

#[pymethods]
impl Cache {
    fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let k = self::key(key)?;
        self.lookup_value(py, &k)?.ok_or_else(|| PyKeyError::new_err(key.clone().unbind()))
    }

    fn __setitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.store(py, Store::Set, key, value, None, None, None).map(|_| ())
    }

    fn __delitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.delete(key, None)? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.clone().unbind()))
        }
    }

    /// Whether `key` is present. As with a dict, an object that cannot be a key (an int, an
    /// empty or over-long key) is simply not in the cache: False, not an exception.
    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(k) = self::key(key) else {
            return self.usable().map(|()| false);
        };
        self.with(|c| Ok(c.contains(&k)))
    }

    fn __len__(&self) -> PyResult<usize> {
        self.with(|c| Ok(c.len()))
    }

    /// A view of the keys (`bytes`), as `dict.keys()`; it reads the cache as it is iterated.
    fn keys<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        view(slf, "CacheKeysView")
    }

    /// A view of the values, as `dict.values()`; a key removed while it is iterated is skipped.
    fn values<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        view(slf, "CacheValuesView")
    }

    /// A view of the `(key, value)` pairs, as `dict.items()`; keys as `bytes`.
    fn items<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        view(slf, "CacheItemsView")
    }

    /// Removes `key` and returns its value; `default` when absent, or `KeyError` if no default
    /// was given. A read then a delete: of threads popping one key, at most one gets the value.
    #[pyo3(signature = (key, *default))]
    fn pop<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if default.len() > 1 {
            return Err(PyTypeError::new_err(format!("pop expected at most 2 arguments, got {}", default.len() + 1)));
        }
        let k = self::key(key)?;
        match self.take(py, &k)? {
            Some(v) => Ok(v),
            None if default.len() == 1 => default.get_item(0),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    /// Removes some `(key, value)` pair and returns it (key as `bytes`); `KeyError` when empty.
    fn popitem<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        // Start where the last popitem found a key, so that emptying a cache one popitem at a time
        // does not rescan the emptied part of the table each time; then wrap around once.
        let start = self.pop_hint.load(Ordering::Relaxed);
        let mut cursor = start;
        let mut wrapped = start == 0;
        loop {
            let (keys, next) = self.scan_step(py, cursor, 1)?;
            for k in keys {
                if let Some(v) = self.take(py, &k)? {
                    // A step of count 1 ends with the chain of the first key it finds: the next
                    // popitem starts at that chain (the step's start when it ran to the end).
                    self.pop_hint.store(if next == 0 { cursor } else { next - 1 }, Ordering::Relaxed);
                    return PyTuple::new(py, [PyBytes::new(py, &k).into_any(), v]);
                }
            }
            if next == 0 {
                if wrapped {
                    break;
                }
                wrapped = true;
            } else if wrapped && next >= start && start != 0 {
                break;
            }
            cursor = next;
        }
        self.pop_hint.store(0, Ordering::Relaxed);
        Err(PyKeyError::new_err("popitem(): cache is empty"))
    }

    /// The value of `key` if present; else stores `default` (which must be bytes-like, unless the
    /// cache has a serializer) and returns it, as `dict.setdefault`. Store-if-absent is one
    /// engine `add`.
    #[pyo3(signature = (key, default=None))]
    fn setdefault<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = self::key(key)?;
        let none = py.None().into_bound(py);
        let d = default.unwrap_or(&none);
        for _ in 0..8 {
            if let Some(v) = self.lookup_value(py, &k)? {
                return Ok(v);
            }
            if self.store(py, Store::Add, key, d, None, None, None)? {
                return Ok(d.clone());
            }
            // Another thread stored it between our read and our add: read theirs.
        }
        // Other threads keep storing and removing it: store ours so that it is there, as a dict
        // guarantees.
        self.store(py, Store::Set, key, d, None, None, None)?;
        Ok(d.clone())
    }

    /// Stores every pair of `other` (a mapping, or an iterable of `(key, value)` pairs) and of
    /// the keyword arguments, as `dict.update`, with the cache's default TTL.
    #[pyo3(signature = (other=None, /, **kwargs))]
    fn update(
        &self,
        py: Python<'_>,
        other: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.usable()?;
        if let Some(other) = other {
            if other.hasattr("keys")? {
                for k in other.call_method0("keys")?.try_iter()? {
                    let k = k?;
                    let v = other.get_item(&k)?;
                    self.store(py, Store::Set, &k, &v, None, None, None)?;
                }
            } else {
                for (i, pair) in other.try_iter()?.enumerate() {
                    let pair = pair?;
                    let items: Vec<Bound<'_, PyAny>> = pair
                        .try_iter()
                        .map_err(|_| {
                            PyTypeError::new_err(format!("cannot convert update sequence element #{i} to a sequence"))
                        })?
                        .collect::<PyResult<_>>()?;
                    if items.len() != 2 {
                        return Err(PyValueError::new_err(format!(
                            "update sequence element #{i} has length {}; 2 is required",
                            items.len()
                        )));
                    }
                    self.store(py, Store::Set, &items[0], &items[1], None, None, None)?;
                }
            }
        }
        if let Some(kwargs) = kwargs {
            for (k, v) in kwargs.iter() {
                self.store(py, Store::Set, &k, &v, None, None, None)?;
            }
        }
        Ok(())
    }

    /// Removes every item, as `dict.clear` (the same as `flush()`).
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        self.flush(py, None)
    }
}

/// A view class of `segcache._views` over `cache`.
fn view<'py>(cache: &Bound<'py, Cache>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static VIEWS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let py = cache.py();
    let m = VIEWS.get_or_try_init(py, || py.import("segcache._views").map(Bound::unbind))?;
    m.bind(py).getattr(name)?.call1((cache,))
}
