//! The system calls a set-up steer process makes, as seccomp rules: the
//! running engine (AF_XDP rings, workers, dispatchers, the observer, the
//! health and hotplug watchers, flow delivery's tokio runtimes), the
//! proxy's backend sockets, and kernel-socket steering (map updates, the
//! sweeper, detaching at stop).
//!
//! Found by running `steer echo`, `steer proxy`, `steer tcp-echo` and
//! `steer rfs` under `--seccomp log` (the kernel logs each call outside the
//! list as `audit: type=1326 ... syscall=N`) and under `strace -f` from the
//! point the filter goes on, through traffic, `steer stats`, a metrics
//! scrape, CPU hotplug and SIGTERM.
//!
//! Invariants: nothing here creates a packet socket, loads a program,
//! attaches one, mounts, traces another process, starts a process (clone
//! only with CLONE_THREAD; clone3, whose flags a filter cannot read, passes
//! here but a filter of its own answers it ENOSYS, so the C library falls
//! back to clone) or changes ids or
//! capabilities. Where an argument narrows a call (socket's domain, bpf's
//! command, ioctl's request, prctl's option), only the values steer uses
//! pass.

use std::collections::BTreeMap;

use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};

/// A rule set: a system call number and the argument rules one of which
/// must hold (none: any arguments).
pub(super) type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// Calls allowed with any arguments.
const ANY_ARGS: &[libc::c_long] = &[
    // Descriptors, files (the stats JSON, /proc and /sys reads), pipes.
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_close,
    libc::SYS_lseek,
    libc::SYS_fcntl,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_pipe2,
    libc::SYS_openat,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_getdents64,
    libc::SYS_readlinkat,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_unlinkat,
    libc::SYS_ftruncate,
    // libxdp detaching a program from its dispatcher: the bpffs lock and
    // check, the pins removed (unlinkat). Not exercised on the test
    // machine, where libxdp attaches without a dispatcher.
    libc::SYS_flock,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_getcwd,
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_mincore,
    libc::SYS_membarrier,
    // Threads, scheduling, signals.
    libc::SYS_futex,
    libc::SYS_clone3, // answered ENOSYS by the filter of `enosys`
    libc::SYS_set_robust_list,
    libc::SYS_get_robust_list,
    libc::SYS_rseq,
    libc::SYS_set_tid_address,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_getattr,
    libc::SYS_sched_setattr,
    libc::SYS_sched_getparam,
    libc::SYS_sched_getscheduler,
    libc::SYS_getpriority,
    libc::SYS_setpriority,
    libc::SYS_getcpu,
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_gettid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getresuid,
    libc::SYS_getresgid,
    libc::SYS_capget,
    libc::SYS_tgkill,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_getrandom,
    libc::SYS_getrusage,
    libc::SYS_prlimit64,
    libc::SYS_sysinfo,
    libc::SYS_uname,
    // Waiting: mio, tokio, the sleeping workers.
    libc::SYS_ppoll,
    libc::SYS_pselect6,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_eventfd2,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    // Time.
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_gettimeofday,
    // Sockets already open (AF_XDP rings' kicks, the stats and metrics
    // sockets, netlink, the proxy's backends, tcp-echo's connections).
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept4,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_shutdown,
];

/// Calls allowed with any arguments on x86_64 only (the older calls
/// aarch64 never had).
#[cfg(target_arch = "x86_64")]
const ANY_ARGS_X86_64: &[libc::c_long] = &[
    libc::SYS_open,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_access,
    libc::SYS_readlink,
    libc::SYS_unlink,
    libc::SYS_poll,
    libc::SYS_select,
    libc::SYS_epoll_wait,
    libc::SYS_arch_prctl,
    libc::SYS_accept,
];

#[cfg(not(target_arch = "x86_64"))]
const ANY_ARGS_X86_64: &[libc::c_long] = &[];

