//! The flash tier through the public API: items that eviction frees live on in the tier file and
//! are read back from it; deletes, overwrites, expiry and flushes reach them; a tier that fills
//! reclaims its oldest segment; a corrupted tier serves misses, never a wrong value.

use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use segcache_core::{Builder, Error, ManualClock, Policy, RemovalCause, Segcache, SharedCache};

const SEG: usize = 16 << 10;

#[path = "common/temp.rs"]
mod temp;

use temp::Temp;

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// A value that tells its key and version apart, of a size that varies with both.
fn value(i: usize, version: u8) -> Vec<u8> {
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(40 + (i * 37 + version as usize * 11) % 600, version);
    v
}

/// A cache of 4 heap segments of 16 KiB and `flash` flash segments.
fn tiered(tier: &Temp, flash: usize) -> Builder {
    Builder::new().heap_size(4 * SEG).segment_size(SEG).eviction(Policy::Fifo).tier(&tier.0, (flash * SEG) as u64)
}

fn fill(c: &mut Segcache, n: usize) {
    for i in 0..n {
        c.set(&key(i), &value(i, 0), i as u32, Duration::ZERO).unwrap();
    }
}

#[test]
fn items_evicted_from_a_tiny_heap_are_read_back_from_flash() {
    let t = Temp::new("read-back");
    let mut c = tiered(&t, 64).build().unwrap();
    fill(&mut c, 1500);
    let s = c.stats();
    assert!(s.flash_demoted > 1000 && s.flash_items > 1000, "{s:?}");
    assert_eq!((s.flash_reclaimed_segments, s.flash_demotions_dropped, s.evicted_items), (0, 0, 0));
    for i in 0..1500 {
        let item = c.get(&key(i)).unwrap_or_else(|| panic!("key {i} lost"));
        assert_eq!((item.value(), item.flags()), (&value(i, 0)[..], i as u32));
    }
    assert!(c.stats().flash_hits > 1000);
    c.verify().unwrap();
}

#[test]
fn a_write_to_a_flash_item_sees_it_and_a_delete_or_overwrite_replaces_it() {
    let t = Temp::new("writes");
    let mut c = tiered(&t, 64).build().unwrap();
    fill(&mut c, 1000);
    assert!(c.record_location(&key(0)).is_none(), "key 0 is on flash");
    let cas = c.get(&key(1)).unwrap().cas();
    assert!(matches!(c.add(&key(0), b"x", 0, Duration::ZERO), Err(Error::NotStored)));
    c.append(&key(2), b"+tail").unwrap();
    assert_eq!(c.get(&key(2)).unwrap().value(), [&value(2, 0)[..], b"+tail"].concat());
    c.cas(&key(1), b"swapped", 5, Duration::ZERO, cas).unwrap();
    assert_eq!(c.get(&key(1)).unwrap().value(), b"swapped");
    c.delete(&key(3)).unwrap();
    assert!(c.get(&key(3)).is_none() && !c.contains(&key(3)));
    c.set(&key(4), b"new", 0, Duration::ZERO).unwrap();
    assert_eq!(c.get(&key(4)).unwrap().value(), b"new");
    c.verify().unwrap();
    // Pushed out again, each keeps its latest version.
    for i in 1000..2000 {
        c.set(&key(i), &value(i, 0), 0, Duration::ZERO).unwrap();
    }
    assert_eq!(c.get(&key(1)).unwrap().value(), b"swapped");
    assert_eq!(c.get(&key(4)).unwrap().value(), b"new");
    assert!(c.get(&key(3)).is_none());
    c.verify().unwrap();
}

#[test]
fn an_old_version_that_its_own_write_evicts_is_replaced_not_evicted() {
    // Each write goes to the key written longest ago of those still in DRAM, whose version lies
    // in the oldest heap segment: the segments these writes open evict it under its own write.
    // That version is not demoted (the write replaces it) and not lost either: nothing counts
    // as evicted, and the listener hears of a replacement, not of an eviction.
    for policy in [Policy::Fifo, Policy::Merge] {
        own_write_evicts_its_old_version(policy);
    }
}

