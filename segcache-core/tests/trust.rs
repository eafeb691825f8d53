//! What a client trusts the cache to keep: every acknowledged write is served back with its
//! value and flags, and CAS tokens, touches, the clock and numbers behave as memcached's. Covered:
//! stores of one key whose records have the same length but another layout, a CAS value per item
//! version, touch that moves a record only when it must, the manual clock, and memcached's
//! reading of numbers for `incr`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use segcache_core::{Builder, Error, ManualClock, Policy, Segcache, SharedCache};

const T0: u32 = 1_700_000_000;
const NEVER: Duration = Duration::ZERO;

fn tmp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("segcache-trust-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn got(c: &SharedCache, k: &[u8]) -> Option<(u32, Vec<u8>)> {
    c.get(k).map(|i| (i.flags, i.value))
}

/// With default settings, through the server's handle: the second set has the first's record
/// length but not its layout (flags take 4 bytes only when non-zero), and the value stored last
/// is the one served.
#[test]
fn same_length_other_layout_rewrites_keep_the_value_shared() {
    for shards in [None, Some(1)] {
        let b = Builder::new();
        let c = match shards {
            Some(n) => b.heap_size(8 << 20).shards(n).build_shared().unwrap(),
            None => b.build_shared().unwrap(),
        };
        c.set(b"k", b"a", 1, NEVER).unwrap();
        c.set(b"k", b"bbbbb", 0, NEVER).unwrap();
        assert_eq!(got(&c, b"k"), Some((0, b"bbbbb".to_vec())));
        c.set(b"j", b"WXYZy", 0, NEVER).unwrap();
        c.set(b"j", b"N", 7, NEVER).unwrap();
        assert_eq!(got(&c, b"j"), Some((7, b"N".to_vec())));
        // And back again, many times, in one second.
        for i in 0..100u32 {
            let (v, f): (&[u8], u32) = if i % 2 == 0 { (b"1234", 9) } else { (b"12345678", 0) };
            c.set(b"j", v, f, NEVER).unwrap();
            assert_eq!(got(&c, b"j"), Some((f, v.to_vec())), "round {i}");
        }
    }
}

/// The same through the single-owner engine (its in-place path writes the whole record) and
/// with a file (no rewrites in place).
#[test]
fn same_length_other_layout_rewrites_keep_the_value_engine_and_file() {
    let mut c = Builder::new().heap_size(4 << 20).build().unwrap();
    c.set(b"k", b"a", 1, NEVER).unwrap();
    c.set(b"k", b"bbbbb", 0, NEVER).unwrap();
    assert_eq!(c.get(b"k").map(|i| (i.flags(), i.value().to_vec())), Some((0, b"bbbbb".to_vec())));
    c.set(b"k", b"N", 7, NEVER).unwrap();
    assert_eq!(c.get(b"k").map(|i| (i.flags(), i.value().to_vec())), Some((7, b"N".to_vec())));
    let path = tmp("layout");
    let c = Builder::new().heap_size(8 << 20).segment_size(256 << 10).path(&path).build_shared().unwrap();
    c.set(b"k", b"a", 1, NEVER).unwrap();
    c.set(b"k", b"bbbbb", 0, NEVER).unwrap();
    assert_eq!(got(&c, b"k"), Some((0, b"bbbbb".to_vec())));
    drop(c);
    let _ = std::fs::remove_file(&path);
}

/// memcached's CAS semantics: a `gets` token stays valid across touches, reads and writes to
/// other keys (here: to every other key of a tiny table, so to the ones sharing its bucket).
#[test]
fn cas_token_survives_touch_reads_and_writes_to_other_keys() {
    let clock = ManualClock::new(T0);
    let c = Builder::new()
        .heap_size(8 << 20)
        .segment_size(64 << 10)
        .hash_power(4)
        .shards(2)
        .clock(clock.clone())
        .build_shared()
        .unwrap();
    c.set(b"k", b"value", 3, Duration::from_secs(100)).unwrap();
    let token = c.get(b"k").unwrap().cas;
    c.touch(b"k", Duration::from_secs(1000)).unwrap();
    assert_eq!(c.get(b"k").unwrap().cas, token, "touch changed the CAS");
    let gat = c.get_and_touch(b"k", Duration::from_secs(50)).unwrap();
    assert_eq!(gat.cas, token, "get_and_touch changed the CAS");
    for i in 0..200 {
        c.set(format!("other{i}").as_bytes(), b"x", 0, NEVER).unwrap();
        c.set(format!("other{i}").as_bytes(), b"y", 0, NEVER).unwrap();
    }
    assert_eq!(c.get(b"k").unwrap().cas, token, "writes to other keys changed the CAS");
    c.cas(b"k", b"new", 4, NEVER, token).unwrap();
    assert!(matches!(c.cas(b"k", b"newer", 4, NEVER, token), Err(Error::Exists)));

    let mut e = Builder::new().heap_size(4 << 20).hash_power(4).clock(clock.clone()).build().unwrap();
    e.set(b"k", b"value", 0, Duration::from_secs(100)).unwrap();
    let token = e.get(b"k").unwrap().cas();
    e.touch(b"k", Duration::from_secs(7000)).unwrap();
    e.set(b"other", b"v", 0, NEVER).unwrap();
    e.cas(b"k", b"new", 0, NEVER, token).unwrap();
}

