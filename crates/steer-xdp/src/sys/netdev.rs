//! The kernel's `netdev` generic-netlink family (Linux >= 6.3), asked one
//! question: what a device's driver offers XDP programs (its XDP features
//! and the receive metadata its kfuncs give, e.g. the RSS hash). One
//! request and one answer on a fresh `NETLINK_GENERIC` socket: resolve the
//! family's id (`CTRL_CMD_GETFAMILY`), then `NETDEV_CMD_DEV_GET` for the
//! ifindex. Written out by hand: no netlink crate knows this family, and a
//! generic one would still need its messages spelled out.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NETDEV_A_DEV_XDP_RX_METADATA_FEATURES: u16 = 5;
/// `struct nlmsghdr` + `struct genlmsghdr`.
const HEADERS: usize = 16 + 4;
/// Attribute type bits that are flags, not the type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// What `NETDEV_CMD_DEV_GET` says about a device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NetdevXdp {
    /// `enum netdev_xdp_act` bits.
    pub(crate) xdp_features: u64,
    /// `enum netdev_xdp_rx_metadata` bits.
    pub(crate) rx_metadata: u64,
}

/// Asks the `netdev` family about `ifindex`.
pub(crate) fn netdev_xdp(ifindex: u32) -> io::Result<NetdevXdp> {
    // SAFETY: plain socket(2) call with constant arguments.
    let fd = syscall!(socket(
        libc::AF_NETLINK,
        libc::SOCK_RAW | libc::SOCK_CLOEXEC,
        libc::NETLINK_GENERIC
    ))?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut name = b"netdev\0".to_vec();
    let family = request(&sock, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, |m| {
        attr(m, CTRL_ATTR_FAMILY_NAME, &mut name)
    })?;
    let id = find(&family, CTRL_ATTR_FAMILY_ID)
        .and_then(|v| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?)))
        .ok_or_else(|| io::Error::other("netdev family without an id"))?;
    let dev = request(&sock, id, NETDEV_CMD_DEV_GET, 1, |m| {
        attr(m, NETDEV_A_DEV_IFINDEX, &mut ifindex.to_ne_bytes().to_vec())
    })?;
    let u64_of = |t| find(&dev, t).map_or(0, ne_u64);
    Ok(NetdevXdp {
        xdp_features: u64_of(NETDEV_A_DEV_XDP_FEATURES),
        rx_metadata: u64_of(NETDEV_A_DEV_XDP_RX_METADATA_FEATURES),
    })
}

/// A native-endian integer of up to 8 bytes (netlink sends u32 or u64).
fn ne_u64(v: &[u8]) -> u64 {
    match v.len() {
        4 => u64::from(u32::from_ne_bytes([v[0], v[1], v[2], v[3]])),
        8 => u64::from_ne_bytes([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]]),
        _ => 0,
    }
}

/// Appends one attribute (padded to 4 bytes).
fn attr(msg: &mut Vec<u8>, kind: u16, value: &mut Vec<u8>) {
    let len = 4 + value.len();
    msg.extend_from_slice(&(len as u16).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.append(value);
    msg.resize(msg.len().next_multiple_of(4), 0);
}

/// The value of the first attribute of type `kind` in `attrs`.
fn find(attrs: &[u8], kind: u16) -> Option<&[u8]> {
    let mut rest = attrs;
    while rest.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        let t = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > rest.len() {
            return None;
        }
        if t == kind {
            return Some(&rest[4..len]);
        }
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    None
}

/// Sends one generic-netlink request (family `family`, command `cmd`, the
/// attributes `add` appends) and returns the attributes of the answer.
fn request(
    sock: &OwnedFd,
    family: u16,
    cmd: u8,
    version: u8,
    add: impl FnOnce(&mut Vec<u8>),
) -> io::Result<Vec<u8>> {
    let mut msg = vec![0u8; HEADERS];
    add(&mut msg);
    let len = msg.len() as u32;
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    msg[4..6].copy_from_slice(&family.to_ne_bytes());
    msg[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    msg[8..12].copy_from_slice(&1u32.to_ne_bytes()); // sequence
    msg[16] = cmd;
    msg[17] = version;
    // SAFETY: `msg` is valid for `msg.len()` bytes for the call; a null
    // address sends to the kernel (the socket is unbound and unconnected,
    // so the kernel is its default peer).
    syscall!(send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0))?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the call.
    let n = syscall!(recv(
        sock.as_raw_fd(),
        buf.as_mut_ptr().cast(),
        buf.len(),
        0
    ))? as usize;
    let answer = buf.get(..n).unwrap_or_default();
    if answer.len() < 16 {
        return Err(io::Error::other("short netlink answer"));
    }
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    if kind == NLMSG_ERROR {
        let code = answer
            .get(16..20)
            .map_or(0, |e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
        return Err(io::Error::from_raw_os_error(-code));
    }
    let len = (u32::from_ne_bytes([answer[0], answer[1], answer[2], answer[3]]) as usize)
        .min(answer.len());
    Ok(answer.get(HEADERS..len).unwrap_or_default().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip() {
        let mut m = Vec::new();
        attr(&mut m, 2, &mut b"netdev\0".to_vec());
        attr(&mut m, 5, &mut 6u64.to_ne_bytes().to_vec());
        assert_eq!(m.len() % 4, 0);
        assert_eq!(find(&m, 2), Some(&b"netdev\0"[..]));
        assert_eq!(find(&m, 5).map(ne_u64), Some(6));
        assert_eq!(find(&m, 9), None);
        // A length running past the buffer ends the walk.
        assert_eq!(find(&[40, 0, 1, 0], 1), None);
    }

    #[test]
    fn loopback_offers_no_receive_hash() {
        // Loopback has no native XDP, so no XDP metadata kfuncs; asking is
        // still no error (Linux >= 6.3).
        let lo = crate::sys::ifindex("lo").unwrap();
        let info = netdev_xdp(lo).expect("the netdev netlink family answers");
        assert_eq!(info.rx_metadata, 0, "{info:?}");
    }
}
