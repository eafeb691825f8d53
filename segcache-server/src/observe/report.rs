//! `stats` replies (memcached names and meanings), `stats sizes` and `stats conns` among them,
//! and the Prometheus text for `/metrics`.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::atomic::Ordering::Relaxed;

use segcache_core::{record_size, Figure, FigureKind};

use super::scan::each_item;
use crate::observe::stats::rusage;
use crate::protocol::reply;
use crate::state::{Ctx, Shared};

/// One `name value` pair of a report.
enum Val {
    U(u64),
    /// One of the engine's figures (kind and help for exporters).
    Figure(Figure),
    F(f64),
    S(String),
}

/// One `STAT name value` line.
type Row = (Cow<'static, str>, Val);

/// Rows with fixed names.
fn rows<const N: usize>(fixed: [(&'static str, Val); N]) -> impl Iterator<Item = Row> {
    fixed.into_iter().map(|(n, v)| (Cow::Borrowed(n), v))
}

/// The general `stats` figures, in memcached's order where memcached has them.
fn general(shared: &Shared) -> Vec<Row> {
    let t = shared.totals();
    let e = shared.cache.stats();
    let c = &shared.conns;
    let (user, sys) = rusage();
    let s = &shared.settings;
    let mut v: Vec<Row> = rows([
        ("pid", Val::U(u64::from(std::process::id()))),
        ("uptime", Val::U(shared.uptime())),
        ("time", Val::U(u64::from(shared.cache.now()))),
        ("version", Val::S(reply::VERSION.into())),
        ("pointer_size", Val::U(usize::BITS as u64)),
        ("rusage_user", Val::F(user)),
        ("rusage_system", Val::F(sys)),
        ("max_connections", Val::U(s.max_connections as u64)),
        ("curr_connections", Val::U(c.curr_connections.load(Ordering::Relaxed))),
        ("total_connections", Val::U(c.total_connections.load(Ordering::Relaxed))),
        ("rejected_connections", Val::U(c.rejected_connections.load(Ordering::Relaxed))),
        ("connection_structures", Val::U(c.curr_connections.load(Ordering::Relaxed))),
    ])
    .collect();
    for (n, x) in t.named() {
        if n == "bytes_read" && s.idle_timeout > 0 {
            // memcached shows it, before bytes_read, only with an idle timeout.
            v.push((Cow::Borrowed("idle_kicks"), Val::U(c.idle_kicks.load(Ordering::Relaxed))));
        }
        v.push((Cow::Borrowed(n), Val::U(x)));
        // memcached's place for these: misses that found the key expired or flushed.
        if n == "get_misses" {
            v.extend(rows([("get_expired", Val::U(e.get_expired)), ("get_flushed", Val::U(e.get_flushed))]));
            // And, with a flash tier, extstore's reads: those that went to flash, and those whose
            // entry failed its checksum (a miss).
            if s.engine.tier.is_some() {
                v.extend(rows([
                    ("get_extstore", Val::U(e.flash_hits + e.flash_bad_reads)),
                    ("badcrc_from_extstore", Val::U(e.flash_bad_reads)),
                    ("recache_from_extstore", Val::U(e.flash_promoted)),
                ]));
            }
        }
    }
    let (hash_bytes, hash_power) = shared.cache.table_size();
    let w = &shared.watchers;
    v.extend(rows([
        ("limit_maxbytes", Val::U(shared.memory_limit.load(Ordering::Relaxed))),
        ("accepting_conns", Val::U(u64::from(!shared.is_stopping()))),
        ("listen_disabled_num", Val::U(0)),
        ("time_in_listen_disabled_us", Val::U(0)),
        ("threads", Val::U(s.threads as u64)),
        ("conn_yields", Val::U(c.conn_yields.load(Ordering::Relaxed))),
        ("hash_power_level", Val::U(u64::from(hash_power))),
        ("hash_bytes", Val::U(hash_bytes)),
        ("hash_is_expanding", Val::U(0)),
        ("log_watcher_skipped", Val::U(w.skipped.load(Ordering::Relaxed))),
        ("log_watcher_sent", Val::U(w.sent.load(Ordering::Relaxed))),
        ("log_watchers", Val::U(w.count() as u64)),
        // memcached's names for the engine's figures.
        ("bytes", Val::U(e.bytes)),
        ("curr_items", Val::U(e.items)),
        ("expired_unfetched", Val::U(e.expired_unfetched)),
        ("evicted_unfetched", Val::U(e.evicted_unfetched)),
        ("evictions", Val::U(e.evicted_items)),
        ("reclaimed", Val::U(e.expired_items)),
    ]));
    if let Some(limit) = s.tier_size(&s.builder()) {
        // extstore's figures where the flash tier's mean the same: items written and read back,
        // items it holds, segments (extstore's pages) freed for reuse, and its size.
        v.extend(rows([
            ("extstore_page_reclaims", Val::U(e.flash_reclaimed_segments)),
            ("extstore_objects_read", Val::U(e.flash_hits)),
            ("extstore_objects_written", Val::U(e.flash_demoted)),
            ("extstore_objects_used", Val::U(e.flash_items)),
            ("extstore_bytes_written", Val::U(e.flash_bytes_written)),
            ("extstore_bytes_read", Val::U(e.flash_bytes_read)),
            ("extstore_limit_maxbytes", Val::U(limit)),
        ]));
    }
    v.extend(rows([
        ("implementation", Val::S("segcache".into())),
        ("segcache_version", Val::S(env!("CARGO_PKG_VERSION").into())),
    ]));
    if let Some(tls) = shared.tls.get() {
        // memcached's TLS counters, shown under -Z only.
        v.extend(rows([
            ("ssl_handshake_errors", Val::U(tls.handshake_errors.load(Ordering::Relaxed))),
            ("ssl_proto_errors", Val::U(tls.proto_errors.load(Ordering::Relaxed))),
            ("time_since_server_cert_refresh", Val::U(tls.since_refresh())),
        ]));
    }
    // Every engine figure under its own name (segcache's), typed by the engine's list.
    v.extend(e.figures().map(|f| (Cow::Owned(format!("engine_{}", f.name)), Val::Figure(f))));
    v
}

fn settings(shared: &Shared) -> impl Iterator<Item = Row> {
    let s = &shared.settings;
    rows([
        ("maxbytes", Val::U(shared.memory_limit.load(Ordering::Relaxed))),
        ("maxconns", Val::U(s.max_connections as u64)),
        ("tcpport", Val::U(u64::from(s.port))),
        ("udpport", Val::U(0)),
        ("inter", Val::S(s.listen.clone())),
        ("verbosity", Val::U(u64::from(shared.verbosity.load(Ordering::Relaxed)))),
        ("num_threads", Val::U(s.threads as u64)),
        ("item_size_max", Val::U(s.max_item_size as u64)),
        ("evictions", Val::S(if s.engine.eviction == segcache_core::Policy::None { "off" } else { "on" }.into())),
        ("cas_enabled", Val::S("yes".into())),
        (
            "binding_protocol",
            Val::S(
                match s.protocol {
                    crate::config::Protocol::Auto => "auto-negotiate",
                    crate::config::Protocol::Ascii => "ascii",
                    crate::config::Protocol::Binary => "binary",
                }
                .into(),
            ),
        ),
        // As memcached: -S is shown even where -Y made the server speak text only.
        ("auth_enabled_sasl", Val::S(if s.sasl { "yes" } else { "no" }.into())),
        ("auth_enabled_ascii", Val::S(s.auth_file.as_ref().map_or("no".into(), |p| p.display().to_string()))),
        ("domain_socket", Val::S(s.unix_socket.as_ref().map_or("NULL".into(), |p| p.display().to_string()))),
        ("umask", Val::S(format!("{:o}", s.unix_mask))),
        ("tcp_backlog", Val::U(s.backlog as u64)),
        ("reqs_per_event", Val::U(s.reqs_per_event as u64)),
        ("idle_timeout", Val::U(u64::from(s.idle_timeout))),
        ("eviction_policy", Val::S(s.engine.eviction.name().into())),
        ("segment_size", Val::U(s.engine.segment_size as u64)),
        ("shards", Val::U(shared.cache.shard_count() as u64)),
        ("pin_threads", Val::S(if s.pin { "yes" } else { "no" }.into())),
        ("admin_port", Val::U(s.admin_port.map_or(0, u64::from))),
        ("admin_listen", Val::S(s.admin_listen.clone())),
        ("busy_poll_us", Val::U(u64::from(s.busy_poll_us))),
        ("klog_file", Val::S(s.klog.as_ref().map_or("none".into(), |k| k.path.display().to_string()))),
        ("klog_sample", Val::U(s.klog.as_ref().map_or(0, |k| k.sample))),
        ("hotkey_sample", Val::U(s.hotkeys.sample)),
        ("hotkey_top", Val::U(s.hotkeys.top as u64)),
        ("persistence_path", Val::S(s.engine.path.as_ref().map_or("none".into(), |p| p.display().to_string()))),
        ("shutdown_command", Val::S(if s.shutdown_command { "yes" } else { "no" }.into())),
        ("detail_enabled", Val::S(if shared.watchers.detail_enabled() { "yes" } else { "no" }.into())),
        ("flush_enabled", Val::S(if s.flush_enabled { "yes" } else { "no" }.into())),
        ("dump_enabled", Val::S(if s.dump_enabled { "yes" } else { "no" }.into())),
        ("watch_enabled", Val::S(if s.watch_enabled { "yes" } else { "no" }.into())),
        ("lru_crawler", Val::S("yes".into())),
        ("track_sizes", Val::S(if shared.sizes_enabled.load(Ordering::Relaxed) { "yes" } else { "no" }.into())),
    ])
    .chain(tls_settings(s.tls.as_ref()))
}

/// memcached's `ssl_*` settings rows.
fn tls_settings(t: Option<&crate::tls::TlsSettings>) -> impl Iterator<Item = Row> {
    let path = |p: Option<&std::path::PathBuf>| Val::S(p.map_or("NULL".into(), |p| p.display().to_string()));
    rows([
        ("ssl_enabled", Val::S(if t.is_some() { "yes" } else { "no" }.into())),
        ("ssl_chain_cert", path(t.map(|t| &t.chain_cert))),
        ("ssl_key", path(t.and_then(|t| t.key.as_ref().or(Some(&t.chain_cert))))),
        ("ssl_verify_mode", Val::U(t.map_or(0, |t| u64::from(t.verify_mode.number())))),
        ("ssl_ca_cert", path(t.and_then(|t| t.ca_cert.as_ref()))),
        ("ssl_min_version", Val::S(t.map_or("tlsv1.2", |t| t.min_version.name()).into())),
    ])
}

/// memcached reports per slab class; segcache has none, so everything is class 1 (the class
/// that `stats cachedump 1` and `lru_crawler metadump 1` dump).
fn items(shared: &Shared) -> impl Iterator<Item = Row> {
    let e = shared.cache.stats();
    rows([
        ("items:1:number", Val::U(e.items)),
        ("items:1:number_hot", Val::U(0)),
        ("items:1:number_warm", Val::U(0)),
        ("items:1:number_cold", Val::U(e.items)),
        ("items:1:mem_requested", Val::U(e.bytes)),
        ("items:1:evicted", Val::U(e.evicted_items)),
        ("items:1:outofmemory", Val::U(shared.totals().store_no_memory)),
        ("items:1:reclaimed", Val::U(e.expired_items)),
        ("items:1:expired_unfetched", Val::U(e.expired_unfetched)),
        ("items:1:evicted_unfetched", Val::U(e.evicted_unfetched)),
    ])
}

fn put(out: &mut Vec<u8>, rows: impl IntoIterator<Item = Row>) {
    let mut line = String::new();
    for (name, v) in rows {
        line.clear();
        let _ = match v {
            Val::U(x) | Val::Figure(Figure { value: x, .. }) => write!(line, "STAT {name} {x}\r\n"),
            Val::F(x) => write!(line, "STAT {name} {x:.6}\r\n"),
            Val::S(x) => write!(line, "STAT {name} {x}\r\n"),
        };
        out.extend_from_slice(line.as_bytes());
    }
    out.extend_from_slice(reply::END);
}

/// `stats sizes`: with `stats sizes_enable` sent, a histogram of item sizes by 32-byte step
/// (taken with a key scan, as memcached's is kept as items come and go); otherwise memcached's
/// answer for a server not tracking sizes.
fn sizes(out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    if !ctx.shared.sizes_enabled.load(Relaxed) {
        out.extend_from_slice(b"STAT sizes_status disabled\r\nEND\r\n");
        return;
    }
    let mut hist = std::collections::BTreeMap::<usize, u64>::new();
    each_item(ctx, |item| {
        *hist.entry(record_size(item).div_ceil(32) * 32).or_default() += 1;
        true
    });
    let mut s = String::new();
    for (size, n) in hist {
        let _ = write!(s, "STAT {size} {n}\r\n");
    }
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(reply::END);
}

/// `stats conns`: memcached's lines for the listening socket and each client connection
/// (the one asking is parsing a command; the others wait for one).
fn conns(out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let shared = ctx.shared;
    let up = shared.uptime();
    let mut s = String::new();
    // With -s the server listens on the UNIX socket only: memcached's spellings for it (a
    // client's own address is `?:<AF 0>` there).
    let unix = shared.settings.unix_socket.as_ref().map(|p| format!("unix:{}", p.display()));
    if let Some((fd, addr)) = shared.watchers.listener() {
        match &unix {
            Some(u) => _ = write!(s, "STAT {fd}:addr {u}\r\n"),
            None => _ = write!(s, "STAT {fd}:addr tcp:{addr}\r\n"),
        }
        let _ = write!(s, "STAT {fd}:state conn_listening\r\nSTAT {fd}:secs_since_last_cmd {up}\r\n");
    }
    for c in shared.watchers.conns() {
        match &unix {
            Some(u) => _ = write!(s, "STAT {0}:addr ?:<AF 0>\r\nSTAT {0}:listen_addr {u}\r\n", c.fd),
            None => _ = write!(s, "STAT {0}:addr tcp:{1}\r\nSTAT {0}:listen_addr tcp:{2}\r\n", c.fd, c.peer, c.local),
        }
        let state = if ctx.conn.is_some_and(|m| m.fd == c.fd) {
            "conn_parse_cmd"
        } else if c.watch.load(Relaxed) != 0 {
            "conn_watch"
        } else {
            "conn_waiting"
        };
        let idle = up.saturating_sub(c.last_cmd.load(Relaxed));
        let _ = write!(s, "STAT {0}:state {state}\r\nSTAT {0}:secs_since_last_cmd {idle}\r\n", c.fd);
    }
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(reply::END);
}

/// Writes the reply to `stats [arg]`; `false` for an unknown argument.
pub fn write_stats(out: &mut Vec<u8>, ctx: &Ctx<'_>, arg: Option<&[u8]>) -> bool {
    let shared = ctx.shared;
    match arg {
        None => put(out, general(shared)),
        Some(b"settings") => put(out, settings(shared)),
        Some(b"items") => put(out, items(shared)),
        Some(b"slabs") => put(
            out,
            rows([("active_slabs", Val::U(1)), ("total_malloced", Val::U(shared.settings.engine.memory_bytes as u64))]),
        ),
        Some(b"sizes") => sizes(out, ctx),
        Some(b"sizes_enable") => {
            shared.sizes_enabled.store(true, Ordering::Relaxed);
            out.extend_from_slice(b"STAT sizes_status enabled\r\n");
        }
        Some(b"sizes_disable") => {
            shared.sizes_enabled.store(false, Ordering::Relaxed);
            out.extend_from_slice(b"STAT sizes_status disabled\r\n");
        }
        Some(b"conns") => conns(out, ctx),
        Some(b"hotkeys") => crate::observe::write_hotkeys(out, &ctx.shared.observe),
        // memcached's answers to these without their arguments.
        Some(b"cachedump") => out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n"),
        Some(b"detail") => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
        Some(b"reset") => {
            for w in shared.workers.iter() {
                w.reset();
            }
            shared.watchers.detail_clear();
            out.extend_from_slice(reply::RESET);
        }
        _ => return false,
    }
    true
}

/// The Prometheus text exposition of every general figure, as `segcache_<name>`: the engine's
/// typed and described by its list, the server's typed by memcached's naming.
pub fn prometheus(shared: &Shared) -> String {
    let mut s = String::new();
    for (name, v) in general(shared) {
        let (x, kind) = match v {
            Val::U(x) => (x as f64, server_kind(&name)),
            Val::F(x) => (x, server_kind(&name)),
            Val::Figure(f) => {
                let _ = writeln!(s, "# HELP segcache_{name} {}", f.help);
                (f.value as f64, if f.kind == FigureKind::Counter { "counter" } else { "gauge" })
            }
            Val::S(_) => continue,
        };
        let _ = writeln!(s, "# TYPE segcache_{name} {kind}\nsegcache_{name} {x}");
    }
    crate::observe::prometheus(&mut s, &shared.observe);
    s
}

/// The Prometheus type of one of the server's own figures.
fn server_kind(name: &str) -> &'static str {
    let counter = name.starts_with("cmd_")
        || name.ends_with("_hits")
        || name.ends_with("_misses")
        || name.starts_with("bytes_")
        || name.starts_with("total_")
        || name.starts_with("rejected_")
        || name.starts_with("rusage_")
        || matches!(name, "evictions" | "reclaimed" | "cas_badval");
    if counter {
        "counter"
    } else {
        "gauge"
    }
}
