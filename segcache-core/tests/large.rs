//! Items larger than a segment holds (`Builder::max_item_size`): stored as chunks behind a head,
//! read whole or not at all, with the rules of every other item (TTL, CAS, eviction,
//! persistence), through both handles.

use std::path::PathBuf;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use segcache_core::{Builder, Error, ManualClock, Policy, Segcache, SharedCache, StoreMode, StoreOptions};

const SEGMENT: usize = 64 << 10;
const T0: u32 = 1_700_000_000;

/// A value of `len` bytes whose every byte depends on `version` and its position, so that a
/// chunk of another version, or one out of place, shows.
fn pattern(version: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i as u32 / 7).wrapping_mul(31) ^ version.wrapping_mul(0x9e37_79b9)) as u8).collect()
}

fn engine(heap: usize, max_item: usize) -> Segcache {
    Builder::new().heap_size(heap).segment_size(SEGMENT).max_item_size(max_item).build().unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("segcache-large-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// The largest value a single record under `key` holds (found by trying: it depends on the
/// header's widths), which a cache without `max_item_size` stores and no more.
fn largest_single(key: &[u8]) -> usize {
    let mut c = Builder::new().heap_size(4 << 20).segment_size(SEGMENT).build().unwrap();
    let (mut lo, mut hi) = (0, SEGMENT);
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if c.set(key, &vec![1; mid], 0, Duration::ZERO).is_ok() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[test]
fn values_around_every_boundary_round_trip() {
    let key = b"boundary";
    let single = largest_single(key);
    let mut c = engine(16 << 20, 4 << 20);
    let mut lens = vec![1, single - 1, single, single + 1, SEGMENT - 1, SEGMENT, SEGMENT + 1];
    // Around whole chunks: a chunk holds a little less than a segment.
    for k in 2..=5 {
        for d in [-300i64, -261, -260, -1, 0, 1, 261] {
            lens.push((k * SEGMENT as i64 + d) as usize);
        }
    }
    lens.push(3 << 20);
    for (v, &len) in lens.iter().enumerate() {
        let value = pattern(v as u32, len);
        c.set(key, &value, v as u32, Duration::ZERO).unwrap_or_else(|e| panic!("{len} bytes: {e}"));
        let got = c.get(key).unwrap_or_else(|| panic!("{len} bytes: a miss"));
        assert_eq!((got.value().len(), got.flags()), (len, v as u32), "{len} bytes");
        assert!(got.value() == value.as_slice(), "{len} bytes: the value differs");
        assert_eq!(c.get_with(key, |i| i.value() == value.as_slice()), Some(true), "{len} bytes, get_with");
    }
    // Only the last version's records remain: the head, its chunks, and nothing of the others;
    // and the item counts once.
    let s = c.stats();
    let chunks = (3usize << 20).div_ceil(SEGMENT - 300) as u64;
    assert_eq!((s.items, c.len()), (1, 1));
    assert!(s.bytes <= (3 << 20) + (chunks + 1) * 300, "{} bytes live", s.bytes);
    c.verify().unwrap();
    assert_eq!(c.keys(), vec![key.to_vec()], "chunks are not keys");
}

#[test]
fn without_max_item_size_an_item_must_fit_a_segment() {
    let mut c = Builder::new().heap_size(4 << 20).segment_size(SEGMENT).build().unwrap();
    let too = c.set(b"k", &vec![0; SEGMENT], 0, Duration::ZERO);
    assert!(matches!(too, Err(Error::TooLarge { .. })), "{too:?}");
    let mut c = engine(16 << 20, 1 << 20);
    assert_eq!(c.max_item_size(), 1 << 20);
    let over = c.set(b"k", &vec![0; 1 << 20], 0, Duration::ZERO);
    assert!(matches!(over, Err(Error::TooLarge { size, max: _ }) if size == (1 << 20) + 1), "{over:?}");
    c.set(b"k", &vec![0; (1 << 20) - 1], 0, Duration::ZERO).unwrap();
    // More than the shard's heap less four segments: refused whatever max_item_size allows.
    let mut small = engine(1 << 20, 4 << 20);
    let half = small.set(b"k", &vec![0; 800 << 10], 0, Duration::ZERO);
    assert!(matches!(half, Err(Error::TooLarge { .. })), "{half:?}");
    assert!(small.is_empty());
    small.verify().unwrap();
}

#[test]
fn overwrites_and_deletes_free_the_chunks() {
    let mut c = engine(16 << 20, 4 << 20);
    let big = pattern(1, 1 << 20);
    c.set(b"k", &big, 0, Duration::ZERO).unwrap();
    c.set(b"other", b"small", 0, Duration::ZERO).unwrap();
    c.set(b"k", b"small now", 0, Duration::ZERO).unwrap();
    assert_eq!(c.get(b"k").unwrap().value(), b"small now");
    assert_eq!(c.stats().items, 2, "the chunks went with the head");
    let big2 = pattern(2, 700 << 10);
    c.set(b"k", &big2, 0, Duration::ZERO).unwrap();
    assert!(c.get(b"k").unwrap().value() == big2.as_slice());
    let big3 = pattern(3, 900 << 10);
    c.set(b"k", &big3, 5, Duration::ZERO).unwrap();
    assert!(c.get(b"k").unwrap().value() == big3.as_slice());
    let s = c.stats();
    assert_eq!(s.items, 2, "a large item is one item");
    assert!(s.bytes < (900 << 10) + 20 * 300, "one version's chunks: {} bytes", s.bytes);
    c.delete(b"k").unwrap();
    assert!(c.get(b"k").is_none());
    assert!(matches!(c.delete(b"k"), Err(Error::NotFound)));
    assert_eq!(c.stats().items, 1, "only `other` is left");
    c.verify().unwrap();
}

#[test]
fn ttl_expiry_takes_the_whole_item() {
    let clock = ManualClock::new(T0);
    let mut c = Builder::new()
        .heap_size(16 << 20)
        .segment_size(SEGMENT)
        .max_item_size(4 << 20)
        .clock(clock.clone())
        .build()
        .unwrap();
    let v = pattern(4, 500 << 10);
    c.set(b"k", &v, 0, Duration::from_secs(100)).unwrap();
    clock.advance(50);
    let item = c.get(b"k").unwrap();
    assert!(item.value() == v.as_slice() && item.ttl().unwrap() <= Duration::from_secs(50));
    c.touch(b"k", Duration::from_secs(1000)).unwrap();
    clock.advance(200);
    assert!(c.get(b"k").unwrap().value() == v.as_slice(), "the touch renewed the chunks too");
    clock.advance(1000);
    assert!(c.get(b"k").is_none());
    c.expire();
    assert_eq!(c.stats().items, 0);
}

#[test]
fn cas_add_replace_and_append_follow_the_head() {
    let mut c = engine(16 << 20, 4 << 20);
    let v1 = pattern(5, 300 << 10);
    assert!(matches!(c.replace(b"k", &v1, 0, Duration::ZERO), Err(Error::NotStored)));
    c.add(b"k", &v1, 1, Duration::ZERO).unwrap();
    assert!(matches!(c.add(b"k", &v1, 0, Duration::ZERO), Err(Error::NotStored)));
    let cas = c.get(b"k").unwrap().cas();
    let v2 = pattern(6, 400 << 10);
    c.cas(b"k", &v2, 2, Duration::ZERO, cas).unwrap();
    assert!(matches!(c.cas(b"k", &v1, 0, Duration::ZERO, cas), Err(Error::Exists)));
    let item = c.get(b"k").unwrap();
    assert!(item.value() == v2.as_slice() && item.flags() == 2 && item.cas() != cas);
    let cas2 = item.cas();
    c.touch(b"k", Duration::from_secs(60)).unwrap();
    assert_eq!(c.get(b"k").unwrap().cas(), cas2, "a touch keeps the CAS value");
    c.append(b"k", b"tail").unwrap();
    let mut want = v2.clone();
    want.extend_from_slice(b"tail");
    assert!(c.get(b"k").unwrap().value() == want.as_slice());
    assert!(matches!(c.incr(b"k", 1), Err(Error::NotNumeric)));
    let opts = StoreOptions { cas: Some(777), ..StoreOptions::default() };
    assert_eq!(c.store_with(b"k", &v1, 0, Duration::ZERO, StoreMode::Set, opts).unwrap(), 777);
    assert_eq!(c.get(b"k").unwrap().cas(), 777);
    c.delete_cas(b"k", 777).unwrap();
    assert!(c.get(b"k").is_none());
    c.verify().unwrap();
}

/// Under pressure, with every policy: each read gives the key's last value whole, or a miss;
/// never a mix of versions, never a wrong length. A store that fails leaves nothing readable.
#[test]
fn eviction_leaves_whole_items_or_misses() {
    for policy in [Policy::Merge, Policy::Fifo, Policy::Random, Policy::S3Fifo] {
        let mut c = Builder::new()
            .heap_size(4 << 20)
            .segment_size(SEGMENT)
            .max_item_size(1 << 20)
            .eviction(policy)
            .build()
            .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut last = vec![None; 24];
        let (mut hits, mut misses, mut failed) = (0, 0, 0);
        for version in 1..600u32 {
            let k = rng.gen_range(0..last.len());
            let key = format!("key-{k}");
            if rng.gen_bool(0.7) {
                let len = if rng.gen_bool(0.3) { rng.gen_range(1..2000) } else { rng.gen_range(SEGMENT..(1 << 20)) };
                match c.set(key.as_bytes(), &pattern(version, len), 0, Duration::ZERO) {
                    Ok(()) => last[k] = Some((version, len)),
                    Err(Error::TooLarge { .. }) => {
                        failed += 1;
                        last[k] = None;
                    }
                    Err(e) => panic!("{policy:?}: {e}"),
                }
            } else {
                match (c.get(key.as_bytes()), last[k]) {
                    (Some(item), Some((v, len))) => {
                        assert!(item.value() == pattern(v, len).as_slice(), "{policy:?}: {key} is not version {v}");
                        hits += 1;
                    }
                    (Some(_), None) => panic!("{policy:?}: {key} was never stored"),
                    (None, _) => misses += 1,
                }
            }
        }
        assert!(hits > 0, "{policy:?}: {hits} hits, {misses} misses");
        assert_eq!(failed, 0, "{policy:?}: stores failed");
        c.verify().unwrap();
    }
}

#[test]
fn a_reopened_file_keeps_large_items() {
    let path = tmp("reopen");
    let b = || Builder::new().heap_size(8 << 20).segment_size(SEGMENT).max_item_size(2 << 20).shards(2).path(&path);
    let v = pattern(9, 1 << 20);
    let cas = {
        let c = b().build_shared().unwrap();
        c.set(b"big", &v, 3, Duration::ZERO).unwrap();
        c.set(b"small", b"s", 0, Duration::ZERO).unwrap();
        let cas = c.get(b"big").unwrap().cas;
        c.close().unwrap();
        cas
    };
    let c = b().build_shared().unwrap();
    assert_eq!(c.len(), 2, "the reopened file's chunks are no items");
    c.verify().unwrap();
    let got = c.get(b"big").unwrap();
    assert!(got.value == v && got.flags == 3 && got.cas == cas);
    c.delete(b"big").unwrap();
    c.close().unwrap();
    let c = b().build_shared().unwrap();
    assert!(c.get(b"big").is_none());
    assert_eq!(c.get(b"small").unwrap().value, b"s");
    c.close().unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_shared_handle_reads_and_writes_large_items() {
    let c: SharedCache = Builder::new()
        .heap_size(32 << 20)
        .segment_size(SEGMENT)
        .max_item_size(2 << 20)
        .shards(4)
        .build_shared()
        .unwrap();
    let mut keys = Vec::new();
    for i in 0..8u32 {
        let key = format!("big-{i}");
        let v = pattern(100 + i, 200_000 + i as usize * 1000);
        c.set(key.as_bytes(), &v, i, Duration::ZERO).unwrap();
        keys.push((key, v));
    }
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for (key, v) in &keys {
                    assert!(c.get_with(key.as_bytes(), |item| item.value() == v.as_slice()).unwrap());
                    let mut buf = Vec::new();
                    c.get_into(key.as_bytes(), &mut buf).unwrap();
                    assert!(buf == *v);
                }
            });
        }
    });
    let refs: Vec<&[u8]> = keys.iter().map(|(k, _)| k.as_bytes()).collect();
    let got = c.get_many(&refs);
    assert!(got.iter().zip(&keys).all(|(g, (_, v))| g.as_ref().is_some_and(|g| g.value == *v)));
    let mut listed = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = c.scan_with(cursor, 100, |item| listed.push(item.key().to_vec()));
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(listed.len(), keys.len(), "the chunks are not listed");
    assert_eq!((c.len(), c.stats().items), (8, 8));
    c.delete(b"big-0").unwrap();
    assert_eq!(c.len(), 7);
    assert!(c.get(b"big-0").is_none());
    c.verify().unwrap();
}

