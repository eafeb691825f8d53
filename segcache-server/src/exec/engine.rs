//! The engine calls the text and the meta handlers share (store, touch, incr/decr), with
//! memcached's expiry rules and counters; their outcomes are spelled by each protocol.

use segcache_core::{Error, Item, ReadOptions, RmwOptions, StoreMode, StoreOptions};

use super::expiry::Expiry;
use crate::observe::stats::bump;
use crate::protocol::StoreKind;
use crate::ratelimit::{warn_limited, RateLimit};
use crate::state::Ctx;

/// Reads made to answer a request, not by the client: they leave the item's state alone.
const QUIET_READ: ReadOptions = ReadOptions { claim_token: false, recache_below: None, no_update: true };

/// Runs `f` on the item without counting as an access (see `QUIET_READ`).
pub fn look<R>(ctx: &Ctx<'_>, key: &[u8], f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
    ctx.shared.cache.get_with_options(key, QUIET_READ, f)
}

/// append/prepend under the engine's compare-and-swap rules (`compare`: meta `C`; `explicit`:
/// the CAS value the item takes, meta `E`), refused (`NotStored`, as memcached) when the joined
/// item would outgrow `-I`: checked by the engine under the lock it writes with. Returns the new
/// CAS value; `NotStored` for a missing item.
pub fn grow_with(
    kind: StoreKind,
    key: &[u8],
    data: &[u8],
    compare: Option<u64>,
    explicit: Option<u64>,
    ctx: &Ctx<'_>,
) -> Result<u64, Error> {
    let (cache, limits) = (&ctx.shared.cache, &ctx.shared.limits);
    let fits = |flags: u32, len: usize| limits.item_fits(key.len(), flags, len);
    let opts = RmwOptions { compare, cas: explicit, fits: Some(&fits) };
    if kind == StoreKind::Prepend {
        cache.prepend_with(key, data, opts)
    } else {
        cache.append_with(key, data, opts)
    }
}

/// incr/decr under the engine's compare-and-swap rules (see `grow_with`), counted as memcached
/// counts them: a hit or a miss, and a result longer than the old value as a new item
/// (`total_items`; memcached writes a result that fits the old value's length in place).
pub fn arith_with(
    incr: bool,
    key: &[u8],
    delta: u64,
    compare: Option<u64>,
    explicit: Option<u64>,
    ctx: &Ctx<'_>,
) -> Result<Counted, Error> {
    let opts = RmwOptions { compare, cas: explicit, fits: None };
    let r = ctx.shared.cache.add_delta_with(key, incr, delta, opts);
    let (hit, miss) = if incr {
        (&ctx.stats.incr_hits, &ctx.stats.incr_misses)
    } else {
        (&ctx.stats.decr_hits, &ctx.stats.decr_misses)
    };
    match r {
        Ok(d) => {
            bump(hit, 1);
            if d.grew {
                bump(&ctx.stats.total_items, 1);
            }
            Ok(Counted { n: d.value, cas: d.cas })
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
    /// Stored, with the CAS value the item took (0 for an item that expired on arrival: never
    /// stored, so it has none).
    Stored(u64),
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
    let store = |ttl, mode| cache.store_with(key, data, flags, ttl, mode, StoreOptions::default());
    let r = match (Expiry::from_exptime(exptime, cache.now()).ttl(), kind) {
        // An append keeps the item's TTL, whatever the request's exptime.
        (_, StoreKind::Append | StoreKind::Prepend) => grow_with(kind, key, data, None, None, ctx),
        (Some(ttl), StoreKind::Set) => store(ttl, StoreMode::Set),
        (Some(ttl), StoreKind::Add) => store(ttl, StoreMode::Add),
        (Some(ttl), StoreKind::Replace) => store(ttl, StoreMode::Replace),
        (Some(ttl), StoreKind::Cas) => store(ttl, StoreMode::Cas(cas)),
        // An item that expires on arrival is never readable: the command's effect is to remove
        // any current item (where the command would have replaced it).
        (None, StoreKind::Set) => {
            let _ = cache.delete(key);
            Ok(0)
        }
        (None, StoreKind::Add) => {
            if cache.contains(key) {
                Err(Error::NotStored)
            } else {
                Ok(0)
            }
        }
        (None, StoreKind::Replace) => cache.delete(key).map(|()| 0).map_err(|_| Error::NotStored),
        (None, StoreKind::Cas) => cache.delete_cas(key, cas).map(|()| 0),
    };
    if kind == StoreKind::Cas {
        let c = match r {
            Ok(_) => &ctx.stats.cas_hits,
            Err(Error::Exists) => &ctx.stats.cas_badval,
            Err(_) => &ctx.stats.cas_misses,
        };
        bump(c, 1);
    }
    match r {
        Ok(cas) => {
            bump(&ctx.stats.total_items, 1);
            Stored::Stored(cas)
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
            warn_limited!(STORE_FAILED, "store failed: {e}");
            Stored::Failed
        }
    }
}

/// A number incr/decr left, and the CAS value the item took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub n: u64,
    pub cas: u64,
}

/// The outcome of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    Value(Counted),
    NotFound,
    NotNumeric,
    Failed,
}

/// Engine failures of a store (one per request when they happen): one warning a second.
static STORE_FAILED: RateLimit = RateLimit::per_second();
/// Engine failures of an incr/decr: one warning a second.
static ARITH_FAILED: RateLimit = RateLimit::per_second();

/// Runs incr/decr and counts it.
pub fn do_arith(incr: bool, key: &[u8], delta: u64, ctx: &Ctx<'_>) -> Arith {
    match arith_with(incr, key, delta, None, None, ctx) {
        Ok(counted) => Arith::Value(counted),
        Err(Error::NotFound) => Arith::NotFound,
        Err(Error::NotNumeric) => Arith::NotNumeric,
        Err(e) => {
            warn_limited!(ARITH_FAILED, "incr/decr failed: {e}");
            Arith::Failed
        }
    }
}

/// `flush_all` (text) and FLUSH (binary): the delay is an exptime, as memcached reads it.
pub fn flush_all(delay: i64, ctx: &Ctx<'_>) {
    bump(&ctx.stats.cmd_flush, 1);
    let cache = &ctx.shared.cache;
    match Expiry::from_exptime(delay, cache.now()) {
        Expiry::After(d) => cache.flush_after(d),
        Expiry::Never | Expiry::Expired => cache.flush(),
    }
}
