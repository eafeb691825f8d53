//! The meta protocol (`mg`, `ms`, `md`, `ma`, `me`, `mn`) of memcached 1.6: execution (the flags
//! are parsed in `protocol::meta`).
//!
//! The item state the flags report and change lives in the engine: the stale bit (`md I`,
//! `ms I`), the recache token (`W` to one client, `Z` to the others: `mg` of a stale item, `mg R`,
//! `mg N`), the fetched bit (`h`), the access time (`l`, `me`'s `la`) and client-chosen CAS
//! values (`E`). Reads made only to answer a request (CAS checks, return flags) leave the fetched
//! bit and access time alone (`ReadOptions::no_update`).
//!
//! Deviations (docs/server.md): `C` (compare CAS) on `ma` and on `ms` append/prepend/replace,
//! and `c` on `ms`/`ma`, take two engine calls, so they are not atomic against a concurrent
//! writer.

use std::time::Duration;

use segcache_core::{Error, ReadOptions, StoreMode, StoreOptions};

use super::engine::{arith_with, do_arith, do_store, grow_with, look, Arith, Counted, Stored};
use super::expiry::Expiry;
use super::watched::{log_get, log_store, watching};
use crate::observe::stats::bump;
use crate::observe::watch::{FETCHERS, MUTATIONS};
use crate::protocol::{put_i64, put_u64, reply, MetaCmd, MetaFlags, MetaKey, StoreKind};
use crate::state::Ctx;

/// What return flags can report about an item.
#[derive(Debug, Clone, Copy, Default)]
struct Info {
    flags: u32,
    cas: u64,
    size: usize,
    /// Seconds left, -1 for never.
    ttl: i64,
    /// Fetched before this request (`h`).
    fetched: bool,
    /// Seconds since the last access before this request (`l`).
    idle: u64,
}

impl Info {
    fn of(item: &segcache_core::Item<'_>) -> Info {
        Info {
            flags: item.flags(),
            cas: item.cas(),
            size: item.value().len(),
            ttl: item.ttl().map_or(-1, |d| d.as_secs() as i64),
            fetched: item.fetched(),
            idle: item.last_access().as_secs(),
        }
    }
}

/// The return flags memcached writes for each kind of reply (others asked for are left out).
const MG_HIT: &[u8] = b"stcfOkhl";
const MA_HIT: &[u8] = b"ctOk";
/// `s` is from memcached after 1.6.18 (which ignores it): the item's size after the store, or
/// the request's for a store that failed.
const MS_REPLY: &[u8] = b"Okcs";
/// Misses and failures, and every `md` reply: the opaque and the key only.
const KEY_ONLY: &[u8] = b"Ok";

/// How `t` reads: memcached applies `T` (and `N`, on an item the request created) where it
/// meets them among the flags, so a `t` before them reports the TTL from before.
#[derive(Debug, Clone, Copy, Default)]
struct TtlOrder {
    /// The TTL before `T`/`N` changed it (`None`: they changed nothing).
    before: Option<i64>,
    /// The item was created by this request (`N` sets its TTL too).
    created: bool,
    /// The cache clock, to read `T`/`N` tokens that come before others.
    now: u32,
    /// `h` and `l` as they were before `T` touched the item (a touch is an access).
    before_touch: Option<(bool, u64)>,
    /// `T` expired the item (returned this once) and `R` asks for a window: the item is in it.
    expired_in_window: bool,
    /// This request won the token by `R` before `T` changed the TTL.
    won_before_ttl: bool,
}

/// The TTL a `t` reports for the exptime token `exptime` (`-1`: never).
fn remaining(exptime: Option<i64>, now: u32) -> Option<i64> {
    Some(match Expiry::from_exptime(exptime?, now) {
        Expiry::After(d) => d.as_secs() as i64,
        Expiry::Never | Expiry::Expired => -1,
    })
}

