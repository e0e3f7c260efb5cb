//! Replies on a flow without a received frame to rewrite: the reply headers
//! (Ethernet with any VLAN tags, IP, UDP) are taken once from the flow's
//! first packet, turned around, and stamped in front of each payload the
//! application sends, with lengths and checksums filled in.
//!
//! A flow whose first datagram came through the engine's slow path (the
//! kernel reassembled it) has no Ethernet addresses to turn around: its
//! template is marked [`ReplyTemplate::through_kernel`], and its replies
//! leave through the kernel's UDP socket on the owned port, addressed by
//! [`ReplyTemplate::addrs`].
//!
//! Invariant: a template is only built from a frame that parsed as a whole
//! UDP datagram, so `udp_offset + 8 <= headers.len()` and the IP header sits
//! at `ip_offset`; `write` checks the room of the destination buffer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use steer_core::packet::{parse, IpVersion, Ipv4Packet, Ipv6Packet, UdpPacket};

use crate::echo::{echo_in_place, EchoMode};

/// The turned-around headers of a flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplyTemplate {
    headers: Vec<u8>,
    ip: IpVersion,
    ip_offset: usize,
    udp_offset: usize,
    /// Built from a datagram the kernel reassembled: replies go through
    /// the kernel's socket.
    kernel: bool,
}

/// The reply does not fit the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge;

impl ReplyTemplate {
    /// The reply headers for the UDP datagram in `frame` (`None` if it is
    /// not one).
    pub(crate) fn from_request(frame: &[u8]) -> Option<Self> {
        let layers = parse(frame).ok()??;
        let header_end = layers.l4_offset + 8;
        let mut headers = frame.get(..layers.l3_end)?.to_vec();
        echo_in_place(&mut headers, EchoMode::Plain).ok()?;
        headers.truncate(header_end);
        Some(Self {
            headers,
            ip: layers.ip,
            ip_offset: layers.l3_offset,
            udp_offset: layers.l4_offset,
            kernel: false,
        })
    }

    /// The same template, marked as built from a datagram the kernel
    /// reassembled (`from_kernel`): its replies must leave through the
    /// kernel's socket (the frame's Ethernet addresses are not real).
    pub(crate) fn through_kernel(mut self, from_kernel: bool) -> Self {
        self.kernel = from_kernel;
        self
    }

    /// Whether replies must leave through the kernel's socket.
    pub(crate) fn is_through_kernel(&self) -> bool {
        self.kernel
    }

