//! The seccomp allowlist a set-up steer process runs under (`--seccomp
//! on|log|off`): once its programs are attached, its sockets open and its
//! threads started, every thread may make only the system calls the
//! running engine and kernel-socket steering make (the list and where it
//! came from: the `allowlist` module's docs).
//!
//! Invariants:
//! - A call outside the list fails with EPERM ([`SeccompMode::On`], as
//!   Docker's default profile answers) rather than killing the process: a
//!   rare call the list missed is an error the caller handles or logs, not
//!   a dead data plane. [`SeccompMode::Log`] lets it through and the kernel
//!   logs it (`audit: type=1326 ... syscall=N` in the kernel log), to find
//!   what a new feature needs.
//! - [`apply`] covers every thread of the process at once (TSYNC), and
//!   threads started later inherit the filters; it sets NO_NEW_PRIVS first
//!   (the kernel requires it of an unprivileged filter).
//! - Filters only ever narrow: once applied, nothing removes them.
//! - clone3 gets ENOSYS from a filter of its own (an error outranks the
//!   allowlist's allow), so the C library starts threads with clone, whose
//!   flags the allowlist checks. That filter goes on first: the allowlist
//!   does not let a later filter be installed.

use std::fmt;
use std::str::FromStr;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

use super::allowlist;

/// What a call outside the allowlist gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SeccompMode {
    /// EPERM (the default).
    #[default]
    On,
    /// Allowed, and logged by the kernel.
    Log,
    /// No filter.
    Off,
}

impl FromStr for SeccompMode {
    type Err = String;

    /// `on`, `log` or `off`.
    ///
    /// ```
    /// use steer_xdp::privileges::seccomp::SeccompMode;
    /// assert_eq!("log".parse(), Ok(SeccompMode::Log));
    /// assert!("maybe".parse::<SeccompMode>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" => Ok(Self::On),
            "log" => Ok(Self::Log),
            "off" => Ok(Self::Off),
            other => Err(format!("{other:?}: give on, log or off")),
        }
    }
}

impl fmt::Display for SeccompMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::On => "on",
            Self::Log => "log",
            Self::Off => "off",
        })
    }
}

/// Why the filter could not be built or applied.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// This architecture has no allowlist.
    #[error("no seccomp allowlist for {0}: run with --seccomp off")]
    Unsupported(&'static str),
    /// The filter did not compile.
    #[error("building the seccomp filter: {0}")]
    Build(String),
    /// The kernel refused it.
    #[error(
        "applying the seccomp filter: {0} (run with --seccomp off on a kernel without seccomp)"
    )]
    Apply(String),
}

/// Applies the allowlist in `mode` to every thread of the process (TSYNC);
/// [`SeccompMode::Off`] does nothing.
///
/// ```no_run
/// use steer_xdp::privileges::seccomp::{apply, SeccompMode};
/// // ... set up: attach, open sockets, start threads ...
/// apply(SeccompMode::On)?;
/// # Ok::<(), steer_xdp::privileges::seccomp::SeccompError>(())
/// ```
pub fn apply(mode: SeccompMode) -> Result<(), SeccompError> {
    for filter in filters(mode)? {
        seccompiler::apply_filter_all_threads(&filter)
            .map_err(|e| SeccompError::Apply(e.to_string()))?;
    }
    if mode != SeccompMode::Off {
        tracing::info!(%mode, "seccomp allowlist applied to every thread");
    }
    Ok(())
}

/// Applies the allowlist in `mode` to the calling thread only (and the
/// threads it starts later).
///
/// ```no_run
/// use steer_xdp::privileges::seccomp::{apply_to_this_thread, SeccompMode};
/// std::thread::spawn(|| apply_to_this_thread(SeccompMode::On)).join().unwrap()?;
/// # Ok::<(), steer_xdp::privileges::seccomp::SeccompError>(())
/// ```
pub fn apply_to_this_thread(mode: SeccompMode) -> Result<(), SeccompError> {
    for filter in filters(mode)? {
        seccompiler::apply_filter(&filter).map_err(|e| SeccompError::Apply(e.to_string()))?;
    }
    Ok(())
}

/// The filters for `mode`, in the order to apply them.
fn filters(mode: SeccompMode) -> Result<Vec<BpfProgram>, SeccompError> {
    let mismatch = match mode {
        SeccompMode::Off => return Ok(Vec::new()),
        SeccompMode::On => SeccompAction::Errno(libc::EPERM as u32),
        SeccompMode::Log => SeccompAction::Log,
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| SeccompError::Unsupported(std::env::consts::ARCH))?;
    let build = |e: seccompiler::BackendError| SeccompError::Build(e.to_string());
    let allow = SeccompFilter::new(
        allowlist::rules().map_err(build)?,
        mismatch,
        SeccompAction::Allow,
        arch,
    )
    .map_err(build)?;
    let enosys = SeccompFilter::new(
        allowlist::enosys(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(build)?;
    Ok(vec![
        enosys.try_into().map_err(build)?,
        allow.try_into().map_err(build)?,
    ])
}

#[cfg(test)]
// Raw system calls (and a fork) to show what the filter and the switch do.
#[allow(unsafe_code)]
mod tests {
    use super::*;

    fn errno_of(rc: libc::c_long) -> Option<i32> {
        (rc < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    #[test]
    fn on_a_thread_of_its_own_allowed_calls_work_and_others_get_eperm() {
        // Without TSYNC, on a thread of its own: the harness's other
        // threads stay unfiltered.
        std::thread::spawn(|| {
            apply_to_this_thread(SeccompMode::On).unwrap();
            // Allowed: time, a UDP socket, a file read.
            let mut now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `now` is a valid timespec to write.
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
            assert_eq!(rc, 0);
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            drop(udp);
            assert!(std::fs::read_to_string("/proc/self/stat").is_ok());
            // A new thread starts (clone3 refused with ENOSYS, clone with
            // CLONE_THREAD allowed).
            std::thread::spawn(|| ()).join().unwrap();
            // Denied: a packet socket, mount, ptrace.
            // SAFETY: plain system calls with no pointers the kernel keeps.
            let packet =
                unsafe { libc::syscall(libc::SYS_socket, libc::AF_PACKET, libc::SOCK_RAW, 0) };
            assert_eq!(errno_of(packet), Some(libc::EPERM));
            // SAFETY: as above; null pointers are refused before any use.
            let mount = unsafe { libc::syscall(libc::SYS_mount, 0, 0, 0, 0, 0) };
            assert_eq!(errno_of(mount), Some(libc::EPERM));
            // SAFETY: as above.
            let ptrace = unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0) };
            assert_eq!(errno_of(ptrace), Some(libc::EPERM));
            // A process: clone without CLONE_THREAD (fork).
            // SAFETY: as above; refused, so no child exists.
            let fork = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
            assert_eq!(errno_of(fork), Some(libc::EPERM));
            // bpf: a program load (BPF_PROG_LOAD) is not among the commands.
            // SAFETY: as above; the kernel reads no attribute for a refused call.
            let load = unsafe { libc::syscall(libc::SYS_bpf, 5, 0, 0) };
            assert_eq!(errno_of(load), Some(libc::EPERM));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [SeccompMode::On, SeccompMode::Log, SeccompMode::Off] {
            assert_eq!(m.to_string().parse(), Ok(m));
        }
        assert!(filters(SeccompMode::Off).unwrap().is_empty());
        assert_eq!(filters(SeccompMode::On).unwrap().len(), 2);
    }
}