/// Appends the return flags the request asked for among `which`, in the request's order.
fn put_ret_flags(out: &mut Vec<u8>, f: &MetaFlags<'_>, key: &[u8], which: &[u8], info: Option<&Info>, order: TtlOrder) {
    let mut ttl_applied = false;
    // The TTL as the flags read so far set it (memcached applies them in order).
    let mut current = None;
    for (at, &c) in f.order.letters().iter().enumerate() {
        if c == b'T' {
            ttl_applied = true;
            current = remaining(f.ttl, order.now);
        } else if c == b'N' && order.created {
            ttl_applied = true;
            current = remaining(f.vivify, order.now);
        }
        if !which.contains(&c) {
            continue;
        }
        match (c, info) {
            (b'O', _) => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(f.opaque.unwrap_or_default());
            }
            (b'k', _) => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key);
                // memcached marks a base64 key right after it.
                if f.base64 {
                    out.extend_from_slice(b" b");
                }
            }
            (b'c', Some(i)) => {
                out.extend_from_slice(b" c");
                put_u64(out, i.cas);
            }
            // `ms` that stored nothing: memcached reports CAS 0.
            (b'c', None) => out.extend_from_slice(b" c0"),
            (b'f', Some(i)) => {
                out.extend_from_slice(b" f");
                put_u64(out, u64::from(i.flags));
            }
            (b's', Some(i)) => {
                out.extend_from_slice(b" s");
                put_u64(out, i.size as u64);
            }
            (b'h', Some(i)) => out.extend_from_slice(if i.fetched { b" h1" } else { b" h0" }),
            (b'l', Some(i)) => {
                out.extend_from_slice(b" l");
                put_u64(out, i.idle);
            }
            (b't', Some(i)) => {
                out.extend_from_slice(b" t");
                let ttl = match (order.before, current) {
                    (Some(before), _) if !ttl_applied => before,
                    // A later token changes it again, or this one expired the item (returned
                    // this once): report it as it stands here.
                    (_, Some(now)) if now == -1 || f.ttl_changes_after(at, order.created) => now,
                    _ => i.ttl,
                };
                put_i64(out, ttl);
            }
            _ => {}
        }
    }
}

/// Writes `CODE<flags>\r\n`.
fn put_code(out: &mut Vec<u8>, code: &[u8], f: &MetaFlags<'_>, key: &[u8], which: &[u8], info: Option<&Info>) {
    out.extend_from_slice(code);
    put_ret_flags(out, f, key, which, info, TtlOrder::default());
    out.extend_from_slice(reply::CRLF);
}

/// Runs one meta command.
pub fn execute(cmd: MetaCmd, key: &MetaKey<'_>, data: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    if cmd == MetaCmd::Noop {
        out.extend_from_slice(reply::MN_LINE);
        return;
    }
    let key_token = key.sent();
    let key = match key.key() {
        Ok(k) => k,
        Err(kind) => {
            out.extend_from_slice(kind.reply().unwrap_or(reply::BAD_KEY));
            return;
        }
    };
    match cmd {
        MetaCmd::Get => meta_get(key, key_token, f, out, ctx),
        MetaCmd::Set => meta_set(key, key_token, data, f, out, ctx),
        MetaCmd::Delete => meta_delete(key, key_token, f, out, ctx),
        MetaCmd::Arith => meta_arith(key, key_token, f, out, ctx),
        MetaCmd::Debug => meta_debug(key, key_token, out, ctx),
        MetaCmd::Noop => unreachable!("handled above"),
    }
}

/// Writes a hit: `VA <size> <flags>\r\n<data>\r\n` with `v`, else `HD <flags>\r\n`.
fn put_hit(
    out: &mut Vec<u8>,
    f: &MetaFlags<'_>,
    key_token: &[u8],
    item: &segcache_core::Item<'_>,
    created: bool,
    order: TtlOrder,
) {
    let mut info = Info::of(item);
    // The request that created the item reports it as new, with the token it holds.
    let (token_sent, won) = if created {
        (false, true)
    } else {
        let won_before = order.won_before_ttl;
        (item.token_sent() && !won_before, won_before || item.won() || (order.expired_in_window && !item.token_sent()))
    };
    if created {
        info.fetched = false;
        info.idle = 0;
    } else if let Some((fetched, idle)) = order.before_touch {
        (info.fetched, info.idle) = (fetched, idle);
    }
    // As the newest memcached: a `C` that matches the item's CAS means the client holds this
    // value already, so it is not sent again.
    let value = f.value && f.compare_cas != Some(item.cas());
    if value {
        out.extend_from_slice(reply::VA);
        put_u64(out, info.size as u64);
    } else {
        out.extend_from_slice(reply::HD);
    }
    put_ret_flags(out, f, key_token, MG_HIT, Some(&info), order);
    // memcached's order: Z (a token is out), X (stale), W (this client won it).
    if token_sent {
        out.extend_from_slice(b" Z");
    }
    if item.is_stale() {
        out.extend_from_slice(b" X");
    }
    if won {
        out.extend_from_slice(reply::WON);
    }
    out.extend_from_slice(reply::CRLF);
    if value {
        out.extend_from_slice(item.value());
        out.extend_from_slice(reply::CRLF);
    }
}

