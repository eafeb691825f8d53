//! Python arguments to engine arguments. Every error names the argument it is about.
//!
//! The hot path is `bytes` keys and values: they are borrowed without a copy. Other bytes-like
//! objects (bytearray, memoryview, NumPy arrays, anything with the buffer protocol) are copied
//! once into a `bytes` object under the GIL, since the limited API of Python 3.10 has no buffer
//! access and since a mutable buffer could change while the engine reads it.

use std::borrow::Cow;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyMemoryView, PyString, PyType};
use segcache_core::MAX_KEY_LEN;

use crate::errors::{engine_error, too_large};

/// Longest TTL accepted: ten years. Expiry times are absolute u32 Unix seconds in the engine, so
/// an unbounded TTL would wrap.
pub const MAX_TTL_SECS: u64 = 10 * 365 * 24 * 3600;

/// The Python type name of `v`, for error messages.
pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A key as bytes: borrowed from `bytes` and (when Python keeps a UTF-8 copy) from `str`,
/// copied from other bytes-like objects. Empty and over-long keys are refused here so that every
/// operation, reads included, reports them the same way.
#[inline]
pub fn key<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    let k: Cow<'a, [u8]> = if let Ok(b) = v.cast::<PyBytes>() {
        Cow::Borrowed(b.as_bytes())
    } else if let Ok(s) = v.cast::<PyString>() {
        match s.to_cow()? {
            Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        }
    } else {
        let too_long = |len| engine_error(segcache_core::Error::KeyTooLong { len });
        Cow::Owned(buffer_copy(v, "key", "str or a bytes-like object", MAX_KEY_LEN, too_long)?.as_bytes().to_vec())
    };
    check_key_len(k.len())?;
    Ok(k)
}

#[inline]
fn check_key_len(len: usize) -> PyResult<()> {
    if len == 0 {
        return Err(engine_error(segcache_core::Error::EmptyKey));
    }
    if len > MAX_KEY_LEN {
        return Err(engine_error(segcache_core::Error::KeyTooLong { len }));
    }
    Ok(())
}

/// A value's bytes: borrowed from a `bytes` object, or from a `bytes` copy of another buffer.
pub enum Value<'a, 'py> {
    Borrowed(&'a [u8]),
    Owned(Bound<'py, PyBytes>),
}

impl Value<'_, '_> {
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Value::Borrowed(s) => s,
            Value::Owned(b) => b.as_bytes(),
        }
    }
}

///
/// A buffer longer than `limit` (the cache's largest item, or a whole segment: no item longer
/// fits) raises `TooLarge` before it is copied, so that an oversized argument costs no copy of
/// its size; the engine checks the exact limit (and, for `append`/`prepend`, the joined length)
/// before it copies anything.
#[inline]
pub fn value<'a, 'py>(v: &'a Bound<'py, PyAny>, limit: usize) -> PyResult<Value<'a, 'py>> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(Value::Borrowed(b.as_bytes()));
    }
    let too_large =
        |len| too_large(format!("value too large: {len} bytes, more than the largest item ({limit} bytes)"));
    Ok(Value::Owned(buffer_copy(
        v,
        "value",
        "a bytes-like object (bytes, bytearray, memoryview, a buffer)",
        limit,
        too_large,
    )?))
}

