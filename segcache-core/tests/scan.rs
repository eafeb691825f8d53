//! Key scans under concurrent writes: a key present for the whole scan comes back exactly once,
//! no key is invented, and every key returned was stored by someone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use segcache_core::{Builder, Policy, Segcache, SharedCache};

fn stable(i: u32) -> Vec<u8> {
    format!("stable:{i}").into_bytes()
}

fn churn(i: u32) -> Vec<u8> {
    format!("churn:{i}").into_bytes()
}

/// Scans the whole cache in steps of `count`, counting how often each key came back.
fn scan_all(cache: &SharedCache, count: usize) -> HashMap<Vec<u8>, u32> {
    let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut cursor = 0;
    let mut steps = 0u64;
    loop {
        let (keys, next) = cache.scan(cursor, count);
        for k in keys {
            *seen.entry(k).or_default() += 1;
        }
        if next == 0 {
            break;
        }
        assert!(next > cursor, "the cursor moves forward");
        cursor = next;
        steps += 1;
        assert!(steps <= cache.scan_len(), "a scan ends");
    }
    seen
}

fn check(seen: &HashMap<Vec<u8>, u32>, stable_keys: u32, churn_keys: u32) {
    for i in 0..stable_keys {
        assert_eq!(seen.get(&stable(i)), Some(&1), "stable key {i} comes back exactly once");
    }
    for (k, n) in seen {
        assert_eq!(*n, 1, "{} came back {n} times", String::from_utf8_lossy(k));
        let known = (0..stable_keys).any(|i| *k == stable(i)) || (0..churn_keys).any(|i| *k == churn(i));
        assert!(known, "invented key {}", String::from_utf8_lossy(k));
    }
}

/// Writers store, rewrite (moving records, in place or to new segments) and delete keys while
/// scans run; the stable keys are rewritten too but never removed.
#[test]
fn stable_keys_come_back_once_while_writers_churn() {
    const STABLE: u32 = 2_000;
    const CHURN: u32 = 4_000;
    let cache = Arc::new(
        Builder::new()
            .heap_size(64 << 20)
            .segment_size(256 << 10)
            .shards(4)
            .hash_power(10)
            .eviction(Policy::None)
            .build_shared()
            .unwrap(),
    );
    for i in 0..STABLE {
        cache.set(&stable(i), b"stable value", 0, Duration::ZERO).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let (cache, stop) = (cache.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) && ops < 2_000_000 {
                    ops += 1;
                    let i = rng.gen_range(0..CHURN);
                    match rng.gen_range(0..10) {
                        0..=4 => {
                            let len = rng.gen_range(1..200);
                            let _ = cache.set(&churn(i), &vec![b'c'; len], 0, Duration::ZERO);
                        }
                        5..=7 => {
                            let _ = cache.delete(&churn(i));
                        }
                        // Rewrites of stable keys: same length (in place) or not (a move).
                        _ => {
                            let j = rng.gen_range(0..STABLE);
                            let v: &[u8] = if rng.gen() { b"stable value" } else { b"a longer stable value" };
                            let _ = cache.set(&stable(j), v, 0, Duration::ZERO);
                        }
                    }
                }
            })
        })
        .collect();
    for count in [1, 7, 100, 5_000] {
        let seen = scan_all(&cache, count);
        check(&seen, STABLE, CHURN);
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    // At rest, the scan and the item count agree.
    let seen = scan_all(&cache, 13);
    check(&seen, STABLE, CHURN);
    assert_eq!(seen.len(), cache.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// A single-owner engine: after any sequence of sets and deletes, a scan in steps of any size
    /// returns exactly the live keys.
    #[test]
    fn scan_returns_exactly_the_live_keys(
        ops in prop::collection::vec((0u32..300, any::<bool>()), 1..600),
        count in 1usize..50,
    ) {
        let mut c: Segcache =
            Builder::new().heap_size(8 << 20).segment_size(64 << 10).hash_power(8).build().unwrap();
        let mut live = std::collections::BTreeSet::new();
        for (k, set) in ops {
            let key = churn(k);
            if set {
                c.set(&key, b"x", 0, Duration::ZERO).unwrap();
                live.insert(key);
            } else {
                let _ = c.delete(&key);
                live.remove(&key);
            }
        }
        let mut got = Vec::new();
        let mut cursor = 0;
        loop {
            let (keys, next) = c.scan(cursor, count);
            got.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        got.sort();
        prop_assert_eq!(got, live.into_iter().collect::<Vec<_>>());
    }
}