fn own_write_evicts_its_old_version(policy: Policy) {
    let t = Temp::new("own-write");
    let heard = Arc::new(Mutex::new((0usize, 0usize)));
    let tell = heard.clone();
    let mut c = tiered(&t, 64)
        .eviction(policy)
        .eviction_listener(move |_, cause| {
            let mut h = tell.lock().unwrap();
            match cause {
                RemovalCause::Evicted => h.0 += 1,
                RemovalCause::Replaced => h.1 += 1,
                _ => {}
            }
        })
        .build()
        .unwrap();
    const KEYS: usize = 600;
    fill(&mut c, KEYS);
    let mut order: std::collections::VecDeque<usize> = (0..KEYS).collect();
    let mut version = vec![0u8; KEYS];
    let overwrites = 1000;
    for _ in 0..overwrites {
        let at = order.iter().position(|&i| c.record_location(&key(i)).is_some()).unwrap();
        let i = order.remove(at).unwrap();
        version[i] = version[i].wrapping_add(1);
        c.set(&key(i), &value(i, version[i]), i as u32, Duration::ZERO).unwrap();
        order.push_back(i);
    }
    let s = c.stats();
    assert!(s.evicted_segments > 10 && s.flash_demoted > 0, "{policy:?}: {s:?}");
    assert_eq!((s.evicted_items, s.evicted_unfetched, s.flash_demotions_dropped), (0, 0, 0), "{policy:?}: {s:?}");
    assert_eq!(*heard.lock().unwrap(), (0, overwrites), "{policy:?}: one replacement per overwrite, no eviction");
    for (i, &v) in version.iter().enumerate() {
        let item = c.get(&key(i)).unwrap_or_else(|| panic!("{policy:?}: key {i} lost"));
        assert_eq!((item.value(), item.flags()), (&value(i, v)[..], i as u32), "{policy:?}: key {i}");
    }
    c.verify().unwrap();
}

#[test]
fn a_full_tier_reclaims_its_oldest_segment_first() {
    let t = Temp::new("reclaim");
    let mut c = tiered(&t, 8).build().unwrap();
    fill(&mut c, 5000);
    let s = c.stats();
    assert!(s.flash_reclaimed_segments > 0 && s.evicted_items > 0, "{s:?}");
    assert!(c.get(&key(0)).is_none(), "the oldest went with the first segment reclaimed");
    assert_eq!(c.get(&key(4999)).unwrap().value(), &value(4999, 0)[..]);
    let kept = (0..5000).filter(|&i| c.get(&key(i)).is_some_and(|it| it.value() == value(i, 0))).count();
    let served = (0..5000).filter(|&i| c.get(&key(i)).is_some()).count();
    assert_eq!(kept, served, "everything served is the value stored");
    assert!(served > 300, "{served}");
    c.verify().unwrap();
}

#[test]
fn flash_items_expire_with_their_segment_and_go_with_a_flush() {
    let t = Temp::new("expiry");
    let clock = ManualClock::new(1_000_000);
    let mut c = tiered(&t, 64).clock(clock.clone()).build().unwrap();
    for i in 0..1000 {
        c.set(&key(i), &value(i, 0), 0, Duration::from_secs(100)).unwrap();
    }
    assert!(c.get(&key(0)).is_some() && c.record_location(&key(0)).is_none());
    clock.advance(200);
    let before = c.stats().flash_bad_reads;
    assert!(c.get(&key(0)).is_none());
    assert_eq!(c.stats().flash_bad_reads, before, "an expired flash segment needs no read");
    assert!(c.set(&key(0), b"again", 0, Duration::ZERO).is_ok());
    assert_eq!(c.get(&key(0)).unwrap().value(), b"again");
    fill(&mut c, 800);
    assert!(c.stats().flash_items > 0);
    c.flush();
    assert_eq!(c.stats().flash_items, 0);
    assert!((0..800).all(|i| c.get(&key(i)).is_none()));
    c.verify().unwrap();
}

