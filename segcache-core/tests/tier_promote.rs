//! Promotion on read (`Builder::tier_promote_after`): an item read on the flash tier often enough
//! comes back to DRAM at the shard's next write, whole, with its flags, CAS value and expiry; one
//! written or deleted meanwhile is left as the write made it.

use std::time::Duration;

use segcache_core::{Builder, ManualClock, Policy, Segcache, SharedCache};

const SEG: usize = 16 << 10;

#[path = "common/temp.rs"]
mod temp;

use temp::Temp;

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("{i}:").into_bytes();
    v.resize(40 + (i * 37) % 600, b'v');
    v
}

/// 4 heap segments of 16 KiB over 64 flash segments, Fifo, promotion after `reads`.
fn tiered(t: &Temp, reads: u8) -> Builder {
    Builder::new()
        .heap_size(4 * SEG)
        .segment_size(SEG)
        .eviction(Policy::Fifo)
        .tier(&t.0, (64 * SEG) as u64)
        .tier_promote_after(reads)
}

/// Stores keys 0..n with a TTL, so that the first ones end on flash.
fn fill(c: &mut Segcache, n: usize) {
    for i in 0..n {
        c.set(&key(i), &value(i), i as u32, Duration::from_secs(3600)).unwrap();
    }
}

fn on_flash(c: &Segcache, i: usize) -> bool {
    c.record_location(&key(i)).is_none() && c.contains(&key(i))
}

#[test]
fn an_item_read_as_often_as_asked_comes_back_whole_at_the_next_write() {
    let t = Temp::new("whole");
    let mut c = tiered(&t, 2).build().unwrap();
    fill(&mut c, 1000);
    assert!(on_flash(&c, 0) && on_flash(&c, 1));
    let before = c.get(&key(0)).map(|item| (item.cas(), item.expire_at())).unwrap();
    c.set(b"unrelated", b"x", 0, Duration::ZERO).unwrap();
    assert!(on_flash(&c, 0), "one read of two leaves it on flash");
    assert_eq!(c.stats().flash_promoted, 0);

    assert!(c.get(&key(0)).is_some());
    assert!(on_flash(&c, 0), "nothing moves until a write");
    c.set(b"unrelated", b"y", 0, Duration::ZERO).unwrap();
    assert!(!on_flash(&c, 0) && c.record_location(&key(0)).is_some(), "the second read brought it back");
    assert_eq!(c.stats().flash_promoted, 1);
    let item = c.get(&key(0)).unwrap();
    assert_eq!((item.value(), item.flags()), (&value(0)[..], 0));
    assert_eq!((item.cas(), item.expire_at()), before, "the same version, the same expiry");
    assert!(on_flash(&c, 1), "an item not read stays where it is");
    c.verify().unwrap();
}

#[test]
fn no_read_brings_an_item_back_when_promotion_is_off() {
    let t = Temp::new("off");
    let mut c = tiered(&t, 0).build().unwrap();
    fill(&mut c, 1000);
    for _ in 0..40 {
        assert!(c.get(&key(0)).is_some());
        c.set(b"unrelated", b"x", 0, Duration::ZERO).unwrap();
    }
    assert!(on_flash(&c, 0));
    assert_eq!(c.stats().flash_promoted, 0);
}

#[test]
fn a_key_written_or_deleted_after_its_read_keeps_what_the_write_did() {
    let t = Temp::new("written");
    let mut c = tiered(&t, 1).build().unwrap();
    fill(&mut c, 1000);
    assert!(on_flash(&c, 0) && on_flash(&c, 1) && on_flash(&c, 2));
    for i in 0..3 {
        assert!(c.get(&key(i)).is_some());
    }
    // The first write after the reads is itself a write to a wanted key.
    c.set(&key(0), b"new", 7, Duration::ZERO).unwrap();
    c.delete(&key(1)).unwrap();
    assert_eq!(c.get(&key(0)).map(|item| (item.value().to_vec(), item.flags())), Some((b"new".to_vec(), 7)));
    assert!(c.get(&key(1)).is_none());
    let item = c.get(&key(2)).expect("promoted");
    assert_eq!(item.value(), &value(2)[..]);
    assert!(c.record_location(&key(2)).is_some());
    c.verify().unwrap();
}

#[test]
fn an_item_expired_or_flushed_before_the_write_is_not_brought_back() {
    let t = Temp::new("expired");
    let clock = ManualClock::new(1_000_000);
    let mut c = tiered(&t, 1).clock(clock.clone()).build().unwrap();
    fill(&mut c, 1000);
    assert!(c.get(&key(0)).is_some());
    clock.advance(3601);
    c.set(b"unrelated", b"x", 0, Duration::ZERO).unwrap();
    assert!(c.get(&key(0)).is_none());
    assert_eq!(c.stats().flash_promoted, 0);
}

#[test]
fn the_shared_cache_promotes_what_its_readers_ask_for() {
    let t = Temp::new("shared");
    let c: SharedCache = tiered(&t, 1).shards(1).build_shared().unwrap();
    for i in 0..1000 {
        c.set(&key(i), &value(i), i as u32, Duration::ZERO).unwrap();
    }
    // The heap holds the last ~150 keys: the first 20 are on flash, each read there once.
    let flash_hits = || c.stats().flash_hits;
    let before = flash_hits();
    std::thread::scope(|s| {
        for part in [0..10, 10..20] {
            s.spawn(|| {
                for i in part {
                    assert_eq!(c.get(&key(i)).unwrap().value, value(i));
                }
            });
        }
    });
    assert_eq!(flash_hits() - before, 20);
    c.set(b"unrelated", b"x", 0, Duration::ZERO).unwrap();
    assert_eq!(c.stats().flash_promoted, 20);
    let before = flash_hits();
    for i in 0..20 {
        let item = c.get(&key(i)).unwrap();
        assert_eq!((item.value, item.flags), (value(i), i as u32));
    }
    assert_eq!(flash_hits(), before, "all 20 are read from DRAM now");
}

#[test]
fn a_store_that_could_rewrite_in_place_still_brings_wanted_items_back() {
    let t = Temp::new("in-place");
    let c: SharedCache = tiered(&t, 1).shards(1).build_shared().unwrap();
    for i in 0..1000 {
        c.set(&key(i), &value(i), i as u32, Duration::ZERO).unwrap();
    }
    // Key 999 is in DRAM: a store of a value of its length is a rewrite in place, under the
    // shared lock, until a read on the tier asks for an item back.
    let mut v = value(999);
    v[0] = b'X';
    c.set(&key(999), &v, 999, Duration::ZERO).unwrap();
    assert_eq!(c.stats().flash_promoted, 0);

    assert_eq!(c.get(&key(0)).unwrap().value, value(0));
    v[0] = b'Y';
    c.set(&key(999), &v, 999, Duration::ZERO).unwrap();
    assert_eq!(c.stats().flash_promoted, 1, "the store took the exclusive path and brought key 0 back");
    let before = c.stats().flash_hits;
    assert_eq!(c.get(&key(0)).unwrap().value, value(0));
    assert_eq!(c.get(&key(999)).unwrap().value, v);
    assert_eq!(c.stats().flash_hits, before, "key 0 is read from DRAM now");
}