/// Socket domains steer opens after set-up: the proxy's backends and
/// tcp-echo's (inet), netlink (hotplug, detaching), unix (the C library's
/// name service; the stats socket is open already).
const SOCKET_DOMAINS: &[libc::c_int] = &[
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

/// bpf commands on maps and links already held: lookups, updates and
/// deletes (the desired-CPU and owned-port maps, counters), walks (the
/// RFS program's flows), object info and the by-id and pinned look-ups
/// libxdp makes to detach its dispatcher at stop, and link detach. Seen
/// in the runs: lookups, updates, deletes and walks; the rest is what
/// detaching needs in the cases the runs did not reach.
const BPF_COMMANDS: &[u32] = &[
    1,  // BPF_MAP_LOOKUP_ELEM
    2,  // BPF_MAP_UPDATE_ELEM
    3,  // BPF_MAP_DELETE_ELEM
    4,  // BPF_MAP_GET_NEXT_KEY
    24, // BPF_MAP_LOOKUP_BATCH (the RFS sweeper's walk of its flows)
    7,  // BPF_OBJ_GET (libxdp's pinned dispatcher, at detach)
    13, // BPF_PROG_GET_FD_BY_ID
    14, // BPF_MAP_GET_FD_BY_ID
    15, // BPF_OBJ_GET_INFO_BY_FD
    34, // BPF_LINK_DETACH
];

/// ioctl requests: non-blocking and close-on-exec flags, a terminal's
/// questions (is stdout one, its size), the interface index and name, and
/// ethtool (the ntuple hook's rules, ring and channel reads).
const IOCTL_REQUESTS: &[u64] = &[
    libc::FIONBIO,
    libc::FIOCLEX,
    libc::FIONCLEX,
    libc::TCGETS,
    libc::TIOCGWINSZ,
    libc::SIOCGIFINDEX,
    libc::SIOCGIFNAME,
    libc::SIOCGIFFLAGS,
    libc::SIOCETHTOOL,
];

/// prctl options: thread names, the workers' timer slack, reading the
/// bounding set and keep-caps flag, naming anonymous mappings.
const PRCTL_OPTIONS: &[libc::c_int] = &[
    libc::PR_SET_NAME,
    libc::PR_GET_NAME,
    libc::PR_SET_TIMERSLACK,
    libc::PR_GET_TIMERSLACK,
    libc::PR_CAPBSET_READ,
    libc::PR_GET_KEEPCAPS,
    libc::PR_GET_NO_NEW_PRIVS,
    libc::PR_SET_VMA,
];

/// The allowlist.
pub(super) fn rules() -> Result<Rules, seccompiler::BackendError> {
    let mut rules: Rules = ANY_ARGS
        .iter()
        .chain(ANY_ARGS_X86_64)
        .map(|&nr| (nr, Vec::new()))
        .collect();
    let one_of = |arg: u8, values: &mut dyn Iterator<Item = u64>| {
        values
            .map(|v| {
                SeccompRule::new(vec![SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    v,
                )?])
            })
            .collect::<Result<Vec<_>, _>>()
    };
    rules.insert(
        libc::SYS_socket,
        one_of(0, &mut SOCKET_DOMAINS.iter().map(|&d| d as u64))?,
    );
    rules.insert(
        libc::SYS_bpf,
        one_of(0, &mut BPF_COMMANDS.iter().map(|&c| u64::from(c)))?,
    );
    rules.insert(
        libc::SYS_ioctl,
        one_of(1, &mut IOCTL_REQUESTS.iter().copied())?,
    );
    rules.insert(
        libc::SYS_prctl,
        one_of(0, &mut PRCTL_OPTIONS.iter().map(|&o| o as u64))?,
    );
    // Threads only: a clone without CLONE_THREAD would start a process.
    let thread = libc::CLONE_THREAD as u64;
    rules.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(thread),
            thread,
        )?])?],
    );
    Ok(rules)
}

/// The calls a filter of their own answers with ENOSYS: clone3, so that
/// the C library starts threads with clone, whose flags the allowlist can
/// read.
pub(super) fn enosys() -> Rules {
    [(libc::SYS_clone3, Vec::new())].into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_that_starts_processes_loads_programs_or_changes_ids_is_listed() {
        let rules = rules().unwrap();
        for nr in [
            libc::SYS_execve,
            libc::SYS_ptrace,
            libc::SYS_mount,
            libc::SYS_setuid,
            libc::SYS_setresuid,
            libc::SYS_capset,
            libc::SYS_kill,
            libc::SYS_seccomp,
        ] {
            assert!(!rules.contains_key(&nr), "syscall {nr} is allowed");
        }
        assert!(!rules[&libc::SYS_bpf].is_empty(), "bpf must be narrowed");
        assert!(
            !rules[&libc::SYS_socket].is_empty(),
            "socket must be narrowed"
        );
    }
}
