//! `segcache.Item`: what `Cache.get_state` found of an item, its value and its state (the meta
//! protocol's stale-while-revalidate bits).

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use segcache_core::Item as EngineItem;

/// An item as `Cache.get_state` read it: its value and metadata, and its state before the read
/// (stale, fetched, last access) with what the read did to it (`won` the recache token, or found
/// it `token_sent` to another reader).
#[pyclass(module = "segcache", frozen, get_all)]
pub struct Item {
    /// The value: `bytes`, or decoded by the cache's serializer.
    pub(crate) value: Py<PyAny>,
    /// The 32-bit client flags given when it was stored.
    flags: u32,
    /// The CAS value (unique per item version, or the one given as `new_cas`).
    cas: u64,
    /// Whole seconds left to live (at least 1); None when it never expires.
    ttl: Option<u64>,
    /// Whether it was read before since it was stored (memcached's `h`).
    fetched: bool,
    /// Seconds since it was last stored or read, before this read (memcached's `l`; coarse:
    /// refreshed at most once a minute).
    last_access: u64,
    /// Whether `invalidate` marked it stale and no store made it fresh since (memcached's `X`).
    stale: bool,
    /// Whether this read won the recache token: recompute the value and store it (`W`).
    won: bool,
    /// Whether another read holds the recache token: serve this value meanwhile (`Z`).
    token_sent: bool,
}

impl Item {
    /// The item `item` with its value as `value`.
    pub(crate) fn new(value: Py<PyAny>, item: &EngineItem<'_>) -> Self {
        Item {
            value,
            flags: item.flags(),
            cas: item.cas(),
            ttl: item.ttl().map(|d| d.as_secs().max(1)),
            fetched: item.fetched(),
            last_access: item.last_access().as_secs(),
            stale: item.is_stale(),
            won: item.won(),
            token_sent: item.token_sent(),
        }
    }
}

#[pymethods]
impl Item {
    fn __repr__(&self, py: Python<'_>) -> String {
        let value = self.value.bind(py);
        let value = match value.cast::<PyBytes>() {
            Ok(b) => format!("<{} bytes>", b.as_bytes().len()),
            Err(_) => format!("<{}>", crate::convert::type_name(value)),
        };
        let b = |x: bool| if x { "True" } else { "False" };
        let ttl = self.ttl.map_or_else(|| "None".to_string(), |t| t.to_string());
        format!(
            "Item(value={value}, flags={}, cas={}, ttl={ttl}, fetched={}, last_access={}, stale={}, won={}, \
             token_sent={})",
            self.flags,
            self.cas,
            b(self.fetched),
            self.last_access,
            b(self.stale),
            b(self.won),
            b(self.token_sent)
        )
    }
}
