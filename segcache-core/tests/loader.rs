//! Single-flight loaders: `get_or_insert_with` / `try_get_or_insert_with`.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use segcache_core::{Builder, Error, LoadError, SharedCache};

const THREADS: usize = 16;

fn shared() -> Arc<SharedCache> {
    Arc::new(Builder::new().heap_size(8 << 20).segment_size(64 << 10).build_shared().unwrap())
}

/// A slow loader: waits until every thread has started its call (or a while has passed), so
/// that without single flight every thread would miss and run its own loader.
fn slow(started: &AtomicUsize) {
    for _ in 0..200 {
        if started.load(Ordering::SeqCst) >= THREADS {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    thread::sleep(Duration::from_millis(50));
}

#[test]
fn many_threads_one_slow_loader_runs_once() {
    let cache = shared();
    let calls = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (cache, calls, started, barrier) = (cache.clone(), calls.clone(), started.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                started.fetch_add(1, Ordering::SeqCst);
                cache
                    .get_or_insert_with(b"slow", Duration::from_secs(60), || {
                        calls.fetch_add(1, Ordering::SeqCst);
                        slow(&started);
                        b"loaded".to_vec()
                    })
                    .unwrap()
            })
        })
        .collect();
    for h in handles {
        let item = h.join().unwrap();
        assert_eq!(item.value, b"loaded");
        assert_eq!(item.flags, 0);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the loader ran once for all threads");
    let stored = cache.get(b"slow").unwrap();
    assert_eq!(stored.value, b"loaded");
    assert!(stored.ttl.is_some());
}

#[test]
fn a_hit_does_not_run_the_loader() {
    let cache = shared();
    cache.set(b"k", b"there", 7, Duration::ZERO).unwrap();
    let item = cache.get_or_insert_with(b"k", Duration::ZERO, || panic!("loader ran on a hit")).unwrap();
    assert_eq!((item.value.as_slice(), item.flags), (&b"there"[..], 7));
}

#[test]
fn loader_error_reaches_its_caller_and_a_waiter_retries() {
    let cache = shared();
    let calls = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (cache, calls, started, barrier) = (cache.clone(), calls.clone(), started.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                started.fetch_add(1, Ordering::SeqCst);
                cache.try_get_or_insert_with(b"flaky", Duration::ZERO, || {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    slow(&started);
                    if n == 0 {
                        Err(format!("failure {n}"))
                    } else {
                        Ok(b"second try".to_vec())
                    }
                })
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), 1);
    assert!(matches!(errors[0], LoadError::Loader(m) if m == "failure 0"));
    for r in results.iter().filter_map(|r| r.as_ref().ok()) {
        assert_eq!(r.value, b"second try");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one failed load, one retry by a waiter");
    assert_eq!(cache.get(b"flaky").unwrap().value, b"second try");
}

#[test]
fn loader_error_is_not_cached_and_the_next_call_retries() {
    let cache = shared();
    let r = cache.try_get_or_insert_with(b"k", Duration::ZERO, || Err::<Vec<u8>, _>(Error::NotFound));
    assert!(matches!(r, Err(LoadError::Loader(Error::NotFound))));
    assert!(cache.get(b"k").is_none());
    let r = cache.try_get_or_insert_with(b"k", Duration::ZERO, || Ok::<_, Error>(b"v".to_vec()));
    assert_eq!(r.unwrap().value, b"v");
}