/// `bytes(memoryview(v))`: a copy of any object with the buffer protocol. `str` and ints are
/// refused (`bytes()` would encode or zero-fill them, which is never what a cache caller means).
/// A buffer of more than `max` bytes raises `too_long(its length)` before anything is copied.
fn buffer_copy<'py>(
    v: &Bound<'py, PyAny>,
    name: &str,
    what: &str,
    max: usize,
    too_long: impl FnOnce(usize) -> PyErr,
) -> PyResult<Bound<'py, PyBytes>> {
    let py = v.py();
    let refuse = || PyTypeError::new_err(format!("{name} must be {what}, not {}", type_name(v)));
    if v.is_instance_of::<PyString>() || v.is_instance_of::<PyInt>() {
        return Err(refuse());
    }
    // bytearray and memoryview go straight to PyBytes_FromObject; anything else must first pass
    // as a memoryview, which refuses lists and other iterables that `bytes()` would accept.
    let view;
    let src = if v.is_instance_of::<PyByteArray>() || v.is_instance_of::<PyMemoryView>() {
        v
    } else {
        // SAFETY: `v` is a valid object pointer while its Bound lives; PyMemoryView_FromObject
        // returns a new reference or NULL with an exception set, which `from_owned_ptr_or_err`
        // handles.
        view = unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyMemoryView_FromObject(v.as_ptr())) }
            .map_err(|_| refuse())?;
        &view
    };
    // The length in bytes, read without a copy: a bytearray's own, a memoryview's `nbytes`.
    let len = match src.cast::<PyByteArray>() {
        Ok(b) => b.len(),
        Err(_) => src.getattr("nbytes")?.extract::<usize>()?,
    };
    if len > max {
        return Err(too_long(len));
    }
    // SAFETY: as above; PyBytes_FromObject copies the buffer (under the GIL, so a bytearray
    // cannot be resized meanwhile) into a new `bytes` reference, or returns NULL.
    let bytes = unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyBytes_FromObject(src.as_ptr())) }?;
    // SAFETY: PyBytes_FromObject returns an exact `bytes` object on success.
    Ok(unsafe { bytes.cast_into_unchecked() })
}

/// An int from `lo` to `hi` (inclusive); bools and other types are refused.
pub fn int_in_range(v: &Bound<'_, PyAny>, name: &str, lo: u64, hi: u64) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!("{name} must be an int, not {}", type_name(v))));
    }
    match v.extract::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(PyValueError::new_err(format!("{name} must be an int from {lo} to {hi}, got {v}"))),
    }
}

/// `flags`: the 32-bit client flags stored with an item.
#[inline]
pub fn flags(v: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
    match v {
        None => Ok(0),
        Some(v) => int_in_range(v, "flags", 0, u64::from(u32::MAX)).map(|n| n as u32),
    }
}

/// A TTL: `None` means the cache's default; 0 means never expires; ints and floats are seconds
/// (a fraction rounds up, so that a positive TTL never becomes "never"); `timedelta` works too.
#[inline]
pub fn ttl(v: Option<&Bound<'_, PyAny>>, default: Duration) -> PyResult<Duration> {
    let Some(v) = v else { return Ok(default) };
    if v.is_none() {
        return Ok(default);
    }
    ttl_value(v, "ttl")
}

/// A TTL that is given (no default): int/float seconds or `timedelta`.
pub fn ttl_value(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Duration> {
    static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let py = v.py();
    if v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() {
        return int_in_range(v, name, 0, MAX_TTL_SECS).map(Duration::from_secs);
    }
    let secs: f64 = if let Ok(f) = v.cast::<PyFloat>() {
        f.value()
    } else if v.is_instance(TIMEDELTA.import(py, "datetime", "timedelta")?)? {
        v.call_method0("total_seconds")?.extract()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{name} must be seconds (int or float), a datetime.timedelta or None, not {}",
            type_name(v)
        )));
    };
    if !secs.is_finite() || secs < 0.0 || secs > MAX_TTL_SECS as f64 {
        return Err(PyValueError::new_err(format!(
            "{name} must be from 0 to {MAX_TTL_SECS} seconds (0 means never expires), got {secs}"
        )));
    }
    Ok(Duration::from_secs(secs.ceil() as u64))
}

/// A size in bytes: an int, or a string with an optional unit, read by the engine's
/// [`segcache_core::parse_size`] as the server reads its sizes: `"256MiB"`, `"64 KiB"`, `"1.5G"`,
/// `"4096"`. Every unit is a power of 1024, whether written K, KB or KiB (so `"64MB"` is 64 MiB,
/// as memcached's `-m 64` is); units are case-insensitive.
pub fn size(v: &Bound<'_, PyAny>, name: &str) -> PyResult<usize> {
    if let Ok(s) = v.cast::<PyString>() {
        let s = s.to_cow()?;
        return segcache_core::parse_size(&s).ok().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
            PyValueError::new_err(format!(
                "{name}: cannot read {s:?} as a size; give an int or a string like \"256MiB\", \"64KiB\", \"1GB\""
            ))
        });
    }
    if v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() {
        return int_in_range(v, name, 0, usize::MAX as u64).map(|n| n as usize);
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be an int or a string with a unit such as \"256MiB\", not {}",
        type_name(v)
    )))
}
