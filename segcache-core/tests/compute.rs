//! `compute` under contention, and what the eviction listener hears of the owner's own removals
//! and replacements on the shared handle.

use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use segcache_core::{Builder, Computed, Op, RemovalCause, SharedCache};

const NEVER: Duration = Duration::ZERO;

fn shared(shards: usize) -> SharedCache {
    Builder::new().heap_size(8 << 20).segment_size(64 << 10).shards(shards).build_shared().unwrap()
}

fn decimal(item: Option<segcache_core::Item<'_>>) -> u64 {
    item.map_or(0, |i| std::str::from_utf8(i.value()).unwrap().trim().parse().unwrap())
}

/// Threads that each add one to a key with `compute`, beside threads that `incr` it and threads
/// that rewrite other keys of its shard, lose no update: every compute read the value the last
/// writer left.
#[test]
fn concurrent_computes_of_one_key_lose_no_update() {
    const THREADS: usize = 8;
    const EACH: u64 = 2_000;
    let cache = Arc::new(shared(1));
    cache.set(b"counter", b"0", 0, NEVER).unwrap();
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (cache, start) = (Arc::clone(&cache), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                for n in 0..EACH {
                    match t % 4 {
                        // memcached's incr is another writer of the same key.
                        3 => {
                            cache.incr(b"counter", 1).unwrap();
                        }
                        _ => {
                            let done =
                                cache.compute(b"counter", |item| Op::put(format!("{}", decimal(item) + 1))).unwrap();
                            assert!(matches!(done, Computed::Replaced { .. }), "{done:?}");
                        }
                    }
                    // Other keys of the shard move meanwhile (sets in place and appends).
                    let other = format!("other{}", n % 64);
                    cache.set(other.as_bytes(), format!("{t}-{n}").as_bytes(), 0, NEVER).unwrap();
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    let total = cache.get(b"counter").unwrap();
    assert_eq!(std::str::from_utf8(&total.value).unwrap().trim(), (THREADS as u64 * EACH).to_string());
}

/// Computes that create, remove and create again one key from many threads: each sees the state
/// the previous one left (created only when absent, removed only when present).
#[test]
fn concurrent_create_and_remove_see_each_others_results() {
    const THREADS: usize = 6;
    const EACH: usize = 1_000;
    let cache = Arc::new(shared(4));
    let (created, removed) = (Arc::new(Mutex::new(0usize)), Arc::new(Mutex::new(0usize)));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (cache, created, removed) = (Arc::clone(&cache), Arc::clone(&created), Arc::clone(&removed));
            std::thread::spawn(move || {
                for _ in 0..EACH {
                    let done = cache
                        .compute(b"flip", |item| match item {
                            None => Op::put(b"here".to_vec()),
                            Some(_) => Op::Remove,
                        })
                        .unwrap();
                    match done {
                        Computed::Inserted { .. } => *created.lock().unwrap() += 1,
                        Computed::Removed => *removed.lock().unwrap() += 1,
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    let (created, removed) = (*created.lock().unwrap(), *removed.lock().unwrap());
    assert_eq!(created + removed, THREADS * EACH);
    // They alternate: the key is present exactly when there was one more creation.
    assert_eq!(created - removed, usize::from(cache.contains(b"flip")));
}

/// On the shared handle, the listener hears of a replacement whichever path the store takes (a
/// rewrite in place of a same-length value, an append of a longer one, a compute), and of a
/// delete or a compute's removal as removed, each with the item as it was.
#[test]
fn the_listener_hears_of_replacements_and_removals() {
    let cache = shared(2);
    let heard = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&heard);
    cache.set_eviction_listener(Some(segcache_core::RemovalListener::new(move |item, cause| {
        log.lock().unwrap().push((item.key().to_vec(), item.value().to_vec(), cause));
    })));
    cache.set(b"k", b"one", 0, NEVER).unwrap();
    cache.set(b"k", b"two", 0, NEVER).unwrap(); // same length: in place
    cache.set(b"k", b"three", 0, NEVER).unwrap(); // longer: appended
    cache.compute(b"k", |_| Op::put(b"four".to_vec())).unwrap();
    cache.compute(b"k", |_| Op::Keep).unwrap();
    cache.compute(b"k", |_| Op::Remove).unwrap();
    cache.set(b"d", b"x", 0, NEVER).unwrap();
    cache.delete(b"d").unwrap();
    cache.set(b"f", b"x", 0, NEVER).unwrap();
    cache.flush(); // a flush is not told of
    let kv = |k: &[u8], v: &[u8], c| (k.to_vec(), v.to_vec(), c);
    assert_eq!(
        *heard.lock().unwrap(),
        [
            kv(b"k", b"one", RemovalCause::Replaced),
            kv(b"k", b"two", RemovalCause::Replaced),
            kv(b"k", b"three", RemovalCause::Replaced),
            kv(b"k", b"four", RemovalCause::Removed),
            kv(b"d", b"x", RemovalCause::Removed),
        ]
    );
}
