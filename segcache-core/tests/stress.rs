//! Threads on one shared cache: no torn, foreign or stale-after-delete value; CAS and incr count
//! exactly as a serial execution would.

use std::sync::Arc;
use std::time::Duration;

use segcache_core::{Builder, Error, Policy, SharedCache};

/// A value that names its key and version and carries a checksum of both.
fn encode(key: u32, version: u64) -> Vec<u8> {
    // Every eighth key's values are longer than the 512 bytes that reads copy without the lock,
    // so reads under the lock run among the others.
    encode_sized(key, version, 16 + (version % 100) as usize + if key.is_multiple_of(8) { 600 } else { 0 })
}

/// `encode` with `len` bytes before the checksum.
fn encode_sized(key: u32, version: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    while v.len() < len {
        v.push((key as u64 ^ version).wrapping_mul(v.len() as u64 + 1) as u8);
    }
    let sum = xxhash(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn xxhash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3))
}

fn decode(v: &[u8]) -> (u32, u64) {
    assert!(v.len() >= 20, "torn value of {} bytes", v.len());
    let (body, sum) = v.split_at(v.len() - 8);
    assert_eq!(xxhash(body).to_le_bytes(), sum, "torn or corrupt value");
    (u32::from_le_bytes(body[..4].try_into().unwrap()), u64::from_le_bytes(body[4..12].try_into().unwrap()))
}

fn run_mixed(cache: Arc<SharedCache>, threads: u32, ops: u32) {
    const KEYS: u32 = 256;
    std::thread::scope(|s| {
        for t in 0..threads {
            let cache = &cache;
            s.spawn(move || {
                let mut rng = 0x9e37_79b9u64 * u64::from(t + 1);
                for i in 0..ops {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let key = (rng % u64::from(KEYS)) as u32;
                    let k = format!("key{key}");
                    match rng >> 61 {
                        0..=3 => {
                            if let Some(item) = cache.get(k.as_bytes()) {
                                let (owner, _) = decode(&item.value);
                                assert_eq!(owner, key, "foreign value under {k}");
                            }
                        }
                        4 | 5 => cache
                            .set(k.as_bytes(), &encode(key, u64::from(t) << 32 | u64::from(i)), 0, Duration::ZERO)
                            .unwrap(),
                        6 => {
                            // Deleting, then reading in the same thread: the delete must be visible
                            // unless another thread set the key in between (then it is theirs).
                            let _ = cache.delete(k.as_bytes());
                            if let Some(item) = cache.get(k.as_bytes()) {
                                assert_eq!(decode(&item.value).0, key);
                            }
                        }
                        _ => {
                            let mut keys = Vec::new();
                            for j in 0..8 {
                                keys.push(format!("key{}", (key + j * 31) % KEYS));
                            }
                            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
                            cache.get_many_with(&refs, |idx, item| {
                                assert_eq!(format!("key{}", decode(item.value()).0), keys[idx]);
                            });
                        }
                    }
                }
            });
        }
    });
}

#[test]
fn mixed_operations_never_see_torn_or_foreign_values() {
    for policy in [Policy::Merge, Policy::Fifo, Policy::S3Fifo] {
        // Small heap: eviction and merging run all the time under the readers.
        let cache = Arc::new(
            Builder::new().heap_size(4 << 20).segment_size(64 << 10).shards(4).eviction(policy).build_shared().unwrap(),
        );
        run_mixed(cache.clone(), 4, 100_000);
        assert!(cache.stats().evicted_segments > 0 || policy == Policy::None);
    }
}

