//! Warm restart: graceful round trips, bad files, the lock.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use segcache_core::{Builder, Error, ManualClock, Policy};

const T0: u32 = 1_700_000_000;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("segcache-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    dir
}

fn builder(path: &Path, clock: &Arc<ManualClock>) -> Builder {
    Builder::new().heap_size(8 << 20).segment_size(256 << 10).shards(2).clock(clock.clone()).path(path)
}

fn fill(c: &segcache_core::SharedCache, n: u32) {
    for i in 0..n {
        let ttl = if i % 4 == 0 { Duration::from_secs(100) } else { Duration::ZERO };
        c.set(format!("k{i}").as_bytes(), format!("value {i}").as_bytes(), i, ttl).unwrap();
    }
}

#[test]
fn graceful_round_trip_keeps_values_flags_cas_and_expiry() {
    let path = tmp("graceful");
    let clock = ManualClock::new(T0);
    let c = builder(&path, &clock).build_shared().unwrap();
    fill(&c, 5000);
    c.set(b"num", b"41", 0, Duration::ZERO).unwrap();
    c.incr(b"num", 1).unwrap();
    c.set(b"app", b"a", 9, Duration::ZERO).unwrap();
    c.append(b"app", b"b").unwrap();
    c.prepend(b"app", b"_").unwrap();
    c.delete(b"k1").unwrap();
    c.touch(b"k2", Duration::from_secs(50)).unwrap();
    c.add(b"added", b"x", 0, Duration::ZERO).unwrap();
    c.replace(b"k3", b"replaced", 3, Duration::ZERO).unwrap();
    let cas_before = c.get(b"k5").unwrap().cas;
    let stats_before = c.stats();
    c.close().unwrap();

    clock.advance(60);
    let c = builder(&path, &clock).build_shared().unwrap();
    let s = c.stats();
    assert_eq!(s.items, stats_before.items, "nothing lost or freed before the first write");
    assert_eq!((s.sets, s.get_hits), (stats_before.sets, stats_before.get_hits), "counters persist");
    assert_eq!(c.get(b"num").unwrap().value, b"42");
    let app = c.get(b"app").unwrap();
    assert_eq!((app.value.as_slice(), app.flags), (&b"_ab"[..], 9));
    assert!(c.get(b"k1").is_none(), "deleted stays deleted");
    assert!(c.get(b"k2").is_none(), "touched to 50 s, 60 s passed while closed");
    assert_eq!(c.get(b"k3").unwrap().value, b"replaced");
    assert_eq!(c.get(b"added").unwrap().value, b"x");
    let k5 = c.get(b"k5").unwrap();
    assert_eq!(k5.cas, cas_before, "CAS survives a graceful restart");
    c.cas(b"k5", b"new", 0, Duration::ZERO, cas_before).unwrap();
    for i in 4..5000u32 {
        let item = c.get(format!("k{i}").as_bytes()).unwrap_or_else(|| panic!("k{i} lost"));
        assert_eq!(item.value, if i == 5 { b"new".to_vec() } else { format!("value {i}").into_bytes() });
        if i % 4 == 0 {
            assert_eq!(item.ttl, Some(Duration::from_secs(40)), "absolute expiry kept");
        }
    }
    assert_eq!(c.stats().items, stats_before.items - 1, "k2's expired segment was freed by the first write");
    clock.advance(40);
    assert!(c.get(b"k4").is_none(), "expires at its original time");
    drop(c); // Drop closes gracefully too.
    let c = builder(&path, &clock).build_shared().unwrap();
    assert_eq!(c.get(b"k5").unwrap().value, b"new");
    c.close().unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn single_owner_engine_persists_too() {
    let path = tmp("single");
    let clock = ManualClock::new(T0);
    let b = || Builder::new().heap_size(2 << 20).segment_size(64 << 10).clock(clock.clone()).path(&path);
    let mut c = b().build().unwrap();
    c.set(b"a", b"1", 5, Duration::ZERO).unwrap();
    c.close().unwrap();
    let c = b().build().unwrap();
    assert_eq!(c.get(b"a").unwrap().flags(), 5);
    drop(c);
    std::fs::remove_file(&path).unwrap();
}

/// With a file, a rewrite of the same length goes in place too (a crash in the middle is undone
/// by recovery), and a graceful close and reopen keep the last value.
#[test]
fn a_file_backed_cache_rewrites_in_place_across_a_restart() {
    let path = tmp("rewrite");
    let open = || Builder::new().heap_size(2 << 20).segment_size(64 << 10).path(&path).build().unwrap();
    let mut c = open();
    let record = 4 + 1 + 64;
    c.set(b"k", format!("{:064}", 0).as_bytes(), 0, Duration::ZERO).unwrap();
    let free = c.stats().segments_free;
    let last = 2 * (64 << 10) / record as u32;
    for i in 1..=last {
        c.set(b"k", format!("{:064}", i).as_bytes(), 0, Duration::ZERO).unwrap();
    }
    assert_eq!(c.stats().segments_free, free, "rewrites took new space");
    drop(c);
    let c = open();
    assert_eq!(c.get(b"k").unwrap().value(), format!("{:064}", last).as_bytes());
    drop(c);
    std::fs::remove_file(&path).unwrap();
}

/// Merges into a file copy into a spare segment, never over a source in place, so that a crash
/// leaves every kept item in a whole segment: a file-backed cache holds one back.
#[test]
fn a_file_backed_merge_cache_holds_a_spare_segment() {
    let path = tmp("spare");
    let c =
        Builder::new().heap_size(2 << 20).segment_size(64 << 10).eviction(Policy::Merge).path(&path).build().unwrap();
    let s = c.stats();
    assert_eq!(s.segments_free, s.segments_total - 1);
    drop(c);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_second_open_is_refused_while_the_first_is_open() {
    let path = tmp("lock");
    let clock = ManualClock::new(T0);
    let c = builder(&path, &clock).build_shared().unwrap();
    match builder(&path, &clock).build_shared() {
        Err(Error::Locked { path: p }) => assert_eq!(p, path),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(c);
    builder(&path, &clock).build_shared().unwrap();
    std::fs::remove_file(&path).unwrap();
}

fn expect_bad(path: &Path, b: Builder, words: &str) {
    let before = std::fs::read(path).unwrap();
    match b.clone().build_shared() {
        Err(Error::BadFile { reason, .. }) => assert!(reason.contains(words), "{reason:?} should mention {words:?}"),
        other => panic!("expected BadFile mentioning {words:?}, got {other:?}"),
    }
    assert!(std::fs::read(path).unwrap() == before, "a rejected file is left untouched");
    // Asked to, the cache starts empty over it.
    let c = b.clone().reset_bad_file(true).build_shared().unwrap();
    assert!(c.get(b"k10").is_none());
    c.set(b"new", b"1", 0, Duration::ZERO).unwrap();
    c.close().unwrap();
    let c = b.build_shared().unwrap();
    assert_eq!(c.get(b"new").unwrap().value, b"1");
}

fn closed_file(name: &str, clock: &Arc<ManualClock>) -> PathBuf {
    let path = tmp(name);
    let c = builder(&path, clock).build_shared().unwrap();
    fill(&c, 3000);
    c.close().unwrap();
    path
}

#[test]
fn foreign_truncated_and_other_version_files_are_named() {
    let clock = ManualClock::new(T0);
    let path = tmp("foreign");
    std::fs::write(&path, b"this is somebody else's file, not a cache heap at all........").unwrap();
    expect_bad(&path, builder(&path, &clock), "not a segcache file");

    let path = closed_file("truncated", &clock);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(f.metadata().unwrap().len() / 2).unwrap();
    drop(f);
    expect_bad(&path, builder(&path, &clock), "truncated");

    let path = closed_file("version", &clock);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    expect_bad(&path, builder(&path, &clock), "format version 0");

    // Version 6: records with a 4-byte CAS counter, segment headers without its base, no locks,
    // reader slots or tag summaries for processes that share the file.
    assert_eq!(segcache_core::FORMAT_VERSION, 7);
    bytes[8..12].copy_from_slice(&6u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    expect_bad(&path, builder(&path, &clock), "format version 6");
}

#[test]
fn another_configuration_is_named() {
    let clock = ManualClock::new(T0);
    type Configure = fn(&Path, &Arc<ManualClock>) -> Builder;
    let cases: [(&str, Configure); 3] = [
        ("shard count", |p: &Path, c: &Arc<ManualClock>| builder(p, c).shards(4)),
        ("segment size", |p: &Path, c: &Arc<ManualClock>| builder(p, c).segment_size(128 << 10)),
        ("heap size", |p: &Path, c: &Arc<ManualClock>| builder(p, c).heap_size(16 << 20)),
    ];
    for (what, b) in cases {
        let path = closed_file(what, &clock);
        expect_bad(&path, b(&path, &clock), what);
    }
}

#[test]
fn flipped_bytes_anywhere_are_caught_or_harmless() {
    // Flip one byte at many places (header, metadata, heap): every open either fails with
    // BadFile or serves only values that were written.
    let clock = ManualClock::new(T0);
    let path = closed_file("flip", &clock);
    let pristine = std::fs::read(&path).unwrap();
    let len = pristine.len();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut rejected = 0;
    for round in 0..60 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Half the flips land in the first pages (header, metadata), half anywhere.
        let at = if round % 2 == 0 { (rng as usize) % (1 << 20).min(len) } else { (rng as usize) % len };
        let mut bytes = pristine.clone();
        bytes[at] ^= 1 << (rng >> 61);
        std::fs::write(&path, &bytes).unwrap();
        for lazy in [false, true] {
            std::fs::write(&path, &bytes).unwrap();
            match builder(&path, &clock).lazy_verify(lazy).build_shared() {
                Err(Error::BadFile { .. }) => rejected += 1,
                Err(e) => panic!("flip at {at}: unexpected error {e}"),
                Ok(c) => {
                    for i in 0..3000u32 {
                        if let Some(item) = c.get(format!("k{i}").as_bytes()) {
                            assert_eq!(
                                item.value,
                                format!("value {i}").into_bytes(),
                                "flip at {at}: wrong value for k{i}"
                            );
                        }
                    }
                    drop(c);
                }
            }
        }
    }
    assert!(rejected > 0);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn policies_can_change_across_restarts() {
    let clock = ManualClock::new(T0);
    let path = closed_file("policy", &clock);
    let c = builder(&path, &clock).eviction(Policy::S3Fifo).build_shared().unwrap();
    assert_eq!(c.get(b"k10").unwrap().value, b"value 10");
    c.close().unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_file_left_zeroed_by_a_crash_during_creation_starts_empty() {
    let clock = ManualClock::new(T0);
    let path = tmp("zeroed");
    std::fs::write(&path, vec![0u8; 12345]).unwrap();
    let c = builder(&path, &clock).build_shared().unwrap();
    assert!(c.is_empty());
    c.set(b"a", b"1", 0, Duration::ZERO).unwrap();
    c.close().unwrap();
    assert_eq!(builder(&path, &clock).build_shared().unwrap().get(b"a").unwrap().value, b"1");
    std::fs::remove_file(&path).unwrap();
}

/// Flips one byte inside the stored value of `key`'s item (`value N`) in a closed file.
fn damage_value(path: &Path, n: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    let needle = format!("value {n}").into_bytes();
    let at = bytes.windows(needle.len()).position(|w| w == needle.as_slice()).expect("value in the file");
    bytes[at + 2] ^= 0x20;
    std::fs::write(path, &bytes).unwrap();
}

#[test]
fn lazy_verify_serves_at_once_and_drops_only_a_damaged_segment() {
    let clock = ManualClock::new(T0);
    // Undamaged: everything comes back, writes work, the file closes clean again.
    let path = closed_file("lazy-good", &clock);
    let c = builder(&path, &clock).lazy_verify(true).build_shared().unwrap();
    for i in 0..3000u32 {
        assert_eq!(c.get(format!("k{i}").as_bytes()).unwrap().value, format!("value {i}").into_bytes());
    }
    c.set(b"after", b"1", 0, Duration::ZERO).unwrap();
    c.close().unwrap();
    let c = builder(&path, &clock).build_shared().unwrap();
    assert_eq!(c.len(), 3001);
    drop(c);
    std::fs::remove_file(&path).unwrap();

    // One value damaged: the strict open refuses the file; the lazy one serves the other
    // segments and never the damaged value.
    let path = closed_file("lazy-bad", &clock);
    damage_value(&path, 1234);
    expect_bad_segment(&path, &clock);
    let c = builder(&path, &clock).lazy_verify(true).build_shared().unwrap();
    assert!(c.get(b"k1234").is_none(), "a key in the damaged segment reads as a miss");
    let served = |c: &segcache_core::SharedCache| {
        (0..3000u32)
            .filter(|i| match c.get(format!("k{i}").as_bytes()) {
                Some(item) => {
                    assert_eq!(item.value, format!("value {i}").into_bytes(), "wrong value for k{i}");
                    true
                }
                None => false,
            })
            .count()
    };
    let before_write = served(&c);
    assert!(before_write > 0 && before_write < 3000, "only the damaged segment is lost ({before_write} served)");
    assert_eq!(c.dropped_segments(), 0, "not dropped until the checks run");
    // A shard's first write (or `expire`, which every shard runs) checks the rest and drops
    // the damaged segment for good.
    c.set(b"after", b"1", 0, Duration::ZERO).unwrap();
    c.expire();
    assert_eq!(served(&c), before_write);
    assert_eq!(c.len(), before_write + 1, "the dropped items are no longer counted");
    assert_eq!(c.dropped_segments(), 1, "the damaged segment is reported");
    c.close().unwrap();
    // What was kept is sound: a strict reopen accepts it.
    let c = builder(&path, &clock).build_shared().unwrap();
    assert_eq!(served(&c), before_write);
    assert_eq!(c.get(b"after").unwrap().value, b"1");
    drop(c);
    std::fs::remove_file(&path).unwrap();
}

fn expect_bad_segment(path: &Path, clock: &Arc<ManualClock>) {
    match builder(path, clock).build_shared() {
        Err(Error::BadFile { reason, .. }) => assert!(reason.contains("checksum"), "{reason}"),
        other => panic!("expected BadFile, got {other:?}"),
    }
}

/// A prefaulted open reads the file in and changes nothing in it: every item comes back, with
/// the full check and with the lazy one.
#[test]
fn a_prefaulted_open_keeps_the_files_items() {
    let path = tmp("prefault");
    let clock = ManualClock::new(T0);
    let c = builder(&path, &clock).prefault(true).build_shared().unwrap();
    fill(&c, 5000);
    let items = c.stats().items;
    c.close().unwrap();
    let c = builder(&path, &clock).prefault(true).build_shared().unwrap();
    assert_eq!(c.stats().items, items);
    for i in 0..5000 {
        let got = c.get(format!("k{i}").as_bytes()).unwrap_or_else(|| panic!("k{i} lost"));
        assert_eq!((got.value, got.flags), (format!("value {i}").into_bytes(), i));
    }
    c.close().unwrap();
    let c = builder(&path, &clock).prefault(true).lazy_verify(true).build_shared().unwrap();
    assert_eq!(c.stats().items, items);
    assert_eq!(c.get(b"k4999").unwrap().value, b"value 4999");
    drop(c);
    let _ = std::fs::remove_file(&path);
}
