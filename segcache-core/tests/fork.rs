//! A handle inherited across `fork()` refuses to work in the child (`Error::Forked`), with a file
//! or without, through `Segcache` and `SharedCache`, and the child leaves the parent's cache and
//! file exactly as they were.

use std::path::PathBuf;
use std::time::Duration;

use segcache_core::{Builder, Error};

fn tmp(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("segcache-fork-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn builder(path: Option<&PathBuf>) -> Builder {
    let b = Builder::new().heap_size(4 << 20).segment_size(256 << 10).shards(2);
    match path {
        Some(p) => b.path(p),
        None => b,
    }
}

/// Runs `child` in a forked child and returns its exit code (0 when it returned `true`). The
/// child ends with `_exit`, so the handles it inherited are never dropped there unless `child`
/// drops them itself.
fn in_child(child: impl FnOnce() -> bool) -> i32 {
    // SAFETY: the test binary's other threads hold no lock the child needs: the child touches
    // only the cache (whose check refuses before any lock) and the allocator.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
        // SAFETY: ends the child at once, without the parent's atexit handlers or destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `pid` is this process's child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child did not exit normally: {status}");
    libc::WEXITSTATUS(status)
}

fn forked<T>(r: segcache_core::Result<T>) -> bool {
    matches!(r, Err(Error::Forked))
}

#[test]
fn shared_cache_refuses_every_operation_in_a_fork_child() {
    // With `touch_ahead`, the parent's thread faults the heap in while it forks: the child has
    // the handle but not the thread, and its drop must neither wait for nor stop it.
    let runs = [(None, false), (Some(tmp("shared")), false), (None, true), (Some(tmp("shared-ahead")), true)];
    for (path, touch_ahead) in runs {
        let c = builder(path.as_ref()).heap_size(64 << 20).touch_ahead(touch_ahead).build_shared().unwrap();
        c.set(b"k", b"parent", 1, Duration::ZERO).unwrap();
        c.set(b"n", b"1", 0, Duration::ZERO).unwrap();
        let code = in_child(|| {
            let t = Duration::ZERO;
            let writes = [
                forked(c.check_fork()),
                forked(c.set(b"k", b"child", 0, t)),
                forked(c.set(b"new", b"child", 0, t)),
                forked(c.add(b"a", b"v", 0, t)),
                forked(c.replace(b"k", b"v", 0, t)),
                forked(c.cas(b"k", b"v", 0, t, 1)),
                forked(c.append(b"k", b"x")),
                forked(c.prepend(b"k", b"x")),
                forked(c.incr(b"n", 1)),
                forked(c.decr(b"n", 1)),
                forked(c.touch(b"k", t)),
                forked(c.delete(b"k")),
            ];
            c.flush();
            let reads = c.get(b"k").is_none()
                && !c.contains(b"k")
                && c.get_and_touch(b"k", t).is_none()
                && c.get_many(&[b"k", b"n"]).iter().all(Option::is_none);
            // Dropping the inherited handle must leave the parent's file alone.
            // SAFETY: in the child this bitwise copy is the only one ever used or dropped again:
            // the child ends with `_exit` right after this closure, skipping `c`'s own drop.
            drop(unsafe { std::ptr::read(&c) });
            writes.iter().all(|&w| w) && reads
        });
        assert_eq!(code, 0, "child saw a working cache (path {path:?})");
        // The parent's cache is untouched by the child's attempts and its drop, its file still
        // locked against a second cache.
        c.check_fork().unwrap();
        if let Some(p) = path.as_ref() {
            assert!(matches!(builder(Some(p)).heap_size(64 << 20).build_shared(), Err(Error::Locked { .. })));
        }
        assert_eq!(c.get(b"k").unwrap().value, b"parent");
        assert_eq!(c.incr(b"n", 1).unwrap(), 2);
        c.set(b"after", b"fork", 0, Duration::ZERO).unwrap();
        c.close().unwrap();
        if let Some(p) = path {
            // The child's drop did not seal the file under the parent: it reopens warm.
            let c = builder(Some(&p)).heap_size(64 << 20).build_shared().unwrap();
            assert_eq!(c.get(b"k").unwrap().value, b"parent");
            assert_eq!(c.get(b"after").unwrap().value, b"fork");
            drop(c);
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn segcache_refuses_writes_and_reads_in_a_fork_child() {
    for path in [None, Some(tmp("single"))] {
        let mut c = builder(path.as_ref()).shards(1).build().unwrap();
        c.set(b"k", b"parent", 0, Duration::ZERO).unwrap();
        let code = in_child(move || {
            let ok = forked(c.check_fork())
                && forked(c.set(b"k", b"child", 0, Duration::ZERO))
                && forked(c.delete(b"k"))
                && forked(c.touch(b"k", Duration::ZERO))
                && c.get(b"k").is_none()
                && c.expire() == 0;
            ok && forked(c.close())
        });
        assert_eq!(code, 0, "child saw a working cache (path {path:?})");
        if let Some(p) = path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A child that outlives the parent's cache leaves its file alone: the parent closes it and
/// opens it again, warm, while the child still runs. (Before, the child's copy of the file's
/// descriptor kept the lock, and the reopen failed with `Error::Locked` until the child ended.)
#[test]
fn a_child_that_lives_on_does_not_keep_the_file_locked() {
    for shared in [false, true] {
        let path = tmp(if shared { "lives-on-shared" } else { "lives-on-single" });
        let open = || builder(Some(&path)).shards(if shared { 2 } else { 1 });
        let (mut single, shared_cache) =
            if shared { (None, Some(open().build_shared().unwrap())) } else { (Some(open().build().unwrap()), None) };
        if let Some(c) = single.as_mut() {
            c.set(b"k", b"parent", 0, Duration::ZERO).unwrap();
        }
        if let Some(c) = shared_cache.as_ref() {
            c.set(b"k", b"parent", 0, Duration::ZERO).unwrap();
        }
        let mut pipe = [0; 2];
        // SAFETY: `pipe` is a valid array of two descriptors.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: the child only reads from a pipe and calls `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut byte = 0u8;
            // SAFETY: waits for the parent's word (or its end) on the pipe; `byte` is writable.
            unsafe { libc::read(pipe[0], (&mut byte as *mut u8).cast(), 1) };
            // SAFETY: ends the child without the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        if let Some(c) = single.take() {
            c.close().unwrap();
        }
        if let Some(c) = shared_cache {
            c.close().unwrap();
        }
        let reopened = if shared {
            open().build_shared().map(|c| c.get(b"k").map(|i| i.value))
        } else {
            open().build().map(|c| c.get(b"k").map(|i| i.value().to_vec()))
        };
        // SAFETY: lets the child end; `pipe` holds our two descriptors, each closed once.
        unsafe {
            libc::write(pipe[1], b"x".as_ptr().cast(), 1);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
        let mut status = 0;
        // SAFETY: `pid` is this process's child; `status` is a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(reopened.unwrap(), Some(b"parent".to_vec()), "shared {shared}");
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn a_cache_opened_in_the_child_works() {
    let code = in_child(|| {
        let c = builder(None).build_shared().unwrap();
        c.set(b"k", b"v", 0, Duration::ZERO).is_ok() && c.get(b"k").is_some_and(|i| i.value == b"v")
    });
    assert_eq!(code, 0);
}