/// Every byte of the tier overwritten, a block at a time, with noise or with another block of
/// it: reads miss, and what is served is always the value stored.
#[test]
fn a_corrupted_tier_serves_misses_never_a_wrong_value() {
    let t = Temp::new("corrupt");
    let mut c = tiered(&t, 64).build().unwrap();
    fill(&mut c, 1500);
    c.sync().unwrap(); // every image on the file
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&t.0).unwrap();
    let len = file.metadata().unwrap().len();
    let mut block = vec![0u8; 4096];
    for (n, at) in (0..len).step_by(4096).enumerate() {
        if n % 3 == 0 {
            block.iter_mut().enumerate().for_each(|(i, b)| *b = (i * 31 + n) as u8);
        } else if n % 3 == 1 {
            file.read_exact_at(&mut block, (at + 8192) % len).unwrap();
        } else {
            file.read_exact_at(&mut block, at).unwrap();
            block[(n * 97) % 4096] ^= 0x40;
        }
        file.write_all_at(&block, at).unwrap();
    }
    let mut served = 0;
    for i in 0..1500 {
        if let Some(item) = c.get(&key(i)) {
            assert_eq!(item.value(), &value(i, 0)[..], "key {i}");
            served += 1;
        }
    }
    let s = c.stats();
    assert!(s.flash_bad_reads > 500 && served < 1500, "{served} served; {s:?}");
    // Writes to those keys go on as if they had been evicted.
    for i in 0..1500 {
        c.set(&key(i), &value(i, 1), 0, Duration::ZERO).unwrap();
    }
    assert_eq!(c.get(&key(1499)).unwrap().value(), &value(1499, 1)[..]);
    c.verify().unwrap();
}

#[test]
fn the_shared_cache_reads_flash_items_under_its_lock() {
    let t = Temp::new("shared");
    let c = Builder::new()
        .heap_size(8 * SEG)
        .segment_size(SEG)
        .shards(2)
        .eviction(Policy::Fifo)
        .tier(&t.0, (64 * SEG) as u64)
        .build_shared()
        .unwrap();
    for i in 0..1500 {
        c.set(&key(i), &value(i, 0), 0, Duration::ZERO).unwrap();
    }
    assert!(c.stats().flash_items > 1000);
    for i in 0..1500 {
        assert_eq!(c.get(&key(i)).map(|it| it.value).as_deref(), Some(&value(i, 0)[..]), "key {i}");
    }
    c.delete(&key(0)).unwrap();
    assert!(c.get(&key(0)).is_none());
    assert!(c.stats().flash_hits > 1000);
}

#[test]
fn tier_sizes_are_checked() {
    let t = Temp::new("sizes");
    let bad = |b: Builder| matches!(b.build_shared(), Err(Error::InvalidConfig(_)));
    let base = || Builder::new().heap_size(4 * SEG).segment_size(SEG).shards(1);
    assert!(bad(base().tier(&t.0, SEG as u64 + 1)), "not whole segments");
    assert!(bad(base().tier(&t.0, SEG as u64)), "fewer than 2");
    assert!(bad(base().shards(2).heap_size(8 * SEG).tier(&t.0, 3 * SEG as u64)), "not even over shards");
    assert!(bad(base().path(&t.0).multi_process(true).tier(&t.0, 4 * SEG as u64)));
    assert!(bad(base().path(&t.0).tier(&t.0, 4 * SEG as u64)), "the heap's own file");
    assert!(base().tier(&t.0, 2 * SEG as u64).build_shared().is_ok());
}