fn ttl_secs(item: &segcache_core::Item<'_>) -> i64 {
    item.ttl().map_or(-1, |d| d.as_secs() as i64)
}

fn meta_get(key: &[u8], key_token: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    bump(&ctx.stats.cmd_get, 1);
    let mut expire_after_read = false;
    let mut order = TtlOrder { now: cache.now(), ..TtlOrder::default() };
    // memcached's R window, an exptime as T's.
    let window = f.recache.and_then(|r| Expiry::from_exptime(r, cache.now()).ttl());
    let r_first = f.ttl.is_some() && window.is_some() && f.order.before(b'R', b'T');
    if r_first {
        // R before T sees the TTL from before T.
        let opts = ReadOptions { claim_token: true, recache_below: window, no_update: true };
        order.won_before_ttl = cache.get_with_options(key, opts, |i| i.won()).unwrap_or(false);
    }
    if let Some(t) = f.ttl {
        if f.order.before(b't', b'T') {
            order.before = look(ctx, key, |item| ttl_secs(&item));
        }
        order.before_touch = look(ctx, key, |item| (item.fetched(), item.last_access().as_secs()));
        bump(&ctx.stats.cmd_touch, 1);
        match Expiry::from_exptime(t, cache.now()).ttl() {
            Some(ttl) => {
                let hit = cache.set_ttl(key, ttl).is_ok();
                bump(if hit { &ctx.stats.touch_hits } else { &ctx.stats.touch_misses }, 1);
            }
            None => {
                expire_after_read = true;
                // memcached applies the tokens in order: R sees T's expiry only after it.
                order.expired_in_window = f.recache.is_some_and(|r| r > 0) && !f.order.before(b'R', b'T');
            }
        }
    }
    let opts = ReadOptions {
        claim_token: true,
        // memcached's R: a win once the TTL left is below the token.
        recache_below: if r_first { None } else { window },
        no_update: f.no_update,
    };
    let size = cache.get_with_options(key, opts, |item| {
        put_hit(out, f, key_token, &item, false, order);
        item.value().len()
    });
    log_get(key, size, ctx);
    let mut hit = size.is_some();
    if expire_after_read {
        let _ = cache.delete(key);
    }
    if !hit && f.vivify.is_some() {
        // The first client to miss creates an empty placeholder and wins (W) the right to fill
        // it. memcached creates it with no TTL, then applies T and N in their order: its TTL is
        // the last of them.
        let order = TtlOrder { before: Some(-1), created: true, now: cache.now(), ..TtlOrder::default() };
        let expiry = f.last_ttl(true).map(|n| Expiry::from_exptime(n, cache.now()));
        if let Some(expiry) = expiry {
            // One that expires on arrival is still returned this once, as memcached does.
            let ttl = expiry.ttl().unwrap_or(Duration::ZERO);
            let how = StoreOptions { cas: f.explicit_cas, won: true, invalidate: false };
            let won = cache.store_with(key, b"", 0, ttl, StoreMode::Add, how).is_ok();
            // The others see the creator's token (Z), as any later `mg` does.
            // (memcached counts the creator's read as a fetch.)
            let opts = ReadOptions { claim_token: true, recache_below: None, no_update: f.no_update };
            hit = cache.get_with_options(key, opts, |item| put_hit(out, f, key_token, &item, won, order)).is_some();
            if expiry == Expiry::Expired && won {
                let _ = cache.delete(key);
            }
        }
    }
    if hit {
        bump(&ctx.stats.get_hits, 1);
    } else {
        bump(&ctx.stats.get_misses, 1);
        if !f.quiet {
            put_code(out, reply::EN, f, key_token, KEY_ONLY, None);
        }
    }
}

