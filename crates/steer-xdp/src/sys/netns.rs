//! The network namespace a thread works in. Interface indices and netlink
//! are per namespace: a program attached from a thread inside one namespace
//! must be detached from that namespace, whichever thread drops its owner.
//! [`NetNs`] keeps the attaching thread's namespace open and runs a closure
//! inside it (on a helper thread when the caller is elsewhere).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// A network namespace, held open.
#[derive(Debug)]
pub(crate) struct NetNs {
    file: File,
    inode: u64,
}

impl NetNs {
    /// The calling thread's namespace.
    pub(crate) fn current() -> io::Result<Self> {
        let file = File::open("/proc/thread-self/ns/net")?;
        let inode = file.metadata()?.ino();
        Ok(Self { file, inode })
    }

    /// Runs `f` inside this namespace: here when the calling thread is in
    /// it, else on a helper thread that enters it first.
    pub(crate) fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> io::Result<R> {
        let here = std::fs::metadata("/proc/thread-self/ns/net")?.ino();
        if here == self.inode {
            return Ok(f());
        }
        let fd = self.file.as_raw_fd();
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: `fd` is an open namespace file (kept open by `self`,
                // which outlives the scope); setns switches only this thread.
                let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(f())
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_here_when_already_inside() {
        let ns = NetNs::current().unwrap();
        let id = std::thread::current().id();
        assert_eq!(ns.run(|| std::thread::current().id()).unwrap(), id);
    }
}
