//! Which process a cache belongs to. A handle copied into a child by `fork()` would share a file
//! mapping with its parent without sharing its locks (and so lose or tear items), or silently
//! keep a private copy of an anonymous heap; instead the child's handle refuses every operation
//! with [`Error::Forked`](crate::Error::Forked). A `fork()` handler bumps a process-wide
//! generation in the child, so the check is one relaxed load and a compare.
//!
//! A cache that processes share (`Builder::multi_process`) is the exception: its child joins the
//! file as a process of its own at its first use (`SharedCache::attach`) and then adopts the
//! new generation ([`Origin::adopt`]), for the handle and every engine under it at once.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::Arc;

use crate::error::{Error, Result};

/// How many `fork()`s lie between the first process that opened a cache and this one.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// This process's id, for spreading processes over the reader slots of a shared cache (0 until
/// the first `Origin::here`).
static SALT: AtomicUsize = AtomicUsize::new(0);

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Relaxed);
    // SAFETY: `getpid` is async-signal-safe.
    SALT.store(unsafe { libc::getpid() } as usize, Relaxed);
}

/// A number that differs between processes, cheap to read (see `ShardLock::own_slot`).
#[inline]
pub(crate) fn process_salt() -> usize {
    SALT.load(Relaxed)
}

/// The process generation a cache was opened in (or, shared between processes, last joined in).
/// Clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Origin(Arc<AtomicU32>);

impl Origin {
    /// This process's generation; registers the `fork()` handler on first use.
    ///
    /// Every thread that finds the handler not yet registered registers one itself, rather than
    /// waiting for a thread that is registering (as a `Once` would): a `fork()` while another
    /// thread registers leaves a child in which that thread does not exist, and the child's
    /// first cache waited for it forever. Threads that race at the first use may register a
    /// handler each; each then adds one to the generation at a fork, which still tells the
    /// child apart.
    pub fn here() -> Origin {
        static REGISTERED: AtomicBool = AtomicBool::new(false);
        if !REGISTERED.load(Acquire) {
            // SAFETY: `in_child` is async-signal-safe (atomic stores and `getpid`), as a handler
            // run in the child of a multi-threaded process must be; the other two are absent.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
            // Without the handler (ENOMEM only) no fork is detected; nothing else breaks.
            debug_assert_eq!(rc, 0, "pthread_atfork failed");
            // SAFETY: `getpid` has no preconditions.
            SALT.store(unsafe { libc::getpid() } as usize, Relaxed);
            REGISTERED.store(true, Release);
        }
        Origin(Arc::new(AtomicU32::new(GENERATION.load(Relaxed))))
    }

    /// Whether this process is a `fork()` child of the one the cache was opened in.
    #[inline]
    pub fn forked(&self) -> bool {
        GENERATION.load(Relaxed) != self.0.load(Relaxed)
    }

    /// The cache now belongs to this process (a child that joined a shared cache).
    pub fn adopt(&self) {
        self.0.store(GENERATION.load(Relaxed), Relaxed);
    }

    /// [`Error::Forked`] in a `fork()` child of the opening process.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if self.forked() {
            Err(Error::Forked)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_child_sees_a_new_generation() {
        let origin = Origin::here();
        assert!(!origin.forked());
        // SAFETY: the child only reads an atomic and calls `_exit`, both fork-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = if origin.forked() && matches!(origin.check(), Err(Error::Forked)) { 0 } else { 1 };
            // SAFETY: `_exit` ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child saw no fork");
        assert!(!origin.forked(), "the parent is unchanged");
    }
}