/// Reads that take no lock race a writer that reuses segments all the time: a heap of a few
/// 4 KiB segments, rewritten by one thread while others read. A read that kept what it copied
/// from a segment being rewritten would return a torn or foreign value.
#[test]
fn lock_free_reads_never_keep_a_record_being_overwritten() {
    const KEYS: u32 = 64;
    for policy in [Policy::Fifo, Policy::Merge] {
        let cache =
            Builder::new().heap_size(64 << 10).segment_size(4 << 10).shards(1).eviction(policy).build_shared().unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        let hits = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let mut key = 0u32;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        key = (key + 7) % KEYS;
                        if let Some(item) = cache.get(format!("key{key}").as_bytes()) {
                            assert_eq!(decode(&item.value).0, key, "foreign value under key{key}");
                            hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
            for version in 0..400_000u64 {
                let key = (version % u64::from(KEYS)) as u32;
                // Long values, just small enough to be read without the lock: the longer the copy,
                // the likelier a writer overwrites it meanwhile.
                let value = encode_sized(key, version, 440 + (version % 50) as usize);
                cache.set(format!("key{key}").as_bytes(), &value, 0, Duration::ZERO).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(cache.stats().evicted_segments > 1000, "{policy:?}: segments were not reused");
        assert!(hits.into_inner() > 0, "{policy:?}: no read found its key");
    }
}

/// Whether version `version` of a key is stored with client flags: layouts alternate every 1024
/// versions (64 per key with 16 keys), so most rewrites stay in place and some change layout.
fn flagged(version: u64) -> bool {
    (version >> 10) & 1 == 1
}

/// The client flags of a version: non-zero when `flagged`, derived from the version so that a
/// reader can tell flags that do not belong with the value it got.
fn flags_of(key: u32, version: u64) -> u32 {
    if flagged(version) {
        ((version as u32).wrapping_mul(0x9e37_79b1) ^ key) | 1
    } else {
        0
    }
}

/// A value and flags whose records have one total length in both layouts: client flags take 4
/// bytes, so a flagged version's value is 4 bytes shorter.
fn versioned(key: u32, version: u64) -> (Vec<u8>, u32) {
    let len = if flagged(version) { 436 } else { 440 };
    (encode_sized(key, version, len), flags_of(key, version))
}

/// Checks an item read: value intact, of its key, with its version's flags; returns the version.
fn check_versioned(key: u32, value: &[u8], flags: u32) -> u64 {
    let (k, version) = decode(value);
    assert_eq!(k, key, "foreign value under key{key}");
    assert_eq!(flags, flags_of(key, version), "key{key} version {version} read with flags of another version");
    assert_eq!(
        value.len(),
        if flagged(version) { 444 } else { 448 },
        "key{key} version {version}: length of the other layout"
    );
    version
}

/// Reads that take no lock race a writer that rewrites records where they lie (records of one
/// length, so sets go in place while the layout stays; every 64th set of a key switches between
/// client flags and none, which must not go in place). No read may keep a torn value or flags,
/// a CAS that does not go with its value, or an older version than one it already saw, and each
/// key ends with its last version.
#[test]
fn lock_free_reads_never_keep_a_record_being_rewritten_in_place() {
    const KEYS: u32 = 16;
    const SETS: u64 = 400_000;
    let cache = Builder::new().heap_size(64 << 10).segment_size(4 << 10).shards(1).build_shared().unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let hits = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                // The version and CAS of each key's last read: one writer, so a later version
                // has a larger CAS and the same version the same CAS.
                let mut seen = [(0u64, 0u64); KEYS as usize];
                let mut key = 0u32;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    key = (key + 7) % KEYS;
                    if let Some(item) = cache.get(format!("key{key}").as_bytes()) {
                        let version = check_versioned(key, &item.value, item.flags);
                        let (last, last_cas) = seen[key as usize];
                        assert!(version >= last, "key{key} went back from {last} to {version}");
                        if version == last {
                            assert!(
                                item.cas == last_cas || last_cas == 0,
                                "key{key} version {version}: CAS {last_cas} then {}",
                                item.cas
                            );
                        } else {
                            assert!(
                                item.cas > last_cas,
                                "key{key}: version {last} -> {version} but CAS {last_cas} -> {}",
                                item.cas
                            );
                        }
                        seen[key as usize] = (version, item.cas);
                        hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
        for version in 0..SETS {
            let key = (version % u64::from(KEYS)) as u32;
            let (value, flags) = versioned(key, version);
            cache.set(format!("key{key}").as_bytes(), &value, flags, Duration::ZERO).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let st = cache.stats();
    assert_eq!(st.sets, SETS, "sets not counted");
    // Only the layout switches append (SETS / 64 records of ~470 bytes); all appended, the sets
    // would go through 400000 * 470 / 4096 segments.
    let switches = SETS / 64;
    assert!(
        st.evicted_segments < switches * 470 / 4096 + 64,
        "rewrites were appended: {} segments evicted",
        st.evicted_segments
    );
    assert!(hits.load(std::sync::atomic::Ordering::Relaxed) > 0, "no read found its key");
    for key in 0..KEYS {
        let last = SETS - u64::from(KEYS) + u64::from(key);
        let item = cache.get(format!("key{key}").as_bytes()).unwrap();
        assert_eq!(check_versioned(key, &item.value, item.flags), last);
    }

    // Two writers rewrite the same keys at once (their chains' locks keep them apart), while
    // batched and single reads check every value they get.
    done.store(false, std::sync::atomic::Ordering::Relaxed);
    let keys: Vec<String> = (0..KEYS).map(|k| format!("key{k}")).collect();
    std::thread::scope(|s| {
        let writers: Vec<_> = (1..=2u64)
            .map(|w| {
                let cache = &cache;
                s.spawn(move || {
                    for i in 0..SETS / 4 {
                        let key = (i % u64::from(KEYS)) as u32;
                        let (value, flags) = versioned(key, w << 32 | i);
                        cache.set(format!("key{key}").as_bytes(), &value, flags, Duration::ZERO).unwrap();
                    }
                })
            })
            .collect();
        s.spawn(|| {
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for (k, item) in cache.get_many(&refs).into_iter().enumerate() {
                    let item = item.expect("present");
                    check_versioned(k as u32, &item.value, item.flags);
                }
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    for key in 0..KEYS {
        let item = cache.get(format!("key{key}").as_bytes()).unwrap();
        let version = check_versioned(key, &item.value, item.flags);
        assert_eq!(version & 0xffff_ffff, SETS / 4 - u64::from(KEYS) + u64::from(key));
    }
    assert_eq!(cache.stats().sets, SETS + SETS / 2);
}

#[test]
fn cas_and_incr_count_exactly() {
    let cache = Arc::new(Builder::new().heap_size(8 << 20).segment_size(64 << 10).shards(8).build_shared().unwrap());
    cache.set(b"incr", b"0", 0, Duration::ZERO).unwrap();
    cache.set(b"cas", b"0", 0, Duration::ZERO).unwrap();
    let (threads, per) = (4u64, 5_000u64);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let cache = &cache;
            s.spawn(move || {
                for _ in 0..per {
                    cache.incr(b"incr", 1).unwrap();
                    loop {
                        let item = cache.get(b"cas").unwrap();
                        let n: u64 = std::str::from_utf8(&item.value).unwrap().parse().unwrap();
                        match cache.cas(b"cas", (n + 1).to_string().as_bytes(), 0, Duration::ZERO, item.cas) {
                            Ok(()) => break,
                            Err(Error::Exists) => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
        }
    });
    assert_eq!(cache.get(b"incr").unwrap().value, (threads * per).to_string().into_bytes());
    assert_eq!(cache.get(b"cas").unwrap().value, (threads * per).to_string().into_bytes());
}

#[test]
fn stats_are_readable_under_load_and_add_up() {
    let cache = Arc::new(Builder::new().heap_size(8 << 20).segment_size(64 << 10).shards(4).build_shared().unwrap());
    std::thread::scope(|s| {
        let c = &cache;
        s.spawn(move || run_mixed(c.clone(), 2, 20_000));
        s.spawn(move || {
            for _ in 0..200 {
                let st = c.stats();
                assert_eq!(st.shards, 4);
                assert!(st.segments_free <= st.segments_total);
            }
        });
    });
    let st = cache.stats();
    assert_eq!(st.items as usize, cache.len());
    assert!(st.get_hits + st.get_misses > 0);
}
