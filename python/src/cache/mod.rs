//! `segcache.Cache`: the Python face of `segcache_core::SharedCache`.
//!
//! # Locking and the GIL
//! - The handle sits in `RwLock<Option<SharedCache>>`: every call takes the read side (one
//!   uncontended atomic), `close()` takes the write side to move the engine out and close it.
//!   Reads use `read_recursive`, which never waits for a queued writer: a thread holding the GIL
//!   can then never wait on a `close()` that itself waits for a thread that needs the GIL. So
//!   that a stream of readers cannot starve `close()`, it first raises `closing`, after which new
//!   calls fail at once with `Closed` and the readers in flight drain.
//! - Rule: no engine lock is ever held while the GIL is being acquired. Work done with the GIL
//!   released (`py.detach`) takes and drops the engine's shard locks inside the closure; work
//!   done with the GIL held (small gets build their `bytes` inside `get_with`) never releases it.
//! - The GIL is released for values of `BIG` bytes or more (see [`ops`]), `flush`, `expire`, `close` and
//!   opening the cache (which may read a persisted heap).
//!
//! # fork()
//! In a `fork()` child of the process that opened the cache, every method that reaches the
//! engine raises `segcache.ForkedError` (reads included, rather than missing): the engine's
//! check is one relaxed load, made in [`Cache::with`]. `close()` there lets the child's copy go
//! (the engine's drop leaves the parent's file alone) and raises it too.
//!
//! A cache opened with `multi_process=True` is shared by processes through its file: in a child
//! the same check joins the file as this process's own (`SharedCache::check_fork`), and every
//! method works there. Its `close()` in a child leaves the cache as any process does; it takes
//! the write side with `try_write`, since a thread of the parent that held the read side when
//! it forked does not exist in the child to release it (then the child leaves when the object
//! is dropped, or at its exit).
//!
//! # Layout
//! The class's methods sit in one `#[pymethods]` block per job (pyo3's `multiple-pymethods`):
//! - this file: the type and its state, [`Cache::with`], construction and lifetime (`close`,
//!   `sync`, `__enter__`/`__exit__`) and the read-only properties;
//! - [`ops`]: the cache operations (`get`, `set`, `cas`, `incr`, `get_or_set`, ...) and their
//!   helpers;
//! - [`compute`]: `compute`, a read-decide-write of one key in Python;
//! - [`listening`]: the cycle collector's view of the `eviction_listener` callable;
//! - [`mapping`]: the `MutableMapping` protocol (`cache[key]`, `keys()`, `pop`, `update`, ...);
//! - [`iter`]: iteration (`iter(cache)`, the views' iterators) over the engine's key scan;
//! - [`aio`]: `aget_or_set` (over `segcache/_aio.py`) and the `memoize` method.
//!
//! # Values
//! With `serializer=` (see [`crate::serializer`]) values are encoded before a store and decoded
//! after a read ([`Cache::encode`], [`Cache::decode`] in [`ops`]), with no engine lock held:
//! the serializer runs Python code, which may release the GIL.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};
use segcache_core::{Error, Policy, SharedCache};

use crate::clock::ManualClock;
use crate::convert;
use crate::errors::{closed, engine_error};
use crate::serializer::Serializer;

mod aio;
mod compute;
mod gc;
mod iter;
mod mapping;
mod ops;

pub use compute::register as register_compute;

