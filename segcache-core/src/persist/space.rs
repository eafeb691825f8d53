//! Reserving the persistence file's blocks when it is opened.
//!
//! The heap is a shared mapping of the file. A page of it that the filesystem cannot back (a full
//! disk or tmpfs, a sparse file with no room left for its holes) is reported by the kernel when
//! the page is first written, as `SIGBUS`: the process dies in the middle of a store. Reserving
//! every block at open turns that into an error before the cache is handed out.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Makes the filesystem hold `len` bytes of blocks for `file` (holes filled, nothing written
/// over): [`Error::NoSpace`] if it has no room for them.
pub(crate) fn reserve(file: &File, path: &Path, len: u64) -> Result<()> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let Ok(off_len) = libc::off_t::try_from(len) else {
        return Err(no_space(file, path, len));
    };
    // SAFETY: the descriptor is open for the duration of the call (borrowed from `file`); the
    // call takes no pointers.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, off_len) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC | libc::EFBIG => Err(no_space(file, path, len)),
        // A filesystem that cannot reserve (glibc writes zeros where the kernel call is missing;
        // a few filesystems refuse both): the space free is checked instead, which another
        // writer can still take before the heap's pages are written.
        libc::EOPNOTSUPP | libc::EINVAL => {
            let held = file.metadata().map_err(io)?.blocks() * 512;
            match free_bytes(file) {
                Some(free) if held.saturating_add(free) < len => Err(no_space(file, path, len)),
                _ => Ok(()),
            }
        }
        e => Err(io(std::io::Error::from_raw_os_error(e))),
    }
}

fn no_space(file: &File, path: &Path, needed: u64) -> Error {
    Error::NoSpace { path: path.to_path_buf(), needed, free: free_bytes(file).unwrap_or(0) }
}

/// The bytes an unprivileged writer may still take on `file`'s filesystem.
fn free_bytes(file: &File) -> Option<u64> {
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `st` is a valid place for one `statvfs`, written by the call on success.
    let rc = unsafe { libc::fstatvfs(file.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: the call succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}
