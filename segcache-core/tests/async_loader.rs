//! Async single-flight loaders (`async` feature): `get_or_insert_with_async` /
//! `try_get_or_insert_with_async`, under tokio's multi-threaded runtime and under the `futures`
//! crate's executors (a single-threaded pool: a waiter that blocked its thread would stop the
//! loader too).
#![cfg(feature = "async")]

use std::future::{pending, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::channel::oneshot;
use futures::executor::{block_on, LocalPool};
use futures::future::join_all;
use futures::poll;
use futures::task::LocalSpawnExt;
use segcache_core::{Builder, Error, LoadError, SharedCache};

const WAITERS: usize = 10_000;

fn shared() -> Arc<SharedCache> {
    Arc::new(Builder::new().heap_size(8 << 20).segment_size(64 << 10).build_shared().unwrap())
}

/// Polls `f` once: it must have joined a flight and be waiting.
async fn assert_pending<F: Future + Unpin>(f: &mut F) {
    assert!(matches!(poll!(f), Poll::Pending), "the call did not wait");
}

#[test]
fn ten_thousand_waiters_under_tokio_get_one_load() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let cache = shared();
    let loads = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let values = rt.block_on(async {
        let tasks: Vec<_> = (0..WAITERS)
            .map(|_| {
                let (cache, loads, started) = (Arc::clone(&cache), Arc::clone(&loads), Arc::clone(&started));
                tokio::spawn(async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    let init = async {
                        loads.fetch_add(1, Ordering::SeqCst);
                        // The load lasts until every task has made its call (or a while has
                        // passed), so that without single flight each would load.
                        for _ in 0..2000 {
                            if started.load(Ordering::SeqCst) >= WAITERS {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        b"the one value".to_vec()
                    };
                    cache.get_or_insert_with_async(b"hot", Duration::from_secs(60), init).await.unwrap()
                })
            })
            .collect();
        join_all(tasks).await
    });
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert_eq!(values.len(), WAITERS);
    let cas = cache.get(b"hot").unwrap().cas;
    for v in values {
        let item = v.unwrap();
        assert_eq!((item.value.as_slice(), item.cas), (&b"the one value"[..], cas));
    }
}

#[test]
fn ten_thousand_waiters_on_one_thread_get_one_load() {
    let cache = shared();
    let loads = Rc::new(AtomicUsize::new(0));
    let (open, gate) = oneshot::channel::<()>();
    let mut gate = Some(gate);
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    let results = Rc::new(std::cell::RefCell::new(Vec::new()));
    for _ in 0..WAITERS {
        let (cache, loads, results) = (Arc::clone(&cache), Rc::clone(&loads), Rc::clone(&results));
        let gate = gate.take();
        spawner
            .spawn_local(async move {
                let init = async {
                    loads.fetch_add(1, Ordering::SeqCst);
                    if let Some(gate) = gate {
                        gate.await.unwrap();
                    }
                    b"v".to_vec()
                };
                let item = cache.get_or_insert_with_async(b"k", Duration::ZERO, init).await.unwrap();
                results.borrow_mut().push(item.value);
            })
            .unwrap();
    }
    // Every task has run as far as it can: the first is loading, the others wait for it, and
    // the thread is free (it is running this).
    pool.run_until_stalled();
    assert_eq!((loads.load(Ordering::SeqCst), results.borrow().len()), (1, 0));
    open.send(()).unwrap();
    pool.run();
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert_eq!(results.borrow().len(), WAITERS);
    assert!(results.borrow().iter().all(|v| v == b"v"));
}

#[test]
fn an_error_reaches_every_waiter_and_is_not_cached() {
    let cache = shared();
    let waiter_loads = AtomicUsize::new(0);
    block_on(async {
        let (open, gate) = oneshot::channel::<()>();
        let mut leader = Box::pin(cache.try_get_or_insert_with_async(b"k", Duration::ZERO, async {
            gate.await.unwrap();
            Err::<Vec<u8>, String>("backend down".into())
        }));
        assert_pending(&mut leader).await;
        let mut waiters: Vec<_> = (0..100)
            .map(|_| {
                Box::pin(cache.try_get_or_insert_with_async(b"k", Duration::ZERO, async {
                    waiter_loads.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(b"never".to_vec())
                }))
            })
            .collect();
        for w in &mut waiters {
            assert_pending(w).await;
        }
        open.send(()).unwrap();
        let Err(LoadError::Loader(first)) = leader.await else { panic!("the loader's error") };
        assert_eq!(*first, "backend down");
        for r in join_all(waiters).await {
            let Err(LoadError::Loader(e)) = r else { panic!("a waiter got no error") };
            assert!(Arc::ptr_eq(&e, &first), "every waiter gets the loader's error itself");
        }
    });
    assert_eq!(waiter_loads.load(Ordering::SeqCst), 0);
    assert!(cache.get(b"k").is_none());
    // The next call loads again.
    let item =
        block_on(cache.try_get_or_insert_with_async(b"k", Duration::ZERO, async { Ok::<_, String>(b"v".to_vec()) }));
    assert_eq!(item.unwrap().value, b"v");
}

#[test]
fn a_waiter_with_another_error_type_loads_for_itself() {
    let cache = shared();
    block_on(async {
        let (open, gate) = oneshot::channel::<()>();
        let mut leader = Box::pin(cache.try_get_or_insert_with_async(b"k", Duration::ZERO, async {
            gate.await.unwrap();
            Err::<Vec<u8>, String>("backend down".into())
        }));
        assert_pending(&mut leader).await;
        let mut waiter =
            Box::pin(cache.try_get_or_insert_with_async(b"k", Duration::ZERO, async {
                Ok::<_, std::io::Error>(b"own".to_vec())
            }));
        assert_pending(&mut waiter).await;
        open.send(()).unwrap();
        assert!(matches!(leader.await, Err(LoadError::Loader(_))));
        assert_eq!(waiter.await.unwrap().value, b"own");
    });
    assert_eq!(cache.get(b"k").unwrap().value, b"own");
}

#[test]
fn a_dropped_loader_hands_the_key_to_the_next_waiter() {
    let cache = shared();
    let loads = AtomicUsize::new(0);
    block_on(async {
        let mut leader = Box::pin(cache.get_or_insert_with_async(b"k", Duration::ZERO, pending::<Vec<u8>>()));
        assert_pending(&mut leader).await;
        let mut waiters: Vec<Pin<Box<_>>> = (0..10)
            .map(|i| {
                let loads = &loads;
                Box::pin(cache.get_or_insert_with_async(b"k", Duration::ZERO, async move {
                    loads.fetch_add(1, Ordering::SeqCst);
                    format!("from waiter {i}").into_bytes()
                }))
            })
            .collect();
        for w in &mut waiters {
            assert_pending(w).await;
        }
        assert_eq!(loads.load(Ordering::SeqCst), 0);
        drop(leader); // cancelled mid-load
        let items = join_all(waiters).await;
        // One waiter ran its loader; all got its value.
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        let first = &items[0].as_ref().unwrap().value;
        assert!(first.starts_with(b"from waiter "));
        assert!(items.iter().all(|i| &i.as_ref().unwrap().value == first));
    });
}

#[test]
fn an_aborted_tokio_task_hands_the_key_on() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cache = shared();
    rt.block_on(async {
        let (loading, started) = oneshot::channel::<()>();
        let leader = tokio::spawn({
            let cache = Arc::clone(&cache);
            async move {
                let init = async move {
                    loading.send(()).unwrap();
                    pending::<Vec<u8>>().await
                };
                cache.get_or_insert_with_async(b"k", Duration::ZERO, init).await
            }
        });
        started.await.unwrap();
        let waiter = tokio::spawn({
            let cache = Arc::clone(&cache);
            async move { cache.get_or_insert_with_async(b"k", Duration::ZERO, async { b"second".to_vec() }).await }
        });
        leader.abort();
        assert!(leader.await.unwrap_err().is_cancelled());
        assert_eq!(waiter.await.unwrap().unwrap().value, b"second");
    });
    assert_eq!(cache.get(b"k").unwrap().value, b"second");
}

