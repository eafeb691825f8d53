//! Iteration over a `segcache.Cache`: `iter(cache)` and the iterators of the `values()` and
//! `items()` views, read from the engine's key scan a batch at a time.

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use super::Cache;

/// Keys an iterator step asks the engine's scan for (it reads whole hash chains, so a few more
/// may come back).
const SCAN_BATCH: usize = 64;

impl Cache {
    /// One step of a key scan from `cursor` with the GIL released: the keys and the next cursor
    /// (0 when done).
    pub(super) fn scan_step(&self, py: Python<'_>, cursor: u64, count: usize) -> PyResult<(Vec<Vec<u8>>, u64)> {
        self.with(|c| Ok(py.detach(|| c.scan(cursor, count))))
    }
}

#[pymethods]
impl Cache {
    /// An iterator over the keys (as `bytes`), fetched from the engine's key scan a batch at a
    /// time. Other threads may write meanwhile: a key present for the whole iteration comes back
    /// exactly once, keys stored or removed meanwhile at most once; never a key that was not there.
    fn __iter__(slf: &Bound<'_, Self>) -> PyResult<KeyIterator> {
        KeyIterator::new(slf, Yield::Keys)
    }

    /// An iterator over the values (for `values()`): keys from the scan, each read as reached;
    /// a key gone by then is skipped.
    fn _iter_values(slf: &Bound<'_, Self>) -> PyResult<KeyIterator> {
        KeyIterator::new(slf, Yield::Values)
    }

    /// An iterator over `(key, value)` pairs (for `items()`), as `_iter_values`.
    fn _iter_items(slf: &Bound<'_, Self>) -> PyResult<KeyIterator> {
        KeyIterator::new(slf, Yield::Items)
    }
}

/// What a [`KeyIterator`] yields for each key of the scan.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Yield {
    Keys,
    Values,
    Items,
}

/// The iterator of `iter(cache)`: the keys, as `bytes`, from one key scan of the engine (or
/// their values, or `(key, value)` pairs, for the views).
#[pyclass(module = "segcache")]
pub struct KeyIterator {
    cache: Py<Cache>,
    what: Yield,
    /// The scan's next cursor.
    cursor: u64,
    /// Keys read by the last step and not yet handed out.
    batch: VecDeque<Vec<u8>>,
    /// The scan returned cursor 0: once `batch` is empty, iteration ends.
    done: bool,
}

impl KeyIterator {
    fn new(cache: &Bound<'_, Cache>, what: Yield) -> PyResult<Self> {
        cache.get().usable()?;
        Ok(KeyIterator { cache: cache.clone().unbind(), what, cursor: 0, batch: VecDeque::new(), done: false })
    }
}

#[pymethods]
impl KeyIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        loop {
            if let Some(k) = self.batch.pop_front() {
                if self.what == Yield::Keys {
                    return Ok(Some(PyBytes::new(py, &k).into_any()));
                }
                // Values and items: a key removed since the scan listed it is skipped.
                let Some(v) = self.cache.get().lookup_value(py, &k)? else { continue };
                return Ok(Some(match self.what {
                    Yield::Items => PyTuple::new(py, [PyBytes::new(py, &k).into_any(), v])?.into_any(),
                    _ => v,
                }));
            }
            if self.done {
                return Ok(None);
            }
            let (keys, next) = self.cache.get().scan_step(py, self.cursor, SCAN_BATCH)?;
            self.batch.extend(keys);
            self.cursor = next;
            self.done = next == 0;
        }
    }
}
