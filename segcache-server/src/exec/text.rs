//! The text protocol's handlers: retrievals (`get`, `gat` and their streamed form for lines too
//! long to parse whole), storage, arithmetic, `delete`, `touch`, `verbosity`.
//!
//! Replies are appended to the connection's reusable output buffer; values are copied into it
//! from the engine (`get_with`: through a stack copy taken without the lock for items up to 512
//! bytes, straight from the segment under the shard's read lock for larger ones), so a hit costs
//! no allocation.

use std::sync::atomic::Ordering;

use segcache_core::Item;

use super::engine::{do_arith, do_store, touch, Arith, Counted, Stored};
use super::expiry::Expiry;
use super::watched::{fetched, stored};
use crate::observe::stats::bump;
use crate::protocol::{check_key, next_token, put_u64, reply, FailKind, GetHead, Keys, StoreKind};
use crate::state::Ctx;

/// Writes the `VALUE` block of a hit.
#[inline]
fn put_value(out: &mut Vec<u8>, key: &[u8], item: &Item<'_>, cas: bool) {
    reply::put_value(out, key, item.flags(), item.value(), cas.then(|| item.cas()));
}

/// Fetches one key of a retrieval command into `out`, touching it first for `gat` (`touch`:
/// its expiry); the value's length on a hit.
#[inline]
fn fetch_one(key: &[u8], cas: bool, touch: Option<Expiry>, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Option<usize> {
    let cache = &ctx.shared.cache;
    let read = |out: &mut Vec<u8>| {
        cache.get_with(key, |item| {
            put_value(out, key, &item, cas);
            item.value().len()
        })
    };
    let size = match touch.map(Expiry::ttl) {
        None => read(out),
        Some(Some(ttl)) => cache.touch(key, ttl).ok().and_then(|()| read(out)),
        // Expired on arrival: return the item this once, then it is gone.
        Some(None) => {
            let size = read(out);
            let _ = cache.delete(key);
            size
        }
    };
    fetched(key, size, ctx);
    size
}

/// Counts `n` keys read (`hits` found) by a `get` or (`gat`) a `gat`.
fn count_reads(gat: bool, n: u64, hits: u64, ctx: &Ctx<'_>) {
    if gat {
        // memcached counts gat/gats as touches only.
        bump(&ctx.stats.cmd_touch, n);
        bump(&ctx.stats.touch_hits, hits);
        bump(&ctx.stats.touch_misses, n - hits);
    } else {
        bump(&ctx.stats.cmd_get, n);
        bump(&ctx.stats.get_hits, hits);
        bump(&ctx.stats.get_misses, n - hits);
    }
}

/// `get`/`gets`, or (`touch`: the expiry to set) `gat`/`gats`. As memcached, which streams a
/// multi-get's values, the reply is not bounded as a whole: once `out` holds `out_high` bytes
/// the rest of the keys come back as a [`Retrieval`] for the session to run when the client
/// has read what is there, so that one line of large values holds at most `out_high` and one
/// value.
pub(super) fn retrieve(
    keys: Keys<'_>,
    cas: bool,
    touch: Option<Expiry>,
    out: &mut Vec<u8>,
    ctx: &Ctx<'_>,
    out_high: usize,
) -> Option<Retrieval> {
    let (mut hits, mut n) = (0u64, 0u64);
    let mut keys = keys;
    while let Some(key) = keys.next() {
        n += 1;
        if fetch_one(key, cas, touch, out, ctx).is_some() {
            hits += 1;
        }
        if out.len() >= out_high && !keys.rest().iter().all(|&b| b == b' ') {
            count_reads(touch.is_some(), n, hits, ctx);
            return Some(Retrieval { keys: keys.rest().to_vec(), at: 0, cas, touch });
        }
    }
    count_reads(touch.is_some(), n, hits, ctx);
    out.extend_from_slice(reply::END);
    None
}

/// The keys of a `get`/`gets`/`gat`/`gats` line left to run once the client has read the
/// reply so far (see [`retrieve`]).
#[derive(Debug)]
pub struct Retrieval {
    /// The rest of the line's keys, space-separated, from `at` on.
    keys: Vec<u8>,
    at: usize,
    cas: bool,
    /// `gat`: the expiry to set.
    touch: Option<Expiry>,
}

impl Retrieval {
    /// Runs keys until `out` holds `out_high` bytes or the line is done (then with its `END`);
    /// whether it is done.
    pub fn run(&mut self, out: &mut Vec<u8>, ctx: &Ctx<'_>, out_high: usize) -> bool {
        let (mut hits, mut n) = (0u64, 0u64);
        let mut rest = &self.keys[self.at..];
        let done = loop {
            let Some(key) = next_token(&mut rest) else { break true };
            n += 1;
            if fetch_one(key, self.cas, self.touch, out, ctx).is_some() {
                hits += 1;
            }
            if out.len() >= out_high && !rest.iter().all(|&b| b == b' ') {
                break false;
            }
        };
        self.at = self.keys.len() - rest.len();
        count_reads(self.touch.is_some(), n, hits, ctx);
        if done {
            out.extend_from_slice(reply::END);
        }
        done
    }
}

/// A retrieval line too long to parse whole ([`crate::protocol::get_head`]), run as it
/// arrives: the session feeds it the complete keys as they come and finishes it at the line's
/// end. The reply is held here until then, so that it is what the whole line would have got:
/// the hits in order then `END`, or (as memcached, which reads the whole line first) only the
/// error for a bad key anywhere in the line, or `SERVER_ERROR out of memory writing get
/// response` once the reply passes `max_response`. Memory: the reply, at most `max_response`.
#[derive(Debug)]
pub struct GetStream {
    cas: bool,
    /// `gat`: the expiry to set.
    touch: Option<Expiry>,
    reply: Vec<u8>,
    /// Keys run so far.
    keys: u64,
    /// The line failed: the reply to send at its end; the rest of its keys are dropped.
    fail: Option<&'static [u8]>,
}

impl GetStream {
    pub fn new(head: &GetHead, ctx: &Ctx<'_>) -> GetStream {
        let mut s = GetStream { cas: head.cas, touch: None, reply: Vec::new(), keys: 0, fail: None };
        match head.gat {
            None => {}
            Some(Ok(exptime)) => s.touch = Some(Expiry::from_exptime(exptime, ctx.shared.cache.now())),
            Some(Err(kind)) => s.fail = kind.reply(),
        }
        s
    }

    /// Whether the line has failed (what remains of it is only to be dropped).
    pub fn failed(&self) -> bool {
        self.fail.is_some()
    }

    /// Fails the line with `kind`'s reply (a key too long that is still arriving).
    pub fn reject(&mut self, kind: FailKind) {
        if self.fail.is_none() {
            self.fail = Some(kind.reply().unwrap_or(reply::ERROR));
            self.reply = Vec::new();
        }
    }

    /// Runs the space-separated keys of `keys` (all complete).
    pub fn run(&mut self, mut keys: &[u8], ctx: &Ctx<'_>) {
        let (mut hits, mut n) = (0u64, 0u64);
        while self.fail.is_none() {
            let Some(key) = next_token(&mut keys) else { break };
            if let Err(kind) = check_key(key) {
                self.reject(kind);
                break;
            }
            n += 1;
            if fetch_one(key, self.cas, self.touch, &mut self.reply, ctx).is_some() {
                hits += 1;
                if self.reply.len() > ctx.shared.limits.max_response {
                    self.fail = Some(reply::GET_TOO_LARGE);
                    self.reply = Vec::new();
                }
            }
        }
        self.keys += n;
        count_reads(self.touch.is_some(), n, hits, ctx);
    }

    /// The line ended: appends its reply to `out`.
    pub fn finish(mut self, out: &mut Vec<u8>) {
        if let Some(fail) = self.fail {
            out.extend_from_slice(fail);
        } else if self.keys == 0 && self.touch.is_none() {
            // A `get` without keys, as `parse` answers it (`gat` without keys: a bare END).
            out.extend_from_slice(reply::ERROR);
        } else if out.is_empty() {
            self.reply.extend_from_slice(reply::END);
            *out = self.reply;
        } else {
            out.extend_from_slice(&self.reply);
            out.extend_from_slice(reply::END);
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn store(
    kind: StoreKind,
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    cas: u64,
    out: &mut Vec<u8>,
    ctx: &Ctx<'_>,
) {
    let outcome = do_store(kind, key, flags, exptime, data, cas, ctx);
    stored(kind, key, exptime, data.len(), outcome, ctx);
    let reply: &[u8] = match outcome {
        Stored::Stored(_) => reply::STORED,
        Stored::NotStored => reply::NOT_STORED,
        Stored::Exists => reply::EXISTS,
        Stored::NotFound => reply::NOT_FOUND,
        Stored::TooLarge => reply::TOO_LARGE,
        Stored::NoMemory => reply::NO_MEMORY_STORING,
        Stored::Failed => reply::STORAGE_FAILED,
    };
    out.extend_from_slice(reply);
}

pub(super) fn arith(incr: bool, key: &[u8], delta: u64, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    match do_arith(incr, key, delta, ctx) {
        Arith::Value(Counted { n, .. }) => {
            put_u64(out, n);
            out.extend_from_slice(reply::CRLF);
        }
        Arith::NotFound => out.extend_from_slice(reply::NOT_FOUND),
        Arith::NotNumeric => out.extend_from_slice(reply::NON_NUMERIC),
        Arith::Failed => out.extend_from_slice(reply::OUT_OF_MEMORY),
    }
}

pub(super) fn delete(key: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let ok = ctx.shared.cache.delete(key).is_ok();
    ctx.shared.watchers.detail(key, 3);
    bump(if ok { &ctx.stats.delete_hits } else { &ctx.stats.delete_misses }, 1);
    out.extend_from_slice(if ok { reply::DELETED } else { reply::NOT_FOUND });
}

pub(super) fn touch_key(key: &[u8], exptime: i64, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    bump(&ctx.stats.cmd_touch, 1);
    let ok = touch(key, exptime, ctx);
    bump(if ok { &ctx.stats.touch_hits } else { &ctx.stats.touch_misses }, 1);
    out.extend_from_slice(if ok { reply::TOUCHED } else { reply::NOT_FOUND });
}

pub(super) fn verbosity(level: u32, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
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
}
