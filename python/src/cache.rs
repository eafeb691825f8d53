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
//! - The GIL is released for values of `BIG` bytes or more, `flush`, `expire`, `close` and
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

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use segcache_core::{Error, LoadError, OwnedItem, Policy, ReadOptions, SharedCache, StoreMode, StoreOptions};

use crate::clock::ManualClock;
use crate::convert::{self, key, value};
use crate::errors::{closed, engine_error};
use crate::item::Item;

/// Values at least this long are copied with the GIL released (about 10 us of copying).
const BIG: usize = 64 << 10;

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
    policy: Policy,
    /// `multi_process=True`: shared by processes through `path`.
    multi_process: bool,
    /// The process that opened the cache (`multi_process` children tell themselves apart by it).
    opener: u32,
    /// Where the last `popitem()` found a key: the next one starts its scan there.
    pop_hint: AtomicU64,
}

/// Keys an iterator step asks the engine's scan for (it reads whole hash chains, so a few more
/// may come back).
const SCAN_BATCH: usize = 64;

/// Which write a store call makes.
#[derive(Clone, Copy)]
enum Store {
    Set,
    Add,
    Replace,
}

/// A raw pointer into a fresh `bytes` object that no other thread can see yet, handed to a
/// closure that runs with the GIL released.
struct SendPtr(*mut u8);
// SAFETY: the pointee is a buffer owned by a `bytes` object that only this call references; the
// GIL-released closure is its only user until the call returns.
unsafe impl Send for SendPtr {}

impl Cache {
    /// Runs `f` on the open engine, or raises `segcache.Closed` (after `close()`) or
    /// `segcache.ForkedError` (in a `fork()` child of the process that opened it).
    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&SharedCache) -> PyResult<R>) -> PyResult<R> {
        let guard = self.inner.read_recursive();
        match guard.as_ref() {
            Some(c) if !self.closing.load(Ordering::Relaxed) => {
                c.check_fork().map_err(engine_error)?;
                f(c)
            }
            _ => Err(closed()),
        }
    }

    /// `Closed` or `ForkedError` as [`Cache::with`] would raise them, for a method that may not
    /// reach the engine (an empty `set_many`, say).
    #[inline]
    fn usable(&self) -> PyResult<()> {
        self.with(|_| Ok(()))
    }

    /// The value as a new `bytes`, or `None` on a miss.
    #[inline(always)]
    fn lookup<'py>(&self, py: Python<'py>, k: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.with(|c| {
            // Small values: the `bytes` object is built straight from the slot under the shard's
            // read lock; the GIL stays held, so nothing can wait on us for it.
            let r = c.get_with(k, |item| {
                let v = item.value();
                if v.len() < BIG {
                    Ok(PyBytes::new(py, v))
                } else {
                    Err(v.len())
                }
            });
            match r {
                None => Ok(None),
                Some(Ok(b)) => Ok(Some(b)),
                Some(Err(len)) => big_get(py, c, k, len),
            }
        })
    }

    /// The item copied out by `op` (a read that copies, run with the GIL released), or `None`.
    #[inline]
    fn fetch(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&SharedCache) -> Option<OwnedItem> + Send,
    ) -> PyResult<Option<OwnedItem>> {
        self.with(|c| Ok(py.detach(|| op(c))))
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &self,
        py: Python<'_>,
        op: Store,
        k: &Bound<'_, PyAny>,
        v: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
        new_cas: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let k = key(k)?;
        let v = value(v, self.segment_size)?;
        let ttl = convert::ttl(ttl, self.default_ttl)?;
        let flags = convert::flags(flags)?;
        let new_cas = cas_arg(new_cas, "new_cas")?;
        self.with(|c| {
            let (k, v) = (&*k, v.as_slice());
            stored(detach_if_big(py, v.len(), || match (op, new_cas) {
                (Store::Set, None) => c.set(k, v, flags, ttl),
                (Store::Add, None) => c.add(k, v, flags, ttl),
                (Store::Replace, None) => c.replace(k, v, flags, ttl),
                (op, cas) => {
                    let mode = match op {
                        Store::Set => StoreMode::Set,
                        Store::Add => StoreMode::Add,
                        Store::Replace => StoreMode::Replace,
                    };
                    c.store_with(k, v, flags, ttl, mode, StoreOptions { cas, ..StoreOptions::default() }).map(drop)
                }
            }))
        })
    }

    fn concat(&self, py: Python<'_>, k: &Bound<'_, PyAny>, v: &Bound<'_, PyAny>, front: bool) -> PyResult<bool> {
        let k = key(k)?;
        let v = value(v, self.segment_size)?;
        self.with(|c| {
            let (k, v) = (&*k, v.as_slice());
            // An append copies the whole item, whose size we do not know: release the GIL when
            // the part we add is big.
            stored(detach_if_big(py, v.len(), || if front { c.prepend(k, v) } else { c.append(k, v) }))
        })
    }

    /// One step of a key scan from `cursor` with the GIL released: the keys and the next cursor
    /// (0 when done).
    fn scan_step(&self, py: Python<'_>, cursor: u64, count: usize) -> PyResult<(Vec<Vec<u8>>, u64)> {
        self.with(|c| Ok(py.detach(|| c.scan(cursor, count))))
    }

    /// Reads then deletes `k`: its value if this call removed it, `None` if it was absent (or
    /// another thread removed it between the read and the delete, so that of two threads
    /// popping one key at most one gets its value).
    fn take<'py>(&self, py: Python<'py>, k: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let Some(v) = self.lookup(py, k)? else { return Ok(None) };
        let removed = self.with(|c| stored(c.delete(k)))?;
        Ok(removed.then_some(v))
    }

    /// `incr` (`up`) or `decr` by `delta` (1 when not given).
    fn arith(&self, k: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>, up: bool) -> PyResult<Option<u64>> {
        let k = key(k)?;
        let delta = match delta {
            Some(d) => convert::int_in_range(d, "delta", 0, u64::MAX)?,
            None => 1,
        };
        self.with(|c| present(if up { c.incr(&k, delta) } else { c.decr(&k, delta) }))
    }
}

