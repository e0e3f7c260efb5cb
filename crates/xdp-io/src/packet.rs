//! Minimal packet views for the data path's own needs: find the UDP 5-tuple
//! of an Ethernet frame (IPv4 or IPv6 without extension headers) and turn a
//! UDP packet around in place (swap MACs, addresses and ports, recompute the
//! UDP checksum). Bounds are checked once up front; no function panics on
//! short or malformed input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const ETH_LEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const UDP: u8 = 17;

/// Where the layers of a UDP frame are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpLayout {
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Offset of the UDP header.
    pub l4: usize,
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Parses an Ethernet + IPv4/IPv6 + UDP frame; `None` for anything else.
pub fn parse_udp(frame: &[u8]) -> Option<UdpLayout> {
    let ethertype = be16(frame, 12)?;
    let (v6, l4, src_ip, dst_ip) = match ethertype {
        ETH_P_IP => {
            let ihl = usize::from(*frame.get(ETH_LEN)? & 0x0f) * 4;
            if ihl < 20 || *frame.get(ETH_LEN + 9)? != UDP {
                return None;
            }
            let a: [u8; 4] = frame.get(ETH_LEN + 12..ETH_LEN + 16)?.try_into().ok()?;
            let b: [u8; 4] = frame.get(ETH_LEN + 16..ETH_LEN + 20)?.try_into().ok()?;
            (
                false,
                ETH_LEN + ihl,
                IpAddr::V4(Ipv4Addr::from(a)),
                IpAddr::V4(Ipv4Addr::from(b)),
            )
        }
        ETH_P_IPV6 => {
            if *frame.get(ETH_LEN + 6)? != UDP {
                return None;
            }
            let a: [u8; 16] = frame.get(ETH_LEN + 8..ETH_LEN + 24)?.try_into().ok()?;
            let b: [u8; 16] = frame.get(ETH_LEN + 24..ETH_LEN + 40)?.try_into().ok()?;
            (
                true,
                ETH_LEN + 40,
                IpAddr::V6(Ipv6Addr::from(a)),
                IpAddr::V6(Ipv6Addr::from(b)),
            )
        }
        _ => return None,
    };
    let sport = be16(frame, l4)?;
    let dport = be16(frame, l4 + 2)?;
    let udp_len = usize::from(be16(frame, l4 + 4)?);
    if udp_len < 8 || l4 + udp_len > frame.len() {
        return None;
    }
    Some(UdpLayout {
        v6,
        l4,
        src: SocketAddr::new(src_ip, sport),
        dst: SocketAddr::new(dst_ip, dport),
    })
}

fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The full UDP checksum of the UDP datagram at `l4` (pseudo-header included).
fn udp_checksum(frame: &[u8], layout: &UdpLayout, udp_len: usize) -> Option<u16> {
    let (addrs, seg) = if layout.v6 {
        (
            frame.get(ETH_LEN + 8..ETH_LEN + 40)?,
            frame.get(layout.l4..layout.l4 + udp_len)?,
        )
    } else {
        (
            frame.get(ETH_LEN + 12..ETH_LEN + 20)?,
            frame.get(layout.l4..layout.l4 + udp_len)?,
        )
    };
    // The checksum field itself (bytes 6..8) counts as zero.
    let acc = sum16(addrs, u32::from(UDP) + udp_len as u32);
    let c = fold(sum16(&seg[8..], sum16(&seg[..6], acc)));
    Some(if c == 0 { 0xffff } else { c })
}

