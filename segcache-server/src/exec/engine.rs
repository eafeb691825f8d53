//! The engine calls the text and the meta handlers share (store, touch, incr/decr), with
//! memcached's expiry rules and counters; their outcomes are spelled by each protocol.

use segcache_core::Error;

use super::expiry::Expiry;
use crate::protocol::StoreKind;
use crate::state::Ctx;
use crate::stats::bump;

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
            StoreKind::Cas => match cache.get_with(key, |i| i.cas()) {
                None => Err(Error::NotFound),
                Some(c) if c != cas => Err(Error::Exists),
                Some(_) => cache.delete(key).or(Ok(())),
            },
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
    // longer one as a new item (`total_items`); a decrement never grows.
    let old_len = if incr { cache.get_with(key, |i| i.value().len()) } else { None };
    let r = if incr { cache.incr(key, delta) } else { cache.decr(key, delta) };
    if let (Ok(n), Some(old_len)) = (&r, old_len) {
        if decimal_len(*n) > old_len {
            bump(&ctx.stats.total_items, 1);
        }
    }
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

/// Digits of `n` in decimal.
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}
