//! `stats` replies (memcached names and meanings) and the Prometheus text for `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::protocol::reply;
use crate::state::{Ctx, Shared};
use crate::stats::rusage;

/// One `name value` pair of a report.
enum Val {
    U(u64),
    F(f64),
    S(String),
}

/// The general `stats` figures, in memcached's order where memcached has them.
fn general(shared: &Shared) -> Vec<(&'static str, Val)> {
    let t = shared.totals();
    let e = shared.cache.stats();
    let c = &shared.conns;
    let (user, sys) = rusage();
    let s = &shared.settings;
    let mut v: Vec<(&'static str, Val)> = vec![
        ("pid", Val::U(u64::from(std::process::id()))),
        ("uptime", Val::U(shared.uptime())),
        ("time", Val::U(u64::from(shared.cache.now()))),
        ("version", Val::S(format!("1.6.0-segcache-{}", env!("CARGO_PKG_VERSION")))),
        ("pointer_size", Val::U(usize::BITS as u64)),
        ("rusage_user", Val::F(user)),
        ("rusage_system", Val::F(sys)),
        ("max_connections", Val::U(s.max_connections as u64)),
        ("curr_connections", Val::U(c.curr_connections.load(Ordering::Relaxed))),
        ("total_connections", Val::U(c.total_connections.load(Ordering::Relaxed))),
        ("rejected_connections", Val::U(c.rejected_connections.load(Ordering::Relaxed))),
        ("connection_structures", Val::U(c.curr_connections.load(Ordering::Relaxed))),
    ];
    v.extend(t.named().map(|(n, x)| (n, Val::U(x))));
    v.extend([
        ("limit_maxbytes", Val::U(s.memory_bytes as u64)),
        ("threads", Val::U(s.threads as u64)),
        ("bytes", Val::U(e.bytes)),
        ("curr_items", Val::U(e.items)),
        ("total_items", Val::U(e.sets)),
        ("evictions", Val::U(e.evicted_items)),
        ("reclaimed", Val::U(e.expired_items)),
        // segcache's own figures.
        ("evicted_segments", Val::U(e.evicted_segments)),
        ("expired_segments", Val::U(e.expired_segments)),
        ("merged_items", Val::U(e.merged_items)),
        ("segments_total", Val::U(e.segments_total)),
        ("segments_free", Val::U(e.segments_free)),
        ("segment_size", Val::U(e.segment_size)),
        ("heap_bytes", Val::U(e.heap_bytes)),
        ("engine_shards", Val::U(e.shards)),
        ("engine_flushes", Val::U(e.flushes)),
    ]);
    v
}

fn settings(shared: &Shared) -> Vec<(&'static str, Val)> {
    let s = &shared.settings;
    vec![
        ("maxbytes", Val::U(s.memory_bytes as u64)),
        ("maxconns", Val::U(s.max_connections as u64)),
        ("tcpport", Val::U(u64::from(s.port))),
        ("udpport", Val::U(0)),
        ("inter", Val::S(s.listen.clone())),
        ("verbosity", Val::U(u64::from(shared.verbosity.load(Ordering::Relaxed)))),
        ("num_threads", Val::U(s.threads as u64)),
        ("item_size_max", Val::U(s.max_item_size as u64)),
        ("evictions", Val::S(if s.eviction == segcache_core::Policy::None { "off" } else { "on" }.into())),
        ("cas_enabled", Val::S("yes".into())),
        ("binding_protocol", Val::S("auto-negotiate".into())),
        ("eviction_policy", Val::S(s.eviction.name().into())),
        ("segment_size", Val::U(s.segment_size as u64)),
        ("shards", Val::U(shared.cache.shard_count() as u64)),
        ("pin_threads", Val::S(if s.pin { "yes" } else { "no" }.into())),
        ("admin_port", Val::U(s.admin_port.map_or(0, u64::from))),
        ("persistence_path", Val::S(s.path.as_ref().map_or("none".into(), |p| p.display().to_string()))),
    ]
}

/// memcached reports per slab class; segcache has none, so everything is class 1.
fn items(shared: &Shared) -> Vec<(&'static str, Val)> {
    let e = shared.cache.stats();
    vec![
        ("items:1:number", Val::U(e.items)),
        ("items:1:evicted", Val::U(e.evicted_items)),
        ("items:1:reclaimed", Val::U(e.expired_items)),
        ("items:1:outofmemory", Val::U(shared.totals().store_no_memory)),
    ]
}

fn put(out: &mut Vec<u8>, rows: Vec<(&'static str, Val)>) {
    let mut line = String::new();
    for (name, v) in rows {
        line.clear();
        let _ = match v {
            Val::U(x) => write!(line, "STAT {name} {x}\r\n"),
            Val::F(x) => write!(line, "STAT {name} {x:.6}\r\n"),
            Val::S(x) => write!(line, "STAT {name} {x}\r\n"),
        };
        out.extend_from_slice(line.as_bytes());
    }
    out.extend_from_slice(reply::END);
}

/// Writes the reply to `stats [arg]`; `false` for an unknown argument.
pub fn write_stats(out: &mut Vec<u8>, ctx: &Ctx<'_>, arg: Option<&[u8]>) -> bool {
    let shared = ctx.shared;
    match arg {
        None => put(out, general(shared)),
        Some(b"settings") => put(out, settings(shared)),
        Some(b"items") => put(out, items(shared)),
        Some(b"slabs") => {
            put(out, vec![("active_slabs", Val::U(1)), ("total_malloced", Val::U(shared.settings.memory_bytes as u64))])
        }
        Some(b"reset") => {
            for w in shared.workers.iter() {
                w.reset();
            }
            out.extend_from_slice(reply::RESET);
        }
        _ => return false,
    }
    true
}

/// The Prometheus text exposition of every general figure, as `segcache_<name>`.
pub fn prometheus(shared: &Shared) -> String {
    let mut s = String::new();
    for (name, v) in general(shared) {
        let x = match v {
            Val::U(x) => x as f64,
            Val::F(x) => x,
            Val::S(_) => continue,
        };
        let kind = if name.starts_with("cmd_")
            || name.ends_with("_hits")
            || name.ends_with("_misses")
            || name.starts_with("bytes_")
            || name.starts_with("total_")
            || name.starts_with("rejected_")
            || name.starts_with("rusage_")
            || matches!(
                name,
                "evictions" | "reclaimed" | "cas_badval" | "evicted_segments" | "expired_segments" | "merged_items"
            ) {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(s, "# TYPE segcache_{name} {kind}\nsegcache_{name} {x}");
    }
    s
}