/// The thread-safe segment cache. See the package README for the full API.
#[pyclass(module = "segcache", frozen)]
pub struct Cache {
    inner: RwLock<Option<SharedCache>>,
    /// Set by `close()` before it waits for the write lock.
    closing: AtomicBool,
    default_ttl: Duration,
    path: Option<PathBuf>,
    heap_size: usize,
    segment_size: usize,
    /// The longest value a store takes (`max_item_size=`, else what a segment holds): a longer
    /// buffer is refused before it is copied.
    value_limit: usize,
    policy: Policy,
    /// `multi_process=True`: shared by processes through `path`.
    multi_process: bool,
    /// The process that opened the cache (`multi_process` children tell themselves apart by it).
    opener: u32,
    /// Where the last `popitem()` found a key: the next one starts its scan there.
    pop_hint: AtomicU64,
    /// `eviction_listener=` was given: calls hand it the items they removed (`listener`).
    listening: bool,
    /// That callable, shared with the engine's listener: the cycle collector sees it through
    /// this (`listening`), and `__clear__` lets it go.
    listener: parking_lot::Mutex<Option<Arc<Py<PyAny>>>>,
    /// How values other than bytes are stored (`serializer=`); None: bytes in and out.
    serializer: Option<Serializer>,
    /// `aget_or_set`'s loads in progress: `(event loop, key)` -> the future its waiters await.
    flights: Py<PyDict>,
}

impl Cache {
    /// Runs `f` on the open engine, or raises `segcache.Closed` (after `close()`) or
    /// `segcache.ForkedError` (in a `fork()` child of the process that opened it).
    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&SharedCache) -> PyResult<R>) -> PyResult<R> {
        let result = {
            let guard = self.inner.read_recursive();
            match guard.as_ref() {
                Some(c) if !self.closing.load(Ordering::Relaxed) => {
                    c.check_fork().map_err(engine_error)?;
                    f(c)
                }
                _ => Err(closed()),
            }
        };
        // After the engine returned and its locks are released: the listener may use the cache.
        if self.listening {
            crate::listener::deliver();
        }
        result
    }

    /// `Closed` or `ForkedError` as [`Cache::with`] would raise them, for a method that may not
    /// reach the engine (an empty `set_many`, say).
    #[inline]
    fn usable(&self) -> PyResult<()> {
        self.with(|_| Ok(()))
    }
}

