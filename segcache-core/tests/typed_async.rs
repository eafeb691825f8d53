//! The typed cache's async loaders (`serde` and `async` features).
#![cfg(all(feature = "serde", feature = "async"))]

use std::future::pending;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::channel::oneshot;
use futures::executor::block_on;
use futures::future::join_all;
use futures::poll;
use segcache_core::{Builder, TypedCache, TypedError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, PartialEq, Debug, Clone)]
struct User {
    id: u64,
    name: String,
    score: f32,
}

fn typed() -> TypedCache<u64, User> {
    TypedCache::new(Builder::new().heap_size(8 << 20).segment_size(64 << 10).build_shared().unwrap())
}

fn user(id: u64) -> User {
    User { id, name: format!("user {id}"), score: 0.5 }
}

#[test]
fn many_tokio_tasks_get_one_decoded_load() {
    const TASKS: usize = 2_000;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let cache = Arc::new(typed());
    let loads = Arc::new(AtomicUsize::new(0));
    let users = rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (cache, loads) = (Arc::clone(&cache), Arc::clone(&loads));
                tokio::spawn(async move {
                    let init = async {
                        loads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        user(42)
                    };
                    cache.get_or_insert_with_async(&42, Duration::ZERO, init).await.unwrap()
                })
            })
            .collect();
        join_all(tasks).await
    });
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert!(users.into_iter().all(|u| u.unwrap() == user(42)));
    assert_eq!(cache.get(&42).unwrap(), Some(user(42)));
}

#[test]
fn errors_reach_every_waiter_and_cancellation_hands_on() {
    let cache = typed();
    block_on(async {
        let (open, gate) = oneshot::channel::<()>();
        let mut leader = Box::pin(cache.try_get_or_insert_with_async(&1, Duration::ZERO, async {
            gate.await.unwrap();
            Err::<User, &str>("backend down")
        }));
        assert!(matches!(poll!(leader.as_mut()), Poll::Pending));
        let mut waiters: Vec<_> = (0..10)
            .map(|_| Box::pin(cache.try_get_or_insert_with_async(&1, Duration::ZERO, async { Ok::<_, &str>(user(0)) })))
            .collect();
        for w in &mut waiters {
            assert!(matches!(poll!(w.as_mut()), Poll::Pending));
        }
        open.send(()).unwrap();
        let Err(TypedError::Loader(first)) = leader.await else { panic!("the loader's error") };
        for r in join_all(waiters).await {
            assert!(matches!(r, Err(TypedError::Loader(e)) if Arc::ptr_eq(&e, &first)));
        }

        let mut leader = Box::pin(cache.get_or_insert_with_async(&2, Duration::ZERO, pending::<User>()));
        assert!(matches!(poll!(leader.as_mut()), Poll::Pending));
        let mut waiter = Box::pin(cache.get_or_insert_with_async(&2, Duration::ZERO, async { user(2) }));
        assert!(matches!(poll!(waiter.as_mut()), Poll::Pending));
        drop(leader);
        assert_eq!(waiter.await.unwrap(), user(2));
    });
    assert_eq!(cache.get(&1).unwrap(), None);
    assert_eq!(cache.get(&2).unwrap(), Some(user(2)));
}

#[test]
fn refused_keys_run_no_loader() {
    let floats: TypedCache<f32, u32> =
        TypedCache::new(Builder::new().heap_size(8 << 20).segment_size(64 << 10).build_shared().unwrap());
    let r = block_on(floats.get_or_insert_with_async(&f32::NAN, Duration::ZERO, async { unreachable!() }));
    assert!(matches!(r, Err(TypedError::KeyNotCanonical)));
    assert!(floats.is_empty());
}