/// Fills a persistent heap and its tier with keys `0..n`, then deletes every tenth key from 3
/// and overwrites every tenth from 5 (which brings it back to DRAM first): what each key holds.
fn fill_and_change(c: &mut Segcache, n: usize) -> Vec<Option<Vec<u8>>> {
    fill(c, n);
    let mut expect: Vec<Option<Vec<u8>>> = (0..n).map(|i| Some(value(i, 0))).collect();
    for i in (3..n).step_by(10) {
        c.delete(&key(i)).unwrap();
        expect[i] = None;
    }
    for i in (5..n).step_by(10) {
        c.set(&key(i), &value(i, 1), i as u32, Duration::ZERO).unwrap();
        expect[i] = Some(value(i, 1));
    }
    expect
}

/// Every key holds what `expect` says, or (`may_miss`) nothing; how many were served.
fn check_all(get: impl Fn(&[u8]) -> Option<Vec<u8>>, expect: &[Option<Vec<u8>>], may_miss: bool) -> usize {
    let mut served = 0;
    for (i, want) in expect.iter().enumerate() {
        let got = get(&key(i));
        if got.is_some() {
            served += 1;
        }
        if !(may_miss && got.is_none()) {
            assert_eq!(got.as_deref(), want.as_deref(), "key {i}");
        }
    }
    served
}

/// A heap file reopened after a graceful close (or drop) with its tier serves every item it
/// held, those on flash included, read from flash; deletes and overwrites stay done. The reopened
/// tier goes on being written and reclaimed, and comes back again.
#[test]
fn a_reopened_heap_file_serves_its_flash_items_warm() {
    let (heap, t) = (Temp::new("heap"), Temp::new("reopen"));
    let mut c = tiered(&t, 64).path(&heap.0).build().unwrap();
    let mut expect = fill_and_change(&mut c, 1000);
    let on_flash = c.stats().flash_items;
    assert!(on_flash > 500, "{:?}", c.stats());
    c.close().unwrap();
    let mut c = tiered(&t, 64).path(&heap.0).build().unwrap();
    assert_eq!(c.stats().flash_items, on_flash, "every flash slot counted again");
    c.verify().unwrap();
    assert_eq!(check_all(|k| c.get(k).map(|it| it.value().to_vec()), &expect, false), 900);
    assert!(c.stats().flash_hits >= on_flash, "{:?}", c.stats());
    // More writes: the ring goes on where it was, reclaiming its oldest segments.
    for i in 1000..4000 {
        c.set(&key(i), &value(i, 2), 0, Duration::ZERO).unwrap();
        expect.push(Some(value(i, 2)));
    }
    assert!(c.stats().flash_reclaimed_segments > 0);
    c.verify().unwrap();
    drop(c);
    let c = tiered(&t, 64).path(&heap.0).build().unwrap();
    c.verify().unwrap();
    let served = check_all(|k| c.get(k).map(|it| it.value().to_vec()), &expect, true);
    assert!(served > 1200 && c.stats().flash_hits > 1000, "{served} served; {:?}", c.stats());
}

/// A flush reaches the tier's records: a heap file reopened after one finds nothing on flash.
#[test]
fn a_flushed_heap_file_reopens_with_nothing_on_flash() {
    let (heap, t) = (Temp::new("heap-f"), Temp::new("tier-f"));
    let mut c = tiered(&t, 64).path(&heap.0).build().unwrap();
    fill(&mut c, 1000);
    assert!(c.stats().flash_items > 500);
    c.flush();
    c.set(&key(0), &value(0, 1), 0, Duration::ZERO).unwrap();
    drop(c);
    let c = tiered(&t, 64).path(&heap.0).build().unwrap();
    assert_eq!(c.stats().flash_items, 0);
    assert_eq!(c.get(&key(0)).unwrap().value(), &value(0, 1)[..]);
    assert!((1..1000).all(|i| c.get(&key(i)).is_none()));
    c.verify().unwrap();
}

fn shared(heap: &Temp, t: &Temp) -> SharedCache {
    Builder::new()
        .heap_size(8 * SEG)
        .segment_size(SEG)
        .shards(2)
        .eviction(Policy::Fifo)
        .path(&heap.0)
        .tier(&t.0, (64 * SEG) as u64)
        .build_shared()
        .unwrap()
}

