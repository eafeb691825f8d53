//! Runs binary-protocol requests against the engine and writes memcached's responses, through
//! the engine helpers the text protocol uses (so CAS, expiry, flags, incr on non-numbers and
//! value limits mean the same on both) and bumping the same counters.
//!
//! As memcached 1.6.18 (`proto_bin.c`): a quiet opcode hides its success (a get's hit is still
//! sent) and a get's miss, never an error; every response echoes the request's opaque; a
//! response's CAS is the item's after the command (0 for errors, delete, flush and the others
//! without an item). SET/ADD/REPLACE with a CAS in the header are a compare-and-swap (ADD too,
//! as in memcached); APPEND/PREPEND compare a non-zero CAS, and so do DELETE and INCR/DECR. The
//! comparisons other than SET's (and APPEND/PREPEND's size check) take two engine calls, as the
//! meta protocol's `C` does (see docs/server.md).

use segcache_core::{Item, StoreMode, StoreOptions};

use super::engine::{arith_with, do_arith, do_store, grow_with, look, touch, Arith, Counted, Stored};
use super::expiry::Expiry;
use crate::observe::report::write_stats;
use crate::observe::stats::bump;
use crate::protocol::binary::{op, put_error, put_response, Header, Status, NO_CREATE};
use crate::protocol::StoreKind;
use crate::state::Ctx;

/// A response without a body.
pub(super) fn put_ok(out: &mut Vec<u8>, h: &Header, cas: u64) {
    put_response(out, h.opcode, Status::Success, h.opaque, cas, &[], &[], &[]);
}

/// Writes a hit: flags as extras, the key for the K forms, the value unless TOUCH.
fn put_hit(out: &mut Vec<u8>, h: &Header, key: &[u8], item: &Item<'_>, with_key: bool, with_value: bool) {
    let flags = item.flags().to_be_bytes();
    let key = if with_key { key } else { &[] };
    let value = if with_value { item.value() } else { &[] };
    put_response(out, h.opcode, Status::Success, h.opaque, item.cas(), &flags, key, value);
}

/// GET, GETK, GAT, GATK, TOUCH and their quiet forms.
#[allow(clippy::too_many_arguments)]
pub(super) fn get(
    h: &Header,
    quiet: bool,
    key: &[u8],
    exptime: Option<u32>,
    with_key: bool,
    with_value: bool,
    out: &mut Vec<u8>,
    ctx: &Ctx<'_>,
) {
    let cache = &ctx.shared.cache;
    let hit = match exptime {
        None => cache.get_with(key, |item| put_hit(out, h, key, &item, with_key, with_value)).is_some(),
        // TOUCH: the engine's touch, with memcached's expiry rules, then the item's flags.
        Some(exptime) if !with_value => match cache.get_with(key, |i| (i.flags(), i.cas())) {
            Some((flags, cas)) if touch(key, i64::from(exptime), ctx) => {
                put_response(out, h.opcode, Status::Success, h.opaque, cas, &flags.to_be_bytes(), &[], &[]);
                true
            }
            _ => false,
        },
        // GAT: as the text protocol's gat.
        Some(exptime) => {
            let mut put = |item: Item<'_>| put_hit(out, h, key, &item, with_key, with_value);
            match Expiry::from_exptime(i64::from(exptime), cache.now()).ttl() {
                Some(ttl) => cache.touch(key, ttl).is_ok() && cache.get_with(key, &mut put).is_some(),
                // Expired on arrival: return the item this once, then it is gone.
                None => {
                    let hit = cache.get_with(key, &mut put).is_some();
                    let _ = cache.delete(key);
                    hit
                }
            }
        }
    };
    let hit_n = u64::from(hit);
    // memcached counts GAT/GATQ/GATK/GATKQ as touches only.
    if with_value && exptime.is_none() {
        bump(&ctx.stats.cmd_get, 1);
        bump(&ctx.stats.get_hits, hit_n);
        bump(&ctx.stats.get_misses, 1 - hit_n);
    }
    if exptime.is_some() {
        bump(&ctx.stats.cmd_touch, 1);
        bump(&ctx.stats.touch_hits, hit_n);
        bump(&ctx.stats.touch_misses, 1 - hit_n);
    }
    if !hit && !quiet {
        if with_key {
            // The K forms name the key they missed, without a message.
            put_response(out, h.opcode, Status::KeyNotFound, h.opaque, 0, &[], key, &[]);
        } else {
            put_error(out, h, Status::KeyNotFound);
        }
    }
}

/// SET, ADD, REPLACE, APPEND, PREPEND and their quiet forms.
#[allow(clippy::too_many_arguments)]
pub(super) fn store(
    h: &Header,
    quiet: bool,
    kind: StoreKind,
    key: &[u8],
    flags: u32,
    exptime: u32,
    value: &[u8],
    out: &mut Vec<u8>,
    ctx: &Ctx<'_>,
) {
    let exptime = i64::from(exptime);
    let r = match kind {
        // As memcached: a CAS makes SET, ADD and REPLACE a compare-and-swap.
        StoreKind::Set | StoreKind::Add | StoreKind::Replace if h.cas != 0 => {
            do_store(StoreKind::Cas, key, flags, exptime, value, h.cas, ctx)
        }
        // With a CAS: one compare-and-swap of the joined value.
        StoreKind::Append | StoreKind::Prepend if h.cas != 0 => {
            bump(&ctx.stats.cmd_set, 1);
            match grow_with(kind, key, value, Some(h.cas), None, ctx) {
                Ok(cas) => {
                    bump(&ctx.stats.total_items, 1);
                    Stored::Stored(cas)
                }
                Err(segcache_core::Error::Exists) => Stored::Exists,
                Err(_) => Stored::NotStored,
            }
        }
        _ => do_store(kind, key, flags, exptime, value, 0, ctx),
    };
    let status = match r {
        Stored::Stored(cas) => {
            if !quiet {
                // An item that expired on arrival has no CAS value: one that matches no item.
                put_ok(out, h, if cas == 0 { u64::MAX } else { cas });
            }
            return;
        }
        Stored::Exists => Status::KeyExists,
        Stored::NotFound => Status::KeyNotFound,
        Stored::TooLarge if matches!(kind, StoreKind::Set | StoreKind::Add | StoreKind::Replace) => Status::TooLarge,
        // memcached's words for a refused store depend on the command.
        Stored::NotStored | Stored::TooLarge | Stored::NoMemory => match kind {
            StoreKind::Add => Status::KeyExists,
            StoreKind::Replace => Status::KeyNotFound,
            _ => Status::NotStored,
        },
        Stored::Failed => Status::NoMemory,
    };
    put_error(out, h, status);
}

