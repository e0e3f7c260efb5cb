//! The L4 UDP echo: turns a received UDP datagram into its reply in place
//! (MACs, IP addresses and ports swapped, TTL reset, checksums fixed), and
//! the sockperf-compatible reply rule.
//!
//! Invariants: a frame is rewritten only after it parsed completely (all
//! reads and writes are inside checked views); on any error the frame is
//! untouched. The reply keeps every byte of the payload except, in sockperf
//! mode, the client flag, and its IP and UDP checksums are computed afresh.
//!
//! sockperf (3.7) puts a header at the start of the UDP payload: a 64-bit
//! sequence number, then a flags word whose low byte is payload byte 9:
//! bit 0 "from a client", bit 1 "pong requested", bit 2 "warm-up". Its
//! server answers only client messages that request a pong and are not
//! warm-up, clearing the client bit; a client ignores replies whose client
//! bit is still set. [`echo_in_place`] with [`EchoMode::Sockperf`] does the
//! same.

use std::fmt;

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{
    ip_proto, parse, EthernetFrame, IpVersion, Ipv4Packet, Ipv6Packet, ParseError, UdpPacket,
};

/// How to answer a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EchoMode {
    /// Echo every datagram unchanged.
    #[default]
    Plain,
    /// Answer like `sockperf server`: only pong requests, client flag cleared.
    Sockperf,
}

/// Byte of the UDP payload holding sockperf's flags.
pub const SOCKPERF_FLAGS_BYTE: usize = 9;
/// sockperf flag: the message comes from a client.
pub const SOCKPERF_CLIENT: u8 = 1;
/// sockperf flag: the client wants a reply.
pub const SOCKPERF_PONG_REQUEST: u8 = 2;
/// sockperf flag: a warm-up message (never answered).
pub const SOCKPERF_WARMUP: u8 = 4;

/// The TTL / hop limit of replies.
pub const REPLY_TTL: u8 = 64;

/// Why a frame got no reply. The frame is left untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoReply {
    /// Not IPv4/IPv6 (ARP and friends should have gone to the kernel).
    NotIp,
    /// The frame did not parse.
    Malformed(ParseError),
    /// An IP packet that is not UDP.
    NotUdp,
    /// A fragment (the echo does not reassemble).
    Fragment,
    /// sockperf mode: a message that asks for no reply (no pong request,
    /// warm-up, or not from a client). Not an error: it was consumed.
    NotRequested,
}

impl fmt::Display for NoReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotIp => f.write_str("not an IP packet"),
            Self::Malformed(e) => write!(f, "malformed: {e:?}"),
            Self::NotUdp => f.write_str("not UDP"),
            Self::Fragment => f.write_str("an IP fragment"),
            Self::NotRequested => f.write_str("no reply requested"),
        }
    }
}

/// Rewrites the Ethernet/IP/UDP datagram in `frame` into its reply.
/// Returns the reply's length (the frame's IP datagram end: Ethernet padding
/// after it is cut).
///
/// ```
/// use steer_core::packet::echo::{echo_in_place, EchoMode};
/// use steer_core::packet::build::FrameBuilder;
/// let (a, b) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
/// let mut frame = FrameBuilder::udp(a, b, 40000, 7).payload(b"hi").build();
/// let len = echo_in_place(&mut frame, EchoMode::Plain).unwrap();
/// let reply = steer_core::packet::parse(&frame[..len]).unwrap().unwrap();
/// assert_eq!(reply.ports(&frame).unwrap(), Some((7, 40000)));
/// ```
pub fn echo_in_place(frame: &mut [u8], mode: EchoMode) -> Result<usize, NoReply> {
    let layers = parse(frame)
        .map_err(NoReply::Malformed)?
        .ok_or(NoReply::NotIp)?;
    if layers.fragment.is_some() {
        return Err(NoReply::Fragment);
    }
    if layers.protocol != ip_proto::UDP {
        return Err(NoReply::NotUdp);
    }
    let end = layers.l3_end;
    // Checked views over exactly the reply's bytes.
    let udp = UdpPacket::new_checked(&frame[layers.l4_offset..end]).map_err(NoReply::Malformed)?;
    if mode == EchoMode::Sockperf {
        let flags = *udp
            .payload()
            .get(SOCKPERF_FLAGS_BYTE)
            .ok_or(NoReply::NotRequested)?;
        if flags & SOCKPERF_CLIENT == 0
            || flags & SOCKPERF_PONG_REQUEST == 0
            || flags & SOCKPERF_WARMUP != 0
        {
            return Err(NoReply::NotRequested);
        }
    }

    EthernetFrame::new_checked(&mut frame[..])
        .map_err(NoReply::Malformed)?
        .swap_addrs();
    let reply_addrs = match layers.ip {
        IpVersion::V4 => {
            let mut ip = Ipv4Packet::new_checked(&mut frame[layers.l3_offset..end])
                .map_err(NoReply::Malformed)?;
            ip.swap_addrs();
            ip.set_ttl(REPLY_TTL);
            ip.fill_checksum();
            ReplyAddrs::V4(ip.src_addr(), ip.dst_addr())
        }
        IpVersion::V6 => {
            let mut ip = Ipv6Packet::new_checked(&mut frame[layers.l3_offset..end])
                .map_err(NoReply::Malformed)?;
            ip.swap_addrs();
            ip.set_hop_limit(REPLY_TTL);
            ReplyAddrs::V6(ip.src_addr(), ip.dst_addr())
        }
    };
    let mut udp =
        UdpPacket::new_checked(&mut frame[layers.l4_offset..end]).map_err(NoReply::Malformed)?;
    udp.swap_ports();
    if mode == EchoMode::Sockperf {
        udp.payload_mut()[SOCKPERF_FLAGS_BYTE] &= !SOCKPERF_CLIENT;
    }
    // Computed in full, not carried over: a request from a local socket
    // (veth, loopback) may carry only the partial checksum of a transmit
    // offload, which would be wrong on the reply.
    match reply_addrs {
        ReplyAddrs::V4(s, d) => udp.fill_checksum_v4(s, d),
        ReplyAddrs::V6(s, d) => udp.fill_checksum_v6(s, d),
    }
    Ok(end)
}