/// Every modification changes the CAS value, even a set of the same value; values count up from
/// 1 and never repeat across keys or shards.
#[test]
fn cas_changes_on_every_modification_and_is_unique() {
    let mut e = Builder::new().heap_size(4 << 20).build().unwrap();
    e.set(b"n", b"5", 0, NEVER).unwrap();
    assert_eq!(e.get(b"n").unwrap().cas(), 1, "counts up from 1");
    let mut seen = HashSet::new();
    let mut last = 0;
    let mut check = |e: &Segcache, what: &str| {
        let cas = e.get(b"n").unwrap().cas();
        assert!(cas > last, "{what}: CAS {cas} did not increase from {last}");
        assert!(seen.insert(cas), "{what}: CAS {cas} repeated");
        last = cas;
    };
    check(&e, "set");
    e.set(b"n", b"5", 0, NEVER).unwrap();
    check(&e, "set of the same value");
    e.replace(b"n", b"6", 0, NEVER).unwrap();
    check(&e, "replace");
    e.incr(b"n", 1).unwrap();
    check(&e, "incr");
    e.decr(b"n", 1).unwrap();
    check(&e, "decr");
    e.append(b"n", b"0").unwrap();
    check(&e, "append");
    e.prepend(b"n", b"1").unwrap();
    check(&e, "prepend");
    let token = e.get(b"n").unwrap().cas();
    e.cas(b"n", b"7", 0, NEVER, token).unwrap();
    check(&e, "cas");

    let c = Builder::new().heap_size(16 << 20).segment_size(64 << 10).shards(8).build_shared().unwrap();
    let mut tokens = HashSet::new();
    for i in 0..2000u32 {
        let k = format!("key{}", i % 500);
        c.set(k.as_bytes(), b"v", 0, NEVER).unwrap();
        let cas = c.get(k.as_bytes()).unwrap().cas;
        assert!(tokens.insert(cas), "CAS {cas} handed out twice");
        assert!(cas <= 8 * 2000, "CAS {cas} is not counting up from a small number");
    }
}

/// CAS values keep increasing across a warm restart; a file of the previous format is refused
/// with a clear error.
#[test]
fn cas_increases_across_restart_and_old_files_are_refused() {
    let path = tmp("cas-restart");
    let b = || Builder::new().heap_size(8 << 20).segment_size(256 << 10).shards(2).path(&path);
    let c = b().build_shared().unwrap();
    for i in 0..100 {
        c.set(format!("k{i}").as_bytes(), b"v", 0, NEVER).unwrap();
    }
    let before: Vec<u64> = (0..100).map(|i| c.get(format!("k{i}").as_bytes()).unwrap().cas).collect();
    c.close().unwrap();
    let c = b().build_shared().unwrap();
    for (i, cas) in before.iter().enumerate() {
        assert_eq!(c.get(format!("k{i}").as_bytes()).unwrap().cas, *cas, "kept across the restart");
    }
    let max = *before.iter().max().unwrap();
    c.set(b"k0", b"v", 0, NEVER).unwrap();
    c.set(b"fresh", b"v", 0, NEVER).unwrap();
    assert!(c.get(b"k0").unwrap().cas > max && c.get(b"fresh").unwrap().cas > max, "counters went back");
    c.close().unwrap();
    // The version field (bytes 8..12) of a file made by the previous format.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    match b().build_shared() {
        Err(Error::BadFile { reason, .. }) => assert!(reason.contains("version 3"), "{reason}"),
        other => panic!("an old file was accepted: {other:?}"),
    }
    let _ = std::fs::remove_file(&path);
}

