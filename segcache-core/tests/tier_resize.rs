//! Reopening a cache that has a flash tier with other sizes (`Builder::resize_file`): the items on
//! flash move with those in DRAM, into the new heap and, through its eviction, the new tier; a
//! tier of another size moves its items too; a resize cut short by a crash leaves the old cache or
//! the new one, never a mix.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segcache_core::{Builder, ManualClock, Policy, SharedCache};

const SEG: usize = 16 << 10;
const T0: u32 = 1_700_000_000;
/// Items that a cache of 8 heap and 64 flash segments holds without losing any.
const N: u32 = 1200;
const CHILD: &str = "SEGCACHE_TIER_RESIZE_CHILD";

/// A heap file and its tier file, removed (with any file left aside) when dropped.
struct Files {
    heap: PathBuf,
    tier: PathBuf,
}

impl Files {
    fn new(what: &str) -> Files {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("segcache-tier-resize-{}-{what}-{n}", std::process::id()));
        let files = Files { heap: base.with_extension("heap"), tier: base.with_extension("tier") };
        files.remove();
        files
    }

    fn at(base: &Path) -> Files {
        Files { heap: base.with_extension("heap"), tier: base.with_extension("tier") }
    }

    fn remove(&self) {
        for p in [&self.heap, &self.tier] {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_file(aside(p));
        }
    }

    fn asides(&self) -> (bool, bool) {
        (aside(&self.heap).exists(), aside(&self.tier).exists())
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        self.remove();
    }
}

fn aside(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.resizing", path.display()))
}

/// A cache of `heap` and `flash` segments of 16 KiB over `shards` shards, FIFO, its table of
/// 2^12 buckets.
fn sized(f: &Files, clock: &Arc<ManualClock>, heap: usize, flash: usize, shards: usize) -> Builder {
    default_power(f, clock, heap, flash, shards).hash_power(12)
}

