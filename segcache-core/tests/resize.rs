//! Reopening a file with other sizes (`Builder::resize_file`): the items move into the new heap.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use segcache_core::{Builder, Error, FileLayout, ManualClock, SharedCache};

const T0: u32 = 1_700_000_000;

fn tmp(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("segcache-resize-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(aside(&path));
    path
}

fn aside(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.resizing", path.display()))
}

fn sized(path: &Path, clock: &Arc<ManualClock>, heap: usize, segment: usize, shards: usize) -> Builder {
    Builder::new().heap_size(heap).segment_size(segment).shards(shards).clock(clock.clone()).path(path)
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value {i} {}", "x".repeat((i % 50) as usize)).into_bytes()
}

/// Stores keys `0..n` (every third with a TTL of 1,000 s) and returns the CAS values.
fn fill(c: &SharedCache, n: u32) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let ttl = Duration::from_secs(if i.is_multiple_of(3) { 1000 } else { 0 });
            c.set(&key(i), &value(i), i, ttl).unwrap();
            c.get(&key(i)).unwrap().cas
        })
        .collect()
}

fn cleanup(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(aside(path));
}

#[test]
fn a_larger_heap_with_other_segments_and_shards_keeps_every_item() {
    let path = tmp("grow");
    let clock = ManualClock::new(T0);
    let c = sized(&path, &clock, 4 << 20, 64 << 10, 2).build_shared().unwrap();
    let old_cas = fill(&c, 10_000);
    assert_eq!(c.len(), 10_000);
    drop(c);
    clock.advance(10);
    let c = sized(&path, &clock, 16 << 20, 256 << 10, 4).hash_power(14).resize_file(true).build_shared().unwrap();
    let made = FileLayout::read(&path).unwrap().unwrap();
    assert_eq!((made.heap_size, made.segment_size, made.shards, made.hash_power), (16 << 20, 256 << 10, 4, 14));
    assert!(!aside(&path).exists(), "the old file is gone once the move is done");
    assert_eq!(c.len(), 10_000);
    let highest_old = *old_cas.iter().max().unwrap();
    for i in 0..10_000 {
        let item = c.get(&key(i)).unwrap_or_else(|| panic!("key {i} lost"));
        assert_eq!((item.value.as_slice(), item.flags), (value(i).as_slice(), i));
        let ttl = item.ttl;
        if i % 3 == 0 {
            let left = ttl.expect("a TTL").as_secs();
            assert!((980..=990).contains(&left), "key {i}: {left} s left");
        } else {
            assert_eq!(ttl, None, "key {i} never expires");
        }
        assert!(item.cas > highest_old, "key {i}: a CAS value no client holds");
    }
    c.verify().unwrap();
    drop(c);
    // And it is an ordinary file of the new sizes now: a plain reopen is warm.
    let c = sized(&path, &clock, 16 << 20, 256 << 10, 4).hash_power(14).build_shared().unwrap();
    assert_eq!(c.len(), 10_000);
    drop(c);
    cleanup(&path);
}

#[test]
fn a_smaller_heap_keeps_the_newest_items_and_leaves_what_expired() {
    let path = tmp("shrink");
    let clock = ManualClock::new(T0);
    let c = sized(&path, &clock, 16 << 20, 64 << 10, 1).build_shared().unwrap();
    fill(&c, 60_000);
    c.set(b"short", b"lived", 0, Duration::from_secs(5)).unwrap();
    assert!(c.len() > 50_000, "nothing evicted yet: {}", c.len());
    drop(c);
    clock.advance(10);
    let c = sized(&path, &clock, 2 << 20, 64 << 10, 1).resize_file(true).build_shared().unwrap();
    assert!(c.get(b"short").is_none(), "expired before the move");
    let kept: Vec<u32> = (0..60_000).filter(|&i| c.get(&key(i)).is_some()).collect();
    assert!(kept.len() > 5_000 && kept.len() < 45_000, "{} kept", kept.len());
    assert!((59_000..60_000).all(|i| c.get(&key(i)).is_some()), "the newest are kept");
    assert!(kept.iter().filter(|&&i| i < 10_000).count() < kept.len() / 10, "few of the oldest");
    for &i in &kept {
        assert_eq!(c.get(&key(i)).unwrap().value, value(i));
    }
    c.verify().unwrap();
    drop(c);
    cleanup(&path);
}