/// A touch stores the item again with the new TTL (its chunks too) and its CAS value, on an item
/// whose CAS the client chose (a head in the explicit form, its header the longest there is):
/// the lock-free read must still find it and leave it to the locked path.
#[test]
fn a_touch_through_the_shared_handle_keeps_the_item() {
    let c = Builder::new()
        .heap_size(256 << 20)
        .segment_size(4 << 20)
        .max_item_size(32 << 20)
        .shards(4)
        .build_shared()
        .unwrap();
    let v = pattern(11, 6 << 20);
    c.set(b"casbig", &v, 0, Duration::ZERO).unwrap();
    let cas = c.get(b"casbig").unwrap().cas;
    let w = pattern(12, 7 << 20);
    c.cas(b"casbig", &w, 3, Duration::ZERO, cas).unwrap();
    assert!(matches!(c.add(b"casbig", &w, 0, Duration::ZERO), Err(Error::NotStored)));
    let cas = c.get(b"casbig").unwrap().cas;
    c.touch(b"casbig", Duration::from_secs(100)).unwrap();
    let got = c.get(b"casbig").expect("still there after the touch");
    assert!(got.value == w && got.flags == 3 && got.cas == cas && got.ttl.is_some());
    assert!(c.contains(b"casbig"));
    assert_eq!(c.get_many(&[b"casbig"])[0].as_ref().map(|i| i.value.len()), Some(w.len()));
    c.verify().unwrap();
}