/// Turns a UDP packet around in place: swaps MAC addresses, IP addresses and
/// ports, and writes a full UDP checksum (veth hands locally sent packets over
/// with only the pseudo-header sum, which the receiver would reject).
/// Returns `false` (leaving `frame` unchanged) when it is not a UDP packet.
///
/// ```
/// use xdp_io::packet::{parse_udp, reply_in_place, udp_checksum_ok};
/// // Ethernet + IPv4 + UDP 192.0.2.2:40000 -> 192.0.2.1:9000, payload "hi".
/// let mut f = vec![0u8; 44];
/// f[12..14].copy_from_slice(&[0x08, 0x00]);
/// f[14] = 0x45;
/// f[23] = 17;
/// f[26..30].copy_from_slice(&[192, 0, 2, 2]);
/// f[30..34].copy_from_slice(&[192, 0, 2, 1]);
/// f[34..36].copy_from_slice(&40000u16.to_be_bytes());
/// f[36..38].copy_from_slice(&9000u16.to_be_bytes());
/// f[38..40].copy_from_slice(&10u16.to_be_bytes());
/// f[42..44].copy_from_slice(b"hi");
/// assert!(reply_in_place(&mut f));
/// let l = parse_udp(&f).unwrap();
/// assert_eq!(l.dst, "192.0.2.2:40000".parse().unwrap());
/// assert!(udp_checksum_ok(&f));
/// ```
pub fn reply_in_place(frame: &mut [u8]) -> bool {
    let Some(layout) = parse_udp(frame) else {
        return false;
    };
    let Some(udp_len) = be16(frame, layout.l4 + 4).map(usize::from) else {
        return false;
    };
    for i in 0..6 {
        frame.swap(i, i + 6);
    }
    let (a, n) = if layout.v6 {
        (ETH_LEN + 8, 16)
    } else {
        (ETH_LEN + 12, 4)
    };
    for i in 0..n {
        frame.swap(a + i, a + n + i);
    }
    frame.swap(layout.l4, layout.l4 + 2);
    frame.swap(layout.l4 + 1, layout.l4 + 3);
    frame[layout.l4 + 6] = 0;
    frame[layout.l4 + 7] = 0;
    if let Some(c) = udp_checksum(frame, &layout, udp_len) {
        frame[layout.l4 + 6..layout.l4 + 8].copy_from_slice(&c.to_be_bytes());
    }
    true
}

/// Verifies the UDP checksum of a frame (0 is valid over IPv4).
pub fn udp_checksum_ok(frame: &[u8]) -> bool {
    let Some(layout) = parse_udp(frame) else {
        return false;
    };
    let Some(udp_len) = be16(frame, layout.l4 + 4).map(usize::from) else {
        return false;
    };
    let Some(stored) = be16(frame, layout.l4 + 6) else {
        return false;
    };
    if stored == 0 {
        return !layout.v6;
    }
    let mut copy = frame.to_vec();
    copy[layout.l4 + 6] = 0;
    copy[layout.l4 + 7] = 0;
    udp_checksum(&copy, &layout, udp_len) == Some(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_frame() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 4];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&32u16.to_be_bytes());
        f[22] = 64;
        f[23] = UDP;
        f[26..30].copy_from_slice(&[192, 0, 2, 2]);
        f[30..34].copy_from_slice(&[192, 0, 2, 1]);
        f[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f[36..38].copy_from_slice(&9000u16.to_be_bytes());
        f[38..40].copy_from_slice(&12u16.to_be_bytes());
        f[42..46].copy_from_slice(b"ping");
        f
    }

    #[test]
    fn parses_and_turns_around_ipv4() {
        let mut f = v4_frame();
        let l = parse_udp(&f).unwrap();
        assert_eq!(l.dst, "192.0.2.1:9000".parse().unwrap());
        assert!(reply_in_place(&mut f));
        let r = parse_udp(&f).unwrap();
        assert_eq!(r.src, l.dst);
        assert_eq!(r.dst, l.src);
        assert_eq!(&f[..6], &[2, 0, 0, 0, 0, 1]);
        assert!(udp_checksum_ok(&f));
        f[43] ^= 1;
        assert!(!udp_checksum_ok(&f));
    }

    #[test]
    fn known_checksum() {
        // Checksum of the reply computed independently by hand-summing words.
        let mut f = v4_frame();
        reply_in_place(&mut f);
        let words: u32 = [
            0xc000u32, 0x0201, 0xc000, 0x0202, 17, 12, 9000, 40000, 12, 0x7069, 0x6e67,
        ]
        .iter()
        .sum();
        let folded = !(((words & 0xffff) + (words >> 16)) as u16);
        assert_eq!(u16::from_be_bytes([f[40], f[41]]), folded);
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for len in 0..60 {
            let mut f = v4_frame();
            f.truncate(len);
            let _ = parse_udp(&f);
            let _ = reply_in_place(&mut f);
        }
        assert!(parse_udp(&[0xff; 100]).is_none());
    }
}
