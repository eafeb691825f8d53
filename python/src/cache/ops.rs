//! The cache operations of `segcache.Cache` (`get`, `set`, `cas`, `incr`, `delete`, `flush`,
//! `get_many`, `get_or_set`, `stats`, ...) and the helpers they share with the mapping protocol
//! and the iterators.
//!
//! Values pass through the cache's serializer (if any) here: [`Cache::encode`] before a store,
//! [`Cache::decode`] after a read, never with an engine lock held. Without one, both are a
//! branch and the value stays the `bytes` the engine copied.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use segcache_core::{Error, LoadError, OwnedItem, ReadOptions, SharedCache, StoreMode, StoreOptions};

use super::Cache;
use crate::convert::{self, key, value};
use crate::errors::engine_error;
use crate::item::Item;

/// Values at least this long are copied with the GIL released (about 10 us of copying).
pub(super) const BIG: usize = 64 << 10;

/// Which write a store call makes.
#[derive(Clone, Copy)]
pub(super) enum Store {
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
    /// The stored bytes `raw` as callers see the value: `raw` itself, or what the serializer's
    /// `loads` makes of it.
    #[inline(always)]
    pub(super) fn decode<'py>(&self, raw: Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyAny>> {
        match &self.serializer {
            None => Ok(raw.into_any()),
            Some(s) => s.loads(&raw),
        }
    }

    /// `v` as the engine is to store it: `v` itself (checked as bytes-like by `convert::value`),
    /// or what the serializer's `dumps` makes of it.
    #[inline(always)]
    pub(super) fn encode<'py>(&self, v: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match &self.serializer {
            None => Ok(v.clone()),
            Some(s) => s.dumps(v),
        }
    }

    /// The value of `k` as callers see it (decoded), or `None` on a miss.
    #[inline(always)]
    pub(super) fn lookup_value<'py>(&self, py: Python<'py>, k: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.lookup(py, k)? {
            Some(raw) => self.decode(raw).map(Some),
            None => Ok(None),
        }
    }

    /// `TypeError` for `op`, which works on the stored bytes, on a cache with a serializer: the
    /// bytes there are an encoding that appending to or counting in would corrupt.
    fn bytes_only(&self, py: Python<'_>, op: &str) -> PyResult<()> {
        match &self.serializer {
            None => Ok(()),
            Some(s) => Err(PyTypeError::new_err(format!(
                "{op}() works on bytes values, and this cache stores its values through a serializer ({}): \
                 read the value, change it and set it instead (or use a cache without a serializer)",
                s.name(py)
            ))),
        }
    }

    /// The value as a new `bytes`, or `None` on a miss.
    #[inline(always)]
    pub(super) fn lookup<'py>(&self, py: Python<'py>, k: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
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
    pub(super) fn store(
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
        let v = self.encode(v)?;
        let v = value(&v, self.value_limit)?;
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
        self.bytes_only(py, if front { "prepend" } else { "append" })?;
        let k = key(k)?;
        let v = value(v, self.value_limit)?;
        self.with(|c| {
            let (k, v) = (&*k, v.as_slice());
            // An append copies the whole item, whose size we do not know: release the GIL when
            // the part we add is big.
            stored(detach_if_big(py, v.len(), || if front { c.prepend(k, v) } else { c.append(k, v) }))
        })
    }

    /// Reads then deletes `k`: its value if this call removed it, `None` if it was absent (or
    /// another thread removed it between the read and the delete, so that of two threads
    /// popping one key at most one gets its value). The value is decoded before the delete: a
    /// value the serializer cannot read raises and stays in the cache.
    pub(super) fn take<'py>(&self, py: Python<'py>, k: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(v) = self.lookup_value(py, k)? else { return Ok(None) };
        let removed = self.with(|c| stored(c.delete(k)))?;
        Ok(removed.then_some(v))
    }

    /// `incr` (`up`) or `decr` by `delta` (1 when not given).
    fn arith(
        &self,
        py: Python<'_>,
        k: &Bound<'_, PyAny>,
        delta: Option<&Bound<'_, PyAny>>,
        up: bool,
    ) -> PyResult<Option<u64>> {
        self.bytes_only(py, if up { "incr" } else { "decr" })?;
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
    /// The value stored under `key` (`bytes`, or decoded by the serializer), or `default` when absent.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = self::key(key)?;
        found_or(py, self.lookup(py, &k)?, default, |b| self.decode(b))
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
        found_or(py, r, default, |item| {
            let v = self.decode(PyBytes::new(py, &item.value))?;
            Ok((v, item.cas).into_pyobject(py)?.into_any())
        })
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
            let v = self.decode(PyBytes::new(py, &item.value))?;
            Ok((v, item.flags, item.cas, ttl).into_pyobject(py)?.into_any())
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
        found_or(py, r, default, |item| self.decode(PyBytes::new(py, &item.value)))
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
        let v = self.encode(value)?;
        let v = self::value(&v, self.value_limit)?;
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
    fn incr(&self, py: Python<'_>, key: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
        self.arith(py, key, delta, true)
    }

    /// Subtracts `delta` (stopping at 0); the new value, or None if absent.
    #[pyo3(signature = (key, delta=None))]
    fn decr(&self, py: Python<'_>, key: &Bound<'_, PyAny>, delta: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
        self.arith(py, key, delta, false)
    }

    /// Removes `key`; True if it was there. With `cas`: only if its CAS value is that one
    /// (memcached's `md key C`); False if it differs (nothing removed) or `key` is absent.
    #[pyo3(signature = (key, *, cas=None))]
    pub(super) fn delete(&self, key: &Bound<'_, PyAny>, cas: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
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
        let read = |item: segcache_core::Item<'_>| Item::new(PyBytes::new(py, item.value()).into_any().unbind(), &item);
        let Some(mut item) = self.with(|c| Ok(c.get_with_options(&k, opts, read)))? else { return Ok(None) };
        // Decoded once the read has let go of the shard.
        if self.serializer.is_some() {
            let raw = item.value.bind(py).cast::<PyBytes>()?.clone();
            item.value = self.decode(raw)?.unbind();
        }
        Ok(Some(item))
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
    pub(super) fn flush(&self, py: Python<'_>, delay: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
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

    /// Sets the heap the cache may use, at once: `bytes` (an int, or a size such as "256m"), up
    /// to the heap laid out (`max_heap_size`, else `heap_size`). A lower limit evicts as new
    /// items need room; a higher one keeps every item. More than the heap raises InvalidConfig.
    fn set_memory_limit(&self, py: Python<'_>, bytes: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = convert::size(bytes, "bytes")?;
        self.with(|c| py.detach(|| c.set_memory_limit(bytes)).map_err(engine_error))
    }

    /// The heap the cache may use now, in bytes.
    fn memory_limit(&self) -> PyResult<usize> {
        self.with(|c| Ok(c.memory_limit()))
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

    /// A dict `{key: value}` of the keys that are present (keys as given, values decoded).
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
                out.set_item(o, self.decode(v)?)?;
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
            let v = self.encode(&v)?;
            let v = self::value(&v, self.value_limit)?;
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
    /// The value of `key`; on a miss, `loader()`'s value (bytes-like, or any value the serializer
    /// takes), stored with `ttl` (as in `set`) and returned as a read of it would return it. Single flight: of the threads that miss on `key` at once,
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
    ) -> PyResult<Bound<'py, PyAny>> {
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
                        let v = self.encode(&loader.bind(py).call0()?)?;
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
        self.decode(PyBytes::new(py, &item.value))
    }
}