/// A file reopened with other sizes (`resize_file`) moves a large item whole, as any item.
#[test]
fn a_resized_file_moves_large_items_whole() {
    let path = tmp("resize");
    let b = |heap: usize, shards: usize| {
        Builder::new().heap_size(heap).segment_size(SEGMENT).max_item_size(2 << 20).shards(shards).path(&path)
    };
    let v = pattern(13, 700 << 10);
    let c = b(16 << 20, 2).build_shared().unwrap();
    c.set(b"big", &v, 4, Duration::ZERO).unwrap();
    c.set(b"small", b"s", 0, Duration::ZERO).unwrap();
    c.close().unwrap();
    let c = b(32 << 20, 4).resize_file(true).build_shared().unwrap();
    let got = c.get(b"big").expect("moved");
    assert!(got.value == v && got.flags == 4);
    assert_eq!(c.get(b"small").unwrap().value, b"s");
    let mut keys = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = c.scan_with(cursor, 100, |item| keys.push(item.key().to_vec()));
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    assert_eq!(keys, [b"big".to_vec(), b"small".to_vec()], "no chunk moved as an item");
    c.verify().unwrap();
    c.close().unwrap();
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(path.with_extension("resizing"));
}

/// With a flash tier, eviction drops a large item's head and chunks rather than demote them:
/// a read gives the last value whole or misses, from DRAM only.
#[test]
fn a_flash_tier_never_serves_a_large_item() {
    let tier = tmp("tier");
    let mut c = Builder::new()
        .heap_size(2 << 20)
        .segment_size(SEGMENT)
        .max_item_size(1 << 20)
        .eviction(Policy::Fifo)
        .tier(&tier, 64 * SEGMENT as u64)
        .build()
        .unwrap();
    let mut last = Vec::new();
    for version in 0..40u32 {
        let key = format!("k{}", version % 8);
        let v = pattern(version, 100_000 + version as usize * 1000);
        c.set(key.as_bytes(), &v, 0, Duration::ZERO).unwrap();
        c.set(format!("small{version}").as_bytes(), &pattern(version, 3000), 0, Duration::ZERO).unwrap();
        last.retain(|(k, _): &(String, Vec<u8>)| *k != key);
        last.push((key, v));
    }
    let mut hits = 0;
    for (key, v) in &last {
        if let Some(item) = c.get(key.as_bytes()) {
            assert!(item.value() == v.as_slice(), "{key}");
            hits += 1;
        }
    }
    assert!(hits > 0);
    c.verify().unwrap();
    drop(c);
    let _ = std::fs::remove_file(&tier);
}