#[test]
fn a_panicking_loader_hands_the_key_on() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cache = shared();
    rt.block_on(async {
        let (go, gate) = oneshot::channel::<()>();
        let leader = tokio::spawn({
            let cache = Arc::clone(&cache);
            async move {
                let init = async move {
                    gate.await.unwrap();
                    panic!("loader bug")
                };
                cache.get_or_insert_with_async(b"k", Duration::ZERO, init).await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let waiter = tokio::spawn({
            let cache = Arc::clone(&cache);
            async move { cache.get_or_insert_with_async(b"k", Duration::ZERO, async { b"second".to_vec() }).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        go.send(()).unwrap();
        assert!(leader.await.unwrap_err().is_panic());
        assert_eq!(waiter.await.unwrap().unwrap().value, b"second");
    });
}

#[test]
fn ttl_flags_and_hits_match_the_blocking_loader() {
    let cache = shared();
    let item =
        block_on(cache.get_or_insert_with_async(b"k", Duration::from_secs(60), async { b"v".to_vec() })).unwrap();
    assert_eq!((item.flags, item.ttl), (0, Some(Duration::from_secs(60))));
    assert_eq!(cache.get(b"k").unwrap().cas, item.cas);
    assert!(cache.get(b"k").unwrap().ttl.is_some_and(|t| t <= Duration::from_secs(60)));
    // A hit returns the stored item and leaves the future unpolled.
    let hit = block_on(cache.get_or_insert_with_async(b"k", Duration::ZERO, async { unreachable!() })).unwrap();
    assert_eq!(hit, cache.get(b"k").unwrap());
    // A value too large to keep is still handed back, with CAS 0.
    let big = vec![7; 1 << 20];
    let item = block_on(cache.get_or_insert_with_async(b"big", Duration::ZERO, async { big.clone() })).unwrap();
    assert_eq!((item.value.len(), item.cas), (1 << 20, 0));
    assert!(cache.get(b"big").is_none());
}

#[test]
fn bad_keys_are_refused_before_loading() {
    let cache = shared();
    let r = block_on(cache.get_or_insert_with_async(b"", Duration::ZERO, async { unreachable!() }));
    assert!(matches!(r, Err(Error::EmptyKey)));
    let r = block_on(cache.try_get_or_insert_with_async(&[b'k'; 251], Duration::ZERO, async {
        Err::<Vec<u8>, String>("not run".into())
    }));
    assert!(matches!(r, Err(LoadError::Cache(Error::KeyTooLong { len: 251 }))));
}