fn meta_set(key: &[u8], key_token: &[u8], data: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let kind = match f.mode.unwrap_or(b'S') {
        b'E' => StoreKind::Add,
        b'R' => StoreKind::Replace,
        b'A' => StoreKind::Append,
        b'P' => StoreKind::Prepend,
        _ => StoreKind::Set,
    };
    let flags = f.client_flags.unwrap_or(0);
    let exptime = f.ttl.unwrap_or(0);
    // As memcached, which looks the item up first: a fetch, then the store, in `watch`.
    if watching(FETCHERS, ctx) {
        log_get(key, look(ctx, key, |i| i.value().len()), ctx);
    }
    let grows = matches!(kind, StoreKind::Append | StoreKind::Prepend);
    // `s` on an append reports the joined size: what the value held before, as a fallback for
    // when another writer replaces the item before it is read back below.
    let joined_size = grows && f.order.has(b's');
    let size_before = if joined_size { look(ctx, key, |i| i.value().len()) } else { None };
    let expires = Expiry::from_exptime(exptime, cache.now()) == Expiry::Expired;
    // (memcached: set and replace with C are a cas, the only stores that I changes.)
    let cas_store = f.compare_cas.is_some() && matches!(kind, StoreKind::Set | StoreKind::Replace);
    // E, I, and a C on replace, append or prepend: through the engine's compare-and-swap.
    let compared = f.compare_cas.is_some_and(|c| c != 0 || kind == StoreKind::Replace) && kind != StoreKind::Set;
    let state = f.explicit_cas.is_some() || (f.invalidate && cas_store) || (compared && kind != StoreKind::Add);
    let r = match (f.compare_cas, kind) {
        // E (and I): through the engine's store with options. An item that expires on
        // arrival keeps no state: the plain paths below handle it.
        _ if state && !expires => store_with_state(kind, key, flags, exptime, data, f, ctx),
        // As memcached: set and replace with C are a cas; add ignores C; append and prepend
        // compare it only when it is not 0, and on a missing item they do not store.
        (Some(c), StoreKind::Set) => do_store(StoreKind::Cas, key, flags, exptime, data, c, ctx),
        (Some(c), StoreKind::Replace) => match look(ctx, key, |i| i.cas()) {
            None => Stored::NotFound,
            Some(x) if x != c => Stored::Exists,
            Some(_) => do_store(kind, key, flags, exptime, data, 0, ctx),
        },
        (Some(c), StoreKind::Append | StoreKind::Prepend) if c != 0 => {
            store_with_state(kind, key, flags, exptime, data, f, ctx)
        }
        (_, StoreKind::Append | StoreKind::Prepend) => {
            let r = do_store(kind, key, flags, exptime, data, 0, ctx);
            match (r, f.vivify) {
                (Stored::NotStored, Some(n)) => do_store(StoreKind::Add, key, flags, n, data, 0, ctx),
                _ => r,
            }
        }
        (_, _) => do_store(kind, key, flags, exptime, data, 0, ctx),
    };
    if watching(MUTATIONS, ctx) {
        // The TTL asked for (append and prepend keep the item's: what it has left).
        // What was stored; for a refused store, what the request carried.
        let stored = if matches!(r, Stored::Stored(_)) {
            look(ctx, key, |i| (ttl_secs(&i).max(0) as u64, i.value().len()))
        } else {
            None
        };
        let (left, size) = stored.unwrap_or((0, data.len()));
        let ttl = match (kind, Expiry::from_exptime(exptime, cache.now())) {
            (StoreKind::Append | StoreKind::Prepend, _) => left,
            (_, Expiry::After(d)) => d.as_secs(),
            (_, Expiry::Never | Expiry::Expired) => 0,
        };
        log_store(kind, key, ttl, size, r, ctx);
    }
    match r {
        Stored::Stored(cas) => {
            if !f.quiet {
                // The CAS value this store gave the item (a read now could see another
                // writer's). An item that expired on arrival was never stored: memcached still
                // reports the CAS it gave it. Report one that matches no item, never `c0`,
                // which a client that sends it back as `C0` would find compares nothing.
                let size = if joined_size {
                    // This store's own item, if no writer replaced it since.
                    look(ctx, key, |i| (i.cas() == cas).then(|| i.value().len()))
                        .flatten()
                        .unwrap_or(size_before.unwrap_or(0) + data.len())
                } else {
                    data.len()
                };
                let info = Info { cas: if cas == 0 { u64::MAX } else { cas }, size, ..Info::default() };
                put_code(out, reply::HD, f, key_token, MS_REPLY, Some(&info));
            }
        }
        // memcached reports CAS 0 and the request's size.
        Stored::NotStored | Stored::Exists | Stored::NotFound => {
            let code = match r {
                Stored::NotStored => reply::NS,
                Stored::Exists => reply::EX,
                _ => reply::NF,
            };
            put_code(out, code, f, key_token, MS_REPLY, Some(&Info { size: data.len(), ..Info::default() }));
        }
        Stored::TooLarge => out.extend_from_slice(reply::TOO_LARGE),
        Stored::NoMemory => out.extend_from_slice(reply::NO_MEMORY_STORING),
        Stored::Failed => out.extend_from_slice(reply::STORAGE_FAILED),
    }
}