#[test]
fn a_reopened_shared_cache_serves_its_flash_items_warm() {
    let (heap, t) = (Temp::new("shared-heap"), Temp::new("shared-reopen"));
    let c = shared(&heap, &t);
    let mut expect = Vec::new();
    for i in 0..1500 {
        c.set(&key(i), &value(i, 0), 0, Duration::ZERO).unwrap();
        expect.push(Some(value(i, 0)));
    }
    for i in (3..1500).step_by(10) {
        c.delete(&key(i)).unwrap();
        expect[i] = None;
    }
    let on_flash = c.stats().flash_items;
    assert!(on_flash > 1000);
    drop(c);
    let c = shared(&heap, &t);
    assert_eq!(c.stats().flash_items, on_flash);
    assert_eq!(check_all(|k| c.get(k).map(|it| it.value), &expect, false), 1350);
    assert!(c.stats().flash_hits >= on_flash);
}

/// Fills a heap file and its tier, closes it, and returns what each key holds.
fn closed_with_tier(heap: &Temp, t: &Temp, version: u8) -> Vec<Option<Vec<u8>>> {
    let mut c = tiered(t, 64).path(&heap.0).build().unwrap();
    for i in 0..1000 {
        c.set(&key(i), &value(i, version), 0, Duration::ZERO).unwrap();
    }
    assert!(c.stats().flash_items > 500);
    c.close().unwrap();
    (0..1000).map(|i| Some(value(i, version))).collect()
}

/// Reopens `heap` with tier file `t` of `flash` segments and checks that it starts cold: no
/// flash item, and what is served (from DRAM) is what `expect` says.
fn reopens_cold(heap: &Temp, t: &Temp, flash: usize, expect: &[Option<Vec<u8>>]) {
    // The table's size, which follows the tier's by default, is the file's.
    let c = tiered(t, flash).hash_power(11).path(&heap.0).build().unwrap();
    assert_eq!(c.stats().flash_items, 0);
    c.verify().unwrap();
    let served = check_all(|k| c.get(k).map(|it| it.value().to_vec()), expect, true);
    assert!(served > 0 && served < 500, "{served}");
    assert_eq!(c.stats().flash_hits, 0);
}

/// A tier file written beside another heap file is not trusted, even of the same sizes and
/// holding entries of the same keys: the tier starts cold. Neither is the heap's own after that.
#[test]
fn a_tier_file_of_another_heap_is_not_trusted() {
    let (a, b) = (Temp::new("heap-a"), Temp::new("heap-b"));
    let (ta, tb) = (Temp::new("tier-a"), Temp::new("tier-b"));
    let expect_a = closed_with_tier(&a, &ta, 0);
    let expect_b = closed_with_tier(&b, &tb, 1);
    reopens_cold(&a, &tb, 64, &expect_a);
    // `tb` now belongs to `a`'s new tier: `b` does not trust it either, nor `a` its old one.
    reopens_cold(&b, &tb, 64, &expect_b);
    reopens_cold(&a, &ta, 64, &expect_a);
    // A copy of a heap file, taken after a close, no longer matches the tier once the original
    // has reopened with it.
    let (copy, tc) = (Temp::new("heap-copy"), Temp::new("tier-copy"));
    let expect_c = closed_with_tier(&copy, &tc, 2);
    let c = Temp::new("heap-copy-2");
    std::fs::copy(&copy.0, &c.0).unwrap();
    tiered(&tc, 64).path(&copy.0).build().unwrap().close().unwrap();
    reopens_cold(&c, &tc, 64, &expect_c);
}

