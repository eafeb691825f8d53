//! memcached's operator commands: `stats cachedump`, `stats detail`,
//! `lru_crawler metadump|mgdump|crawl`, `watch`, `shutdown` and `cache_memlimit`, with
//! memcached's replies.
//!
//! segcache has no slab classes: every item is in class 1, the one class `stats items` lists
//! (so that php's `getAllKeys()`, which asks `stats items` for the classes and then
//! `stats cachedump` for each, finds every key). Key dumps walk the engine's hash table with its
//! cursor (`SharedCache::scan_with`), a step at a time, so writers are held up only briefly.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use segcache_core::{record_size, Item};

use crate::observe::scan::{each_item, SCAN_STEP};
use crate::observe::watch::{uriencode, ConnEntry, DumpJob, EVICTIONS};
use crate::protocol::{put_u64, reply, Admin, Detail};
use crate::state::{Ctx, OUT_HIGH_WATER};

/// memcached stops a cachedump at 2 MB of reply.
const CACHEDUMP_LIMIT: usize = 2 << 20;

/// What the connection does after an operator command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Continue,
    /// Close once the replies are sent (`shutdown`).
    Close,
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

/// Runs an operator command, appending its reply to `out`.
pub fn execute(cmd: Admin<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> After {
    if let Some(refusal) = refused(&cmd, ctx) {
        out.extend_from_slice(refusal);
        return After::Continue;
    }
    let shared = ctx.shared;
    match cmd {
        Admin::CacheDump { class, limit } => cachedump(class, limit, out, ctx),
        Admin::Detail(Detail::On) => {
            shared.watchers.set_detail(true);
            out.extend_from_slice(reply::OK);
        }
        Admin::Detail(Detail::Off) => {
            shared.watchers.set_detail(false);
            out.extend_from_slice(reply::OK);
        }
        Admin::Detail(Detail::Dump) => shared.watchers.detail_dump(out),
        Admin::Dump { mg, classes } => match dump_classes(classes) {
            None => out.extend_from_slice(b"BADCLASS invalid class id\r\n"),
            Some(ours) => dump(mg, ours, out, ctx),
        },
        Admin::Crawl { classes } => match dump_classes(classes) {
            None => out.extend_from_slice(b"BADCLASS invalid class id\r\n"),
            Some(_) => {
                shared.cache.expire();
                out.extend_from_slice(reply::OK);
            }
        },
        Admin::CrawlerTune => out.extend_from_slice(reply::OK),
        Admin::Watch { streams } => match ctx.conn {
            Some(conn) => {
                if streams & EVICTIONS != 0 {
                    shared.log_evictions();
                }
                conn.watch.store(streams, Relaxed);
                out.extend_from_slice(reply::OK);
            }
            None => out.extend_from_slice(b"ERROR watch needs a client connection\r\n"),
        },
        Admin::Shutdown { mode_ok } => {
            if !shared.settings.shutdown_command {
                out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
            } else if !mode_ok {
                out.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n");
            } else {
                log::warn!("shutdown command: stopping gracefully");
                shared.stop();
                return After::Close;
            }
        }
        // memcached's replies: OK, or the error of the load that failed (the old certificates
        // stay in use).
        Admin::RefreshCerts => match shared.tls.get() {
            None => out.extend_from_slice(b"Error TLS not enabled\r\n"),
            Some(tls) => match tls.reload() {
                Ok(()) => out.extend_from_slice(reply::OK),
                Err(e) => {
                    log::warn!("refresh_certs: {e}");
                    out.extend_from_slice(e.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
            },
        },
        Admin::MemLimit { mb, noreply } => {
            let mark = out.len();
            memlimit(mb, out, ctx);
            if noreply {
                out.truncate(mark);
            }
        }
    }
    After::Continue
}

/// The class list of `lru_crawler metadump|mgdump|crawl`: `Some(true)` when it names our one
/// class (`all`, `hash`, or a list with 1), `Some(false)` for valid classes that are empty,
/// `None` for a bad list (memcached: ids 1 to 63).
fn dump_classes(classes: &[u8]) -> Option<bool> {
    if classes == b"all" || classes == b"hash" {
        return Some(true);
    }
    let mut ours = false;
    for id in classes.split(|&b| b == b',') {
        let id = std::str::from_utf8(id).ok()?.parse::<u32>().ok()?;
        if !(1..64).contains(&id) {
            return None;
        }
        ours |= id == 1;
    }
    Some(ours)
}

/// `stats cachedump <class> <limit>`: `ITEM <key> [<bytes> b; <expiry> s]` lines (expiry as a
/// Unix time, 0 for never), then END; memcached's limits: class ids below 64, 2 MB of reply.
fn cachedump(class: u32, limit: u32, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    if class >= 64 {
        out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
        return;
    }
    if class == 1 {
        let (start, mut n) = (out.len(), 0u32);
        each_item(ctx, |item| {
            let before = out.len();
            out.extend_from_slice(b"ITEM ");
            out.extend_from_slice(item.key());
            out.extend_from_slice(b" [");
            put_u64(out, item.value().len() as u64);
            out.extend_from_slice(b" b; ");
            put_u64(out, u64::from(item.expire_at().unwrap_or(0)));
            out.extend_from_slice(b" s]\r\n");
            if out.len() - start + 6 > CACHEDUMP_LIMIT {
                out.truncate(before);
                return false;
            }
            n += 1;
            limit == 0 || n < limit
        });
    }
    out.extend_from_slice(reply::END);
}

/// `lru_crawler metadump|mgdump`: the first reply buffer's worth of lines now; on a client
/// connection, the rest is left to its worker (`dump_more`), which writes it as the client reads,
/// before it runs the next request. The session takes no further request once the buffer holds
/// `OUT_HIGH_WATER` bytes, so the dump's lines stay in order.
fn dump(mg: bool, ours: bool, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    if mg {
        // As the newest memcached (1.6.18 has no mgdump): `OK` first.
        out.extend_from_slice(reply::OK);
    }
    let mut job = DumpJob { mg, cursor: 0 };
    if !ours {
        finish_dump(&job, out);
        return;
    }
    match ctx.conn {
        Some(conn) => {
            if !dump_step(&mut job, out, ctx, OUT_HIGH_WATER) {
                conn.park_dump(job);
            }
        }
        None => while !dump_step(&mut job, out, ctx, usize::MAX) {},
    }
}

/// Goes on with the key dump parked on `conn`, until `out` holds `until` bytes or it is done.
pub fn dump_more(conn: &ConnEntry, out: &mut Vec<u8>, ctx: &Ctx<'_>, until: usize) {
    let mut slot = conn.dump.lock().unwrap_or_else(|e| e.into_inner());
    let done = match slot.as_mut() {
        Some(job) => dump_step(job, out, ctx, until),
        None => true,
    };
    if done {
        *slot = None;
        conn.dumping.store(false, Relaxed);
    }
}

/// Writes dump lines from `job`'s cursor on, a step of the engine's cursor at a time, until
/// `out` holds `until` bytes; `true` once the dump is complete (its last line written).
fn dump_step(job: &mut DumpJob, out: &mut Vec<u8>, ctx: &Ctx<'_>, until: usize) -> bool {
    let cache = &ctx.shared.cache;
    let now = cache.now();
    let mut line = String::with_capacity(96);
    loop {
        job.cursor = cache.scan_with(job.cursor, SCAN_STEP, |item| {
            if job.mg {
                mg_line(&item, out);
            } else {
                meta_line(&item, now, &mut line, out);
            }
        });
        if job.cursor == 0 {
            finish_dump(job, out);
            return true;
        }
        if out.len() >= until {
            return false;
        }
    }
}

fn finish_dump(job: &DumpJob, out: &mut Vec<u8>) {
    out.extend_from_slice(if job.mg { b"EN\r\n" } else { reply::END });
}

/// memcached 1.6.18's `metadump` line: `la` is the Unix time of the last store or read (as the
/// engine keeps it: see `Item::last_access`), `fetch` whether a read came since the store.
fn meta_line(item: &Item<'_>, now: u32, line: &mut String, out: &mut Vec<u8>) {
    out.extend_from_slice(b"key=");
    uriencode(out, item.key());
    line.clear();
    let exp = item.expire_at().map_or(-1, i64::from);
    let la = u64::from(now).saturating_sub(item.last_access().as_secs());
    let fetch = if item.fetched() { "yes" } else { "no" };
    let _ = writeln!(line, " exp={exp} la={la} cas={} fetch={fetch} cls=1 size={}", item.cas(), record_size(item));
    out.extend_from_slice(line.as_bytes());
}

/// The newest memcached's `mgdump` line, `mg <key>`, the key as stored (memcached base64-encodes
/// only keys stored through a base64 key, a bit this engine does not keep).
fn mg_line(item: &Item<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"mg ");
    out.extend_from_slice(item.key());
    out.extend_from_slice(reply::CRLF);
}

/// `cache_memlimit <mb>`: the limit moves within the heap laid out at start (`-m`, or the room
/// `--max-memory-limit` gives); the answers are memcached's, `MEMLIMIT_ADJUST_FAILED` past that.
fn memlimit(mb: u32, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let line: &[u8] = if mb < 8 {
        b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
    } else if mb > 1_000_000_000 {
        b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n"
    } else if fits_heap((mb as usize) << 20, ctx) {
        ctx.shared.memory_limit.store(u64::from(mb) << 20, Relaxed);
        reply::OK
    } else {
        b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
    };
    out.extend_from_slice(line);
}

/// Sets the engine's memory limit to `bytes` if the heap allows. The heap is laid out at start
/// (`--max-memory-limit`, else `-m`, less the hash tables): a limit below it caps the segments in
/// use (evicting as new items need room); one up to it uses the whole heap; more cannot be had.
fn fits_heap(bytes: usize, ctx: &Ctx<'_>) -> bool {
    let cache = &ctx.shared.cache;
    let heap = cache.stats().heap_bytes as usize;
    bytes <= ctx.shared.settings.engine.memory_bytes.max(heap) && cache.set_memory_limit(bytes.min(heap)).is_ok()
}
