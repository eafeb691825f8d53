//! The engine calls the text and the meta handlers share (store, touch, incr/decr), with
//! memcached's expiry rules and counters; their outcomes are spelled by each protocol.

use std::time::Duration;

use segcache_core::{parse_decimal, Error, Item, ReadOptions, StoreMode, StoreOptions};

use super::expiry::Expiry;
use crate::protocol::StoreKind;
use crate::state::Ctx;
use crate::stats::bump;

/// Reads made to answer a request, not by the client: they leave the item's state alone.
const QUIET_READ: ReadOptions = ReadOptions { claim_token: false, recache_below: None, no_update: true };

/// Runs `f` on the item without counting as an access (see `QUIET_READ`).
pub fn look<R>(ctx: &Ctx<'_>, key: &[u8], f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
    ctx.shared.cache.get_with_options(key, QUIET_READ, f)
}

/// The TTL an item has left, for a rewrite that keeps it (at least a second: zero means never).
fn ttl_left(item: &Item<'_>) -> Duration {
    item.ttl().map_or(Duration::ZERO, |d| d.max(Duration::from_secs(1)))
}

/// A read-modify-write as one compare-and-swap: `change` makes the new value from the item
/// (`Err` refuses); the store succeeds only if the item's CAS value is still the one read, else
/// it starts again. With `compare`, the item must have that CAS value (`Exists` otherwise, and
/// also when another writer changed it between). `explicit`: the CAS value the item takes
/// (meta `E`). The item keeps its client flags and TTL. Returns the new value's CAS and what
/// `change` returned beside the value.
fn swap<T>(
    key: &[u8],
    compare: Option<u64>,
    explicit: Option<u64>,
    ctx: &Ctx<'_>,
    change: impl Fn(&Item<'_>) -> Result<(Vec<u8>, T), Error>,
) -> Result<T, Error> {
    let cache = &ctx.shared.cache;
    loop {
        let current = look(ctx, key, |i| (i.cas(), i.flags(), ttl_left(&i), change(&i)));
        let Some((cas, flags, ttl, changed)) = current else { return Err(Error::NotFound) };
        if compare.is_some_and(|c| c != cas) {
            return Err(Error::Exists);
        }
        let (value, extra) = changed?;
        let opts = StoreOptions { cas: explicit, ..StoreOptions::default() };
        match cache.store_with(key, &value, flags, ttl, StoreMode::Cas(cas), opts) {
            Ok(_) => return Ok(extra),
            // Changed (or gone) since the read: with a compare, that is a mismatch.
            Err(Error::Exists | Error::NotFound) if compare.is_none() => continue,
            Err(Error::NotFound) => return Err(Error::NotFound),
            Err(e) => return Err(e),
        }
    }
}

/// append/prepend as one compare-and-swap (see `swap`), for a request that compares a CAS
/// value or sets one; refused (`NotStored`) past `-I` as memcached does.
pub fn grow_swap(
    kind: StoreKind,
    key: &[u8],
    data: &[u8],
    compare: Option<u64>,
    explicit: Option<u64>,
    ctx: &Ctx<'_>,
) -> Result<(), Error> {
    let limits = &ctx.shared.limits;
    swap(key, compare, explicit, ctx, |i| {
        if !limits.item_fits(key.len(), i.flags(), i.value().len() + data.len()) {
            return Err(Error::NotStored);
        }
        let parts: [&[u8]; 2] = if kind == StoreKind::Prepend { [data, i.value()] } else { [i.value(), data] };
        Ok((parts.concat(), ()))
    })
}

/// incr/decr as one compare-and-swap (see `swap`), for a request that compares a CAS value or
/// sets one. As the engine's own: a result shorter than the old value is space padded to its
/// length (memcached writes it in place); counted as `do_arith` counts.
pub fn arith_swap(
    incr: bool,
    key: &[u8],
    delta: u64,
    compare: Option<u64>,
    explicit: Option<u64>,
    ctx: &Ctx<'_>,
) -> Result<u64, Error> {
    let r = swap(key, compare, explicit, ctx, |i| {
        let old = i.value();
        let n = parse_decimal(old).ok_or(Error::NotNumeric)?;
        let n = if incr { n.wrapping_add(delta) } else { n.saturating_sub(delta) };
        let mut digits = itoa::Buffer::new();
        let mut value = digits.format(n).as_bytes().to_vec();
        let grew = value.len() > old.len();
        value.resize(value.len().max(old.len()), b' ');
        Ok((value, (n, grew)))
    });
    let (hit, miss) = if incr {
        (&ctx.stats.incr_hits, &ctx.stats.incr_misses)
    } else {
        (&ctx.stats.decr_hits, &ctx.stats.decr_misses)
    };
    match r {
        Ok((n, grew)) => {
            bump(hit, 1);
            if grew {
                bump(&ctx.stats.total_items, 1);
            }
            Ok(n)
        }
        Err(Error::NotFound) => {
            bump(miss, 1);
            Err(Error::NotFound)
        }
        Err(e) => Err(e),
    }
}

/// Sets a key's expiry; `true` when the key was there.
pub fn touch(key: &[u8], exptime: i64, ctx: &Ctx<'_>) -> bool {
    let cache = &ctx.shared.cache;
    match Expiry::from_exptime(exptime, cache.now()).ttl() {
        Some(ttl) => cache.touch(key, ttl).is_ok(),
        None => cache.delete(key).is_ok(),
    }
}

/// The outcome of a storage request, before it is spelled for a protocol.
// The variants are named after memcached's replies (`STORED`, `NOT_STORED`).
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Stored,
    NotStored,
    Exists,
    NotFound,
    TooLarge,
    NoMemory,
    Failed,
}