#[test]
fn without_the_option_a_file_of_other_sizes_is_refused_and_left_as_it_was() {
    let path = tmp("refused");
    let clock = ManualClock::new(T0);
    let c = sized(&path, &clock, 4 << 20, 64 << 10, 2).build_shared().unwrap();
    fill(&c, 100);
    drop(c);
    let before = std::fs::read(&path).unwrap();
    let err = sized(&path, &clock, 8 << 20, 64 << 10, 2).build_shared().unwrap_err();
    assert!(matches!(err, Error::BadFile { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(!aside(&path).exists());
    cleanup(&path);
}

#[test]
fn a_file_of_the_same_sizes_opens_warm_in_place() {
    let path = tmp("same");
    let clock = ManualClock::new(T0);
    let c = sized(&path, &clock, 4 << 20, 64 << 10, 2).build_shared().unwrap();
    let cas = fill(&c, 1000);
    drop(c);
    let c = sized(&path, &clock, 4 << 20, 64 << 10, 2).resize_file(true).build_shared().unwrap();
    assert_eq!(c.get(&key(7)).unwrap().cas, cas[7], "not moved: the same item");
    assert_eq!(c.len(), 1000);
    drop(c);
    cleanup(&path);
}

/// A move cut short (a crash) leaves the old file aside and a partly filled new one: the next
/// open throws the new one away and moves the items again.
#[test]
fn a_move_cut_short_starts_again_from_the_file_left_aside() {
    let path = tmp("resume");
    let clock = ManualClock::new(T0);
    let c = sized(&path, &clock, 4 << 20, 64 << 10, 2).build_shared().unwrap();
    fill(&c, 5000);
    drop(c);
    std::fs::rename(&path, aside(&path)).unwrap();
    // The new file as a crash left it: made with the new sizes, holding some other item.
    let partial = sized(&path, &clock, 8 << 20, 64 << 10, 2).build_shared().unwrap();
    partial.set(b"half-moved", b"x", 0, Duration::ZERO).unwrap();
    drop(partial);
    let c = sized(&path, &clock, 8 << 20, 64 << 10, 2).resize_file(true).build_shared().unwrap();
    assert!(!aside(&path).exists());
    assert!(c.get(b"half-moved").is_none(), "the partial file was thrown away");
    assert_eq!(c.len(), 5000);
    assert_eq!(c.get(&key(4999)).unwrap().value, value(4999));
    drop(c);
    cleanup(&path);
}

#[test]
fn processes_sharing_a_file_cannot_resize_it() {
    let path = tmp("shared");
    let clock = ManualClock::new(T0);
    let err = sized(&path, &clock, 4 << 20, 64 << 10, 2).multi_process(true).resize_file(true).build_shared();
    assert!(matches!(err, Err(Error::InvalidConfig(ref m)) if m.contains("resize_file")), "{err:?}");
    cleanup(&path);
}

#[test]
fn items_larger_than_the_new_segments_are_left_behind_and_the_rest_move() {
    let path = tmp("large");
    let clock = ManualClock::new(T0);
    let c = sized(&path, &clock, 8 << 20, 1 << 20, 1).build_shared().unwrap();
    c.set(b"big", &vec![b'b'; 100 << 10], 0, Duration::ZERO).unwrap();
    c.set(b"small", b"s", 0, Duration::ZERO).unwrap();
    drop(c);
    let c = sized(&path, &clock, 8 << 20, 64 << 10, 1).resize_file(true).build_shared().unwrap();
    assert!(c.get(b"big").is_none());
    assert_eq!(c.get(b"small").unwrap().value, b"s");
    drop(c);
    cleanup(&path);
}

#[test]
fn a_file_that_is_not_a_cache_is_refused_or_reset_as_without_the_option() {
    let path = tmp("junk");
    let clock = ManualClock::new(T0);
    std::fs::write(&path, [0x5a; 8192]).unwrap();
    let err = sized(&path, &clock, 4 << 20, 64 << 10, 2).resize_file(true).build_shared().unwrap_err();
    assert!(matches!(err, Error::BadFile { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), [0x5a; 8192], "left as it was");
    let c = sized(&path, &clock, 4 << 20, 64 << 10, 2).resize_file(true).reset_bad_file(true).build_shared().unwrap();
    assert_eq!(c.len(), 0);
    assert!(!aside(&path).exists());
    drop(c);
    cleanup(&path);
}