/// `sized` with the table sized for the heap and the tier (the default).
fn default_power(f: &Files, clock: &Arc<ManualClock>, heap: usize, flash: usize, shards: usize) -> Builder {
    Builder::new()
        .heap_size(heap * SEG)
        .segment_size(SEG)
        .shards(shards)
        .eviction(Policy::Fifo)
        .clock(clock.clone())
        .path(&f.heap)
        .tier(&f.tier, (flash * SEG) as u64)
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// A value that tells its key apart, of a length that varies with it.
fn value(i: u32) -> Vec<u8> {
    let mut v = format!("value {i}:").into_bytes();
    v.resize(40 + (i as usize * 37) % 600, b'a' + (i % 26) as u8);
    v
}

/// Stores keys `0..n` (every third with a TTL of 1,000 s, flags the key's number) and returns the
/// highest CAS value handed out.
fn fill(c: &SharedCache, n: u32) -> u64 {
    (0..n)
        .map(|i| {
            let ttl = Duration::from_secs(if i.is_multiple_of(3) { 1000 } else { 0 });
            c.set(&key(i), &value(i), i, ttl).unwrap();
            c.get(&key(i)).unwrap().cas
        })
        .max()
        .unwrap_or(0)
}

/// Checks key `i` as served: its value byte for byte, its flags, its expiry 10 s on, a CAS value
/// above `old_cas`. `false` when it is not served.
fn check(c: &SharedCache, i: u32, old_cas: u64) -> bool {
    let Some(item) = c.get(&key(i)) else { return false };
    assert_eq!(item.value, value(i), "key {i}: the value stored");
    assert_eq!(item.flags, i, "key {i}: its flags");
    if i.is_multiple_of(3) {
        let left = item.ttl.expect("a TTL").as_secs();
        assert!((980..=990).contains(&left), "key {i}: {left} s left");
    } else {
        assert_eq!(item.ttl, None, "key {i} never expires");
    }
    assert!(item.cas > old_cas, "key {i}: CAS {} is one a client of the old cache may hold", item.cas);
    true
}

/// Fills a cache of 8 heap and 64 flash segments over 2 shards with `n` items, most of them on
/// flash and none lost yet, and closes it; returns the highest CAS value.
fn filled(f: &Files, clock: &Arc<ManualClock>, n: u32) -> u64 {
    let c = sized(f, clock, 8, 64, 2).build_shared().unwrap();
    let cas = fill(&c, n);
    let s = c.stats();
    assert!(s.flash_items > u64::from(n) / 2, "most items on flash: {s:?}");
    assert_eq!((s.evicted_items, s.flash_reclaimed_segments), (0, 0), "nothing lost yet: {s:?}");
    c.close().unwrap();
    cas
}

/// Fills a cache of 8 heap and 384 flash segments over 2 shards with 6,000 items, and closes it;
/// returns the highest CAS value and how many items it serves.
fn filled_large(f: &Files, clock: &Arc<ManualClock>) -> (u64, usize) {
    let c = sized(f, clock, 8, 384, 2).build_shared().unwrap();
    let cas = fill(&c, 6000);
    assert!(c.stats().flash_items > 3000, "{:?}", c.stats());
    let served = (0..6000).filter(|&i| c.get(&key(i)).is_some()).count();
    c.close().unwrap();
    (cas, served)
}

#[test]
fn a_larger_heap_with_other_shards_keeps_every_item_of_dram_and_flash() {
    let f = Files::new("grow-heap");
    let clock = ManualClock::new(T0);
    let old_cas = filled(&f, &clock, N);
    clock.advance(10);
    let c = sized(&f, &clock, 16, 64, 4).resize_file(true).build_shared().unwrap();
    assert_eq!(f.asides(), (false, false), "nothing left aside once the move is done");
    let lost: Vec<u32> = (0..N).filter(|&i| !check(&c, i, old_cas)).collect();
    assert!(lost.is_empty(), "lost {} items: {:?}, {:?}", lost.len(), &lost[..lost.len().min(20)], c.stats());
    c.verify().unwrap();
    c.close().unwrap();
    // An ordinary pair of files of the new sizes now: a plain reopen is warm, flash included.
    let c = sized(&f, &clock, 16, 64, 4).build_shared().unwrap();
    assert!(c.stats().flash_items > 0);
    assert!((0..N).all(|i| check(&c, i, old_cas)));
}

#[test]
fn a_smaller_heap_with_a_tier_keeps_the_newest_and_demotes_into_the_tier() {
    let f = Files::new("shrink-heap");
    let clock = ManualClock::new(T0);
    let c = sized(&f, &clock, 32, 64, 2).build_shared().unwrap();
    let old_cas = fill(&c, 2000);
    c.set(b"short", b"lived", 0, Duration::from_secs(5)).unwrap();
    assert!(c.stats().flash_items > 500, "{:?}", c.stats());
    c.close().unwrap();
    clock.advance(10);
    let c = sized(&f, &clock, 4, 64, 2).resize_file(true).build_shared().unwrap();
    let s = c.stats();
    assert!(s.flash_items > 1000, "the new heap's eviction demoted into the tier: {s:?}");
    assert_eq!(s.flash_demotions_dropped, 0, "the move waits for the tier's writer: {s:?}");
    assert!(c.get(b"short").is_none(), "expired before the move");
    let kept: Vec<u32> = (0..2000).filter(|&i| check(&c, i, old_cas)).collect();
    assert!((1800..2000).all(|i| kept.contains(&i)), "the newest are kept");
    assert!(kept.len() > 1500, "{} kept", kept.len());
    c.verify().unwrap();
}

#[test]
fn a_larger_tier_keeps_every_item() {
    let f = Files::new("grow-tier");
    let clock = ManualClock::new(T0);
    let old_cas = filled(&f, &clock, N);
    clock.advance(10);
    let c = sized(&f, &clock, 8, 128, 2).resize_file(true).build_shared().unwrap();
    assert_eq!(f.asides(), (false, false));
    assert!(std::fs::metadata(&f.tier).unwrap().len() > (128 * SEG) as u64, "the tier file grew");
    assert!((0..N).all(|i| check(&c, i, old_cas)), "every item kept");
    assert!(c.stats().flash_items > u64::from(N) / 2);
    c.verify().unwrap();
    c.close().unwrap();
    let c = sized(&f, &clock, 8, 128, 2).build_shared().unwrap();
    assert!((0..N).all(|i| check(&c, i, old_cas)), "and warm at the new size");
}

#[test]
fn a_smaller_tier_keeps_the_newest_items() {
    let f = Files::new("shrink-tier");
    let clock = ManualClock::new(T0);
    let old_cas = filled(&f, &clock, N);
    clock.advance(10);
    let c = sized(&f, &clock, 8, 8, 2).resize_file(true).build_shared().unwrap();
    assert_eq!(f.asides(), (false, false));
    let kept: Vec<u32> = (0..N).filter(|&i| check(&c, i, old_cas)).collect();
    assert!((N - 50..N).all(|i| kept.contains(&i)), "the newest are kept");
    assert!(kept.len() > 100 && kept.len() < 900, "{} kept", kept.len());
    assert!(kept.iter().filter(|&&i| i < 300).count() < 30, "few of the oldest");
    assert!(c.stats().flash_items > 100);
    c.verify().unwrap();
}

#[test]
fn without_the_option_a_tier_of_another_size_starts_cold_and_the_heap_stays_warm() {
    let f = Files::new("cold");
    let clock = ManualClock::new(T0);
    filled(&f, &clock, N);
    let c = sized(&f, &clock, 8, 128, 2).build_shared().unwrap();
    assert_eq!(c.stats().flash_items, 0, "the tier started cold");
    let served = (0..N).filter(|&i| c.get(&key(i)).is_some_and(|it| it.value == value(i))).count();
    assert!(served > 100 && served < 1000, "the heap's items only: {served}");
    assert_eq!(f.asides(), (false, false));
}

/// The table is sized for the heap and the tier together: with the default hash power, another
/// tier size is another heap layout, refused as one without the option (the files left as they
/// were) and moved with it.
#[test]
fn with_the_default_hash_power_another_tier_size_is_refused_without_the_option() {
    let f = Files::new("hash-power");
    let clock = ManualClock::new(T0);
    let open = |flash: usize| default_power(&f, &clock, 8, flash, 2);
    let c = open(64).build_shared().unwrap();
    let old_cas = fill(&c, N);
    c.close().unwrap();
    let (heap, tier) = (std::fs::read(&f.heap).unwrap(), std::fs::read(&f.tier).unwrap());
    let err = open(256).build_shared().unwrap_err();
    assert!(matches!(err, segcache_core::Error::BadFile { ref reason, .. } if reason.contains("hash power")), "{err}");
    assert!(std::fs::read(&f.heap).unwrap() == heap && std::fs::read(&f.tier).unwrap() == tier, "left as they were");
    clock.advance(10);
    let c = open(256).resize_file(true).build_shared().unwrap();
    assert!((0..N).all(|i| check(&c, i, old_cas)), "every item kept");
}

#[test]
fn a_torn_flash_entry_is_left_behind_and_the_rest_move() {
    let f = Files::new("torn");
    let clock = ManualClock::new(T0);
    let old_cas = filled(&f, &clock, N);
    // Every 4 KiB block of the flash segments gets a flipped byte 100 bytes in: the entries
    // there fail their checks.
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&f.tier).unwrap();
    let len = file.metadata().unwrap().len();
    let area = len - (64 * SEG) as u64;
    let mut at = area + 100;
    while at < len {
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, at).unwrap();
        file.write_all_at(&[b[0] ^ 0x40], at).unwrap();
        at += 4096;
    }
    drop(file);
    clock.advance(10);
    let c = sized(&f, &clock, 32, 64, 4).resize_file(true).build_shared().unwrap();
    let kept = (0..N).filter(|&i| check(&c, i, old_cas)).count();
    assert!(kept > 300 && kept < N as usize, "torn entries stay behind, the rest move: {kept}");
    c.verify().unwrap();
}

