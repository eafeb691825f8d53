//! The cache file, held open for as long as the cache lives, and its lock.
//!
//! The lock belongs to the open file, which a `fork()` child shares: were it left to go with the
//! last descriptor, a child that outlives the cache (a worker forked from the program) would keep
//! the file locked, and the program could not reopen its own file until the child ended. So the
//! cache gives the lock up itself when it closes.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::error::{Error, Result};
use crate::persist::share::{self, pid};

#[derive(Debug)]
pub(crate) struct HeldFile {
    file: File,
    /// The process that opened it: only that one gives the lock up (a child's descriptor shares
    /// the parent's lock, which is the parent's to give up).
    opener: i32,
}

impl HeldFile {
    /// Opens (or creates) the file, read-write, without locking it.
    pub fn open(path: &Path) -> Result<HeldFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        Ok(HeldFile { file, opener: pid() })
    }

    /// The users lock, exclusive, for as long as the file is open (see `share`): a second cache
    /// (in this process or another, shared between processes or not) gets [`Error::Locked`].
    pub fn lock(&self, path: &Path) -> Result<()> {
        match share::byte_lock(self.file.as_raw_fd(), share::USERS, libc::F_WRLCK, false) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::Locked { path: path.to_path_buf() }),
            Err(source) => Err(Error::Io { path: path.to_path_buf(), source }),
        }
    }

    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        if self.opener == pid() {
            let _ = share::byte_lock(self.file.as_raw_fd(), share::USERS, libc::F_UNLCK, false);
        }
    }
}
