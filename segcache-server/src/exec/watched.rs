//! What the `watch` streams (`fetchers`, `mutations`) and `stats detail` see of the reads and
//! stores that the text and meta handlers run.

use super::engine::Stored;
use super::expiry::Expiry;
use crate::observe::watch::{uriencode_str, FETCHERS, MUTATIONS};
use crate::protocol::StoreKind;
use crate::state::Ctx;

/// The connection's descriptor, as memcached's logs print it (`cfd=`).
fn cfd(ctx: &Ctx<'_>) -> i32 {
    ctx.conn.map_or(-1, |c| c.fd)
}

/// Logs a key read for the `fetchers` stream and counts it for `stats detail`; `size`: the
/// value's length on a hit.
#[inline]
pub(super) fn fetched(key: &[u8], size: Option<usize>, ctx: &Ctx<'_>) {
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
pub(super) fn stored(kind: StoreKind, key: &[u8], exptime: i64, size: usize, outcome: Stored, ctx: &Ctx<'_>) {
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
