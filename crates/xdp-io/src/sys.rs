//! The OS boundary that xsk-rs and libxdp do not cover: privilege checks,
//! interface lookup, rx queue counts, socket options. System calls go through
//! one `syscall!` macro that turns -1 into `io::Error`; the rest of the crate
//! sees only safe functions.

use std::{ffi::CString, fs, io, os::fd::RawFd};

use crate::error::{Result, XdpError};

/// Calls a libc function, mapping a -1 return to `io::Error::last_os_error`.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: the caller passes arguments valid for this libc call; see the
        // SAFETY comment at each use.
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

/// Capability bit numbers (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// The effective capability set of the calling thread (capabilities are
/// per thread): `CapEff` in /proc/thread-self/status.
fn effective_caps() -> io::Result<u64> {
    let status = fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| fs::read_to_string("/proc/self/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| io::Error::other("no CapEff line in /proc/self/status"))
}

/// Checks that this process may load XDP programs and create AF_XDP sockets:
/// CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (or CAP_SYS_ADMIN for the latter).
pub fn check_privileges() -> Result<()> {
    let caps = effective_caps().map_err(|e| XdpError::io("reading capabilities", e))?;
    missing_privileges(caps).map_or(Ok(()), |missing| Err(XdpError::Privileges { missing }))
}

/// The capabilities missing from `caps`, or `None` when all are present.
fn missing_privileges(caps: u64) -> Option<String> {
    let has = |bit: u32| caps & (1u64 << bit) != 0;
    let mut missing = Vec::new();
    if !has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    if !has(CAP_NET_RAW) {
        missing.push("CAP_NET_RAW");
    }
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_BPF");
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// The index of interface `name`, or [`XdpError::UnknownInterface`].
pub fn ifindex(name: &str) -> Result<u32> {
    let unknown = || XdpError::UnknownInterface {
        name: name.to_owned(),
    };
    if name.is_empty() || name.len() >= libc::IF_NAMESIZE {
        return Err(unknown());
    }
    let c = CString::new(name).map_err(|_| unknown())?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(unknown())
    } else {
        Ok(idx)
    }
}

/// The number of rx queues of `name`: from ethtool's channel counts (works in
/// any network namespace), else from the `rx-N` entries in sysfs when sysfs
/// shows this namespace's device, else 1.
pub fn rx_queue_count(name: &str) -> Result<u32> {
    let idx = ifindex(name)?;
    if let Some(n) = ethtool_rx_channels(name).filter(|&n| n > 0) {
        return Ok(n);
    }
    let sysfs_idx = fs::read_to_string(format!("/sys/class/net/{name}/ifindex")).ok();
    if sysfs_idx.and_then(|s| s.trim().parse::<u32>().ok()) != Some(idx) {
        return Ok(1);
    }
    let dir = format!("/sys/class/net/{name}/queues");
    let entries =
        fs::read_dir(&dir).map_err(|e| XdpError::io("reading /sys/class/net/*/queues", e))?;
    let n = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// `ETHTOOL_GCHANNELS`: rx + combined channel count, `None` when unsupported.
fn ethtool_rx_channels(name: &str) -> Option<u32> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    // struct ethtool_channels: cmd, max_rx, max_tx, max_other, max_combined,
    // rx_count, tx_count, other_count, combined_count.
    let mut ch = [0u32; 9];
    ch[0] = ETHTOOL_GCHANNELS;
    ethtool(name, ch.as_mut_ptr().cast()).ok()?;
    Some(ch[5] + ch[8])
}

/// A `SIOCETHTOOL` ioctl on `name` with the command structure at `data`.
pub(crate) fn ethtool(name: &str, data: *mut libc::c_void) -> io::Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    if name.len() >= libc::IF_NAMESIZE {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: plain socket(2) call with constant arguments.
    let fd = syscall!(socket(
        libc::AF_INET,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
        0
    ))?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = data.cast();
    // SAFETY: `ifr` names the interface (NUL-terminated: zeroed and shorter
    // than IF_NAMESIZE) and points at the caller's ethtool command structure,
    // which the caller keeps alive and correctly sized for its command.
    syscall!(ioctl(
        std::os::fd::AsRawFd::as_raw_fd(&sock),
        SIOCETHTOOL,
        &mut ifr as *mut libc::ifreq
    ))?;
    Ok(())
}

/// The number of possible CPUs (highest id in /sys/devices/system/cpu/possible
/// plus one): the number of values a per-CPU map lookup writes.
pub(crate) fn possible_cpus() -> io::Result<usize> {
    let list = fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_possible(&list).ok_or_else(|| io::Error::other(format!("bad cpu list {list:?}")))
}

fn parse_possible(list: &str) -> Option<usize> {
    list.trim()
        .split([',', '-'])
        .map(|n| n.trim().parse::<usize>().ok())
        .try_fold(0usize, |max, n| n.map(|n| max.max(n)))
        .map(|max| max + 1)
}

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    let len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `value` lives on the stack for the call and `len` is its size.
    syscall!(setsockopt(
        fd,
        level,
        name,
        (&value as *const i32).cast(),
        len
    ))?;
    Ok(())
}

