//! The syscalls steer-bench makes outside the kernel echo's socket loop, in
//! one place (the only module besides `kernel_echo` where `unsafe` is
//! allowed): CLOCK_MONOTONIC in nanoseconds (the clock `bpf_ktime_get_ns`
//! reads, so send times taken here and arrival times stamped in XDP
//! compare), absolute sleeps on it, pinning threads and children, the
//! current CPU, the clock tick, SCHED_IDLE, root, a file lock, `setns`, `kill` and an
//! AF_PACKET sender for frames no UDP socket would send (spoofed sources).

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Now, in nanoseconds of CLOCK_MONOTONIC.
#[inline]
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (returns at once when past).
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

/// Runs the calling thread under SCHED_IDLE: it gets only CPU time no
/// other thread wants, and any thread that wakes preempts it at once (a
/// measurement's own sampler then never delays what it measures).
pub fn sched_idle() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Lets this thread's timed sleeps end within a microsecond (the default
/// timer slack is 50 us).
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// A CPU set of `cpus`.
fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data, valid all zeroes.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET writes one bit inside `set` (it ignores CPUs past
        // the set's size).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// Pins task `tid` (0: the calling thread) to `cpus`.
pub fn pin_task(tid: i32, cpus: &[usize]) -> io::Result<()> {
    let set = cpu_set(cpus);
    // SAFETY: `set` is a valid cpu_set_t of the size passed; the call only
    // reads it.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPUs online on the machine (whatever the calling thread's affinity).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1)
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> io::Result<()> {
    pin_task(0, &[cpu])
}

/// Gives `cmd`'s child the default action for SIGINT and SIGTERM before it
/// execs: a bench started in the background (`cmd &`, where the shell sets
/// SIGINT to ignored and children inherit it) can still stop its servers
/// with SIGINT.
pub fn default_stop_signals_in_child(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only
    // calls signal(2), which is async-signal-safe, with constants.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM] {
                if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Makes `cmd`'s child pin itself to `cpus` before it execs.
pub fn pin_child(cmd: &mut Command, cpus: &[usize]) {
    let set = cpu_set(cpus);
    // SAFETY: the closure runs in the forked child before exec and only calls
    // sched_setaffinity on a value it owns (async-signal-safe, no allocation).
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The CPU the calling thread runs on.
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).unwrap_or(u32::MAX)
}

/// Ticks per second of /proc/stat.
pub fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Takes an exclusive `flock` on `fd`: `Ok(true)` at once, `Ok(false)` when
/// another process holds it and `wait` is false.
pub fn lock_exclusive(fd: BorrowedFd<'_>, wait: bool) -> io::Result<bool> {
    let op = if wait {
        libc::LOCK_EX
    } else {
        libc::LOCK_EX | libc::LOCK_NB
    };
    // SAFETY: flock on a descriptor the caller keeps open for the call.
    if unsafe { libc::flock(fd.as_raw_fd(), op) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if !wait && e.kind() == io::ErrorKind::WouldBlock {
        return Ok(false);
    }
    Err(e)
}

/// Moves the calling thread into the network namespace open as `ns`.
pub fn enter_net_ns(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `ns` is an open descriptor; setns switches only the calling
    // thread (and fails cleanly on a descriptor that is not a namespace).
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends SIGINT to process `pid`.
pub fn interrupt(pid: u32) -> io::Result<()> {
    signal(pid, libc::SIGINT)
}

/// Sends SIGTERM to process `pid`.
pub fn terminate(pid: u32) -> io::Result<()> {
    signal(pid, libc::SIGTERM)
}

/// Sends `sig` to process `pid` (a pid beyond `pid_t` is invalid input,
/// never a signal to a process group).
fn signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill has no memory preconditions.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An AF_PACKET socket that sends whole Ethernet frames out of one
/// interface (of the calling thread's network namespace).
#[derive(Debug)]
pub struct PacketSender {
    fd: std::os::fd::OwnedFd,
    ifindex: i32,
}

impl PacketSender {
    /// A sender on interface `ifindex`.
    pub fn open(ifindex: u32) -> io::Result<Self> {
        // SAFETY: plain socket(2) call; the descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let ifindex =
            i32::try_from(ifindex).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(Self { fd, ifindex })
    }

    /// Sends `frame` (Ethernet header included) as it is.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        if frame.len() < 14 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = self.ifindex;
        addr.sll_halen = 6;
        addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        // SAFETY: `frame` and `addr` outlive the call and the lengths are theirs.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_sleeps() {
        let a = mono_ns();
        sleep_until(a + 2_000_000);
        let b = mono_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
        sleep_until(0);
    }

    #[test]
    fn signals_reach_a_child_and_never_a_group() {
        for bad in [0, u32::MAX] {
            let e = terminate(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "pid {bad}");
        }
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        interrupt(child.id()).unwrap();
        let st = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGINT));
    }
}
