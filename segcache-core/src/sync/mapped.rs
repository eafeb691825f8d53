//! `MappedLock`: a shard's lock for processes that share a cache (`Builder::multi_process`).
//!
//! It lives in the mapping, so every process that maps the file takes the same lock: a robust,
//! process-shared POSIX mutex, and beside it the shard's write sequence number for reads that
//! take no lock. Robust: when a process dies holding it (SIGKILL mid-append, mid-merge), the
//! kernel releases it and the next process to take it is told the owner died
//! ([`Taken::OwnerDied`]); that process repairs the shard before anyone else goes on. Nobody waits
//! on a dead process.
//!
//! The mutex is exclusive: readers that need the lock (large items, batched reads) take it like
//! writers, since reader counts kept in one process's memory cannot hold off another process's
//! writer. Most reads take no lock at all (`peek`), and they only watch `seq`.

use std::cell::UnsafeCell;

#[cfg(loom)]
use loom::sync::atomic::AtomicU64;
#[cfg(not(loom))]
use std::sync::atomic::AtomicU64;

/// One shard's lock and write sequence number, on a cache-line pair of its own.
#[repr(C, align(128))]
pub struct MappedLock {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    /// As `ShardLock`'s `seq`: odd while a writer holds the lock. A writer that died leaves it
    /// odd; optimistic readers then give up waiting and take the lock, which repairs the shard.
    pub seq: AtomicU64,
}

/// Tries before a waiter sleeps in the kernel, and `pause`s between two tries (about 64 x 140
/// cycles on recent x86: several short critical sections).
const SPIN_TRIES: u32 = 64;
const SPIN_PAUSES: u32 = 64;

/// How the lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// From a holder that released it.
    Clean,
    /// From a process that died holding it: what it guards may be half changed.
    OwnerDied,
}

impl MappedLock {
    /// Makes the mutex process-shared and robust, unlocked, and zeroes `seq`.
    ///
    /// # Safety
    /// `this` points at a `MappedLock` in a shared mapping that no thread of any process uses
    /// until this returns (the first process to open the file holds the file's opening lock).
    pub unsafe fn init(this: *mut MappedLock) -> std::io::Result<()> {
        let check = |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(std::io::Error::from_raw_os_error(rc)) };
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: `attr` is initialised before use and destroyed after; `this` is valid for
        // writes and unused elsewhere (the caller's contract); a zeroed `AtomicU64` is 0.
        unsafe {
            std::ptr::write_bytes(this as *mut u8, 0, std::mem::size_of::<MappedLock>());
            check(libc::pthread_mutexattr_init(attr.as_mut_ptr()))?;
            let set = check(libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED))
                .and_then(|()| check(libc::pthread_mutexattr_setrobust(attr.as_mut_ptr(), libc::PTHREAD_MUTEX_ROBUST)))
                .and_then(|()| check(libc::pthread_mutex_init((*this).mutex.get(), attr.as_ptr())));
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            set
        }
    }

    /// Takes the mutex, waiting for a live holder. After [`Taken::OwnerDied`] the caller must
    /// repair what the lock guards and call [`MappedLock::mark_consistent`] before `unlock`.
    pub fn lock(&self) -> Taken {
        // Holders keep it for a few hundred nanoseconds: a waiter that went straight to sleep in
        // the kernel (as the mutex does, robust ones never spin) would pay two system calls and
        // a wake-up for a wait shorter than either. So it tries a while first.
        for _ in 0..SPIN_TRIES {
            // SAFETY: as below.
            match unsafe { libc::pthread_mutex_trylock(self.mutex.get()) } {
                0 => return Taken::Clean,
                libc::EOWNERDEAD => return Taken::OwnerDied,
                libc::EBUSY => (0..SPIN_PAUSES).for_each(|_| std::hint::spin_loop()),
                rc => panic!("segcache: shard lock failed: {}", std::io::Error::from_raw_os_error(rc)),
            }
        }
        // SAFETY: the mutex was initialised by `init` when the file was first opened, and lies
        // in a mapping that outlives this lock's users.
        match unsafe { libc::pthread_mutex_lock(self.mutex.get()) } {
            0 => Taken::Clean,
            libc::EOWNERDEAD => Taken::OwnerDied,
            // ENOTRECOVERABLE: a process unlocked after `OwnerDied` without repairing, which this
            // crate never does; anything else is a broken mapping.
            rc => panic!("segcache: shard lock failed: {}", std::io::Error::from_raw_os_error(rc)),
        }
    }

    /// After the repair that [`Taken::OwnerDied`] asked for.
    pub fn mark_consistent(&self) {
        // SAFETY: called by the holder, after `lock` returned `OwnerDied`.
        unsafe { libc::pthread_mutex_consistent(self.mutex.get()) };
    }

    pub fn unlock(&self) {
        // SAFETY: called by the holder only (the guards that call it are made by `lock`).
        unsafe { libc::pthread_mutex_unlock(self.mutex.get()) };
    }
}

// SAFETY: the mutex is made for sharing between threads and processes; `seq` is atomic.
unsafe impl Sync for MappedLock {}
// SAFETY: as above.
unsafe impl Send for MappedLock {}

impl std::fmt::Debug for MappedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedLock").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    /// A lock in anonymous shared memory, as a file mapping would hold it.
    pub(crate) fn shared_lock() -> &'static MappedLock {
        let len = std::mem::size_of::<MappedLock>();
        // SAFETY: a fresh shared anonymous mapping of the lock's size, never unmapped (the test
        // process ends first); `init` runs before any use.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            MappedLock::init(p as *mut MappedLock).unwrap();
            &*(p as *const MappedLock)
        }
    }

    #[test]
    fn a_lock_held_by_a_killed_process_is_handed_on_with_word_of_the_death() {
        let lock = shared_lock();
        // SAFETY: the child only takes the lock, writes an atomic and kills itself.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            lock.lock();
            lock.seq.store(7, Relaxed); // odd: dies mid-write
                                        // SAFETY: ends the child at once, holding the lock, as a SIGKILL would.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFSIGNALED(status));
        assert_eq!(lock.lock(), Taken::OwnerDied);
        assert_eq!(lock.seq.load(Relaxed), 7);
        lock.mark_consistent();
        lock.unlock();
        assert_eq!(lock.lock(), Taken::Clean, "repaired once, then as before");
        lock.unlock();
    }

    #[test]
    fn processes_exclude_each_other() {
        let lock = shared_lock();
        let counter = &lock.seq;
        let children: Vec<i32> = (0..3)
            .map(|_| {
                // SAFETY: the child only takes the lock, updates an atomic and exits.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    for _ in 0..10_000 {
                        lock.lock();
                        // A load and a store, not an add: only exclusion keeps the count exact.
                        counter.store(counter.load(Relaxed) + 1, Relaxed);
                        lock.unlock();
                    }
                    // SAFETY: ends the child without running the parent's destructors.
                    unsafe { libc::_exit(0) };
                }
                pid
            })
            .collect();
        for pid in children {
            let mut status = 0;
            // SAFETY: `pid` is our child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        }
        assert_eq!(counter.load(Relaxed), 30_000);
    }
}
