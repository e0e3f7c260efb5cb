//! One owner per interface: an exclusive `flock` on a file named after the
//! interface (its network namespace and ifindex) under
//! [`OWNER_DIR`](crate::owner_lock::OWNER_DIR), taken before steer touches
//! the interface and held for as long as its program is attached. The
//! kernel drops the lock when the process ends, however it ends, so a second
//! start while the owner lives fails with the owner's pid, and a start after
//! `kill -9` takes over by itself: whatever steer program is left attached
//! is nobody's.
//!
//! Invariants: a process holds at most one lock per interface; taking it
//! again in the same process shares the held one
//! ([`InterfaceLock`](crate::owner_lock::InterfaceLock) is
//! reference-counted), so the engine can take it before its stats socket
//! and the port under it again. The file holds the owner's pid for the
//! message; it is never unlinked (an unlink while another process waits on
//! the same path would let two processes hold locks on two files).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Result, XdpError};
use crate::sys;

/// Where the lock files live (tmpfs: gone at reboot, as the locks are).
pub const OWNER_DIR: &str = "/run/steer/owners";

/// The lock on one interface, held while any clone lives.
#[derive(Debug)]
pub struct InterfaceLock {
    _file: File,
    path: PathBuf,
}

/// The locks this process holds, by path, so a second take shares them.
static HELD: Mutex<Option<HashMap<PathBuf, Weak<InterfaceLock>>>> = Mutex::new(None);

impl InterfaceLock {
    /// Takes the lock on `interface` (in the calling thread's network
    /// namespace), or fails with [`XdpError::Locked`] naming the process
    /// that holds it.
    ///
    /// ```no_run
    /// let lock = steer_xdp::owner_lock::InterfaceLock::acquire("eth1")?;
    /// // ... attach, serve; the lock goes with the last clone.
    /// # drop(lock);
    /// # Ok::<(), steer_xdp::XdpError>(())
    /// ```
    pub fn acquire(interface: &str) -> Result<Arc<Self>> {
        Self::acquire_in(Path::new(OWNER_DIR), interface).map(|(lock, _)| lock)
    }

    /// [`InterfaceLock::acquire`], and whether this process held the lock
    /// already (`true`: shared with another holder in this process; `false`:
    /// taken just now, so no steer process serves the interface and what
    /// steer left attached there is nobody's).
    ///
    /// ```no_run
    /// use steer_xdp::owner_lock::InterfaceLock;
    /// let (lock, shared) = InterfaceLock::acquire_noting("eth1")?;
    /// let replace_what_is_left = !shared;
    /// # drop(lock);
    /// # Ok::<(), steer_xdp::XdpError>(())
    /// ```
    pub fn acquire_noting(interface: &str) -> Result<(Arc<Self>, bool)> {
        Self::acquire_in(Path::new(OWNER_DIR), interface)
    }

    /// [`InterfaceLock::acquire_noting`] with the lock files under `dir`.
    pub(crate) fn acquire_in(dir: &Path, interface: &str) -> Result<(Arc<Self>, bool)> {
        let ifindex = sys::ifindex(interface)?;
        let netns = std::fs::metadata("/proc/thread-self/ns/net")
            .map(|m| m.ino())
            .map_err(|e| XdpError::io("reading /proc/thread-self/ns/net", e))?;
        let path = dir.join(format!("net{netns}-if{ifindex}.lock"));
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        let held = held.get_or_insert_with(HashMap::new);
        if let Some(lock) = held.get(&path).and_then(Weak::upgrade) {
            return Ok((lock, true));
        }
        let lock = Arc::new(Self::take(&path, interface)?);
        held.retain(|_, w| w.strong_count() > 0);
        held.insert(path, Arc::downgrade(&lock));
        Ok((lock, false))
    }

    fn take(path: &Path, interface: &str) -> Result<Self> {
        let io_err = |context: &'static str, source| XdpError::OwnerLock {
            context,
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| io_err("creating the directory of", e))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io_err("opening", e))?;
        // A lock this process released a moment ago can still be held by a
        // child another thread of ours is forking: the child shares the
        // lock's open file description until its exec closes it
        // (O_CLOEXEC). A refusal naming our own pid is that, and passes
        // within moments; any other holder is refused at once.
        let deadline = std::time::Instant::now() + OWN_LINGER;
        while !sys::try_lock_exclusive(&file).map_err(|e| io_err("locking", e))? {
            let pid = holder(&mut file);
            if pid != Some(std::process::id()) || std::time::Instant::now() > deadline {
                return Err(XdpError::Locked {
                    interface: interface.into(),
                    pid,
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Held: say who holds it (for the next one's message).
        let pid = std::process::id().to_string();
        let _ = file.set_len(0);
        let _ = file.seek(SeekFrom::Start(0));
        let _ = file.write_all(pid.as_bytes());
        Ok(Self {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How long a lock this process released may linger in a forked child
/// before a new claim of it fails.
const OWN_LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// The pid the holder wrote into the lock file. A holder writes it right
/// after it took the lock, but a busy machine may hold it up between the
/// two: a file still empty, or still naming an earlier holder that has
/// exited, is read again, for up to a second.
fn holder(file: &mut File) -> Option<u32> {
    for _ in 0..100 {
        let mut text = String::new();
        if file.seek(SeekFrom::Start(0)).is_ok() && file.read_to_string(&mut text).is_ok() {
            if let Ok(pid) = text.trim().parse() {
                if alive(pid) {
                    return Some(pid);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

/// Whether process `pid` exists (in this pid namespace, as the holders
/// wrote their pids).
fn alive(pid: u32) -> bool {
    pid > 0 && Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_left_by_an_exited_holder_is_not_named() {
        assert!(alive(std::process::id()));
        assert!(!alive(0) && !alive(u32::MAX));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        assert!(!alive(gone));
    }

    fn dir(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("steer-owner-{}-{tag}", std::process::id()))
    }

    #[test]
    fn one_process_shares_its_lock_and_it_goes_with_the_last_clone() {
        let d = dir("share");
        let (a, shared_a) = InterfaceLock::acquire_in(&d, "lo").unwrap();
        let (b, shared_b) = InterfaceLock::acquire_in(&d, "lo").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!((shared_a, shared_b), (false, true));
        assert_eq!(
            std::fs::read_to_string(a.path()).unwrap(),
            std::process::id().to_string()
        );
        let path = a.path().to_path_buf();
        drop((a, b));
        // Free again: a fresh take works (and the file stays).
        let (c, shared) = InterfaceLock::acquire_in(&d, "lo").unwrap();
        assert_eq!((c.path(), shared), (path.as_path(), false));
        drop(c);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn another_holder_is_named() {
        let d = dir("other");
        let (a, _) = InterfaceLock::acquire_in(&d, "lo").unwrap();
        // Another open file description of the same file is another holder.
        let err = InterfaceLock::take(a.path(), "lo").unwrap_err();
        match err {
            XdpError::Locked { interface, pid } => {
                assert_eq!((interface.as_str(), pid), ("lo", Some(std::process::id())))
            }
            e => panic!("{e}"),
        }
        drop(a);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_unknown_interface_is_its_usual_error() {
        let err = InterfaceLock::acquire_in(&dir("unknown"), "nosuchif0").unwrap_err();
        assert!(matches!(err, XdpError::UnknownInterface { .. }), "{err}");
    }
}