/// A tier file cut short, with a corrupt header, of another size, or without a heap file of its
/// own, starts cold; a corrupt record drops only its segment's items.
#[test]
fn a_corrupt_truncated_or_resized_tier_file_starts_cold() {
    let (heap, t) = (Temp::new("heap-c"), Temp::new("tier-c"));
    let expect = closed_with_tier(&heap, &t, 0);
    let file = || std::fs::OpenOptions::new().read(true).write(true).open(&t.0).unwrap();
    // One record's checksum broken: the rest stays warm.
    let at = 4096 + 32 * 3;
    let mut b = [0u8; 1];
    file().read_exact_at(&mut b, at).unwrap();
    file().write_all_at(&[b[0] ^ 1], at).unwrap();
    {
        let c = tiered(&t, 64).path(&heap.0).build().unwrap();
        let on_flash = c.stats().flash_items;
        assert!(on_flash > 400, "{on_flash}");
        c.verify().unwrap();
        let served = check_all(|k| c.get(k).map(|it| it.value().to_vec()), &expect, true);
        assert!(served > 500 && served < 1000, "{served}");
        c.close().unwrap();
    }
    let expect = closed_with_tier(&heap, &t, 2);
    file().write_all_at(&[0xff], 12).unwrap();
    reopens_cold(&heap, &t, 64, &expect);
    let expect = closed_with_tier(&heap, &t, 3);
    let len = file().metadata().unwrap().len();
    file().set_len(len / 2).unwrap();
    reopens_cold(&heap, &t, 64, &expect);
    let expect = closed_with_tier(&heap, &t, 4);
    reopens_cold(&heap, &t, 128, &expect);
    // A heap without a file starts its tier cold too, whatever the file holds.
    let expect = closed_with_tier(&heap, &t, 5);
    let c = tiered(&t, 64).build().unwrap();
    assert_eq!(c.stats().flash_items, 0);
    assert!((0..1000).all(|i| c.get(&key(i)).is_none()));
    drop(c);
    reopens_cold(&heap, &t, 64, &expect);
}

/// A heap file reopened once without its tier no longer trusts it: the tier file could have
/// changed meanwhile, and its slots could have been overwritten without it.
#[test]
fn a_heap_reopened_without_its_tier_no_longer_trusts_it() {
    let (heap, t) = (Temp::new("heap-d"), Temp::new("tier-d"));
    let expect = closed_with_tier(&heap, &t, 0);
    let without = Builder::new().heap_size(4 * SEG).segment_size(SEG).hash_power(11).eviction(Policy::Fifo);
    let c = without.path(&heap.0).build().unwrap();
    c.close().unwrap();
    reopens_cold(&heap, &t, 64, &expect);
}

/// The same writes into a heap of 4 segments of 16 KiB, by `policy`, with a tier of 256 such
/// segments and without one: new keys only, of varied sizes and in two TTL buckets, so that what
/// stays in DRAM depends on the policy alone. Both tables are sized alike, so that a full chain
/// evicts nothing in either.
fn both_ways(policy: Policy, tier: &Temp, n: usize) -> (Segcache, Segcache) {
    let base = || {
        Builder::new()
            .heap_size(4 * SEG)
            .segment_size(SEG)
            .hash_power(12)
            .eviction(policy)
            .clock(ManualClock::new(1_000_000))
    };
    let mut with = base().tier(&tier.0, (256 * SEG) as u64).build().unwrap();
    let mut without = base().build().unwrap();
    for c in [&mut with, &mut without] {
        for i in 0..n {
            let ttl = if i % 3 == 0 { Duration::from_secs(86_400) } else { Duration::ZERO };
            c.set(&key(i), &value(i, 0), i as u32, ttl).unwrap();
        }
    }
    (with, without)
}