/// `ms` with `E` (the CAS value the item takes) or, for a set with `C`, `I` (a recache that
/// lost to a newer invalidation is stored stale): set, add and replace are one engine call;
/// append and prepend retry a compare-and-swap of the joined value until no writer came between.
fn store_with_state(
    kind: StoreKind,
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    f: &MetaFlags<'_>,
    ctx: &Ctx<'_>,
) -> Stored {
    let cache = &ctx.shared.cache;
    bump(&ctx.stats.cmd_set, 1);
    let ttl = Expiry::from_exptime(exptime, cache.now()).ttl().unwrap_or(Duration::ZERO);
    let compare = f.compare_cas;
    // C0 compares nothing: memcached's cas with it fails, I or not.
    let invalidate = f.invalidate && compare.is_some_and(|c| c != 0);
    let opts = StoreOptions { cas: f.explicit_cas, won: false, invalidate };
    let r = match (kind, compare) {
        (StoreKind::Set, Some(c)) => {
            let r = cache.store_with(key, data, flags, ttl, StoreMode::Cas(c), opts);
            let counter = match r {
                Ok(_) => &ctx.stats.cas_hits,
                Err(Error::Exists) => &ctx.stats.cas_badval,
                Err(_) => &ctx.stats.cas_misses,
            };
            bump(counter, 1);
            r
        }
        (StoreKind::Set, None) => cache.store_with(key, data, flags, ttl, StoreMode::Set, opts),
        (StoreKind::Add, _) => cache.store_with(key, data, flags, ttl, StoreMode::Add, opts),
        (StoreKind::Replace, Some(c)) => cache.store_with(key, data, flags, ttl, StoreMode::Cas(c), opts),
        (StoreKind::Replace, None) => cache.store_with(key, data, flags, ttl, StoreMode::Replace, opts),
        // Append or prepend: one compare-and-swap of the joined value (memcached keeps the
        // item's flags and TTL); a miss is not stored.
        _ => match grow_with(kind, key, data, compare.filter(|&c| c != 0), f.explicit_cas, ctx) {
            Err(Error::NotFound) => Err(Error::NotStored),
            r => r,
        },
    };
    match r {
        Ok(cas) => {
            bump(&ctx.stats.total_items, 1);
            Stored::Stored(cas)
        }
        Err(Error::NotStored) => Stored::NotStored,
        Err(Error::Exists) => Stored::Exists,
        Err(Error::NotFound) => Stored::NotFound,
        Err(Error::TooLarge { .. }) => {
            bump(&ctx.stats.store_too_large, 1);
            Stored::TooLarge
        }
        Err(Error::NoMemory) => {
            bump(&ctx.stats.store_no_memory, 1);
            Stored::NoMemory
        }
        Err(_) => Stored::Failed,
    }
}

