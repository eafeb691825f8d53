//! A cache's value serializer (`Cache(serializer=...)`): how objects other than bytes become the
//! bytes the engine stores, and back.
//!
//! A cache without one stores bytes-like values and returns `bytes`, and never calls into Python
//! for it. With `serializer="pickle"` values go through `pickle.dumps` at the highest protocol and
//! `pickle.loads`; with any other object, through its `dumps(value)` and `loads(data)` (the `json`
//! module, say). `dumps` may return `bytes` (or another bytes-like object) or `str`, which is
//! stored as UTF-8; `loads` is given `bytes`.
//!
//! Neither is ever called with an engine lock held: both run Python code, which may release the
//! GIL, and a thread that takes a shard's lock with the GIL held would then wait for ours.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};
use pyo3::{PyTraverseError, PyVisit};

use crate::convert::type_name;

/// The callables that encode and decode a cache's values.
pub struct Serializer {
    /// What `Cache(serializer=...)` was given: `"pickle"` or the object (the `serializer` property).
    given: Py<PyAny>,
    /// `pickle.dumps` or the object's bound `dumps`.
    dumps: Py<PyAny>,
    /// `pickle.loads` or the object's bound `loads`.
    loads: Py<PyAny>,
    /// `pickle.HIGHEST_PROTOCOL`, passed as `dumps`'s second argument; None for other serializers.
    protocol: Option<Py<PyAny>>,
}

impl Serializer {
    /// The serializer `Cache(serializer=v)` asks for: None (bytes in and out), `"pickle"`, or an
    /// object with callable `dumps` and `loads`.
    pub fn from_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Self>> {
        let Some(v) = v.filter(|v| !v.is_none()) else { return Ok(None) };
        let py = v.py();
        if let Ok(s) = v.cast::<PyString>() {
            let s = s.to_cow()?;
            if s != "pickle" {
                return Err(PyValueError::new_err(format!(
                    "serializer: unknown name {s:?}; give \"pickle\", or an object with dumps() and loads() \
                     (such as the json module)"
                )));
            }
            let pickle = py.import("pickle")?;
            return Ok(Some(Serializer {
                given: v.clone().unbind(),
                dumps: pickle.getattr("dumps")?.unbind(),
                loads: pickle.getattr("loads")?.unbind(),
                protocol: Some(pickle.getattr("HIGHEST_PROTOCOL")?.unbind()),
            }));
        }
        let method = |name: &str| -> PyResult<Py<PyAny>> {
            match v.getattr(name) {
                Ok(f) if f.is_callable() => Ok(f.unbind()),
                _ => Err(PyTypeError::new_err(format!(
                    "serializer must be None, \"pickle\" or an object with callable dumps() and loads(); \
                     {} has no callable {name}()",
                    type_name(v)
                ))),
            }
        };
        Ok(Some(Serializer {
            given: v.clone().unbind(),
            dumps: method("dumps")?,
            loads: method("loads")?,
            protocol: None,
        }))
    }

    /// Shows the garbage collector the Python objects held, so that a cycle through a user's
    /// serializer (one that holds the cache, say) can be collected.
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.given)?;
        visit.call(&self.dumps)?;
        visit.call(&self.loads)?;
        visit.call(&self.protocol)
    }

    /// What the `serializer` property returns: `"pickle"` or the object given.
    pub fn given<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.given.bind(py).clone()
    }

    /// A short name for messages: `pickle`, or the serializer's type.
    pub fn name(&self, py: Python<'_>) -> String {
        let g = self.given.bind(py);
        if g.is_instance_of::<PyString>() {
            "pickle".into()
        } else {
            // A module's type name ("module") says nothing: give its own name.
            g.getattr("__name__").ok().and_then(|n| n.extract::<String>().ok()).unwrap_or_else(|| type_name(g))
        }
    }

    /// `value` encoded: a bytes-like object (a `str` from `dumps` becomes its UTF-8 `bytes`).
    pub fn dumps<'py>(&self, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = value.py();
        let out = call(self.dumps.bind(py), value, self.protocol.as_ref().map(|p| p.bind(py)))?;
        if out.is_instance_of::<PyBytes>()
            || out.is_instance_of::<PyByteArray>()
            || out.is_instance_of::<PyMemoryView>()
        {
            return Ok(out);
        }
        if let Ok(s) = out.cast::<PyString>() {
            return Ok(PyBytes::new(py, s.to_cow()?.as_bytes()).into_any());
        }
        Err(PyTypeError::new_err(format!(
            "serializer {}: dumps() returned {}; it must return bytes or str",
            self.name(py),
            type_name(&out)
        )))
    }

    /// The value that `data` (bytes a `dumps` made) stands for.
    pub fn loads<'py>(&self, data: &Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyAny>> {
        call(self.loads.bind(data.py()), data.as_any(), None)
    }
}

/// `f(a)`, or `f(a, b)` when `b` is given.
///
/// Through `PyObject_CallFunctionObjArgs`, which hands the arguments to the callee from a small
/// array on the C stack (vectorcall). `call1` would build an argument tuple, allocated, filled
/// and freed on every get and set: the stable ABI of Python 3.10, which this module is built
/// for, has no `PyObject_Vectorcall` (it has from 3.12).
#[inline(always)]
fn call<'py>(
    f: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    b: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let end = std::ptr::null_mut::<pyo3::ffi::PyObject>();
    // SAFETY: `f`, `a` and `b` are live objects (borrowed for the call, as the function only
    // borrows its arguments), the argument list ends with the NULL the function expects, and the
    // result is a new reference or NULL with an exception set, which from_owned_ptr_or_err takes.
    unsafe {
        let out = match b {
            Some(b) => pyo3::ffi::PyObject_CallFunctionObjArgs(f.as_ptr(), a.as_ptr(), b.as_ptr(), end),
            None => pyo3::ffi::PyObject_CallFunctionObjArgs(f.as_ptr(), a.as_ptr(), end),
        };
        Bound::from_owned_ptr_or_err(f.py(), out)
    }
}