/// Every eviction policy gives what it evicts to the tier: what a cache without a tier drops is
/// served from flash, with its value and flags exactly; what stays in DRAM stays in the same
/// place as without a tier, so the tier changes nothing of what the policy keeps.
#[test]
fn every_policy_demotes_what_it_evicts() {
    let n = 2000;
    for policy in &Policy::ALL[1..] {
        let t = Temp::new("policies");
        let (with, without) = both_ways(*policy, &t, n);
        let (s, plain) = (with.stats(), without.stats());
        assert!(plain.evicted_items > n as u64 / 2, "{policy}: the heap overflowed: {plain:?}");
        assert_eq!(s.flash_demoted, plain.evicted_items, "{policy}: every item evicted went to flash; {s:?}");
        assert_eq!((s.evicted_items, s.flash_reclaimed_segments, s.flash_demotions_dropped), (0, 0, 0), "{policy}");
        assert_eq!(s.merged_items, plain.merged_items, "{policy}");
        let (mut from_flash, mut flash_bytes) = (0, 0);
        for i in 0..n {
            let k = key(i);
            assert_eq!(with.record_location(&k), without.record_location(&k), "{policy}: key {i} moved in DRAM");
            let item = with.get(&k).unwrap_or_else(|| panic!("{policy}: key {i} lost"));
            assert_eq!((item.value(), item.flags()), (&value(i, 0)[..], i as u32), "{policy}: key {i}");
            match without.get(&k) {
                Some(item) => assert_eq!(item.value(), &value(i, 0)[..], "{policy}: key {i}"),
                None => {
                    assert!(with.record_location(&k).is_none(), "{policy}: key {i}");
                    from_flash += 1;
                    flash_bytes += (k.len() + value(i, 0).len()) as u64;
                }
            }
        }
        assert_eq!(from_flash as u64, plain.evicted_items, "{policy}");
        let s = with.stats();
        assert_eq!(s.flash_hits, from_flash as u64, "{policy}");
        // Each record adds a header of a few bytes to its key and value; each entry a 24-byte head.
        let n_flash = from_flash as u64;
        assert!((flash_bytes..flash_bytes + 16 * n_flash).contains(&s.flash_bytes_read), "{policy}: {s:?}");
        assert!(s.flash_bytes_written >= flash_bytes + 24 * n_flash, "{policy}: {s:?}");
        with.verify().unwrap();
    }
}

/// Merge keeps the items read most and drops the rest: with a tier, those go to flash, and the
/// ones kept in DRAM are the same as without one.
#[test]
fn merge_demotes_the_items_it_does_not_keep() {
    let t = Temp::new("merge");
    let mut c = Builder::new()
        .heap_size(4 * SEG)
        .segment_size(SEG)
        .eviction(Policy::Merge)
        .tier(&t.0, (256 * SEG) as u64)
        .build()
        .unwrap();
    for i in 0..3000 {
        c.set(&key(i), &value(i, 0), 0, Duration::ZERO).unwrap();
        // The recent tenth keys are read: merges keep them.
        for j in (i.saturating_sub(100)..i).filter(|j| j % 10 == 0) {
            assert_eq!(c.get(&key(j)).map(|it| it.value().to_vec()), Some(value(j, 0)), "key {j}");
        }
    }
    let s = c.stats();
    assert!(s.merged_items > 0 && s.flash_demoted > 1000, "{s:?}");
    assert_eq!(s.evicted_items, 0, "{s:?}");
    for i in 0..3000 {
        assert_eq!(c.get(&key(i)).map(|it| it.value().to_vec()), Some(value(i, 0)), "key {i}");
    }
    c.verify().unwrap();
}

/// A run of reads with no write between serves every flash item, however long: a shared
/// cache's reads hand each item to the caller and hold nothing after.
#[test]
fn a_long_run_of_reads_serves_every_flash_item() {
    let t = Temp::new("long-reads");
    let c = Builder::new()
        .heap_size(4 * SEG)
        .segment_size(SEG)
        .shards(1)
        .eviction(Policy::Fifo)
        .tier(&t.0, (1024 * SEG) as u64)
        .build_shared()
        .unwrap();
    for i in 0..10_000 {
        c.set(&key(i), &value(i, 0), 0, Duration::ZERO).unwrap();
    }
    let missed: Vec<usize> = (0..10_000).filter(|&i| c.get(&key(i)).map(|it| it.value) != Some(value(i, 0))).collect();
    assert!(missed.is_empty(), "{} missed, the first {:?}", missed.len(), &missed[..missed.len().min(5)]);
}