/// `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` and `SO_BUSY_POLL_BUDGET` on one socket.
pub(crate) fn set_busy_poll(fd: RawFd, usecs: u32, budget: u32) -> io::Result<()> {
    const SO_PREFER_BUSY_POLL: i32 = 69;
    const SO_BUSY_POLL_BUDGET: i32 = 70;
    let clamp = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
    setsockopt_int(fd, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, 1)?;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, clamp(usecs))?;
    setsockopt_int(fd, libc::SOL_SOCKET, SO_BUSY_POLL_BUDGET, clamp(budget))
}

/// A `sendto(fd, NULL, 0, MSG_DONTWAIT)` kick so the kernel processes the tx ring.
pub(crate) fn kick_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length send with null buffer and address is the documented
    // AF_XDP tx wakeup.
    match syscall!(sendto(
        fd,
        std::ptr::null(),
        0,
        libc::MSG_DONTWAIT,
        std::ptr::null(),
        0
    )) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// A `recvfrom(fd, NULL, 0, MSG_DONTWAIT)` kick so the kernel refills from
/// the fill ring (needed when the fill ring reports need-wakeup).
pub(crate) fn kick_rx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length receive with null buffer and address is a valid
    // AF_XDP wakeup that copies nothing.
    match syscall!(recvfrom(
        fd,
        std::ptr::null_mut(),
        0,
        libc::MSG_DONTWAIT,
        std::ptr::null_mut(),
        std::ptr::null_mut()
    )) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN | libc::EBUSY | libc::ENETDOWN)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_privileges_names_each_capability() {
        assert_eq!(
            missing_privileges(0).as_deref(),
            Some("CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF")
        );
        let all = (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW) | (1 << CAP_BPF);
        assert_eq!(missing_privileges(all), None);
        let sys_admin = (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW) | (1 << CAP_SYS_ADMIN);
        assert_eq!(missing_privileges(sys_admin), None);
    }

    #[test]
    fn unknown_interface_is_typed() {
        let err = ifindex("nosuchif0xyz").unwrap_err();
        assert!(matches!(err, XdpError::UnknownInterface { .. }), "{err}");
        assert!(err.to_string().contains("ip link show"));
        assert!(matches!(
            ifindex("a/very/long/interface/name"),
            Err(XdpError::UnknownInterface { .. })
        ));
    }

    #[test]
    fn possible_cpu_list() {
        assert_eq!(parse_possible("0-3\n"), Some(4));
        assert_eq!(parse_possible("0,2-5,7"), Some(8));
        assert_eq!(parse_possible("0"), Some(1));
        assert_eq!(parse_possible("x"), None);
        assert!(possible_cpus().unwrap() >= 1);
    }

    #[test]
    fn loopback_has_a_queue() {
        assert!(rx_queue_count("lo").unwrap() >= 1);
    }
}