/// The reply's (source, destination) addresses, for the UDP checksum.
enum ReplyAddrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::build::FrameBuilder;
    use crate::packet::verify_udp_frame;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn v4(a: [u8; 4]) -> IpAddr {
        Ipv4Addr::from(a).into()
    }

    fn v6(a: [u8; 16]) -> IpAddr {
        Ipv6Addr::from(a).into()
    }

    fn sockperf_payload(flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 14];
        p[..8].copy_from_slice(&42u64.to_le_bytes());
        p[SOCKPERF_FLAGS_BYTE] = flags;
        p[12] = 14;
        p
    }

    #[test]
    fn tagged_frames_are_answered_with_their_tags() {
        use crate::packet::ethernet::ethertype::{QINQ, VLAN};
        for tags in [vec![(VLAN, 7)], vec![(QINQ, 100), (VLAN, 7)]] {
            for (a, b) in [
                (v4([192, 0, 2, 2]), v4([192, 0, 2, 1])),
                (v6([0xfd; 16]), v6([0xfe; 16])),
            ] {
                let mut builder = FrameBuilder::udp(a, b, 40000, 9000).payload(b"tagged");
                for &(tpid, vid) in &tags {
                    builder = builder.vlan(tpid, vid);
                }
                let mut f = builder.build();
                let before = f.clone();
                let n = echo_in_place(&mut f, EchoMode::Plain).unwrap();
                // The tags (TPID and TCI, 4 bytes each after the MACs) stay.
                let tag_bytes = 12..12 + 4 * tags.len();
                assert_eq!(f[tag_bytes.clone()], before[tag_bytes]);
                let l = crate::packet::parse(&f[..n]).unwrap().unwrap();
                assert_eq!(l.vlan_tags as usize, tags.len());
                assert_eq!(l.ports(&f).unwrap(), Some((9000, 40000)));
                assert_eq!(f[..6], before[6..12], "MACs swapped");
                assert!(verify_udp_frame(&f[..n]), "{tags:?}");
            }
        }
    }

    #[test]
    fn v4_reply_swaps_everything_and_keeps_checksums_valid() {
        let mut f = FrameBuilder::udp(v4([192, 0, 2, 2]), v4([192, 0, 2, 1]), 40000, 9000)
            .payload(b"hello")
            .build();
        let before = f.clone();
        let n = echo_in_place(&mut f, EchoMode::Plain).unwrap();
        assert_eq!(n, f.len());
        assert_eq!(&f[0..6], &before[6..12]);
        assert_eq!(&f[6..12], &before[0..6]);
        let l = parse(&f).unwrap().unwrap();
        let ip = Ipv4Packet::new_checked(&f[l.l3_offset..l.l3_end]).unwrap();
        assert_eq!(ip.src_addr(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(ip.dst_addr(), Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(ip.ttl(), REPLY_TTL);
        assert_eq!(l.ports(&f).unwrap(), Some((9000, 40000)));
        assert!(verify_udp_frame(&f));
        assert_eq!(&f[l.l3_end - 5..l.l3_end], b"hello");
    }

    #[test]
    fn v6_reply_swaps_addresses_and_ports() {
        let a: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let b: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let mut f = FrameBuilder::udp(a.into(), b.into(), 40001, 9000)
            .payload(b"v6")
            .build();
        echo_in_place(&mut f, EchoMode::Plain).unwrap();
        let l = parse(&f).unwrap().unwrap();
        let ip = Ipv6Packet::new_checked(&f[l.l3_offset..l.l3_end]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (b, a));
        assert_eq!(ip.hop_limit(), REPLY_TTL);
        assert_eq!(l.ports(&f).unwrap(), Some((9000, 40001)));
        assert!(verify_udp_frame(&f));
    }

    #[test]
    fn sockperf_pong_request_is_answered_with_the_client_bit_cleared() {
        for ipv6 in [false, true] {
            let payload = sockperf_payload(SOCKPERF_CLIENT | SOCKPERF_PONG_REQUEST);
            let mut f = if ipv6 {
                FrameBuilder::udp(v6([0x20; 16]), v6([0x21; 16]), 1, 2)
            } else {
                FrameBuilder::udp(v4([10, 0, 0, 1]), v4([10, 0, 0, 2]), 1, 2)
            }
            .payload(&payload)
            .build();
            echo_in_place(&mut f, EchoMode::Sockperf).unwrap();
            let l = parse(&f).unwrap().unwrap();
            let r = l.payload_range(&f).unwrap();
            assert_eq!(f[r.start + SOCKPERF_FLAGS_BYTE], SOCKPERF_PONG_REQUEST);
            assert_eq!(&f[r.start..r.start + 8], &42u64.to_le_bytes());
            assert!(verify_udp_frame(&f), "ipv6={ipv6}");
        }
    }

    #[test]
    fn sockperf_messages_without_pong_request_get_no_reply_and_stay_untouched() {
        for flags in [
            SOCKPERF_CLIENT,
            SOCKPERF_PONG_REQUEST,
            SOCKPERF_CLIENT | SOCKPERF_PONG_REQUEST | SOCKPERF_WARMUP,
        ] {
            let mut f = FrameBuilder::udp(v4([10, 0, 0, 1]), v4([10, 0, 0, 2]), 1, 2)
                .payload(&sockperf_payload(flags))
                .build();
            let before = f.clone();
            assert_eq!(
                echo_in_place(&mut f, EchoMode::Sockperf),
                Err(NoReply::NotRequested)
            );
            assert_eq!(f, before);
        }
        // Too short to carry the header.
        let mut f = FrameBuilder::udp(v4([10, 0, 0, 1]), v4([10, 0, 0, 2]), 1, 2)
            .payload(b"short")
            .build();
        assert_eq!(
            echo_in_place(&mut f, EchoMode::Sockperf),
            Err(NoReply::NotRequested)
        );
    }

    #[test]
    fn a_request_with_an_offload_partial_checksum_gets_a_valid_reply() {
        // A local sender with tx checksum offload leaves only the
        // pseudo-header sum in the field: the reply must not inherit it.
        for mode in [EchoMode::Plain, EchoMode::Sockperf] {
            let mut f = FrameBuilder::udp(v4([10, 0, 0, 1]), v4([10, 0, 0, 2]), 5, 6)
                .payload(&sockperf_payload(SOCKPERF_CLIENT | SOCKPERF_PONG_REQUEST))
                .build();
            let l = parse(&f).unwrap().unwrap();
            f[l.l4_offset + 6] ^= 0x5a;
            assert!(!verify_udp_frame(&f));
            echo_in_place(&mut f, mode).unwrap();
            assert!(verify_udp_frame(&f), "{mode:?}");
        }
    }

    #[test]
    fn errors_leave_the_frame_untouched() {
        let tcp = FrameBuilder::tcp(v4([10, 0, 0, 1]), v4([10, 0, 0, 2]), 1, 2).build();
        let arp = {
            let mut a = vec![0xffu8; 6];
            a.extend_from_slice(&[0, 1, 2, 3, 4, 5, 0x08, 0x06]);
            a.extend_from_slice(&[0; 28]);
            a
        };
        let udp = FrameBuilder::udp(v4([10, 0, 0, 1]), v4([10, 0, 0, 2]), 1, 2)
            .payload(b"abcdef")
            .build();
        type Expect = fn(&NoReply) -> bool;
        let cases: Vec<(Vec<u8>, Expect)> = vec![
            (tcp, |e| *e == NoReply::NotUdp),
            (arp, |e| *e == NoReply::NotIp),
            (udp[..30].to_vec(), |e| matches!(e, NoReply::Malformed(_))),
        ];
        for (mut f, expected) in cases {
            let before = f.clone();
            let e = echo_in_place(&mut f, EchoMode::Plain).unwrap_err();
            assert!(expected(&e), "{e}");
            assert_eq!(f, before);
        }
        // Every truncation of a valid frame: an error or a reply, never a panic.
        for cut in 0..udp.len() {
            let mut f = udp[..cut].to_vec();
            let _ = echo_in_place(&mut f, EchoMode::Sockperf);
        }
    }
}