/// Runs the write `f` with the GIL released when it copies `len >= BIG` bytes, else with it held.
#[inline(always)]
fn detach_if_big<T: Send>(py: Python<'_>, len: usize, f: impl FnOnce() -> T + Send) -> T {
    if len >= BIG {
        py.detach(f)
    } else {
        f()
    }
}

/// `Ok(Some(..))` on success, `Ok(None)` when the key was absent or the condition failed
/// (`NotFound`, `NotStored`), an exception otherwise.
#[inline]
fn present<T>(r: segcache_core::Result<T>) -> PyResult<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::NotStored) | Err(Error::NotFound) => Ok(None),
        Err(e) => Err(engine_error(e)),
    }
}

/// An optional CAS value argument (`cas=`, `new_cas=`): None, or an int from 0 to 2**64 - 1.
#[inline]
fn cas_arg(v: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<u64>> {
    match v {
        Some(v) if !v.is_none() => convert::int_in_range(v, name, 0, u64::MAX).map(Some),
        _ => Ok(None),
    }
}

/// `Ok(true)` when stored (or deleted, touched), `Ok(false)` when the condition failed (`add` on
/// a present key, `replace`/`append`/`prepend`/`delete`/`touch` on an absent one), an exception
/// otherwise.
#[inline]
fn stored(r: segcache_core::Result<()>) -> PyResult<bool> {
    Ok(present(r)?.is_some())
}

/// A read's result as a Python object (made by `f`), or `default` (None when not given) on a miss.
#[inline]
fn found_or<'py, T>(
    py: Python<'py>,
    found: Option<T>,
    default: Option<Bound<'py, PyAny>>,
    f: impl FnOnce(T) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    match found {
        Some(x) => f(x),
        None => Ok(default.unwrap_or_else(|| py.None().into_bound(py))),
    }
}

