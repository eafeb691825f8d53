//! Async single-flight loads (the `async` feature) on a tokio runtime: a thousand requests for
//! one missing key run one load; the rest await it without holding their threads.
//!
//! `cargo run --release -p segcache-core --features async --example async_loader`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use segcache_core::{Builder, LoadError};

/// A backend that takes a while to answer.
async fn fetch_profile(user: u32, calls: &AtomicUsize) -> Result<Vec<u8>, String> {
    calls.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(format!("profile of user {user}").into_bytes())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cache = Arc::new(Builder::new().heap_size(64 << 20).build_shared()?);
    let calls = Arc::new(AtomicUsize::new(0));
    let requests: Vec<_> = (0..1000)
        .map(|_| {
            let (cache, calls) = (Arc::clone(&cache), Arc::clone(&calls));
            tokio::spawn(async move {
                let load = fetch_profile(7, &calls);
                cache.try_get_or_insert_with_async(b"profile:7", Duration::from_secs(300), load).await
            })
        })
        .collect();
    for request in requests {
        match request.await? {
            Ok(item) => assert_eq!(item.value, b"profile of user 7"),
            // Every request that waited on a failed load gets the same error.
            Err(LoadError::Loader(e)) => return Err(format!("backend: {e}").into()),
            Err(LoadError::Cache(e)) => return Err(e.into()),
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    println!("async_loader: 1000 requests, {} backend call", calls.load(Ordering::SeqCst));
    Ok(())
}
