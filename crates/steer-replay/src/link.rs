//! A capture frame's link layer turned into the Ethernet frame steer-core's
//! parser (the dispatcher's) reads, so the replay finds each frame's flow
//! the way the engine would.
//!
//! Link types: Ethernet (as it is), raw IP (`RAW`, `IPV4`, `IPV6` and the
//! BSDs' 12 and 14), Linux cooked capture (`tcpdump -i any`: SLL, SLL2) and
//! BSD loopback (`NULL`, `LOOP`). Any other is refused with
//! [`UnsupportedLink`].
//!
//! Invariant: the Ethernet frame written is the frame's payload behind a
//! 14-byte header (or the frame itself, for Ethernet): never longer than
//! the frame plus 14 bytes.

use pcap_parser::Linktype;

/// Bytes of the Ethernet header put in front of a non-Ethernet payload.
pub const ETHERNET_HEADER: usize = 14;

/// A link type the replay does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsupported link type {0}: expected Ethernet, raw IP, Linux cooked (SLL, SLL2) \
     or loopback; re-capture with `tcpdump -i <interface>`"
)]
pub struct UnsupportedLink(pub i32);

/// Writes `data`, a frame of link type `link`, into `out` as an Ethernet
/// frame. `Ok(false)`: the frame carries no IP (or is too short to say),
/// and `out` is left as it was or cleared.
///
/// ```
/// use steer_replay::capture::Linktype;
/// use steer_replay::link::to_ethernet;
/// let mut out = Vec::new();
/// // Raw IP: an IPv4 header's first byte says version 4.
/// assert_eq!(to_ethernet(Linktype::RAW, &[0x45, 0, 0, 20], &mut out), Ok(true));
/// assert_eq!(&out[12..14], &[0x08, 0x00]);
/// assert_eq!(to_ethernet(Linktype::RAW, &[0x10], &mut out), Ok(false));
/// ```
pub fn to_ethernet(
    link: Linktype,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, UnsupportedLink> {
    const IPV4: u16 = 0x0800;
    const IPV6: u16 = 0x86DD;
    let by_version = |ip: &[u8]| match ip.first().map(|b| b >> 4) {
        Some(4) => Some(IPV4),
        Some(6) => Some(IPV6),
        _ => None,
    };
    let (ethertype, payload) = match link {
        Linktype::ETHERNET => {
            out.clear();
            out.extend_from_slice(data);
            return Ok(true);
        }
        Linktype::RAW | Linktype::IPV4 | Linktype::IPV6 | Linktype(12) | Linktype(14) => {
            (by_version(data), data)
        }
        Linktype::LINUX_SLL => match (data.get(14..16), data.get(16..)) {
            (Some(p), Some(rest)) => (Some(u16::from_be_bytes([p[0], p[1]])), rest),
            _ => return Ok(false),
        },
        Linktype::LINUX_SLL2 => match (data.get(0..2), data.get(20..)) {
            (Some(p), Some(rest)) => (Some(u16::from_be_bytes([p[0], p[1]])), rest),
            _ => return Ok(false),
        },
        Linktype::NULL | Linktype::LOOP => match data.get(4..) {
            Some(rest) => (by_version(rest), rest),
            None => return Ok(false),
        },
        other => return Err(UnsupportedLink(other.0)),
    };
    let Some(ethertype) = ethertype else {
        return Ok(false);
    };
    out.clear();
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1]);
    out.extend_from_slice(&ethertype.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use steer_core::flow::flow_key;
    use steer_core::packet::build::FrameBuilder;

    #[test]
    fn link_layers_become_ethernet_frames() {
        let eth = FrameBuilder::udp(
            Ipv4Addr::new(10, 0, 0, 1).into(),
            Ipv4Addr::new(10, 0, 0, 2).into(),
            5000,
            53,
        )
        .build();
        let ip = &eth[14..];
        let want = flow_key(&eth).unwrap().unwrap();
        let mut out = Vec::new();
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&0x0800u16.to_be_bytes());
        sll.extend_from_slice(ip);
        let mut sll2 = 0x0800u16.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(ip);
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(ip);
        for (link, data) in [
            (Linktype::ETHERNET, eth.as_slice()),
            (Linktype::RAW, ip),
            (Linktype::IPV4, ip),
            (Linktype::LINUX_SLL, &sll),
            (Linktype::LINUX_SLL2, &sll2),
            (Linktype::NULL, &null),
        ] {
            assert_eq!(to_ethernet(link, data, &mut out), Ok(true), "{link}");
            assert_eq!(flow_key(&out).unwrap(), Some(want), "{link}");
            assert!(out.len() <= data.len() + ETHERNET_HEADER);
        }
        assert_eq!(to_ethernet(Linktype::RAW, &[0x10], &mut out), Ok(false));
        assert_eq!(
            to_ethernet(Linktype::LINUX_SLL, &[0; 4], &mut out),
            Ok(false)
        );
        assert_eq!(
            to_ethernet(Linktype(147), ip, &mut out),
            Err(UnsupportedLink(147))
        );
    }
}
