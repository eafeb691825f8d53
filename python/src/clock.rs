//! `segcache.ManualClock`: the engine's manual clock, so that TTL tests need no sleeps.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use segcache_core::{Clock, SystemClock};

/// A clock that moves only when told to. Pass it as `Cache(clock=...)`; the cache reads its time
/// from it (Unix seconds), so `advance(10)` makes a 10-second TTL run out at once.
#[pyclass(module = "segcache", frozen)]
pub struct ManualClock {
    pub(crate) inner: Arc<segcache_core::ManualClock>,
}

#[pymethods]
impl ManualClock {
    /// `now`: the starting time in Unix seconds; the current time when left out.
    #[new]
    #[pyo3(signature = (now=None))]
    fn new(now: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let now = match now {
            None => SystemClock.now(),
            Some(v) => seconds_u32(v, "now")?,
        };
        Ok(ManualClock { inner: segcache_core::ManualClock::new(now) })
    }

    /// Moves the clock forward by `seconds` (a non-negative int).
    fn advance(&self, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        let secs = seconds_u32(seconds, "seconds")?;
        let now = self.inner.now();
        if now.checked_add(secs).is_none() {
            return Err(PyValueError::new_err(format!(
                "seconds: advancing by {secs} would move the clock past 2**32 - 1"
            )));
        }
        self.inner.advance(secs);
        Ok(())
    }

    /// Sets the clock to `now` (Unix seconds).
    fn set(&self, now: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.set(seconds_u32(now, "now")?);
        Ok(())
    }

    /// The clock's time, Unix seconds.
    #[getter]
    fn now(&self) -> u32 {
        self.inner.now()
    }

    fn __repr__(&self) -> String {
        format!("segcache.ManualClock(now={})", self.inner.now())
    }
}

/// A whole number of seconds from 0 to 2**32 - 1; the error names the argument.
fn seconds_u32(v: &Bound<'_, PyAny>, name: &str) -> PyResult<u32> {
    crate::convert::int_in_range(v, name, 0, u64::from(u32::MAX)).map(|n| n as u32)
}
