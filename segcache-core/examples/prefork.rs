//! A pre-fork server's workers sharing one cache: the parent opens the cache and fills it, then
//! forks workers that read what it stored and store items of their own, which the parent and
//! their siblings see. `cargo run --release -p segcache-core --example prefork`

use std::time::Duration;

use segcache_core::{Builder, Error};

const WORKERS: usize = 4;

fn worker(cache: &segcache_core::SharedCache, id: usize) -> Result<(), Error> {
    cache.check_fork()?; // joins the file as this process (any first use would)
    for i in 0..10_000 {
        let key = format!("w{id}:{i}");
        cache.set(key.as_bytes(), key.as_bytes(), 0, Duration::ZERO)?;
        assert!(cache.get(b"config").is_some(), "the parent's item is there");
    }
    cache.incr(b"workers done", 1)?; // atomic across processes
    Ok(())
}

fn main() -> Result<(), Error> {
    let path = std::env::temp_dir().join(format!("segcache-prefork-{}", std::process::id()));
    let cache = Builder::new().heap_size(64 << 20).path(&path).multi_process(true).build_shared()?;
    cache.set(b"config", b"loaded once, before the fork", 0, Duration::ZERO)?;
    cache.set(b"workers done", b"0", 0, Duration::ZERO)?;

    let mut children = Vec::new();
    for id in 0..WORKERS {
        // SAFETY: this program has one thread; the child uses the cache and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = match worker(&cache, id) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("worker {id}: {e}");
                    1
                }
            };
            // The worker leaves the file (its handle is the parent's copy: drop it explicitly).
            drop(cache);
            std::process::exit(code);
        }
        children.push(pid);
    }
    for pid in children {
        let mut status = 0;
        // SAFETY: `pid` is this process's child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "a worker failed");
    }
    let done = cache.get(b"workers done").expect("counter").value;
    let stats = cache.stats();
    println!(
        "{} workers done; {} items in one cache; {} sets and {} hits counted across the processes",
        String::from_utf8_lossy(&done),
        stats.items,
        stats.sets,
        stats.get_hits
    );
    assert_eq!(done, WORKERS.to_string().as_bytes());
    assert_eq!(stats.items as usize, 2 + WORKERS * 10_000);
    cache.close()?; // the last process to leave closes the file cleanly
    std::fs::remove_file(&path).ok();
    Ok(())
}
