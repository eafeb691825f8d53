//! `Cache.compute(key, fn)`: read, decide in Python, write, with no other writer of the key in
//! between; and `segcache.KEEP` / `segcache.REMOVE`, the decisions that store nothing.
//!
//! `fn` is Python code, which may switch threads (the GIL) and call into the cache: it must not
//! run under a shard's lock, since a thread that holds the GIL and waits for that lock would then
//! wait forever. So the decision is written with the item's CAS value as its condition (a put
//! as `cas`, or `add` when the key was absent; a removal as `delete_cas`): when another writer
//! changed the key between the read and the write, nothing is written and `fn` runs again on the
//! new value, as `AtomicReference.updateAndGet` in Java does.

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use segcache_core::{Error, StoreMode, StoreOptions};

use super::Cache;
use crate::convert;
use crate::errors::engine_error;

/// The type of `segcache.KEEP` and `segcache.REMOVE`, the two decisions of a `Cache.compute`
/// function that store no value.
#[pyclass(module = "segcache", frozen, name = "ComputeOp")]
pub struct ComputeOp {
    remove: bool,
}

#[pymethods]
impl ComputeOp {
    fn __repr__(&self) -> &'static str {
        if self.remove {
            "segcache.REMOVE"
        } else {
            "segcache.KEEP"
        }
    }
}

/// Adds `KEEP` and `REMOVE` to the module (not their type: nothing else is of it).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("KEEP", Py::new(m.py(), ComputeOp { remove: false })?)?;
    m.add("REMOVE", Py::new(m.py(), ComputeOp { remove: true })?)?;
    Ok(())
}

/// What a compute function answered.
enum Decision<'py> {
    Keep,
    Remove,
    /// The value to store (bytes-like, checked when it is stored) and its TTL.
    Put(Bound<'py, PyAny>, Duration),
}

/// Reads a compute function's answer: `KEEP`, `REMOVE`, a bytes-like value (stored with the
/// call's TTL), or `(value, ttl)`.
fn decision<'py>(answer: Bound<'py, PyAny>, ttl: Duration) -> PyResult<Decision<'py>> {
    if let Ok(op) = answer.cast::<ComputeOp>() {
        return Ok(if op.get().remove { Decision::Remove } else { Decision::Keep });
    }
    if answer.is_none() {
        return Err(PyTypeError::new_err(
            "the compute function returned None: return the value to store (or (value, ttl)), \
             segcache.KEEP or segcache.REMOVE",
        ));
    }
    if let Ok(pair) = answer.cast::<PyTuple>() {
        if pair.len() != 2 {
            return Err(PyTypeError::new_err(format!(
                "the compute function returned a tuple of {} items: a (value, ttl) pair is expected",
                pair.len()
            )));
        }
        let ttl = convert::ttl_value(&pair.get_item(1)?, "ttl")?;
        return Ok(Decision::Put(pair.get_item(0)?, ttl));
    }
    Ok(Decision::Put(answer, ttl))
}

/// A write that lost to another writer of the key: read again and ask again.
fn lost_race(e: &Error) -> bool {
    matches!(e, Error::Exists | Error::NotFound | Error::NotStored)
}

#[pymethods]
impl Cache {
    /// Calls `fn(current)` with the key's value (`bytes`, or through the cache's serializer the
    /// value it decodes; None when absent) and does what it returns: a value is stored (with `ttl` and `flags`; None: the cache's default
    /// TTL), `(value, ttl)` stores with that TTL, `segcache.KEEP` leaves the key as it is,
    /// `segcache.REMOVE` removes it. Returns the key's value afterwards (None when absent).
    ///
    /// No other writer of the key changes it between the read and the write: if one does, the
    /// write is not made and `fn` runs again with the new value, so concurrent computes lose no
    /// update. `fn` may therefore run more than once: give it no side effects but its answer. An
    /// exception in `fn` propagates and leaves the item unchanged. A stored value takes a new
    /// CAS value.
    #[pyo3(signature = (key, func, ttl=None, flags=None))]
    fn compute<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        func: &Bound<'py, PyAny>,
        ttl: Option<&Bound<'py, PyAny>>,
        flags: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let k = convert::key(key)?;
        let ttl = convert::ttl(ttl, self.default_ttl)?;
        let flags = convert::flags(flags)?;
        if !func.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "compute's func must be callable, not {}",
                convert::type_name(func)
            )));
        }
        self.with(|c| loop {
            let current = match c.get(&k) {
                Some(item) => Some((self.decode(PyBytes::new(py, &item.value))?, item.cas)),
                None => None,
            };
            let answer = func.call1((current.as_ref().map(|(value, _)| value),))?;
            let written = match (decision(answer, ttl)?, &current) {
                (Decision::Keep, _) => return Ok(current.map(|(value, _)| value)),
                (Decision::Remove, None) => return Ok(None),
                (Decision::Remove, Some((_, cas))) => c.delete_cas(&k, *cas).map(|()| None),
                (Decision::Put(answer, ttl), current) => {
                    let mode = current.as_ref().map_or(StoreMode::Add, |(_, cas)| StoreMode::Cas(*cas));
                    let encoded = self.encode(&answer)?;
                    let value = convert::value(&encoded, self.value_limit)?;
                    let v = value.as_slice();
                    c.store_with(&k, v, flags, ttl, mode, StoreOptions::default()).map(|_| {
                        // Through a serializer, the object answered; else the `bytes` stored:
                        // the object itself when it is `bytes`, or a copy.
                        Some(match (&self.serializer, answer.cast::<PyBytes>()) {
                            (Some(_), _) => answer.clone(),
                            (None, Ok(b)) => b.clone().into_any(),
                            (None, Err(_)) => PyBytes::new(py, v).into_any(),
                        })
                    })
                }
            };
            match written {
                Ok(value) => return Ok(value),
                Err(e) if lost_race(&e) => continue,
                Err(e) => return Err(engine_error(e)),
            }
        })
    }
}
