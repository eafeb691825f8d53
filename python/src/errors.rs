//! Engine errors as Python exceptions. The classes live in `segcache/_errors.py` (where they can
//! derive from both `segcache.Error` and a builtin such as `ValueError`); they are imported once.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use segcache_core::Error;

/// The exception class `name` of `segcache._errors`.
fn class<'py>(py: Python<'py>, name: &'static str) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let m = MODULE.get_or_try_init(py, || py.import("segcache._errors").map(Bound::unbind))?;
    Ok(m.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

fn raise(name: &'static str, msg: String) -> PyErr {
    Python::attach(|py| match class(py, name) {
        Ok(cls) => PyErr::from_type(cls, msg),
        Err(e) => e,
    })
}

/// The exception for an engine error. Outcomes that methods report as return values (NotFound,
/// NotStored, Exists) are matched before this is called; they still map to their own classes
/// for the callers (such as `cas`) that raise them.
pub fn engine_error(e: Error) -> PyErr {
    let msg = e.to_string();
    let name = match e {
        Error::NotFound => "NotFound",
        Error::Exists => "Exists",
        Error::NotStored => "NotStored",
        Error::TooLarge { .. } => "TooLarge",
        Error::KeyTooLong { .. } => "KeyTooLong",
        Error::EmptyKey => "EmptyKey",
        Error::NoMemory => "NoMemory",
        Error::NotNumeric => "NotNumeric",
        Error::InvalidConfig(_) => "InvalidConfig",
        Error::Io { .. } => "PersistenceError",
        Error::BadFile { .. } => "BadFile",
        Error::Locked { .. } => "Locked",
        Error::NoSpace { .. } => "NoSpace",
        Error::Map { .. } => "MapError",
        Error::Forked => "ForkedError",
        _ => "Error",
    };
    raise(name, msg)
}

/// `segcache.TooLarge` for an argument refused before it reaches the engine.
pub fn too_large(msg: String) -> PyErr {
    raise("TooLarge", msg)
}

/// Raised by every method after `close()`.
pub fn closed() -> PyErr {
    raise("Closed", "the cache is closed".into())
}

/// An argument error that is not the engine's: a plain ValueError naming the argument.
pub fn bad_arg(msg: String) -> PyErr {
    PyValueError::new_err(msg)
}
