//! Runs text-protocol requests against the engine and writes memcached's replies.
//!
//! Replies are appended to the connection's reusable output buffer; values are copied into it
//! from the engine (`get_with`: through a stack copy taken without the lock for items up to 512
//! bytes, straight from the segment under the shard's read lock for larger ones), so a hit costs
//! no allocation.

use std::sync::atomic::Ordering;

use segcache_core::Item;

use super::admin::After;
use super::engine::{do_arith, do_store, touch, Arith, Counted, Stored};
use super::expiry::Expiry;
use crate::protocol::{check_key, next_token, put_u64, reply, Admin, FailKind, GetHead, Keys, Request, StoreKind};
use crate::state::Ctx;
use crate::stats::bump;
use crate::watch::{uriencode_str, FETCHERS, MUTATIONS};

/// The version line: a memcached 1.6 release number, which clients' version checks accept
/// (`stats` names segcache and its own version).
pub const VERSION: &str = "1.6.18";

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
            ctx.shared.watchers.detail(key, 3);
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
        Request::FlushAll { .. } if !ctx.shared.settings.flush_enabled => {
            // -F: counted, as memcached does, and refused.
            bump(&ctx.stats.cmd_flush, 1);
            out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
            matches!(req, Request::FlushAll { noreply: true, .. })
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
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(VERSION.as_bytes());
            out.extend_from_slice(reply::CRLF);
            false
        }
        Request::Admin(cmd) => {
            if let Some(refusal) = refused(&cmd, ctx) {
                out.extend_from_slice(refusal);
            } else if super::admin::execute(cmd, out, ctx) == After::Close {
                return Flow::Close;
            }
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

/// memcached's refusal of an operator command that `-X` (dumps) or `-W` (`watch`) turned off.
fn refused(cmd: &Admin<'_>, ctx: &Ctx<'_>) -> Option<&'static [u8]> {
    let s = &ctx.shared.settings;
    match cmd {
        Admin::CacheDump { .. } if !s.dump_enabled => Some(b"CLIENT_ERROR stats cachedump not allowed\r\n"),
        Admin::Dump { mg: false, .. } if !s.dump_enabled => Some(b"ERROR metadump not allowed\r\n"),
        // The newest memcached's words (1.6.18 has no mgdump).
        Admin::Dump { mg: true, .. } if !s.dump_enabled => Some(b"ERROR key dump not allowed\r\n"),
        Admin::Watch { .. } if !s.watch_enabled => Some(b"CLIENT_ERROR watch commands not allowed\r\n"),
        _ => None,
    }
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

fn get(keys: Keys<'_>, cas: bool, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let mark = out.len();
    let (mut hits, mut n) = (0u64, 0u64);
    for key in keys {
        n += 1;
        if fetch_one(key, cas, None, out, ctx).is_some() {
            hits += 1;
            if over_limit(out, mark, ctx) {
                return;
            }
        }
    }
    count_reads(false, n, hits, ctx);
    out.extend_from_slice(reply::END);
}

fn gat(exptime: i64, keys: Keys<'_>, cas: bool, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let expiry = Expiry::from_exptime(exptime, ctx.shared.cache.now());
    let mark = out.len();
    let (mut hits, mut n) = (0u64, 0u64);
    for key in keys {
        n += 1;
        if fetch_one(key, cas, Some(expiry), out, ctx).is_some() {
            hits += 1;
            if over_limit(out, mark, ctx) {
                return;
            }
        }
    }
    count_reads(true, n, hits, ctx);
    out.extend_from_slice(reply::END);
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

fn arith(incr: bool, key: &[u8], delta: u64, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
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

/// The connection's descriptor, as memcached's logs print it (`cfd=`).
fn cfd(ctx: &Ctx<'_>) -> i32 {
    ctx.conn.map_or(-1, |c| c.fd)
}

/// Logs a key read for the `fetchers` stream and counts it for `stats detail`; `size`: the
/// value's length on a hit.
#[inline]
fn fetched(key: &[u8], size: Option<usize>, ctx: &Ctx<'_>) {
    ctx.shared.watchers.detail(key, if size.is_some() { 1 } else { 0 });
    log_get(key, size, ctx);
}

/// Logs a key read for the `fetchers` stream (meta commands log theirs here too; as memcached,
/// `stats detail` does not count them).
#[inline]
pub(super) fn log_get(key: &[u8], size: Option<usize>, ctx: &Ctx<'_>) {
    let w = &ctx.shared.watchers;
    if !w.wants(FETCHERS) {
        return;
    }
    w.log(FETCHERS, |line| {
        use std::fmt::Write as _;
        line.push_str("type=item_get key=");
        uriencode_str(line, key);
        let (status, cls) = if size.is_some() { ("found", 1) } else { ("not_found", 0) };
        let _ = write!(line, " status={status} clsid={cls} cfd={} size={}", cfd(ctx), size.unwrap_or(0));
    });
}

/// Logs a storage command for the `mutations` stream and counts it for `stats detail`.
#[inline]
fn stored(kind: StoreKind, key: &[u8], exptime: i64, size: usize, outcome: Stored, ctx: &Ctx<'_>) {
    ctx.shared.watchers.detail(key, 2);
    let ttl = match Expiry::from_exptime(exptime, ctx.shared.cache.now()) {
        Expiry::After(d) => d.as_secs(),
        Expiry::Never | Expiry::Expired => 0,
    };
    log_store(kind, key, ttl, size, outcome, ctx);
}

/// Whether a `watch` stream wants `stream`'s lines (so that the caller looks up what they print
/// only then).
#[inline]
pub(super) fn watching(stream: u8, ctx: &Ctx<'_>) -> bool {
    ctx.shared.watchers.wants(stream)
}

/// Logs a store for the `mutations` stream (`ttl` in seconds left, 0 for never).
#[inline]
pub(super) fn log_store(kind: StoreKind, key: &[u8], ttl: u64, size: usize, outcome: Stored, ctx: &Ctx<'_>) {
    let w = &ctx.shared.watchers;
    if !w.wants(MUTATIONS) {
        return;
    }
    let cmd = match kind {
        StoreKind::Set => "set",
        StoreKind::Add => "add",
        StoreKind::Replace => "replace",
        StoreKind::Append => "append",
        StoreKind::Prepend => "prepend",
        StoreKind::Cas => "cas",
    };
    let status = match outcome {
        Stored::Stored(_) => "stored",
        Stored::NotStored => "not_stored",
        Stored::Exists => "exists",
        Stored::NotFound => "not_found",
        Stored::TooLarge | Stored::NoMemory | Stored::Failed => "too_large",
    };
    w.log(MUTATIONS, |line| {
        use std::fmt::Write as _;
        line.push_str("type=item_store key=");
        uriencode_str(line, key);
        let _ = write!(line, " status={status} cmd={cmd} ttl={ttl} clsid=1 cfd={} size={size}", cfd(ctx));
    });
}