/// A large item is one item in every count users see, however many chunks it has, through both
/// handles: as memcached counts it.
#[test]
fn a_large_item_counts_as_one_item() {
    let mut c = engine(16 << 20, 4 << 20);
    c.set(b"small", b"v", 0, Duration::ZERO).unwrap();
    c.set(b"big", &pattern(1, 1 << 20), 0, Duration::ZERO).unwrap();
    assert_eq!((c.len(), c.stats().items), (2, 2));
    c.set(b"big", &pattern(2, 2 << 20), 0, Duration::ZERO).unwrap();
    c.set(b"big2", &pattern(3, 300 << 10), 0, Duration::ZERO).unwrap();
    assert_eq!((c.len(), c.stats().items), (3, 3));
    c.verify().unwrap();
    c.delete(b"big").unwrap();
    assert_eq!(c.len(), 2);
    c.flush();
    assert_eq!(c.len(), 0);
    c.set(b"big", &pattern(4, 1 << 20), 0, Duration::ZERO).unwrap();
    assert_eq!(c.len(), 1);
    c.verify().unwrap();

    let shared = Builder::new()
        .heap_size(32 << 20)
        .segment_size(SEGMENT)
        .max_item_size(4 << 20)
        .shards(2)
        .build_shared()
        .unwrap();
    for i in 0..4u32 {
        shared.set(format!("big-{i}").as_bytes(), &pattern(i, 500 << 10), 0, Duration::ZERO).unwrap();
    }
    assert_eq!((shared.len(), shared.stats().items), (4, 4));
    shared.verify().unwrap();
}

