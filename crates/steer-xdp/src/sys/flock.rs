//! `flock(2)`: the exclusive lock behind one owner per interface.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Takes an exclusive lock on `file` without waiting: `Ok(false)` when
/// another open file description holds it.
pub(crate) fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: flock(2) on a descriptor `file` keeps open for the call; no memory
    // is passed.
    match syscall!(flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB)) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}