/// A get of a value of `len >= BIG` bytes: the `bytes` object is allocated with the GIL held,
/// then filled with the GIL released. If the value changed size meanwhile, try again.
#[cold]
fn big_get<'py>(py: Python<'py>, c: &SharedCache, k: &[u8], mut len: usize) -> PyResult<Option<Bound<'py, PyBytes>>> {
    for _ in 0..4 {
        if len < BIG {
            return Ok(c.get_with(k, |item| PyBytes::new(py, item.value())));
        }
        // SAFETY: PyBytes_FromStringAndSize(NULL, n) returns a new, uninitialised bytes object
        // of n bytes, or NULL with an exception set (handled by from_owned_ptr_or_err).
        let obj = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), len as pyo3::ffi::Py_ssize_t),
            )?
        };
        // SAFETY: obj is a bytes object; PyBytes_AsString returns its buffer of `len` bytes.
        let buf = SendPtr(unsafe { pyo3::ffi::PyBytes_AsString(obj.as_ptr()) }.cast::<u8>());
        let r = py.detach(move || {
            let buf = buf;
            c.get_with(k, |item| {
                let v = item.value();
                if v.len() != len {
                    return Err(v.len());
                }
                // SAFETY: buf points to `len` writable bytes that only this call can see.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf.0, len) };
                Ok(())
            })
        });
        match r {
            None => return Ok(None),
            // SAFETY: obj was created as a bytes object above.
            Some(Ok(())) => return Ok(Some(unsafe { obj.cast_into_unchecked() })),
            Some(Err(n)) => len = n,
        }
    }
    // The value kept changing size: copy it out whole, then wrap it.
    Ok(py.detach(|| c.get(k)).map(|item| PyBytes::new(py, &item.value)))
}