/// A move cut short after both files went aside: the new files at their paths are thrown away and
/// the move starts again from the old ones.
#[test]
fn a_move_cut_short_starts_again_from_both_files_left_aside() {
    let f = Files::new("resume");
    let clock = ManualClock::new(T0);
    let old_cas = filled(&f, &clock, N);
    std::fs::rename(&f.heap, aside(&f.heap)).unwrap();
    std::fs::rename(&f.tier, aside(&f.tier)).unwrap();
    // The new files as a crash left them: made with the new sizes, holding some other item.
    let partial = sized(&f, &clock, 32, 64, 4).build_shared().unwrap();
    partial.set(b"half-moved", b"x", 0, Duration::ZERO).unwrap();
    partial.close().unwrap();
    clock.advance(10);
    let c = sized(&f, &clock, 32, 64, 4).resize_file(true).build_shared().unwrap();
    assert_eq!(f.asides(), (false, false));
    assert!(c.get(b"half-moved").is_none(), "the partial files were thrown away");
    assert!((0..N).all(|i| check(&c, i, old_cas)));
}

/// A crash between the two renames: the heap's file is aside, the tier's still in place, and it
/// is the old tier.
#[test]
fn a_move_cut_short_before_the_tier_went_aside_keeps_its_flash_items() {
    let f = Files::new("half-aside");
    let clock = ManualClock::new(T0);
    let old_cas = filled(&f, &clock, N);
    std::fs::rename(&f.heap, aside(&f.heap)).unwrap();
    clock.advance(10);
    let c = sized(&f, &clock, 32, 64, 4).resize_file(true).build_shared().unwrap();
    assert_eq!(f.asides(), (false, false));
    assert!((0..N).all(|i| check(&c, i, old_cas)));
}