#[test]
fn panicking_loader_leaves_no_waiter_stuck() {
    let cache = shared();
    let calls = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (cache, calls, started, barrier) = (cache.clone(), calls.clone(), started.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                started.fetch_add(1, Ordering::SeqCst);
                panic::catch_unwind(AssertUnwindSafe(|| {
                    cache
                        .get_or_insert_with(b"boom", Duration::ZERO, || {
                            let n = calls.fetch_add(1, Ordering::SeqCst);
                            slow(&started);
                            if n == 0 {
                                panic!("loader panics");
                            }
                            b"after panic".to_vec()
                        })
                        .unwrap()
                }))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1, "the panic reaches its own caller only");
    for r in results.iter().filter_map(|r| r.as_ref().ok()) {
        assert_eq!(r.value, b"after panic");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // The key's flight is gone: a later miss loads again.
    cache.delete(b"boom").unwrap();
    assert_eq!(cache.get_or_insert_with(b"boom", Duration::ZERO, || b"x".to_vec()).unwrap().value, b"x");
}

#[test]
fn reentrant_loader_does_not_deadlock() {
    let cache = shared();
    // Its own key: the inner call runs its loader directly.
    let outer = cache
        .get_or_insert_with(b"self", Duration::ZERO, || {
            let inner = cache.get_or_insert_with(b"self", Duration::ZERO, || b"inner".to_vec()).unwrap();
            assert_eq!(inner.value, b"inner");
            b"outer".to_vec()
        })
        .unwrap();
    assert_eq!(outer.value, b"outer");
    assert_eq!(cache.get(b"self").unwrap().value, b"outer");

    // Other keys nest, fib-style.
    fn fib(cache: &SharedCache, n: u64, calls: &AtomicUsize) -> u64 {
        let item = cache
            .get_or_insert_with(format!("fib:{n}").as_bytes(), Duration::ZERO, || {
                calls.fetch_add(1, Ordering::SeqCst);
                let v = if n < 2 { n } else { fib(cache, n - 1, calls) + fib(cache, n - 2, calls) };
                v.to_string().into_bytes()
            })
            .unwrap();
        String::from_utf8(item.value).unwrap().parse().unwrap()
    }
    let calls = AtomicUsize::new(0);
    assert_eq!(fib(&cache, 40, &calls), 102_334_155);
    assert_eq!(calls.load(Ordering::SeqCst), 41);
}

#[test]
fn value_too_large_to_store_still_reaches_every_waiter() {
    let cache = shared();
    let big = vec![7u8; 200 << 10]; // larger than a 64 KiB segment
    let calls = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (cache, calls, started, barrier, big) =
                (cache.clone(), calls.clone(), started.clone(), barrier.clone(), big.clone());
            thread::spawn(move || {
                barrier.wait();
                started.fetch_add(1, Ordering::SeqCst);
                cache
                    .get_or_insert_with(b"big", Duration::ZERO, || {
                        calls.fetch_add(1, Ordering::SeqCst);
                        slow(&started);
                        big
                    })
                    .unwrap()
            })
        })
        .collect();
    for h in handles {
        let item = h.join().unwrap();
        assert_eq!(item.value, big);
        assert_eq!(item.cas, 0, "not stored");
    }
    assert!(cache.get(b"big").is_none());
    // Nothing is stored, so every later call loads again; only concurrent callers share a load.
    assert!(calls.load(Ordering::SeqCst) >= 1);
}

#[test]
fn cache_errors_come_back_as_cache_errors() {
    let cache = shared();
    let r = cache.get_or_insert_with(b"", Duration::ZERO, || panic!("not called"));
    assert!(matches!(r, Err(Error::EmptyKey)));
    let long = [b'k'; 251];
    let r = cache.try_get_or_insert_with(&long, Duration::ZERO, || Ok::<_, ()>(vec![]));
    assert!(matches!(r, Err(LoadError::Cache(Error::KeyTooLong { len: 251 }))));
}

#[test]
fn distinct_caches_do_not_share_flights() {
    let (a, b) = (shared(), shared());
    a.get_or_insert_with(b"k", Duration::ZERO, || {
        // The same key in another cache is not this flight: it loads at once.
        assert_eq!(b.get_or_insert_with(b"k", Duration::ZERO, || b"b".to_vec()).unwrap().value, b"b");
        b"a".to_vec()
    })
    .unwrap();
    assert_eq!(a.get(b"k").unwrap().value, b"a");
    assert_eq!(b.get(b"k").unwrap().value, b"b");
}

#[test]
fn single_owner_engine() {
    let mut cache = Builder::new().heap_size(8 << 20).segment_size(64 << 10).build().unwrap();
    let mut calls = 0;
    for _ in 0..3 {
        let item = cache
            .get_or_insert_with(b"k", Duration::from_secs(30), || {
                calls += 1;
                b"v".to_vec()
            })
            .unwrap();
        assert_eq!(item.value, b"v");
    }
    assert_eq!(calls, 1);
    let r = cache.try_get_or_insert_with(b"e", Duration::ZERO, || Err::<Vec<u8>, _>("no"));
    assert!(matches!(r, Err(LoadError::Loader("no"))));
    assert!(cache.get(b"e").is_none());
    let big = cache.get_or_insert_with(b"big", Duration::ZERO, || vec![1; 100 << 10]).unwrap();
    assert_eq!((big.value.len(), big.cas), (100 << 10, 0));
}

#[test]
fn a_load_counts_one_miss_and_a_hit_one_hit() {
    let cache = shared();
    let before = cache.stats();
    cache.get_or_insert_with(b"counted", Duration::ZERO, || b"v".to_vec()).unwrap();
    cache.get_or_insert_with(b"counted", Duration::ZERO, || unreachable!()).unwrap();
    let after = cache.stats();
    assert_eq!(after.get_misses - before.get_misses, 1, "the loader does not look the key up twice");
    assert_eq!(after.get_hits - before.get_hits, 1);
}