fn meta_delete(key: &[u8], key_token: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let current = look(ctx, key, |i| (i.cas(), i.flags(), i.ttl(), i.value().len()));
    log_get(key, current.map(|c| c.3), ctx);
    let current = current.map(|(cas, flags, ttl, _)| (cas, flags, ttl));
    let code: &[u8] = match (current, f.compare_cas) {
        (None, _) => reply::NF,
        (Some((cas, _, _)), Some(c)) if cas != c => reply::EX,
        // Mark stale, with a new CAS value (E's, or the next) and T's TTL if given; with `x`
        // (the newest memcached) the value is emptied first.
        (Some((cas, flags, ttl)), _) if f.invalidate => {
            let ttl_now = f.ttl.map(|t| Expiry::from_exptime(t, cache.now()));
            match ttl_now {
                // (keeping the CAS value, which `C` is then compared with)
                _ if f.remove_value && !empty_value(cache, key, cas, flags, ttl, Some(cas)) => reply::NF,
                Some(Expiry::Expired) => match cache.delete(key) {
                    Ok(()) => reply::HD,
                    Err(_) => reply::NF,
                },
                _ => match cache.invalidate(key, ttl_now.and_then(Expiry::ttl), f.compare_cas, f.explicit_cas) {
                    Ok(_) => reply::HD,
                    Err(Error::Exists) => reply::EX,
                    Err(_) => reply::NF,
                },
            }
        }
        (Some((cas, flags, ttl)), _) if f.remove_value => {
            match empty_value(cache, key, cas, flags, ttl, f.explicit_cas) {
                true => reply::HD,
                false => reply::NF,
            }
        }
        (Some(_), Some(c)) => match cache.delete_cas(key, c) {
            Ok(()) => reply::HD,
            Err(Error::Exists) => reply::EX,
            Err(_) => reply::NF,
        },
        (Some(_), None) => match cache.delete(key) {
            Ok(()) => reply::HD,
            Err(_) => reply::NF,
        },
    };
    let hit = code == reply::HD;
    if code != reply::EX {
        bump(if hit { &ctx.stats.delete_hits } else { &ctx.stats.delete_misses }, 1);
    }
    // As memcached: `q` hides only the success; NF and EX are still sent.
    if f.quiet && hit {
        return;
    }
    put_code(out, code, f, key_token, KEY_ONLY, None);
}

/// `md ... x`: the item at CAS `cas` keeps its flags and TTL with an empty value, its CAS
/// `explicit` (E's) or the next; `false` when it changed or went meanwhile.
fn empty_value(
    cache: &segcache_core::SharedCache,
    key: &[u8],
    cas: u64,
    flags: u32,
    ttl: Option<std::time::Duration>,
    explicit: Option<u64>,
) -> bool {
    // A TTL of zero means "never" to the engine: keep at least one second left.
    let ttl = ttl.map_or(std::time::Duration::ZERO, |d| d.max(std::time::Duration::from_secs(1)));
    let opts = StoreOptions { cas: explicit, ..StoreOptions::default() };
    cache.store_with(key, b"", flags, ttl, StoreMode::Cas(cas), opts).is_ok()
}

