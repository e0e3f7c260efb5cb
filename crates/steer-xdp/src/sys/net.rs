//! Network devices and sockets: interface lookup, rx queue counts
//! (`SIOCETHTOOL`), socket options and the zero-length `sendto`/`recvfrom`
//! kicks that wake the kernel for an AF_XDP socket's rings.

use std::{ffi::CString, fs, io, os::fd::RawFd};

use crate::error::{Result, XdpError};

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
#[doc(alias = "ETHTOOL_GCHANNELS")]
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
    let ch = ethtool_channels(name).ok()?;
    Some(ch[5] + ch[8])
}

/// `ETHTOOL_GCHANNELS`: `struct ethtool_channels` as nine u32s: cmd,
/// max_rx, max_tx, max_other, max_combined, rx_count, tx_count,
/// other_count, combined_count.
#[doc(alias = "ETHTOOL_GCHANNELS")]
pub(crate) fn ethtool_channels(name: &str) -> io::Result<[u32; 9]> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    let mut ch = [0u32; 9];
    ch[0] = ETHTOOL_GCHANNELS;
    // SAFETY: `ch` is a whole struct ethtool_channels (nine u32s), all that
    // ETHTOOL_GCHANNELS reads and writes.
    unsafe { ethtool(name, ch.as_mut_ptr().cast()) }?;
    Ok(ch)
}

/// `ETHTOOL_GRXFHINDIR`: the RSS indirection table (the rx queue of each
/// entry), as `ethtool -x` shows it.
#[doc(alias = "ETHTOOL_GRXFHINDIR")]
pub(crate) fn ethtool_rxfh_indir(name: &str) -> io::Result<Vec<u32>> {
    const ETHTOOL_GRXFHINDIR: u32 = 0x38;
    // struct ethtool_rxfh_indir: cmd, size, then `size` ring indices. Asked
    // with size 0, the kernel answers with the table's size.
    let mut head = [ETHTOOL_GRXFHINDIR, 0u32];
    // SAFETY: `head` is the struct's fixed part; with size 0 the kernel
    // reads and writes only that.
    unsafe { ethtool(name, head.as_mut_ptr().cast()) }?;
    let size = head[1] as usize;
    if size == 0 {
        return Ok(Vec::new());
    }
    let mut buf = vec![0u32; 2 + size];
    buf[0] = ETHTOOL_GRXFHINDIR;
    buf[1] = head[1];
    // SAFETY: `buf` holds the fixed part and `size` indices, as many as the
    // size it names; the kernel writes no more.
    unsafe { ethtool(name, buf.as_mut_ptr().cast()) }?;
    buf.drain(..2);
    Ok(buf)
}

/// `ETHTOOL_GDRVINFO`: the name of the device's driver (`ethtool -i`).
#[doc(alias = "ETHTOOL_GDRVINFO")]
pub(crate) fn ethtool_driver(name: &str) -> io::Result<String> {
    const ETHTOOL_GDRVINFO: u32 = 0x03;
    // struct ethtool_drvinfo: cmd, then driver[32], version[32],
    // fw_version[32], bus_info[32], erom_version[32], reserved2[12] and five
    // u32s: 196 bytes.
    let mut info = [0u32; 49];
    info[0] = ETHTOOL_GDRVINFO;
    // SAFETY: `info` is a whole struct ethtool_drvinfo (196 bytes), all that
    // ETHTOOL_GDRVINFO copies in and out.
    unsafe { ethtool(name, info.as_mut_ptr().cast()) }?;
    let bytes: Vec<u8> = info[1..9].iter().flat_map(|w| w.to_ne_bytes()).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// The size of `struct ethtool_rxnfc` (with its `ethtool_rx_flow_spec`, no
/// `rule_locs`) on x86_64 and aarch64.
pub(crate) const ETHTOOL_RXNFC_LEN: usize = 192;

/// A `SIOCETHTOOL` ioctl with a `struct ethtool_rxnfc` command (the ntuple
/// rule commands `ETHTOOL_SRXCLSRL{INS,DEL}`), given as its bytes.
pub(crate) fn ethtool_rxnfc(name: &str, nfc: &mut [u8; ETHTOOL_RXNFC_LEN]) -> io::Result<()> {
    // SAFETY: `nfc` is a whole struct ethtool_rxnfc, all the kernel reads
    // and writes for the rule commands (they use no rule_locs); the kernel
    // copies it in and out, so its alignment does not matter.
    unsafe { ethtool(name, nfc.as_mut_ptr().cast()) }
}

/// A socket for interface ioctls and an `ifreq` naming `name` (zeroed
/// otherwise, so the name is NUL-terminated); ENODEV for a name too long
/// to be an interface's.
fn ifreq_for(name: &str) -> io::Result<(std::os::fd::OwnedFd, libc::ifreq)> {
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
    Ok((sock, ifr))
}

/// A `SIOCETHTOOL` ioctl on `name` with the command structure at `data`.
///
/// # Safety
/// `data` must point to a command structure (its first u32 the command)
/// valid for reads and writes of as many bytes as the kernel's handler of
/// that command copies in and out, and live for the call.
unsafe fn ethtool(name: &str, data: *mut libc::c_void) -> io::Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    let (sock, mut ifr) = ifreq_for(name)?;
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

/// `SIOCGIFMTU`: the MTU of interface `name` (in the calling thread's
/// network namespace).
#[doc(alias = "SIOCGIFMTU")]
pub(crate) fn mtu(name: &str) -> io::Result<u32> {
    const SIOCGIFMTU: libc::c_ulong = 0x8921;
    if name.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    let (sock, mut ifr) = ifreq_for(name)?;
    // SAFETY: `ifr` names the interface (NUL-terminated: zeroed and shorter
    // than IF_NAMESIZE); SIOCGIFMTU writes the MTU into its union, which
    // lives on the stack for the call.
    syscall!(ioctl(
        std::os::fd::AsRawFd::as_raw_fd(&sock),
        SIOCGIFMTU,
        &mut ifr as *mut libc::ifreq
    ))?;
    // SAFETY: SIOCGIFMTU succeeded, so the union holds `ifru_mtu`.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    Ok(u32::try_from(mtu).unwrap_or(0))
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

/// Attaches the socket-filter program `prog` to socket `sock`
/// (`SO_ATTACH_BPF`), replacing any filter it had.
pub(crate) fn attach_socket_filter(
    sock: std::os::fd::BorrowedFd<'_>,
    prog: std::os::fd::BorrowedFd<'_>,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    /// asm-generic/socket.h (x86_64, aarch64); not in the libc crate.
    const SO_ATTACH_BPF: i32 = 50;
    setsockopt_int(
        sock.as_raw_fd(),
        libc::SOL_SOCKET,
        SO_ATTACH_BPF,
        prog.as_raw_fd(),
    )
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
    fn loopback_has_a_queue() {
        assert!(rx_queue_count("lo").unwrap() >= 1);
    }
}