#[pymethods]
impl Cache {
    #[new]
    #[pyo3(signature = (heap_size=None, segment_size=None, eviction=None, ttl=None, path=None,
                        hash_power=None, shards=None, clock=None, reset_bad_file=false,
                        lazy_verify=false, multi_process=false, prefault=false, touch_ahead=true))]
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
    ) -> PyResult<Self> {
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
            .multi_process(multi_process)
            .prefault(prefault)
            .touch_ahead(touch_ahead);
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
        // Opening may map and check a persisted heap of gigabytes: let other threads run.
        let cache = py.detach(move || b.build_shared()).map_err(engine_error)?;
        Ok(Cache {
            inner: RwLock::new(Some(cache)),
            closing: AtomicBool::new(false),
            default_ttl,
            path,
            heap_size,
            segment_size,
            policy,
            multi_process,
            opener: std::process::id(),
            pop_hint: AtomicU64::new(0),
        })
    }

    /// The value stored under `key` as `bytes`, or `default` when absent.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = self::key(key)?;
        found_or(py, self.lookup(py, &k)?, default, |b| Ok(b.into_any()))
    }

    /// `(value, cas)` for `key`, or `default` when absent. Pass the CAS value to `cas()`.
    #[pyo3(signature = (key, default=None))]
    fn gets<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = self::key(key)?;
        let r = self.fetch(py, |c| c.get(&k))?;
        found_or(py, r, default, |item| Ok((PyBytes::new(py, &item.value), item.cas).into_pyobject(py)?.into_any()))
    }

    /// `(value, flags, cas, ttl)` for `key` (ttl: whole seconds left, `None` if it never
    /// expires), or `default` when absent.
    #[pyo3(signature = (key, default=None))]
    fn get_item<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = self::key(key)?;
        let r = self.fetch(py, |c| c.get(&k))?;
        found_or(py, r, default, |item| {
            let ttl = item.ttl.map(|d| d.as_secs());
            Ok((PyBytes::new(py, &item.value), item.flags, item.cas, ttl).into_pyobject(py)?.into_any())
        })
    }

    /// Reads `key` and sets its TTL in one step; the value or `default`.
    #[pyo3(signature = (key, ttl, default=None))]
    fn get_and_touch<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        ttl: Option<&Bound<'py, PyAny>>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = self::key(key)?;
        let ttl = convert::ttl(ttl, self.default_ttl)?;
        let r = self.fetch(py, |c| c.get_and_touch(&k, ttl))?;
        found_or(py, r, default, |item| Ok(PyBytes::new(py, &item.value).into_any()))
    }

    /// Stores `value` under `key`. `ttl`: seconds (int/float), a timedelta, 0 for never, or
    /// None for the cache's default. Raises TooLarge, KeyTooLong, EmptyKey or NoMemory.
    ///
    /// `new_cas`: the CAS value the item takes (memcached's `E`), instead of the cache's next;
    /// the caller then answers for its uniqueness (say, a version shared by several caches).
    #[pyo3(signature = (key, value, ttl=None, flags=None, *, new_cas=None))]
    fn set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
        new_cas: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.store(py, Store::Set, key, value, ttl, flags, new_cas).map(|_| ())
    }

    /// Stores only if `key` is absent; True if stored. `new_cas` as in `set`.
    #[pyo3(signature = (key, value, ttl=None, flags=None, *, new_cas=None))]
    fn add(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
        new_cas: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.store(py, Store::Add, key, value, ttl, flags, new_cas)
    }

    /// Stores only if `key` is present; True if stored. `new_cas` as in `set`.
    #[pyo3(signature = (key, value, ttl=None, flags=None, *, new_cas=None))]
    fn replace(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
        new_cas: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.store(py, Store::Replace, key, value, ttl, flags, new_cas)
    }

    /// Stores only if the item's CAS value is still `cas` (from `gets`): True if stored, False
    /// if the item changed since, None if it is absent. `new_cas` as in `set`.
    #[pyo3(signature = (key, value, cas, ttl=None, flags=None, *, new_cas=None))]
    #[allow(clippy::too_many_arguments)]
    fn cas(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        cas: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
        new_cas: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<bool>> {
        let k = self::key(key)?;
        let v = self::value(value, self.segment_size)?;
        let cas = convert::int_in_range(cas, "cas", 0, u64::MAX)?;
        let ttl = convert::ttl(ttl, self.default_ttl)?;
        let flags = convert::flags(flags)?;
        let new_cas = cas_arg(new_cas, "new_cas")?;
        self.with(|c| {
            let (k, v) = (&*k, v.as_slice());
            let opts = StoreOptions { cas: new_cas, ..StoreOptions::default() };
            let op = || match new_cas {
                None => c.cas(k, v, flags, ttl, cas),
                Some(_) => c.store_with(k, v, flags, ttl, StoreMode::Cas(cas), opts).map(drop),
            };
            match detach_if_big(py, v.len(), op) {
                Err(Error::Exists) => Ok(Some(false)),
                r => Ok(present(r)?.map(|()| true)),
            }
        })
    }

    /// Appends `value` to the stored value; False if `key` is absent.
    fn append(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.concat(py, key, value, false)
    }

    /// Prepends `value` to the stored value; False if `key` is absent.
    fn prepend(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.concat(py, key, value, true)
    }

    /// Adds `delta` to a decimal value (wrapping at 2**64); the new value, or None if absent.
    /// Raises NotNumeric if the value is not a decimal number.
    #[pyo3(signature = (key, delta=None))]
    fn incr(&self, key: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
        self.arith(key, delta, true)
    }

    /// Subtracts `delta` (stopping at 0); the new value, or None if absent.
    #[pyo3(signature = (key, delta=None))]
    fn decr(&self, key: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
        self.arith(key, delta, false)
    }

    /// Removes `key`; True if it was there. With `cas`: only if its CAS value is that one
    /// (memcached's `md key C`); False if it differs (nothing removed) or `key` is absent.
    #[pyo3(signature = (key, *, cas=None))]
    fn delete(&self, key: &Bound<'_, PyAny>, cas: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let k = self::key(key)?;
        let cas = cas_arg(cas, "cas")?;
        self.with(|c| match cas {
            None => stored(c.delete(&k)),
            Some(cas) => match c.delete_cas(&k, cas) {
                Err(Error::Exists) => Ok(false),
                r => stored(r),
            },
        })
    }

    /// Marks the item stale (memcached's `md key I`), for stale-while-revalidate: it keeps its
    /// value and flags and takes a new CAS value (`new_cas`, or the cache's next). Reads by
    /// `get_state(key, claim=True)` then see it `stale`, and exactly one of them `won`: that one
    /// recomputes and stores the value, which makes the item fresh again; the others see
    /// `token_sent` and may serve the stale value meanwhile.
    ///
    /// `ttl`: a new TTL (seconds, timedelta, 0 for never); None keeps the item's (unlike `set`,
    /// where None is the cache's default). `cas`: only if the item's CAS value is that one.
    /// Returns the new CAS value; None if `key` is absent or (with `cas`) its CAS value differs.
    #[pyo3(signature = (key, *, ttl=None, cas=None, new_cas=None))]
    fn invalidate(
        &self,
        key: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        cas: Option<&Bound<'_, PyAny>>,
        new_cas: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<u64>> {
        let k = self::key(key)?;
        let ttl = match ttl {
            Some(t) if !t.is_none() => Some(convert::ttl_value(t, "ttl")?),
            _ => None,
        };
        let cas = cas_arg(cas, "cas")?;
        let new_cas = cas_arg(new_cas, "new_cas")?;
        self.with(|c| match c.invalidate(&k, ttl, cas, new_cas) {
            Err(Error::Exists) => Ok(None),
            r => present(r),
        })
    }

    /// Reads `key` with its state: an `Item` (value, flags, cas, ttl, fetched, last_access,
    /// stale, won, token_sent), or None when absent.
    ///
    /// `claim`: take the item's recache token if it is up for grabs: the item is stale (see
    /// `invalidate`) or has less than `recache_below` (seconds or timedelta) left to live, and no
    /// read took the token since it was stored or invalidated. Exactly one such read gets
    /// `won=True`; the others `token_sent=True`. `update=False` leaves the fetched bit and the
    /// access time alone (memcached's `u`).
    #[pyo3(signature = (key, *, claim=false, recache_below=None, update=true))]
    fn get_state(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        claim: bool,
        recache_below: Option<&Bound<'_, PyAny>>,
        update: bool,
    ) -> PyResult<Option<Item>> {
        let k = self::key(key)?;
        let recache_below = match recache_below {
            Some(t) if !t.is_none() => Some(convert::ttl_value(t, "recache_below")?),
            _ => None,
        };
        let opts = ReadOptions { claim_token: claim, recache_below, no_update: !update };
        // One read, the `bytes` built inside it with the GIL held (a read that takes the token
        // cannot be done again for a large value, as `get` does with the GIL released).
        let read = |item: segcache_core::Item<'_>| Item::new(PyBytes::new(py, item.value()).unbind(), &item);
        self.with(|c| Ok(c.get_with_options(&k, opts, read)))
    }

    /// Sets a new TTL on `key` (None: the cache's default); True if it was there.
    fn touch(&self, key: &Bound<'_, PyAny>, ttl: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let k = self::key(key)?;
        let ttl = convert::ttl(ttl, self.default_ttl)?;
        self.with(|c| stored(c.touch(&k, ttl)))
    }

    /// Removes every item; with `delay` (seconds or timedelta), every item stored before that
    /// time from now, at that time.
    #[pyo3(signature = (delay=None))]
    fn flush(&self, py: Python<'_>, delay: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let delay = match delay.filter(|d| !d.is_none()) {
            Some(d) => Some(convert::ttl_value(d, "delay")?),
            None => None,
        };
        self.with(|c| {
            py.detach(|| match delay {
                Some(d) if !d.is_zero() => c.flush_after(d),
                _ => c.flush(),
            });
            Ok(())
        })
    }

    /// Frees expired items now (the engine also does it as it goes); the number removed.
    fn expire(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(|c| Ok(py.detach(|| c.expire())))
    }

    /// Faults in the next `per_shard` free segments of each shard, the ones writes take next, so
    /// that no write waits for a new segment's first page faults; the number faulted in now, or
    /// None once there is nothing left to do (every segment used once, `prefault=True`, or a
    /// kernel that cannot populate memory). For a thread of its own: the GIL is released.
    /// `per_shard` defaults to 2.
    #[pyo3(signature = (per_shard=None))]
    fn touch_ahead(&self, py: Python<'_>, per_shard: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
        let n = match per_shard {
            Some(v) => convert::int_in_range(v, "per_shard", 0, u32::MAX.into())? as usize,
            None => 2,
        };
        self.with(|c| Ok(py.detach(|| c.touch_ahead(n))))
    }

    /// A dict `{key: value}` of the keys that are present (keys as given).
    fn get_many<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let objs: Vec<Bound<'py, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
        let bufs = objs.iter().map(|o| self::key(o)).collect::<PyResult<Vec<_>>>()?;
        let slices: Vec<&[u8]> = bufs.iter().map(|b| &**b).collect();
        let mut vals: Vec<Option<Bound<'py, PyBytes>>> = vec![None; slices.len()];
        // The `bytes` objects are built under the shard locks with the GIL held (no Python code
        // runs there); the dict is filled after, when no engine lock is held, since hashing a
        // key may run Python code.
        self.with(|c| {
            c.get_many_with(&slices, |i, item| vals[i] = Some(PyBytes::new(py, item.value())));
            Ok(())
        })?;
        let out = PyDict::new(py);
        for (o, v) in objs.iter().zip(vals) {
            if let Some(v) = v {
                out.set_item(o, v)?;
            }
        }
        Ok(out)
    }

    /// Stores every `(key, value)` of a mapping or an iterable of pairs, with one TTL and flags.
    #[pyo3(signature = (items, ttl=None, flags=None))]
    fn set_many(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        flags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.usable()?;
        let ttl_d = convert::ttl(ttl, self.default_ttl)?;
        let flags = convert::flags(flags)?;
        let pairs = if items.hasattr("items")? { items.call_method0("items")? } else { items.clone() };
        for pair in pairs.try_iter()? {
            let pair = pair?;
            let t = pair.cast::<PyTuple>().ok().filter(|t| t.len() == 2).ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "items must be a mapping or an iterable of (key, value) pairs, got an item of type {}",
                    convert::type_name(&pair)
                ))
            })?;
            let (k, v) = (t.get_item(0)?, t.get_item(1)?);
            let k = self::key(&k)?;
            let v = self::value(&v, self.segment_size)?;
            self.with(|c| {
                let (k, v) = (&*k, v.as_slice());
                detach_if_big(py, v.len(), || c.set(k, v, flags, ttl_d)).map_err(engine_error)
            })?;
        }
        Ok(())
    }

    /// Removes every key given; the number that were there.
    fn delete_many(&self, keys: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.usable()?;
        let mut n = 0;
        for k in keys.try_iter()? {
            if self.delete(&k?, None)? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Counters and gauges of the engine, as a dict of ints (and `policy`, a str).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(|c| Ok(c.stats()))?;
        let d = PyDict::new(py);
        for f in s.figures() {
            d.set_item(f.name, f.value)?;
        }
        d.set_item("policy", s.policy.name())?;
        Ok(d)
    }

    /// The cache clock's time, Unix seconds.
    fn now(&self) -> PyResult<u32> {
        self.with(|c| Ok(c.now()))
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

    fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        let k = self::key(key)?;
        self.lookup(py, &k)?.ok_or_else(|| PyKeyError::new_err(key.clone().unbind()))
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
            Some(v) => Ok(v.into_any()),
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
                    return PyTuple::new(py, [PyBytes::new(py, &k), v]);
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

    /// The value of `key` if present; else stores `default` (which must be bytes-like) and
    /// returns it, as `dict.setdefault`. Store-if-absent is one engine `add`.
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
            if let Some(v) = self.lookup(py, &k)? {
                return Ok(v.into_any());
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

    /// The value of `key`; on a miss, `loader()`'s value (bytes-like), stored with `ttl` (as in
    /// `set`) and returned as `bytes`. Single flight: of the threads that miss on `key` at once,
    /// one calls its loader and the others wait for its value, with the GIL released. An
    /// exception from `loader` stores nothing and is raised to its own caller; the threads that
    /// waited on it try again, one of them calling its own loader. A value too large to store
    /// (or refused for lack of memory) is still returned. A loader may use the cache, and may ask
    /// for its own key (that inner call runs its loader at once); loaders that wait for each
    /// other's keys on two threads deadlock, and so does a loader that calls `close()` (the
    /// call holds the cache open until it returns). A thread waiting for another's load cannot
    /// be interrupted (Ctrl-C) until that load ends.
    #[pyo3(signature = (key, loader, ttl=None))]
    fn get_or_set<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        loader: &Bound<'py, PyAny>,
        ttl: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = self::key(key)?;
        if !loader.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "get_or_set: loader must be callable, not {}",
                convert::type_name(loader)
            )));
        }
        let ttl = convert::ttl(ttl, self.default_ttl)?;
        let loader = loader.clone().unbind();
        let item = self.with(|c| {
            // Waiting for another thread's load must not hold the GIL that its loader needs. The
            // lookup runs in there too, so that a miss is counted once in the stats.
            py.detach(|| {
                c.try_get_or_insert_with(&k, ttl, || {
                    Python::attach(|py| {
                        let v = loader.bind(py).call0()?;
                        let v = value(&v, usize::MAX)?;
                        Ok::<_, PyErr>(v.as_slice().to_vec())
                    })
                })
            })
            .map_err(|e| match e {
                LoadError::Cache(e) => engine_error(e),
                LoadError::Loader(e) => e,
            })
        })?;
        Ok(PyBytes::new(py, &item.value))
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

/// A view class of `segcache._views` over `cache`.
fn view<'py>(cache: &Bound<'py, Cache>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static VIEWS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let py = cache.py();
    let m = VIEWS.get_or_try_init(py, || py.import("segcache._views").map(Bound::unbind))?;
    m.bind(py).getattr(name)?.call1((cache,))
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
                let Some(v) = self.cache.get().lookup(py, &k)? else { continue };
                return Ok(Some(match self.what {
                    Yield::Items => PyTuple::new(py, [PyBytes::new(py, &k), v])?.into_any(),
                    _ => v.into_any(),
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
