//! One file, many processes (`Builder::multi_process`): who sets the file up, who joins it, who
//! closes it.
//!
//! Two byte-range locks on the file, of the kind the kernel ties to an open file and drops when
//! the process dies (Linux's open file description locks):
//! - byte 0, the *door*, held exclusively by a process while it opens, joins or leaves;
//! - byte 1, the *users* lock, held shared by every process using the file (and exclusively by a
//!   single-process cache, which so keeps every other process out).
//!
//! At the door a process tries the users lock exclusively. If it gets it, nobody uses the file:
//! it opens it as a single process would (verifying it, or rebuilding it after a crash), sets up
//! the locks in the mapping, then shares the users lock. Otherwise it joins a file that is live
//! and set up, after checking that its settings match those of the process that set it up.
//! Leaving, a process that can take the users lock exclusively is the last: it closes the file
//! cleanly for a warm restart. A crash of every process leaves the file as one process's crash.
//!
//! A `fork()` child shares its parent's open file, and with it the parent's locks; it joins with
//! a file of its own at its first use of the cache (`SharedCache::attach`, `join_after_fork`),
//! and closes the inherited one so that the parent's leaving is not mistaken for the child's.

use std::os::unix::io::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::Relaxed};

use crate::error::{Error, Result};
use crate::eviction::policy::Policy;

const DOOR: i64 = 0;
pub(crate) const USERS: i64 = 1;

/// The settings that processes sharing a file must agree on beyond its layout, as one word
/// (the header's `sharing`): the policy, and the options that change what a write does.
pub(crate) fn settings_word(policy: Policy, pad_numbers: bool) -> u32 {
    1 << 31 | u32::from(pad_numbers) << 8 | policy as u32
}

/// Describes a settings word for an error message.
pub(crate) fn describe(word: u32) -> String {
    let policy = Policy::ALL.get((word & 0xff) as usize).map_or("unknown".into(), |p| format!("{p:?}"));
    format!("policy {policy}, pad_numbers {}", word >> 8 & 1 == 1)
}

/// Sets (`F_RDLCK`, `F_WRLCK`) or clears (`F_UNLCK`) the lock on byte `at`; `Ok(false)` when
/// another open file holds a conflicting one and `wait` is false.
pub(crate) fn byte_lock(fd: RawFd, at: i64, kind: libc::c_int, wait: bool) -> std::io::Result<bool> {
    // SAFETY: `flock` is plain data; zeroed is a valid start.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = at;
    fl.l_len = 1;
    let cmd = if wait { libc::F_OFD_SETLKW } else { libc::F_OFD_SETLK };
    loop {
        // SAFETY: `fd` is an open descriptor; `fl` is a valid `flock` for the call.
        if unsafe { libc::fcntl(fd, cmd, &fl) } == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if !wait => return Ok(false),
            _ => return Err(err),
        }
    }
}

fn open_rw(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// How a process came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Nobody else uses the file: open it as one process would.
    First,
    /// Others use it: it is live and set up.
    Join,
}

/// A process's membership of a shared file: its users lock, and the door while it holds it.
#[derive(Debug)]
pub(crate) struct Sharing {
    path: PathBuf,
    /// The descriptor that holds this process's users lock (replaced after a `fork()`).
    users: AtomicI32,
    /// The descriptor that holds the door, or -1.
    door: AtomicI32,
    /// Decided when leaving: this process is the last, and closes the file cleanly.
    last: AtomicBool,
    /// The settings word this process opened with.
    pub settings: u32,
    /// The process these descriptors belong to: a `fork()` child that has not joined leaves its
    /// parent's locks alone.
    pid: AtomicI32,
}

/// This process's id (the owner of a file's descriptors and locks).
pub(crate) fn pid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

impl Drop for Sharing {
    fn drop(&mut self) {
        self.release();
    }
}

impl Sharing {
    /// At the door: waits for it (a process opening or leaving holds it briefly; one that dies
    /// holding it releases it), then takes the users lock. The door stays held until `opened`.
    pub fn enter(path: &Path, settings: u32) -> Result<(Sharing, Entry)> {
        let door = open_rw(path)?;
        byte_lock(door.as_raw_fd(), DOOR, libc::F_WRLCK, true).map_err(io(path))?;
        let users = open_rw(path)?;
        let entry = if byte_lock(users.as_raw_fd(), USERS, libc::F_WRLCK, false).map_err(io(path))? {
            Entry::First
        } else if byte_lock(users.as_raw_fd(), USERS, libc::F_RDLCK, false).map_err(io(path))? {
            Entry::Join
        } else {
            // A single-process cache holds it exclusively (the door is released as `door` closes).
            return Err(Error::Locked { path: path.to_path_buf() });
        };
        let sharing = Sharing {
            path: path.to_path_buf(),
            users: AtomicI32::new(users.into_raw_fd()),
            door: AtomicI32::new(door.into_raw_fd()),
            last: AtomicBool::new(false),
            settings,
            pid: AtomicI32::new(pid()),
        };
        Ok((sharing, entry))
    }