    /// The reply's source (the owned address and port) and destination
    /// (the peer).
    pub(crate) fn addrs(&self) -> Option<(SocketAddr, SocketAddr)> {
        let h = &self.headers;
        let at = |off: usize, n: usize| h.get(self.ip_offset + off..self.ip_offset + off + n);
        let (src, dst): (IpAddr, IpAddr) = match self.ip {
            IpVersion::V4 => {
                let s: [u8; 4] = at(12, 4)?.try_into().ok()?;
                let d: [u8; 4] = at(16, 4)?.try_into().ok()?;
                (Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into())
            }
            IpVersion::V6 => {
                let s: [u8; 16] = at(8, 16)?.try_into().ok()?;
                let d: [u8; 16] = at(24, 16)?.try_into().ok()?;
                (Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into())
            }
        };
        let udp = h.get(self.udp_offset..self.udp_offset + 4)?;
        let sport = u16::from_be_bytes([udp[0], udp[1]]);
        let dport = u16::from_be_bytes([udp[2], udp[3]]);
        Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport)))
    }

    /// The length of the frame carrying a payload of `payload` bytes.
    pub(crate) fn len_for(&self, payload: usize) -> usize {
        self.headers.len() + payload
    }

    /// The length of the IP datagram carrying a payload of `payload`
    /// bytes (what the link's MTU bounds).
    pub(crate) fn ip_len_for(&self, payload: usize) -> usize {
        self.headers.len() - self.ip_offset + payload
    }

    /// Writes headers + `payload` into `buf`; returns the frame length.
    pub(crate) fn write(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, TooLarge> {
        let len = self.headers.len() + payload.len();
        let udp_len = u16::try_from(8 + payload.len()).map_err(|_| TooLarge)?;
        if len > buf.len() {
            return Err(TooLarge);
        }
        let (head, rest) = buf.split_at_mut(self.headers.len());
        head.copy_from_slice(&self.headers);
        rest[..payload.len()].copy_from_slice(payload);
        let frame = &mut buf[..len];
        // The template still carries the first request's lengths: write this
        // reply's before the checked views look at them.
        let (len_at, ip_len) = match self.ip {
            IpVersion::V4 => (self.ip_offset + 2, len - self.ip_offset),
            IpVersion::V6 => (self.ip_offset + 4, len - self.ip_offset - 40),
        };
        let ip_len = u16::try_from(ip_len).map_err(|_| TooLarge)?;
        frame[len_at..len_at + 2].copy_from_slice(&ip_len.to_be_bytes());
        let udp_len_at = self.udp_offset + 4;
        frame[udp_len_at..udp_len_at + 2].copy_from_slice(&udp_len.to_be_bytes());
        let (src, dst): (IpAddr, IpAddr) = match self.ip {
            IpVersion::V4 => {
                let mut ip =
                    Ipv4Packet::new_checked(&mut frame[self.ip_offset..]).map_err(|_| TooLarge)?;
                ip.fill_checksum();
                (ip.src_addr().into(), ip.dst_addr().into())
            }
            IpVersion::V6 => {
                let ip = Ipv6Packet::new_checked(&frame[self.ip_offset..]).map_err(|_| TooLarge)?;
                (ip.src_addr().into(), ip.dst_addr().into())
            }
        };
        let mut udp =
            UdpPacket::new_checked(&mut frame[self.udp_offset..]).map_err(|_| TooLarge)?;
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => udp.fill_checksum_v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => udp.fill_checksum_v6(s, d),
            _ => return Err(TooLarge),
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use steer_core::packet::build::FrameBuilder;
    use steer_core::packet::ethernet::ethertype;

    fn reply_of(request: Vec<u8>, payload: &[u8]) -> Vec<u8> {
        let t = ReplyTemplate::from_request(&request).unwrap();
        let mut buf = vec![0u8; 2048];
        let n = t.write(&mut buf, payload).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn a_reply_equals_the_echo_of_a_request_with_that_payload() {
        let a: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
        let b: IpAddr = Ipv4Addr::new(10, 0, 0, 2).into();
        let c: IpAddr = "2001:db8::1".parse::<Ipv6Addr>().unwrap().into();
        let d: IpAddr = "2001:db8::2".parse::<Ipv6Addr>().unwrap().into();
        for (src, dst, vlan) in [(a, b, false), (c, d, false), (a, b, true), (c, d, true)] {
            let build = |p: &[u8]| {
                let mut f = FrameBuilder::udp(src, dst, 4000, 53).payload(p);
                if vlan {
                    f = f.vlan(ethertype::VLAN, 42);
                }
                f.build()
            };
            let first = build(b"the first request");
            for payload in [&b""[..], b"x", &[9u8; 1400]] {
                let mut expected = build(payload);
                echo_in_place(&mut expected, EchoMode::Plain).unwrap();
                assert_eq!(
                    reply_of(first.clone(), payload),
                    expected,
                    "{src} vlan {vlan}"
                );
            }
        }
    }

    #[test]
    fn the_reply_addresses_are_the_request_turned_around() {
        for (peer, local) in [
            ("10.0.0.2:4000", "10.0.0.1:53"),
            ("[2001:db8::2]:4000", "[2001:db8::1]:53"),
        ] {
            let (peer, local): (SocketAddr, SocketAddr) =
                (peer.parse().unwrap(), local.parse().unwrap());
            let f = FrameBuilder::udp(peer.ip(), local.ip(), peer.port(), local.port()).build();
            let t = ReplyTemplate::from_request(&f).unwrap();
            assert_eq!(t.addrs(), Some((local, peer)));
            let ip_header = if local.is_ipv4() { 20 } else { 40 };
            assert_eq!(t.ip_len_for(3000), ip_header + 8 + 3000);
            assert!(!t.is_through_kernel());
            assert!(t.through_kernel(true).is_through_kernel());
        }
    }

    #[test]
    fn too_large_payloads_and_non_udp_frames_are_refused() {
        let a: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
        let f = FrameBuilder::udp(a, a, 1, 2).build();
        let t = ReplyTemplate::from_request(&f).unwrap();
        assert_eq!(t.write(&mut [0u8; 100], &[0; 80]), Err(TooLarge));
        assert!(ReplyTemplate::from_request(&FrameBuilder::tcp(a, a, 1, 2).build()).is_none());
        assert!(ReplyTemplate::from_request(&f[..20]).is_none());
    }
}
