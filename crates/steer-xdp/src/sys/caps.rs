//! The capabilities AF_XDP and XDP need, read from the calling thread's
//! `CapEff` in procfs.

use std::{fs, io};

use crate::error::{Result, XdpError};

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
}