pub(super) fn delete(h: &Header, quiet: bool, key: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let r = if h.cas != 0 { cache.delete_cas(key, h.cas) } else { cache.delete(key) };
    if matches!(r, Err(segcache_core::Error::Exists)) {
        return put_error(out, h, Status::KeyExists);
    }
    let ok = r.is_ok();
    bump(if ok { &ctx.stats.delete_hits } else { &ctx.stats.delete_misses }, 1);
    if !ok {
        put_error(out, h, Status::KeyNotFound);
    } else if !quiet {
        put_ok(out, h, 0);
    }
}

/// INCREMENT/DECREMENT and their quiet forms: the new value as 8 bytes, or the initial value
/// of an item created on a miss.
#[allow(clippy::too_many_arguments)]
pub(super) fn arith(
    h: &Header,
    quiet: bool,
    incr: bool,
    key: &[u8],
    delta: u64,
    initial: u64,
    exptime: u32,
    out: &mut Vec<u8>,
    ctx: &Ctx<'_>,
) {
    let cache = &ctx.shared.cache;
    // As memcached: an empty value is refused as non-numeric before the CAS is compared.
    if h.cas != 0 && look(ctx, key, |i| i.value().is_empty()) == Some(true) {
        return put_error(out, h, Status::DeltaBadValue);
    }
    // With a CAS: one compare-and-swap of the new number.
    let r = if h.cas == 0 {
        do_arith(incr, key, delta, ctx)
    } else {
        match arith_with(incr, key, delta, Some(h.cas), None, ctx) {
            Ok(counted) => Arith::Value(counted),
            Err(segcache_core::Error::Exists) => return put_error(out, h, Status::KeyExists),
            Err(segcache_core::Error::NotFound) => Arith::NotFound,
            Err(segcache_core::Error::NotNumeric) => Arith::NotNumeric,
            Err(_) => Arith::Failed,
        }
    };
    let Counted { n: value, cas } = match r {
        Arith::Value(counted) => counted,
        Arith::NotFound if exptime != NO_CREATE => {
            let mut digits = itoa::Buffer::new();
            let initial_value = digits.format(initial).as_bytes();
            let stored = match Expiry::from_exptime(i64::from(exptime), cache.now()).ttl() {
                Some(ttl) => cache.store_with(key, initial_value, 0, ttl, StoreMode::Add, StoreOptions::default()).ok(),
                // Expired on arrival: created and gone at once, with no CAS value.
                None => (!cache.contains(key)).then_some(u64::MAX),
            };
            match stored {
                Some(cas) => Counted { n: initial, cas },
                None => return put_error(out, h, Status::NotStored),
            }
        }
        Arith::NotFound => return put_error(out, h, Status::KeyNotFound),
        Arith::NotNumeric => return put_error(out, h, Status::DeltaBadValue),
        Arith::Failed => return put_error(out, h, Status::NoMemory),
    };
    if !quiet {
        put_response(out, h.opcode, Status::Success, h.opaque, cas, &[], &[], &value.to_be_bytes());
    }
}

/// STAT: one response per figure (its name as the key, its value as the value), the text
/// protocol's `stats [group]` figures, then an empty response; `reset` answers the empty one
/// alone; an unknown group is `KEY_ENOENT`. `detail on|off|dump` as memcached's
/// `process_bin_stat`: matched by prefix, the dump as one figure named `detailed`.
pub(super) fn stat(h: &Header, group: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    if let Some(sub) = group.strip_prefix(b"detail") {
        let watchers = &ctx.shared.watchers;
        if sub.starts_with(b" dump") {
            let mut dump = Vec::new();
            watchers.detail_dump(&mut dump);
            put_response(out, op::STAT, Status::Success, h.opaque, 0, &[], b"detailed", &dump);
        } else if sub.starts_with(b" on") {
            watchers.set_detail(true);
        } else if sub.starts_with(b" off") {
            watchers.set_detail(false);
        } else {
            return put_error(out, h, Status::KeyNotFound);
        }
        return put_response(out, op::STAT, Status::Success, h.opaque, 0, &[], &[], &[]);
    }
    let mut lines = Vec::new();
    let arg = (!group.is_empty()).then_some(group);
    if !write_stats(&mut lines, ctx, arg) {
        return put_error(out, h, Status::KeyNotFound);
    }
    for line in lines.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(stat) = line.strip_prefix(b"STAT ") else { continue };
        let space = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
        let (name, value) = (&stat[..space], stat.get(space + 1..).unwrap_or(&[]));
        put_response(out, op::STAT, Status::Success, h.opaque, 0, &[], name, value);
    }
    put_response(out, op::STAT, Status::Success, h.opaque, 0, &[], &[], &[]);
}
