//! A reassembled datagram as the frame a handler understands, and the
//! handler's reply frame back as a datagram: handlers read Ethernet frames
//! (as the AF_XDP path gives them), so the slow path writes the datagram
//! behind an Ethernet, IP and UDP header (zero MACs, correct lengths and
//! checksums) and, after the handler rewrote it, reads the reply's
//! addresses, ports and payload back out.
//!
//! Invariant: pure (no I/O); a reply frame that does not parse as one
//! unfragmented UDP datagram is no reply (`None`), never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

use steer_core::packet::build::FrameBuilder;
use steer_core::packet::{ip_proto, parse, IpVersion};

/// The frame a handler gets for `payload`, sent from `from` to `to` (same
/// IP version).
pub(crate) fn frame_of(payload: &[u8], from: SocketAddr, to: SocketAddr) -> Vec<u8> {
    FrameBuilder::udp(from.ip(), to.ip(), from.port(), to.port())
        .payload(payload)
        .build()
}

/// A reply frame read back: who it is from and to, and where its payload
/// is in the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplyDatagram {
    pub(crate) from: SocketAddr,
    pub(crate) to: SocketAddr,
    pub(crate) payload: Range<usize>,
}

/// The UDP datagram in reply frame `frame`, `None` if it is not one.
pub(crate) fn reply_of(frame: &[u8]) -> Option<ReplyDatagram> {
    let layers = parse(frame).ok()??;
    if layers.fragment.is_some() || layers.protocol != ip_proto::UDP {
        return None;
    }
    let l3 = layers.l3_offset;
    let (src, dst) = match layers.ip {
        IpVersion::V4 => {
            let a = |at: usize| -> Option<IpAddr> {
                let b: [u8; 4] = frame.get(l3 + at..l3 + at + 4)?.try_into().ok()?;
                Some(IpAddr::V4(Ipv4Addr::from(b)))
            };
            (a(12)?, a(16)?)
        }
        IpVersion::V6 => {
            let a = |at: usize| -> Option<IpAddr> {
                let b: [u8; 16] = frame.get(l3 + at..l3 + at + 16)?.try_into().ok()?;
                Some(IpAddr::V6(Ipv6Addr::from(b)))
            };
            (a(8)?, a(24)?)
        }
    };
    let l4 = layers.l4_offset;
    let udp = frame.get(l4..l4 + 8)?;
    let sport = u16::from_be_bytes([udp[0], udp[1]]);
    let dport = u16::from_be_bytes([udp[2], udp[3]]);
    let end = layers.l3_end.min(frame.len());
    if end < l4 + 8 {
        return None;
    }
    Some(ReplyDatagram {
        from: SocketAddr::new(src, sport),
        to: SocketAddr::new(dst, dport),
        payload: l4 + 8..end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use steer_core::packet::echo::{echo_in_place, EchoMode};

    #[test]
    fn a_3000_byte_datagram_round_trips_through_the_echo_on_both_ip_versions() {
        let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        for (peer, local) in [
            ("10.0.0.2:4000", "10.0.0.1:9000"),
            ("[fd00::2]:4000", "[fd00::1]:9000"),
        ] {
            let (peer, local): (SocketAddr, SocketAddr) =
                (peer.parse().unwrap(), local.parse().unwrap());
            let mut frame = frame_of(&payload, peer, local);
            let len = echo_in_place(&mut frame, EchoMode::Plain).expect("a valid frame");
            let reply = reply_of(&frame[..len]).expect("a UDP reply");
            assert_eq!(reply.from, local);
            assert_eq!(reply.to, peer);
            assert_eq!(&frame[reply.payload], &payload[..]);
        }
    }

    #[test]
    fn what_is_not_one_udp_datagram_is_no_reply() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let tcp = FrameBuilder::tcp(a, b, 1, 2).build();
        assert_eq!(reply_of(&tcp), None);
        let frag = FrameBuilder::udp(a, b, 1, 2).fragment(0, true).build();
        assert_eq!(reply_of(&frag), None);
        let udp = FrameBuilder::udp(a, b, 1, 2).payload(b"x").build();
        for cut in 0..udp.len() - 1 {
            // Cut anywhere: no panic, and never a payload past the cut.
            if let Some(r) = reply_of(&udp[..cut]) {
                assert!(r.payload.end <= cut);
            }
        }
        assert_eq!(reply_of(&[]), None);
    }
}