fn meta_arith(key: &[u8], key_token: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let incr = !matches!(f.mode, Some(b'D' | b'-'));
    let delta = f.delta.unwrap_or(1);
    // As memcached: C0 compares nothing; a missing item is a miss (so `N` still creates it);
    // an empty value is refused as non-numeric before the CAS is compared.
    let compare = f.compare_cas.filter(|&c| c != 0);
    if compare.is_some() && look(ctx, key, |i| i.value().is_empty()) == Some(true) {
        out.extend_from_slice(reply::NON_NUMERIC);
        return;
    }
    let mut order = TtlOrder { now: cache.now(), ..TtlOrder::default() };
    if f.ttl.is_some() && f.order.before(b't', b'T') {
        order.before = look(ctx, key, |item| ttl_secs(&item));
    }
    // C and E: one compare-and-swap of the new number.
    let mut r = if compare.is_some() || f.explicit_cas.is_some() {
        match arith_with(incr, key, delta, compare, f.explicit_cas, ctx) {
            Ok(counted) => Arith::Value(counted),
            Err(Error::Exists) => return put_code(out, reply::EX, f, key_token, KEY_ONLY, None),
            Err(Error::NotFound) => Arith::NotFound,
            Err(Error::NotNumeric) => Arith::NotNumeric,
            Err(_) => Arith::Failed,
        }
    } else {
        do_arith(incr, key, delta, ctx)
    };
    let mut ttl_token = f.ttl;
    let mut created = false;
    if r == Arith::NotFound && f.vivify.is_some() {
        // memcached creates the item with no TTL, then applies N and T in their order.
        order = TtlOrder { before: Some(-1), created: true, now: cache.now(), ..TtlOrder::default() };
        ttl_token = f.last_ttl(true);
        let initial = f.initial.unwrap_or(0);
        let mut digits = itoa::Buffer::new();
        let opts = StoreOptions { cas: f.explicit_cas, ..StoreOptions::default() };
        r = match cache.store_with(key, digits.format(initial).as_bytes(), 0, Duration::ZERO, StoreMode::Add, opts) {
            Ok(cas) => {
                created = true;
                Arith::Value(Counted { n: initial, cas })
            }
            // Someone created it meanwhile: apply the delta to theirs.
            Err(_) => {
                order = TtlOrder { now: cache.now(), ..TtlOrder::default() };
                ttl_token = f.ttl;
                do_arith(incr, key, delta, ctx)
            }
        };
    }
    match r {
        Arith::Value(Counted { n, cas }) => {
            // An exptime that expires the item on arrival: it is reported this once, as it was.
            let mut before = None;
            if let Some(t) = ttl_token {
                before = look(ctx, key, |i| Info { cas, ..Info::of(&i) });
                set_ttl(key, t, ctx);
            }
            // As memcached: `q` hides a success, with or without its value (not the reply
            // to a request that created the item).
            if f.quiet && !created {
                return;
            }
            // The CAS value this request gave the item (a read now could see another writer's).
            let info = look(ctx, key, |i| Info { cas, ..Info::of(&i) }).or(before);
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(n).as_bytes();
            if f.value {
                out.extend_from_slice(reply::VA);
                put_u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(reply::HD);
            }
            put_ret_flags(out, f, key_token, MA_HIT, info.as_ref(), order);
            out.extend_from_slice(reply::CRLF);
            if f.value {
                out.extend_from_slice(digits);
                out.extend_from_slice(reply::CRLF);
            }
        }
        Arith::NotFound => put_code(out, reply::NF, f, key_token, KEY_ONLY, None),
        Arith::NotNumeric => out.extend_from_slice(reply::NON_NUMERIC),
        Arith::Failed => out.extend_from_slice(reply::OUT_OF_MEMORY),
    }
}

/// Sets a key's expiry as `touch` does, without counting as an access (memcached's meta
/// commands set `exptime` directly).
fn set_ttl(key: &[u8], exptime: i64, ctx: &Ctx<'_>) -> bool {
    let cache = &ctx.shared.cache;
    match Expiry::from_exptime(exptime, cache.now()).ttl() {
        Some(ttl) => cache.set_ttl(key, ttl).is_ok(),
        None => cache.delete(key).is_ok(),
    }
}

fn meta_debug(key: &[u8], key_token: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let found = look(ctx, key, |item| {
        let info = Info::of(&item);
        out.extend_from_slice(reply::ME);
        // memcached names the key itself, decoded from base64; a key that would break the line
        // stays encoded.
        let printable = key.iter().all(|b| b.is_ascii_graphic());
        out.extend_from_slice(if printable { key } else { key_token });
        // memcached 1.6's fields: `exp` is its clock less the expiry (minus the TTL left), `la`
        // the seconds since the last access; `cls` (the slab class) and `size` (its item
        // header included) have no counterpart here: the class is 1, the size the record's.
        out.extend_from_slice(b" exp=");
        put_i64(out, if info.ttl < 0 { -1 } else { -info.ttl });
        out.extend_from_slice(b" la=");
        put_u64(out, info.idle);
        out.extend_from_slice(b" cas=");
        put_u64(out, info.cas);
        out.extend_from_slice(if info.fetched { b" fetch=yes" } else { b" fetch=no" });
        out.extend_from_slice(b" cls=1 size=");
        // The same figure as `lru_crawler metadump`'s.
        put_u64(out, segcache_core::record_size(&item) as u64);
        out.extend_from_slice(reply::CRLF);
    });
    if found.is_none() {
        out.extend_from_slice(reply::EN_LINE);
    }
}