/// A crash after the move was done but before the tier's file aside was removed: the new cache
/// opens, and the file aside goes.
#[test]
fn a_tier_file_left_aside_after_a_finished_move_is_removed() {
    let f = Files::new("done");
    let clock = ManualClock::new(T0);
    let old_cas = filled(&f, &clock, N);
    clock.advance(10);
    sized(&f, &clock, 32, 64, 4).resize_file(true).build_shared().unwrap().close().unwrap();
    std::fs::write(aside(&f.tier), b"left by a crash").unwrap();
    let c = sized(&f, &clock, 32, 64, 4).resize_file(true).build_shared().unwrap();
    assert_eq!(f.asides(), (false, false));
    assert!((0..N).all(|i| check(&c, i, old_cas)));
}

/// The child of the crash test: reopens the files at `base` with the new sizes, moving the items,
/// and exits; the parent kills it somewhere along the way.
#[test]
fn tier_resize_child() {
    let Ok(base) = std::env::var(CHILD) else { return };
    let f = Files::at(Path::new(&base));
    let clock = ManualClock::new(T0 + 10);
    let c = sized(&f, &clock, 32, 512, 4).resize_file(true).build_shared().unwrap();
    drop(c);
    std::mem::forget(f);
    std::process::exit(0);
}

/// A process killed at any moment of a resize: the next open finds the old cache (and moves its
/// items, those on flash included) or the new one, every item served with its own value.
#[test]
fn a_resize_killed_at_any_moment_leaves_the_old_cache_or_the_new_one() {
    let f = Files::new("killed");
    let clock = ManualClock::new(T0);
    let run = || {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["tier_resize_child", "--exact", "--nocapture"])
            .env(CHILD, f.heap.with_extension(""))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        (Instant::now(), child)
    };
    // One whole run, timed from the moment the heap's file goes aside.
    filled_large(&f, &clock);
    let (_, mut child) = run();
    let start = loop {
        if aside(&f.heap).exists() {
            break Instant::now();
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    assert!(child.wait().unwrap().success());
    let whole = start.elapsed().max(Duration::from_millis(1));
    let mut cut_short = 0;
    for round in 0..8u32 {
        f.remove();
        let (old_cas, held) = filled_large(&f, &clock);
        let (began, mut child) = run();
        while !aside(&f.heap).exists() && began.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_micros(100));
        }
        std::thread::sleep(whole * round / 8);
        // SIGKILL: nothing of the child's runs after it.
        let _ = child.kill();
        let _ = child.wait();
        if f.asides().0 {
            cut_short += 1;
        }
        let c = sized(&f, &clock, 32, 512, 4).resize_file(true).build_shared().unwrap();
        assert_eq!(f.asides(), (false, false), "round {round}");
        let mut served = 0;
        for i in 0..6000 {
            if let Some(item) = c.get(&key(i)) {
                assert_eq!(item.value, value(i), "round {round}: key {i}");
                assert_eq!(item.flags, i, "round {round}: key {i}");
                assert!(item.cas > old_cas, "round {round}: key {i}");
                served += 1;
            }
        }
        // The new cache is the larger: whichever of the two the kill left, every item is there.
        assert_eq!(served, held, "round {round}: the items the old cache held");
        c.verify().unwrap();
        c.close().unwrap();
    }
    assert!(cut_short > 0, "no kill landed in the middle of a move ({whole:?} a move)");
}
