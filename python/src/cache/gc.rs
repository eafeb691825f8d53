//! The cycle collector's view of a `Cache`: the Python objects it holds. A listener or a
//! serializer that refers to its own cache (a closure over it, a bound method of an object that
//! holds it) makes a cycle, which the collector can break only if the cache shows it them.

use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use super::Cache;

#[pymethods]
impl Cache {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(s) = &self.serializer {
            s.traverse(&visit)?;
        }
        visit.call(&self.flights)?;
        // `try_lock`: a traversal must not wait; `__clear__` alone takes it, and only briefly.
        if let Some(slot) = self.listener.try_lock() {
            if let Some(f) = slot.as_ref() {
                // One reference: the engine's listener shares this `Arc`.
                visit.call(&**f)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let Some(f) = self.listener.lock().take() else { return };
        // The engine's shards hold the other clones of the `Arc`: drop them, so that the
        // callable goes with the last one, here. Not in a `fork()` child: a shard's lock there
        // may be held by a parent's thread that does not exist in it.
        if self.opener == std::process::id() {
            if let Some(c) = self.inner.read_recursive().as_ref() {
                c.set_eviction_listener(None);
            }
        }
        drop(f);
    }
}