#[pymethods]
impl Cache {
    #[new]
    #[pyo3(signature = (heap_size=None, segment_size=None, eviction=None, ttl=None, path=None,
                        hash_power=None, shards=None, clock=None, reset_bad_file=false,
                        lazy_verify=false, multi_process=false, prefault=false, touch_ahead=true, *,
                        eviction_listener=None, serializer=None, resize_file=false,
                        max_heap_size=None, tier_path=None, tier_size=None, max_item_size=None,
                        tier_promote_after=None, tier_write_queue=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        heap_size: Option<&Bound<'_, PyAny>>,
        segment_size: Option<&Bound<'_, PyAny>>,
        eviction: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        path: Option<&Bound<'_, PyAny>>,
        hash_power: Option<&Bound<'_, PyAny>>,
        shards: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
        reset_bad_file: bool,
        lazy_verify: bool,
        multi_process: bool,
        prefault: bool,
        touch_ahead: bool,
        eviction_listener: Option<&Bound<'_, PyAny>>,
        serializer: Option<&Bound<'_, PyAny>>,
        resize_file: bool,
        max_heap_size: Option<&Bound<'_, PyAny>>,
        tier_path: Option<&Bound<'_, PyAny>>,
        tier_size: Option<&Bound<'_, PyAny>>,
        max_item_size: Option<&Bound<'_, PyAny>>,
        tier_promote_after: Option<&Bound<'_, PyAny>>,
        tier_write_queue: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let serializer = Serializer::from_arg(serializer)?;
        let listener = eviction_listener.filter(|f| !f.is_none());
        if let Some(f) = listener.filter(|f| !f.is_callable()) {
            return Err(PyTypeError::new_err(format!(
                "eviction_listener must be callable, not {}",
                convert::type_name(f)
            )));
        }
        // Unless told, the engine's defaults, as every face of segcache has them.
        let heap_size = match heap_size {
            Some(v) => convert::size(v, "heap_size")?,
            None => segcache_core::DEFAULT_HEAP_SIZE,
        };
        let segment_size = match segment_size {
            Some(v) => convert::size(v, "segment_size")?,
            None => segcache_core::DEFAULT_SEGMENT_SIZE,
        };
        let policy = match eviction {
            None => Policy::Merge,
            Some(v) => {
                let s: String = v.extract().map_err(|_| {
                    PyTypeError::new_err(format!("eviction must be a str, not {}", convert::type_name(v)))
                })?;
                s.parse::<Policy>().map_err(|e| crate::errors::bad_arg(format!("eviction: {e}")))?
            }
        };
        let default_ttl = match ttl {
            Some(v) if !v.is_none() => convert::ttl_value(v, "ttl")?,
            _ => Duration::ZERO,
        };
        let path: Option<PathBuf> = match path {
            Some(v) if !v.is_none() => Some(v.extract().map_err(|_| {
                PyTypeError::new_err(format!("path must be a str or os.PathLike, not {}", convert::type_name(v)))
            })?),
            _ => None,
        };
        let mut b = SharedCache::builder()
            .heap_size(heap_size)
            .segment_size(segment_size)
            .eviction(policy)
            .reset_bad_file(reset_bad_file)
            .lazy_verify(lazy_verify)
            .resize_file(resize_file)
            .multi_process(multi_process)
            .prefault(prefault)
            .touch_ahead(touch_ahead);
        if let Some(v) = max_heap_size.filter(|v| !v.is_none()) {
            b = b.max_heap_size(convert::size(v, "max_heap_size")?);
        }
        let mut value_limit = segment_size;
        if let Some(v) = max_item_size.filter(|v| !v.is_none()) {
            let max = convert::size(v, "max_item_size")?;
            value_limit = value_limit.max(max);
            b = b.max_item_size(max);
        }
        if let Some(v) = hash_power.filter(|v| !v.is_none()) {
            b = b.hash_power(convert::int_in_range(v, "hash_power", 4, 32)? as u8);
        }
        if let Some(v) = shards.filter(|v| !v.is_none()) {
            b = b.shards(convert::int_in_range(v, "shards", 1, 256)? as usize);
        }
        if let Some(v) = clock.filter(|v| !v.is_none()) {
            let clock = v.cast::<ManualClock>().map_err(|_| {
                PyTypeError::new_err(format!("clock must be a segcache.ManualClock, not {}", convert::type_name(v)))
            })?;
            b = b.clock(clock.get().inner.clone());
        }
        if let Some(p) = &path {
            b = b.path(p.clone());
        }
        let promote = match tier_promote_after.filter(|v| !v.is_none()) {
            Some(v) => convert::int_in_range(v, "tier_promote_after", 0, 255)? as u8,
            None => 0,
        };
        let tier_path = tier_path.filter(|v| !v.is_none());
        let tier_size = tier_size.filter(|v| !v.is_none());
        match (tier_path, tier_size) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(engine_error(Error::InvalidConfig(
                    "tier_path needs tier_size: the tier file's size".into(),
                )))
            }
            (None, Some(_)) => {
                return Err(engine_error(Error::InvalidConfig("tier_size needs tier_path: the tier file".into())))
            }
            (Some(p), Some(size)) => {
                let p: PathBuf = p.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "tier_path must be a str or os.PathLike, not {}",
                        convert::type_name(p)
                    ))
                })?;
                if p.as_os_str().is_empty() {
                    return Err(crate::errors::bad_arg("tier_path is an empty string".into()));
                }
                b = b.tier(p, convert::size(size, "tier_size")? as u64).tier_promote_after(promote);
                if let Some(q) = tier_write_queue.filter(|v| !v.is_none()) {
                    b = b.tier_write_queue(convert::size(q, "tier_write_queue")?);
                }
            }
        }
        // Opening may map and check a persisted heap of gigabytes: let other threads run.
        let cache = py.detach(move || b.build_shared()).map_err(engine_error)?;
        let callable = listener.map(|f| Arc::new(f.clone().unbind()));
        if let Some(f) = &callable {
            cache.set_eviction_listener(Some(crate::listener::queueing(Arc::clone(f))));
        }
        Ok(Cache {
            inner: RwLock::new(Some(cache)),
            closing: AtomicBool::new(false),
            default_ttl,
            path,
            heap_size,
            segment_size,
            value_limit,
            policy,
            multi_process,
            opener: std::process::id(),
            pop_hint: AtomicU64::new(0),
            listening: callable.is_some(),
            listener: parking_lot::Mutex::new(callable),
            serializer,
            flights: PyDict::new(py).unbind(),
        })
    }

    /// With `path`: writes the heap to stable storage and returns once it is there (every store
    /// that returned before the call then survives a power loss, not only a crash of the
    /// process). Without a path there is nothing to write. The GIL is released meanwhile.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(|c| py.detach(|| c.sync()).map_err(engine_error))
    }

    /// Closes the cache: with `path`, writes what a warm restart needs and marks the file clean.
    /// Idempotent; every other method raises `segcache.Closed` afterwards.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // In a fork() child: let the inherited engine go (its drop leaves the parent's file
        // alone) and raise ForkedError. `try_write`: a thread of the parent that held the read
        // side when it forked does not exist here to release it.
        let forked = self.inner.read_recursive().as_ref().and_then(|c| c.check_fork().err());
        if let Some(e) = forked {
            self.closing.store(true, Ordering::Relaxed);
            if let Some(mut slot) = self.inner.try_write() {
                drop(slot.take());
            }
            return Err(engine_error(e));
        }
        // A child sharing the cache (`multi_process`) leaves it as any process does, if no
        // thread held the read side (one of the parent's when it forked, say): else it leaves
        // when the object is dropped, or at its exit, and calls raise `Closed` meanwhile.
        if self.opener != std::process::id() {
            self.closing.store(true, Ordering::Relaxed);
            let taken = self.inner.try_write().and_then(|mut slot| slot.take());
            return match taken {
                Some(c) => py.detach(move || c.close()).map_err(engine_error),
                None => Ok(()),
            };
        }
        // The write lock is taken with the GIL released: readers that hold the read side may need
        // the GIL to finish.
        self.closing.store(true, Ordering::Relaxed);
        let taken = py.detach(|| self.inner.write().take());
        match taken {
            Some(c) => py.detach(move || c.close()).map_err(engine_error),
            None => Ok(()),
        }
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closing.load(Ordering::Relaxed) || self.inner.read_recursive().is_none()
    }

    /// The persistence file, or None.
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.path.clone()
    }

    /// The default TTL in seconds (0: never expires).
    #[getter]
    fn ttl(&self) -> u64 {
        self.default_ttl.as_secs()
    }

    #[getter]
    fn heap_size(&self) -> usize {
        self.heap_size
    }

    #[getter]
    fn segment_size(&self) -> usize {
        self.segment_size
    }

    #[getter]
    fn eviction(&self) -> &'static str {
        self.policy.name()
    }

    /// The serializer given as `serializer=` (`"pickle"` or the object), or None: values are bytes.
    #[getter]
    fn serializer<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.serializer.as_ref().map(|s| s.given(py))
    }

    /// `aget_or_set`'s loads in progress on this cache (for `segcache._aio`).
    #[getter]
    fn _flights<'py>(&self, py: Python<'py>) -> Bound<'py, PyDict> {
        self.flights.bind(py).clone()
    }

    /// `Cache[T]` in annotations evaluated at run time, as for the generic classes of `typing`.
    #[classmethod]
    fn __class_getitem__<'py>(cls: &Bound<'py, PyType>, item: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = cls.py();
        py.import("types")?.getattr("GenericAlias")?.call1((cls, item))
    }

    /// Whether the cache is shared by processes through its file (`multi_process=True`).
    #[getter]
    fn multi_process(&self) -> bool {
        self.multi_process
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        if let Some(c) = slf.get().inner.read_recursive().as_ref() {
            c.check_fork().map_err(engine_error)?;
        }
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = match self.inner.read_recursive().as_ref() {
            Some(c) if c.check_fork().is_err() => "forked".into(),
            Some(c) => format!("items={}", c.len()),
            None => "closed".into(),
        };
        format!(
            "<segcache.Cache heap_size={} segment_size={} eviction={} {}>",
            self.heap_size,
            self.segment_size,
            self.policy.name(),
            state
        )
    }
}
