//! memcached's operator commands through a `Session` over a real engine, without sockets (the
//! socket-level checks, against memcached itself, are in tests/server/test_operator.py).

mod rig;

use rig::{Rig, T0};
use segcache_server::{Ctx, Settings};

/// A cache of 16 MiB in 256 KiB segments, serving with `settings`.
fn rig_with(settings: Settings) -> Rig {
    Rig::with(16 << 20, 256 << 10, settings)
}

fn rig() -> Rig {
    rig_with(Settings { threads: 1, ..Settings::default() })
}

#[test]
fn cachedump_lists_class_one() {
    let mut r = rig();
    r.run("set a 1 0 3 noreply\r\nabc\r\nset b 0 100 1 noreply\r\nx\r\n");
    let dump = r.run("stats cachedump 1 0\r\n");
    let mut lines: Vec<&str> = dump.split("\r\n").collect();
    assert_eq!(lines.pop(), Some(""));
    assert_eq!(lines.pop(), Some("END"));
    lines.sort();
    assert_eq!(lines[0], "ITEM a [3 b; 0 s]");
    // The expiry is absolute: the TTL bucket's, at most a bucket's width early.
    let exp: u32 = lines[1].strip_prefix("ITEM b [1 b; ").unwrap().strip_suffix(" s]").unwrap().parse().unwrap();
    assert!((T0 + 90..=T0 + 100).contains(&exp), "{exp}");
    assert_eq!(r.run("stats cachedump 1 1\r\n").matches("ITEM ").count(), 1);
    assert_eq!(r.run("stats cachedump 2 0\r\n"), "END\r\n");
    assert_eq!(r.run("stats cachedump 64 0\r\n"), "CLIENT_ERROR Illegal slab id\r\n");
    assert!(r.run("stats items\r\n").contains("STAT items:1:number 2\r\n"));
    // An expired item is not listed.
    r.clock.advance(200);
    assert_eq!(r.run("stats cachedump 1 0\r\n"), "ITEM a [3 b; 0 s]\r\nEND\r\n");
}

#[test]
fn dumps_without_a_connection_come_whole() {
    let mut r = rig();
    let n = 20_000;
    let mut load = String::new();
    for i in 0..n {
        load.push_str(&format!("set key:{i} 0 0 1 noreply\r\nx\r\n"));
    }
    r.run(&load);
    // Far more than one reply buffer (256 KiB): without a socket it is written at once.
    let meta = r.run("lru_crawler metadump all\r\n");
    assert!(meta.len() > 256 << 10);
    assert!(meta.ends_with("\nEND\r\n"));
    assert_eq!(meta.matches(" fetch=no cls=1 size=").count(), n);
    assert!(meta.starts_with("key=key%3A"));
    let mg = r.run("lru_crawler mgdump hash\r\n");
    assert!(mg.starts_with("OK\r\nmg key:") && mg.ends_with("\r\nEN\r\n"));
    assert_eq!(mg.matches("mg ").count(), n);
    assert_eq!(r.run("lru_crawler metadump 2\r\n"), "END\r\n");
    assert_eq!(r.run("lru_crawler metadump 0\r\n"), "BADCLASS invalid class id\r\n");
}

#[test]
fn detail_sizes_memlimit_shutdown_watch() {
    let mut r = rig();
    assert_eq!(
        r.run("stats detail on\r\nset p:1 0 0 1\r\nx\r\nget p:1 p:2 q\r\ndelete p:1\r\nstats detail dump\r\n"),
        "OK\r\nSTORED\r\nVALUE p:1 0 1\r\nx\r\nEND\r\nDELETED\r\nPREFIX p get 2 hit 1 set 1 del 1\r\nEND\r\n"
    );
    assert_eq!(r.run("stats detail\r\n"), "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    assert_eq!(r.run("stats sizes\r\n"), "STAT sizes_status disabled\r\nEND\r\n");
    assert_eq!(
        r.run("set s 0 0 1\r\nx\r\nstats sizes_enable\r\nstats sizes\r\n"),
        "STORED\r\nSTAT sizes_status enabled\r\nSTAT 32 1\r\nEND\r\n"
    );
    assert_eq!(r.run("cache_memlimit 64\r\n"), "OK\r\n");
    // Below the heap: the engine caps the segments it holds, and `stats` reports the new limit.
    assert_eq!(r.run("cache_memlimit 8\r\n"), "OK\r\n");
    assert!(r.run("stats\r\n").contains("STAT limit_maxbytes 8388608\r\n"));
    // Whole segments per shard, never more than asked.
    let limit = r.shared.cache.memory_limit();
    assert!(limit <= 8 << 20 && limit < r.shared.cache.stats().heap_bytes as usize, "{limit}");
    assert_eq!(r.run("cache_memlimit 128\r\n"), "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n");
    assert_eq!(r.run("cache_memlimit 7\r\n"), "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n");
    assert_eq!(r.run("cache_memlimit 7 noreply\r\n"), "");
    assert_eq!(r.run("shutdown\r\n"), "ERROR: shutdown not enabled\r\n");
    assert!(!r.shared.is_stopping());
    // `watch` needs a socket to stream to.
    assert!(r.run("watch\r\n").starts_with("ERROR"));
    assert!(r.run("stats\r\n").contains("STAT implementation segcache\r\n"));
}

#[test]
fn shutdown_with_a_stops_the_server() {
    let mut r = rig_with(Settings { threads: 1, shutdown_command: true, ..Settings::default() });
    assert_eq!(r.run("shutdown now\r\n"), "CLIENT_ERROR invalid shutdown mode\r\n");
    assert!(!r.shared.is_stopping());
    let mut out = Vec::new();
    let ctx = Ctx::new(&r.shared, 0);
    let p = r.session.process(b"shutdown graceful\r\nversion\r\n", &mut out, &ctx);
    assert!(p.close && out.is_empty());
    assert!(r.shared.is_stopping());
}