/// Batched reads serve every flash item of a long run too, by each of the shared handle's
/// paths: lock-free batches (no file), one shard's batch and batches grouped by shard (a file).
#[test]
fn a_long_run_of_batched_reads_serves_every_flash_item() {
    for (file, shards) in [(false, 1), (true, 1), (true, 2)] {
        let t = Temp::new("long-batches");
        let heap = Temp::new("long-batches-heap");
        let mut b = Builder::new()
            .heap_size(4 * shards * SEG)
            .segment_size(SEG)
            .shards(shards)
            .eviction(Policy::Fifo)
            .tier(&t.0, (1024 * shards * SEG) as u64);
        if file {
            b = b.path(&heap.0);
        }
        let c = b.build_shared().unwrap();
        for i in 0..10_000 {
            c.set(&key(i), &value(i, 0), 0, Duration::ZERO).unwrap();
        }
        assert!(c.stats().flash_items > 5_000, "most items live on the tier");
        let keys: Vec<Vec<u8>> = (0..10_000).map(key).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let mut got = vec![false; keys.len()];
        c.get_many_with(&refs, |i, item| {
            assert_eq!(item.value(), &value(i, 0)[..], "key {i}");
            assert!(!got[i], "key {i} answered twice");
            got[i] = true;
        });
        let missed = got.iter().filter(|&&g| !g).count();
        assert_eq!(missed, 0, "file {file}, {shards} shards: {missed} keys missed");
    }
}

/// The single owner's `get_with` serves a long run of flash reads with no write between and
/// holds nothing; `get` serves the same run within what the engine holds until the next write.
#[test]
fn a_long_run_of_single_owner_reads_serves_every_flash_item() {
    let t = Temp::new("long-single");
    let mut c = Builder::new()
        .heap_size(4 * SEG)
        .segment_size(SEG)
        .eviction(Policy::Fifo)
        .tier(&t.0, (1024 * SEG) as u64)
        .build()
        .unwrap();
    for i in 0..10_000 {
        c.set(&key(i), &value(i, 0), 0, Duration::ZERO).unwrap();
    }
    assert!(c.stats().flash_items > 5_000, "most items live on the tier");
    // More reads than `get` may hold between two writes.
    for _ in 0..8 {
        let missed = (0..10_000).filter(|&i| c.get_with(&key(i), |it| it.value() == &value(i, 0)[..]) != Some(true));
        assert_eq!(missed.count(), 0);
    }
    let items: Vec<_> = (0..10_000).map(|i| c.get(&key(i))).collect();
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item.as_ref().map(|it| it.value()), Some(&value(i, 0)[..]), "key {i}");
    }
}

/// A read that may take an item's recache token (memcached's `mg ... R`) finds the item on
/// flash: exactly one such read wins it, as in DRAM; the item comes back to DRAM for it.
#[test]
fn the_recache_token_of_an_item_on_flash_goes_to_exactly_one_reader() {
    let t = Temp::new("token");
    let c = tiered(&t, 64).build_shared().unwrap();
    for i in 0..1500 {
        c.set(&key(i), &value(i, 0), 0, Duration::from_secs(100)).unwrap();
    }
    assert!(c.stats().flash_items > 0);
    let hits = c.stats().flash_hits;
    assert!(c.get(&key(0)).is_some() && c.stats().flash_hits > hits, "read from flash");
    let opts = segcache_core::ReadOptions {
        claim_token: true,
        recache_below: Some(Duration::from_secs(1000)),
        no_update: false,
    };
    let read = || c.get_with_options(&key(0), opts, |it| (it.value().to_vec(), it.won(), it.token_sent()));
    assert_eq!(read(), Some((value(0, 0), true, false)), "the first read wins");
    assert_eq!(read(), Some((value(0, 0), false, true)), "the next sees it taken");
    let plain = segcache_core::ReadOptions { recache_below: None, ..opts };
    assert_eq!(c.get_with_options(&key(0), plain, |it| it.won()), Some(false));
}
