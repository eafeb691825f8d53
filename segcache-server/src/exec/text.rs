//! Runs text-protocol requests against the engine and writes memcached's replies.
//!
//! Replies are appended to the connection's reusable output buffer; values are copied into it
//! from the engine (`get_with`: through a stack copy taken without the lock for items up to 512
//! bytes, straight from the segment under the shard's read lock for larger ones), so a hit costs
//! no allocation.

use std::sync::atomic::Ordering;

use segcache_core::{Error, Item};

use super::expiry::Expiry;
use crate::protocol::{put_u64, reply, Keys, Request, StoreKind};
use crate::state::Ctx;
use crate::stats::bump;

/// What the connection does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// `quit`: close once the replies before it are sent.
    Close,
}

/// Writes the `VALUE` block of a hit.
#[inline]
fn put_value(out: &mut Vec<u8>, key: &[u8], item: &Item<'_>, cas: bool) {
    reply::put_value(out, key, item.flags(), item.value(), cas.then(|| item.cas()));
}

/// Runs one request, appending its reply (unless `noreply`) to `out`.
pub fn execute(req: Request<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Flow {
    let mark = out.len();
    let noreply = match req {
        Request::Get { keys, cas } => {
            get(keys, cas, out, ctx);
            false
        }
        Request::Gat { exptime, keys, cas } => {
            gat(exptime, keys, cas, out, ctx);
            false
        }
        Request::Store { kind, key, flags, exptime, data, cas, noreply } => {
            store(kind, key, flags, exptime, data, cas, out, ctx);
            noreply
        }
        Request::Arith { incr, key, delta, noreply } => {
            arith(incr, key, delta, out, ctx);
            noreply
        }
        Request::Delete { key, noreply } => {
            let ok = ctx.shared.cache.delete(key).is_ok();
            bump(if ok { &ctx.stats.delete_hits } else { &ctx.stats.delete_misses }, 1);
            out.extend_from_slice(if ok { reply::DELETED } else { reply::NOT_FOUND });
            noreply
        }
        Request::Touch { key, exptime, noreply } => {
            bump(&ctx.stats.cmd_touch, 1);
            let ok = touch(key, exptime, ctx);
            bump(if ok { &ctx.stats.touch_hits } else { &ctx.stats.touch_misses }, 1);
            out.extend_from_slice(if ok { reply::TOUCHED } else { reply::NOT_FOUND });
            noreply
        }
        Request::FlushAll { delay, noreply } => {
            bump(&ctx.stats.cmd_flush, 1);
            let cache = &ctx.shared.cache;
            match Expiry::from_exptime(delay, cache.now()) {
                Expiry::After(d) => cache.flush_after(d),
                Expiry::Never | Expiry::Expired => cache.flush(),
            }
            out.extend_from_slice(reply::OK);
            noreply
        }
        Request::Verbosity { level, noreply } => {
            ctx.shared.verbosity.store(level, Ordering::Relaxed);
            // As memcached: more verbosity, more logging (never less than configured).
            let wanted = match level {
                0 => log::LevelFilter::Off,
                1 => log::LevelFilter::Info,
                2 => log::LevelFilter::Debug,
                _ => log::LevelFilter::Trace,
            };
            log::set_max_level(wanted.max(ctx.shared.settings.log_level));
            out.extend_from_slice(reply::OK);
            noreply
        }
        Request::Version => {
            out.extend_from_slice(concat!("VERSION 1.6.0-segcache-", env!("CARGO_PKG_VERSION"), "\r\n").as_bytes());
            false
        }
        Request::Quit => return Flow::Close,
        Request::Stats { arg } => {
            if !super::report::write_stats(out, ctx, arg) {
                out.extend_from_slice(reply::ERROR);
            }
            false
        }
        Request::Meta { cmd, key, data, flags } => {
            bump(&ctx.stats.cmd_meta, 1);
            super::meta::execute(cmd, key, data, &flags, out, ctx);
            false
        }
    };
    if noreply {
        out.truncate(mark);
    }
    Flow::Continue
}

/// Replaces a retrieval reply that grew past the limit with memcached's error for it.
fn over_limit(out: &mut Vec<u8>, mark: usize, ctx: &Ctx<'_>) -> bool {
    if out.len() - mark <= ctx.shared.limits.max_response {
        return false;
    }
    out.truncate(mark);
    out.extend_from_slice(reply::GET_TOO_LARGE);
    true
}

fn get(keys: Keys<'_>, cas: bool, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let mark = out.len();
    let (mut hits, mut n) = (0u64, 0u64);
    for key in keys {
        n += 1;
        if cache.get_with(key, |item| put_value(out, key, &item, cas)).is_some() {
            hits += 1;
            if over_limit(out, mark, ctx) {
                return;
            }
        }
    }
    bump(&ctx.stats.cmd_get, n);
    bump(&ctx.stats.get_hits, hits);
    bump(&ctx.stats.get_misses, n - hits);
    out.extend_from_slice(reply::END);
}

fn gat(exptime: i64, keys: Keys<'_>, cas: bool, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let expiry = Expiry::from_exptime(exptime, cache.now());
    let mark = out.len();
    let (mut hits, mut n) = (0u64, 0u64);
    for key in keys {
        n += 1;
        let hit = match expiry.ttl() {
            Some(ttl) => {
                cache.touch(key, ttl).is_ok() && cache.get_with(key, |item| put_value(out, key, &item, cas)).is_some()
            }
            // Expired on arrival: return the item this once, then it is gone.
            None => {
                let hit = cache.get_with(key, |item| put_value(out, key, &item, cas)).is_some();
                let _ = cache.delete(key);
                hit
            }
        };
        hits += u64::from(hit);
        if hit && over_limit(out, mark, ctx) {
            return;
        }
    }
    bump(&ctx.stats.cmd_get, n);
    bump(&ctx.stats.cmd_touch, n);
    bump(&ctx.stats.get_hits, hits);
    bump(&ctx.stats.touch_hits, hits);
    bump(&ctx.stats.get_misses, n - hits);
    bump(&ctx.stats.touch_misses, n - hits);
    out.extend_from_slice(reply::END);
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
            StoreKind::Append => cache.append(key, data),
            StoreKind::Prepend => cache.prepend(key, data),
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
            StoreKind::Append => cache.append(key, data),
            StoreKind::Prepend => cache.prepend(key, data),
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
        Ok(()) => Stored::Stored,
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

#[allow(clippy::too_many_arguments)]
fn store(
    kind: StoreKind,
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    cas: u64,
    out: &mut Vec<u8>,
    ctx: &Ctx<'_>,
) {
    let reply: &[u8] = match do_store(kind, key, flags, exptime, data, cas, ctx) {
        Stored::Stored => reply::STORED,
        Stored::NotStored => reply::NOT_STORED,
        Stored::Exists => reply::EXISTS,
        Stored::NotFound => reply::NOT_FOUND,
        Stored::TooLarge => reply::TOO_LARGE,
        Stored::NoMemory => reply::NO_MEMORY_STORING,
        Stored::Failed => reply::STORAGE_FAILED,
    };
    out.extend_from_slice(reply);
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
    let r = if incr { cache.incr(key, delta) } else { cache.decr(key, delta) };
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

fn arith(incr: bool, key: &[u8], delta: u64, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    match do_arith(incr, key, delta, ctx) {
        Arith::Value(n) => {
            put_u64(out, n);
            out.extend_from_slice(reply::CRLF);
        }
        Arith::NotFound => out.extend_from_slice(reply::NOT_FOUND),
        Arith::NotNumeric => out.extend_from_slice(reply::NON_NUMERIC),
        Arith::Failed => out.extend_from_slice(reply::OUT_OF_MEMORY),
    }
}