/// Runs a storage command with memcached's expiry rules; counts it.
#[allow(clippy::too_many_arguments)]
pub fn do_store(kind: StoreKind, key: &[u8], flags: u32, exptime: i64, data: &[u8], cas: u64, ctx: &Ctx<'_>) -> Stored {
    let cache = &ctx.shared.cache;
    bump(&ctx.stats.cmd_set, 1);
    let r = match Expiry::from_exptime(exptime, cache.now()).ttl() {
        Some(ttl) => match kind {
            StoreKind::Set => cache.set(key, data, flags, ttl),
            StoreKind::Add => cache.add(key, data, flags, ttl),
            StoreKind::Replace => cache.replace(key, data, flags, ttl),
            StoreKind::Append | StoreKind::Prepend => grow(kind, key, data, ctx),
            StoreKind::Cas => cache.cas(key, data, flags, ttl, cas),
        },
        // An item that expires on arrival is never readable: the command's effect is to remove
        // any current item (where the command would have replaced it).
        None => match kind {
            StoreKind::Set => {
                let _ = cache.delete(key);
                Ok(())
            }
            StoreKind::Add => {
                if cache.contains(key) {
                    Err(Error::NotStored)
                } else {
                    Ok(())
                }
            }
            StoreKind::Replace => cache.delete(key).map_err(|_| Error::NotStored),
            StoreKind::Append | StoreKind::Prepend => grow(kind, key, data, ctx),
            StoreKind::Cas => cache.delete_cas(key, cas),
        },
    };
    if kind == StoreKind::Cas {
        let c = match r {
            Ok(()) => &ctx.stats.cas_hits,
            Err(Error::Exists) => &ctx.stats.cas_badval,
            Err(_) => &ctx.stats.cas_misses,
        };
        bump(c, 1);
    }
    match r {
        Ok(()) => {
            bump(&ctx.stats.total_items, 1);
            Stored::Stored
        }
        Err(Error::NotStored) => Stored::NotStored,
        Err(Error::Exists) => Stored::Exists,
        // `append`/`prepend` on a missing key are NOT_STORED; `cas` on one is NOT_FOUND.
        Err(Error::NotFound) if kind == StoreKind::Cas => Stored::NotFound,
        Err(Error::NotFound) => Stored::NotStored,
        Err(Error::TooLarge { .. }) => {
            bump(&ctx.stats.store_too_large, 1);
            // As memcached: a failed set must not leave the old value readable.
            if kind == StoreKind::Set {
                let _ = cache.delete(key);
            }
            Stored::TooLarge
        }
        Err(Error::NoMemory) => {
            bump(&ctx.stats.store_no_memory, 1);
            Stored::NoMemory
        }
        Err(e) => {
            log::warn!("store failed: {e}");
            Stored::Failed
        }
    }
}

/// `append`/`prepend`, refused (`NotStored`, as memcached) when the item would outgrow `-I`.
/// The size check and the write are two engine calls: a concurrent append to the same key may
/// pass the check too, so an item can outgrow `-I` by at most what such racing appends add (never
/// past the engine's own limit, a segment).
fn grow(kind: StoreKind, key: &[u8], data: &[u8], ctx: &Ctx<'_>) -> segcache_core::Result<()> {
    let cache = &ctx.shared.cache;
    let limits = &ctx.shared.limits;
    let fits = cache.get_with(key, |i| limits.item_fits(key.len(), i.flags(), i.value().len() + data.len()));
    if fits == Some(false) {
        return Err(Error::NotStored);
    }
    if kind == StoreKind::Append {
        cache.append(key, data)
    } else {
        cache.prepend(key, data)
    }
}

/// The outcome of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    Value(u64),
    NotFound,
    NotNumeric,
    Failed,
}

/// Runs incr/decr and counts it.
pub fn do_arith(incr: bool, key: &[u8], delta: u64, ctx: &Ctx<'_>) -> Arith {
    let cache = &ctx.shared.cache;
    // memcached writes a result that fits the old value's length in place, and counts only a
    // longer one as a new item (`total_items`).
    let r = cache.add_delta(key, incr, delta).map(|d| {
        if d.grew {
            bump(&ctx.stats.total_items, 1);
        }
        d.value
    });
    let (hit, miss) = if incr {
        (&ctx.stats.incr_hits, &ctx.stats.incr_misses)
    } else {
        (&ctx.stats.decr_hits, &ctx.stats.decr_misses)
    };
    match r {
        Ok(n) => {
            bump(hit, 1);
            Arith::Value(n)
        }
        Err(Error::NotFound) => {
            bump(miss, 1);
            Arith::NotFound
        }
        Err(Error::NotNumeric) => Arith::NotNumeric,
        Err(e) => {
            log::warn!("incr/decr failed: {e}");
            Arith::Failed
        }
    }
}
