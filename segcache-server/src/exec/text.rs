//! Runs text-protocol requests against the engine and writes memcached's replies.
//!
//! Replies are appended to the connection's reusable output buffer; values are copied into it
//! from the engine (`get_with`: through a stack copy taken without the lock for items up to 512
//! bytes, straight from the segment under the shard's read lock for larger ones), so a hit costs
//! no allocation.

use std::sync::atomic::Ordering;

use segcache_core::Item;

use super::engine::{do_arith, do_store, touch, Arith, Stored};
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
