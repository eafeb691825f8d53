//! The checked-in header must be exactly what cbindgen generates from the current source, so
//! that C users never compile against a stale declaration.
//! `SEGCACHE_BLESS=1 cargo test -p segcache-ffi --test header` rewrites it.

use std::path::PathBuf;

fn generate() -> String {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("header is UTF-8")
}

#[test]
fn checked_in_header_is_fresh() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bindings/c/include/segcache.h");
    let fresh = generate();
    if std::env::var_os("SEGCACHE_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write header");
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current != fresh {
        let line = current.lines().zip(fresh.lines()).position(|(a, b)| a != b).map_or_else(
            || format!("lengths differ ({} vs {} lines)", current.lines().count(), fresh.lines().count()),
            |i| format!("first difference at line {}", i + 1),
        );
        panic!(
            "{} is stale ({line}); regenerate it with `make -C bindings/c header` \
             (SEGCACHE_BLESS=1 cargo test -p segcache-ffi --test header) and check it in",
            path.display()
        );
    }
}

#[test]
fn header_declares_every_exported_function() {
    let fresh = generate();
    for name in [
        "segcache_open",
        "segcache_close",
        "segcache_config_default",
        "segcache_get",
        "segcache_get_with",
        "segcache_get_many",
        "segcache_scan",
        "segcache_set",
        "segcache_add",
        "segcache_replace",
        "segcache_cas",
        "segcache_append",
        "segcache_prepend",
        "segcache_incr",
        "segcache_decr",
        "segcache_delete",
        "segcache_touch",
        "segcache_flush",
        "segcache_flush_after",
        "segcache_expire",
        "segcache_stats",
        "segcache_strerror",
        "segcache_last_error",
        "segcache_debug_panic",
        "segcache_version",
    ] {
        assert!(fresh.contains(&format!("{name}(")), "header lacks {name}");
    }
    assert!(fresh.contains("SEGCACHE_BUFFER_TOO_SMALL"));
    assert!(fresh.contains("typedef struct segcache_t segcache_t;"));
}

/// The fields of `segcache_stats_t` as the struct was first published, its policy last: their
/// offsets are part of the ABI, so they stay first and in this order.
const FIRST_STATS_FIELDS: [&str; 23] = [
    "items",
    "bytes",
    "heap_bytes",
    "segment_size",
    "segments_total",
    "segments_free",
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "sets",
    "deletes",
    "evicted_items",
    "evicted_segments",
    "expired_items",
    "expired_unfetched",
    "evicted_unfetched",
    "expired_segments",
    "merged_items",
    "flushes",
    "overflow_buckets",
    "shards",
    "policy",
];

/// `segcache_stats_t` is the C face of the engine's one list of figures (`Stats::figures`): the
/// same names in the same order, with the policy where the struct first ended. Later figures
/// come after it, so the fields C programs were built against keep their offsets. A figure
/// added to the engine fails here until C has it too, at the end.
#[test]
fn stats_struct_follows_the_engine_list() {
    let header = generate();
    let body = header
        .split("typedef struct segcache_stats_t {")
        .nth(1)
        .and_then(|rest| rest.split("} segcache_stats_t;").next())
        .expect("segcache_stats_t in the header");
    let fields: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("uint"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|f| f.trim_end_matches(';'))
        .collect();
    assert_eq!(fields[..FIRST_STATS_FIELDS.len()], FIRST_STATS_FIELDS, "the first fields moved");
    let mut figures: Vec<&str> = segcache_core::Stats::default().figures().map(|f| f.name).collect();
    let shards = figures.iter().position(|&f| f == "shards").expect("a shards figure") + 1;
    figures.insert(shards, "policy");
    assert_eq!(fields, figures);
}