/// A large store that the cache has room for succeeds under every policy that evicts, however
/// full the heap is: no chunk's store evicts an earlier chunk of the same item. Without eviction,
/// a full heap refuses it as out of memory.
#[test]
fn a_large_store_that_fits_succeeds_under_every_policy() {
    for policy in Policy::ALL {
        let mut c = Builder::new()
            .heap_size(4 << 20)
            .segment_size(SEGMENT)
            .max_item_size(4 << 20)
            .eviction(policy)
            .build()
            .unwrap();
        let mut refused = 0;
        for round in 0..16u32 {
            // Small items up to a full heap (or until eviction is off and the heap is full).
            for i in 0..3000u32 {
                if c.set(format!("s{round}-{i}").as_bytes(), &[7; 500], 0, Duration::ZERO).is_err() {
                    break;
                }
            }
            let key = format!("big{}", round % 3);
            let v = pattern(round, (2 << 20) + round as usize * 4099);
            match c.set(key.as_bytes(), &v, round, Duration::ZERO) {
                Ok(()) => {
                    let got = c.get(key.as_bytes()).unwrap_or_else(|| panic!("{policy:?}, round {round}: a miss"));
                    assert!(got.value() == v.as_slice(), "{policy:?}, round {round}");
                }
                Err(Error::NoMemory) if policy == Policy::None => refused += 1,
                Err(e) => panic!("{policy:?}, round {round}: {e}"),
            }
        }
        assert!((refused > 0) == (policy == Policy::None), "{policy:?}: {refused} refused");
        c.verify().unwrap_or_else(|e| panic!("{policy:?}: {e}"));
    }
}

/// A read that finds a chunk of a large item missing (evicted on its own) misses, and the next
/// write removes the head and the chunks left: the item no longer counts, and its memory is
/// free to reuse.
#[test]
fn a_head_whose_chunk_is_gone_is_removed_by_the_next_write() {
    let mut c = Builder::new()
        .heap_size(4 << 20)
        .segment_size(SEGMENT)
        .max_item_size(2 << 20)
        .eviction(Policy::Fifo)
        .build()
        .unwrap();
    c.set(b"big", &pattern(1, 1 << 20), 0, Duration::ZERO).unwrap();
    // FIFO evicts the oldest segment first: the first chunk's, long before the head's.
    // (`get_with`: `get` holds each value it gathers until a write frees it.)
    let mut i = 0;
    while c.get_with(b"big", |_| ()).is_some() {
        c.set(format!("s{i}").as_bytes(), &[1; 1000], 0, Duration::ZERO).unwrap();
        i += 1;
        assert!(i < 100_000, "the first chunk is never evicted");
    }
    // The head outlives its first chunk (no read sees it: each checks the chunks), counted
    // until the next write.
    let (items, bytes) = (c.len(), c.stats().bytes);
    c.set(b"next", b"v", 0, Duration::ZERO).unwrap();
    assert_eq!(c.len(), items, "one item in, the broken one out");
    assert!(c.stats().bytes < bytes, "the chunks left went too");
    c.verify().unwrap();

    // Through the shared handle: the read holds the shard's read lock; the next write, which
    // holds it exclusively, removes the head.
    let shared = Builder::new()
        .heap_size(4 << 20)
        .segment_size(SEGMENT)
        .max_item_size(2 << 20)
        .eviction(Policy::Fifo)
        .shards(1)
        .build_shared()
        .unwrap();
    shared.set(b"big", &pattern(2, 1 << 20), 0, Duration::ZERO).unwrap();
    let mut i = 0;
    while shared.get_with(b"big", |_| ()).is_some() {
        shared.set(format!("s{i}").as_bytes(), &[1; 1000], 0, Duration::ZERO).unwrap();
        i += 1;
        assert!(i < 100_000, "the first chunk is never evicted");
    }
    let items = shared.len();
    shared.set(b"next", b"v", 0, Duration::ZERO).unwrap();
    assert_eq!(shared.len(), items, "one item in, the broken one out");
    assert!(!shared.contains(b"big"));
    shared.verify().unwrap();
}