/// Touching to a TTL whose bucket the item's segment suits moves nothing; another TTL moves the
/// record once, keeping its value, flags and CAS, and it expires as asked, never later.
#[test]
fn touch_moves_the_record_only_when_its_segment_does_not_suit() {
    let path = tmp("touch");
    let clock = ManualClock::new(T0);
    for file in [false, true] {
        let mut b = Builder::new().heap_size(8 << 20).segment_size(1 << 20).eviction(Policy::None).clock(clock.clone());
        if file {
            let _ = std::fs::remove_file(&path);
            b = b.path(&path);
        }
        let mut c = b.build().unwrap();
        clock.set(T0);
        let big = vec![7u8; 900 << 10];
        c.set(b"big", &big, 5, Duration::from_secs(100)).unwrap();
        let cas = c.get(b"big").unwrap().cas();
        let (at, free, bytes) = (c.record_location(b"big"), c.stats().segments_free, c.stats().bytes);
        // The segment suits the new expiry (width 1 s below 256 s: the same expiry, a second
        // later): a touch changes nothing. Then the same in a bucket 16 s wide.
        for i in 1..=50u32 {
            clock.advance(u32::from(i % 3 == 0));
            let left = T0 + 100 - c.now();
            c.touch(b"big", Duration::from_secs(left.into())).unwrap();
            let s = c.stats();
            assert_eq!(
                (c.record_location(b"big"), s.segments_free, s.bytes),
                (at, free, bytes),
                "touch {i} moved the item"
            );
        }
        c.touch(b"big", Duration::from_secs(300)).unwrap();
        let (at, free) = (c.record_location(b"big"), c.stats().segments_free);
        for _ in 0..15 {
            clock.advance(1);
            c.touch(b"big", Duration::from_secs(300)).unwrap();
            assert_eq!(
                (c.record_location(b"big"), c.stats().segments_free),
                (at, free),
                "a touch within the width moved the item"
            );
        }
        let item = c.get(b"big").unwrap();
        assert_eq!((item.cas(), item.flags(), item.value().len()), (cas, 5, big.len()));
        assert!(c.get(b"big").unwrap().expire_at().unwrap() <= c.now() + 300);
        // Another bucket: the record moves, keeping value, flags and CAS; the expiry is as asked.
        let now = c.now();
        c.touch(b"big", Duration::from_secs(3000)).unwrap();
        assert_ne!(c.record_location(b"big"), at);
        let item = c.get(b"big").unwrap();
        assert_eq!((item.cas(), item.flags(), item.value() == &big[..]), (cas, 5, true));
        let expire_at = item.expire_at().unwrap();
        assert!(
            expire_at <= now + 3000 && expire_at > now + 3000 - 2 * 16,
            "expires at {expire_at}, asked {}",
            now + 3000
        );
        assert_eq!(c.stats().items, 1);
        // And back to never expiring, then to a short TTL: never later than asked.
        c.touch(b"big", NEVER).unwrap();
        assert_eq!(c.get(b"big").unwrap().expire_at(), None);
        c.touch(b"big", Duration::from_secs(10)).unwrap();
        assert_eq!(c.get(b"big").unwrap().cas(), cas);
        clock.advance(10);
        assert!(c.get(b"big").is_none(), "outlived its touched TTL");
        if file {
            c.close().unwrap();
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// A moved record survives a warm restart (it is published like an append).
#[test]
fn touched_items_survive_a_restart() {
    let path = tmp("touch-restart");
    let clock = ManualClock::new(T0);
    let b = || Builder::new().heap_size(8 << 20).segment_size(256 << 10).clock(clock.clone()).path(&path);
    let mut c = b().build().unwrap();
    for i in 0..100u32 {
        c.set(format!("k{i}").as_bytes(), format!("v{i}").as_bytes(), i, Duration::from_secs(60)).unwrap();
    }
    for i in 0..100u32 {
        c.touch(format!("k{i}").as_bytes(), Duration::from_secs(if i % 2 == 0 { 5000 } else { 30 })).unwrap();
    }
    let cas: Vec<u64> = (0..100u32).map(|i| c.get(format!("k{i}").as_bytes()).unwrap().cas()).collect();
    c.close().unwrap();
    let c = b().build().unwrap();
    for i in 0..100u32 {
        let item = c.get(format!("k{i}").as_bytes()).unwrap();
        assert_eq!((item.value(), item.flags(), item.cas()), (format!("v{i}").as_bytes(), i, cas[i as usize]));
    }
    assert_eq!(c.len(), 100);
    drop(c);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn manual_clock_saturates_and_the_engine_clock_does_not_go_back() {
    let clock = ManualClock::new(u32::MAX - 10);
    clock.advance(100);
    assert_eq!(segcache_core::Clock::now(&*clock), u32::MAX);

    let clock = ManualClock::new(T0);
    let mut c = Builder::new().heap_size(4 << 20).clock(clock.clone()).build().unwrap();
    c.set(b"short", b"1", 0, Duration::from_secs(5)).unwrap();
    clock.advance(100);
    c.set(b"other", b"2", 0, NEVER).unwrap();
    assert!(c.get(b"short").is_none());
    clock.set(T0);
    assert_eq!(c.now(), T0 + 100, "time went back");
    assert!(c.get(b"short").is_none(), "an expired item came back");
    // One shard: the clock's high-water mark is the shard's last write (see `Segcache::now`).
    let s = Builder::new().heap_size(8 << 20).shards(1).clock(clock.clone()).build_shared().unwrap();
    s.set(b"short", b"1", 0, Duration::from_secs(5)).unwrap();
    clock.advance(100);
    s.set(b"short2", b"1", 0, NEVER).unwrap();
    s.set(b"other", b"2", 0, NEVER).unwrap();
    clock.set(T0);
    assert!(s.get(b"short").is_none(), "an expired item came back");
}

/// memcached reads a value as a number as `strtoull` does, followed by white space or the end
/// (its `incr` leaves a shrunk number padded with spaces). Every case here was checked against
/// memcached 1.6 (`set n 0 0 N` then `incr n 1`).
#[test]
fn incr_reads_numbers_as_memcached_does() {
    let mut c = Builder::new().heap_size(4 << 20).build().unwrap();
    let accepted: &[(&[u8], u64)] = &[
        (b"5 ", 5),
        (b"5  ", 5),
        (b" 5", 5),
        (b"\t5\r\n", 5),
        (b"+5", 5),
        (b"-0", 0),
        (b"5 x", 5),
        (b"007", 7),
        (b"18446744073709551615", u64::MAX),
        (b"   00000000000000000000000000012", 12),
        (b"5\0z", 5),
        (b"-9223372036854775809", 9_223_372_036_854_775_807),
    ];
    for (v, n) in accepted {
        c.set(b"n", v, 0, NEVER).unwrap();
        assert_eq!(c.incr(b"n", 1).unwrap(), n.wrapping_add(1), "{:?}", String::from_utf8_lossy(v));
    }
    let refused: &[&[u8]] = &[b"", b" ", b"5x", b"x5", b"-1", b"-", b"+", b"18446744073709551616", b"0x10", b"5.0"];
    for v in refused {
        c.set(b"n", v, 0, NEVER).unwrap();
        assert!(matches!(c.incr(b"n", 1), Err(Error::NotNumeric)), "{:?}", String::from_utf8_lossy(v));
        assert!(matches!(c.decr(b"n", 1), Err(Error::NotNumeric)), "{:?}", String::from_utf8_lossy(v));
    }
    c.set(b"n", b"10 ", 0, NEVER).unwrap();
    assert_eq!(c.decr(b"n", 3).unwrap(), 7);
    assert_eq!(c.get(b"n").unwrap().value(), b"7");
}

/// Records shorter than the longest header (a 1-byte key and an empty value: 7 bytes, where the
/// header alone may take 10) read back through the lock-free path at every offset within a word:
/// the copy of a record must not assume it is at least a header long.
#[test]
fn records_shorter_than_the_longest_header_read_back() {
    let cache =
        segcache_core::Builder::new().heap_size(4 << 20).segment_size(64 << 10).shards(1).build_shared().unwrap();
    let never = std::time::Duration::ZERO;
    // Records of 7 bytes each: the n-th starts at byte 7n, so at every offset modulo 8.
    let keys: Vec<[u8; 1]> = (b'a'..=b'p').map(|c| [c]).collect();
    for key in &keys {
        cache.set(key, b"", 0, never).unwrap();
    }
    for key in &keys {
        for _ in 0..3 {
            assert_eq!(cache.get(key).unwrap().value, b"");
        }
    }
}