    /// The file is open (and, for the first process, set up): share the users lock and leave
    /// the door to the next process.
    pub fn opened(&self) -> Result<()> {
        byte_lock(self.users.load(Relaxed), USERS, libc::F_RDLCK, false).map_err(io(&self.path))?;
        self.release_door();
        Ok(())
    }

    fn release_door(&self) {
        let fd = self.door.swap(-1, Relaxed);
        if fd >= 0 {
            // SAFETY: `fd` was ours (taken out of `door`, so closed once); closing it drops its lock.
            drop(unsafe { std::fs::File::from_raw_fd(fd) });
        }
    }

    /// In a `fork()` child, at its first use of the cache: joins the file with descriptors of
    /// its own. `Entry::First` when the parent has left meanwhile (then the caller marks the
    /// file in use again).
    pub fn join_after_fork(&self) -> Result<Entry> {
        let door = open_rw(&self.path)?;
        byte_lock(door.as_raw_fd(), DOOR, libc::F_WRLCK, true).map_err(io(&self.path))?;
        let users = open_rw(&self.path)?;
        // The inherited descriptor shares the parent's lock: close it (the parent's stays).
        let old = self.users.swap(users.into_raw_fd(), Relaxed);
        // SAFETY: `old` was this handle's users descriptor, inherited and not used again.
        drop(unsafe { std::fs::File::from_raw_fd(old) });
        let fd = self.users.load(Relaxed);
        let entry = if byte_lock(fd, USERS, libc::F_WRLCK, false).map_err(io(&self.path))? {
            Entry::First
        } else if byte_lock(fd, USERS, libc::F_RDLCK, false).map_err(io(&self.path))? {
            Entry::Join
        } else {
            return Err(Error::Locked { path: self.path.clone() });
        };
        self.door.store(door.into_raw_fd(), Relaxed);
        self.pid.store(pid(), Relaxed);
        Ok(entry)
    }

    /// Leaving: waits at the door, and decides whether this process is the last. The door
    /// stays held until `release` (after the close).
    pub fn leave(&self) {
        let Ok(door) = open_rw(&self.path) else { return };
        if byte_lock(door.as_raw_fd(), DOOR, libc::F_WRLCK, true).is_err() {
            return;
        }
        let last = byte_lock(self.users.load(Relaxed), USERS, libc::F_WRLCK, false).unwrap_or(false);
        self.last.store(last, Relaxed);
        self.door.store(door.into_raw_fd(), Relaxed);
    }

    /// Whether `leave` found this process the last.
    pub fn is_last(&self) -> bool {
        self.last.load(Relaxed)
    }

    /// Gives up the users lock and the door: explicitly, since a `fork()` child may still hold
    /// these descriptors' open files.
    pub fn release(&self) {
        if self.pid.load(Relaxed) != pid() {
            return;
        }
        let fd = self.users.swap(-1, Relaxed);
        if fd >= 0 {
            let _ = byte_lock(fd, USERS, libc::F_UNLCK, false);
            // SAFETY: `fd` was ours (taken out of `users`, so closed once).
            drop(unsafe { std::fs::File::from_raw_fd(fd) });
        }
        let door = self.door.load(Relaxed);
        if door >= 0 {
            let _ = byte_lock(door, DOOR, libc::F_UNLCK, false);
        }
        self.release_door();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("segcache-share-{}-{name}", std::process::id()));
        std::fs::write(&p, b"").unwrap();
        p
    }

    #[test]
    fn the_first_sets_up_the_next_joins_and_the_last_leaves() {
        let path = temp("door");
        let (a, entry) = Sharing::enter(&path, 1).unwrap();
        assert_eq!(entry, Entry::First);
        a.opened().unwrap();
        let (b, entry) = Sharing::enter(&path, 1).unwrap();
        assert_eq!(entry, Entry::Join);
        b.opened().unwrap();
        a.leave();
        assert!(!a.is_last(), "b still uses the file");
        a.release();
        b.leave();
        assert!(b.is_last());
        b.release();
        let (c, entry) = Sharing::enter(&path, 1).unwrap();
        assert_eq!(entry, Entry::First, "everybody left");
        c.release();
        std::fs::remove_file(&path).unwrap();
    }
}
